"""The built wheel carries the WGSL shaders, and the kernel runs from an installed copy."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_wheel_contains_shaders_and_runs_outside_checkout(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"), str(ROOT)],
        check=True, timeout=600,
    )
    (wheel,) = (tmp_path / "w").glob("torch_gpubpe-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "torch_gpubpe/core/tables/unicode_classes.npz" in names  # the regex pre-tokenizers' table
    for shader in sorted(p.name for p in (ROOT / "wgsl").glob("*.wgsl")):
        assert f"torch_gpubpe/wgsl/{shader}" in names
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True, timeout=600,
    )
    code = (
        "import torch_gpubpe, torch_gpubpe.gpu.shaders as s; "
        "from torch_gpubpe.encoding.pretokenize import word_starts_gpu; "
        "assert str(s.wgsl_dir()).startswith(%r), s.wgsl_dir(); "
        "print(word_starts_gpu([b'a  b'])[0])" % str(site)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True, True, True, False]"


def test_sources_compile_without_warnings():
    """No invalid escape sequence (DeprecationWarning, a SyntaxWarning from Python 3.12, an error
    later) in any source: compiled here from the text, as a .pyc cache would hide it."""
    import warnings

    files = sorted(p for d in ("torch_gpubpe", "tests", "benchmarks", "examples")
                   for p in (ROOT / d).rglob("*.py"))
    assert len(files) > 50
    for p in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(p.read_text(encoding="utf-8"), str(p), "exec")
