"""The counts file format: word counts as a sorted Parquet file, written and read.

A vocabulary of a corpus too large for one machine: word counting (DESIGN.md §2) is the part
that grows with the data, and counts add up. So each machine counts its shards into a counts
file (:func:`count_to_file`, GPU or CPU counter), the files are merged by a streaming k-way
merge (:func:`merge_counts`: bounded memory, exact 64-bit sums), and one GPU learns the merges
from the result (:func:`train_from_counts_file`). The merges equal those of training on the
whole corpus at once (DESIGN.md §3: training depends only on the word counts). The same idea as
sentencepiece's ``word\\tcount`` input.

File format (``torch_gpubpe.word_counts`` version 1), a Parquet file:

* columns ``word`` (Parquet BYTE_ARRAY, Arrow ``large_binary``: the word's bytes) and ``count``
  (``uint64``, ≥ 1);
* one row per distinct word, rows sorted by the word bytes compared as unsigned bytes
  (``memcmp`` order; shorter first on a common prefix), no word twice, no nulls;
* Parquet key-value metadata ``torch_gpubpe.word_counts``: JSON with ``format``
  (``"torch_gpubpe.word_counts"``), ``version`` (1), ``pre_tokenizer`` (the word rule's name,
  :data:`torch_gpubpe.core.vocab.PRE_TOKENIZER`; files of different rules do not merge) and, written
  when the file is complete, ``num_words``, ``total_count`` (sum of ``count``),
  ``num_documents``, ``corpus_bytes`` (UTF-8 bytes counted) and ``num_shards`` (count files
  merged into it; 1 for a counted shard). Integers are exact JSON integers.

Any Parquet reader reads it (``pyarrow.parquet.read_table(path)``); sorted files merge in one
pass with memory bounded by ``fan_in × batch_rows`` rows.

Example::

    >>> import os, tempfile
    >>> from torch_gpubpe.training.counts_file import count_to_file, merge_counts, read_counts
    >>> d = tempfile.mkdtemp()
    >>> a = count_to_file(["a b a"], os.path.join(d, "a.parquet"), count_on="cpu")
    >>> b = count_to_file(["b b"], os.path.join(d, "b.parquet"), count_on="cpu")
    >>> m = merge_counts([a, b], os.path.join(d, "all.parquet"))
    >>> sorted(read_counts(m).to_dict().items())
    [(b' a', 1), (b' b', 2), (b'a', 1), (b'b', 1)]
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from torch_gpubpe.core.vocab import PRE_TOKENIZER
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.word_counts import LEN_MASK, WordCounts, empty_counts, u64_at

FORMAT_NAME = "torch_gpubpe.word_counts"
FORMAT_VERSION = 1
META_KEY = FORMAT_NAME
DEFAULT_BATCH_ROWS = 1 << 16     # rows read from each input per step of the merge
DEFAULT_FAN_IN = 64              # inputs merged at once; more go through intermediate files
ROW_GROUP_ROWS = 1 << 20         # rows per Parquet row group of the files written
U64_LIMIT = 1 << 64     # counts are uint64: a sum reaching this is refused

PathLike = str | os.PathLike


def arrow():
    """``(pyarrow, pyarrow.compute, pyarrow.parquet)``, imported on first use (pyarrow is a slow
    import that most of the package never needs)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    return pa, pc, pq


def counts_schema(pre_tokenizer: str):
    """The Arrow schema of a counts file (``word``, ``count``), its metadata naming
    ``pre_tokenizer``."""
    pa, _, _ = arrow()
    head = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "pre_tokenizer": pre_tokenizer}
    return pa.schema([("word", pa.large_binary()), ("count", pa.uint64())],
                     metadata={META_KEY: json.dumps(head)})


