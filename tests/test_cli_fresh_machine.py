"""What a new user meets on a fresh machine: no driver, OpenGL only, the doctor, Mesa's
XDG_RUNTIME_DIR complaint (issue: a plain clone on a fresh machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import subprocess_env

pytestmark = pytest.mark.gpu

# Hides every Vulkan driver from the loader; the EGL variable hides Mesa's OpenGL too.
NO_VULKAN = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json"}
NO_GL = {"__EGL_VENDOR_LIBRARY_FILENAMES": "/nonexistent.json"}


def _run(args: list[str], timeout: int = 300, drop: tuple[str, ...] = (), **env: str):
    e = subprocess_env(**env)
    for k in drop:
        e.pop(k, None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def test_no_adapter_is_a_named_error_with_the_fix():
    code = ("import torch_gpubpe as t\n"
            "try:\n    t.get_gpu()\nexcept t.NoAdapterError as e:\n    print('CAUGHT', e)\n")
    r = _run(["-c", code], **NO_VULKAN, **NO_GL)
    assert r.returncode == 0, r.stderr
    assert "CAUGHT no GPU adapter" in r.stdout
    # the drivers are installed here; the variables hide them, and the message says so
    assert "VK_ICD_FILENAMES=/nonexistent.json" in r.stdout and "unset it" in r.stdout
    assert "Traceback" not in r.stderr


def test_no_driver_message_names_the_install_command(monkeypatch):
    """Where the loader or the driver files are missing, the message gives the command."""
    import ctypes.util

    from torch_gpubpe.gpu import device as gpu

    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    monkeypatch.delenv("VK_DRIVER_FILES", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(gpu.os.path, "isdir", lambda p: False)
    monkeypatch.setattr(gpu, "_os_release", lambda: {"ID": "debian"})
    msg = gpu.no_adapter_message("wgpu: No suitable graphics adapter found")
    assert "missing: the Vulkan loader (libvulkan.so.1), a Vulkan driver" in msg
    assert "doctor --install" in msg
    assert "apt-get update && " in msg and "install -y --no-install-recommends " \
        "mesa-vulkan-drivers libvulkan1" in msg
    assert msg.count("\n") <= 5 and "(wgpu: No suitable graphics adapter found)" in msg


def test_cli_without_adapter_prints_a_few_lines_and_exits_2():
    r = _run(["-m", "torch_gpubpe", "train"], **NO_VULKAN, **NO_GL)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("torch_gpubpe: error: no GPU adapter")
    assert 2 <= len(lines) <= 6, r.stderr
    assert any("unset it" in ln for ln in lines) and any("doctor" in ln for ln in lines)
    dbg = _run(["-m", "torch_gpubpe", "--debug", "train"], **NO_VULKAN, **NO_GL)
    assert "Traceback" in dbg.stderr and "NoAdapterError" in dbg.stderr


def test_opengl_is_the_last_resort_and_exact():
    """With Vulkan hidden, Mesa's OpenGL llvmpipe is used, said once, and gives the reference's
    merges and ids. Runs where an OpenGL driver exists (CI's machines have Mesa's); elsewhere it
    is reported as not run (the no-driver error is the test above)."""
    code = (
        "import warnings, torch_gpubpe as t\n"
        "from torch_gpubpe import reference\n"
        "docs = ['yakınlık ve yakınlık 2026 yılı', 'x=1;\\r\\n  \\t b', 'İstanbul 🙂'] * 20\n"
        "try:\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        g = t.get_gpu()\n"
        "except t.NoAdapterError as e:\n"
        "    print('NOADAPTER', e); raise SystemExit(0)\n"
        "print('CHOSEN', g.adapter_name, g.is_fallback, g.has_subgroups)\n"
        "print('WARNED', sum('last resort' in str(x.message) for x in w))\n"
        "v = t.train(docs, vocab_size=320, min_frequency=1)\n"
        "m = reference.train(docs, vocab_size=320, min_frequency=1)\n"
        "ids = t.Tokenizer(v).encode_batch(docs).tolist()\n"
        "print('EXACT', list(v.merges) == list(m) and ids == [reference.encode(d, m) for d in docs])\n"
    )
    r = _run(["-c", code], **NO_VULKAN)
    assert r.returncode == 0, r.stderr
    if "NOADAPTER" in r.stdout:
        pytest.skip("no OpenGL driver on this machine: the OpenGL path was not run")
    assert "CHOSEN" in r.stdout and "OpenGL" in r.stdout and "True False" in r.stdout, r.stdout
    assert "WARNED 1" in r.stdout
    assert "EXACT True" in r.stdout


def test_doctor_reports_adapter_and_self_test():
    r = _run(["-m", "torch_gpubpe", "doctor"])
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "wgpu 0.32" in out and "chosen:" in out
    assert "max-storage-buffer-binding-size" in out
    assert "self-test (train + encode vs torch_gpubpe.core.reference): exact" in out
    bad = _run(["-m", "torch_gpubpe", "doctor"], **NO_VULKAN, **NO_GL)
    assert bad.returncode == 2 and "NOT USABLE" in bad.stdout and "unset it" in bad.stdout


def test_runtime_dir_default_silences_mesa(tmp_path):
    """Mesa prints 'XDG_RUNTIME_DIR is invalid or not set' at adapter request on a headless
    root shell; the package sets a private directory before wgpu loads a driver."""
    code = ("import os, torch_gpubpe as t\n"
            "t.get_gpu()\n"
            "d = os.environ['XDG_RUNTIME_DIR']\n"
            "print('DIR', d, oct(os.stat(d).st_mode & 0o777))\n")
    r = _run(["-c", code], drop=("XDG_RUNTIME_DIR",))
    assert r.returncode == 0, r.stderr
    assert "XDG_RUNTIME_DIR" not in r.stderr, r.stderr
    assert "torch_gpubpe-runtime-" in r.stdout and "0o700" in r.stdout
    keep = _run(["-c", code], XDG_RUNTIME_DIR=str(tmp_path))
    assert f"DIR {tmp_path} " in keep.stdout  # a valid directory is left alone


def test_doctor_says_when_it_set_the_runtime_dir(tmp_path):
    """doctor's environment line says the XDG_RUNTIME_DIR it shows was set by the package
    (the user did not set it), and shows a user's own without that remark."""
    set_here = _run(["-m", "torch_gpubpe", "doctor"], drop=("XDG_RUNTIME_DIR",))
    assert "(set by torch_gpubpe: Mesa's drivers need one)" in set_here.stdout, set_here.stdout
    own = _run(["-m", "torch_gpubpe", "doctor"], XDG_RUNTIME_DIR=str(tmp_path))
    line = next(x for x in own.stdout.splitlines() if x.startswith("environment:"))
    assert str(tmp_path) in line and "set by torch_gpubpe" not in line


