"""The GPU device layer: one lazily created wgpu device per process.

* Never created at import; created by the first :func:`get_gpu` call.
* Adapter: high-performance first; ``TORCH_GPUBPE_ADAPTER`` forces one (a case-insensitive
  substring of its backend, type, name or vendor: ``vulkan``, ``cpu``, ``llvmpipe``, ``nvidia``).
  OpenGL (llvmpipe or a GPU's GL driver: exact, no subgroups) is the last resort, warned once;
  no adapter at all is a :class:`~torch_gpubpe.errors.NoAdapterError` that names the command to
  install Mesa's lavapipe (``python -m torch_gpubpe doctor`` shows the details).
* ``XDG_RUNTIME_DIR`` gets a private default before wgpu loads Mesa (:func:`ensure_runtime_dir`).
* The adapter's real limits are requested (storage binding, buffer size, workgroup storage), not
  WebGPU's defaults.
* The ``subgroup`` feature is used where present (``TORCH_GPUBPE_NO_SUBGROUPS=1`` turns it off for
  testing); the subgroup size is read from ``@builtin(subgroup_size)`` by a probe kernel, as
  ``adapter.info`` is wrong about it (WGPU_NOTES.md §0.7).
* Fork (DESIGN.md §8): a process forked after its parent touched the GPU cannot use it; that
  raises :class:`~torch_gpubpe.errors.GPUForkError` instead of hanging.
* Shader modules and pipelines are compiled once and cached; workgroup memory is checked against
  the adapter's limit before a pipeline is created (wgpu does not check it, and a device past it can hang).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.errors import GPUForkError, GPUOperationError, NoAdapterError
from torch_gpubpe.gpu.adapters import ENV_ADAPTER, pick_adapter, requested_adapter
from torch_gpubpe.gpu.shaders import shader_source

ENV_NO_SUBGROUPS = "TORCH_GPUBPE_NO_SUBGROUPS"
ENV_TIMEOUT = "TORCH_GPUBPE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
MAX_WORKGROUPS_PER_DIM = 65535
COMPILE_THREADS = 8
"""Most pipelines :meth:`GPU.compile_pipelines` creates at once."""

_lock = threading.RLock()
_gpu: GPU | None = None
_touched_pid: int | None = None  # pid of the process that first touched wgpu adapters


def _mark_touched() -> None:
    global _touched_pid
    if _touched_pid is None:
        _touched_pid = os.getpid()


def touched_pid() -> int | None:
    """The pid of the process that first opened a wgpu adapter in this interpreter (a forked
    child inherits its parent's), or None when none has: then ``fork`` is safe."""
    return _touched_pid


def check_fork() -> None:
    """Raise :class:`GPUForkError` when this process is a fork of one that had opened the GPU."""
    if _touched_pid is not None and _touched_pid != os.getpid():
        raise GPUForkError(
            f"this process (pid {os.getpid()}) was forked from pid {_touched_pid} after that "
            "process had opened the GPU; wgpu cannot be used across fork() (DESIGN.md §8). "
            "Use the 'spawn' or 'forkserver' start method (torch_gpubpe.integrations.torch_data.make_dataloader does), "
            "or run the GPU work in the main process (DataLoader num_workers=0)."
        )


_check_fork = check_fork  # the name this module's callers (and tests) use


def timeout_s() -> float:
    """Seconds to wait for a GPU readback before raising (env ``TORCH_GPUBPE_TIMEOUT``, default
    600; ``inf`` waits forever).

    Raises:
        ValueError: the variable is set to something other than a positive number of seconds.
    """
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:  # also NaN
        raise ValueError(f"{ENV_TIMEOUT}={raw!r} is not a positive number of seconds "
                         f"(e.g. {ENV_TIMEOUT}=600, or inf to wait forever)")
    return value


def describe_adapter(adapter) -> str:
    """``"<device> (<adapter type>, <backend>)"`` of a wgpu adapter (``doctor``'s list)."""
    i = adapter.info
    return f"{i.get('device', '?')} ({i.get('adapter_type', '?')}, {i.get('backend_type', '?')})"


_describe = describe_adapter  # the name this module's callers use


def ensure_runtime_dir() -> str:
    """Give Mesa a valid ``XDG_RUNTIME_DIR`` before wgpu loads a driver.

    On a headless root shell the variable is unset, and Mesa (lavapipe, llvmpipe) prints
    ``error: XDG_RUNTIME_DIR is invalid or not set`` twice at every adapter request. When it is
    unset or not a directory, a private one (mode 0700, ``<tmp>/torch_gpubpe-runtime-<uid>``) is
    created and set for this process. Returns the directory in use.
    """
    cur = os.environ.get("XDG_RUNTIME_DIR", "")
    if cur and os.path.isdir(cur):
        return cur
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"torch_gpubpe-runtime-{uid}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = path
    return path


def _os_release() -> dict[str, str]:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            pairs = (line.rstrip("\n").split("=", 1) for line in f if "=" in line)
            return {k: v.strip('"') for k, v in pairs}
    except OSError:
        return {}


def _package_commands(packages: dict[str, list[str]]) -> list[list[str]]:
    """The commands (argv lists) that install ``packages[family]`` with this Linux
    distribution's package manager (families: debian, fedora, arch, suse, alpine; ``sudo``
    added when not root); empty where unknown."""
    import sys

    if not sys.platform.startswith("linux"):
        return []
    rel = _os_release()
    family = f"{rel.get('ID', '')} {rel.get('ID_LIKE', '')}"
    sudo = [] if hasattr(os, "geteuid") and os.geteuid() == 0 else ["sudo"]
    if any(k in family for k in ("debian", "ubuntu")):
        return [sudo + ["apt-get", "update"],
                sudo + ["apt-get", "install", "-y", "--no-install-recommends",
                        *packages["debian"]]]
    if any(k in family for k in ("fedora", "rhel", "centos")):
        return [sudo + ["dnf", "install", "-y", *packages["fedora"]]]
    if "arch" in family:
        return [sudo + ["pacman", "-S", "--noconfirm", *packages["arch"]]]
    if "suse" in family:
        return [sudo + ["zypper", "install", "-y", *packages["suse"]]]
    if "alpine" in family:
        return [sudo + ["apk", "add", *packages["alpine"]]]
    return []


def install_commands() -> list[list[str]]:
    """The commands (argv lists) that install Mesa's lavapipe and the Vulkan loader on this
    Linux distribution (``sudo -n`` added when not root); empty where unknown."""
    return _package_commands({
        "debian": ["mesa-vulkan-drivers", "libvulkan1"],
        "fedora": ["mesa-vulkan-drivers", "vulkan-loader"],
        "arch": ["vulkan-swrast", "vulkan-icd-loader"],
        "suse": ["libvulkan_lvp", "libvulkan1"],
        "alpine": ["mesa-vulkan-swrast", "vulkan-loader"]})


def compiler_install_commands() -> list[list[str]]:
    """The commands (argv lists) that install a C compiler on this Linux distribution (for
    the str → UTF-8 packer, :mod:`torch_gpubpe.core.str_pack`, built on first use); empty where
    unknown."""
    return _package_commands({"debian": ["gcc", "libc6-dev"], "fedora": ["gcc"],
                              "arch": ["gcc"], "suse": ["gcc"], "alpine": ["gcc", "musl-dev"]})


def install_hint() -> str:
    """The command line that installs a software Vulkan device (Mesa's lavapipe) here."""
    import sys

    if sys.platform == "darwin":
        return "macOS has Metal: update wgpu (`pip install -U 'wgpu>=0.32,<0.33'`)"
    if sys.platform == "win32":
        return "install your GPU vendor's driver (D3D12/Vulkan); WARP ships with Windows 10+"
    cmds = install_commands()
    if not cmds:
        return "install Mesa's Vulkan drivers (lavapipe) and the Vulkan loader (libvulkan.so.1)"
    return " && ".join(" ".join(c) for c in cmds)


def no_adapter_message(detail: str = "") -> str:
    """The text of :class:`NoAdapterError` when wgpu finds no adapter: what is missing and the
    exact command that fixes it (a few lines)."""
    import ctypes.util

    missing, hidden = [], []
    for var in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):
        files = [f for f in os.environ.get(var, "").split(os.pathsep) if f]
        if files and not any(os.path.exists(f) for f in files):
            hidden.append(f"{var}={os.environ[var]}")
    if ctypes.util.find_library("vulkan") is None:
        missing.append("the Vulkan loader (libvulkan.so.1)")
    icd_dirs = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
    if not any(os.path.isdir(d) and os.listdir(d) for d in icd_dirs):
        missing.append("a Vulkan driver (no ICD file in /usr/share/vulkan/icd.d)")
    lines = ["no GPU adapter: wgpu found no Vulkan, Metal or D3D12 device"
             + (f"; missing: {', '.join(missing)}" if missing else "") + "."]
    if hidden:  # drivers are installed, but the environment points the loader elsewhere
        lines.append(f"The environment sends the Vulkan loader to files that do not exist "
                     f"({', '.join(hidden)}): unset it.")
    if missing or not hidden:
        lines += ["On a machine without a GPU, Mesa's lavapipe (Vulkan on the CPU: slow, but "
                  "exact) works; `python -m torch_gpubpe doctor --install` installs it, or run:",
                  f"    {install_hint()}"]
    lines.append("Then check with: python -m torch_gpubpe doctor")
    if detail:
        lines.append(f"({' '.join(detail.split())[:400]})")
    return "\n".join(lines)


