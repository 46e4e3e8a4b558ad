"""GPU BPE training (torch_gpubpe.training.trainer; both algorithms: train_wordlist, the default, and
train_seed) against the oracles.

Every test compares merges with ``torch_gpubpe.core.reference`` (DESIGN.md §3) or with rustbpe;
nothing is hard-coded. Inputs are small: lavapipe runs the kernels on 2 shared CPU cores.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.trainer import ALGORITHMS, GPUTrainer, TrainProgress, train, train_from_word_counts
from torch_gpubpe.core.vocab import SPLIT_PATTERN, Vocab
from torch_gpubpe.training.wordcount import count_words

pytestmark = pytest.mark.gpu


def ref_merges(docs, vocab_size, min_frequency=2, specials=0):
    return reference.train(docs, vocab_size, min_frequency, specials)


# -- real corpora --------------------------------------------------------------------------------
@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_merges_equal_reference_on_every_corpus(corpus):
    docs = corpus_docs(corpus, 40_000)
    ref = ref_merges(docs, 420)
    for algorithm in ALGORITHMS:
        st: dict = {}
        vocab = train(docs, 420, min_frequency=2, algorithm=algorithm, stats=st)
        assert isinstance(vocab, Vocab) and st["algorithm"] == algorithm
        assert list(vocab.merges) == ref, algorithm


def _assert_train_equals_rustbpe(docs, vocab_size: int) -> None:
    """``train(docs, vocab_size, min_frequency=1)`` gives rustbpe's tokens (with
    ``SPLIT_PATTERN``), id for id; skips when rustbpe is not installed."""
    rustbpe = pytest.importorskip("rustbpe")
    vocab = train(docs, vocab_size, min_frequency=1)
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), vocab_size, pattern=SPLIT_PATTERN)
    ranks = [bytes(b) for b, _ in sorted(tok.get_mergeable_ranks(), key=lambda kv: kv[1])]
    assert list(vocab.token_bytes) == ranks


def test_merges_equal_rustbpe_on_real_text():
    docs = corpus_docs("tr_manpages", 60_000) + corpus_docs("code_cpython_headers", 30_000)
    _assert_train_equals_rustbpe(docs, 700)


def test_word_counting_equals_reference():
    for name in ("multi_udhr", "en_fortunes", "web_html"):
        docs = corpus_docs(name, 80_000)
        assert count_words(docs, batch_bytes=20_000) == reference.count_words(docs)
    odd = [b"", b"\x00\x00 \x00" * 7, bytes(range(256)) * 2, "é" * 40, "a" * 33 + " " * 20]
    assert count_words(odd, batch_bytes=16) == reference.count_words(odd)


# -- runs of one symbol, long words ---------------------------------------------------------------
def test_single_symbol_runs_merge_left_to_right():
    # "aaaaa" with (a, a) → aa aa a; runs far longer than a 256-symbol tile, odd and even.
    # Tiles are 2048 symbols (256 threads × 8): runs cross thread, tile and multi-tile bounds.
    docs = ["aaaaa", "a" * 3001, " " + "a" * 2047, "b" * 777 + "a" * 513, "ab" * 900,
            "a" * 6145, "x" + "a" * 4095]
    for vocab_size in (257, 260, 275):
        for algorithm in ALGORITHMS:
            vocab = train(docs, vocab_size, min_frequency=1, algorithm=algorithm)
            assert list(vocab.merges) == ref_merges(docs, vocab_size, 1), algorithm


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hst.lists(
    hst.tuples(hst.sampled_from(["a", "b", " ", "aa", "ab", "\n", "1"]), hst.integers(1, 700)),
    min_size=1, max_size=12,
))
def test_random_run_corpora_equal_reference(runs):
    text = "".join(s * k for s, k in runs)
    docs = [text, text[: len(text) // 3]]
    got = _run_both(docs, 34, budget=24)      # small budget: walks carried (continued)
    ref = ref_merges(docs, 290, 1)
    assert got["wordlist"] == ref and got["seed"] == ref


def test_random_small_corpora_equal_reference():
    rng = random.Random(1234)
    for _ in range(3):
        alphabet = rng.choice(["ab ", "abc \n", "xyz01 .", "ı ş"])
        docs = ["".join(rng.choice(alphabet) * rng.choice((1, 1, 2, 5, 40, 300))
                        for _ in range(rng.randint(1, 60))) for _ in range(rng.randint(1, 8))]
        vocab = train(docs, 320, min_frequency=1)
        assert list(vocab.merges) == ref_merges(docs, 320, 1)


# -- both algorithms; long words carried past the per-thread walk budget ----------------------
def _run_both(docs, merges, min_frequency=1, budget=None, **kw):
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    out = {}
    for algorithm in ALGORITHMS:
        stats: dict = {}
        out[algorithm] = GPUTrainer().run(words, [counts[w] for w in words], merges,
                                          min_frequency, stats=stats, algorithm=algorithm,
                                          budget=budget if algorithm == "wordlist" else None,
                                          **kw)
        assert stats["algorithm"] == algorithm
        out[algorithm + "_stats"] = stats
    return out


def test_both_algorithms_equal_reference():
    cases = [
        (corpus_docs("code_cpython_headers", 40_000), 200),
        # adjacent occurrences (A B A B → C C), runs of merged tokens, odd/even runs, words
        # of one token after a merge (still linked, never compacted)
        (["abababab", "bababa", "ab", "aab", "abba", "aaaa aaaaa " * 3, "ba" * 301,
          "x" + "ab" * 77 + "a", "  " * 40 + "==" * 9 + "=", "a b ab ba"], 40),
    ]
    for docs, merges in cases:
        got = _run_both(docs, merges)
        ref = ref_merges(docs, 256 + merges, 1)
        assert got["wordlist"] == ref
        assert got["seed"] == ref


@pytest.mark.parametrize("budget", [8, 61, 1000])
def test_walks_longer_than_the_budget_are_continued(budget, monkeypatch):
    """A word walk over the per-thread budget (forced small here; 32,768 steps + probes by
    default) is carried to wl_continue dispatches and finished there: same merges as the
    reference, with runs of A == B, adjacent occurrences and words crossing the budget many
    times (every resume point: mid-word, between words, after an occurrence). The long-chain
    hand-over is off here (it takes a resumed chain at once: tests/test_train_long_chains.py)."""
    from torch_gpubpe.training import wordlist_loop as train_wordlist

    monkeypatch.setattr(train_wordlist, "LONG_MIN_CHAIN", train_wordlist.NEVER)
    docs = ["a" * 3001, " " + "a" * 2047, "b" * 777 + "a" * 513, "ab" * 900, "x" + "a" * 4095,
            "hello world hello", "abc abd abe", "ba" * 40 + "a"]
    got = _run_both(docs, 34, budget=budget, batch=16)
    ref = ref_merges(docs, 290, 1)
    assert got["wordlist"] == ref and got["seed"] == ref
    st = got["wordlist_stats"]
    assert st["walks_paused"] >= 1 and st["continuation_dispatches"] >= st["walks_paused"]
    if budget == 8:
        assert st["continuation_dispatches"] > 300     # the 4 KB runs, 8 steps at a time


def test_long_word_takes_the_default_algorithm():
    """A word far past one thread's budget (80,000 symbols: beyond lavapipe's 65,535-iteration
    loop cap) is trained by the default algorithm, continued, with the reference's merges."""
    docs = ["ab" * 40_000, " ba ab", "abc"]
    st: dict = {}
    vocab = train(docs, 262, min_frequency=1, stats=st)
    assert list(vocab.merges) == ref_merges(docs, 262, 1)
    assert st["algorithm"] == "wordlist" and st["walks_paused"] >= 1


