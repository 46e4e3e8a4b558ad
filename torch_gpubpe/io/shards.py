"""Token files that training code reads as they are: llm.c shards, Megatron-LM indexed datasets,
and this project's flat ids + offsets (``python -m torch_gpubpe encode --output-format``).

Formats (all little-endian):

``llmc``      llm.c / modded-nanogpt shards (karpathy/llm.c ``dev/data/data_common.py``
              ``write_datafile``; read by ``train_gpt2.py`` ``_peek_data_shard`` /
              ``_load_data_shard``): a header of 256 ``int32`` — magic 20240520, version 1, token
              count — then ``uint16`` tokens; for vocabs over 65,536 tokens the uint32 variant
              (magic 20240801, version 7, ``uint32`` tokens). The EOT token comes *before* each
              document (as llm.c's ``fineweb.py``); a shard holds ``shard_tokens`` tokens (the
              last one fewer), documents are split across shards, and the first shard is the
              validation split: ``<name>_val_000000.bin``, ``<name>_train_000001.bin``, ...
``megatron``  Megatron-LM ``IndexedDataset`` (``megatron/core/datasets/indexed_dataset.py``):
              ``<name>_NNNNNN.bin`` (token ids, ``uint16`` when the vocab has at most 65,536
              tokens, else ``int32``) + ``<name>_NNNNNN.idx``: ``b"MMIDIDX\\x00\\x00"``, version
              1 (``<Q``), dtype code (``<B``: uint16 = 8, int32 = 4), sequence count (``<Q``),
              document count (``<Q``), ``int32`` sequence lengths, ``int64`` byte pointers,
              ``int64`` document indices (``0, 1, ..., n``: one sequence per document). A shard
              ends at the first document boundary at or after ``shard_tokens`` tokens; pass the
              prefixes to Megatron's ``--data-path``.
``flat``      ``ids.bin`` (or ``ids.npy``) — every id back to back — plus ``offsets.npy``
              (``int64``, documents + 1) and ``meta.json``.

Every file is written under a temporary name and renamed when complete, so a killed run leaves
only complete shards; :class:`ShardWriter` then resumes after the last one (its progress file
records how many documents, and tokens of the next document, the complete shards hold). The
bytes written depend only on the document stream, not on batch sizes, thread counts or the
order in which files were read.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
from pathlib import Path

import numpy as np

from torch_gpubpe.errors import InputError

LLMC_MAGIC = {2: (20240520, 1), 4: (20240801, 7)}
"""llm.c header (magic, version) by token size in bytes (gpt-2 uint16, llama-3 uint32)."""
LLMC_HEADER_INTS = 256
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_DTYPE_CODES = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3,
                        np.dtype(np.int32): 4, np.dtype(np.int64): 5, np.dtype(np.float64): 6,
                        np.dtype(np.float32): 7, np.dtype(np.uint16): 8}
"""Megatron-LM ``DType`` enum codes."""
OUTPUT_FORMATS = ("llmc", "megatron", "flat")
DEFAULT_SHARD_TOKENS = 10**8
PROGRESS = ".torch_gpubpe-progress.json"
META_JSON = "meta.json"
WRITEBACK_BYTES = 64 << 20
"""A shard's bytes are handed to the disk every this many bytes (:meth:`ShardWriter._start_writeback`)."""
REPLACED_PREFIX = ".torch_gpubpe-replaced-"
"""``--overwrite``: the old output is moved into a folder of this name (a rename, at once) and
deleted on a thread while the new one is written; a folder left by a killed run goes the same
way at the next run."""


def llmc_shard_name(name: str, index: int) -> str:
    """``<name>_val_000000.bin`` for shard 0, ``<name>_train_<index:06d>.bin`` after."""
    return f"{name}_{'val' if index == 0 else 'train'}_{index:06d}.bin"


