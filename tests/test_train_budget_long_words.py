"""The memory budget holds for MB-long words (1,000 documents that are each one
1 MB word).

Each case runs train() in a child process (its peak RSS, ``VmHWM``, is its own) on
documents that are each ONE word of 1 MB of random letters, under ``max_memory``. Exact
training on them cannot fit (the merge phase needs ~40 B per symbol), so train() must refuse
with InputError *while counting*, and the child's peak RSS must stay within ``max_memory``.
Before the fix the long words were held raw until the end (lavapipe: 1.97 GB peak under a
0.7 GB budget on 300 MB, 114 s; the H200 6.96 GB under 6 GB on 1 GB).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import subprocess_env

CHILD = r"""
import json, resource, sys, time
import numpy as np
import torch_gpubpe
from torch_gpubpe.errors import InputError

n_docs, budget, count_on = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
prune = int(sys.argv[4]) if len(sys.argv) > 4 else 0
read = []

def docs():
    for d in range(n_docs):
        rng = np.random.default_rng(d)
        read.append(d)
        yield (rng.integers(0, 26, 1_000_000) + 97).astype(np.uint8).tobytes()

out = {}
st = {}
t0 = time.perf_counter()
try:
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = torch_gpubpe.train(docs(), 300, max_memory=budget, count_on=count_on,
                               prune_below=prune, stats=st)
    out["error"] = None
    out["merges"] = len(v.merges)
    out["warnings"] = [str(w.message) for w in caught]
except InputError as e:
    out["error"] = str(e)
out["pruned_words"] = st.get("pruned_words")
out["spilled_runs"] = st.get("spilled_runs", 0)
out["seconds"] = time.perf_counter() - t0
out["docs_read"] = len(read)
# VmHWM: this process's own peak (ru_maxrss also counts the parent's RSS at the fork: Linux
# keeps the larger of the old and new memory map's peaks across execve)
out["peak_rss"] = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status")
                       if l.startswith("VmHWM:"))
print(json.dumps(out))
"""

BUDGET = 800_000_000
DOCS = 300          # 300 MB: held whole, they alone would pass the budget


@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
def test_one_mb_words_refused_while_counting_within_budget(count_on):
    r = subprocess.run([sys.executable, "-c", CHILD, str(DOCS), str(BUDGET), count_on],
                       capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["error"] is not None and "unique words" in out["error"], out
    assert "max_memory" in out["error"] and "prune_below" in out["error"], out
    # refused early: well before the corpus was read (the exact estimate passes the budget
    # after ~20 MB of distinct long words)
    assert out["docs_read"] < DOCS // 2, out
    assert out["peak_rss"] <= BUDGET, (f"peak RSS {out['peak_rss'] / 1e9:.3f} GB above "
                                       f"max_memory {BUDGET / 1e9:.2f} GB", out)


@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
def test_one_mb_words_pruned_within_budget(count_on):
    # With prune_below the words must all be counted (a later document may repeat one), so
    # they are grouped and spilled as runs, then merged with the pruning applied: every one
    # occurs once, so none is kept. Before: 60 such words peaked at 1.04 GB under 0.8 GB (the
    # long words grouped twice by Arrow, written through write_counts at ~9x their bytes, the
    # runs read whole by the merge), and 300 at 1.8 GB.
    n = 100
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), str(BUDGET), count_on, "2"],
                       capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["error"] is None, out
    assert out["docs_read"] == n and out["pruned_words"] == n and out["merges"] == 0, out
    assert out["spilled_runs"] >= 2, out      # the long words' share of 0.8 GB is < 100 MB
    assert any(f"dropped {n:,} of {n:,} unique words" in w for w in out["warnings"]), out
    assert any("training stopped after 0 of" in w for w in out["warnings"]), out
    assert out["peak_rss"] <= BUDGET, (f"peak RSS {out['peak_rss'] / 1e9:.3f} GB above "
                                       f"max_memory {BUDGET / 1e9:.2f} GB", out)
