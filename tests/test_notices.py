"""The package's user-facing warnings print as one clean line (torch_gpubpe.notices), without
touching the warning filters or the format of other packages' warnings."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import subprocess_env
from torch_gpubpe.notices import GPUBPEWarning, warn

PKG = Path(__file__).resolve().parents[1] / "torch_gpubpe"

# A real notice on a host-only path: a JSON Lines file with a lone surrogate escape, which
# pyarrow refuses, is read line by line and warned once (readers._warn_once); then a warning of
# another category, which must keep Python's format (location + source line).
CHILD = r'''
import sys, warnings
import numpy, pyarrow, pyarrow.json  # their own filters (numpy adds some) come first
before = list(warnings.filters)
from torch_gpubpe.io.readers import FileReader
import torch_gpubpe.notices
assert warnings.filters == before, "filters changed"
p = sys.argv[1]
open(p, "w").write('{"text": "a \\ud800 b"}\n{"text": "ok"}\n')
assert len([v for b in FileReader(p).batches() for v in b.values.to_pylist()]) == 2
warnings.warn("someone else's warning", UserWarning)
'''


def test_a_notice_prints_one_line_and_others_keep_their_format(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert re.fullmatch(r"GPUBPEWarning: torch_gpubpe\.io\.readers: a JSON Lines chunk .*", lines[0])
    # then the other warning, in Python's format: location, then its source line
    assert lines[1:] == [f"{script}:11: UserWarning: someone else's warning",
                         """  warnings.warn("someone else's warning", UserWarning)"""], lines


def test_category_filters_and_catching():
    assert issubclass(GPUBPEWarning, RuntimeWarning)  # code filtering RuntimeWarning still works
    with pytest.warns(GPUBPEWarning, match="^torch_gpubpe: x$") as rec:
        warn("torch_gpubpe: x")
    assert rec[0].filename == __file__  # stacklevel counts from warn's caller
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=GPUBPEWarning)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default", UserWarning)
            warn("hidden")
        assert seen == []
    f = warnings.formatwarning
    assert f("m", GPUBPEWarning, "a.py", 3, "code()") == "GPUBPEWarning: m\n"
    assert f("m", UserWarning, "a.py", 3, "code()") == "a.py:3: UserWarning: m\n  code()\n"


def test_every_package_warning_goes_through_notices():
    """No ``warnings.warn`` in the package outside notices.py (a new one would print the
    source line again)."""
    offenders = [f"{p.name}:{k}" for p in sorted(PKG.rglob("*.py")) if p.name != "notices.py"
                 for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"\bwarnings\.warn(_explicit)?\(", line)]
    assert offenders == []


@pytest.mark.gpu
def test_training_notice_points_at_the_caller():
    from torch_gpubpe import train

    with pytest.warns(GPUBPEWarning, match="training stopped after") as rec:
        train(["ab ab"], 300, min_frequency=1)
    assert [w.filename for w in rec] == [__file__]


def test_docstring_example():
    import doctest

    from torch_gpubpe import notices

    res = doctest.testmod(notices)
    assert res.attempted > 0 and res.failed == 0
