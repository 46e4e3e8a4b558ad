"""Every wgpu-py / cffi internal torch_gpubpe uses, behind one door.

wgpu-py's public API costs 13–36 µs of host time per dispatch and has no timed wait, no
zero-copy mapped view and no timestamp period (WGPU_NOTES.md §1, §6, §10). The package reaches
past it in a few places; they all live here, each written for **wgpu-py 0.32.x**
(``WRITTEN_FOR``), which is checked when the first device is opened (:func:`check_version`,
called by :class:`~torch_gpubpe.gpu.device.GPU`; ``wgpu`` itself is imported lazily, not with the
package):

========================  =========  ===========================================================
internal                  kind       used for
========================  =========  ===========================================================
``promise._state``,       required   :func:`wait_promise`: a readback waited with a timeout
``promise._thread_event``            (never a hang, DESIGN.md §8)
``"READ_NOSYNC"`` map     speed      :data:`MAP_READ`: a map whose wait does not sync the whole
                                     device (double-buffered readback overlaps; WGPU_NOTES §1)
``_ffi.lib.wgpuCompute-`` speed      :func:`raw_recorder`: 3 native calls per dispatch instead of
``PassEncoder*``,                    wgpu-py's wrappers (the trainer records 64k dispatches)
``obj._internal``
``_ffi.ffi._parser`` …    speed      :func:`preparse_cffi_types`: one pycparser run instead of
                                     one per C type (≈2 s of a fresh process's device open)
``cffi.cparser.Parser``   speed      :func:`cached_header_parse`: the header's parse (≈1 s) restored
                                     from a pickle in ``~/.cache/torch_gpubpe``
``buf._experimental_``    speed      :func:`mapped_array`: a writable numpy view of a mapped
``get_mapped_range``                 buffer (no bytes copy for uploads)
``wgpuQueueGetTimestamp`` speed      :func:`timestamp_period_ns`: ns per timestamp tick
``Period``                           (profiling; 1.0 on every adapter measured)
========================  =========  ===========================================================

On another wgpu-py version a *required* internal raises :class:`WgpuVersionError` (naming the
version to install) when used; a *speed* one is not used: the public path is taken, the
fallback is recorded (:func:`fallbacks`, which the trainer copies into its ``stats``) and a
``RuntimeWarning`` is issued once per internal. Nothing falls back silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from torch_gpubpe import notices
from torch_gpubpe.core import disk_cache
from torch_gpubpe.errors import GPUBPEError

WRITTEN_FOR = (0, 32)   # wgpu-py major.minor these internals were written for (0.32.x)


class WgpuVersionError(GPUBPEError, RuntimeError):
    """The installed wgpu-py is not the version whose internals torch_gpubpe needs."""


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in str(v).split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else -1)
    return tuple(out)


def installed_version() -> str:
    """``wgpu.__version__`` of the installed wgpu-py."""
    import wgpu

    return str(getattr(wgpu, "__version__", "unknown"))


def version_ok() -> bool:
    """Whether the installed wgpu-py is the 0.32.x these internals were written for (read
    each call, so a test can change ``wgpu.__version__``)."""
    return _version_tuple(installed_version()) == WRITTEN_FOR


def check_version() -> bool:
    """Whether wgpu-py is 0.32.x; if not, one ``RuntimeWarning`` saying what will be slower
    (speed-only internals) and what will raise :class:`WgpuVersionError` (required ones)."""
    ok = version_ok()
    if not ok:
        with _lock:
            first = "version" not in _fallbacks
            _fallbacks["version"] = f"wgpu-py {installed_version()}"
        if first:
            notices.warn(
                f"torch_gpubpe was written for wgpu-py {WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.x and "
                f"found {installed_version()}: its speed-only internals are off (slower), and "
                f"GPU waits raise WgpuVersionError; pip install "
                f"'wgpu=={WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.*'", stacklevel=2)
    return ok


_fallbacks: dict[str, str] = {}
_lock = threading.Lock()


def fallbacks() -> dict[str, str]:
    """Speed-only internals not used in this process (name → why): the slower public path
    was taken. Empty on wgpu-py 0.32.x."""
    with _lock:
        return dict(_fallbacks)


def _fallback(name: str, why: str) -> None:
    with _lock:
        first = name not in _fallbacks
        _fallbacks[name] = why
    if first:
        notices.warn(f"torch_gpubpe: {name} unavailable ({why}); using wgpu-py's slower public "
                     f"path (recorded in stats['wgpu_fallbacks'])", stacklevel=3)


def _speed_ok(name: str) -> bool:
    if version_ok():
        return True
    _fallback(name, f"written for wgpu-py {WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.x, "
                    f"found {installed_version()}")
    return False


def reset_fallbacks() -> None:
    """Forget recorded fallbacks and the cached native calls (tests)."""
    with _lock:
        _fallbacks.clear()
    _RAW.clear()


# -- speed: cffi's parse of the header, cached on disk ---------------------------------------------
CFFI_CACHE_MIN_CHARS = 20_000  # only a large cdef (wgpu's header) is cached
_CFFI_STATE = ("_declarations", "_included_declarations", "_anonymous_counter",
               "_int_constants", "_recomplete", "_uses_new_feature", "_inside_extern_python",
               "_partial_length")
cffi_cache_stats: dict = {"loaded": 0, "parsed": 0, "saved": 0, "errors": []}
"""What :func:`cached_header_parse` did in this process: headers restored from the cache,
parsed, written to it; errors met (the header was parsed then)."""


def cffi_cache_dir() -> Path:
    """Where the parse is cached: ``$XDG_CACHE_HOME/torch_gpubpe`` (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_gpubpe"


def _cffi_cache_path(csource: str) -> Path:
    import cffi
    import pycparser

    key = hashlib.sha256("\0".join((csource, cffi.__version__, pycparser.__version__,
                                    sys.version)).encode()).hexdigest()[:24]
    return cffi_cache_dir() / f"cffi-{key}.pickle"


def _cffi_cache_error(e: Exception) -> None:
    why = f"{type(e).__name__}: {e}"
    cffi_cache_stats["errors"].append(why)
    _fallback("cffi header cache", f"{why}; set XDG_CACHE_HOME to a writable folder, or "
                                   "TORCH_GPUBPE_NO_CFFI_CACHE=1")


@contextlib.contextmanager
def cached_header_parse() -> Iterator[None]:
    """While active, a large ``cdef`` into a fresh cffi parser is restored from a disk cache
    (or parsed, then saved there). Not re-entrant; other parses are untouched.

    wgpu-py loads wgpu-native in cffi's in-line ABI mode: importing its backend runs ``cdef``
    on the 108 KB webgpu header, which cffi parses with pycparser — pure Python, under the GIL:
    ≈1 s on a 2-core VM, in every process that opens the GPU (a fixed cost of the ``encode``
    command, paid while the main thread imports pyarrow and loads the vocab). The parse gives
    plain Python objects (``cffi.model`` types in ``Parser._declarations``, a few counters),
    pickled right after the parse — before any C type is built from them — to
    ``cffi_cache_dir()/cffi-<key>.pickle``, the key a hash of the header and of cffi's,
    pycparser's and Python's versions; later processes restore the parser from it (≈10 ms).
    A damaged or unwritable file: parsed as before (same result, the old speed), recorded as a
    fallback (:func:`fallbacks`, warned once). ``TORCH_GPUBPE_NO_CACHE=1``: off (every disk cache).
    """
    if disk_cache.caches_off():
        yield
        return
    import cffi.cparser as cp

    real = cp.Parser.parse

    def parse(self, csource, override=False, packed=False, pack=None, dllexport=False):
        if (override or packed or pack or dllexport or len(csource) < CFFI_CACHE_MIN_CHARS
                or self._declarations):
            return real(self, csource, override, packed, pack, dllexport)
        path = _cffi_cache_path(csource)
        try:
            state = pickle.loads(path.read_bytes())
            if set(state) != set(_CFFI_STATE) or not state["_declarations"]:
                raise ValueError(f"{path}: not a cffi parser state")
            vars(self).update(state)
            cffi_cache_stats["loaded"] += 1
            return None
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - a damaged file / other cffi: parse instead
            _cffi_cache_error(e)
        real(self, csource, override, packed, pack, dllexport)
        cffi_cache_stats["parsed"] += 1
        try:
            blob = pickle.dumps({k: getattr(self, k) for k in _CFFI_STATE}, protocol=4)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, path)
            cffi_cache_stats["saved"] += 1
        except Exception as e:  # noqa: BLE001 - unwritable: parsed every time, as before
            _cffi_cache_error(e)
        return None

    cp.Parser.parse = parse
    try:
        yield
    finally:
        cp.Parser.parse = real


