"""Long chains of adjacent occurrences merged in parallel (wgsl/train_long.wgsl).

A run of one byte (``b"a" * 5_000_000``) or of two alternating symbols is ONE chain of the
word-list walk; past ``train_wordlist.LONG_MIN_CHAIN`` occurrences its thread hands the rest to
the long-chain kernels, which merge it in rounds of ``LONG_WINDOW`` stream positions. Every test
compares the merges with ``torch_gpubpe.core.reference.train`` (nothing hard-coded) and checks from
``stats`` that the long path ran. The threshold and window are forced small here (monkeypatched
module constants, read at each run), so that chains cross them in every way: chains just under,
at and over the threshold, odd and even runs, windows that cut a pair (its right half past the
window), windows that hold one live symbol (late merges of a run: 2^k − 1 dead positions per live
one), several runs per word, runs next to other text, more long chains than the table holds.

| case | test |
|---|---|
| runs of one byte / two symbols, lengths around the threshold, several thresholds + windows | test_runs_around_the_threshold |
| the defaults (1,024 occurrences, 2^20 positions): runs a little past 2,048 bytes | test_default_threshold |
| more long chains in one merge than the table holds: the rest walked serially, said | test_full_table_walks_the_rest |
| random runs, thresholds, windows, budgets | test_random_runs_equal_reference |
| off (NEVER) vs on: same merges, far fewer continue dispatches | test_long_path_replaces_the_serial_walk |
| 1 MB runs, odd and even, in text (heavy) | test_heavy_megabyte_runs |
| workgroup memory poisoned before each kernel: still exact | test_poisoned_workgroup_memory |
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from torch_gpubpe.core import reference
from torch_gpubpe.training import merge_loop
from torch_gpubpe.training import wordlist_loop as train_wordlist
from torch_gpubpe import GPUBPEWarning
from torch_gpubpe.training.trainer import GPUTrainer

pytestmark = pytest.mark.gpu


def _set(monkeypatch, min_chain=None, window=None, cap=None):
    for name, v in (("LONG_MIN_CHAIN", min_chain), ("LONG_WINDOW", window), ("LONG_CAP", cap)):
        if v is not None:
            monkeypatch.setattr(train_wordlist, name, v)


def _check(docs, merges, budget=None):
    """GPU merges == reference merges (min_frequency 1); the run's stats."""
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    st: dict = {}
    got = GPUTrainer().run(words, [counts[w] for w in words], merges, 1, stats=st, batch=16,
                           budget=budget)
    assert got == reference.train(docs, 256 + merges, 1)
    return st


