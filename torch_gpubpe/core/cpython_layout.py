"""Where CPython keeps a ``str``'s characters and a ``bytes`` object's buffer, checked at run time:
the object layout the compiled str → UTF-8 packer (:mod:`torch_gpubpe.core.str_pack`) reads
without the GIL, and the addresses :func:`torch_gpubpe.core.copy_pool.copy_parts` copies from.

Why read the objects directly: ``str.encode`` holds the GIL, so a batch of documents encoded by
it is packed by one thread (the host's bottleneck of ``Tokenizer.encode_batch`` and
``train(list_of_str)``). A compact ``str`` (PEP 393) stores ``kind`` (1, 2 or 4) bytes per
character right after its header, which compiled code can read on any thread. The internals
used, each written for **CPython 3.10–3.13** (:data:`WRITTEN_FOR`; 64-bit, little-endian, GIL
build):

=============================  ================================================================
internal                       used for
=============================  ================================================================
``PyASCIIObject.state``        ``kind`` (bits 2–4), ``compact`` (bit 5), ``ascii`` (bit 6), at
(offset 32)                    byte 32 of the object (after refcount, type, length, hash)
data after the header          a compact ``str``'s characters: at byte 48 (ASCII) / 72 (else)
                               on 3.10–3.11 (``wstr`` fields), 40 / 56 on 3.12–3.13
``PyCompactUnicodeObject``     the cached UTF-8 (``utf8_length``, ``utf8``): at 48, 56 on
``.utf8_length``, ``.utf8``    3.10–3.11, at 40, 48 on 3.12–3.13
``PyBytesObject.ob_sval``      a ``bytes`` object's buffer, at byte 32
``PyUnicode_AsUTF8AndSize``,   an ASCII ``str``'s characters (its UTF-8) and a ``bytes``
``PyBytes_AsString``           object's buffer, by address (``ctypes.pythonapi``)
=============================  ================================================================

:func:`check` tests the layout once per process: the interpreter and its version
(:func:`why_not`), then :func:`self_test` on strings of each kind (lengths, hashes, kinds and
characters read from the objects against Python's own view of them). Where it fails (another
interpreter or version, a free-threaded or debug build) the packer encodes each document with
``str.encode`` instead; :mod:`torch_gpubpe.core.str_pack` records and warns once.

Example::

    >>> from torch_gpubpe.core.cpython_layout import check, layout
    >>> check() is None and len(layout())
    4
"""

from __future__ import annotations

import ctypes
import sys
import threading

WRITTEN_FOR = ((3, 10), (3, 11), (3, 12), (3, 13))
LAYOUTS = {(3, 10): (48, 72, 48, 56), (3, 11): (48, 72, 48, 56),
           (3, 12): (40, 56, 40, 48), (3, 13): (40, 56, 40, 48)}
"""Per version: offsets of a compact ASCII ``str``'s data, a compact non-ASCII ``str``'s data,
the cached UTF-8's length and its pointer."""
LENGTH, HASH, STATE = 16, 24, 32   # offsets in a str object
BYTES_DATA = 32                    # offset of a bytes object's buffer (ob_sval)
SAMPLES = ("h\xe9llo w\xf6rld \xff\x00 ", "\u011f\xfc\u015f \u4e2d\u6587 \ufeff\x00 ",
           "\U0001f600 mixed \xe9 \u4e2d \U00010348\x00 ", "\ufeffBOM first \u0100",
           "\U0010ffff\uffff\x80\u07ff\u0800")
"""Non-ASCII text of each kind (NUL, BOM and the UTF-8 length thresholds in it) for self-tests."""
_CODEC = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}   # a kind's characters, as bytes


def _address_functions():
    """CPython's ``PyUnicode_AsUTF8AndSize`` and ``PyBytes_AsString`` through ctypes, typed to
    return addresses; ``(None, None)`` where there is no ``ctypes.pythonapi`` (not CPython)."""
    api = getattr(ctypes, "pythonapi", None)
    if api is None:
        return None, None
    utf8, as_string = api.PyUnicode_AsUTF8AndSize, api.PyBytes_AsString
    utf8.restype = as_string.restype = ctypes.c_void_p
    utf8.argtypes = [ctypes.py_object, ctypes.c_void_p]
    as_string.argtypes = [ctypes.py_object]
    return (lambda t: utf8(t, None)), as_string


