"""Plain-text (and ``--format binary``) files, a format of
:class:`~torch_gpubpe.io.readers.files.FileReader` (a mixin of it: it uses the reader's
``sample_by``, ``threads``, ``chunk_bytes``, ``stats`` and ``_file``): the bytes as they are,
split by line, paragraph or not at all."""

from __future__ import annotations

import numpy as np

from torch_gpubpe._util import ordered
from torch_gpubpe.io.arrow_pack import packed_to_arrow
from torch_gpubpe.io.compression import decompress_errors, open_raw, read_failed
from torch_gpubpe.io.formats import check_text, sniff
from torch_gpubpe.io.readers.base import Origin


class PlainTextFormat:
    """The plain-text reader of :class:`~torch_gpubpe.io.readers.files.FileReader`."""

    def _text(self, paths, pool, skip, check: bool = True):
        if check:  # format "binary": the bytes as they are, unchecked
            for p in paths:
                sniff(p, "text")

        def read(p):
            try:
                with open_raw(p, self.stats) as f:
                    raw = f.read()
            except decompress_errors() as e:
                raise read_failed(p, e) from e
            if check:
                check_text(p, raw)
            return p, raw

        tasks = ((lambda p=p: read(p)) for p in paths)
        for t, (p, raw) in enumerate(ordered(tasks, pool, self.threads)):
            self._file = t
            data = np.frombuffer(raw, np.uint8)
            if self.sample_by == "document":
                offsets = np.array([0, len(data)], np.int64)
                yield packed_to_arrow(data, offsets), Origin(lambda j, p=p: p)
                continue
            if self.sample_by == "line":
                # each line with its "\n" (as io.BytesIO(raw).readlines()); no empty last piece
                ends = (np.flatnonzero(data == 10) + 1).astype(np.int64)
                if len(data) and (not len(ends) or ends[-1] != len(data)):
                    ends = np.append(ends, len(data))
                offsets = np.concatenate([np.zeros(1, np.int64), ends])
                arr = packed_to_arrow(data, offsets)
            else:
                starts, stops = _paragraphs(data)
                lens = stops - starts
                offsets = np.zeros(len(starts) + 1, np.int64)
                np.cumsum(lens, out=offsets[1:])
                arr = packed_to_arrow(data[_ranges(starts, lens)], offsets)
            n = len(arr)
            a = 0
            while a < n:  # batches of about chunk_bytes (zero-copy slices)
                b = int(np.searchsorted(offsets, offsets[a] + self.chunk_bytes, side="left"))
                b = min(max(b, a + 1), n)
                if self.sample_by == "line":
                    desc = (lambda j, p=p, base=a: f"{p}:{base + j + 1}")
                else:
                    desc = (lambda j, p=p, base=a: f"{p}:paragraph {base + j}")
                yield arr.slice(a, b - a), Origin(desc)
                a = b


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + l)`` for each (s, l), vectorised."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lens)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lens - starts, lens)


def _paragraphs(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the pieces of ``data`` between ``b"\\n\\n"`` separators (found left
    to right, non-overlapping, as ``bytes.split(b"\\n\\n")``), empty pieces dropped."""
    n = len(data)
    nl = data == 10
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # runs of consecutive newlines
    d = np.diff(np.concatenate([[0], nl.view(np.int8), [0]]))
    run_s = np.flatnonzero(d == 1)
    run_e = np.flatnonzero(d == -1)
    run_l = run_e - run_s
    pairs = run_l // 2  # separators in each run, at run_s, run_s + 2, ...
    sep = _ranges(run_s, pairs) if pairs.sum() else np.zeros(0, np.int64)
    # _ranges gives run_s + 0, 1, ...: separators sit at even steps
    if len(sep):
        step = np.arange(len(sep)) - np.repeat(np.cumsum(pairs) - pairs, pairs)
        sep = np.repeat(run_s, pairs) + 2 * step
    starts = np.concatenate([[0], sep + 2]).astype(np.int64)
    ends = np.concatenate([sep, [n]]).astype(np.int64)
    keep = ends > starts
    return starts[keep], ends[keep]