# -- WordCounts <-> Arrow -----------------------------------------------------------------------
def words_array(data: np.ndarray, offsets: np.ndarray):
    """``large_binary`` array over ``data`` (uint8) and ``offsets`` (int64), no copy."""
    pa, _, _ = arrow()
    data = np.ascontiguousarray(data, np.uint8)
    offsets = np.ascontiguousarray(offsets, np.int64)
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def packed(words) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8, offsets int64 from 0) of a binary/string Arrow array without nulls."""
    pa, pc, _ = arrow()
    if isinstance(words, pa.ChunkedArray):
        words = words.combine_chunks() if words.num_chunks != 1 else words.chunk(0)
    if not pa.types.is_large_binary(words.type):
        words = pc.cast(words, pa.large_binary())
    n = len(words)
    bufs = words.buffers()
    offs = np.frombuffer(bufs[1], np.int64, n + 1, words.offset * 8) if n else np.zeros(1, np.int64)
    base, end = int(offs[0]), int(offs[-1])
    data = (np.frombuffer(bufs[2], np.uint8, end - base, base) if end > base
            else np.zeros(0, np.uint8))
    return data, offs - base


def sort_order(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Indices (int64, shape ``(num_words,)``) that sort the words ``data[offsets[k]:
    offsets[k + 1]]`` in the counts file's order (unsigned bytes, ``memcmp``; shorter first on
    a common prefix: Arrow's binary order), equal words in input order.

    Faster than Arrow's ``sort_indices`` on binary (≈3 µs per word, one thread): a stable
    numpy sort of each word's first 8 bytes as a big-endian ``uint64`` (zero-padded), then the
    words that tie there by (bytes 8–15, length up to 17), then the few that still tie (the
    same first 16 bytes, both longer) by Arrow's binary sort.
    """
    pa, pc, _ = arrow()
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets) - 1
    if n <= 1:
        return np.arange(max(n, 0), dtype=np.int64)
    lens = np.diff(offsets)
    padded = np.zeros(len(data) + 24, np.uint8)
    padded[: len(data)] = data
    starts = offsets[:-1]
    k0 = (u64_at(padded, starts) & LEN_MASK[np.minimum(lens, 8)]).byteswap()
    order = np.argsort(k0, kind="stable")
    s0 = k0[order]
    eq = s0[1:] == s0[:-1]
    if not eq.any():
        return order
    tie = np.zeros(n, bool)
    tie[1:] |= eq
    tie[:-1] |= eq
    pos = np.flatnonzero(tie)
    sub = order[pos]
    k1 = (u64_at(padded, starts[sub] + 8)
          & LEN_MASK[np.clip(lens[sub] - 8, 0, 8)]).byteswap()
    ln = np.minimum(lens[sub], 17)
    o2 = np.lexsort((ln, k1, k0[sub]))          # (stable: ties keep the input order)
    sub, k1, ln = sub[o2], k1[o2], ln[o2]
    same = (k0[sub][1:] == k0[sub][:-1]) & (k1[1:] == k1[:-1]) & (ln[1:] == 17) & (ln[:-1] == 17)
    if same.any():
        # same first 16 bytes, both longer: Arrow's binary sort of these words (the prefix
        # order above groups them, so their positions take them sorted)
        t2 = np.zeros(len(sub), bool)
        t2[1:] |= same
        t2[:-1] |= same
        p2 = np.flatnonzero(t2)
        items = sub[p2]
        arr = words_array(data, offsets).take(pa.array(items))
        sub[p2] = items[pc.sort_indices(arr).to_numpy()]
    order[pos] = sub
    return order


def to_table(wc, pre_tokenizer: str = PRE_TOKENIZER):
    """:class:`~torch_gpubpe.training.word_counts.WordCounts` → an Arrow table of the counts-file schema,
    rows sorted by word bytes.

    Raises:
        InputError: a word occurs twice, or a count is 0.
    """
    pa, pc, _ = arrow()
    words = words_array(wc.data, wc.offsets())
    counts = pa.array(np.ascontiguousarray(wc.counts, np.uint64))
    order = pa.array(sort_order(wc.data, wc.offsets()))
    words, counts = words.take(order), counts.take(order)
    if len(words) > 1 and pc.any(pc.equal(words[1:], words[:-1])).as_py():
        raise InputError("the word counts hold a word twice")
    if len(counts) and pc.min(counts).as_py() < 1:
        raise InputError("the word counts hold a count of 0")
    return pa.Table.from_arrays([words, counts], schema=counts_schema(pre_tokenizer))


def exact_sum(counts: np.ndarray) -> int:
    """Exact sum of uint64 ``counts`` (numpy would wrap at 2^64)."""
    c = np.asarray(counts, np.uint64)
    lo = int(np.sum(c & np.uint64(0xFFFFFFFF), dtype=np.uint64))   # < 2^32 × 2^32 rows: no wrap
    hi = int(np.sum(c >> np.uint64(32), dtype=np.uint64))
    return lo + (hi << 32)


def write_counts(wc, path: PathLike, *, num_documents: int = 0, corpus_bytes: int = 0,
                 pre_tokenizer: str = PRE_TOKENIZER, compression: str = "zstd") -> Path:
    """Write word counts to a counts file (format: module docstring).

    Args:
        wc: :class:`~torch_gpubpe.training.word_counts.WordCounts` (any order; each word once, counts ≥ 1).
        path: the ``.parquet`` file to write (replaced if it exists; written to a temporary
            name beside it first, so a killed run leaves no half file under ``path``).
        num_documents, corpus_bytes: what was counted (stored in the metadata).
        compression: the Parquet codec (count_budget's temporary runs: ``"lz4"``, faster).
    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    Raises:
        InputError: a word occurs twice or a count is 0.
    """
    table = to_table(wc, pre_tokenizer)
    meta = {"num_words": table.num_rows, "total_count": exact_sum(wc.counts),
            "num_documents": int(num_documents), "corpus_bytes": int(corpus_bytes),
            "num_shards": 1}
    return write_table_atomic(table, Path(path), meta, compression)


