"""JSON Lines files (plain or compressed), a format of
:class:`~torch_gpubpe.io.readers.files.FileReader` (a mixin of it: it uses the reader's
``text_column``, ``threads``, ``chunk_bytes``, ``read_ahead_bytes``, ``stats``, ``_file``,
``_lower_priority`` and ``_missing_column``).

Up to ``threads`` files are decompressed at once, each on a thread of its own, into reused
chunk buffers cut at line ends; the chunks are parsed by ``pyarrow.json`` on the reader's
pool, in order. A chunk pyarrow refuses is parsed line by line with :mod:`json`."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from torch_gpubpe import notices
from torch_gpubpe._util import Pump, ordered
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.arrow_pack import pack_parts
from torch_gpubpe.io.compression import decompress_errors, open_raw, read_failed
from torch_gpubpe.io.formats import sniff
from torch_gpubpe.io.readers.base import Origin


class _BufferPool:
    """Chunk arrays of ``size`` bytes for reuse: a decompressing thread takes one (or makes a
    new one), the chunk's parser gives it back once nothing refers to its bytes (reused
    memory is not faulted in and zeroed by the kernel again). At most ``keep`` arrays wait
    here; more are freed."""

    def __init__(self, size: int, keep: int) -> None:
        self.size, self.keep = size, keep
        self._free: deque = deque()

    def get(self) -> np.ndarray | None:
        try:
            return self._free.pop()
        except IndexError:
            return None

    def put(self, chunk: memoryview) -> None:
        arr = chunk.obj if isinstance(chunk, memoryview) else None
        if (isinstance(arr, np.ndarray) and arr.nbytes == self.size
                and len(self._free) < self.keep):
            self._free.append(arr)


def _rfind_newline(mv: memoryview, lo: int, hi: int) -> int:
    """Index of the last ``\\n`` in ``mv[lo:hi]`` (absolute), or -1; scans back in 64 KiB
    windows (lines are short; a longer one costs a copy of itself)."""
    step = 1 << 16
    b = hi
    while b > lo:
        a = max(lo, b - step)
        k = bytes(mv[a:b]).rfind(b"\n")
        if k >= 0:
            return a + k
        b = a
        step = min(step * 2, 1 << 24)
    return -1


def _count_newlines(data: np.ndarray) -> int:
    """``\\n`` bytes in a uint8 array, 1 MiB at a time (the comparison's mask stays in cache;
    numpy releases the GIL while it compares)."""
    n = 0
    step = 1 << 20
    for a in range(0, len(data), step):
        n += int(np.count_nonzero(data[a : a + step] == 10))
    return n


class JsonLinesFormat:
    """The JSON Lines reader of :class:`~torch_gpubpe.io.readers.files.FileReader`."""

    def _raw_chunks(self, path: str, buffers: _BufferPool | None = None
                    ) -> Iterator[tuple[int, memoryview, int]]:
        """``(first line number, bytes, line ends in them)`` chunks of a (decompressed) file,
        cut after a ``\\n``; into arrays from ``buffers`` (given back by the chunk's parser).

        Raises:
            InputError: the file cannot be decompressed (corrupt or truncated), naming it.
        """
        # Each chunk is decompressed straight into its own buffer (readinto, no GIL held),
        # after the previous chunk's unfinished last line; lines are counted with numpy. The
        # buffers are np.empty (not bytearray: no zero-filling memset under the GIL, and numpy
        # asks for huge pages). (Bytes slicing, joining and counting would hold the GIL for
        # every byte of 16 files at once.) Chunks are memoryviews of those buffers.
        self._lower_priority()  # (this generator runs on its file's own thread)
        tail = b""
        line = 1
        size = self.chunk_bytes
        try:
            with open_raw(path, self.stats) as f:
                while True:
                    want = max(size, 2 * len(tail))
                    buf = buffers.get() if buffers is not None and want == size else None
                    if buf is None:
                        buf = np.empty(want, np.uint8)
                    mv = memoryview(buf)
                    mv[: len(tail)] = tail
                    got = len(tail)
                    while got < len(buf):  # a stream may return less than asked before its end
                        k = f.readinto(mv[got:])
                        if not k:
                            break
                        got += k
                    if got == len(tail):
                        break
                    cut = _rfind_newline(mv, len(tail), got) + 1
                    if cut == 0:  # no line end yet: a longer chunk
                        tail = bytes(mv[:got])
                        continue
                    chunk = mv[:cut]
                    tail = bytes(mv[cut:got])
                    # (counted before it is handed on: its parser may give the array back)
                    nl = _count_newlines(buf[:cut])
                    yield line, chunk, nl
                    line += nl
        except decompress_errors() as e:
            raise read_failed(path, e) from e
        if tail:
            yield line, memoryview(tail), tail.count(b"\n")

    def _files_chunks(self, paths, fmt: str, buffers: _BufferPool | None = None
                      ) -> Iterator[tuple[str, int, memoryview, int]]:
        """Raw chunks ``(path, first line, bytes, line ends in it)`` of ``paths`` in order; up
        to ``threads`` files decompressed at once (into ``buffers``' arrays)."""
        for p in paths:
            sniff(p, fmt)
        live: deque = deque()
        it = iter(paths)

        live_max = min(self.threads, len(paths))
        # Chunks each file may decompress ahead: the files are consumed in order, so without
        # room to run ahead only the first file's thread would work (one core of gzip).
        depth = max(3, self.read_ahead_bytes // max(1, self.chunk_bytes * live_max))
        self.stats["read_ahead_chunks_per_file"] = depth

        def start_next() -> bool:
            p = next(it, None)
            if p is not None:
                live.append((p, Pump(self._raw_chunks(p, buffers), depth,
                                      f"gpubpe-decompress {p}")))
            return p is not None

        start_next()  # the others once the first file gave its first chunk (it is awaited)
        try:
            while live:
                p, pump = live[0]
                for line, chunk, nl in pump:
                    while len(live) < live_max and start_next():
                        pass
                    yield p, line, chunk, nl
                live.popleft()
                start_next()
        finally:
            for _, pump in live:
                pump.close()

    def _jsonl(self, paths, pool, skip):
        buffers = _BufferPool(self.chunk_bytes, 4 * self.threads)

        def tasks():
            t = -1
            for p, line, chunk, nl in self._files_chunks(paths, "JSON Lines", buffers):
                t += line == 1     # only a file's first chunk starts at line 1
                yield (lambda t=t, p=p, line=line, chunk=chunk, nl=nl:
                       (t, self._parse_jsonl(p, line, chunk, nl, buffers)))

        first_chunk: set[str] = set()
        for t, (p, values, origin, lines) in ordered(tasks(), pool, 2 * self.threads):
            self._file = t
            if p not in first_chunk:
                first_chunk.add(p)
                self._check_field_exists(p, values, origin, lines)
            if len(values):
                yield values, origin

    def _check_field_exists(self, p, values, origin, lines) -> None:
        """A file whose first chunk has no row with the field: name the fields it has."""
        if len(values) == 0 or values.null_count < len(values) or origin.bad:
            return
        why = origin.missing(0) if origin.missing else None
        if why is not None:
            obj = json.loads(lines(0)[1])
            keys = list(obj) if isinstance(obj, dict) else []
            raise self._missing_column(f"{p}:{lines(0)[0]}", keys)

    def _parse_jsonl(self, path: str, line0: int, chunk: memoryview, newlines: int,
                     buffers: _BufferPool | None = None):
        """Parse one chunk: ``(path, values, origin, lines)``. ``chunk`` (``newlines`` line
        ends in it) goes back to ``buffers`` once parsed: the batch keeps a copy of its bytes
        only when its rows may need them (null/missing values, blank lines shifting line
        numbers) — else row ``r`` is line ``line0 + r``."""
        try:
            return self._parse_jsonl_chunk(path, line0, chunk, newlines)
        finally:
            if buffers is not None:
                buffers.put(chunk)

    def _parse_jsonl_chunk(self, path: str, line0: int, chunk: memoryview, newlines: int):
        import pyarrow.json as pj  # (lazy: only JSON Lines sources import it)

        col = self.text_column
        schema = pa.schema([(col, pa.large_string())])
        popts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        lines_cache: list = []
        kept: list = [chunk]  # the bytes lines() reads (dropped or copied before returning)

        def lines(r: int) -> tuple[int, bytes | None]:
            """(line number, bytes) of the r-th non-blank line of the chunk."""
            if kept[0] is None:  # no blank lines: row r is line line0 + r (bytes not kept)
                return line0 + r, None
            if not lines_cache:
                lines_cache.append([(line0 + i, ln) for i, ln in
                                    enumerate(bytes(kept[0]).split(b"\n"))
                                    if ln.strip()])
            return lines_cache[0][r]

        def describe(r: int) -> str:
            return f"{path}:{lines(r)[0]}"

        def missing(r: int) -> str | None:
            obj = json.loads(lines(r)[1])
            if isinstance(obj, dict) and col in obj:
                return None
            keys = list(obj) if isinstance(obj, dict) else type(obj).__name__
            return f"no {col!r} field (found {keys})"

        if not bytes(chunk[:4096]).strip() and not bytes(chunk).strip():
            kept[0] = None
            return path, pa.array([], pa.large_binary()), Origin(describe), lines
        try:
            # The chunk as one block on this thread: the reader's pool parses chunks in
            # parallel (Arrow's own threads would only add hand-offs; no line straddles blocks).
            t = pj.read_json(pa.py_buffer(chunk), parse_options=popts,
                             read_options=pj.ReadOptions(use_threads=False,
                                                         block_size=len(chunk) + 1))
            parsed = t.column(0)  # one block: one chunk (combine_chunks would copy it)
            arr = parsed.chunk(0) if parsed.num_chunks == 1 else parsed.combine_chunks()
            arr.validate(full=True)  # pyarrow.json does not check UTF-8; JSON is UTF-8
            n_lines = newlines + (1 if len(chunk) and chunk[-1] != 10 else 0)
            kept[0] = (bytes(chunk) if arr.null_count or len(arr) != n_lines else None)
            return path, arr, Origin(describe, None, missing), lines
        except (UnicodeDecodeError, pa.ArrowException):
            pass
        kept[0] = chunk = bytes(chunk)
        # pyarrow refused the chunk (lone surrogate escapes, a value that is not a string,
        # invalid UTF-8, a broken line): parse it line by line, each row treated as before.
        parts: list[bytes] = []
        valid: list[bool] = []
        bad: dict[int, str] = {}
        miss: dict[int, str] = {}
        for i, ln in enumerate(chunk.split(b"\n")):
            if not ln.strip():
                continue
            r = len(parts)
            try:
                obj = json.loads(ln)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                # (json's own "line 1 column 9" counts within this one line: the column alone)
                why = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else e
                raise InputError(f"{path}:{line0 + i}: not a JSON Lines record ({why})") from e
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{line0 + i}: no {col!r} field (found "
                                 f"{type(obj).__name__}); pass text_column= to name the field "
                                 "holding the text")
            v = obj.get(col)
            if isinstance(v, str):
                parts.append(to_bytes(v))
                valid.append(True)
                continue
            parts.append(b"")
            valid.append(False)
            if col not in obj:
                miss[r] = f"no {col!r} field (found {list(obj)})"
            elif v is not None:
                bad[r] = type(v).__name__
        values = pack_parts(parts, valid)
        # said once the chunk is read, and not for a chunk with non-text values: a broken line's
        # or a bad value's error is the news, not the slower path (still counted)
        self.stats["jsonl_python_chunks"] = self.stats.get("jsonl_python_chunks", 0) + 1
        if not bad:
            notices.warn_once("torch_gpubpe.io.readers: a JSON Lines chunk that pyarrow cannot "
                              "parse (lone surrogate escapes, non-text values, invalid UTF-8) is "
                              "read line by line with the json module (slower; counted in "
                              "stats['jsonl_python_chunks'])", stacklevel=2)
        return path, values, Origin(describe, bad, miss.get), lines