_warned: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        notices.warn(msg, stacklevel=3)


def adapter_rank(info: Mapping[str, Any]) -> int:
    """Preference of an adapter (lower is better): a real GPU before a CPU device, and OpenGL
    (no subgroups, fewer limits) only as the last resort."""
    backend = str(info.get("backend_type", "")).lower()
    kind = str(info.get("adapter_type", "")).lower()
    gl = "gl" in backend
    kind_rank = {"discretegpu": 0, "integratedgpu": 1, "virtualgpu": 2, "cpu": 3}.get(
        kind.replace(" ", "").replace("_", ""), 2)
    return (10 if gl else 0) + kind_rank


def _pick_adapter(wgpu):
    """The adapter to open: ``TORCH_GPUBPE_ADAPTER``'s match, else the best of
    :func:`adapter_rank`. OpenGL is used only when nothing else exists, and said once.

    Raises:
        NoAdapterError: no adapter, or none matches ``TORCH_GPUBPE_ADAPTER`` (both name the fix).
    """
    want = requested_adapter().lower()
    if want.startswith(("#", "uuid:", "pci:")) or (
            not want and os.environ.get("LOCAL_RANK", "").strip()):
        return pick_adapter(wgpu)   # by index/UUID/PCI, or the GPU of LOCAL_RANK
    if not want:
        try:  # the fast path (≈0.2 s; enumerating every backend costs up to ≈0.9 s)
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        except Exception:  # noqa: BLE001 - wgpu 0.32 raises RuntimeError when it finds none
            adapter = None
        if adapter is not None and adapter_rank(adapter.info) < 10:
            return adapter
    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as e:  # noqa: BLE001 - wgpu raises a bare RuntimeError for "no adapter"
        raise NoAdapterError(no_adapter_message(f"wgpu: {e}")) from e
    if want:
        for a in adapters:
            i = a.info
            hay = " ".join(
                str(i.get(k, "")) for k in ("backend_type", "adapter_type", "device", "vendor")
            ).lower()
            if want in hay:
                return a
        raise NoAdapterError(
            f"{ENV_ADAPTER}={want!r} matches no adapter; available: "
            + ("; ".join(_describe(a) for a in adapters) or "none")
            + " (python -m torch_gpubpe doctor lists them)"
        )
    if not adapters:
        raise NoAdapterError(no_adapter_message())
    best = min(adapters, key=lambda a: adapter_rank(a.info))
    if adapter_rank(best.info) >= 10:
        _warn_once("gl", f"torch_gpubpe: no Vulkan, Metal or D3D12 device; using the OpenGL "
                         f"adapter {_describe(best)} as the last resort (exact, no subgroups, "
                         f"slower). For lavapipe: {install_hint()}")
    return best


