"""Which GPU a Ray actor opens: the Vulkan adapter of the CUDA device Ray assigned to it
(``CUDA_VISIBLE_DEVICES``), matched by device UUID (:mod:`torch_gpubpe.gpu.adapters`): NVML's
when the machine has one NVIDIA GPU or ``CUDA_VISIBLE_DEVICES`` names it by UUID (no torch
import), else torch.cuda's; on a machine without CUDA the default adapter opens.
"""

from __future__ import annotations

import ctypes
import os

from torch_gpubpe import notices


def nvml_uuids() -> list[str] | None:
    """The UUIDs of the machine's NVIDIA GPUs in NVML's order (``libnvidia-ml.so.1`` by ctypes:
    no torch import, no CUDA context), None when NVML is missing or fails."""
    from torch_gpubpe.gpu.adapters import norm_uuid

    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nv.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        n = ctypes.c_uint(0)
        if nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            return None
        out = []
        for i in range(n.value):
            h, buf = ctypes.c_void_p(), ctypes.create_string_buffer(96)
            if nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0 or \
                    nv.nvmlDeviceGetUUID(h, buf, 96) != 0:
                return None
            out.append(norm_uuid(buf.value.decode("ascii", "replace")))
        return out if all(out) else None
    finally:
        nv.nvmlShutdown()


def assigned_uuid_without_torch(visible: str) -> str | None:
    """The UUID of CUDA device 0 under ``CUDA_VISIBLE_DEVICES=visible`` where that needs no
    CUDA runtime: the variable names it (``GPU-…``), or NVML sees one GPU only (CUDA's order
    cannot differ then); None otherwise (torch.cuda decides)."""
    from torch_gpubpe.gpu.adapters import norm_uuid

    first = visible.split(",")[0].strip()
    if first.upper().startswith("GPU-"):
        return norm_uuid(first)
    uuids = nvml_uuids()
    if uuids is not None and len(uuids) == 1 and first in ("0", ""):
        return uuids[0]
    return None


def pin_assigned_gpu() -> None:
    """In a Ray actor given a GPU: open the Vulkan adapter of that GPU (CUDA device 0 under the
    ``CUDA_VISIBLE_DEVICES`` Ray set), by UUID, unless ``TORCH_GPUBPE_ADAPTER`` says otherwise.
    The UUID comes from :func:`assigned_uuid_without_torch` where it can (importing torch and
    starting CUDA take seconds), else from ``torch.cuda``.
    """
    from torch_gpubpe.gpu.adapters import ENV_ADAPTER, cuda_devices

    if os.environ.get(ENV_ADAPTER, "").strip():
        return
    try:
        import ray

        assigned = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # noqa: BLE001 - not in a Ray worker
        assigned = []
    if not assigned:
        return
    fast = assigned_uuid_without_torch(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if fast:
        os.environ[ENV_ADAPTER] = f"uuid:{fast}"
        return
    devs = cuda_devices()
    if devs and devs[0].uuid:
        os.environ[ENV_ADAPTER] = f"uuid:{devs[0].uuid}"
        return
    notices.warn(f"torch_gpubpe: Ray assigned GPU {assigned} to this actor but torch.cuda "
                 "cannot tell its UUID, so wgpu's default adapter opens (on a machine with "
                 f"several GPUs maybe not the assigned one); set {ENV_ADAPTER}=uuid:... per "
                 "actor (runtime_env)", stacklevel=2)
