"""Word counting through mapped staging (torch_gpubpe.training.count_stream) and under a
memory budget with spilled runs (torch_gpubpe.training.budget): the same counts as
the reference / as counting without a budget, on real corpora, at the boundaries of a stage
(pieces that fill one exactly, overflow it by a byte, pieces larger than a stage), with the
mapped-range fallback, a failing source, and the budget's refusals. Sizes are small (lavapipe).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from conftest import corpus_docs
from torch_gpubpe.training import budget as count_budget
from torch_gpubpe.training import count_stream as count_pipeline
from torch_gpubpe.core import reference
from torch_gpubpe.training import api, gpu_counter, memory, word_counts
from torch_gpubpe.gpu import wgpu_internals as wi
from torch_gpubpe.training.count_stream import count_stream
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.trainer import train, train_from_word_counts
from torch_gpubpe.encoding.pretokenize import pack_documents
from torch_gpubpe.training.gpu_counter import GPUWordCounter
from torch_gpubpe.training.long_words import ends_after

pytestmark = pytest.mark.gpu


def _pieces(docs, sizes):
    """Packed pieces of ``docs`` of the given byte targets in turn (whole documents)."""
    data, offsets = pack_documents(docs)
    out, k, i = [], 0, 0
    n = len(offsets) - 1
    while k < n:
        target = offsets[k] + sizes[i % len(sizes)]
        j = max(k + 1, int(np.searchsorted(offsets, target, side="right")) - 1)
        j = min(j, n)
        out.append((data[offsets[k]:offsets[j]], offsets[k:j + 1] - offsets[k]))
        k, i = j, i + 1
    return out


def _staged_counts(pieces, batch_bytes, **kw):
    c = GPUWordCounter(batch_bytes=batch_bytes, min_slots=64, min_store=64, **kw)
    st: dict = {}
    count_stream(c, iter(pieces), stats=st)
    return c, c.result().to_dict(), st


@pytest.mark.parametrize("sizes", [(3_000,), (1, 7_999, 4_001), (20_000, 10, 500)])
def test_staged_counts_equal_the_reference(sizes):
    docs = (corpus_docs("multi_xquad", 60_000, max_doc_bytes=3_000)
            + corpus_docs("code_cpython_headers", 40_000, max_doc_bytes=9_000)
            + ["", "x" * (gpu_counter.MAXW + 1), " " * 600, "y" * 5_000])
    pieces = _pieces(docs, sizes)
    c, got, st = _staged_counts(pieces, batch_bytes=8_000)
    assert got == dict(reference.count_words(docs))
    assert st["staged_batches"] >= 3
    big = sum(1 for d, _ in pieces if len(d) > c.batch_bytes)
    assert st["direct_batches"] == big          # a piece over a stage goes through add_batch
    assert all(st[k] >= 0 for k in ("seconds_wait_input", "seconds_gpu", "seconds_pack"))


def test_pieces_that_fill_a_stage_exactly_and_one_byte_over():
    cap = 4_096
    word = b" abcdefg"                           # 8 bytes
    exact = [(np.frombuffer(word * (cap // 8), np.uint8), np.array([0, cap], np.int64))] * 3
    over = [(np.frombuffer(word * (cap // 8) + b"z", np.uint8), np.array([0, cap + 1]))]
    docs = [bytes(d) for d, _ in exact + over]
    _, got, st = _staged_counts(exact + over, batch_bytes=cap)
    assert got == dict(reference.count_words(docs))
    assert st["staged_batches"] == 3 and st["direct_batches"] == 1
    # the steady state: every batch after the first (3 stages of cap + one direct piece)
    assert st["steady_bytes"] == 2 * cap + cap + 1
    assert 0 < st["seconds_steady"] and 0 <= st["seconds_to_first_batch"]


def test_staged_counts_without_the_mapped_view(monkeypatch):
    """wgpu-py without the zero-copy mapped range: host arrays + write_mapped, same counts."""
    monkeypatch.setattr(wi, "mapped_array", lambda buf: None)
    docs = corpus_docs("tr_ud_boun", 30_000)
    _, got, _ = _staged_counts(_pieces(docs, (2_500,)), batch_bytes=6_000)
    assert got == dict(reference.count_words(docs))


def test_a_failing_source_is_raised_and_the_next_count_works():
    docs = corpus_docs("en_fortunes", 20_000)
    pieces = _pieces(docs, (2_000,))

    def source():
        yield from pieces[:3]
        raise InputError("bad row 7")

    c = GPUWordCounter(batch_bytes=5_000)
    with pytest.raises(InputError, match="bad row 7"):
        count_stream(c, source())
    _, got, _ = _staged_counts(pieces, batch_bytes=5_000)
    assert got == dict(reference.count_words(docs))


def test_long_word_ends_from_the_bitmap():
    rng = np.random.default_rng(5)
    n = 5_000
    starts = np.unique(rng.integers(0, n, 300))
    bits = np.zeros(n // 32 + 2, np.uint32)
    for s in np.append(starts, n).tolist():
        bits[s >> 5] |= np.uint32(1 << (s & 31))
    pos = starts[:-1]
    want = [int(starts[np.searchsorted(starts, p, side="right")]) if p < starts[-1] else n
            for p in pos.tolist()]
    assert ends_after(bits, pos).tolist() == want


# -- the budget ------------------------------------------------------------------------------------
def _small_batches(monkeypatch):
    monkeypatch.setattr(gpu_counter, "DEFAULT_GPU_BATCH_BYTES", 16 << 10)  # many GPU batches
    monkeypatch.setattr(count_pipeline, "PIECE_BYTES", 4 << 10)


def _force_spills(monkeypatch):
    """Tables spill at 64 words (the budget's share made tiny)."""
    monkeypatch.setattr(count_budget, "SPILL_BYTES_PER_WORD", 1 << 40)
    monkeypatch.setattr(count_budget, "MIN_TABLE_WORDS", 64)


def test_a_budget_below_the_counting_buffers_is_refused_before_reading():
    read = []

    def docs():
        read.append(1)
        yield "a b"

    with pytest.raises(InputError, match=r"max_memory=0\.00 GB cannot work.*--max-memory.*at "
                                         r"least [\d.]+ GB"):
        train(docs(), 300, max_memory=1 << 20)
    assert not read


@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
def test_spilled_counting_is_exact(monkeypatch, count_on):
    _small_batches(monkeypatch)
    _force_spills(monkeypatch)
    if count_on == "cpu":
        monkeypatch.setattr(word_counts, "DEFAULT_BATCH_BYTES", 32 << 10)
        monkeypatch.setattr(count_budget, "CPU_BYTES_PER_ROW", 1 << 40)
    docs = corpus_docs("tr_ud_boun", 60_000) + corpus_docs("multi_udhr", 60_000)
    st: dict = {}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        vocab = train(docs, 380, min_frequency=1, stats=st, count_on=count_on)
    spill_warnings = [x for x in w if "sorted runs" in str(x.message)]
    assert len(spill_warnings) == 1                     # warned once
    assert st["spilled_runs"] >= 3 and st["spill_bytes"] > 0
    assert st["unique_words"] == len(reference.count_words(docs))
    assert list(vocab.merges) == reference.train(docs, vocab_size=380, min_frequency=1)


def test_spilled_counting_with_pruning_equals_training_on_the_kept_words(monkeypatch, capsys):
    _small_batches(monkeypatch)
    _force_spills(monkeypatch)
    docs = corpus_docs("tr_ud_boun", 60_000)
    counts = reference.count_words(docs)
    kept = {w: c for w, c in counts.items() if c >= 3}
    st: dict = {}
    with pytest.warns(RuntimeWarning, match=r"prune_below=3 dropped [\d,]+ of"):
        vocab = train(docs, 360, min_frequency=1, prune_below=3, stats=st, progress=True)
    assert "merge spilled counts" in capsys.readouterr().err      # progress throughout
    assert st["spilled_runs"] >= 2
    assert st["pruned_words"] == len(counts) - len(kept)
    assert list(vocab.merges) == list(train_from_word_counts(kept, 360, min_frequency=1).merges)


def test_exact_training_that_cannot_fit_stops_counting_early(monkeypatch):
    """Without prune_below, the distinct words already in the table prove the merge phase
    cannot fit: refused during counting, the rest of the corpus unread."""
    _small_batches(monkeypatch)
    monkeypatch.setattr(memory, "MEMORY_PER_WORD", 1 << 28)   # 256 MiB per word
    ran = []
    monkeypatch.setattr(api, "train_counts", lambda *a, **k: ran.append(1))
    docs = corpus_docs("multi_udhr", 300_000) * 30          # ~9 MB, many GPU batches
    seen = []

    def stream():
        for d in docs:
            seen.append(1)
            yield d

    with pytest.raises(InputError, match=r"at least [\d,]+ unique words .* after [\d,]+ MB of "
                                         r"text.*prune_below=2"):
        train(stream(), 300)
    assert not ran and len(seen) < len(docs) // 2


def test_pruning_that_is_not_enough_names_a_threshold_that_fits(monkeypatch):
    _small_batches(monkeypatch)
    _force_spills(monkeypatch)
    docs = corpus_docs("tr_ud_boun", 60_000)
    counts = reference.count_words(docs)
    per = 1 << 24                                   # 16 MiB per word in the merge phase
    monkeypatch.setattr(memory, "MEMORY_PER_WORD", per)
    at = {t: sum(1 for c in counts.values() if c >= t) for t in range(2, 20)}
    t_fit = next(t for t in range(3, 20) if at[t] * per < 0.5 * at[2] * per and at[t] > 60)
    limit = memory.rss_bytes() + (at[t_fit] + at[t_fit - 1]) // 2 * per + (1 << 30)
    # the threshold named is the smallest that fits (within the RSS noise of 1 GiB)
    with pytest.raises(InputError, match=r"prune_below=2 need more than max_memory.*"
                                         r"prune_below=\d+ \(--prune-below \d+\) would keep"):
        train(docs, 300, prune_below=2, max_memory=limit)


def test_many_one_word_documents_over_maxw_in_one_batch():
    """1,500 one-word documents of 300–700 bytes (> MAXW) in one staged batch, some repeated:
    the long words are gathered with a mask (over 1,024 per batch) and grouped exactly."""
    rng = np.random.default_rng(3)
    words = [bytes(rng.integers(97, 123, int(rng.integers(gpu_counter.MAXW + 1, 700))).astype(
        np.uint8)) for _ in range(1_000)]
    docs = words + words[:500] + [b"tail " * 10]
    _, got, st = _staged_counts(_pieces(docs, (2_000_000,)), batch_bytes=2_000_000)
    assert got == dict(reference.count_words(docs))
    assert st["staged_batches"] == 1


def test_a_small_real_budget_is_kept_and_exact():
    """No monkeypatching: 1 M distinct words (+ common words, 14 MB) streamed from a Hugging
    Face IterableDataset under a small max_memory, in a fresh process (benchmarks/count_memory.py's
    child): the peak RSS stays under the budget (the tables spill where it needs them to), and
    the merges equal training on the common words' counts (every random word occurs once and is
    pruned)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from conftest import subprocess_env

    # The budget: this machine's baseline (the peak RSS of a process with the same imports
    # that trained once: the pipelines compiled, the shader cache warm) + 600 MB, too little
    # for the 1 M-word table's readback: it must spill.
    probe = ("import datasets, resource, warnings, torch_gpubpe.training.trainer as t; "
             "warnings.simplefilter('ignore'); t.train(['ab ab abc abcd'] * 10, 260, "
             "min_frequency=1); print(next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') "
             "if l.startswith('VmHWM:')))")
    base = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              env=subprocess_env(), timeout=300, check=True).stdout.split()[-1])
    budget = base + 600_000_000
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "count_memory.py"
    cmd = [sys.executable, str(script), "--child", "unique-prune", "--words", "1e6",
           "--max-memory", str(budget), "--vocab-size", "300"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert p.returncode == 0, p.stderr[-3_000:]
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert r["merges_equal_common_words_training"] is True
    assert r["pruned_words"] == 1_000_000
    # Whether this budget makes the tables spill depends on the machine's baseline (in a CI
    # clone, +600 MB did not; here it spilled 3 runs): the spill path itself is tested
    # deterministically above; this test holds the budget and exactness, with or without it.
    assert r["peak_rss_bytes"] < budget, (r, budget)
