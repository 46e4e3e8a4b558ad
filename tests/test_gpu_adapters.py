"""One GPU per local rank (torch_gpubpe.gpu.adapters): the adapter choice on fake adapter lists, the
Vulkan identity probe on lavapipe, and the choice inside a real process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import subprocess_env

from torch_gpubpe.gpu.adapters import (AdapterDesc, CudaDevice, choose_adapter, describe_adapters,
                                  norm_pci, norm_uuid, vulkan_identities)
from torch_gpubpe.errors import NoAdapterError

U0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
U1 = "GPU-ffeeddcc-9999-8888-7777-666655554444"


def h200(index: int, uuid: str | None, pci: str | None = None) -> AdapterDesc:
    return AdapterDesc(index, "NVIDIA H200", "NVIDIA", "DiscreteGPU", "Vulkan", 0x10DE, 0x2335,
                       norm_uuid(uuid), pci)


LAVAPIPE = AdapterDesc(2, "llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe", "CPU", "Vulkan", 65541, 0,
                       norm_uuid("6d65736132322e332e36000000000000"))
# Vulkan lists the GPUs in the other order than CUDA does, with lavapipe last.
ADAPTERS = [h200(0, U1, "0000:9a:00.0"), h200(1, U0, "0000:1b:00.0"), LAVAPIPE]
CUDA = [CudaDevice(0, "NVIDIA H200", norm_uuid(U0), "0000:1b:00.0"),
        CudaDevice(1, "NVIDIA H200", norm_uuid(U1), "0000:9a:00.0")]


def test_local_rank_opens_the_adapter_of_its_cuda_device_by_uuid():
    assert choose_adapter(ADAPTERS, {"LOCAL_RANK": "0"}, CUDA).index == 1
    c = choose_adapter(ADAPTERS, {"LOCAL_RANK": "1"}, CUDA)
    assert c.index == 0 and "uuid" in c.reason and c.warning is None


def test_pci_address_when_vulkan_has_no_uuid():
    no_uuid = [h200(0, None, "0000:9a:00.0"), h200(1, None, "0000:1b:00.0"), LAVAPIPE]
    c = choose_adapter(no_uuid, {"LOCAL_RANK": "0"}, CUDA)
    assert c.index == 1 and "pci 0000:1b:00.0" in c.reason


def test_cuda_device_without_vulkan_adapter_is_an_error():
    other = [h200(0, "GPU-" + "12" * 16), LAVAPIPE]
    with pytest.raises(NoAdapterError, match="CUDA device 1 .*has no WebGPU adapter"):
        choose_adapter(other, {"LOCAL_RANK": "1"}, CUDA)
    with pytest.raises(NoAdapterError, match="no GPU adapter"):       # driver missing: lavapipe only
        choose_adapter([LAVAPIPE], {"LOCAL_RANK": "0"}, CUDA)


def test_enumeration_order_only_without_identities_and_warned():
    anon = [h200(0, None), h200(1, None), LAVAPIPE]
    c = choose_adapter(anon, {"LOCAL_RANK": "1"}, None)
    assert c.index == 1 and "enumeration order" in c.warning
    cuda_anon = [CudaDevice(0, "NVIDIA H200"), CudaDevice(1, "NVIDIA H200")]
    assert choose_adapter(anon, {"LOCAL_RANK": "0"}, cuda_anon).index == 0
    with pytest.raises(NoAdapterError, match="CUDA sees 3 device.*wgpu 2 GPU"):   # counts differ
        choose_adapter(anon, {"LOCAL_RANK": "0"}, cuda_anon + [CudaDevice(2, "NVIDIA H200")])
    with pytest.raises(NoAdapterError, match="LOCAL_RANK=2 but there are only 2 GPU"):
        choose_adapter(anon, {"LOCAL_RANK": "2"}, None)


def test_cpu_only_machine_every_rank_shares_the_cpu_adapter():
    gl = AdapterDesc(3, "llvmpipe", "", "CPU", "OpenGL")
    for rank in ("0", "1", "7"):
        c = choose_adapter([gl, LAVAPIPE], {"LOCAL_RANK": rank}, [])
        assert c.index == 2 and "shares the CPU adapter" in c.reason     # Vulkan before GL


def test_overrides_and_no_local_rank():
    env = {"LOCAL_RANK": "0"}
    assert choose_adapter(ADAPTERS, {**env, "TORCH_GPUBPE_ADAPTER": "#2"}, CUDA).index == 2
    assert choose_adapter(ADAPTERS, {**env, "TORCH_GPUBPE_ADAPTER": f"uuid:{U1}"}, CUDA).index == 0
    assert choose_adapter(ADAPTERS, {"TORCH_GPUBPE_ADAPTER": "pci:9a:00.0"}, None).index == 0
    named = choose_adapter(ADAPTERS, {**env, "TORCH_GPUBPE_ADAPTER": "nvidia"}, CUDA)
    assert named.index is None            # a name substring: torch_gpubpe.gpu.device matches it
    assert choose_adapter(ADAPTERS, {}, CUDA).index is None
    for bad, match in (("#9", "no adapter with index 9"), ("#x", "adapter index"),
                       ("uuid:GPU-" + "ab" * 16, "no adapter with uuid"),
                       ("pci:0000:01:00.0", "no adapter with pci")):
        with pytest.raises(NoAdapterError, match=match):
            choose_adapter(ADAPTERS, {"TORCH_GPUBPE_ADAPTER": bad}, CUDA)
    with pytest.raises(ValueError, match="LOCAL_RANK='-1'"):
        choose_adapter(ADAPTERS, {"LOCAL_RANK": "-1"}, CUDA)


def test_norm_uuid_and_pci():
    want = "0a1b2c3d000011112222333344445555"
    assert norm_uuid(U0) == norm_uuid(U0[4:]) == norm_uuid(bytes.fromhex(want)) == want
    assert norm_uuid(want.upper()) == want
    assert norm_uuid("GPU-1234") is None and norm_uuid(bytes(16)) is None and norm_uuid(None) is None
    assert norm_pci(0, 0x1B, 0, 0) == "0000:1b:00.0"


def test_describe_adapters_lines_up_wgpu_with_the_vulkan_loader():
    info = [{"device": "NVIDIA H200", "vendor_id": 0x10DE, "device_id": 0x2335,
             "backend_type": "Vulkan", "adapter_type": "DiscreteGPU"},
            {"device": "llvmpipe", "vendor_id": 65541, "device_id": 0, "backend_type": "Vulkan",
             "adapter_type": "CPU"},
            {"device": "llvmpipe", "vendor_id": 65541, "device_id": 0, "backend_type": "OpenGL",
             "adapter_type": "CPU"}]
    # the loader also lists a device wgpu skipped (first), and one it lists twice over backends
    vulkan = [{"name": "Old GPU", "vendor_id": 1, "device_id": 2, "uuid": "1" * 32, "pci": None},
              {"name": "NVIDIA H200", "vendor_id": 0x10DE, "device_id": 0x2335, "uuid": "a" * 32,
               "pci": "0000:1b:00.0"},
              {"name": "llvmpipe", "vendor_id": 65541, "device_id": 0, "uuid": "b" * 32,
               "pci": None}]
    d = describe_adapters(info, vulkan)
    assert [(x.index, x.uuid, x.pci) for x in d] == [
        (0, "a" * 32, "0000:1b:00.0"), (1, "b" * 32, None), (2, None, None)]


# -- the real machine (lavapipe in CI) -----------------------------------------------------------
def test_vulkan_probe_sees_the_wgpu_vulkan_adapters():
    import wgpu

    probe = vulkan_identities()
    assert probe and all(v["uuid"] is None or len(v["uuid"]) == 32 for v in probe)
    infos = [dict(a.info) for a in wgpu.gpu.enumerate_adapters_sync()]
    vk = [i for i in infos if i["backend_type"] == "Vulkan"]
    descs = [d for d in describe_adapters(infos, probe) if d.backend == "Vulkan"]
    assert len(descs) == len(vk) and all(d.uuid for d in descs)   # every one matched


def _vulkan_gpus() -> int:
    """Vulkan adapters of this machine that are not CPU devices."""
    import wgpu

    return sum(1 for a in wgpu.gpu.enumerate_adapters_sync()
               if a.info["backend_type"] == "Vulkan" and str(a.info["adapter_type"]).lower() != "cpu")


def _open_in_child(**env: str) -> dict:
    code = ("import json; from torch_gpubpe import devices; from torch_gpubpe.gpu.device import get_gpu;"
            "g = get_gpu(); c = devices.last_choice;"
            "print(json.dumps({'adapter': g.adapter_name, 'reason': c and c.reason}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=subprocess_env(**env))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_a_process_with_local_rank_opens_the_chosen_adapter():

    gpus = _vulkan_gpus()
    if not gpus:      # CI: lavapipe only, so both ranks share it
        got = _open_in_child(LOCAL_RANK="1", TORCH_GPUBPE_ADAPTER="")
        assert "shares the CPU adapter" in got["reason"]
    elif gpus == 1:   # one GPU (the lent H200): rank 1 has no GPU of its own, a named error
        r = subprocess.run([sys.executable, "-c", "from torch_gpubpe.gpu.device import get_gpu; get_gpu()"],
                           capture_output=True, text=True, timeout=300,
                           env=subprocess_env(LOCAL_RANK="1", TORCH_GPUBPE_ADAPTER=""))
        assert r.returncode != 0 and "LOCAL_RANK=1 but there are only 1 GPU" in r.stderr
    uuid = next(v["uuid"] for v in vulkan_identities())
    by_id = _open_in_child(TORCH_GPUBPE_ADAPTER=f"uuid:{uuid}")
    assert by_id["reason"] == f"TORCH_GPUBPE_ADAPTER=uuid:{uuid}"


@pytest.mark.heavy
def test_each_local_rank_gets_its_cuda_device_on_a_cuda_machine():
    """On a machine with CUDA GPUs (the lent H200): LOCAL_RANK=r opens the adapter whose Vulkan
    deviceUUID is torch.cuda device r's UUID."""
    import torch

    assert torch.cuda.is_available(), "needs CUDA (run on the GPU machine)"
    for r in range(torch.cuda.device_count()):
        u = norm_uuid(torch.cuda.get_device_properties(r).uuid)
        got = _open_in_child(LOCAL_RANK=str(r), TORCH_GPUBPE_ADAPTER="")
        assert f"by uuid {u}" in got["reason"], got


@pytest.mark.gpu
def test_two_process_ddp_job_shards_documents_and_opens_an_adapter_per_rank():
    """benchmarks/ddp_ranks.py under torchrun: no document twice or missing across 2 ranks,
    tokens equal to one process, each rank's adapter chosen by its LOCAL_RANK (in CI both share
    lavapipe; on a 2-GPU machine each gets its own, checked by the script)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    override = "#0" if _vulkan_gpus() == 1 else ""
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        str(root / "benchmarks" / "ddp_ranks.py"), "--docs", "150",
                        "--vocab-size", "300"], capture_output=True, text=True, timeout=600,
                       # one GPU: both ranks share it by the override (each needs its own
                       # otherwise); no GPU (CI): both share lavapipe
                       env=subprocess_env(TORCH_GPUBPE_ADAPTER=override, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "duplicates 0, missing 0, tokens equal to one process: True" in r.stdout
    # rank 1's adapter: chosen by its LOCAL_RANK, or (one GPU, shared) by the override
    assert ("TORCH_GPUBPE_ADAPTER=#0" if override else "LOCAL_RANK=1") in r.stdout, r.stdout
