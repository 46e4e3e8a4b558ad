"""Which adapter a process opens on a machine with several GPUs: the GPU of its local rank.

In a DDP job (``torchrun``) every process has ``LOCAL_RANK``; the CUDA device of that rank is
``torch.cuda`` device ``LOCAL_RANK``. This module finds the Vulkan adapter of the same physical
GPU, matched by its identity, not by enumeration order (Vulkan's order is not CUDA's, which is
fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and ``CUDA_VISIBLE_DEVICES`` renumbers
CUDA devices only):

* the device UUID: CUDA's ``cudaDeviceProp::uuid`` (``torch.cuda.get_device_properties(i)
  .uuid``, nvidia-smi's ``GPU-…``) equals Vulkan's ``VkPhysicalDeviceIDProperties::deviceUUID``
  on NVIDIA (the rule CUDA–Vulkan interop relies on);
* else the PCI address (``VK_EXT_pci_bus_info`` vs ``pci_domain_id:pci_bus_id:pci_device_id``).

wgpu 0.32 (wgpu-native 29) reports neither (``adapter.info`` has vendor_id, device_id, names),
so :func:`vulkan_identities` asks the Vulkan loader directly (ctypes, ``libvulkan.so.1``) and
lines its devices up with wgpu's Vulkan adapters, which wgpu lists in the loader's order.

The decision is the pure function :func:`choose_adapter` (adapter list + environment + CUDA
devices → index), tested with fake lists. Order of precedence:

1. ``TORCH_GPUBPE_ADAPTER=#N`` / ``uuid:HEX`` / ``pci:DDDD:BB:DD.F`` picks that adapter
   (other values are substrings of the adapter's name, matched in :mod:`torch_gpubpe.gpu.device`);
2. ``LOCAL_RANK`` unset: no choice here (wgpu's high-performance adapter, as before);
3. ``LOCAL_RANK=r`` and CUDA device r known: the adapter with its UUID, else its PCI address;
   none → :class:`~torch_gpubpe.errors.NoAdapterError` naming both sides;
4. ``LOCAL_RANK=r``, no CUDA identity (no CUDA, or no identity on either side): the r-th GPU
   adapter in enumeration order, warned once (the one case matched by order alone); a machine
   with no GPU adapter at all (lavapipe only) gives every rank the CPU adapter; r beyond the GPU
   adapters, or a CUDA device count different from the GPU adapter count, raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch_gpubpe import notices
from torch_gpubpe.errors import NoAdapterError

ENV_ADAPTER = "TORCH_GPUBPE_ADAPTER"
ENV_LOCAL_RANK = "LOCAL_RANK"


@dataclass(frozen=True)
class AdapterDesc:
    """One wgpu adapter as the choice sees it.

    Attributes:
        index: position in ``wgpu.gpu.enumerate_adapters_sync()``.
        name, vendor, adapter_type, backend: ``adapter.info``'s ``device``, ``vendor``,
            ``adapter_type`` ("DiscreteGPU", "IntegratedGPU", "CPU", …), ``backend_type``.
        vendor_id, device_id: PCI vendor and device ids (``adapter.info``).
        uuid: 32 lower-case hex digits (Vulkan deviceUUID), None when unknown.
        pci: ``"dddd:bb:dd.f"`` (lower-case hex), None when unknown.
    """

    index: int
    name: str
    vendor: str = ""
    adapter_type: str = "DiscreteGPU"
    backend: str = "Vulkan"
    vendor_id: int = 0
    device_id: int = 0
    uuid: str | None = None
    pci: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.adapter_type.lower() != "cpu" and "gl" not in self.backend.lower()

    def describe(self) -> str:
        ids = ", ".join(x for x in (self.uuid and f"uuid {self.uuid}",
                                    self.pci and f"pci {self.pci}") if x)
        return f"#{self.index} {self.name} ({self.adapter_type}, {self.backend}" + \
            (f", {ids})" if ids else ")")


@dataclass(frozen=True)
class CudaDevice:
    """A CUDA device as ``torch.cuda`` numbers it (after ``CUDA_VISIBLE_DEVICES``)."""

    index: int
    name: str
    uuid: str | None = None
    pci: str | None = None


@dataclass(frozen=True)
class Choice:
    """The outcome of :func:`choose_adapter`: ``index`` into the adapter list (None: let wgpu
    pick its high-performance adapter), ``reason`` (for logs and ``doctor``), and ``warning``
    to show once (the enumeration-order case)."""

    index: int | None
    reason: str
    warning: str | None = None


def norm_uuid(value) -> str | None:
    """A UUID in any usual spelling (``GPU-58ae…``, dashed, bytes, CUDA's ``_CUuuid``) → 32
    lower-case hex digits; None if it holds no 32 hex digits or only zeros."""
    if value is None:
        return None
    raw = getattr(value, "bytes", value)
    if isinstance(raw, (bytes, bytearray)):
        text = bytes(raw).hex()
    else:
        text = str(value)
        text = text[4:] if text.upper().startswith("GPU-") else text
        text = re.sub(r"[^0-9a-fA-F]", "", text)
    text = text.lower()
    return text if len(text) == 32 and set(text) != {"0"} else None


def norm_pci(domain: int, bus: int, device: int, function: int = 0) -> str:
    """PCI address → ``"dddd:bb:dd.f"`` (lower-case hex, as ``lspci -D``)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def _override(want: str, adapters: Sequence[AdapterDesc]) -> Choice | None:
    w = want.strip().lower()
    if w.startswith("#"):
        try:
            k = int(w[1:])
        except ValueError:
            raise NoAdapterError(f"{ENV_ADAPTER}={want!r}: '#' must be followed by an adapter "
                                 "index (python -m torch_gpubpe doctor lists them)") from None
        hits = [a for a in adapters if a.index == k]
        kind = f"index {k}"
    elif w.startswith("uuid:"):
        u = norm_uuid(w[5:])
        hits = [a for a in adapters if u and a.uuid == u]
        kind = f"uuid {u or w[5:]}"
    elif w.startswith("pci:"):
        p = w[4:]
        p = p if p.count(":") == 2 else "0000:" + p
        hits = [a for a in adapters if a.pci and a.pci == p]
        kind = f"pci {p}"
    else:
        return None          # a name substring: matched in torch_gpubpe.gpu.device
    if not hits:
        raise NoAdapterError(f"{ENV_ADAPTER}={want!r}: no adapter with {kind}; available: "
                             + ("; ".join(a.describe() for a in adapters) or "none"))
    return Choice(hits[0].index, f"{ENV_ADAPTER}={want}")


def requested_adapter(env: Mapping[str, str] | None = None) -> str:
    """``TORCH_GPUBPE_ADAPTER`` as every adapter choice of the package reads it (stripped; ``""``
    when unset): ``#N``, ``uuid:…``, ``pci:…`` or a substring of an adapter's backend, type,
    name or vendor (case-insensitive)."""
    return (os.environ if env is None else env).get(ENV_ADAPTER, "").strip()


def choose_adapter(adapters: Sequence[AdapterDesc], env: Mapping[str, str],
                   cuda: Sequence[CudaDevice] | None) -> Choice:
    """The adapter this process opens (rules: module docstring).

    Args:
        adapters: every adapter wgpu enumerates, in its order (uuid/pci where known).
        env: the environment (``LOCAL_RANK``, ``TORCH_GPUBPE_ADAPTER``).
        cuda: the CUDA devices this process sees, in CUDA's numbering; None or empty when
            there is no CUDA.
    Returns:
        a :class:`Choice`.
    Raises:
        NoAdapterError: an id-form ``TORCH_GPUBPE_ADAPTER`` matches nothing; ``LOCAL_RANK``'s
            CUDA device has no Vulkan adapter; the rank is beyond the GPU adapters; the CUDA
            and GPU adapter counts differ where only the order could match them.
        ValueError: ``LOCAL_RANK`` is not a non-negative integer.
    """
    want = requested_adapter(env)
    if want:
        chosen = _override(want, adapters)
        if chosen is not None:
            return chosen
        return Choice(None, f"{ENV_ADAPTER}={want} (name match)")
    raw = env.get(ENV_LOCAL_RANK, "").strip()
    if not raw:
        return Choice(None, "no LOCAL_RANK: wgpu's high-performance adapter")
    if not raw.isdigit():
        raise ValueError(f"{ENV_LOCAL_RANK}={raw!r} is not a non-negative integer")
    rank = int(raw)
    gpus = [a for a in adapters if a.is_gpu]
    cuda = list(cuda or [])
    if rank < len(cuda):
        dev = cuda[rank]
        for key in ("uuid", "pci"):
            mine = getattr(dev, key)
            if mine and any(getattr(a, key) for a in gpus):
                hits = [a for a in gpus if getattr(a, key) == mine]
                if not hits:
                    raise NoAdapterError(
                        f"{ENV_LOCAL_RANK}={rank}: CUDA device {rank} ({dev.name}, {key} {mine}) "
                        "has no WebGPU adapter; adapters: "
                        + "; ".join(a.describe() for a in adapters)
                        + f". Install its Vulkan driver, or set {ENV_ADAPTER}")
                return Choice(hits[0].index,
                              f"{ENV_LOCAL_RANK}={rank} → CUDA device {rank} by {key} {mine}")
    if not gpus:
        cpu = [a for a in adapters if not a.is_gpu]
        if cuda:
            raise NoAdapterError(
                f"{ENV_LOCAL_RANK}={rank}: CUDA sees {len(cuda)} GPU(s) but wgpu has no GPU "
                "adapter (only: " + ("; ".join(a.describe() for a in adapters) or "none")
                + f"); install the GPU's Vulkan driver, or set {ENV_ADAPTER}=cpu")
        if not cpu:
            raise NoAdapterError("no WebGPU adapter (python -m torch_gpubpe doctor)")
        best = min(cpu, key=lambda a: "gl" in a.backend.lower())
        return Choice(best.index, f"{ENV_LOCAL_RANK}={rank}: no GPU adapter; every rank "
                                  f"shares the CPU adapter {best.name}")
    if cuda and len(cuda) != len(gpus):
        raise NoAdapterError(
            f"{ENV_LOCAL_RANK}={rank}: CUDA sees {len(cuda)} device(s), wgpu {len(gpus)} GPU "
            "adapter(s), and neither UUIDs nor PCI addresses are known to match them: set "
            f"{ENV_ADAPTER}=#N per process (python -m torch_gpubpe doctor lists them)")
    if rank >= len(gpus):
        raise NoAdapterError(
            f"{ENV_LOCAL_RANK}={rank} but there are only {len(gpus)} GPU adapter(s): "
            + "; ".join(a.describe() for a in gpus)
            + f"; run at most {len(gpus)} processes per machine or set {ENV_ADAPTER}")
    a = gpus[rank]
    return Choice(a.index, f"{ENV_LOCAL_RANK}={rank} → GPU adapter {rank} by enumeration order",
                  warning=f"torch_gpubpe: {ENV_LOCAL_RANK}={rank} opens {a.describe()} by "
                          "enumeration order (no device UUID or PCI address to match a CUDA "
                          f"device by); set {ENV_ADAPTER}=#N to be sure")


# -- the real inputs ------------------------------------------------------------------------------
def cuda_devices() -> list[CudaDevice]:
    """The CUDA devices of this process (``torch.cuda``, honouring ``CUDA_VISIBLE_DEVICES``);
    empty without torch or CUDA. Reads properties only (no CUDA context is created)."""
    try:
        import torch
    except ImportError:
        return []
    try:
        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            pci = None
            if getattr(p, "pci_bus_id", None) is not None:
                pci = norm_pci(int(getattr(p, "pci_domain_id", 0) or 0), int(p.pci_bus_id),
                               int(getattr(p, "pci_device_id", 0) or 0))
            out.append(CudaDevice(i, str(p.name), norm_uuid(getattr(p, "uuid", None)), pci))
        return out
    except Exception:  # noqa: BLE001 - a broken CUDA install: no identity, the rules say what then
        return []


# Vulkan structure types and constants (vulkan_core.h).
_VK_APPLICATION_INFO = 0
_VK_INSTANCE_CREATE_INFO = 1
_VK_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
_VK_PHYSICAL_DEVICE_ID_PROPERTIES = 1000071004
_VK_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT = 1000212000
_VK_API_VERSION_1_1 = (1 << 22) | (1 << 12)
_PROPS_OFFSET = 16                    # VkPhysicalDeviceProperties inside VkPhysicalDeviceProperties2
_PROPS_BYTES = 2048                   # ≥ sizeof(VkPhysicalDeviceProperties) (824 on 64-bit)


class _AppInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p),
                ("pApplicationName", ctypes.c_char_p), ("applicationVersion", ctypes.c_uint32),
                ("pEngineName", ctypes.c_char_p), ("engineVersion", ctypes.c_uint32),
                ("apiVersion", ctypes.c_uint32)]