@pytest.mark.heavy
def test_one_megabyte_word_equals_reference():
    """A corpus with a 1 MB word (random letters of a 3-letter alphabet, so most merges touch
    it) and ordinary text: the default algorithm's merges equal the reference's (its work is
    per occurrence, so no walk of the word needs carrying: one 40 K-occurrence chain does, see
    test_long_word_takes_the_default_algorithm)."""
    rng = random.Random(5)
    big = "".join(rng.choice("abc") for _ in range(1 << 20))
    docs = corpus_docs("en_fortunes", 20_000) + [big, "the " + big[:5000]]
    st: dict = {}
    vocab = train(docs, 300, min_frequency=1, stats=st)
    assert list(vocab.merges) == ref_merges(docs, 300, 1)
    assert st["algorithm"] == "wordlist"


@pytest.mark.parametrize("budget", [8, 1000])
def test_stale_left_links_are_hopped(monkeypatch, budget):
    """With find_max4's repair of the left links switched off (FIXUP=0), every walk finds its
    live left neighbour by hopping over symbols merged away earlier (saving the hops, pausing
    when out of budget): the same merges as the reference, and more steps than with it."""
    from torch_gpubpe.training import pair_table as train_table

    docs = ["a" * 3001, "b" * 777 + "a" * 513, "ab" * 900, "x" + "a" * 4095, "abcabc " * 50,
            "ba" * 40 + "a"] + corpus_docs("en_fortunes", 10_000)
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    ref = ref_merges(docs, 256 + 120, 1)
    steps = {}
    compile_all = train_table.compile_pipelines
    for fixup in (1, 0):
        monkeypatch.setattr(train_table, "compile_pipelines", lambda g, name, consts, f=fixup:
                            compile_all(g, name, dict(consts, FIXUP=f)
                                        if name == "train_wordlist" else consts))
        st: dict = {}
        got = GPUTrainer().run(words, [counts[w] for w in words], 120, 1, stats=st,
                               budget=budget, profile=True)
        assert got == ref
        steps[fixup] = st["walk_steps_per_merge"]
    assert steps[0] > 1.5 * steps[1]      # the hops (none or few with the repair)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hst.lists(hst.text(alphabet="ab ", min_size=1, max_size=60), min_size=1, max_size=20))