str_address, bytes_address = _address_functions()
"""``str_address(s)``: the address of ``s``'s UTF-8 (for a compact ASCII ``str`` its characters,
no copy or cache made); ``bytes_address(b)``: a ``bytes`` object's buffer. None where there is no
``ctypes.pythonapi``."""

_lock = threading.Lock()
_state: dict = {}   # "why": str | None once checked; "layout": the offsets where usable


def why_not() -> str | None:
    """Why the layout of :data:`WRITTEN_FOR` cannot be assumed here (None: it can, pending
    :func:`self_test`)."""
    import sysconfig

    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if sys.version_info[:2] not in LAYOUTS:
        return (f"written for CPython {', '.join('%d.%d' % v for v in WRITTEN_FOR)}, found "
                f"{sys.version_info[0]}.{sys.version_info[1]}")
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded build (another object layout)"
    if hasattr(sys, "gettotalrefcount"):
        return "a debug build (another object layout)"
    if ctypes.sizeof(ctypes.c_void_p) != 8 or sys.byteorder != "little":
        return "not a 64-bit little-endian build"
    if str_address is None:
        return "no ctypes.pythonapi"
    return None


def self_test(offsets: tuple[int, int, int, int]) -> str | None:
    """None when every field reads as expected through ``offsets`` (see :data:`LAYOUTS`) on
    fresh strings of each kind, a cached UTF-8 and a ``bytes`` object, else what differed."""
    asc_off, data_off, len_off, utf8_off = offsets
    for s0 in ("plain ascii text ", *SAMPLES):
        s = (s0 * (1024 // len(s0) + 1))[:1024]   # (a fresh object: nothing cached in it)
        a = id(s)
        hash(s)
        st = ctypes.c_uint32.from_address(a + STATE).value
        kind = 1 if max(s) < "\u0100" else 2 if max(s) < "\U00010000" else 4
        if ctypes.c_ssize_t.from_address(a + LENGTH).value != len(s):
            return f"the length field is not at byte {LENGTH}"
        if ctypes.c_ssize_t.from_address(a + HASH).value != hash(s):
            return f"the hash field is not at byte {HASH}"
        if (st >> 2) & 7 != kind or not (st >> 5) & 1 or (st >> 6) & 1 != s.isascii():
            return f"the state bits read {st:#x} for a str of kind {kind}"
        if s.isascii():
            if str_address(s) != a + asc_off:
                return "an ASCII str's characters are not where expected"
            continue
        if ctypes.c_void_p.from_address(a + utf8_off).value is not None:
            return "a fresh str reads as having a cached UTF-8"
        if ctypes.string_at(a + data_off, kind * len(s)) != s.encode(_CODEC[kind]):
            return f"a kind-{kind} str's characters are not where expected"
    s = SAMPLES[1] * (1024 // len(SAMPLES[1]) + 1)
    cached = str_address(s)   # (PyUnicode_AsUTF8AndSize caches the UTF-8 in the object)
    if ctypes.c_void_p.from_address(id(s) + utf8_off).value != cached:
        return "the cached UTF-8's address is not where expected"
    if ctypes.c_ssize_t.from_address(id(s) + len_off).value != len(s.encode()):
        return "the cached UTF-8's length is not where expected"
    b = b"bytes \xff\x00" * 9
    if bytes_address(b) != id(b) + BYTES_DATA:
        return f"a bytes object's buffer is not at byte {BYTES_DATA}"
    return None


def check() -> str | None:
    """Why the layout is not usable in this process (None: it is); checked at the first call."""
    if "why" in _state:
        return _state["why"]
    with _lock:
        if "why" not in _state:
            why = why_not()
            offsets = None
            if why is None:
                offsets = LAYOUTS[sys.version_info[:2]]
                try:
                    why = self_test(offsets)
                except Exception as e:  # noqa: BLE001 (any failure of the test means: not here)
                    why = f"the self-test raised {type(e).__name__}: {e}"
            _state["layout"] = None if why else offsets
            _state["why"] = why
    return _state["why"]


def layout() -> tuple[int, int, int, int] | None:
    """The checked offsets (ASCII data, non-ASCII data, cached UTF-8 length, cached UTF-8
    pointer), or None where :func:`check` found the layout not usable."""
    check()
    return _state["layout"]


def reset() -> None:
    """Forget the check (tests)."""
    with _lock:
        _state.clear()


__all__ = ["BYTES_DATA", "HASH", "LAYOUTS", "LENGTH", "SAMPLES", "STATE", "WRITTEN_FOR",
           "bytes_address", "check", "layout", "reset", "self_test", "str_address", "why_not"]
