"""Merging counts files: a streaming k-way merge of sorted counts files, exact 64-bit sums.

Each input (:mod:`~torch_gpubpe.training.counts_format`) is sorted and holds each word once,
so every word up to the smallest last word of the batches held has all its occurrences in
them: those are summed and emitted, and memory stays bounded by ``fan_in × batch_rows`` rows
(:func:`iter_merged`, :func:`merge_counts`).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from torch_gpubpe.errors import InputError
from torch_gpubpe.training.counts_format import (DEFAULT_BATCH_ROWS, DEFAULT_FAN_IN, U64_LIMIT,
                                                 AtomicWriter, PathLike, arrow, counts_schema,
                                                 exact_sum, iter_count_batches, packed,
                                                 read_metadata, sort_order)

def _sum_sorted(words, counts: np.ndarray):
    """Sum the counts of equal adjacent words of sorted ``words``; exact (raises at 2^64)."""
    pa, pc, _ = arrow()
    n = len(words)
    if n <= 1:
        return words, counts
    heads = np.ones(n, bool)
    heads[1:] = pc.not_equal(words[1:], words[:-1]).to_numpy(zero_copy_only=False)
    if heads.all():
        return words, counts
    idx = np.flatnonzero(heads)
    sums = np.add.reduceat(counts, idx)          # wraps at 2^64: checked next
    approx = np.add.reduceat(counts.astype(np.float64), idx)
    for g in np.flatnonzero(approx >= 2.0 ** 63).tolist():
        end = int(idx[g + 1]) if g + 1 < len(idx) else n
        exact = sum(int(c) for c in counts[int(idx[g]):end])
        if exact >= U64_LIMIT:
            raise InputError(f"the count of word {words[int(idx[g])].as_py()!r} reaches 2^64 "
                             f"({exact}); counts are 64-bit")
    return words.take(pa.array(idx)), sums


# Bytes of words one input of the merge holds per batch (at least one word): a run of MB-long
# words is read a few words at a time, not 2^16 of them (the memory budget's merge of runs).
BATCH_BYTES = 1 << 20


def _rows_within(path: PathLike, batch_rows: int) -> int:
    """``batch_rows``, fewer where the file's rows are long (its row groups' uncompressed
    bytes per row), so that a batch holds about BATCH_BYTES at most."""
    _, _, pq = arrow()
    try:
        md = pq.ParquetFile(path).metadata
        rows = sum(md.row_group(i).num_rows for i in range(md.num_row_groups))
        nbytes = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    except Exception:  # noqa: BLE001 - read errors are iter_count_batches' to name
        return batch_rows
    if not rows:
        return batch_rows
    return max(1, min(batch_rows, int(BATCH_BYTES * rows // max(nbytes, 1))))


class _Input:
    """One sorted input of the merge: its current batch and a cursor."""

    def __init__(self, path: PathLike, batch_rows: int) -> None:
        self.path = path
        self.it: Iterator = iter_count_batches(path, _rows_within(path, batch_rows))
        self.words = None
        self.counts = np.zeros(0, np.uint64)
        self.done = False
        self.refill()

    def refill(self) -> None:
        while not self.done and (self.words is None or len(self.words) == 0):
            try:
                self.words, self.counts = next(self.it)
            except StopIteration:
                self.done = True
                self.words = None

    def take_upto(self, frontier):
        """Remove and return the rows whose word ≤ ``frontier`` (all rows if None)."""
        _, pc, _ = arrow()
        if self.words is None:
            return None
        if frontier is None:
            k = len(self.words)
        else:
            k = int(pc.sum(pc.less_equal(self.words, frontier).cast("int64")).as_py() or 0)
        part = (self.words[:k], self.counts[:k])
        self.words, self.counts = self.words[k:], self.counts[k:]
        if len(self.words) == 0:
            self.refill()
        return part


def iter_merged(paths: Sequence[PathLike], batch_rows: int = DEFAULT_BATCH_ROWS,
                stats: dict | None = None) -> Iterator[tuple]:
    """The streaming k-way merge of sorted counts files ``paths`` (all read at once: no
    fan-in rounds), as ``(words, counts)`` batches in word order: ``words`` an Arrow
    ``large_binary`` array, ``counts`` uint64 (equal words' counts added, exact). What
    :func:`merge_counts` writes, without the file (count_budget reads the runs this way).

    Raises:
        InputError: an input is not a valid counts file, or a summed count reaches 2^64.
    """
    pa, pc, _ = arrow()
    inputs = [_Input(p, batch_rows) for p in paths]
    peak = 0
    while True:
        live = [i for i in inputs if i.words is not None]
        if not live:
            break
        # Every word ≤ the smallest last word of the inputs' current batches has all its
        # occurrences in those batches (each input is sorted and unique): sum and emit them.
        frontier = None
        if any(not i.done for i in live):
            frontier = min((i.words[-1] for i in live if not i.done), key=lambda s: s.as_py())
        held = sum(len(i.words) for i in live)
        peak = max(peak, held)
        parts = [p for p in (i.take_upto(frontier) for i in live) if p is not None]
        words = pa.concat_arrays([p[0] for p in parts])
        counts = np.concatenate([p[1] for p in parts])
        del parts
        if len(live) > 1:
            order = sort_order(*packed(words))
            words, counts = _sum_sorted(words.take(pa.array(order)), counts[order])
        if stats is not None:
            stats["peak_rows_held"] = max(stats.get("peak_rows_held", 0), peak)
        yield words, counts


def _merge_group(paths: Sequence[PathLike], out: Path, *, pre_tokenizer: str,
                 batch_rows: int, totals: dict, stats: dict) -> None:
    pa, _, _ = arrow()
    num_words = 0
    total = 0
    with AtomicWriter(out, counts_schema(pre_tokenizer)) as w:
        for words, counts in iter_merged(paths, batch_rows, stats):
            num_words += len(words)
            total += exact_sum(counts)
            w.write(pa.Table.from_arrays([words, pa.array(counts, pa.uint64())],
                                         schema=w.schema))
        w.totals = {**totals, "num_words": num_words, "total_count": total}


def merge_counts(paths: Sequence[PathLike], out: PathLike, *,
                 batch_rows: int = DEFAULT_BATCH_ROWS, fan_in: int = DEFAULT_FAN_IN,
                 stats: dict | None = None) -> Path:
    """Merge counts files into one: the counts of equal words added, exactly (64-bit).

    A streaming k-way merge of the sorted inputs: each input is read ``batch_rows`` rows at a
    time; every word up to the smallest last word of the batches held is summed and written
    (sort + run sums), so at most ``fan_in × batch_rows`` input rows are held at once.
    More than ``fan_in`` inputs are merged in rounds through temporary files beside ``out``.
    The result does not depend on the order of ``paths``, ``batch_rows`` or ``fan_in``.

    Args:
        paths: counts files (:func:`count_to_file`, :func:`write_counts`, or earlier merges),
            all of the same pre-tokenizer.
        out: the merged counts file (replaced if it exists; written under a temporary name
            first).
        batch_rows: rows read from each input per step (memory ∝ fan_in × batch_rows).
        fan_in: most inputs merged at once (≥ 2).
        stats: if a dict, filled with ``num_inputs``, ``num_words``, ``total_count``,
            ``peak_rows_held`` (most input rows held at once), ``rounds``, ``seconds``.
    Returns:
        ``out`` as a :class:`~pathlib.Path`.
    Raises:
        InputError: no inputs, an input is not a valid counts file (names it and the row), the
            inputs name different pre-tokenizers, or a summed count reaches 2^64.
        ValueError: ``batch_rows < 1`` or ``fan_in < 2``.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}")
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError("merge_counts needs at least one counts file")
    t0 = time.perf_counter()
    metas = [read_metadata(p) for p in paths]
    pre = {m.get("pre_tokenizer") for m in metas}
    if len(pre) != 1:
        named = ", ".join(f"{str(p)!r}: {m.get('pre_tokenizer')!r}" for p, m in zip(paths, metas))
        raise InputError(f"the counts files were made with different pre-tokenizers ({named}); "
                         "only counts of one word rule can be merged")
    pre_tokenizer = pre.pop()
    out = Path(out)
    st = {} if stats is None else stats
    st.update(num_inputs=len(paths), peak_rows_held=0, rounds=0)
    level = list(zip(paths, metas))
    tmpdir = None
    try:
        while True:
            st["rounds"] += 1
            groups = [level[i:i + fan_in] for i in range(0, len(level), fan_in)]
            final = len(groups) == 1
            if not final and tmpdir is None:
                out.parent.mkdir(parents=True, exist_ok=True)
                tmpdir = tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.merge-")
            nxt = []
            for gi, group in enumerate(groups):
                totals = {k: sum(int(m.get(k, 0) or 0) for _, m in group)
                          for k in ("num_documents", "corpus_bytes", "num_shards")}
                target = out if final else Path(tmpdir) / f"r{st['rounds']}-{gi}.parquet"
                _merge_group([p for p, _ in group], target, pre_tokenizer=pre_tokenizer,
                             batch_rows=batch_rows, totals=totals, stats=st)
                nxt.append((target, read_metadata(target)))
            if final:
                break
            for p, _ in level:       # intermediate files of the previous round
                if tmpdir is not None and Path(p).parent == Path(tmpdir):
                    os.unlink(p)
            level = nxt
    finally:
        if tmpdir is not None:
            for f in Path(tmpdir).glob("*"):
                f.unlink()
            os.rmdir(tmpdir)
    meta = read_metadata(out)
    st.update(num_words=meta["num_words"], total_count=meta["total_count"],
              seconds=time.perf_counter() - t0)
    return out

