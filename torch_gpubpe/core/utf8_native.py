"""The compiled half of the str → UTF-8 packer: ``_utf8pack.c`` (beside this file) built on
first use with the system C compiler and loaded with ``ctypes.CDLL`` (which releases the GIL
for each call), cached in ``$XDG_CACHE_HOME/torch_gpubpe`` (default ``~/.cache``) under a
hash of the source, the compiler command and the machine.

Only :mod:`torch_gpubpe.core.str_pack` calls it (with the object layout
:mod:`torch_gpubpe.core.cpython_layout` has checked). Where it cannot be built (no compiler:
``$CC``, else ``cc``, ``gcc``, ``clang``; a read-only cache falls back to a temporary folder),
:func:`library` returns None and :func:`why_not` says why; the caller records that and warns
once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

SOURCE = Path(__file__).with_name("_utf8pack.c")
FLAGS = ["-O3", "-std=c99", "-shared", "-fPIC", "-fvisibility=hidden"]
_lock = threading.Lock()
_state: dict = {}


def c_compiler() -> str | None:
    for c in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if c and shutil.which(c.split()[0]):
            return c
    return None


def _cache_dirs() -> list[Path]:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [Path(base) / "torch_gpubpe", Path(tempfile.gettempdir()) / f"torch_gpubpe-{os.getuid()}"]


def _build(cc: str, flags: list[str] = FLAGS) -> tuple[ctypes.CDLL | None, str | None]:
    src = SOURCE.read_bytes()
    key = hashlib.blake2b(src + " ".join([cc, *flags, platform.machine()]).encode(),
                          digest_size=10).hexdigest()
    errors = []
    for d in _cache_dirs():
        so = d / f"utf8pack-{key}.so"
        if not so.exists():
            try:
                d.mkdir(parents=True, exist_ok=True)
                tmp = d / f".utf8pack-{key}-{os.getpid()}-{threading.get_ident()}.so"
                r = subprocess.run([*cc.split(), *flags, "-o", str(tmp), str(SOURCE)],
                                   capture_output=True, text=True, timeout=120)
                if r.returncode:
                    tmp.unlink(missing_ok=True)
                    return None, f"{cc} failed: {r.stderr.strip()[:300]}"
                os.replace(tmp, so)   # (atomic: another process may build the same)
            except (OSError, subprocess.SubprocessError) as e:
                errors.append(f"{d}: {e}")
                continue
        try:
            lib = ctypes.CDLL(str(so))
        except OSError as e:
            errors.append(f"{so}: {e}")
            continue
        return lib, None
    return None, "; ".join(errors) or "no cache folder"


def _typed(lib: ctypes.CDLL) -> ctypes.CDLL:
    i64, vp, i8p = ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
    lib.gpubpe_scan.argtypes = [i64, vp, ctypes.c_uint64, ctypes.c_uint64, vp, vp, vp, i8p]
    lib.gpubpe_measure.argtypes = [i64, vp, vp, vp, vp]
    lib.gpubpe_encode.argtypes = [i64, vp, vp, vp, vp, i64, vp, vp, i64, i64]
    lib.gpubpe_count_spaces.argtypes = [vp, i64]
    lib.gpubpe_metaspace.argtypes = [vp, vp, i64, i64, vp, vp]
    lib.gpubpe_find_bytes.argtypes = [vp, i64, vp, i64]
    lib.gpubpe_expand_count.argtypes = [vp, i64, i64, i64, vp]
    lib.gpubpe_expand.argtypes = [vp, i64, i64, vp, i64, vp, vp, i64, vp, vp]
    for f in (lib.gpubpe_scan, lib.gpubpe_measure, lib.gpubpe_encode, lib.gpubpe_count_spaces,
              lib.gpubpe_metaspace, lib.gpubpe_find_bytes, lib.gpubpe_expand_count, lib.gpubpe_expand):
        f.restype = i64
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded library (built and cached at the first call), or None (:func:`why_not`)."""
    if "lib" in _state:
        return _state["lib"]
    with _lock:
        if "lib" not in _state:
            lib, why = None, None
            if (cc := c_compiler()) is None:
                why = "no C compiler (set CC, or install cc/gcc/clang)"
            elif not SOURCE.is_file():
                why = f"{SOURCE} is missing (an incomplete install)"
            else:
                lib, why = _build(cc)
            _state["why"] = why
            _state["lib"] = None if lib is None else _typed(lib)
    return _state["lib"]


def build(extra_flags: list[str]) -> ctypes.CDLL:
    """Another build of the library with ``extra_flags`` (e.g. ``-DGPUBPE_NO_SIMD``: the tests
    compare the portable path with the SIMD one). Raises OSError where it cannot be built."""
    cc = c_compiler()
    if cc is None:
        raise OSError("no C compiler")
    lib, why = _build(cc, [*FLAGS, *extra_flags])
    if lib is None:
        raise OSError(why)
    return _typed(lib)


def why_not() -> str | None:
    """Why :func:`library` is None (None when it loaded)."""
    library()
    return _state.get("why")


def reset() -> None:
    """Forget the loaded library (tests)."""
    with _lock:
        _state.clear()