class _InstanceInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_AppInfo)),
                ("enabledLayerCount", ctypes.c_uint32), ("ppEnabledLayerNames", ctypes.c_void_p),
                ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


class _IDProps(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p),
                ("deviceUUID", ctypes.c_uint8 * 16), ("driverUUID", ctypes.c_uint8 * 16),
                ("deviceLUID", ctypes.c_uint8 * 8), ("deviceNodeMask", ctypes.c_uint32),
                ("deviceLUIDValid", ctypes.c_uint32)]


class _PCIProps(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p),
                ("pciDomain", ctypes.c_uint32), ("pciBus", ctypes.c_uint32),
                ("pciDevice", ctypes.c_uint32), ("pciFunction", ctypes.c_uint32)]


class _ExtProps(ctypes.Structure):
    _fields_ = [("extensionName", ctypes.c_char * 256), ("specVersion", ctypes.c_uint32)]


def vulkan_identities() -> list[dict]:
    """Every Vulkan physical device in the loader's order: ``name``, ``vendor_id``,
    ``device_id``, ``uuid`` (:func:`norm_uuid`) and ``pci`` (None without VK_EXT_pci_bus_info).

    Asks ``libvulkan.so.1`` directly (wgpu 0.32 does not report these). Empty when the loader
    or Vulkan 1.1 is missing.
    """
    name = ctypes.util.find_library("vulkan") or "libvulkan.so.1"
    try:
        vk = ctypes.CDLL(name)
    except OSError:
        try:
            vk = ctypes.CDLL("libvulkan.so.1")
        except OSError:
            return []
    app = _AppInfo(_VK_APPLICATION_INFO, None, b"torch_gpubpe", 1, b"torch_gpubpe", 1,
                   _VK_API_VERSION_1_1)
    info = _InstanceInfo(_VK_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None)
    inst = ctypes.c_void_p()
    vk.vkCreateInstance.restype = ctypes.c_int32
    if vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(inst)) != 0:
        return []
    try:
        vk.vkEnumeratePhysicalDevices.restype = ctypes.c_int32
        n = ctypes.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(inst, ctypes.byref(n), None)
        devs = (ctypes.c_void_p * n.value)()
        if vk.vkEnumeratePhysicalDevices(inst, ctypes.byref(n), devs) not in (0, 5):  # 5: INCOMPLETE
            return []
        get_props2 = vk.vkGetPhysicalDeviceProperties2
        get_props2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        vk.vkEnumerateDeviceExtensionProperties.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
        out = []
        for d in list(devs)[: n.value]:
            ne = ctypes.c_uint32(0)
            vk.vkEnumerateDeviceExtensionProperties(d, None, ctypes.byref(ne), None)
            exts = (_ExtProps * ne.value)()
            vk.vkEnumerateDeviceExtensionProperties(d, None, ctypes.byref(ne), exts)
            has_pci = any(e.extensionName == b"VK_EXT_pci_bus_info" for e in exts[: ne.value])
            idp = _IDProps(_VK_PHYSICAL_DEVICE_ID_PROPERTIES, None)
            pci = _PCIProps(_VK_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT, None)
            if has_pci:
                idp.pNext = ctypes.cast(ctypes.pointer(pci), ctypes.c_void_p)
            buf = (ctypes.c_uint8 * (_PROPS_OFFSET + _PROPS_BYTES))()
            ctypes.c_int32.from_buffer(buf, 0).value = _VK_PHYSICAL_DEVICE_PROPERTIES_2
            ctypes.c_void_p.from_buffer(buf, 8).value = ctypes.addressof(idp)
            get_props2(d, buf)
            o = _PROPS_OFFSET
            vendor_id = ctypes.c_uint32.from_buffer(buf, o + 8).value
            device_id = ctypes.c_uint32.from_buffer(buf, o + 12).value
            dname = bytes(buf[o + 20 : o + 276]).split(b"\0", 1)[0].decode("utf-8", "replace")
            out.append({"name": dname, "vendor_id": vendor_id, "device_id": device_id,
                        "uuid": norm_uuid(bytes(idp.deviceUUID)),
                        "pci": norm_pci(pci.pciDomain, pci.pciBus, pci.pciDevice,
                                        pci.pciFunction) if has_pci else None})
        return out
    finally:
        vk.vkDestroyInstance.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        vk.vkDestroyInstance(inst, None)