# -- required: timed wait on a GPUPromise ----------------------------------------------------------
def wait_promise(promise, timeout: float | None) -> bool:
    """Wait until ``promise`` (a ``wgpu.GPUPromise``) is settled, at most ``timeout`` seconds
    (None: forever); True when it settled. Its value or error is then taken with the public
    ``promise.sync_wait()``.

    Raises:
        WgpuVersionError: wgpu-py is not 0.32.x, or its promise lacks the internals.
        CallbackInterrupt: a Ctrl-C that a wgpu callback swallowed (since the last wait).
    """
    if not version_ok():
        raise WgpuVersionError(
            f"torch_gpubpe {__package__} needs wgpu-py {WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.x for "
            f"its timed GPU waits, found {installed_version()}: "
            f"pip install 'wgpu=={WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.*'")
    try:
        state = promise._state
        event = promise._thread_event
    except AttributeError as e:
        raise WgpuVersionError(
            f"wgpu-py {installed_version()}'s GPUPromise has no _state/_thread_event: "
            f"pip install 'wgpu=={WRITTEN_FOR[0]}.{WRITTEN_FOR[1]}.*'") from e
    catch_lost_interrupts()
    _raise_lost_interrupt()
    if state != "pending":
        return True
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        # in slices, so that a Ctrl-C a callback swallowed is raised here within a slice
        left = INTERRUPT_CHECK_S if deadline is None else deadline - time.monotonic()
        settled = event.wait(max(0.0, min(left, INTERRUPT_CHECK_S)))
        _raise_lost_interrupt()
        if settled:
            return True
        if left <= INTERRUPT_CHECK_S:
            return False


