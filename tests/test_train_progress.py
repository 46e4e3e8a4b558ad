"""Training progress reports (:class:`~torch_gpubpe.training.progress.TrainProgress`): each
report's ``last_count`` is the count of the last merge learned so far and its
``merge_counts`` the counts of the merges learned since the previous report, so that all of
them concatenated are every merge's count in order. The oracle: merge k's count is its pair's
frequency in the word counts after merges 0 .. k-1 (what the reference trainer ranks by).

The word list learns several merges per GPU step: the tests check that such steps happened (a
report with more merges than its batch has steps), on both algorithms, both word counters,
walks carried past their budget, rebuilt tables and restarts after an overflow."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.training import wordlist_loop
from torch_gpubpe.training.trainer import ALGORITHMS, GPUTrainer, TrainProgress, train

pytestmark = pytest.mark.gpu


def merge_left_to_right(word: tuple[int, ...], a: int, b: int, new: int) -> tuple[int, ...]:
    out: list[int] = []
    j = 0
    while j < len(word):
        if j + 1 < len(word) and word[j] == a and word[j + 1] == b:
            out.append(new)
            j += 2
        else:
            out.append(word[j])
            j += 1
    return tuple(out)


def reference_counts(word_counts, merges) -> list[int]:
    """Merge k's count: the occurrences of its pair (overlapping, as the reference counts them)
    times the word counts, in the words after merges 0 .. k-1 (merged left to right)."""
    words = [tuple(w) for w in word_counts if len(w) > 1]
    weights = [int(word_counts[w]) for w in word_counts if len(w) > 1]
    where: dict[int, set[int]] = defaultdict(set)   # token → words that held it (a superset)
    for i, w in enumerate(words):
        for t in w:
            where[t].add(i)
    out = []
    for k, (a, b) in enumerate(merges):
        total = 0
        for i in where[a] & where[b]:
            w = words[i]
            n = sum(1 for x, y in zip(w, w[1:]) if x == a and y == b)
            if n:
                total += n * weights[i]
                words[i] = merge_left_to_right(w, a, b, 256 + k)
                where[256 + k].add(i)
        out.append(total)
    return out


def check_reports(reports: list[TrainProgress], want: list[int]) -> None:
    """``last_count`` of every report is the count of the last merge reported so far; the
    reports' ``merge_counts`` concatenated are ``want``, one array per report."""
    assert reports
    done = 0
    for r in reports:
        assert isinstance(r.merge_counts, np.ndarray) and r.merge_counts.dtype == np.uint64
        assert r.merges_done == done + len(r.merge_counts)
        done = r.merges_done
        assert r.last_count == (want[done - 1] if done else 0), done
    got = np.concatenate([r.merge_counts for r in reports])
    assert got.tolist() == want


def several_merges_per_step(reports: list[TrainProgress], batch: int) -> bool:
    """Whether a report brought more merges than a batch has steps."""
    return any(len(r.merge_counts) > batch for r in reports)


@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_progress_counts_equal_reference_pair_frequencies(algorithm, count_on):
    docs = corpus_docs("en_novels", 40_000)
    word_counts = reference.count_words(docs)
    reports: list[TrainProgress] = []
    st: dict = {}
    vocab = train(docs, 256 + 500, progress=reports.append, stats=st, batch=4,
                  algorithm=algorithm, count_on=count_on)
    ref = reference.train(docs, 256 + 500)
    assert list(vocab.merges) == ref
    check_reports(reports, reference_counts(word_counts, ref))
    assert reports[-1].merges_done == len(ref) and reports[-1].total_merges == 500
    if algorithm == "wordlist":
        assert st["merges_per_step"] > 1.5
        assert several_merges_per_step(reports, 4)
    else:
        assert all(len(r.merge_counts) <= 4 for r in reports)


def test_progress_counts_through_carried_walks_and_rebuilt_tables():
    """Walks carried past a small budget (the batch's queued steps held, then continued) and a
    small pair table recounted between batches, with steps of several merges."""
    docs = corpus_docs("multi_udhr", 40_000) + ["abcd" * 300, "ab" * 77 + "cd" * 5]
    word_counts = reference.count_words(docs)
    words = [w for w in word_counts if len(w) > 1]
    reports: list[TrainProgress] = []
    st: dict = {}
    got = GPUTrainer().run(words, [word_counts[w] for w in words], 300, 1, stats=st, rows=128,
                           batch=8, budget=8, progress=reports.append)
    ref = reference.train(docs, 256 + 300, 1)
    assert got == ref
    check_reports(reports, reference_counts(word_counts, ref))
    assert st["walks_paused"] >= 1 and st["rebuilds"] >= 1
    assert several_merges_per_step(reports, 8)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_progress_reports_each_merge_once_through_restarts(algorithm):
    """A pair table that overflows restarts training with a larger one (the same merges):
    merges reported before the restart are not reported again."""
    docs = corpus_docs("tr_libreoffice_help", 30_000)
    word_counts = reference.count_words(docs)
    words = [w for w in word_counts if len(w) > 1]
    reports: list[TrainProgress] = []
    st: dict = {}
    got = GPUTrainer().run(words, [word_counts[w] for w in words], 150, 2, stats=st, rows=32,
                           algorithm=algorithm, batch=8, progress=reports.append)
    assert st["restarts"] >= 1
    assert got == reference.train(docs, 256 + 150)
    check_reports(reports, reference_counts(word_counts, got))


def test_progress_counts_with_one_merge_per_step(monkeypatch):
    monkeypatch.setattr(wordlist_loop, "MAX_MERGES_PER_STEP", 1)
    docs = corpus_docs("code_cpython_stdlib", 30_000)
    word_counts = reference.count_words(docs)
    reports: list[TrainProgress] = []
    st: dict = {}
    vocab = train(docs, 256 + 300, progress=reports.append, stats=st, batch=4)
    ref = reference.train(docs, 256 + 300)
    assert list(vocab.merges) == ref and st["merges_per_step"] == 1.0
    check_reports(reports, reference_counts(word_counts, ref))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_progress_after_training_stops_early_keeps_the_last_count(algorithm):
    """Fewer merges than asked (no pair left): a report after the stop brings no merge and
    keeps the last merge's count."""
    docs = ["aaaaa aaaaa", "abab"]
    reports: list[TrainProgress] = []
    with pytest.warns(RuntimeWarning, match="stopped after"):
        vocab = train(docs, 300, min_frequency=1, progress=reports.append, batch=2,
                      algorithm=algorithm)
    ref = reference.train(docs, 300, 1)
    assert list(vocab.merges) == ref and len(ref) < 44
    check_reports(reports, reference_counts(reference.count_words(docs), ref))