def test_adapter_rank_prefers_real_gpus_and_keeps_opengl_last():
    from torch_gpubpe.gpu.device import adapter_rank

    def info(backend, kind):
        return {"backend_type": backend, "adapter_type": kind}

    order = sorted([info("OpenGL", "CPU"), info("Vulkan", "CPU"), info("OpenGL", "DiscreteGPU"),
                    info("Vulkan", "IntegratedGPU"), info("Vulkan", "DiscreteGPU")],
                   key=adapter_rank)
    assert [(i["backend_type"], i["adapter_type"]) for i in order] == [
        ("Vulkan", "DiscreteGPU"), ("Vulkan", "IntegratedGPU"), ("Vulkan", "CPU"),
        ("OpenGL", "DiscreteGPU"), ("OpenGL", "CPU")]


def test_doctor_install_runs_the_package_manager_only_when_needed(monkeypatch):
    import io

    from torch_gpubpe.cli import doctor
    from torch_gpubpe.gpu import device as gpu

    calls = []
    present = iter([False, True])  # no adapter before the install, one after
    monkeypatch.setattr(doctor, "_has_native_adapter", lambda: next(present))
    monkeypatch.setattr(gpu, "install_commands", lambda: [["true", "apt-get", "update"]])
    real_run = doctor.subprocess.run

    def fake_run(argv, **kw):
        calls.append(argv)
        return real_run(["true"], **kw)

    monkeypatch.setattr(doctor.subprocess, "run", fake_run)
    out = io.StringIO()
    assert doctor.install(out) == 0 and calls == [["true", "apt-get", "update"]]
    # a failing install says what to run by hand
    monkeypatch.setattr(doctor, "_has_native_adapter", lambda: False)
    monkeypatch.setattr(doctor.subprocess, "run", lambda argv, **kw: real_run(["false"], **kw))
    out = io.StringIO()
    assert doctor.install(out) == 2
    assert "run it yourself:" in out.getvalue()
    # an adapter present: nothing runs
    monkeypatch.setattr(doctor, "_has_native_adapter", lambda: True)
    monkeypatch.setattr(doctor.subprocess, "run", lambda *a, **k: pytest.fail("ran a command"))
    assert doctor.install(io.StringIO()) == 0


def test_doctor_install_adds_a_c_compiler_only_when_none_is_found(monkeypatch):
    """The str → UTF-8 packer is compiled on first use: `doctor --install` installs a C
    compiler when cc/gcc/clang are all missing, and runs nothing when one is there."""
    import io

    from torch_gpubpe.core import utf8_native as _utf8_native
    from torch_gpubpe.cli import doctor
    from torch_gpubpe.gpu import device as gpu

    monkeypatch.setattr(doctor, "_has_native_adapter", lambda: True)
    found = iter([None, "gcc"])  # none before the install, gcc after
    monkeypatch.setattr(_utf8_native, "c_compiler", lambda: next(found))
    monkeypatch.setattr(gpu, "compiler_install_commands",
                        lambda: [["true", "apt-get", "install", "gcc"]])
    calls = []
    real_run = doctor.subprocess.run

    def fake_run(argv, **kw):
        calls.append(argv)
        return real_run(["true"], **kw)

    monkeypatch.setattr(doctor.subprocess, "run", fake_run)
    assert doctor.install(io.StringIO()) == 0 and calls == [["true", "apt-get", "install", "gcc"]]
    # installed but still none on PATH: said, status 2
    monkeypatch.setattr(_utf8_native, "c_compiler", lambda: None)
    out = io.StringIO()
    assert doctor.install(out) == 2 and "no C compiler" in out.getvalue()
    # one present: nothing runs
    monkeypatch.setattr(_utf8_native, "c_compiler", lambda: "cc")
    monkeypatch.setattr(doctor.subprocess, "run", lambda *a, **k: pytest.fail("ran a command"))
    assert doctor.install(io.StringIO()) == 0