def _runs(t: int) -> dict[str, list[str]]:
    """Corpora whose first merges' chains have about t occurrences (t − 2 … t + 2)."""
    lens = range(max(2, 2 * t - 3), 2 * t + 5)
    return {
        "one byte": ["a" * n for n in lens],
        "two symbols": ["ab" * (n // 2) + "a" * (n % 2) for n in lens] + ["b" + "ab" * t],
        "in text": [f"x{'a' * n}yab" for n in lens] + ["the cat " + "ab" * t + "ba"],
        "several per word": ["a" * n + "b" * (n + 1) + "ab" * n + "a" * (n + 3) for n in lens],
    }


@pytest.mark.parametrize("min_chain,window", [(0, 1), (1, 3), (8, 5), (8, 64), (8, 1 << 20)])
@pytest.mark.parametrize("case", list(_runs(1)))
def test_runs_around_the_threshold(monkeypatch, min_chain, window, case):
    _set(monkeypatch, min_chain, window)
    docs = _runs(max(min_chain, 3) if window > 3 else 4)[case]
    st = _check(docs, 30)
    assert st["long_chains"] >= 1 and st["long_rounds"] >= 1 and st["long_chains_serial"] == 0


def test_default_threshold():
    """At the defaults, runs just past 2 × 1,024 bytes (chains of 1,025–1,027 occurrences in the
    first merge) take the long path."""
    assert train_wordlist.LONG_MIN_CHAIN == 1024
    docs = ["a" * 2050, "a" * 2053, "ab" * 1027, "b" + "ab" * 1026 + "a", "q" + "a" * 2200 + "z"]
    st = _check(docs, 24)
    assert st["long_chains"] >= 5 and st["long_chains_serial"] == 0


def test_full_table_walks_the_rest(monkeypatch):
    """LONG_CAP = 1: of a merge's several long chains one is handed over, the others are walked
    by their own thread (recorded, warned once); same merges."""
    _set(monkeypatch, min_chain=2, window=16, cap=1)
    monkeypatch.setattr(merge_loop, "_noticed", set())
    docs = ["a" * 40, "b" * 41 + "a" * 30, "ab" * 30, "c" * 50 + "d" * 51, "a" * 61]
    with pytest.warns(GPUBPEWarning, match="long_chains_serial"):
        st = _check(docs, 30)
    assert st["long_chains"] >= 1 and st["long_chains_serial"] >= 1


@pytest.mark.parametrize("budget", [None, 16])
def test_member_runs_in_a_step_of_several_merges(monkeypatch, budget):
    """A step of two merges, (c, d) and (a, b) ("cd" outweighs the run's own (b, a)): a run of
    (a, b) goes to the long path with its member, and the (c, d) right after it goes back to a
    carried walk (long_chains_resumed), then the next run of (a, b) is handed over again. The
    merges equal the reference's; with the long path off they are the same, through far more
    continue dispatches (the serial walk, carried)."""
    docs = ["ab" * 3000 + "cd", "x" + "ab" * 2000 + "cdcd" + "ab" * 1000 + "y"] + ["cd"] * 7000
    st = {}
    for min_chain in (train_wordlist.NEVER, 16):
        _set(monkeypatch, min_chain=min_chain)
        st[min_chain] = _check(docs, 12, budget=budget)
        assert st[min_chain]["merges_per_step"] > 1
    off, on = st[train_wordlist.NEVER], st[16]
    assert off["long_chains"] == 0
    assert on["long_chains"] >= 3 and on["long_chains_resumed"] >= 2, on
    if budget is not None:
        assert on["continuation_dispatches"] * 4 < off["continuation_dispatches"], (on, off)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=hst.lists(hst.tuples(hst.sampled_from(["a", "b", "ab", "aab", "ba", " ", "abc"]),
                                 hst.integers(1, 90)), min_size=1, max_size=10),
       min_chain=hst.sampled_from([0, 1, 2, 5]), window=hst.sampled_from([1, 2, 7, 64, 4096]),
       budget=hst.sampled_from([None, 16]))
def test_random_runs_equal_reference(runs, min_chain, window, budget):
    with pytest.MonkeyPatch.context() as mp:
        _set(mp, min_chain, window)
        text = "".join(s * k for s, k in runs)
        _check([text, text[: len(text) // 2] + " z" + text[::-1]], 24, budget)


def test_long_path_replaces_the_serial_walk(monkeypatch):
    """The same corpus with the long path off (NEVER: the serial walk, carried across budgeted
    wl_continue dispatches) and on: the same merges; on, far fewer continue dispatches."""
    docs = ["a" * 20_001, "ab" * 8_000, "x" + "a" * 9_000 + "y"]
    st = {}
    for min_chain in (train_wordlist.NEVER, 64):
        _set(monkeypatch, min_chain=min_chain)
        st[min_chain] = _check(docs, 16, budget=256)
    off, on = st[train_wordlist.NEVER], st[64]
    assert off["long_chains"] == 0 and on["long_chains"] >= 3
    assert on["continuation_dispatches"] * 4 < off["continuation_dispatches"]


@pytest.mark.heavy
@pytest.mark.parametrize("docs", [
    ["a" * 1_000_000, "a" * 1_000_001, "q" + "a" * 999_999 + "z ab"],
    ["ab" * 500_000, "b" + "ab" * 500_000, "the " + "ba" * 499_999 + "c aab"],
], ids=["one byte", "two symbols"])
def test_heavy_megabyte_runs(docs):
    """1 MB runs at the default threshold and window: exact, through the long path."""
    st = _check(docs, 40)
    assert st["long_chains"] >= 3 and st["long_chains_serial"] == 0


def test_poisoned_workgroup_memory(monkeypatch):
    """The long-chain kernels initialise the workgroup memory they read: with every variable
    filled with 0xDEADBEEF first (tests/test_gpu_poison_workgroup.py's build), still exact."""
    from torch_gpubpe.gpu import device as gpumod
    from wgsl_poison import POISON_FLAG

    g = gpumod.get_gpu()
    base = g.flags
    monkeypatch.setattr(type(g), "flags", property(lambda self: base | {POISON_FLAG}))
    monkeypatch.setattr(g, "_modules", {})
    monkeypatch.setattr(g, "_pipelines", {})
    _set(monkeypatch, min_chain=2, window=300)
    st = _check(_runs(4)["several per word"] + ["ab" * 700, "a" * 2049], 24)
    assert st["long_chains"] >= 1
