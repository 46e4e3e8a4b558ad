"""Under DDP (``torchrun --nproc_per_node=2``, gloo, CPU) with shards of unequal length, every
rank takes the same number of steps per epoch — the rank with the most's; the shorter shard
repeats its first batches — so a training step's collective never waits for a rank that has
stopped; a rank with nothing to repeat makes every rank raise the same named error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).with_name("ddp_unequal_shards.py")


def run(tmp_path, *args: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        str(SCRIPT), *args, str(tmp_path)], capture_output=True, text=True,
                       timeout=600,
                       env=subprocess_env(OMP_NUM_THREADS="1", TORCH_GPUBPE_ADAPTER=""))
    rows = [json.loads(ln) for f in sorted(tmp_path.glob("rank*.jsonl"))
            for ln in f.read_text().splitlines()]
    assert rows, r.stdout[-2000:] + r.stderr[-3000:]
    return rows


@pytest.mark.parametrize("workers", ["0", "1"])
def test_unequal_shards_take_the_same_steps_on_every_rank(tmp_path, workers):
    rows = run(tmp_path, "even", "5", workers)   # rank 0: documents 0, 2, 4; rank 1: 1, 3
    by = {(r["rank"], r["epoch"]): r for r in rows}
    assert sorted(by) == [(0, 0), (0, 1), (1, 0), (1, 1)], rows
    for epoch in (0, 1):
        r0, r1 = by[0, epoch], by[1, epoch]
        assert r0["steps"] == r1["steps"] == 3
        assert sorted(r0["seen"]) == [0, 2, 4] and r0["even_stats"]["repeated_batches"] == 0
        assert r1["seen"] == [1, 3, 1] and r1["even_stats"]["repeated_batches"] == 1


def test_a_rank_with_no_document_stops_every_rank_with_a_named_error(tmp_path):
    rows = run(tmp_path, "even", "1", "0")            # rank 1 has no document at all
    assert sorted(r["rank"] for r in rows) == [0, 1]
    assert all("a rank has no batch" in r.get("error", "") for r in rows), rows


def test_a_rank_that_fails_to_read_stops_every_rank(tmp_path):
    """A bad document on one rank: that rank raises its error, the other a named one, at the
    same step (no hang in the next collective)."""
    rows = run(tmp_path, "fail", "7", "0")
    errors = {r["rank"]: r.get("error", "") for r in rows}
    assert "document 3" in errors[1] and "another rank failed" in errors[0], rows
