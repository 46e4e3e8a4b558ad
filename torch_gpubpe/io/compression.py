"""Decompressing input files: the compression a file name says (``a.jsonl.gz`` → gzip), and a
binary stream of the decompressed bytes (gzip by ISA-L through python-isal when installed,
else zlib; zstd, lz4 by pyarrow; bz2, xz by the standard library). Part of the reader layer
(DESIGN.md §6, :mod:`torch_gpubpe.io.readers`)."""

from __future__ import annotations

import os

import pyarrow as pa

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError

COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2",
               ".lz4": "lz4", ".xz": "xz"}
"""File-name suffix → the compression it names."""


def split_ext(path: str) -> tuple[str, str | None]:
    """(format extension, compression) of a file name: ``a.JSONL.gz`` → (".jsonl", "gzip")."""
    name = os.path.basename(str(path)).lower()
    comp = None
    for suf, c in COMPRESSION.items():
        if name.endswith(suf):
            name, comp = name[: -len(suf)], c
            break
    return os.path.splitext(name)[1], comp


GZIP_WITHOUT_ISAL = ("torch_gpubpe.io.readers: python-isal is not installed, so .gz files are "
                     "inflated with zlib (pyarrow), 2-4x slower per core than ISA-L (pip install "
                     "isal; stats['gzip_inflate'] says which one ran)")


def isal_igzip():
    """``isal.igzip`` (python-isal: Intel ISA-L's inflate, 2-4x zlib's speed per core, the GIL
    released while it inflates), or ``None`` when it is not installed."""
    try:
        from isal import igzip
    except ImportError:
        return None
    return igzip


ISAL_BUFFERED = ("torch_gpubpe.io.readers: this python-isal's gzip file has no isal_zlib._GzipReader "
                 "under it (written for python-isal 1.x), so .gz chunks are inflated through its "
                 "buffered file (an extra copy with the GIL held; stats['gzip_inflate'] is "
                 "'isal (buffered)')")


def isal_inflater(f):
    """The unbuffered inflater under an ``isal.igzip`` file (``isal_zlib._GzipReader``,
    python-isal 1.x), or ``None`` when this python-isal has none there.

    Its ``readinto`` inflates straight into the caller's buffer with the GIL released. The
    file's own ``readinto`` is io's generic one: ``read`` into a fresh ``bytes`` (allocated and
    faulted in each time), then a copy into the buffer with the GIL held: about a third
    slower per core, and with many files inflated at once beside the threads that feed the
    GPU, that copy holds the GIL longer than anything else the readers do."""
    from isal import isal_zlib  # (only called with python-isal installed: an optional import)

    cls = getattr(isal_zlib, "_GzipReader", None)
    raw = getattr(getattr(f, "_buffer", None), "raw", None)
    return raw if cls is not None and isinstance(raw, cls) else None


class Inflating:
    """An ``isal.igzip`` file whose ``readinto`` goes to its unbuffered inflater (see
    :func:`isal_inflater`); ``read`` and closing go to the file. Use one or the other from
    the start: bytes the file has buffered are not seen by ``readinto``."""

    def __init__(self, f, raw) -> None:
        self._f, self.readinto, self.read = f, raw.readinto, f.read

    def __enter__(self) -> Inflating:
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def close(self) -> None:
        self._f.close()


def open_raw(path: str, stats: dict | None = None):
    """A binary stream of the decompressed bytes of ``path`` (compression from the suffix).

    gzip goes through :mod:`isal.igzip` when python-isal is installed (its ``readinto``
    through the unbuffered inflater, see :func:`isal_inflater`), else through pyarrow's zlib
    (warned once); ``stats["gzip_inflate"]`` is set to ``"isal"``, ``"isal (buffered)"`` (a
    python-isal without that inflater, warned once) or ``"zlib"``."""
    _, comp = split_ext(path)
    if comp is None:
        return open(path, "rb", buffering=0)
    if comp == "gzip":
        igzip = isal_igzip()
        if stats is not None:
            stats["gzip_inflate"] = "zlib" if igzip is None else "isal"
        if igzip is not None:
            f = igzip.open(path, "rb")
            raw = isal_inflater(f)
            if raw is None:
                notices.warn_once(ISAL_BUFFERED, stacklevel=2)
                if stats is not None:
                    stats["gzip_inflate"] = "isal (buffered)"
                return f
            return Inflating(f, raw)
        notices.warn_once(GZIP_WITHOUT_ISAL, stacklevel=2)
    if comp == "xz" or not pa.Codec.is_available(comp):
        import bz2  # (lazy: only the formats pyarrow cannot read import these)
        import gzip
        import lzma

        opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}.get(comp)
        if opener is None:
            raise InputError(f"{path}: {comp} decompression is not available in this pyarrow")
        return opener(path, "rb")
    return pa.input_stream(path, compression=comp)


def read_failed(path: str, e: BaseException) -> InputError:
    comp = split_ext(path)[1]
    how = f"decompressed as {comp}" if comp else "read"
    # an OSError's text ends with the file name, which the message begins with already
    why = e.strerror if isinstance(e, OSError) and e.filename and e.strerror else e
    return InputError(f"{path}: cannot be {how} ({type(e).__name__}: {why})")


def decompress_errors() -> tuple[type[BaseException], ...]:
    """What decompressors raise on corrupt or truncated input (zlib, isal, pyarrow, bz2, lzma)."""
    import lzma
    import zlib

    errs: list[type[BaseException]] = [OSError, EOFError, zlib.error, lzma.LZMAError,
                                       pa.ArrowException]
    igzip = isal_igzip()
    if igzip is not None:
        from isal import isal_zlib

        errs.append(isal_zlib.error)
    return tuple(errs)