def describe_adapters(adapters, vulkan: list[dict] | None = None) -> list[AdapterDesc]:
    """wgpu adapters → :class:`AdapterDesc`, with the UUID and PCI address of each Vulkan
    adapter from ``vulkan`` (:func:`vulkan_identities`): wgpu lists the loader's devices in
    its order, possibly skipping some, so they are lined up in order by (vendor_id,
    device_id, name)."""
    vulkan = list(vulkan or [])
    out, j = [], 0
    for k, a in enumerate(adapters):
        i = dict(a.info) if hasattr(a, "info") else dict(a)
        uuid = pci = None
        if str(i.get("backend_type", "")).lower() == "vulkan":
            key = (int(i.get("vendor_id", -1)), int(i.get("device_id", -1)),
                   str(i.get("device", "")))
            hit = next((m for m in range(j, len(vulkan)) if (
                vulkan[m]["vendor_id"], vulkan[m]["device_id"], vulkan[m]["name"]) == key), None)
            if hit is not None:
                uuid, pci, j = vulkan[hit]["uuid"], vulkan[hit]["pci"], hit + 1
        out.append(AdapterDesc(k, str(i.get("device", "")), str(i.get("vendor", "")),
                               str(i.get("adapter_type", "")), str(i.get("backend_type", "")),
                               int(i.get("vendor_id", 0)), int(i.get("device_id", 0)), uuid, pci))
    return out


last_choice: Choice | None = None
"""The choice made when this process opened its GPU (None before, or when not made here)."""


def pick_adapter(wgpu, env: Mapping[str, str] | None = None):
    """The wgpu adapter :func:`choose_adapter` names for this process, or None (wgpu picks).

    Raises:
        NoAdapterError, ValueError: as :func:`choose_adapter`.
    """
    global last_choice
    env = os.environ if env is None else env
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
    try:
        vulkan = vulkan_identities()
    except (OSError, AttributeError, ValueError):  # no usable loader: no identities (rule 4)
        vulkan = []
    descs = describe_adapters(adapters, vulkan)
    needs_cuda = not requested_adapter(env)
    choice = choose_adapter(descs, env, cuda_devices() if needs_cuda else None)
    last_choice = choice
    if choice.warning:
        notices.warn(choice.warning, stacklevel=3)
    return None if choice.index is None else adapters[choice.index]