class GPU:
    """An opened device with its limits, features and a pipeline cache.

    Attributes:
        device: the ``wgpu.GPUDevice``.
        adapter_name: human-readable adapter description.
        has_subgroups: whether subgroup builtins are used.
        subgroup_size: lanes per subgroup (0 when subgroups are off).
        has_timestamps: whether the ``timestamp-query`` feature is enabled.
        max_storage_binding: max bytes of one storage-buffer binding.
        max_buffer_size: max bytes of one buffer.
        max_workgroup_storage: max bytes of ``var<workgroup>`` per pipeline.
    """

    def __init__(self) -> None:
        _check_fork()
        _mark_touched()
        ensure_runtime_dir()
        from torch_gpubpe.gpu.wgpu_internals import catch_lost_interrupts

        catch_lost_interrupts()   # (before any callback of this device can run)
        t = time.perf_counter()
        #: Seconds each step of opening took: import (wgpu), adapter (enumerating and picking
        #: one), device (request_device), probe (the subgroup-size probe's pipeline and run).
        self.open_seconds: dict[str, float] = {}
        try:
            import wgpu
        except ImportError as e:  # pragma: no cover - wgpu is a dependency
            raise NoAdapterError("the `wgpu` package is not installed: "
                                 "pip install 'wgpu>=0.32,<0.33'") from e
        from torch_gpubpe.gpu import wgpu_internals as wi

        wi.check_version()
        self.wgpu = wgpu
        self.pid = os.getpid()
        wi.preparse_cffi_types()
        self.open_seconds["import"] = time.perf_counter() - t
        t = time.perf_counter()
        adapter = _pick_adapter(wgpu)
        self.open_seconds["adapter"] = time.perf_counter() - t
        t = time.perf_counter()
        self.adapter = adapter
        self.adapter_name = _describe(adapter)
        self.adapter_info = dict(adapter.info)
        self.backend = str(self.adapter_info.get("backend_type", ""))
        self.is_fallback = adapter_rank(self.adapter_info) >= 10  # OpenGL as the last resort
        # A CPU adapter (lavapipe, llvmpipe): host memory for buffers, one submit at a time,
        # and loops stopped at 65,535 iterations (WGPU_NOTES.md §5).
        self.is_cpu = "cpu" in str(self.adapter_info.get("adapter_type", "")).lower()
        feats = set(adapter.features)
        want = []
        use_sg = "subgroup" in feats and os.environ.get(ENV_NO_SUBGROUPS, "") not in ("1", "true")
        if use_sg:
            want.append("subgroup")
        if "timestamp-query" in feats:
            want.append("timestamp-query")
        limits = dict(adapter.limits)
        keep = (
            "max-storage-buffer-binding-size",
            "max-buffer-size",
            "max-compute-workgroup-storage-size",
            "max-compute-invocations-per-workgroup",
            "max-compute-workgroup-size-x",
            "max-storage-buffers-per-shader-stage",
        )
        try:
            self.device = adapter.request_device_sync(
                label="torch_gpubpe",
                required_features=want,
                required_limits={k: limits[k] for k in keep if k in limits},
            )
        except Exception as e:
            if self.is_fallback:  # e.g. a GL driver without compute shaders (NVIDIA's EGL)
                raise NoAdapterError(no_adapter_message(
                    f"the only adapter, OpenGL {self.adapter_name}, cannot open a compute "
                    f"device: {e}")) from e
            raise NoAdapterError(f"could not open a device on {self.adapter_name}: {e}") from e
        self.open_seconds["device"] = time.perf_counter() - t
        t = time.perf_counter()
        self.has_timestamps = "timestamp-query" in want
        self.limits = dict(self.device.limits)
        self.max_storage_binding = int(self.limits["max-storage-buffer-binding-size"])
        self.max_buffer_size = int(self.limits["max-buffer-size"])
        self.max_workgroup_storage = int(self.limits["max-compute-workgroup-storage-size"])
        self.has_subgroups = use_sg
        self._modules: dict[tuple, Any] = {}
        self._pipelines: dict[tuple, Any] = {}
        self.lost = False
        # wgpu only logs device loss (WGPU_NOTES.md §9): watch its logger to know when to reopen.
        self._loss_handler = _LossHandler(self)
        logging.getLogger("wgpu").addHandler(self._loss_handler)
        self.subgroup_size = self._probe_subgroup_size() if use_sg else 0
        self.open_seconds["probe"] = time.perf_counter() - t

    # -- shaders and pipelines ---------------------------------------------------------------
    @property
    def flags(self) -> frozenset[str]:
        return frozenset({"SUBGROUPS"} if self.has_subgroups else set())

    def module(self, name: str, source: str | None = None):
        """Compiled shader module ``common.wgsl + name.wgsl`` (or ``source``), cached."""
        key = (name, source)
        if key not in self._modules:
            code = source if source is not None else shader_source(name, self.flags)
            with self.operation(f"compiling shader {name!r}"):
                self._modules[key] = self.device.create_shader_module(label=name, code=code)
        return self._modules[key]

    def pipeline(
        self,
        name: str,
        entry_point: str,
        *,
        workgroup_bytes: int | None = None,
        constants: Mapping[str, float] | None = None,
        source: str | None = None,
    ):
        """Compute pipeline for ``entry_point`` of shader ``name``, compiled once and cached.

        The bytes of ``var<workgroup>`` the entry point reaches (with these override
        ``constants``) are read from the WGSL (:func:`~torch_gpubpe.gpu.shaders.parse_wgsl`) and
        checked against the adapter limit here, because wgpu does not check it and a device
        hangs when it is exceeded (WGPU_NOTES.md §0.4).

        Args:
            workgroup_bytes: deprecated hand count; the larger of it and the parsed size is
                checked.
        Raises:
            ValueError: the workgroup memory is above the adapter's workgroup-storage limit.
        """
        from torch_gpubpe.gpu.shaders import parse_wgsl

        consts = dict(sorted((constants or {}).items()))
        key = (name, source, entry_point, tuple(consts.items()))
        if key not in self._pipelines:
            code = source if source is not None else shader_source(name, self.flags)
            try:
                need = parse_wgsl(code).workgroup_bytes(entry_point, dict(consts))
            except KeyError as e:
                raise GPUOperationError(f"creating pipeline {name}.{entry_point} failed: "
                                        f"{e.args[0]}") from e
            workgroup_bytes = max(need, workgroup_bytes or 0)
            if workgroup_bytes > self.max_workgroup_storage:
                raise ValueError(
                    f"{name}.{entry_point} needs {workgroup_bytes} B of workgroup memory; the "
                    f"adapter allows {self.max_workgroup_storage} B"
                )
            compute: dict[str, Any] = {
                "module": self.module(name, source),
                "entry_point": entry_point,
            }
            if consts:
                compute["constants"] = {k: float(v) for k, v in consts.items()}
            with self.operation(f"creating pipeline {name}.{entry_point}"):
                self._pipelines[key] = self.device.create_compute_pipeline(
                    label=f"{name}.{entry_point}", layout="auto", compute=compute
                )
        return self._pipelines[key]

    def compile_pipelines(self, specs: Iterable[tuple], threads: int | None = None) -> list:
        """The pipelines of ``specs``, in their order: those not yet cached are created several
        at once (:meth:`pipeline` for each; errors as there). A spec is ``(shader, entry point,
        constants)`` or ``(shader, entry point, constants, source)``.

        The first time a machine sees a pipeline, the driver compiles it (NVIDIA then keeps it
        in a disk cache): one after another, a fresh machine's first process waits for all of
        them on one core. wgpu-py releases the GIL while wgpu-native translates and the driver
        compiles, so they overlap on threads. ``threads``: at most this many at once (default
        :data:`COMPILE_THREADS`, at most the host's cores).
        """
        wanted = [(s[0], s[1], tuple(sorted((s[2] or {}).items())), s[3] if len(s) > 3 else None)
                  for s in specs]
        todo = [t for t in dict.fromkeys(wanted) if (t[0], t[3], t[1], t[2]) not in self._pipelines]
        for name, _e, _c, source in dict.fromkeys((t[0], None, None, t[3]) for t in todo):
            self.module(name, source)     # (modules are cached unlocked: made here, once)

        def make(t):
            return self.pipeline(t[0], t[1], constants=dict(t[2]), source=t[3])

        n = min(threads or COMPILE_THREADS, os.cpu_count() or 1, len(todo))
        if n > 1:
            with ThreadPoolExecutor(n, thread_name_prefix="gpubpe-compile") as pool:
                for f in [pool.submit(make, t) for t in todo]:
                    f.result()
        return [make(t) for t in wanted]    # (from the cache; one at a time where n ≤ 1)

    # -- buffers and dispatch ----------------------------------------------------------------
    def binding_bytes(self, elem_bytes: int) -> int:
        """Bytes one storage binding of ``elem_bytes``-byte elements may take: the adapter's
        binding and buffer limits, and at most 2^31 elements, so that every index a shader
        computes from it (``2 * i + 1`` included) stays a valid ``u32`` however large the
        adapter's limits are (adapters with 4 GiB bindings and more)."""
        return min(self.max_storage_binding, self.max_buffer_size, elem_bytes << 31)

    def buffer(self, size: int, usage: int, label: str):
        """A new buffer of ``size`` bytes (rounded up to a multiple of 16, at least 16).

        Raises:
            ValueError: ``size`` above the adapter's max buffer size.
            GPUOperationError: wgpu refused (out of memory, lost device: then marked lost).
        """
        size = max(16, (int(size) + 15) // 16 * 16)
        if size > self.max_buffer_size:
            raise ValueError(
                f"buffer {label!r} of {size} B is above the adapter's max buffer size "
                f"{self.max_buffer_size} B"
            )
        with self.operation(f"creating buffer {label!r} of {size} B"):
            return self.device.create_buffer(label=label, size=size, usage=usage)

    def bind_group(self, pipeline, buffers: Mapping[int, Any] | list, label: str = ""):
        """Bind group 0 of ``pipeline`` with ``buffers`` (binding → buffer or (buffer, off, size))."""
        items = buffers.items() if isinstance(buffers, Mapping) else enumerate(buffers)
        entries = []
        for b, buf in items:
            if isinstance(buf, tuple):
                buf, off, size = buf
                entries.append({"binding": b, "resource": {"buffer": buf, "offset": off, "size": size}})
            else:
                entries.append({"binding": b, "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        with self.operation(f"creating bind group {label!r}"):
            return self.device.create_bind_group(
                label=label, layout=pipeline.get_bind_group_layout(0), entries=entries
            )

    @staticmethod
    def grid(num_workgroups: int) -> tuple[int, int]:
        """A 2-D grid of at least ``num_workgroups`` workgroups, each side ≤ 65,535.

        Kernels recover the linear workgroup id as ``wid.x + wid.y * num_workgroups.x``.
        """
        n = max(1, int(num_workgroups))
        if n <= MAX_WORKGROUPS_PER_DIM:
            return n, 1
        gy = -(-n // MAX_WORKGROUPS_PER_DIM)
        gx = -(-n // gy)
        if gy > MAX_WORKGROUPS_PER_DIM:
            raise ValueError(f"{n} workgroups do not fit a 65,535 × 65,535 grid")
        return gx, gy

    def wait_map(self, buffer, mode: str = "READ", offset: int = 0, size: int | None = None,
                 what: str = "readback") -> None:
        """Map ``buffer`` and wait at most :func:`timeout_s` seconds.

        Raises:
            GPUOperationError: the map failed or did not complete in time (names ``what``).
        """
        promise = buffer.map_async(mode, offset, size)
        self.wait_promise(promise, what)

    def wait_promise(self, promise, what: str) -> None:
        """Wait for a ``GPUPromise`` with the configured timeout (see :meth:`wait_map`)."""
        limit = timeout_s()
        wait = None if limit == float("inf") else limit
        from torch_gpubpe.gpu.wgpu_internals import (CallbackInterrupt, promise_settled,
                                                     wait_promise)

        if self.lost and not promise_settled(promise):
            # given up (a wait ran out or a callback was cut short): its maps may never settle,
            # and the next call opens a fresh device
            raise GPUOperationError(f"{what} on {self.adapter_name}: not waited for, the device "
                                    "was given up by an earlier failed or interrupted wait")
        try:
            settled = wait_promise(promise, wait)
        except CallbackInterrupt:
            self.lost = True   # (a map its callback left unfinished never settles)
            raise
        if not settled:
            self.lost = True
            raise GPUOperationError(
                f"{what} on {self.adapter_name} did not complete within {limit:.0f} s "
                f"(set {ENV_TIMEOUT} to change the limit); the device will be re-created on the "
                "next call"
            )
        try:
            promise.sync_wait()
        except Exception as e:
            self.check_lost(e)
            raise GPUOperationError(f"{what} failed on {self.adapter_name}: {e}") from e

    def read_u32(self, src, offset: int, count: int, staging=None, what: str = "readback"):
        """Copy ``count`` u32 from ``src`` at byte ``offset`` back to the host (blocking)."""
        nbytes = max(4, count * 4)
        U = self.wgpu.BufferUsage
        st = staging if staging is not None and staging.size >= nbytes else self.buffer(
            nbytes, U.MAP_READ | U.COPY_DST, "readback"
        )
        enc = self.device.create_command_encoder(label="readback")
        enc.copy_buffer_to_buffer(src, offset, st, 0, (nbytes + 3) // 4 * 4)
        self.device.queue.submit([enc.finish()])
        from torch_gpubpe.gpu.wgpu_internals import map_read_mode

        self.wait_map(st, map_read_mode(), 0, (nbytes + 7) // 8 * 8 if nbytes % 8 else nbytes, what)
        try:
            out = np.frombuffer(st.read_mapped(0, nbytes), np.uint32)[:count].copy()
        finally:
            st.unmap()
        return out

    @contextlib.contextmanager
    def operation(self, what: str) -> Iterator[None]:
        """Run GPU calls; a wgpu error becomes :class:`GPUOperationError` naming ``what`` (the
        original, with its shader diagnostics, is chained), and a lost device is marked so the
        next :func:`get_gpu` opens a fresh one."""
        try:
            yield
        except self.wgpu.GPUError as e:
            self.check_lost(e)
            raise GPUOperationError(f"{what} failed on {self.adapter_name}: {e}") from e
        except (RuntimeError, AttributeError) as e:
            # Once the device is lost, wgpu-py's own objects fail too (its poll thread stops:
            # "Cannot use PollThread because it has stopped", or a None poller): still the
            # lost device, named as such (seen with two encode threads, one losing it).
            if not self.lost or isinstance(e, GPUOperationError):
                raise
            raise GPUOperationError(f"{what} failed on {self.adapter_name}: the device was lost "
                                    f"({type(e).__name__}: {e})") from e

    def check_lost(self, exc: BaseException) -> None:
        """Mark the device lost when ``exc`` says so, so that :func:`get_gpu` makes a new one."""
        if "device is lost" in str(exc).lower() or "device lost" in str(exc).lower():
            self.lost = True

    def _probe_subgroup_size(self) -> int:
        src = (
            "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
            "@compute @workgroup_size(64)\n"
            "fn main(@builtin(subgroup_size) sg: u32, @builtin(local_invocation_index) i: u32) {\n"
            "  if (i == 0u) { out[0] = sg; }\n}\n"
        )
        U = self.wgpu.BufferUsage
        pipe = self.pipeline("probe", "main", source=src)
        buf = self.buffer(16, U.STORAGE | U.COPY_SRC, "subgroup probe")
        bg = self.bind_group(pipe, [buf])
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bg)
        cp.dispatch_workgroups(1)
        cp.end()
        self.device.queue.submit([enc.finish()])
        size = int(self.read_u32(buf, 0, 1, what="subgroup-size probe")[0])
        if size == 0 or size & (size - 1) or size > 128:
            raise GPUOperationError(f"subgroup-size probe returned {size}")
        return size


class _LossHandler(logging.Handler):
    def __init__(self, gpu: GPU) -> None:
        super().__init__(level=logging.ERROR)
        self.gpu = gpu

    def emit(self, record: logging.LogRecord) -> None:
        if "device was lost" in record.getMessage().lower():
            self.gpu.lost = True


def get_gpu() -> GPU:
    """The process's GPU, created on first use (thread-safe).

    Raises:
        GPUForkError: this process is a fork of one that had opened the GPU.
        NoAdapterError: no adapter, or the forced one does not exist.
    """
    global _gpu
    with _lock:
        _check_fork()
        if _gpu is None or _gpu.lost:
            if _gpu is not None:
                logging.getLogger("wgpu").removeHandler(_gpu._loss_handler)
            _gpu = GPU()
        return _gpu


def current_gpu() -> GPU | None:
    """The process's GPU if one is open (lost or not), else None; opens nothing."""
    return _gpu


def reset_gpu() -> None:
    """Forget the process's GPU (the next :func:`get_gpu` opens a new device)."""
    global _gpu
    with _lock:
        _gpu = None


def _after_fork_in_child() -> None:
    global _gpu
    _gpu = None  # never use the parent's device; _touched_pid keeps the parent's pid


os.register_at_fork(after_in_child=_after_fork_in_child)
