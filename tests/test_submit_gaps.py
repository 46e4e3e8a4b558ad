"""stats["submits"] / ["max_submit_gap_s"] of the trainer's merge phase (issue 17 §1 measures the
largest gap between submits with them; benchmarks/long_word.py --train prints it)."""

from __future__ import annotations

import pytest

from torch_gpubpe import reference
from torch_gpubpe.trainer import train

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("algorithm", ["wordlist", "seed"])
def test_submit_gaps_are_recorded(algorithm):
    docs = ["the cat sat on the mat " * 40, "a" * 5000, "ab" * 700]
    st: dict = {}
    vocab = train(docs, 256 + 60, min_frequency=1, stats=st, batch=16, algorithm=algorithm)
    assert list(vocab.merges) == reference.train(docs, 256 + 60, 1)
    # clear+count, then batches of 16 (60 merges: at least 4), continuations for the long word
    assert st["submits"] >= 5
    assert 0 < st["max_submit_gap_s"] <= st["seconds_merge"] + st["seconds_upload"]
    assert st["max_submit_gap_before"] in ("count", "merges", "continue")