def test_random_both_algorithms_equal_reference(docs):
    got = _run_both(docs, 24, budget=16)
    ref = ref_merges(docs, 280, 1)
    assert got["wordlist"] == ref and got["seed"] == ref


# -- counts --------------------------------------------------------------------------------------
def test_weights_above_2_32_are_exact():
    big = 1 << 32
    counts = {b"ab": big + 5, b"ba": big + 5, b"abab": 3, b"cab": big - 1, b"xyz": 2 * big + 7,
              b"xy": 1, b"aaaa": big + 1, " tr\u0131".encode(): (1 << 40) + 3}
    vocab = train_from_word_counts(counts, 275, min_frequency=1)
    ref = reference.train_from_word_counts(counts, 275, 1)
    assert list(vocab.merges) == ref
    # Counts that wrap at 2^32 would give other merges: the test can tell.
    wrapped = {w: c % big for w, c in counts.items()}
    assert reference.train_from_word_counts(wrapped, 275, 1) != ref
    # Sums of weights that pass 2^32 only in total (3 × (2^31 + 1)) are exact too.
    counts2 = {b"ab": (1 << 31) + 1, b"abx": (1 << 31) + 1, b"zab": (1 << 31) + 1, b"cd": 7}
    vocab2 = train_from_word_counts(counts2, 262, min_frequency=1)
    assert list(vocab2.merges) == reference.train_from_word_counts(counts2, 262, 1)


def test_min_frequency_stops_training():
    docs = corpus_docs("tr_ud_boun", 20_000)
    for mf in (3, 50, 10**12):
        vocab = train(docs, 2000, min_frequency=mf)
        assert list(vocab.merges) == ref_merges(docs, 2000, mf)
        assert len(vocab.merges) < 2000 - 256


