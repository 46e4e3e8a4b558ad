"""``python -m torch_gpubpe doctor``: what this machine offers torch_gpubpe, and what to install.

Prints, in order: versions (torch_gpubpe, wgpu, Python, OS); the environment variables that steer
adapter choice; the Vulkan loader and driver files found; every adapter wgpu sees (backend, type,
name, the features this package uses); the adapter :func:`torch_gpubpe.gpu.device.get_gpu` opens, with
its subgroup size (read from a shader) and limits; and a self-test that encodes and trains a
small text on that device and compares the result with :mod:`torch_gpubpe.core.reference`.
Returns 0 when a device works and is exact, 2 otherwise (with the command that fixes it).

``--install`` first installs Mesa's lavapipe with the system's package manager when wgpu sees no
Vulkan/Metal/D3D12 adapter (as root, or through ``sudo -n``; the commands are those of
:func:`torch_gpubpe.gpu.device.install_commands`), then reports as above in a fresh process.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import TextIO

from torch_gpubpe import __version__
from torch_gpubpe.cli.common import add_debug
from torch_gpubpe.errors import GPUBPEError

_ENV = ("TORCH_GPUBPE_ADAPTER", "TORCH_GPUBPE_NO_SUBGROUPS", "TORCH_GPUBPE_TIMEOUT",
        "VK_ICD_FILENAMES", "VK_DRIVER_FILES", "XDG_RUNTIME_DIR")
_FEATURES = ("subgroup", "timestamp-query", "shader-int64")
_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size",
           "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
           "max-storage-buffers-per-shader-stage")
_SELF_TEST = ["yakınlık ve 2026 yılı", "a  b\t\r\n x=1;", "İstanbul’da 🙂 emoji", ""]


def add_parser(sub) -> None:
    """Add the ``doctor`` subcommand to ``sub`` (argparse subparsers)."""
    d = sub.add_parser(
        "doctor", help="show the GPU adapters, the one used, its limits, and what to install",
        description="Report what torch_gpubpe sees on this machine: wgpu's adapters, the one it "
                    "opens (subgroup size, limits), a small exact self-test on it, and the command "
                    "that installs a Vulkan device when there is none. Exit status 0 when usable.",
    )
    d.add_argument("--install", action="store_true",
                   help="first install Mesa's lavapipe (Vulkan on the CPU) with the system's "
                        "package manager when there is no Vulkan/Metal/D3D12 adapter (root or "
                        "sudo -n)")
    add_debug(d)


def cmd_doctor(args) -> int:
    """``doctor``: :func:`run` (after :func:`install` with ``--install``)."""
    return run(install_missing=args.install)


def _has_native_adapter() -> bool:
    """Whether wgpu sees a Vulkan/Metal/D3D12 adapter, asked in a child process (this process
    must not cache an instance made before the driver was installed)."""
    code = ("import wgpu, torch_gpubpe.gpu.device as g; g.ensure_runtime_dir()\n"
            "try:\n    a = wgpu.gpu.enumerate_adapters_sync()\nexcept Exception:\n    a = []\n"
            "raise SystemExit(0 if any(g.adapter_rank(x.info) < 10 for x in a) else 1)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def _run_install(cmds: list[list[str]], out: TextIO, hint: str) -> int:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for c in cmds:
        argv = ["sudo", "-n", *c[1:]] if c[0] == "sudo" else c
        print(f"install: {' '.join(argv)}", file=out, flush=True)
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            print(f"install: failed (exit {r.returncode}): {r.stderr.strip()[-400:]}\n"
                  f"run it yourself: {hint}", file=out)
            return 2
    return 0


def install_compiler(out: TextIO = sys.stdout) -> int:
    """Install a C compiler when none is found (the str → UTF-8 packer is built with it on
    first use; without one, str documents are packed by a slower path, said once); 0 when one
    is found afterwards."""
    from torch_gpubpe.core.utf8_native import c_compiler
    from torch_gpubpe.gpu.device import compiler_install_commands

    if c_compiler() is not None:
        return 0
    cmds = compiler_install_commands()
    hint = " && ".join(" ".join(c) for c in cmds) or "install gcc or clang"
    if not cmds or not shutil.which(cmds[-1][1 if cmds[-1][0] == "sudo" else 0]):
        print(f"install: no C compiler and no package manager known here; run: {hint}", file=out)
        return 2
    if _run_install(cmds, out, hint) != 0:
        return 2
    if c_compiler() is None:
        print("install: done, but no C compiler (cc, gcc, clang) is on PATH", file=out)
        return 2
    return 0


def install(out: TextIO = sys.stdout) -> int:
    """Install Mesa's lavapipe when no native adapter exists, and a C compiler when none is
    found; 0 when both exist afterwards."""
    from torch_gpubpe.gpu.device import install_commands, install_hint

    if install_compiler(out) != 0:
        return 2
    if _has_native_adapter():
        print("install: a Vulkan/Metal/D3D12 adapter is present; nothing to install", file=out)
        return 0
    cmds = install_commands()
    if not cmds or not shutil.which(cmds[-1][1 if cmds[-1][0] == "sudo" else 0]):
        print(f"install: no package manager known here; run: {install_hint()}", file=out)
        return 2
    if _run_install(cmds, out, install_hint()) != 0:
        return 2
    if not _has_native_adapter():
        print("install: done, but wgpu still sees no Vulkan adapter", file=out)
        return 2
    return 0


def run(out: TextIO = sys.stdout, *, install_missing: bool = False) -> int:
    """Print the report to ``out``; return the exit status (0 usable and exact, 2 not).
    With ``install_missing``, :func:`install` runs first."""
    from torch_gpubpe.gpu import device as gpumod

    if install_missing and install(out) != 0:
        return 2

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    runtime_dir_set = gpumod.ensure_runtime_dir() != runtime_dir
    say(f"torch_gpubpe {__version__}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()} ({platform.machine()})")
    try:
        import wgpu
    except ImportError:
        say("wgpu: NOT INSTALLED — pip install 'wgpu>=0.32,<0.33'")
        return 2
    say(f"wgpu {wgpu.__version__}")
    say("environment: " + ", ".join(
        f"{k}={os.environ[k]!r}" + (" (set by torch_gpubpe: Mesa's drivers need one)"
                                    if k == "XDG_RUNTIME_DIR" and runtime_dir_set else "")
        for k in _ENV if k in os.environ))
    import ctypes.util

    loader = ctypes.util.find_library("vulkan")
    icds = sorted(glob.glob("/usr/share/vulkan/icd.d/*.json") + glob.glob("/etc/vulkan/icd.d/*.json"))
    say(f"Vulkan loader: {loader or 'not found'}; driver files: "
        + (", ".join(os.path.basename(p) for p in icds) or "none"))
    from torch_gpubpe.core import str_pack
    from torch_gpubpe.core.utf8_native import c_compiler, why_not

    cc = c_compiler()
    if str_pack.available():
        say(f"str → UTF-8 packer: compiled ({cc}), GIL-free threads")
    else:
        say(f"str → UTF-8 packer: NOT COMPILED ({why_not() or 'unavailable'}): str documents "
            "are packed by the slower path; `doctor --install` installs a C compiler")

    try:
        adapters = list(wgpu.gpu.enumerate_adapters_sync())
    except Exception as e:  # noqa: BLE001 - wgpu raises RuntimeError when it finds none
        adapters, why = [], " ".join(str(e).split())[:200]
        say(f"adapters: none ({why})")
    for a in adapters:
        feats = [f for f in _FEATURES if f in a.features]
        say(f"  adapter: {gpumod.describe_adapter(a)}; features: {', '.join(feats) or 'none'}; "
            f"rank {gpumod.adapter_rank(a.info)} (lower is preferred; OpenGL ≥ 10)")

    t0 = time.perf_counter()
    try:
        g = gpumod.get_gpu()
    except GPUBPEError as e:
        say(f"\nNOT USABLE: {e}")
        return 2
    say(f"chosen: {g.adapter_name}{' (last resort: OpenGL)' if g.is_fallback else ''}; "
        f"opened in {time.perf_counter() - t0:.2f} s")
    say(f"  subgroups: {'size ' + str(g.subgroup_size) if g.has_subgroups else 'off (portable path)'}; "
        f"timestamps: {'yes' if g.has_timestamps else 'no'}")
    for k in _LIMITS:
        if k in g.limits:
            say(f"  {k}: {int(g.limits[k]):,}")
    return _self_test(say, g)


def _self_test(say, g) -> int:
    from torch_gpubpe.core import reference
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.training.trainer import train

    t0 = time.perf_counter()
    docs = _SELF_TEST * 8
    import warnings

    try:
        with warnings.catch_warnings():  # the tiny corpus stops early by design
            warnings.simplefilter("ignore", RuntimeWarning)
            vocab = train(docs, vocab_size=300, min_frequency=1)
        merges = reference.train(docs, vocab_size=300, min_frequency=1)
        ids = Tokenizer(vocab).encode_batch(_SELF_TEST).tolist()
    except GPUBPEError as e:
        say(f"self-test: FAILED on {g.adapter_name}: {e}")
        return 2
    want = [reference.encode(d, merges) for d in _SELF_TEST]
    ok = list(vocab.merges) == list(merges) and ids == want
    say(f"self-test (train + encode vs torch_gpubpe.core.reference): "
        f"{'exact' if ok else 'MISMATCH — please report it with this output'} "
        f"({time.perf_counter() - t0:.2f} s)")
    if g.is_fallback:
        from torch_gpubpe.gpu.device import install_hint

        say(f"note: for a Vulkan device instead of OpenGL: {install_hint()}")
    return 0 if ok else 2