def promise_settled(promise) -> bool:
    """Whether ``promise`` (a ``wgpu.GPUPromise``) has settled, without waiting."""
    return getattr(promise, "_state", "pending") != "pending"


# A Ctrl-C that arrives while wgpu runs a buffer-map callback on this thread is raised inside
# the callback, where cffi prints and drops it ("Exception ignored from cffi callback"): the map
# never settles and the waiter would sit out the whole timeout. Such an interrupt is kept here
# (sys.unraisablehook) and raised by the next wait, within INTERRUPT_CHECK_S.
INTERRUPT_CHECK_S = 0.2
_LOST_INTERRUPT = threading.Event()


def catch_lost_interrupts() -> None:
    """Put the hook in front of ``sys.unraisablehook`` (again, where another replaced it)."""
    if getattr(sys.unraisablehook, "keeps_lost_interrupts", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _LOST_INTERRUPT.set()   # (raised again by the wait; not printed as ignored)
        else:
            previous(unraisable)

    hook.keeps_lost_interrupts = True
    sys.unraisablehook = hook


class CallbackInterrupt(KeyboardInterrupt):
    """A Ctrl-C that a wgpu callback swallowed, raised by the next wait: the callback did not
    finish, so a buffer map may never settle (the device is to be opened afresh)."""


def _raise_lost_interrupt() -> None:
    if _LOST_INTERRUPT.is_set():
        _LOST_INTERRUPT.clear()
        raise CallbackInterrupt


# -- speed: map mode -------------------------------------------------------------------------------
def map_read_mode() -> str:
    """``"READ_NOSYNC"`` (wgpu-py 0.32's internal mode: the wait polls without a device-wide
    sync, so double-buffered readbacks overlap) or, on another version, ``"READ"``."""
    return "READ_NOSYNC" if _speed_ok("map mode READ_NOSYNC") else "READ"


# -- speed: raw recording of compute dispatches ----------------------------------------------------
_RAW: list = []


class RawRecorder:
    """Records ``set_pipeline + set_bind_group + dispatch`` into a compute pass with three
    native wgpu-native calls each (wgpu-py's wrappers cost 13–36 µs per dispatch). Errors of
    pass commands are deferred by wgpu-native to ``pass.end()`` / ``encoder.finish()``, where
    wgpu-py raises them as usual."""

    def __init__(self, lib, ffi) -> None:
        self._set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        self._set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
        self._dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        self._dispatch_indirect = lib.wgpuComputePassEncoderDispatchWorkgroupsIndirect
        self._null = ffi.NULL

    @staticmethod
    def handle(obj):
        """The native handle of a wgpu-py object (pass, pipeline, bind group, buffer)."""
        return obj._internal

    def plan(self, cp, steps) -> Callable[[int], None]:
        """A function recording ``steps`` ``reps`` times into pass ``cp``; each step is
        ``(pipeline, bind_group, (gx, gy))`` or ``(pipeline, bind_group, (buffer, offset))``
        for an indirect dispatch (a buffer instead of an int as first grid element)."""
        c = cp._internal
        native = []
        for pipe, bg, grid in steps:
            if isinstance(grid[0], int):
                native.append((pipe._internal, bg._internal, None, grid[0], grid[1]))
            else:
                native.append((pipe._internal, bg._internal, grid[0]._internal, grid[1], 0))
        sp, sb, d, di, null = (self._set_pipeline, self._set_bind_group, self._dispatch,
                               self._dispatch_indirect, self._null)

        def record(reps: int) -> None:
            for _ in range(reps):
                for p, b, ind, x, y in native:
                    sp(c, p)
                    sb(c, 0, b, 0, null)
                    if ind is None:
                        d(c, x, y, 1)
                    else:
                        di(c, ind, x)
        return record


class PublicRecorder:
    """:class:`RawRecorder`'s interface through wgpu-py's public (slower) methods."""

    def plan(self, cp, steps) -> Callable[[int], None]:
        def record(reps: int) -> None:
            for _ in range(reps):
                for pipe, bg, grid in steps:
                    cp.set_pipeline(pipe)
                    cp.set_bind_group(0, bg)
                    if isinstance(grid[0], int):
                        cp.dispatch_workgroups(grid[0], grid[1], 1)
                    else:
                        cp.dispatch_workgroups_indirect(grid[0], grid[1])
        return record


def raw_recorder() -> RawRecorder | PublicRecorder:
    """The native dispatch recorder on wgpu-py 0.32.x, else the public one (recorded in
    :func:`fallbacks`, warned once)."""
    if _RAW:
        return _RAW[0]
    rec: RawRecorder | PublicRecorder
    if _speed_ok("raw dispatch recording"):
        try:
            from wgpu.backends.wgpu_native._ffi import ffi, lib

            rec = RawRecorder(lib, ffi)
        except (ImportError, AttributeError) as e:
            _fallback("raw dispatch recording", f"wgpu-native calls missing: {e}")
            rec = PublicRecorder()
    else:
        rec = PublicRecorder()
    _RAW.append(rec)
    return rec


# -- speed: mapped view, timestamp period, cffi types ------------------------------------
def mapped_array(buffer):
    """A writable ``uint8`` numpy view of ``buffer``'s whole mapped range (mapped for
    writing), or None where wgpu-py has no such view (then write with ``write_mapped``)."""
    import numpy as np

    if _speed_ok("zero-copy mapped range"):
        get = getattr(buffer, "_experimental_get_mapped_range", None)
        if get is not None:
            return np.frombuffer(get(), np.uint8)
        _fallback("zero-copy mapped range", "GPUBuffer._experimental_get_mapped_range missing")
    return None


def timestamp_period_ns(queue) -> float:
    """Nanoseconds per timestamp tick of ``queue`` (wgpu-py does not wrap it); 1.0 (the value
    on every adapter measured, WGPU_NOTES.md §6) where the call is unavailable."""
    if _speed_ok("timestamp period"):
        try:
            from wgpu.backends.wgpu_native._ffi import lib

            return float(lib.wgpuQueueGetTimestampPeriod(queue._internal))
        except (ImportError, AttributeError) as e:
            _fallback("timestamp period", f"wgpuQueueGetTimestampPeriod missing: {e}")
    return 1.0


# The C types wgpu-py asks cffi for while this package opens a device, compiles pipelines,
# trains, encodes and profiles (harvested from ``ffi._parsed_types`` after such a run, wgpu 0.32).
CFFI_TYPES = (
    "WGPUAdapterInfo *", "WGPUBindGroupDescriptor *", "WGPUBindGroupEntry *",
    "WGPUBindGroupEntry[]", "WGPUBufferDescriptor *", "WGPUBufferMapCallbackInfo *",
    "WGPUChainedStruct *", "WGPUChainedStruct * ", "WGPUCommandBufferDescriptor *",
    "WGPUCommandBuffer[]", "WGPUCommandEncoderDescriptor *", "WGPUComputePassDescriptor *",
    "WGPUComputePipelineDescriptor *", "WGPUComputeState *", "WGPUConstantEntry *",
    "WGPUConstantEntry[]", "WGPUDeviceDescriptor *", "WGPUDeviceExtras *",
    "WGPUDeviceLostCallbackInfo *", "WGPUFeatureName[]", "WGPUInstanceDescriptor *",
    "WGPUInstanceExtras *", "WGPULimits *", "WGPUNativeLimits *", "WGPUPassTimestampWrites *",
    "WGPUQuerySetDescriptor *", "WGPUQueueDescriptor *", "WGPURequestAdapterCallbackInfo *",
    "WGPURequestAdapterOptions *", "WGPURequestDeviceCallbackInfo *",
    "WGPUShaderModuleDescriptor *", "WGPUShaderSourceWGSL *", "WGPUStringView *",
    "WGPUUncapturedErrorCallbackInfo *", "char []", "intptr_t", "uint32_t []", "uint8_t *",
    "uint8_t []", "uintptr_t",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "void(WGPULogLevel, WGPUStringView, void *)",
    "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)",
    "void(WGPURequestAdapterStatus, WGPUAdapter, WGPUStringView, void *, void *)",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
)


def preparse_cffi_types() -> None:
    """Parse the C types wgpu-py will need in one pycparser run instead of one run each.

    wgpu-py builds its structs with ``ffi.new("WGPU... *")`` in cffi's ABI mode, and cffi
    parses each new type string with pycparser, re-reading a typedef for every name of the
    ~440 of the webgpu header each time: ≈40–85 ms per type, under the GIL, ≈2–3 s for the
    first device open and training (cProfile of ``get_gpu()``; docs/PERFORMANCE.md). Parsing them all in one run fills the same cache (``ffi._parsed_types``, the
    values ``ffi.typeof`` would store). On another wgpu-py version, or if cffi's internals
    differ, nothing is cached (recorded, warned once) and cffi parses lazily.
    """
    if not _speed_ok("cffi type pre-parse"):
        return
    try:
        with cached_header_parse():  # the backend's import parses the header (≈1 s): cached
            from wgpu.backends.wgpu_native._ffi import ffi

        with ffi._lock:
            todo = [c for c in CFFI_TYPES if c not in ffi._parsed_types]
            if not todo:
                return
            parser = ffi._parser
            src = "\n".join(f"void __gpubpe_t{i}(\n{c}\n);" for i, c in enumerate(todo))
            ast = parser._parse(src)[0]
            decls = ast.ext[-len(todo):]
            parsed = {}
            for c, d in zip(todo, decls):
                if d.name != f"__gpubpe_t{len(parsed)}":
                    raise ValueError(f"unexpected declaration {d.name!r}")
                tp, _quals = parser._get_type_and_quals(d.type.args.params[0].type)
                really_function = tp.is_raw_function
                if really_function:
                    tp = tp.as_function_pointer()
                parsed[c] = (ffi._get_cached_btype(tp), really_function)
            ffi._parsed_types.update(parsed)
    except Exception as e:  # noqa: BLE001 - cffi internals differ: it parses lazily instead
        _fallback("cffi type pre-parse", f"{type(e).__name__}: {e}")