def test_special_tokens_use_the_merge_budget():
    docs = corpus_docs("en_fortunes", 15_000)
    specials = ["<|endoftext|>", "<|pad|>"]
    vocab = train(docs, 300, special_tokens=specials)
    assert list(vocab.merges) == ref_merges(docs, 300, 2, len(specials))
    assert len(vocab) == 300 and vocab.special_tokens == tuple(specials)


def test_str_keys_and_zero_counts():
    counts = {"hello": 3, b" hello": 2, "x": 100, "": 5, "yy": 0}
    vocab = train_from_word_counts(counts, 270, min_frequency=1)
    as_bytes = {reference.to_bytes(k): v for k, v in counts.items()}
    assert list(vocab.merges) == reference.train_from_word_counts(as_bytes, 270, 1)


def test_nothing_to_merge():
    with pytest.raises(InputError, match="empty corpus"):  # refused, as the CLI does
        train([], 300)
    assert train(["a b c"], 300).merges == ()
    assert train(["abab"], 256).merges == ()


def test_arrow_arrays_and_tables_train_as_their_strings():
    import pyarrow as pa

    docs = corpus_docs("multi_xquad", 6_000) + [None, "", "tail"]
    want = train([d for d in docs if d is not None], 300).merges
    assert list(want) == ref_merges([d for d in docs if d is not None], 300)
    chunked = pa.chunked_array([docs[:5], docs[5:]])
    stats: dict = {}
    assert train(chunked, 300, stats=stats).merges == want
    assert stats["skipped_none"] == 1
    assert train(pa.table({"text": chunked}), 300).merges == want
    assert train(pa.array([d and d.encode() for d in docs], pa.binary()), 300).merges == want
    assert train(pa.array(docs[:-3]).dictionary_encode(), 300).merges == train(
        docs[:-3], 300).merges
    with pytest.raises(InputError, match="no column 'text'"):
        train(pa.table({"body": chunked}), 300)
    with pytest.raises(InputError, match="the Arrow array holds int64, not text"):
        train(pa.array([1, 2]), 300)
    with pytest.raises(InputError, match="2 columns named 'text'"):
        train(pa.Table.from_arrays([chunked, chunked], names=["text", "text"]), 300)
    with pytest.raises(InputError, match="row 1 of the Arrow string array is not valid UTF-8"):
        train(pa.array([b"ab", b"\xff ab"]).view(pa.string()), 300)


# -- determinism ---------------------------------------------------------------------------------
def test_same_merges_for_reversed_documents_and_across_runs():
    docs = corpus_docs("multi_xquad", 12_000) + corpus_docs("tr_ud_boun", 8_000)
    first = train(docs, 330).merges
    assert list(first) == ref_merges(docs, 330)
    assert train(docs[::-1], 330).merges == first
    for _ in range(10):
        assert train(docs, 330, batch=7).merges == first
    assert train(docs[::-1], 330, algorithm="seed").merges == first
    for _ in range(3):
        assert train(docs, 330, batch=7, algorithm="seed").merges == first


def test_table_overflow_restarts_with_a_larger_table():
    docs = corpus_docs("tr_libreoffice_help", 30_000)
    counts = reference.count_words(docs)
    words = [w for w, c in counts.items() if len(w) > 1]
    for algorithm in ALGORITHMS:
        stats: dict = {}
        got = GPUTrainer().run(words, [counts[w] for w in words], 150, 2, stats=stats, rows=32,
                               algorithm=algorithm)
        assert got == ref_merges(docs, 406)
        assert stats["restarts"] >= 1


def test_large_table_many_blocks():
    # 2^21 slots = 2048 blocks of 1024: find_max_final_det loops over them in several rounds.
    docs = corpus_docs("en_fortunes", 15_000)
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    stats: dict = {}
    got = GPUTrainer().run(words, [counts[w] for w in words], 60, 2, stats=stats, rows=65536)
    assert stats["table_slots"] == 65536 * 32
    assert got == ref_merges(docs, 316)



