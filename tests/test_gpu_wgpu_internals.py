"""torch_gpubpe.gpu.wgpu_internals: the one module that uses wgpu-py/cffi internals.

A wgpu-py other than 0.32.x (simulated by changing ``wgpu.__version__``) must give a clear
WgpuVersionError on the required path (timed GPU waits) and, on the speed-only paths, the public
path with the fallback recorded in ``stats`` and warned once — never a silent fallback.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from torch_gpubpe.gpu import wgpu_internals as wi

PKG = Path(__file__).resolve().parents[1] / "torch_gpubpe"


@pytest.fixture
def foreign_wgpu(monkeypatch):
    import wgpu

    wi.reset_fallbacks()
    monkeypatch.setattr(wgpu, "__version__", "0.99.1")
    yield
    monkeypatch.undo()
    wi.reset_fallbacks()


def test_only_this_module_touches_wgpu_internals():
    pattern = re.compile(r"_internal\b|_ffi|\bffi\.|lib\.wgpu|_experimental_get_mapped_range"
                         r"|promise\._state|_thread_event|READ_NOSYNC|_parsed_types")
    offenders = []
    for f in sorted(PKG.glob("*.py")):
        if f.name == "_wgpu_internals.py":
            continue
        for k, line in enumerate(f.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{f.name}:{k}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_version_written_for_is_installed():
    assert wi.version_ok(), wi.installed_version()
    assert wi.map_read_mode() == "READ_NOSYNC"
    assert isinstance(wi.raw_recorder(), wi.RawRecorder)


def test_foreign_version_required_path_raises(foreign_wgpu):
    class Pending:
        _state = "pending"

    with pytest.raises(wi.WgpuVersionError, match=r"0\.32\.x.*0\.99\.1.*pip install"):
        wi.wait_promise(Pending(), 0.1)
    with pytest.warns(RuntimeWarning, match="written for wgpu-py 0.32.x and found 0.99.1"):
        assert wi.check_version() is False


def test_foreign_version_speed_paths_fall_back_recorded_and_warned_once(foreign_wgpu):
    with pytest.warns(RuntimeWarning, match="raw dispatch recording unavailable"):
        rec = wi.raw_recorder()
    assert isinstance(rec, wi.PublicRecorder)
    with pytest.warns(RuntimeWarning, match="READ_NOSYNC"):
        assert wi.map_read_mode() == "READ"
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the second time: recorded, not warned again
        assert wi.map_read_mode() == "READ"
    fb = wi.fallbacks()
    assert "raw dispatch recording" in fb and "0.99.1" in fb["map mode READ_NOSYNC"]


@pytest.mark.gpu
def test_foreign_version_training_raises_the_clear_error():
    """In a fresh process with wgpu.__version__ changed: opening the device warns once, and
    training stops at its first timed readback with WgpuVersionError (never a hang, never a
    silent fallback)."""
    code = r"""
import warnings, wgpu
wgpu.__version__ = "0.99.1"
from torch_gpubpe.core import reference
from torch_gpubpe.gpu.wgpu_internals import WgpuVersionError
from torch_gpubpe.training.trainer import train
docs = ["ab ab abc abcd", "ba"] * 3
try:
    train(docs, 262, min_frequency=1)
except WgpuVersionError as e:
    print("required:", "0.32.x" in str(e))
"""
    res = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "required: True" in res.stdout
    assert "written for wgpu-py 0.32.x and found 0.99.1" in res.stderr


def test_preparsed_cffi_types_equal_cffi_own_parse():
    """preparse_cffi_types fills cffi's type cache with exactly what cffi's own lazy parse
    gives (the same cached ctype objects), for every listed type."""
    from wgpu.backends.wgpu_native._ffi import ffi

    lazy = {}
    for c in wi.CFFI_TYPES:
        ffi._parsed_types.pop(c, None)
        lazy[c] = ffi._typeof(c, consider_function_as_funcptr=True)
    for c in wi.CFFI_TYPES:
        ffi._parsed_types.pop(c, None)
    wi.preparse_cffi_types()
    assert all(c in ffi._parsed_types for c in wi.CFFI_TYPES)
    assert all(ffi._parsed_types[c][0] is lazy[c] for c in wi.CFFI_TYPES)


def test_a_ctrl_c_a_wgpu_callback_swallowed_is_raised_by_the_next_wait():
    """cffi drops an exception raised in a callback (a Ctrl-C that lands while wgpu runs a
    buffer-map callback): the map never settles, and the wait raises the interrupt within a
    slice instead of sitting out its timeout; other unraisable errors still reach the hook
    that was there."""
    import threading
    import time

    import cffi

    class Pending:   # a promise that never settles, as the map whose callback was cut
        _state = "pending"
        _thread_event = threading.Event()

    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append   # (the hook there before: ours chains to it)
    wi.catch_lost_interrupts()         # (as a device's opening does)
    try:
        ffi = cffi.FFI()

        def cut():
            raise KeyboardInterrupt

        def broken():
            raise ValueError("a callback's own error")

        ffi.callback("void(void)", cut)()
        t = time.perf_counter()
        with pytest.raises(wi.CallbackInterrupt):
            wi.wait_promise(Pending(), 60)
        assert time.perf_counter() - t < 5
        assert wi.wait_promise(Pending(), 0.05) is False   # (raised once, then cleared)
        ffi.callback("void(void)", broken)()
        assert [type(u.exc_value) for u in seen] == [ValueError]
        # a device given up (here by such an interrupt) is not waited on again: its map
        # never settles
        from types import SimpleNamespace

        from torch_gpubpe.errors import GPUOperationError
        from torch_gpubpe.gpu.device import GPU

        gpu = SimpleNamespace(lost=False, adapter_name="test")
        ffi.callback("void(void)", cut)()
        with pytest.raises(wi.CallbackInterrupt):
            GPU.wait_promise(gpu, Pending(), "token readback")
        assert gpu.lost
        t = time.perf_counter()
        with pytest.raises(GPUOperationError, match="token readback on test: not waited for"):
            GPU.wait_promise(gpu, Pending(), "token readback")
        assert time.perf_counter() - t < 1
    finally:
        sys.unraisablehook = previous