def write_long_counts(wc, path: PathLike, *, compression: str = "lz4",
                      row_group_bytes: int = 1 << 20) -> Path:
    """:func:`write_counts` for few, long words (count_budget's spilled one-word documents of
    MBs): the same file, written in row groups of at most ``row_group_bytes`` of words (one
    word may be larger), without Parquet dictionaries or statistics, sorted by comparing the
    words in place — so that writing adds about a row group's bytes, not the ~9x the words'
    bytes that :func:`write_counts` takes (its sort keys, dictionaries and statistics).

    Raises:
        InputError: a word occurs twice or a count is 0.
    """
    import functools

    pa, _, pq = arrow()
    data = np.ascontiguousarray(wc.data, np.uint8)
    off = wc.offsets()
    n = len(wc.lengths)

    def cmp(i: int, j: int) -> int:
        a, b = data[off[i]:off[i + 1]], data[off[j]:off[j + 1]]
        m = min(len(a), len(b))
        for s in range(0, m, 1 << 16):       # memcmp order, 64 KB at a time
            e = min(m, s + (1 << 16))
            d = np.flatnonzero(a[s:e] != b[s:e])
            if len(d):
                return -1 if a[s + d[0]] < b[s + d[0]] else 1
        return (len(a) > len(b)) - (len(a) < len(b))

    order = sorted(range(n), key=functools.cmp_to_key(cmp))
    for x, y in zip(order, order[1:]):
        if cmp(x, y) == 0:
            raise InputError("the word counts hold a word twice")
    if n and int(np.min(wc.counts)) < 1:
        raise InputError("the word counts hold a count of 0")
    schema = counts_schema(PRE_TOKENIZER)
    path = Path(path)
    with AtomicWriter(path, schema, compression, use_dictionary=False,
                       write_statistics=False) as w:
        k = 0
        while k < n:
            j, size = k, 0
            while j < n and (j == k or size + int(wc.lengths[order[j]]) <= row_group_bytes):
                size += int(wc.lengths[order[j]])
                j += 1
            sel = order[k:j]
            parts = [data[off[i]:off[i + 1]] for i in sel]
            o = np.zeros(len(sel) + 1, np.int64)
            np.cumsum([len(x) for x in parts], out=o[1:])
            words = words_array(np.concatenate(parts), o)
            counts = pa.array(np.ascontiguousarray(wc.counts[sel], np.uint64))
            w.writer.write_table(pa.Table.from_arrays([words, counts], schema=schema),
                                 row_group_size=len(sel))
            del parts, words, counts
            k = j
        w.totals = {"num_words": n, "total_count": exact_sum(wc.counts),
                    "num_documents": 0, "corpus_bytes": 0, "num_shards": 1}
    return path


def write_table_atomic(table, path: Path, totals: dict, compression: str = "zstd") -> Path:
    """Write ``table`` to ``path`` through :class:`AtomicWriter` (``totals`` in the footer)."""
    with AtomicWriter(path, table.schema, compression) as w:
        w.write(table)
        w.totals = totals
    return path


class AtomicWriter:
    """Parquet writer to ``path.tmp-*``, renamed to ``path`` on a clean exit; output rows are
    gathered into row groups of ``ROW_GROUP_ROWS``; ``totals`` go to the footer metadata."""

    def __init__(self, path: Path, schema, compression: str = "zstd", **writer_kw) -> None:
        self.compression = compression
        self.writer_kw = writer_kw
        self.path, self.schema = Path(path), schema
        self.pending: list = []
        self.rows = 0
        self.totals: dict = {}

    def __enter__(self) -> AtomicWriter:
        _, _, pq = arrow()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.tmp-")
        os.close(fd)
        self.writer = pq.ParquetWriter(self.tmp, self.schema, compression=self.compression,
                                       **self.writer_kw)
        return self

    def write(self, table) -> None:
        if table.num_rows:
            self.pending.append(table)
            self.rows += table.num_rows
        if self.rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        pa, _, _ = arrow()
        if self.pending:
            t = pa.concat_tables(self.pending)
            self.writer.write_table(t, row_group_size=ROW_GROUP_ROWS)
        self.pending, self.rows = [], 0

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._flush()
                head = json.loads(self.schema.metadata[META_KEY.encode()])
                self.writer.add_key_value_metadata({META_KEY: json.dumps({**head, **self.totals})})
            self.writer.close()
            if exc_type is None:
                os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