def read_llmc_shard(path: str | os.PathLike) -> np.ndarray:
    """Tokens of one llm.c shard, checked as llm.c's ``_load_data_shard`` does (magic,
    version, token count equal to the data that follows)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(LLMC_HEADER_INTS * 4), dtype=np.int32)
        for size, (magic, version) in LLMC_MAGIC.items():
            if header[0] == magic:
                break
        else:
            raise ValueError(f"{path}: magic number mismatch in the data .bin file")
        if header[1] != version:
            raise ValueError(f"{path}: unsupported version {header[1]}")
        ntok = int(header[2])
        tokens = np.frombuffer(f.read(), dtype=np.uint16 if size == 2 else np.uint32)
    if len(tokens) != ntok:
        raise ValueError(f"{path}: number of tokens read does not match header")
    return tokens


def read_megatron(prefix: str | os.PathLike) -> list[np.ndarray]:
    """Documents of a Megatron-LM indexed dataset ``prefix.bin`` + ``prefix.idx``, read with the
    layout of Megatron's ``_IndexReader`` (one array of token ids per document)."""
    with open(f"{prefix}.idx", "rb") as f:
        if f.read(9) != MEGATRON_HEADER:
            raise ValueError(f"{prefix}.idx: bad header")
        (version,) = struct.unpack("<Q", f.read(8))
        if version != 1:
            raise ValueError(f"{prefix}.idx: bad version {version}")
        (code,) = struct.unpack("<B", f.read(1))
        dtype = {v: k for k, v in MEGATRON_DTYPE_CODES.items()}[code]
        (nseq,) = struct.unpack("<Q", f.read(8))
        (ndoc,) = struct.unpack("<Q", f.read(8))
        rest = f.read()
    lengths = np.frombuffer(rest, np.int32, nseq, 0)
    pointers = np.frombuffer(rest, np.int64, nseq, lengths.nbytes)
    doc_idx = np.frombuffer(rest, np.int64, ndoc, lengths.nbytes + pointers.nbytes)
    data = np.fromfile(f"{prefix}.bin", np.uint8)
    seqs = [np.frombuffer(data, dtype, int(n), int(p)) for n, p in zip(lengths, pointers)]
    return [np.concatenate(seqs[doc_idx[d] : doc_idx[d + 1]]) if doc_idx[d + 1] > doc_idx[d]
            else np.zeros(0, dtype) for d in range(ndoc - 1)]


def _insert_before(ids: np.ndarray, offsets: np.ndarray, tok: int, dtype) -> np.ndarray:
    """The token stream ``[tok] doc0 [tok] doc1 ...`` of a batch (vectorised)."""
    n = len(offsets) - 1
    out = np.empty(len(ids) + n, dtype)
    starts = offsets[:-1] + np.arange(n, dtype=np.int64)
    out[starts] = tok
    if n and len(ids) >= 256 * n:  # long documents: one slice copy each (no mask pass)
        o, st = offsets.tolist(), starts.tolist()
        for j in range(n):
            out[st[j] + 1 : st[j] + 1 + o[j + 1] - o[j]] = ids[o[j] : o[j + 1]]
        return out
    mask = np.ones(len(out), bool)
    mask[starts] = False
    out[mask] = ids
    return out


def _as_bytes(c):
    """``c`` (bytes or a numpy array) as a buffer ``file.write`` takes without a copy."""
    if isinstance(c, (bytes, bytearray, memoryview)):
        return c
    return memoryview(np.ascontiguousarray(c)).cast("B")


def _write_atomic(path: Path, *chunks) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(_as_bytes(c))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:  # (gone, or not ours to delete: the folder stays; rmtree retries it)
        pass


