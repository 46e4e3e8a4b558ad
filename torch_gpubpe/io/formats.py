"""Input file formats: the format a file name says (:func:`infer_format`), the paths a pattern
names (:func:`expand_paths`), and the checks that refuse a binary file given as text or JSON
Lines (:func:`looks_binary`). Part of the reader layer (DESIGN.md §6,
:mod:`torch_gpubpe.io.readers`)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence

import numpy as np

from torch_gpubpe.errors import InputError, NotTextError
from torch_gpubpe.io.compression import (COMPRESSION, decompress_errors, open_raw, read_failed,
                                         split_ext)

FORMATS = ("parquet", "arrow", "json", "csv", "text", "binary")
"""File formats the reader knows (``--format``); ``jsonl`` is accepted for ``json``.
``binary`` reads a file's bytes like ``text`` (split by ``sample_by``) without the check that
they look like text (:func:`looks_binary`)."""
TEXT_CHECK_BYTES = 1 << 16
"""How much of each plain-text file (decompressed) :func:`looks_binary` looks at."""
MAX_NUL_SHARE = 1e-3
"""Plain text holds (almost) no NUL bytes; random bytes hold 1/256, UTF-16 text about 1/2."""
MAX_CONTROL_SHARE = 1e-2
"""Share of C0 control bytes other than TAB LF VT FF CR BS ESC (and DEL) above which a file is
not text: random bytes hold 9 %, the shipped corpora at most 0.06 % in any 64 KiB."""
MIN_SUSPECT_BYTES = 8
"""Fewer NUL (or other control) bytes than this never make a file binary: a short text with a
stray NUL is still text (random bytes reach it within a few hundred bytes)."""
SAMPLE_BY = ("line", "paragraph", "document")
"""What one document of a plain-text file is (``sample_by=``, ``--sample-by``)."""
DEFAULT_SAMPLE_BY = "line"

_EXTENSIONS = {
    ".txt": "text", ".text": "text", ".md": "text",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
}
# Leading bytes of binary files that must not be read as text or JSON.
# (Text may hold any bytes: only long or checked signatures; parquet also ends with PAR1.)
_MAGICS = ((b"PAR1", "parquet"), (b"ARROW1\x00\x00", "arrow"), (b"\x1f\x8b\x08", "gzip"),
           (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"), (b"\x04\x22\x4d\x18", "lz4"),
           (b"PK\x03\x04", "zip"), (b"\x7fELF", "ELF executable"), (b"%PDF-", "PDF"),
           (b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF8", "GIF"),
           (b"SQLite format 3\x00", "SQLite"), (b"\x93NUMPY", "numpy .npy"))
# The kinds above said with "an" (their first sound is a vowel: "an ELF", "an xz").
_AN = frozenset({"arrow", "xz", "lz4", "ELF executable", "SQLite"})


def infer_format(path: str) -> str:
    """The format of a file from its name: ``"parquet"``, ``"arrow"``, ``"json"`` (JSON Lines),
    ``"csv"`` or ``"text"``, looking through one compression suffix (``a.jsonl.gz`` → json).

    Raises:
        InputError: an unknown extension (names the file, the formats and ``--format``).
    """
    ext, _ = split_ext(path)
    if ext not in _EXTENSIONS:
        raise InputError(
            f"{path}: cannot tell the file format from the extension {ext or '(none)'!r}; "
            f"pass --format (format=) one of {', '.join(FORMATS)}")
    return _EXTENSIONS[ext]


def normal_format(fmt: str | None) -> str | None:
    if fmt is None or fmt == "auto":
        return None
    fmt = {"jsonl": "json", "ndjson": "json", "txt": "text", "feather": "arrow", "ipc": "arrow",
           "tsv": "csv"}.get(fmt, fmt)
    if fmt not in FORMATS:
        raise InputError(f"unknown file format {fmt!r}; the formats are {', '.join(FORMATS)}")
    return fmt


def expand_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Paths in the given order, each glob pattern expanded (sorted).

    Raises:
        InputError: a file does not exist, a pattern matches nothing, or a path is a folder.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if any(ch in p for ch in "*?["):
            hits = sorted(glob.glob(p, recursive=True))
            if not hits:
                raise InputError(f"data file pattern {p!r} matches no file")
            out += [h for h in hits if os.path.isfile(h)]
        elif not os.path.exists(p):
            raise InputError(f"data file {p!r} does not exist")
        elif not os.path.isfile(p):
            raise InputError(f"data file {p!r} is not a file")
        else:
            out.append(p)
    if not out:
        raise InputError("no data files given")
    return out


def sniff(path: str, fmt: str) -> None:
    """Refuse a binary file given as text or JSON Lines (after decompression)."""
    try:
        with open_raw(path) as f:
            head = f.read(16)
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4))
            tail = f.read(4)
    except decompress_errors() as e:  # (EOFError: a .gz file truncated in its first bytes)
        if split_ext(path)[1]:  # the file, not its format, is the problem
            raise read_failed(path, e) from e
        raise InputError(f"{path}: cannot be read as {fmt} ({type(e).__name__}: {e}); the "
                         f"formats are {', '.join(FORMATS)}") from e
    for magic, kind in _MAGICS + ((re.compile(rb"BZh[1-9]1AY&SY"), "bz2"),):
        hit = magic.match(head) if hasattr(magic, "match") else head.startswith(magic)
        if kind == "parquet":
            hit = hit and tail == b"PAR1" and split_ext(path)[1] is None  # uncompressed
        if hit:
            raise InputError(
                f"{path}: read as {fmt} but it is {'an' if kind in _AN else 'a'} {kind} file; "
                f"name it by its format or pass --format (format=) one of {', '.join(FORMATS)} (compressed files need "
                f"their suffix: {', '.join(sorted(set(COMPRESSION)))})")


_CONTROL = np.zeros(256, bool)
_CONTROL[1:32] = True
_CONTROL[[8, 9, 10, 11, 12, 13, 27]] = False  # BS (overstrike), TAB, LF, VT, FF, CR, ESC (ANSI)
_CONTROL[127] = True


def looks_binary(head: bytes) -> str | None:
    """Why ``head`` (the first :data:`TEXT_CHECK_BYTES` of a file) is not text, or ``None``.

    A deliberately simple check for random or binary bytes given as a ``.txt`` file: the file
    is refused when NUL bytes are at least :data:`MAX_NUL_SHARE` of ``head`` or other C0
    control bytes (not TAB LF VT FF CR, backspace or ESC) at least :data:`MAX_CONTROL_SHARE`,
    and at least :data:`MIN_SUSPECT_BYTES` of them either way.
    UTF-8 text in any script, source code, ANSI-coloured logs and text in 8-bit legacy
    encodings (Latin-1, CP1251: invalid UTF-8 but no control bytes) pass; the message also
    gives the share of bytes that are not valid UTF-8.

    Example::

        >>> looks_binary("çok güzel 😀 الكتاب 中文\\n".encode()) is None
        True
        >>> looks_binary(b"\\x00\\x01" * 100)
        '50.0 % NUL bytes, 50.0 % other control bytes, 0.0 % of the bytes not valid UTF-8'
    """
    if not head:
        return None
    a = np.frombuffer(head, np.uint8)
    n_nul, n_ctrl = int(np.count_nonzero(a == 0)), int(np.count_nonzero(_CONTROL[a]))
    nul, ctrl = n_nul / len(a), n_ctrl / len(a)
    if ((nul < MAX_NUL_SHARE or n_nul < MIN_SUSPECT_BYTES)
            and (ctrl < MAX_CONTROL_SHARE or n_ctrl < MIN_SUSPECT_BYTES)):
        return None
    # bytes not in valid UTF-8 sequences (a sequence cut by the end of head counts as valid)
    valid = len(head.decode("utf-8", "ignore").encode("utf-8"))
    cut = next((k for k in range(1, 4) if len(head) >= k and head[-k] >= 0xC0), 0)
    invalid = max(0, len(head) - valid - cut) / len(head)
    return (f"{100 * nul:.1f} % NUL bytes, {100 * ctrl:.1f} % other control bytes, "
            f"{100 * invalid:.1f} % of the bytes not valid UTF-8")


def check_text(path: str, raw: bytes) -> None:
    why = looks_binary(raw[:TEXT_CHECK_BYTES])
    if why is not None:
        raise NotTextError(
            f"{path}: read as text but it looks like binary data ({why} in its first "
            f"{min(len(raw), TEXT_CHECK_BYTES):,} bytes); to tokenize its bytes as they are, "
            "pass --format binary (format='binary'), or give the bytes "
            "to Tokenizer.encode / encode_batch directly")