@pytest.mark.parametrize("workgroups", [2, 7])
def test_find_max_grid_does_not_change_the_merges(monkeypatch, workgroups):
    """The word list's find_max4 takes the dirty blocks grid-stride (at most FIND_WORKGROUPS
    workgroups; each group of 256 blocks finished by whichever workgroup counts it down last):
    a grid far smaller than the 2,048 blocks (8 groups), every workgroup looping, the table
    rebuilt and grown, gives the reference's merges."""
    import torch_gpubpe.training.wordlist_loop as tw

    monkeypatch.setattr(tw, "FIND_WORKGROUPS", workgroups)
    docs = corpus_docs("multi_udhr", 40_000)
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    for rows, batch in ((65536, None), (128, 8)):
        st: dict = {}
        got = GPUTrainer().run(words, [counts[w] for w in words], 200, 2, stats=st, rows=rows,
                               batch=batch)
        assert got == ref_merges(docs, 456)
    assert st["rebuilds"] >= 1

def test_pair_table_rebuild_keeps_merges_exact():
    # A small table fills with keys whose counts fell to 0: it is recounted (and grown) from
    # the current stream between batches.
    docs = corpus_docs("multi_udhr", 40_000)
    counts = reference.count_words(docs)
    words = [w for w, c in counts.items() if len(w) > 1]
    ref = ref_merges(docs, 556)
    for algorithm in ALGORITHMS:
        stats: dict = {}
        got = GPUTrainer().run(words, [counts[w] for w in words], 300, 2, stats=stats,
                               rows=128, batch=8, algorithm=algorithm)
        assert got == ref, algorithm
        assert stats["rebuilds"] >= 1


def test_no_subgroup_path(monkeypatch):
    from torch_gpubpe.gpu import device as gpu_mod

    monkeypatch.setenv("TORCH_GPUBPE_NO_SUBGROUPS", "1")
    gpu_mod.reset_gpu()
    try:
        assert not gpu_mod.get_gpu().has_subgroups
        docs = corpus_docs("tr_manpages", 30_000) + ["a" * 1500, "b" * 5000]
        ref = ref_merges(docs, 380)
        assert list(train(docs, 380).merges) == ref
        assert list(train(docs, 380, algorithm="seed").merges) == ref
        counts = reference.count_words(docs)
        words = [w for w in counts if len(w) > 1]
        got = GPUTrainer().run(words, [counts[w] for w in words], 124, 2, budget=40)
        assert got == ref
    finally:
        monkeypatch.delenv("TORCH_GPUBPE_NO_SUBGROUPS")
        gpu_mod.reset_gpu()


