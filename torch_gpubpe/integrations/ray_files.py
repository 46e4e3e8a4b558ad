"""Ray Data's encoder of files read by the actor itself (:class:`TokenizeFiles`, applied by
:func:`tokenize_files`; :func:`write_shards_from_files` writes one shard list of them): the
``encode`` CLI's reader and loop in each actor, no text through Ray's object store. The
overview of the Ray recipes is :mod:`torch_gpubpe.integrations.ray`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.encoding.stream import ENCODE_READ_NICE
from torch_gpubpe.errors import InputError
from torch_gpubpe.integrations.ray_arrow import ids_and_offsets, table_with, token_column
from torch_gpubpe.integrations.ray_encode import (DEFAULT_SUB_BATCH_BYTES, TokenizeBatches,
                                                  check_gpus_available, map_on_gpus)
from torch_gpubpe.integrations.ray_shards import merge_shard_lists


class TokenizeFiles:
    """Ray Data callable class: rows naming files → the token ids of the files' documents,
    the files read by the actor itself with the ``encode`` CLI's reader.

    The rows carry paths only, so the text never passes through Ray's object store: each call
    runs the ``encode`` CLI's pipeline (:mod:`torch_gpubpe.encoding.stream`, the same code) over its
    files: one :class:`torch_gpubpe.io.readers.FileReader` over all of them (parquet row groups /
    JSON Lines chunks read ahead on its threads, across the files' ends; parquet decoded on
    those threads, not on Arrow's CPU pool, which Ray's ``OMP_NUM_THREADS=1`` sizes to one
    thread), the pack thread, two GPU batches in flight, on a thread of its own, so Ray's puts
    of the token blocks (or the shard writes) overlap the GPU's work. With
    ``ray.data.read_parquet`` + :class:`TokenizeBatches` instead, Ray tasks read every byte,
    put it in the object store and the actor takes it from there.

    Args:
        vocab, output_column, append_eos, pre_tokenizer, open_gpu: as
            :class:`TokenizeBatches`.
        path_column: the input column with the file paths (on a file system every node
            mounts, for a cluster).
        index_column: an input column of int file numbers naming the shard parts (what
            :func:`tokenize_files` gives: the file's position), so :func:`merge_shard_lists`
            puts them in file order; default (or absent): a hash of the path.
        text_column: the column / JSON field holding the documents.
        format: one of :data:`torch_gpubpe.io.readers.FORMATS` for every file (default: from each
            file's extension).
        batch_bytes: text per GPU submit (the CLI's ``--batch-bytes``).
        read_threads: FileReader threads per call (default: the CPU count, at most 16).
        read_nice: the reading threads' added niceness (FileReader's ``nice``; default the
            ``encode`` CLI's ``--read-nice`` default, ``encoding.stream.ENCODE_READ_NICE``; Ray's workers
            already run at niceness 15, Linux caps it at 19).
        out_dir: write shards instead of returning tokens: one part per file,
            ``out_dir/part-<index>`` (:class:`torch_gpubpe.io.shards.ShardWriter`, as the
            ``encode`` CLI writes them; a folder every node can write to); then
            :func:`merge_shard_lists` makes one shard list.
        fmt, name, eot, shard_tokens: with ``out_dir``: the shard format (``"llmc"``,
            ``"megatron"``, ``"flat"``), file prefix, end-of-text token (llm.c: before each
            document, required; the others: after it, or ``None`` for none; put in by the GPU),
            tokens per shard.

    ``__call__(batch: pyarrow.Table) -> Iterator[pyarrow.Table]`` (a generator: Ray makes
    blocks of what it yields as it goes). Without ``out_dir``: one table per GPU batch, in file
    and row order: ``path`` (string), ``row`` (int64: the document's row in its file; rows whose
    text is None are skipped, as the ``encode`` CLI skips them) and ``output_column``
    (``list<uint16>``, or ``list<uint32>`` above 65,536 tokens). With ``out_dir``: one row per
    file: ``path``, ``part``, ``key`` (str), ``num_documents``, ``num_tokens`` (int64). The
    tokens equal ``Tokenizer(vocab).encode_batch`` of the documents (DESIGN.md §4).

    Attributes:
        stats: ``skipped_none`` (rows whose text is None), ``calls`` (finished), ``seconds``:
            the pipeline's stages summed over the calls (``encode --debug``'s names:
            ``wait_reader``, ``upload_and_submit``, ``wait_gpu_and_readback``, ...);
            ``arrow_cpu_count`` when CSV / Arrow IPC files were decoded on an Arrow CPU pool
            smaller than the reader's thread count (warned once).

    Raises (from ``__call__``):
        InputError: the path column is missing; a file cannot be read or a value is not text
            (FileReader's messages name the file and row).
    """

    def __init__(self, vocab, *, path_column: str = "path", index_column: str = "index",
                 text_column: str = "text", format: str | None = None,
                 output_column: str = "input_ids", append_eos: str | None = None,
                 batch_bytes: int = DEFAULT_SUB_BATCH_BYTES, read_threads: int | None = None,
                 read_nice: int | None = None,
                 pre_tokenizer: str | None = None, open_gpu: bool = True, out_dir=None,
                 fmt: str = "llmc", name: str = "data", eot: str | None = "<|endoftext|>",
                 shard_tokens: int | None = None) -> None:
        from torch_gpubpe.io.shards import DEFAULT_SHARD_TOKENS, OUTPUT_FORMATS

        if out_dir is not None and fmt not in OUTPUT_FORMATS:
            raise ValueError(f"fmt must be one of {OUTPUT_FORMATS}, got {fmt!r}")
        if out_dir is not None and append_eos is not None:
            raise ValueError("with out_dir, the shards' end-of-text token is eot=, not "
                             "append_eos=")
        self.enc = TokenizeBatches(vocab, text_column=text_column, output_column=output_column,
                                   append_eos=append_eos, sub_batch_bytes=batch_bytes,
                                   pre_tokenizer=pre_tokenizer, open_gpu=open_gpu)
        self.vocab, self.timings = self.enc.vocab, self.enc.timings
        self.path_column, self.index_column = path_column, index_column
        self.text_column, self.format = text_column, format
        self.output_column, self.batch_bytes = output_column, int(batch_bytes)
        self.read_threads = read_threads
        self.read_nice = ENCODE_READ_NICE if read_nice is None else read_nice
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.fmt, self.name = fmt, name
        self.shard_tokens = DEFAULT_SHARD_TOKENS if shard_tokens is None else int(shard_tokens)
        self.eot_id = None
        if self.out_dir is not None:
            self.eot_id = None if eot is None else self.vocab.token_to_id(eot)
            if fmt == "llmc" and self.eot_id is None:
                raise ValueError("fmt='llmc' puts eot before every document: pass eot=")
            self._specials = ({} if self.eot_id is None else
                              {"bos_id" if fmt == "llmc" else "eos_id": self.eot_id})
        else:
            self._specials = {} if self.enc.eos is None else {"eos_id": self.enc.eos}
        self.stats: dict = {"skipped_none": 0, "calls": 0, "seconds": {}}
        self._lock = threading.Lock()

    def ready(self):
        """:meth:`TokenizeBatches.ready`: wait for the GPU session; returns ``self``."""
        self.enc.ready()
        return self

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, batch):
        import pyarrow as pa

        from torch_gpubpe.io.readers import prefetch

        batch = table_with(batch, self.path_column, "path_column")
        paths = [os.fspath(p) for p in batch.column(self.path_column).to_pylist()]
        keys = None
        if self.index_column in batch.column_names:
            keys = [f"{int(k):012d}" for k in batch.column(self.index_column).to_pylist()]
        encoded = prefetch(self._encoded(paths), 2, "torch_gpubpe ray encode")
        if self.out_dir is None:
            id_dtype = self.enc.tokenizer().id_dtype
            names = pa.array(paths, pa.string())
            for file, row, ids, offsets in encoded:
                yield pa.table({"path": names.take(pa.array(file)),
                                "row": pa.array(row),
                                self.output_column: token_column([(ids, offsets)], id_dtype)})
            return
        yield from self._write(paths, keys, encoded)

    def _write(self, paths: list[str], keys: list[str] | None, encoded):
        """Shards mode: one ShardWriter per file (the part), written on the calling thread
        while the prefetch thread keeps the GPU busy (a GPU batch across a file's end is cut
        there); a row per file, in order (empty files too)."""
        import hashlib

        import pyarrow as pa

        from torch_gpubpe.io.shards import ShardWriter

        if keys is None:
            keys = [hashlib.blake2b(os.path.abspath(p).encode(), digest_size=12).hexdigest()
                    for p in paths]
        state = {"file": -1, "writer": None, "docs": 0}

        def open_next():
            state["file"] += 1
            state["docs"] = 0
            state["writer"] = ShardWriter(
                self.out_dir / f"part-{keys[state['file']]}", self.fmt, len(self.vocab),
                name=self.name, eot_id=self.eot_id, shard_tokens=self.shard_tokens,
                overwrite=True)

        def close_current():
            f, w = state["file"], state["writer"]
            info = w.close({"num_documents": state["docs"], "source": paths[f]})
            state["writer"] = None
            return pa.table({"path": [paths[f]], "part": [str(w.out)], "key": [keys[f]],
                             "num_documents": [state["docs"]],
                             "num_tokens": [int(info["num_tokens"])]})

        open_next()
        for file, _rows, ids, offsets in encoded:
            cuts = np.flatnonzero(np.diff(file)) + 1          # the batch's documents by file
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(file)]):
                while state["file"] < file[a]:                # files before it are complete
                    yield close_current()
                    open_next()
                o = offsets[a:b + 1]
                state["writer"].add(ids[o[0]:o[-1]], o - o[0],
                                    eot_included=self.eot_id is not None)
                state["docs"] += int(b - a)
        yield close_current()
        while state["file"] < len(paths) - 1:                 # empty files at the end
            open_next()
            yield close_current()

    _warned_pool = False

    def _check_arrow_pool(self, reader) -> None:
        """CSV and Arrow IPC files are parsed / decompressed on Arrow's CPU pool, sized by
        ``OMP_NUM_THREADS`` (Ray: 1 in an actor without ``num_cpus``): say so (stats, once)."""
        import pyarrow as pa

        slow = sorted({f for f in reader.formats if f in ("csv", "arrow")})
        if slow and pa.cpu_count() < reader.threads:
            self.stats["arrow_cpu_count"] = pa.cpu_count()
            if not TokenizeFiles._warned_pool:
                TokenizeFiles._warned_pool = True
                notices.warn(f"torch_gpubpe.integrations.ray: {'/'.join(slow)} files are decoded on Arrow's "
                             f"CPU pool, here {pa.cpu_count()} thread(s) (OMP_NUM_THREADS="
                             f"{os.environ.get('OMP_NUM_THREADS')}; Ray sets it to the actor's "
                             f"num_cpus, 1 without): pass ray_remote_args={{'num_cpus': "
                             f"{reader.threads}}} or set OMP_NUM_THREADS in its runtime_env "
                             "(parquet and JSON Lines are decoded on the reader's own threads)",
                             stacklevel=3)

    def _encoded(self, paths: list[str]):
        """On the prefetch thread: the ``encode`` CLI's pipeline (:mod:`torch_gpubpe.encoding.stream`:
        one FileReader over the call's files, its read-ahead threads and pack thread, two GPU
        batches in flight) → per GPU batch ``(file position, row in the file, ids, offsets)``
        (int64 arrays per document; the file from ``FileReader.file_starts``)."""
        from torch_gpubpe.encoding.stream import read_ahead
        from torch_gpubpe.io.readers import FileReader

        stages: dict = {}
        st: dict = {}
        reader = FileReader(paths, text_column=self.text_column, format=self.format,
                            threads=self.read_threads, nice=self.read_nice)
        self._check_arrow_pool(reader)
        pump = read_ahead(reader, batch_bytes=self.batch_bytes, stats=st,
                          name="torch_gpubpe ray read")
        tok = self.enc.make_tokenizer()
        try:
            for p, enc in tok.stream(iter(pump), stages=stages, before_first=self.enc.ready,
                                     **self._specials):
                starts = np.array(reader.file_starts, np.int64).reshape(-1, 2)
                k = np.searchsorted(starts[:, 0], p.indices, "right") - 1
                ids, offsets = ids_and_offsets(enc)
                yield starts[k, 1], p.indices - starts[k, 0], ids, offsets
        finally:
            pump.close()
            with self._lock:
                self.stats["skipped_none"] += st.get("skipped_none", 0)
                for key, v in stages.items():
                    self.stats["seconds"][key] = self.stats["seconds"].get(key, 0.0) + v
                self.stats["calls"] += 1


def tokenize_files(paths, vocab, *, num_gpus: float | None = 1, actors: int = 1,
                   files_per_call: int = 4, calls_per_actor: int = 2,
                   ray_remote_args: dict | None = None, cls: type | None = None,
                   check_gpus: bool = True, **kwargs):
    """The token ids of files' documents as a Ray ``Dataset``: a dataset of the paths
    (``ray.data.from_items``, one block per file) mapped by :class:`TokenizeFiles`, which
    reads the files in the actor itself (the ``encode`` CLI's reader and loop).

    Args:
        paths: files or glob patterns (:func:`torch_gpubpe.io.readers.expand_paths`; each must
            exist where the driver runs, and on every node at the same path).
        vocab: as :class:`TokenizeBatches`; ``kwargs`` go to :class:`TokenizeFiles`
            (``text_column``, ``format``, ``append_eos``, ``batch_bytes``, ...).
        num_gpus, actors, calls_per_actor, ray_remote_args, check_gpus: as
            :func:`tokenize_dataset` (two calls at once: one file's start and end overlap the
            other's GPU work).
        files_per_call: files per :class:`TokenizeFiles` call (Ray's ``batch_size``; the unit
            of scheduling and of retry); a call reads its next file while it encodes one.
        cls: :class:`TokenizeFiles` (default) or a subclass of it.
    Returns:
        the ``Dataset`` (lazy) of ``path``, ``row`` and the token column; with ``out_dir=``
        (shards written by the actor), of one row per file for :func:`merge_shard_lists`
        (:func:`write_shards_from_files` runs both).
    Raises:
        InputError: no such file, or ``num_gpus`` more than the running cluster has.

    Why a dataset of paths instead of ``ray.data.read_parquet`` (which spreads the reading
    over Ray tasks, the usual way): there every byte of text goes from a read task through
    Ray's object store into the actor, which then waits for Ray's reads and slicing; here each
    file's bytes stay in one process from disk to GPU, as in the CLI
    (``benchmarks/ray_encode.py`` measures both on the same files). Use ``read_parquet`` +
    :func:`tokenize_dataset` when the dataset comes from another Ray Data step (filters,
    joins) or when the readers need more CPUs than a GPU node has.
    """
    import ray

    from torch_gpubpe.io.readers import expand_paths

    check_gpus_available(num_gpus, check_gpus)
    files = expand_paths(paths)
    if not files:
        raise InputError(f"tokenize_files: no files in {paths!r}")
    ds = ray.data.from_items([{"path": f, "index": k} for k, f in enumerate(files)],
                             override_num_blocks=len(files))
    return map_on_gpus(ds, cls or TokenizeFiles, {"vocab": vocab, **kwargs}, files_per_call,
                        num_gpus, actors, calls_per_actor, ray_remote_args)


def write_shards_from_files(paths, vocab, out, *, fmt: str = "llmc", name: str = "data",
                            eot: str | None = "<|endoftext|>", **kwargs) -> dict:
    """Tokenize files on a Ray cluster into one shard list, the ``encode`` CLI's output
    formats: :func:`tokenize_files` with ``out_dir`` (each actor writes one part per file,
    ``out/.parts/part-<file number>``), then :func:`merge_shard_lists` (file order; llm.c's
    validation shard first).

    Args:
        paths, vocab, kwargs: as :func:`tokenize_files` (``num_gpus``, ``actors``, ...).
        out: the output folder (every node writes into it: a shared file system on a cluster).
        fmt, name, eot: as :class:`TokenizeFiles`.
    Returns:
        the merged ``meta.json`` (format, shards or prefixes, token and document counts).
    """
    import shutil

    out = Path(out)
    parts = out / ".parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    ds = tokenize_files(paths, vocab, out_dir=str(parts), fmt=fmt, name=name, eot=eot,
                        **kwargs)
    info = merge_shard_lists(ds.take_all(), out, fmt=fmt, name=name)
    shutil.rmtree(parts, ignore_errors=True)
    return info