# -- reading ------------------------------------------------------------------------------------
def read_metadata(path: PathLike) -> dict:
    """The ``torch_gpubpe.word_counts`` metadata of a counts file (format, version,
    pre_tokenizer, num_words, total_count, num_documents, corpus_bytes, num_shards).

    Raises:
        InputError: no such file, not Parquet, not a counts file, or an unsupported version
            (names the file).
    """
    _, _, pq = arrow()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{str(path)!r}: no such counts file")
    try:
        md = pq.ParquetFile(p).metadata.metadata or {}
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise InputError(f"{str(path)!r}: not a Parquet counts file ({e})") from e
    raw = md.get(META_KEY.encode())
    try:
        meta = json.loads(raw) if raw is not None else None
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise InputError(f"{str(path)!r}: not a {FORMAT_NAME} file (no {META_KEY!r} metadata; "
                         "write it with torch_gpubpe.training.counts_file.write_counts or `count`)")
    if meta.get("version") != FORMAT_VERSION:
        raise InputError(f"{str(path)!r}: {FORMAT_NAME} version {meta.get('version')!r} is not "
                         f"supported (this torch_gpubpe reads version {FORMAT_VERSION})")
    return meta


def _check_columns(path, schema) -> None:
    pa, _, _ = arrow()
    names = schema.names
    if "word" not in names or "count" not in names:
        raise InputError(f"{str(path)!r}: a counts file needs columns 'word' and 'count', has "
                         f"{names}")
    wt, ct = schema.field("word").type, schema.field("count").type
    if not (pa.types.is_binary(wt) or pa.types.is_large_binary(wt)):
        raise InputError(f"{str(path)!r}: column 'word' is {wt}, expected large_binary")
    if not pa.types.is_integer(ct):
        raise InputError(f"{str(path)!r}: column 'count' is {ct}, expected uint64")


def iter_count_batches(path: PathLike, batch_rows: int = DEFAULT_BATCH_ROWS):
    """Yield ``(words, counts)`` of a counts file in order, ``batch_rows`` rows at a time:
    ``words`` an Arrow ``large_binary`` array, ``counts`` a uint64 numpy array.

    Every batch is checked: strictly increasing words (also across batches), no nulls,
    counts ≥ 1, so a merge can trust the order.

    Raises:
        InputError: the file is not a valid counts file (names it and the row).
    """
    pa, pc, pq = arrow()
    read_metadata(path)
    f = pq.ParquetFile(path)
    _check_columns(path, f.schema_arrow)
    row, last = 0, None
    # (one row group at a time: iter_batches over the whole file held all of it, e.g. 31 MB
    # per run of MB-long words in count_budget's merge, whatever batch_rows)
    batches = (b for g in range(f.num_row_groups)
               for b in f.iter_batches(batch_size=batch_rows, row_groups=[g],
                                       columns=["word", "count"]))
    for batch in batches:
        words, counts = batch.column(0), batch.column(1)
        if words.null_count or counts.null_count:
            raise InputError(f"{str(path)!r}: null word or count in rows {row}..{row + len(words)}")
        if not pa.types.is_large_binary(words.type):
            words = pc.cast(words, pa.large_binary())
        c = counts.to_numpy(zero_copy_only=False)
        if len(c) and (c.min() < 1):
            bad = int(np.flatnonzero(c < 1)[0])
            raise InputError(f"{str(path)!r}: count {int(c[bad])} < 1 at row {row + bad}")
        c = c.astype(np.uint64, copy=False)
        if len(words):
            if last is not None and not pc.less(last, words[0]).as_py():
                raise InputError(f"{str(path)!r}: words not sorted/unique at row {row}")
            if len(words) > 1:
                bad = pc.greater_equal(words[:-1], words[1:])
                if pc.any(bad).as_py():
                    k = int(np.flatnonzero(bad.to_numpy(zero_copy_only=False))[0])
                    raise InputError(f"{str(path)!r}: words not sorted/unique at row "
                                     f"{row + k + 1} (a counts file is sorted by word bytes)")
            last = words[-1]
        row += len(words)
        yield words, c


def read_counts(path: PathLike):
    """A counts file → :class:`~torch_gpubpe.training.word_counts.WordCounts` (sorted by word bytes).

    Raises:
        InputError: the file is not a valid counts file (names it).
    """
    datas, lens, counts = [], [], []
    for words, c in iter_count_batches(path):
        d, o = packed(words)
        datas.append(d.copy())
        lens.append(np.diff(o))
        counts.append(c)
    if not datas:
        return empty_counts()
    return WordCounts(np.concatenate(datas), np.concatenate(lens), np.concatenate(counts))