def test_pair_key_packing_roundtrip_above_16_bits():
    """The table keys (a, b) for ids up to 2^18 - 1 survive the Feistel packing exactly."""
    from torch_gpubpe.gpu.device import get_gpu
    from torch_gpubpe.gpu.shaders import shader_source

    g = get_gpu()
    src = shader_source("train_wordlist", g.flags) + """
@group(0) @binding(30) var<storage, read_write> probe: array<u32>;
@compute @workgroup_size(256)
fn key_roundtrip(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= arrayLength(&probe) / 4u) { return; }
    let k = key_pack(probe[4u * i], probe[4u * i + 1u]);
    let ab = key_unpack(k.x, k.y);
    probe[4u * i] = ab.x;
    probe[4u * i + 1u] = ab.y;
    probe[4u * i + 2u] = k.x;
    probe[4u * i + 3u] = k.y;
}
"""
    rng = np.random.default_rng(7)
    n = 4096
    pairs = rng.integers(0, 1 << 18, size=(n, 2), dtype=np.uint32)
    pairs[:4] = [[0, 0], [(1 << 18) - 1, (1 << 18) - 1], [65535, 65536], [262143, 0]]
    data = np.zeros((n, 4), np.uint32)
    data[:, :2] = pairs
    U = g.wgpu.BufferUsage
    buf = g.buffer(data.nbytes, U.STORAGE | U.COPY_DST | U.COPY_SRC, "test.probe")
    g.device.queue.write_buffer(buf, 0, data)
    pipe = g.pipeline("train_test", "key_roundtrip", workgroup_bytes=0, source=src)
    enc = g.device.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, g.bind_group(pipe, {30: buf}))
    cp.dispatch_workgroups(n // 256)
    cp.end()
    g.device.queue.submit([enc.finish()])
    out = g.read_u32(buf, 0, 4 * n).reshape(n, 4)
    assert (out[:, :2] == pairs).all()
    assert (out[:, 2] < (1 << 31)).all() and (out[:, 3] < 32).all()
    assert len({(int(a), int(b)) for a, b in out[:, 2:]}) == n == len({tuple(p) for p in pairs})


# -- API -----------------------------------------------------------------------------------------
def test_progress_and_stats():
    docs = corpus_docs("tr_ud_boun", 15_000)
    reports: list[TrainProgress] = []
    stats: dict = {}
    vocab = train(docs, 400, progress=reports.append, stats=stats, batch=16)
    assert reports and reports[-1].merges_done == len(vocab.merges)
    assert [r.merges_done for r in reports] == sorted(r.merges_done for r in reports)
    assert all(r.total_merges == 400 - 256 for r in reports)
    ref = ref_merges(docs, 400)
    counts = reference.count_words(docs)
    assert reports[-1].last_count > 0
    for key in ("corpus_bytes", "num_documents", "unique_words", "num_merges", "seconds_count",
                "seconds_merge", "seconds_total"):
        assert key in stats, key
    assert stats["num_documents"] == len(docs)
    assert stats["corpus_bytes"] == sum(len(d.encode()) for d in docs)
    assert stats["unique_words"] == len(counts)
    assert stats["num_merges"] == len(ref)
    assert stats["algorithm"] == "wordlist" and stats["wgpu_fallbacks"] == {}
    # the run's GPU buffers: at least the stream's 4 arrays of u32 per symbol and the table
    assert stats["gpu_memory_bytes"] >= 12 * stats["stream_symbols"] + 12 * stats["table_slots"]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="255.*256"):
        train(["ab"], 255)
    with pytest.raises(ValueError, match="257.*258"):
        train(["ab"], 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(ValueError, match="262145.*262144"):
        train(["ab"], 262_145)
    with pytest.raises(InputError, match="document 2"):
        train(["ab", b"cd", 3], 300)
    with pytest.raises(ValueError, match="b'ab'"):
        train_from_word_counts({b"ab": -1}, 300)
    with pytest.raises(ValueError, match="min_frequency"):
        train(["ab"], 300, min_frequency=0)
    with pytest.raises(ValueError, match="algorithm must be one of.*'dense'"):
        train(["ab"], 300, algorithm="dense")


@pytest.mark.heavy
def test_vocab_above_65536_equals_rustbpe():
    """Ids above 16 bits (run on the real GPU: ~70k merges)."""
    _assert_train_equals_rustbpe(corpus_docs("en_novels", 8_000_000, max_doc_bytes=2_000_000),
                                 70_000)


@pytest.mark.heavy
def test_corpus_scale_equals_rustbpe():
    _assert_train_equals_rustbpe(
        corpus_docs("code_cpython_stdlib", 20_000_000, max_doc_bytes=10_000_000), 32_768)


def test_single_string_is_not_a_corpus():
    from torch_gpubpe.errors import InputError

    with pytest.raises(InputError, match=r"pass \[text\]"):
        train("hello hello hello", 300, min_frequency=1)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_stream_of_more_than_256_tiles(algorithm):
    """> 256 tiles of 2,048 symbols (≈600K symbols): the tile scans then give each thread several
    tiles, as on every real corpus. A few merges, both paths, against the oracle."""
    rng = np.random.default_rng(7)
    alpha = np.frombuffer(b"abcdefghij\xc4\xb1", np.uint8)
    counts: dict[bytes, int] = {}
    total = 0
    while total < 600_000:
        w = alpha[rng.integers(0, len(alpha), int(rng.integers(3, 14)))].tobytes()
        counts[w] = counts.get(w, 0) + int(rng.integers(1, 4))
        total += len(w)
    st: dict = {}
    got = train_from_word_counts(counts, 256 + 12, min_frequency=1, algorithm=algorithm,
                                 stats=st, batch=4)
    assert st["stream_symbols"] > 256 * 2048
    assert list(got.merges) == reference.train_from_word_counts(counts, 256 + 12, 1)


def test_count_on_cpu_and_gpu_give_the_same_merges_and_stats():
    docs = corpus_docs("multi_xquad", 30_000) + corpus_docs("code_cpython_headers", 20_000)
    out = {}
    for where in ("gpu", "cpu"):
        st: dict = {}
        out[where] = (train(docs, 360, min_frequency=2, stats=st, count_on=where).merges, st)
        assert st["count_on"] == where
        assert st["unique_words"] == len(reference.count_words(docs))
        assert st["num_documents"] == len(docs)
        assert st["corpus_bytes"] == sum(len(d.encode()) for d in docs)
    assert out["gpu"][0] == out["cpu"][0]
    assert list(out["gpu"][0]) == ref_merges(docs, 360)
    with pytest.raises(ValueError, match="count_on"):
        train(docs, 300, count_on="tpu")


def test_pair_counts_just_below_and_above_two_to_the_31():
    """The default algorithm counts in 32 bits when the corpus's total pair count is below 2^31
    (train_table.wgsl WIDE = 0) and in 64 bits from there on: both sides of the switch are exact."""
    for total in ((1 << 31) - 1000, (1 << 31) + 1000):
        counts = {b"ab": total // 3, b"abc": 7, b" xy": 3, b"bca": 5}
        counts[b"ab"] = total - sum(c * (len(w) - 1) for w, c in counts.items() if w != b"ab")
        assert sum(c * (len(w) - 1) for w, c in counts.items()) == total
        st: dict = {}
        vocab = train_from_word_counts(counts, 262, min_frequency=1, stats=st)
        assert st["wide_counts"] is (total >= 1 << 31)
        assert list(vocab.merges) == reference.train_from_word_counts(counts, 262, 1)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_profile_reports_each_kernel_and_the_walks(algorithm):
    """profile=True: GPU µs per merge of each of the algorithm's kernels (timestamp queries),
    and for the word list the mean list entries, steps, probes and dependent-load depth per
    merge; same merges."""
    from torch_gpubpe.gpu.device import get_gpu

    docs = corpus_docs("en_fortunes", 15_000) + ["ab" * 3000]
    st: dict = {}
    vocab = train(docs, 300, min_frequency=1, algorithm=algorithm, stats=st, profile=True)
    assert list(vocab.merges) == ref_merges(docs, 300, 1)
    steps = {"wordlist": ("find_max4", "wl_select", "wl_merge"),
             "seed": ("find_max4", "find_max_final_det", "setup_merge", "merge_reduce",
                      "scan_pass1", "scan_pass2", "scan_pass3", "finalize_compact")}[algorithm]
    if get_gpu().has_timestamps:
        assert tuple(st["gpu_us_per_merge"]) == steps
        assert all(v > 0 for v in st["gpu_us_per_merge"].values())
    if algorithm == "wordlist":
        assert st["walk_entries_per_merge"] > 0 and st["walk_steps_per_merge"] > 0
        assert st["walk_probes_per_merge"] > 0
        # each merge's longest thread: at least its entry, symbol, neighbours and a delta
        assert st["walk_depth_per_merge"] >= 6
    else:
        assert "walk_steps_per_merge" not in st


@pytest.mark.parametrize("workgroups", [1, 3, 16])
def test_walk_grid_does_not_change_the_merges(monkeypatch, workgroups):
    """wl_merge walks the lists grid-stride: any grid (the H200 widens it for large corpora)
    gives the reference's merges, with walks carried past a small budget too."""
    import torch_gpubpe.training.wordlist_loop as tw

    monkeypatch.setattr(tw, "grid_workgroups", lambda nwords, is_cpu: workgroups)
    docs = corpus_docs("multi_xquad", 30_000) + ["ab" * 700 + "a" * 301]
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    st: dict = {}
    got = GPUTrainer().run(words, [counts[w] for w in words], 90, 1, stats=st, budget=64)
    assert st["walk_workgroups"] == min(workgroups, -(-len(words) // 256))   # ≤ 1 per word
    assert got == ref_merges(docs, 346, 1)


# -- a memory budget ----------------------------------------------------------------
def test_max_memory_refuses_before_the_merges(monkeypatch):
    """The merge phase's estimate above the budget (CPU counting: the check after counting)."""
    from torch_gpubpe.training import api, memory
    from torch_gpubpe.training import trainer as tmod

    docs = corpus_docs("tr_ud_boun", 20_000)
    ran = []
    monkeypatch.setattr(api, "train_counts", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(memory, "MEMORY_PER_WORD", 1 << 30)   # 1 GiB per unique word
    st: dict = {}
    with pytest.raises(InputError, match=r"unique words .* needs about .* GB of host memory.*"
                                         r"max_memory.*prune_below=2"):
        tmod.train(docs, 400, stats=st, count_on="cpu")
    assert not ran  # refused before the merge stream was built
    assert st["estimated_merge_memory_bytes"] > st["max_memory_bytes"] == tmod.default_max_memory()
    monkeypatch.undo()
    monkeypatch.setattr(api, "train_counts", lambda *a, **k: ran.append(1))
    tmod.train(docs, 400, stats=st)  # the default (80% of RAM) fits this corpus
    assert ran and st["max_memory_bytes"] == tmod.default_max_memory()
    with pytest.raises(ValueError, match="max_memory"):
        tmod.train(docs, 400, max_memory=-1)


def test_prune_below_drops_rare_words_recorded_and_equal_to_the_reference_on_the_rest():
    docs = corpus_docs("tr_ud_boun", 20_000)
    counts = reference.count_words(docs)
    kept = {w: c for w, c in counts.items() if c >= 2}
    st: dict = {}
    with pytest.warns(RuntimeWarning, match=r"prune_below=2 dropped [\d,]+ of"):
        vocab = train(docs, 400, min_frequency=1, prune_below=2, stats=st)
    assert st["pruned_words"] == len(counts) - len(kept) > 0
    assert list(vocab.merges) == list(train_from_word_counts(kept, 400, min_frequency=1).merges)
    st = {}
    exact = train(docs, 400, min_frequency=1, stats=st)  # the default prunes nothing
    assert "pruned_words" not in st
    assert list(exact.merges) == reference.train(docs, vocab_size=400, min_frequency=1)


def test_an_adapter_with_too_few_storage_buffers_takes_the_seed_algorithm(monkeypatch):
    """OpenGL's llvmpipe allows 16 storage buffers per shader stage and wl_merge binds 17: the
    run takes algorithm="seed" (counted from the WGSL), says so once and records why."""
    import warnings

    from torch_gpubpe.core import reference
    from torch_gpubpe.gpu.device import get_gpu
    from torch_gpubpe.training.trainer import GPUTrainer

    g = get_gpu()
    need = GPUTrainer(g).storage_buffers("wordlist")
    monkeypatch.setitem(g.limits, "max-storage-buffers-per-shader-stage", need - 1)
    tr = GPUTrainer(g)
    assert "wordlist" in tr.too_many_buffers and "seed" not in tr.too_many_buffers
    counts = {b"abab": 7, b"abc": 4, b"abcd": 5, b" bcd": 2, b"dd": 3}
    st: dict = {}
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = tr.run(list(counts), list(counts.values()), 8, 1, stats=st)
    assert st["algorithm"] == "seed" and "storage buffers" in st["algorithm_changed_because"]
    assert got == reference.train_from_word_counts(counts, 256 + 8, min_frequency=1)