class ShardWriter:
    """Writes the token ids of a document stream in one of :data:`OUTPUT_FORMATS`.

    Args:
        out: output folder (created).
        fmt: ``"llmc"``, ``"megatron"`` or ``"flat"``.
        vocab_size: number of token ids (picks uint16/uint32 for llm.c, uint16/int32 for
            Megatron, uint16/uint32 for flat).
        name: file name prefix (llm.c, Megatron).
        eot_id: llm.c: the token put before every document (required); others: appended after
            every document when not None.
        shard_tokens: tokens per shard (llm.c; Megatron: a shard ends at the first document end
            at or after it).
        fingerprint: JSON-able description of the run; a progress file with another one is not
            resumed.
        overwrite: remove this writer's existing output first; else an existing complete output
            is an error and an incomplete one with the same fingerprint is resumed.
        flat_npy: flat format: ``ids.npy`` instead of ``ids.bin``.
    Raises:
        InputError: the output exists (and ``overwrite`` is false), a bad option.

    After construction, :attr:`resume_documents` / :attr:`resume_tokens` say where the document
    stream must restart: skip that many documents, then that many tokens of the next one.
    """

    def __init__(self, out: str | os.PathLike, fmt: str, vocab_size: int, *, name: str = "data",
                 eot_id: int | None = None, shard_tokens: int = DEFAULT_SHARD_TOKENS,
                 fingerprint: dict | None = None, overwrite: bool = False,
                 flat_npy: bool = False) -> None:
        if fmt not in OUTPUT_FORMATS:
            raise InputError(f"output format must be one of {OUTPUT_FORMATS}, got {fmt!r}")
        if shard_tokens < 1:
            raise InputError(f"--shard-tokens must be >= 1, got {shard_tokens}")
        if fmt == "llmc" and eot_id is None:
            raise InputError("the llm.c format puts an end-of-text token before every document; "
                             "the vocab has no special tokens (train it with <|endoftext|>)")
        if fmt == "llmc" and shard_tokens >= 2**31:
            raise InputError("llm.c shards hold fewer than 2^31 tokens (its header is int32)")
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.fmt, self.name, self.eot = fmt, name, eot_id
        self.shard_tokens = int(shard_tokens)
        if fmt == "megatron":
            self.dtype = np.dtype(np.uint16 if vocab_size <= 65536 else np.int32)
        else:
            self.dtype = np.dtype(np.uint16 if vocab_size <= 65536 else np.uint32)
        self.dtype = self.dtype.newbyteorder("<")
        self.flat_npy = flat_npy
        self.fingerprint = fingerprint or {}
        self.shards: list[str] = []
        self.tokens = 0           # tokens written in complete shards (and the current one)
        self.documents = 0        # documents whose tokens are all in complete shards
        self.resume_documents = 0
        self.resume_tokens = 0
        self._buf: list[np.ndarray] = []
        self._buf_tokens = 0
        self._skip = 0
        self._doc_lens: list[np.ndarray] = []  # megatron / flat: per-document lengths
        self._shard_f = None  # the temporary file of the shard being written
        self._writeback_from: dict[str, int] = {}  # file → bytes handed to the disk so far
        # time spent writing / starting the writeback (flush thread) / flushing to disk
        self.seconds = {"write": 0.0, "writeback": 0.0, "fsync": 0.0}
        self._flush_pool = None  # one thread: fsync of complete shards, then the progress file
        self._flushing: list = []
        self._deleting = None  # thread deleting a replaced output (--overwrite)
        self._begin(overwrite)
        self._stream_docs = self.resume_documents  # documents of the stream added so far

    # -- output files ---------------------------------------------------------------------------
    def _is_ours(self, name: str) -> bool:
        """Whether a file of this name in the output folder is one this writer makes (its
        shards, metadata and progress, and their ``.tmp`` while being written): other files
        there are left alone."""
        name = name.removesuffix(".tmp")
        stem = re.escape(self.name)
        pattern = {"llmc": rf"{stem}_(val|train)_\d{{6,}}\.bin",
                   "megatron": rf"{stem}_\d{{6,}}\.(bin|idx)",
                   "flat": r"ids\.bin|ids\.npy|offsets\.npy"}[self.fmt]
        return name in (META_JSON, PROGRESS) or re.fullmatch(pattern, name) is not None

    def _ours(self) -> list[Path]:
        return sorted(p for p in self.out.iterdir() if p.is_file() and self._is_ours(p.name))

    def _our_tmps(self) -> list[Path]:
        return [p for p in self._ours() if p.name.endswith(".tmp")]

    def _delete_in_background(self, paths: list[Path]) -> None:
        """Move ``paths`` (and folders left by earlier runs) into a fresh
        :data:`REPLACED_PREFIX` folder and delete it on a thread (:meth:`close` waits for it).
        Deleting GBs of shards takes the kernel ~0.1-0.2 s per 200 MB file (their cached pages
        are dropped); renaming them is immediate, so the new run starts at once."""
        import shutil
        import threading

        trash = [p for p in self.out.glob(REPLACED_PREFIX + "*") if p.is_dir()]
        if paths:
            k = 0
            while (self.out / f"{REPLACED_PREFIX}{os.getpid()}-{k}").exists():
                k += 1
            folder = self.out / f"{REPLACED_PREFIX}{os.getpid()}-{k}"
            folder.mkdir()
            trash.append(folder)
            for p in paths:
                try:
                    os.replace(p, folder / p.name)
                except OSError:  # (cannot be moved: deleted here)
                    p.unlink()
        if not trash:
            return

        def delete() -> None:  # the files by 4 threads (the kernel's work per file is serial)
            from concurrent.futures import ThreadPoolExecutor

            files = [f for d in trash for f in d.rglob("*") if not f.is_dir()]
            with ThreadPoolExecutor(4, thread_name_prefix="torch_gpubpe delete") as pool:
                list(pool.map(_unlink_quietly, files))
            for d in trash:
                shutil.rmtree(d, ignore_errors=True)

        self._deleting = threading.Thread(target=delete, daemon=True,
                                          name="torch_gpubpe delete replaced output")
        self._deleting.start()

    def _begin(self, overwrite: bool) -> None:
        existing = self._ours()
        prog = self.out / PROGRESS
        if existing and all(p.name.endswith(".tmp") for p in existing):
            for p in existing:  # only the temporary files of a run that failed: not an output
                p.unlink()
            self._delete_in_background([])
            return
        if existing and overwrite:
            self._delete_in_background(existing)
            return
        self._delete_in_background([])
        if not existing:
            return
        if prog.exists() and self.fmt != "flat":
            state = json.loads(prog.read_text())
            if state.get("fingerprint") != self.fingerprint:
                raise InputError(
                    f"{self.out}: holds an unfinished run with other settings or inputs; pass "
                    "--overwrite to start again, or the same options to continue it")
            self.shards = list(state["shards"])
            self.tokens = int(state["tokens"])
            self.documents = self.resume_documents = int(state["documents"])
            self.resume_tokens = int(state["next_document_tokens"])
            self._skip = self.resume_tokens
            for p in self._our_tmps():
                p.unlink()
            keep = set(self.shards) | {PROGRESS}
            for p in self._ours():
                if p.name not in keep and not p.name.endswith(".idx") or (
                        p.name.endswith(".idx") and p.name[:-4] + ".bin" not in keep):
                    p.unlink()
            return
        shown = ", ".join(p.name for p in existing[:3])
        raise InputError(f"{self.out}: output exists ({shown}{' ...' if len(existing) > 3 else ''});"
                         " pass --overwrite to replace it")

    def _save_progress(self, next_doc_tokens: int) -> None:
        """Record the complete shards — on the flush thread, after the last one is on disk
        (:meth:`_shard_close` queued its fsync there), so the writer never waits for the disk
        and a progress file never names a shard that is not durable."""
        state = {"fingerprint": self.fingerprint, "shards": list(self.shards),
                 "tokens": self.tokens, "documents": self.documents,
                 "next_document_tokens": next_doc_tokens}

        def save() -> None:
            tmp = self.out / (PROGRESS + ".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.out / PROGRESS)

        self._background(save)

    def _background(self, fn) -> None:
        """Run ``fn`` on the flush thread, in order; an earlier failure is raised here."""
        if self._flush_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._flush_pool = ThreadPoolExecutor(1, thread_name_prefix="torch_gpubpe fsync")
        self._check_background(wait=False)
        self._flushing.append(self._flush_pool.submit(fn))

    def wait_flushed(self) -> None:
        """Wait until every complete shard is on disk and in the progress file (``close`` does;
        call it when a run stops early, so that what is on disk can be resumed).

        Raises:
            OSError: flushing a shard or writing the progress file failed.
        """
        self._check_background(wait=True)

    def _check_background(self, wait: bool) -> None:
        while self._flushing and (wait or self._flushing[0].done()):
            self._flushing.pop(0).result()  # re-raises an OSError of the flush thread

    # -- adding batches -------------------------------------------------------------------------
    def add(self, ids: np.ndarray, offsets: np.ndarray, *, eot_included: bool = False) -> None:
        """Add the token ids of consecutive documents: ``ids`` flat, ``offsets`` (int64,
        ``n + 1``) as :class:`~torch_gpubpe.encoding.tokenizer.BatchEncoding` has them.

        ``eot_included``: ``ids`` already hold the end-of-text token where this format puts it
        (llm.c: before every document; the others, when ``eot_id`` is set: after it) and
        ``offsets`` count it — what ``Tokenizer.submit_packed(..., bos_id=/eos_id=)`` returns
        (the GPU puts it in while reading back)."""
        ids = np.asarray(ids)
        offsets = np.asarray(offsets, np.int64)
        if self.fmt == "llmc":
            self._add_llmc(ids, offsets, eot_included)
        else:
            self._add_docs(ids, offsets, eot_included)

    def _add_llmc(self, ids, offsets, eot_included: bool = False) -> None:
        n = len(offsets) - 1
        if eot_included:
            stream, bounds = ids, offsets[:-1]
        else:
            stream = _insert_before(ids, offsets, self.eot, self.dtype)
            bounds = offsets[:-1] + np.arange(n, dtype=np.int64)  # where each [EOT] sits
        if self._skip:  # resuming inside a document: its first tokens are in a complete shard
            stream, bounds = stream[self._skip:], bounds - self._skip
            self._skip = 0
        base = self._stream_docs
        pos, m = 0, len(stream)
        while pos < m:
            take = min(self.shard_tokens - self._buf_tokens, m - pos)
            self._shard_write(stream[pos : pos + take])
            self._buf_tokens += take
            pos += take
            if self._buf_tokens == self.shard_tokens:
                self._flush_llmc()
                if pos == m:
                    done, inside = base + n, 0
                else:  # the document holding stream position pos - 1 .. pos
                    i = int(np.searchsorted(bounds, pos, side="right")) - 1
                    done, inside = base + i, pos - int(bounds[i])
                self.documents = done
                self._save_progress(inside)
        self._stream_docs = base + n

    def _shard_name(self) -> str:
        if self.fmt == "llmc":
            return llmc_shard_name(self.name, len(self.shards))
        return f"{self.name}_{len(self.shards):06d}.bin"

    def _shard_write(self, toks: np.ndarray) -> None:
        """Append ``toks`` to the shard being written (its temporary file, opened on the first
        tokens): streamed to disk batch by batch, no shard-sized buffer in memory."""
        if self._shard_f is None:
            self._shard_f = open(self.out / (self._shard_name() + ".tmp"), "wb")
            self._writeback_from.pop(self._shard_f.name, None)
            if self.fmt == "llmc":  # the header, its token count written when the shard ends
                self._shard_f.write(bytes(4 * LLMC_HEADER_INTS))
        if len(toks):
            t = time.perf_counter()
            self._shard_f.write(_as_bytes(toks.astype(self.dtype, copy=False)))
            self._start_writeback(self._shard_f)
            self.seconds["write"] += time.perf_counter() - t

    def _start_writeback(self, f) -> None:
        """Every :data:`WRITEBACK_BYTES` written, ask the kernel to start writing them to disk
        (``posix_fadvise(DONTNEED)`` starts the writeback without waiting for it; Linux), so
        that the shard's fsync — the last one is on the command's critical path — finds little
        left to write. The call runs on the flush thread, through a duplicate of the file's
        descriptor: it hands the dirty pages to the block layer itself, which halved the
        writing thread's speed where it ran there (2.6 against 4.9 GB/s on the CI VM)."""
        pos = f.tell()
        done = self._writeback_from.get(f.name, 0)
        if pos - done < WRITEBACK_BYTES or not hasattr(os, "posix_fadvise"):
            return
        f.flush()
        fd = os.dup(f.fileno())  # valid after f is closed and renamed

        def advise(fd=fd, start=done, n=pos - done) -> None:
            t = time.perf_counter()
            try:
                os.posix_fadvise(fd, start, n, os.POSIX_FADV_DONTNEED)
            except OSError:  # (a file system without it: the fsync does all the work)
                pass
            finally:
                os.close(fd)
                self.seconds["writeback"] += time.perf_counter() - t

        self._background(advise)
        self._writeback_from[f.name] = pos

    def _shard_close(self, header: bytes = b"") -> str:
        """Finish the shard being written: ``header`` over its first bytes, flushed to disk,
        renamed to its final name (a killed run leaves only complete shards)."""
        if self._shard_f is None:
            self._shard_write(np.zeros(0, self.dtype))
        f, self._shard_f = self._shard_f, None
        if header:
            f.seek(0)
            f.write(header)
        f.close()
        name = self._shard_name()
        final = self.out / name
        os.replace(f.name, final)

        def sync() -> None:
            t = time.perf_counter()
            fd = os.open(final, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self.seconds["fsync"] += time.perf_counter() - t

        self._background(sync)
        return name

    def _flush_llmc(self) -> None:
        header = np.zeros(LLMC_HEADER_INTS, np.int32)
        header[0], header[1] = LLMC_MAGIC[self.dtype.itemsize]
        header[2] = self._buf_tokens
        name = self._shard_close(header.astype("<i4").tobytes())
        self.shards.append(name)
        self.tokens += self._buf_tokens
        self._buf, self._buf_tokens = [], 0

    def _add_docs(self, ids, offsets, eot_included: bool = False) -> None:
        if self.eot is not None and not eot_included:  # appended after each document
            n = len(offsets) - 1
            out = np.empty(len(ids) + n, self.dtype)
            ends = offsets[1:] + np.arange(1, n + 1, dtype=np.int64) - 1
            mask = np.ones(len(out), bool)
            mask[ends] = False
            out[ends] = self.eot
            out[mask] = ids
            ids, offsets = out, offsets + np.arange(n + 1, dtype=np.int64)
        lens = np.diff(offsets)
        if self.fmt == "flat":
            self._buf.append(ids.astype(self.dtype, copy=False))
            self._doc_lens.append(lens)
            self._buf_tokens += len(ids)
            self._flat_write()
            return
        a = 0
        n = len(lens)
        while a < n:
            # documents up to the first end at or after the shard size
            cum = np.cumsum(lens[a:]) + self._buf_tokens
            c = int(np.searchsorted(cum, self.shard_tokens, side="left"))
            b = min(n, a + c + 1)
            self._shard_write(ids[offsets[a] : offsets[b]])
            self._doc_lens.append(lens[a:b])
            self._buf_tokens += int(offsets[b] - offsets[a])
            self.documents += b - a
            a = b
            if self._buf_tokens >= self.shard_tokens:
                self._flush_megatron()

    def _flush_megatron(self) -> None:
        lens = np.concatenate(self._doc_lens) if self._doc_lens else np.zeros(0, np.int64)
        prefix = f"{self.name}_{len(self.shards):06d}"
        ptrs = np.zeros(len(lens), np.int64)
        np.cumsum(lens[:-1] * self.dtype.itemsize, out=ptrs[1:])
        # .idx, then .bin; the progress file, saved after both, says which shards are complete
        hdr = (MEGATRON_HEADER + struct.pack("<Q", 1)
               + struct.pack("<B", MEGATRON_DTYPE_CODES[np.dtype(self.dtype.type)])
               + struct.pack("<Q", len(lens)) + struct.pack("<Q", len(lens) + 1))
        _write_atomic(self.out / f"{prefix}.idx", hdr, lens.astype("<i4"), ptrs.astype("<i8"),
                      np.arange(len(lens) + 1, dtype="<i8"))
        self.shards.append(self._shard_close())
        self.tokens += self._buf_tokens
        self._buf, self._doc_lens, self._buf_tokens = [], [], 0
        self._save_progress(0)

    # -- flat -------------------------------------------------------------------------------------
    def _flat_write(self) -> None:
        if not hasattr(self, "_flat_f"):
            ids_name = "ids.npy" if self.flat_npy else "ids.bin"
            self._flat_path = self.out / ids_name
            self._flat_f = open(self.out / (ids_name + ".tmp"), "wb")
            self._writeback_from.pop(self._flat_f.name, None)
            if self.flat_npy:
                self._flat_f.write(npy_header(self.dtype, 0))
        for b in self._buf:
            self._flat_f.write(_as_bytes(b))
        self._start_writeback(self._flat_f)
        self.tokens += self._buf_tokens
        self._buf, self._buf_tokens = [], 0

    def close(self, meta: dict | None = None, before_meta=None) -> dict:
        """Write what is left (the last shard, the index, ``meta.json``); returns the metadata
        written to ``meta.json``. ``before_meta``: called once every file but ``meta.json`` is
        on disk (the CLI times the close there)."""
        info: dict = {"format": f"torch_gpubpe.{self.fmt}", "version": 1}
        if self.fmt == "llmc":
            if self._buf_tokens or not self.shards:
                self._flush_llmc()
            info.update(shards=self.shards, token_dtype=self.dtype.str, eot_id=self.eot,
                        header_magic=LLMC_MAGIC[self.dtype.itemsize][0],
                        validation_shard=self.shards[0])
        elif self.fmt == "megatron":
            if self._buf_tokens or self._doc_lens or not self.shards:
                self._flush_megatron()
            info.update(prefixes=[s[:-4] for s in self.shards], token_dtype=self.dtype.str,
                        eod_id=self.eot)
        else:
            if not hasattr(self, "_flat_f"):
                self._flat_write()
            f = self._flat_f
            if self.flat_npy:
                f.seek(0)
                f.write(npy_header(self.dtype, self.tokens))
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(f.name, self._flat_path)
            lens = np.concatenate(self._doc_lens) if self._doc_lens else np.zeros(0, np.int64)
            offsets = np.zeros(len(lens) + 1, np.int64)
            np.cumsum(lens, out=offsets[1:])
            np.save(self.out / "offsets.npy", offsets)
            info.update(ids_file=self._flat_path.name, ids_dtype=self.dtype.str,
                        offsets_file="offsets.npy", eos_id=self.eot, num_documents=len(lens))
        info["num_tokens"] = self.tokens
        t = time.perf_counter()
        self._check_background(wait=True)  # every shard on disk before meta.json says done
        self.seconds["wait_fsync_at_close"] = time.perf_counter() - t
        if self._flush_pool is not None:
            self._flush_pool.shutdown()
        if self._deleting is not None:  # the replaced output (--overwrite) is gone
            t = time.perf_counter()
            self._deleting.join()
            self.seconds["wait_delete_at_close"] = time.perf_counter() - t
        if before_meta is not None:
            before_meta()
        info.update(meta or {})
        tmp = self.out / (META_JSON + ".tmp")
        tmp.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.out / META_JSON)
        prog = self.out / PROGRESS
        if prog.exists():
            prog.unlink()
        return info


def npy_header(dtype, n: int, size: int = 128) -> bytes:
    """A .npy v1.0 header of exactly ``size`` bytes for a 1-D array of ``n`` items, so it can be
    written first with a placeholder count and rewritten once the count is known."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (np.dtype(dtype).str, n)
    body = d.ljust(size - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")
