"""Device layer and the word-boundary kernel on the GPU (lavapipe in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.gpu import device as gpumod
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.pretokenize import (
    GPUPreTokenizer,
    pack_documents,
    word_start_mask,
    word_starts_gpu,
)
from torch_gpubpe.gpu.shaders import preprocess, shader_info

pytestmark = pytest.mark.gpu


def test_device_facts():
    g = gpumod.get_gpu()
    assert g is gpumod.get_gpu()  # one per process
    assert g.max_storage_binding >= 128 << 20
    assert g.max_workgroup_storage >= 16 << 10
    if g.has_subgroups:
        assert g.subgroup_size in (4, 8, 16, 32, 64, 128)


def test_workgroup_storage_checked_before_pipeline():
    g = gpumod.get_gpu()
    with pytest.raises(ValueError, match="workgroup memory"):
        g.pipeline("pretokenize", "bpe_word_boundary", workgroup_bytes=g.max_workgroup_storage + 4)


def test_compile_pipelines_creates_each_missing_pipeline_once_on_threads(monkeypatch):
    g = gpumod.get_gpu()
    # (an override value no other test uses: these pipelines are not cached yet)
    consts = {"MAX_PROBE": 37}
    specs = [("wordcount", e, consts) for e in shader_info("wordcount", g.flags).entry_points]
    threads: set[str] = set()
    made = []
    real = g.device.create_compute_pipeline

    def recording(**kw):
        threads.add(threading.current_thread().name)
        made.append(kw["label"])
        return real(**kw)

    monkeypatch.setattr(g.device, "create_compute_pipeline", recording)
    got = g.compile_pipelines(specs + specs, threads=2)   # (duplicates compiled once)
    assert sorted(made) == sorted(f"wordcount.{e}" for _, e, _ in specs)
    assert all(t.startswith("gpubpe-compile") for t in threads)
    assert [p.label for p in got] == [f"wordcount.{e}" for _, e, _ in specs + specs]
    assert got[:len(specs)] == got[len(specs):] == g.compile_pipelines(specs)
    assert got[:len(specs)] == [g.pipeline("wordcount", e, constants=c) for _, e, c in specs]
    assert len(made) == len(specs)   # every later request came from the cache


def test_grid_folding():
    assert gpumod.GPU.grid(1) == (1, 1)
    assert gpumod.GPU.grid(65535) == (65535, 1)
    gx, gy = gpumod.GPU.grid(65536)
    assert gx <= 65535 and gy <= 65535 and gx * gy >= 65536


def test_preprocessor():
    src = "a\n//#if X\nb\n//#else\nc\n//#endif\nd"
    assert preprocess(src, frozenset({"X"})).split() == ["a", "b", "d"]
    assert preprocess(src, frozenset()).split() == ["a", "c", "d"]


def _check(docs):
    got = word_starts_gpu(docs)
    for k, d in enumerate(docs):
        assert got[k] == reference.word_starts(reference.to_bytes(d)), f"document {k}"


@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_word_starts_equal_reference_on_corpora(corpus):
    _check(corpus_docs(corpus, 60_000))


def test_word_starts_edge_lengths():
    docs = [b"", b"a", b" ", b"ab", b"a b", b"  x", b"x  ", b"\r\n\r", b"12 ab", b"", b"  "]
    docs += [b"ab  cd " * k for k in range(1, 9)]  # lengths not multiple of 4
    _check(docs)
    _check([b""])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=70), max_size=12))
def test_word_starts_random_bytes(docs):
    _check(docs)


def test_word_starts_many_slices():
    rng = np.random.default_rng(0)
    docs = [rng.choice(np.frombuffer(b"ab 1\t\n.-\xc4", np.uint8), size=int(n)).tobytes()
            for n in rng.integers(0, 120, 25)]
    data, offsets = pack_documents(docs)
    want = word_start_mask(data, offsets)
    for slice_bytes in (1, 2, 3, 5, 64, 997):
        sym = GPUPreTokenizer(max_slice_bytes=slice_bytes).symbols(data, offsets)
        assert np.array_equal((sym & reference.WORD_START_BIT) != 0, want), slice_bytes
        assert np.array_equal(sym & 0xFF, data)


def test_word_starts_above_one_dimension_of_workgroups():
    """> 65,535 × 256 threads × 4 bytes → a 2-D grid."""
    n = 65_535 * 256 * 4 + 4099
    rng = np.random.default_rng(1)
    data = rng.choice(np.frombuffer(b"aB 1 \t\n;\x80", np.uint8), size=n)
    offsets = np.array([0, 1000, 1000, n // 2, n - 3, n], np.int64)
    sym = GPUPreTokenizer().symbols(data, offsets)
    assert np.array_equal((sym & reference.WORD_START_BIT) != 0, word_start_mask(data, offsets))


def test_numpy_rule_equals_reference():
    docs = corpus_docs("web_html", 40_000) + [b"", b" ", b"a  b  "]
    data, offsets = pack_documents(docs)
    want = np.concatenate([np.array(reference.word_starts(reference.to_bytes(d)), bool) for d in docs])
    assert np.array_equal(word_start_mask(data, offsets), want)


def test_no_subgroup_path_and_forced_adapter():
    code = (
        "from torch_gpubpe.gpu import device as gpu; g = gpu.get_gpu(); "
        "print(g.has_subgroups, g.subgroup_size, g.adapter_name)"
    )
    env = dict(os.environ, TORCH_GPUBPE_NO_SUBGROUPS="1", TORCH_GPUBPE_ADAPTER="vulkan")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.startswith("False 0")
    env = dict(os.environ, TORCH_GPUBPE_ADAPTER="no-such-adapter-xyz")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0 and "matches no adapter" in res.stderr


def test_fork_after_gpu_raises_clear_error():
    code = r"""
import os, sys
from torch_gpubpe.gpu import device as gpu
from torch_gpubpe.errors import GPUForkError
gpu.get_gpu()
pid = os.fork()
if pid == 0:
    try:
        gpu.get_gpu()
    except GPUForkError as e:
        os._exit(7 if "spawn" in str(e) else 3)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[-1] == "7"


def test_import_touches_no_gpu():
    code = "import torch_gpubpe, sys; from torch_gpubpe.gpu import device as gpu; print(gpu._gpu is None, gpu._touched_pid)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["True", "None"]


def test_lost_device_is_replaced_on_next_call():
    code = r"""
from torch_gpubpe.gpu import device as gpu
from torch_gpubpe.encoding.pretokenize import word_starts_gpu
g = gpu.get_gpu()
g.device.destroy()
from torch_gpubpe.errors import GPUOperationError
try:
    word_starts_gpu([b"a b"])
except GPUOperationError as e:
    assert "device is lost" in str(e), e
else:
    raise SystemExit("no error after device.destroy()")
g2 = gpu.get_gpu()
print(g2 is not g, g.lost, word_starts_gpu([b"a b"])[0])
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "True True [True, True, False]"
