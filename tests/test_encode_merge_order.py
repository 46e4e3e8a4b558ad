"""Exact merge-order BPE: reference.bpe_encode, vocab loading, the GPU's
``mode="bpe"`` and the exports, each compared token for token with tiktoken's
``encode_ordinary`` (GPT-2's and Qwen2's ranks, and vocabs trained here, all under this
project's DESIGN.md §2 split pattern) and Hugging Face ``tokenizers``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import numpy as np
import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (CORPUS_NAMES, TEST_VOCABS, benchmark_module, corpus_docs, shared_vocab,
                      subprocess_env)
from torch_gpubpe import Vocab
from torch_gpubpe.core import reference
from torch_gpubpe.core.bpe_tables import backtrack_encode, bpe_tables, valid_pair
from torch_gpubpe.errors import InputError, VocabFormatError
from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY
from torch_gpubpe.core.vocab_files import load_hf_tokenizer, load_tiktoken, vocab_from_hf_dict

GPT2 = TEST_VOCABS / "gpt2.tiktoken"
HSET = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def tiktoken_of(vocab: Vocab) -> tiktoken.Encoding:
    """tiktoken over the vocab's ranks with the §2 pattern (the oracle)."""
    return tiktoken.Encoding("t", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=vocab.bpe_ranks,
                             special_tokens={})


@pytest.fixture(scope="module")
def gpt2():
    return load_tiktoken(GPT2)


@pytest.fixture(scope="module")
def gpt2_tt(gpt2):
    return tiktoken_of(gpt2)


@pytest.fixture(scope="module")
def trained():
    docs = []
    for name in CORPUS_NAMES:
        docs += corpus_docs(name, 5_000)
    return Vocab.from_merges(reference.train(docs, vocab_size=1500, min_frequency=2),
                             ["<|endoftext|>"], mode="bpe")


def first_diff(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def assert_same(got, want, what=""):
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{what} document {k}: first difference at token {first_diff(g, w)}"
    assert len(got) == len(want)


# -- CPU: the oracle, the tables, loading ------------------------------------------------------

def test_reference_equals_tiktoken(gpt2, gpt2_tt, trained):
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 4_000, max_doc_bytes=2_000)]
    assert_same(reference.bpe_encode_batch(docs, gpt2.bpe_ranks),
                [gpt2_tt.encode_ordinary(d) for d in docs], "gpt2")
    tt = tiktoken_of(trained)
    assert_same(reference.bpe_encode_batch(docs, trained.bpe_ranks),
                [tt.encode_ordinary(d) for d in docs], "trained")


def test_reference_small_cases():
    ranks = reference.merge_ranks(reference.train([b"aaaaa"], 257, 1))
    assert reference.bpe_encode(b"aaaaa", ranks) == [256, 256, 97]
    assert reference.bpe_encode(b"", ranks) == []
    # Merge order differs from longest match: bc merges first, then nothing fits (longest
    # match would give [ab, cd]); with abc a token, (a, bc) merges next.
    r = {bytes([b]): b for b in range(256)}
    r.update({b"bc": 256, b"ab": 257, b"cd": 258})
    assert reference.bpe_encode(b"abcd", r) == [97, 256, 100]
    r[b"abc"] = 259
    assert reference.bpe_encode(b"abcd", r) == [259, 100]


def test_valid_pair_is_bpe_of_the_pair(gpt2):
    """valid_pair(t1, t2) ⟺ merge-order BPE of bytes(t1)+bytes(t2) gives [t1, t2]."""
    t = bpe_tables(gpt2)
    ranks, tb = gpt2.bpe_ranks, gpt2.token_bytes
    rng = np.random.default_rng(5)
    short = [i for i, b in enumerate(tb) if len(b) <= 4]
    pairs = rng.choice(short, (3000, 2)).tolist() + rng.integers(0, len(tb), (1000, 2)).tolist()
    n_valid = 0
    for a, b in pairs:
        want = reference.bpe_encode(tb[a] + tb[b], ranks) == [a, b]
        assert valid_pair(t, a, b) == want, (a, b, tb[a], tb[b])
        n_valid += want
    assert 0 < n_valid < len(pairs)


def test_tables_and_python_backtracking(gpt2, trained):
    for v in (gpt2, trained):
        t = bpe_tables(v)
        assert t.unreachable == ()  # GPT-2 and merge-trained vocabs: every token reachable
        assert t.max_probe >= 1 and t.max_height >= 1
        words = [w for d in corpus_docs("multi_udhr", 3_000) for w in
                 reference.split_words(d.encode())][:400]
        words += [b"a" * 300, b"1" * 50, b"\xf0\x9f\x98\x80" * 40]
        for w in words:
            assert backtrack_encode(w, v, t) == reference.bpe_encode_batch([w], v.bpe_ranks)[0]


def test_unreachable_token_only_as_whole_word():
    r = {bytes([b]): b for b in range(256)}
    r.update({b"ab": 256, b"abcd": 257, b"xy": 258})  # BPE of b"abcd" is stuck at [ab, c, d]
    toks = [None] * len(r)
    for b, i in r.items():
        toks[i] = b
    v = Vocab(tokens=tuple(toks), mode="bpe")
    t = bpe_tables(v)
    assert t.unreachable == (257,)
    tt = tiktoken_of(v)
    for w in (b"abcd", b"abcdabcd", b"xabcd", b"abcde", b"abc"):
        assert reference.bpe_encode(w, r) == tt.encode_ordinary(w.decode()) == \
            backtrack_encode(w, v, t)


def appended_parts_vocab(tmp_path, gpt2) -> Vocab:
    """GPT-2's ranks with tokens appended after them that are parts of earlier tokens (a
    token's bytes but the last, or but the first), as Llama 3 appended tokens to cl100k's."""
    ranks = dict(gpt2.bpe_ranks)
    for tb in sorted(gpt2.bpe_ranks, key=ranks.get):
        for part in (tb[:-1], tb[1:]):
            if len(tb) >= 4 and part not in ranks:
                ranks[part] = len(ranks)
    path = tmp_path / "appended.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
    return load_tiktoken(path)


def test_tokens_ranked_before_their_parts(tmp_path, gpt2):
    """A token whose part ranks after it forms right after that part: the tables rank tokens
    in the order BPE can form them, and backtracking gives tiktoken's ids."""
    v = appended_parts_vocab(tmp_path, gpt2)
    t = bpe_tables(v)
    n = len(v.token_bytes)
    late = [i for i, (a, b) in enumerate(t.split.tolist()) if a != i and i < max(a, b) < n]
    assert len(late) > 50  # tokens made of a part that comes later in the file
    assert all(t.rank[a] < t.rank[i] and t.rank[b] < t.rank[i]
               for i in late for a, b in [t.split[i]])
    tt = tiktoken_of(v)
    words = [w for d in corpus_docs("en_novels", 20_000) for w in
             reference.split_words(d.encode())][:1500]
    words += [v.token_bytes[i] * k for i in late[:300] for k in (1, 2, 3)]
    for w in words:
        assert backtrack_encode(w, v, t) == tt._encode_bytes(w), w


@pytest.fixture(scope="module")
def appended(tmp_path_factory, gpt2):
    """(vocab, tiktoken of it, GPU Tokenizer, tokens whose part ranks after them, tokens BPE
    never builds)."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    v = appended_parts_vocab(tmp_path_factory.mktemp("appended"), gpt2)
    t = bpe_tables(v)
    n = len(v.token_bytes)
    late = [v.token_bytes[i] for i, (a, b) in enumerate(t.split.tolist())
            if a != i and i < max(a, b) < n]
    never = [v.token_bytes[i] for i in t.unreachable]
    assert len(late) > 50 and len(never) > 50  # both kinds of token
    return v, tiktoken_of(v), Tokenizer(v), late, never


@pytest.mark.gpu
def test_gpu_tokens_ranked_before_their_parts(appended):
    """Tokens formed right after a later part, and tokens BPE never builds (emitted whole):
    tiktoken's ids on every corpus, on runs of such tokens, and on long runs."""
    v, tt, tok, late, never = appended
    rng = np.random.default_rng(3)
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 10_000, max_doc_bytes=3_000)]
    for kind in (late, never):
        docs += [b" ".join(rng.choice(kind, 60).tolist()).decode("utf-8", "replace")
                 for _ in range(40)]
        docs += ["".join(x.decode("utf-8", "replace") for x in rng.choice(kind, 30).tolist())
                 for _ in range(40)]
    docs += [late[0].decode("utf-8", "replace") * 3000, " " * 5000 + "x", "9" * 4000]
    got = tok.encode_batch(docs).tolist()
    assert_same(got, [tt.encode_ordinary(d) for d in docs], "appended parts")
    assert any(v.bytes_to_id[b] in g for g in got for b in never[:50])  # not vacuous


APPENDED_PIECES = st.sampled_from(["a", " ", "\n", "1", "ı", "🙂", "\ud800", ".:", ":.", "th",
                                   "ing", " the", "ent", "=", "\U0010ffff"])


@pytest.mark.gpu
@HSET
@given(st.lists(st.one_of(st.text(max_size=200),
                          st.lists(APPENDED_PIECES, max_size=200).map("".join)),
                min_size=1, max_size=6))
def test_gpu_tokens_ranked_before_their_parts_random_text(appended, docs):
    v, tt, tok, _, _ = appended
    assert_same(tok.encode_batch(docs).tolist(),
                [tt.encode_ordinary(reference.to_bytes(d).decode()) for d in docs])


@pytest.mark.gpu
@HSET
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_gpu_tokens_ranked_before_their_parts_random_bytes(appended, docs):
    """Any bytes (lone surrogates, invalid UTF-8): the reference's merge-order BPE (tiktoken's
    algorithm; tiktoken itself takes only str) and a lossless decode."""
    v, _, tok, _, _ = appended
    be = tok.encode_batch(docs)
    assert_same(be.tolist(), reference.bpe_encode_batch(docs, v.bpe_ranks))
    for k, d in enumerate(docs):
        assert tok.decode_bytes(be[k]) == d


def test_vocab_file_modes_round_trip(tmp_path, gpt2, trained):
    greedy = trained.with_mode("greedy")
    p = tmp_path / "v.json"
    greedy.save(p)
    assert json.loads(p.read_text())["version"] == 1  # old format kept for greedy merges
    assert Vocab.load(p) == greedy
    for v in (trained, gpt2):
        v.save(p)
        obj = json.loads(p.read_text())
        assert obj["version"] == 2 and obj["mode"] == "bpe"
        back = Vocab.load(p)
        assert back == v and back.mode == "bpe" and back.token_bytes == v.token_bytes
    assert Vocab.load(GPT2) == gpt2  # by extension
    assert len(gpt2) == 50257 and gpt2.num_tokens == 50256
    assert gpt2.special_token_ids == {"<|endoftext|>": 50256}
    assert gpt2.token_bytes[0] == b"!" and gpt2.token_bytes[256] == b" t"


def test_tiktoken_loader_errors(tmp_path):
    lines = GPT2.read_text().splitlines()
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("\n".join(lines[:300] + ["@@@ 300"]) + "\n")
    with pytest.raises(VocabFormatError, match="bad.tiktoken:301"):
        load_tiktoken(bad)
    bad.write_text("\n".join(lines[:300] + lines[301:400]) + "\n")
    with pytest.raises(VocabFormatError, match="without gaps"):
        load_tiktoken(bad)
    bad.write_text("\n".join(x for x in lines[:400] if base64.b64decode(x.split()[0]) != b"a"))
    with pytest.raises(VocabFormatError):
        load_tiktoken(bad)  # a byte missing (and a gap)
    with pytest.raises(VocabFormatError, match="follow"):
        load_tiktoken(GPT2, special_tokens={"<|x|>": 7})


def test_hf_json_round_trip_and_rejects(gpt2, trained):
    from torch_gpubpe.core.export import hf_tokenizer_dict

    for v in (gpt2, trained):
        obj = hf_tokenizer_dict(v)
        assert obj["model"]["type"] == "BPE"
        back = vocab_from_hf_dict(obj)
        assert back.token_bytes == v.token_bytes and back.mode == "bpe"
        assert back.special_tokens == v.special_tokens and back.ranks is None
    wp = hf_tokenizer_dict(trained.with_mode("greedy"))  # the WordPiece export
    with pytest.raises(VocabFormatError, match="WordPiece.*export of a greedy-mode vocab"):
        vocab_from_hf_dict(wp)     # (says where the loadable vocab is)
    other_wp = dict(wp, model=dict(wp["model"], continuing_subword_prefix="##"))
    with pytest.raises(VocabFormatError, match="WordPiece") as e:
        vocab_from_hf_dict(other_wp)
    assert "greedy-mode" not in str(e.value)
    obj = hf_tokenizer_dict(trained)
    assert vocab_from_hf_dict(dict(obj, normalizer={"type": "NFC"})).normalizer == "nfc"
    with pytest.raises(VocabFormatError, match="normalizer"):
        vocab_from_hf_dict(dict(obj, normalizer={"type": "NFKC"}))
    with pytest.raises(VocabFormatError, match="Unigram"):
        vocab_from_hf_dict(dict(obj, model={"type": "Unigram", "vocab": []}))
    with pytest.raises(VocabFormatError, match="ByteLevel"):
        vocab_from_hf_dict(dict(obj, pre_tokenizer={"type": "Whitespace"}))
    m = dict(obj["model"], continuing_subword_prefix="##")
    with pytest.raises(VocabFormatError, match="continuing_subword_prefix"):
        vocab_from_hf_dict(dict(obj, model=m))
    m = dict(obj["model"], merges=obj["model"]["merges"][::-1])  # merge order broken
    with pytest.raises(VocabFormatError):
        vocab_from_hf_dict(dict(obj, model=m))


# -- GPU ---------------------------------------------------------------------------------------

gpu = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpt2_tok(gpt2):
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    return Tokenizer(gpt2)


@gpu
@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_gpu_gpt2_equals_tiktoken(gpt2_tok, gpt2_tt, name):
    assert gpt2_tok.mode == "bpe"
    docs = corpus_docs(name, 25_000, max_doc_bytes=8_000)
    be = gpt2_tok.encode_batch(docs)
    assert_same(be.tolist(), [gpt2_tt.encode_ordinary(d) for d in docs], name)
    assert gpt2_tok.decode(be[0]) == docs[0]


@gpu
def test_gpu_qwen2_equals_tiktoken():
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    v = load_tiktoken(shared_vocab("qwen2.tiktoken"))
    assert len(v) == 151643 + 293 and v.mode == "bpe"
    tok = Tokenizer(v)
    assert tok.id_dtype == np.uint32
    tt = tiktoken_of(v)
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 12_000, max_doc_bytes=4_000)]
    docs += ["1234567890" * 30, "🙂" * 200, "  \n\n\t  x " * 20]
    assert_same(tok.encode_batch(docs).tolist(), [tt.encode_ordinary(d) for d in docs], "qwen2")


@gpu
def test_gpu_trained_vocab_equals_tiktoken_and_reference(trained):
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.export import tiktoken_encoding

    tok = Tokenizer(trained)
    assert tok.mode == "bpe" and Tokenizer(trained, mode="greedy").mode == "greedy"
    tt = tiktoken_encoding(trained)
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 10_000, max_doc_bytes=3_000)]
    got = tok.encode_batch(docs).tolist()
    assert_same(got, [tt.encode_ordinary(d) for d in docs], "tiktoken")
    assert_same(got, reference.bpe_encode_batch(docs, trained.bpe_ranks), "reference")
    greedy = Tokenizer(trained, mode="greedy").encode_batch(docs).tolist()
    assert greedy != got  # the two modes do differ on real text


@gpu
@HSET
@given(st.lists(st.text(max_size=200), min_size=1, max_size=6))
def test_gpu_random_text(gpt2_tok, gpt2_tt, docs):
    assert_same(gpt2_tok.encode_batch(docs).tolist(),
                [gpt2_tt.encode_ordinary(reference.to_bytes(d).decode()) for d in docs])


@gpu
@HSET
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_gpu_random_bytes(gpt2_tok, gpt2, docs):
    be = gpt2_tok.encode_batch(docs)
    assert_same(be.tolist(), reference.bpe_encode_batch(docs, gpt2.bpe_ranks))
    for k, d in enumerate(docs):
        assert gpt2_tok.decode_bytes(be[k]) == d


PIECES = st.sampled_from(["a", "e", " ", "  ", "\n", "1", "=", "ı", "th", "\t", "🙂", "ab", "0"])


@pytest.fixture(scope="module")
def tiny(gpt2):
    """Slices of ~300 bytes, the smallest walk budget, 4-byte chunks: every continuation."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    return Tokenizer(gpt2, max_slice_bytes=300, thread_budget=1, chunk_bytes=4)


@gpu
@HSET
@given(st.lists(st.lists(PIECES, max_size=300).map("".join), min_size=1, max_size=4))
def test_gpu_sliced_and_continued(tiny, gpt2_tt, docs):
    assert_same(tiny.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])


PATHOLOGICAL = [
    "a" * 20_000, " " * 9_000 + "x", "1" * 7_000, "🙂" * 3_000, "=" * 5_000 + "ab" * 900,
    base64.b64encode(bytes(range(256)) * 40).decode(), "ğ" * 4_000, "\n" * 3_000,
    " ".join(["Donaudampfschifffahrtsgesellschaftskapitän"] * 200), "ab" * 6_000,
]


@gpu
def test_gpu_pathological_words(gpt2, gpt2_tok, gpt2_tt, tiny):
    want = [gpt2_tt.encode_ordinary(d) for d in PATHOLOGICAL]
    assert_same(gpt2_tok.encode_batch(PATHOLOGICAL).tolist(), want, "default")
    assert_same(tiny.encode_batch(PATHOLOGICAL).tolist(), want, "tiny slices/budget")
    sess = tiny._session()
    assert sess.continuation_dispatches > 0 and sess.slices > 100
    assert sess.junction_checks > 10  # words cut across slices


@gpu
def test_gpu_profile_repeat_same_ids(gpt2, gpt2_tt):
    """The benchmarks' repeated passes (benchmarks/_kernel_clock.py's session.profile_repeat:
    each slice's passes run 3 times in its submit, each timed) give the same ids, pops and
    continuations included, and a time per pass for every repetition (session.rep_pass_us, the
    last one == last_pass_us)."""
    tok = benchmark_module("_kernel_clock").ClockTokenizer(gpt2, profile=True,
                                                           thread_budget=8_000)
    tok._session().profile_repeat = 3
    docs = corpus_docs("multi_udhr", 20_000, max_doc_bytes=4_000) + ["a" * 30_000]
    assert_same(tok.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])
    assert tok._session().continuation_dispatches > 0
    assert not tok._session().profile or tok.last_pass_us["trie_tokenizer_chunked"] > 0
    if tok._session().profile:
        reps = tok._session().rep_pass_us
        assert len(reps) == 3 and reps[-1] == tok.last_pass_us
        assert all(set(r) == set(reps[-1]) and min(r.values()) > 0 for r in reps)


@gpu
def test_gpu_walk_backtracks_and_continues(gpt2, gpt2_tt):
    """The walk on text that backtracks (pops) and on pathological words, continued across
    dispatches (a small budget), gives tiktoken's ids."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(gpt2, thread_budget=8_000)
    docs = corpus_docs("multi_udhr", 20_000, max_doc_bytes=4_000) + PATHOLOGICAL
    assert_same(tok.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])
    assert tok._session().continuation_dispatches > 0


RUN_WORDS = [" " + "-" * 150 + "\n", "\t" + " " * 40 + "x", "/" * 120, " " * 117 + "|",
             "=" * 90 + "\n\n", "#" + "-" * 130]


@gpu
def test_gpu_budget_of_a_gpu_adapter(monkeypatch, gpt2, gpt2_tt):
    """On a GPU (not a CPU adapter) the walk takes GPU_BUDGET steps per dispatch by default
    (words of runs then need no continuation round) and a quarter of an explicit
    thread_budget; the ids are the same. Run here with the adapter marked as a GPU: these
    walks stay under lavapipe's loop cap."""
    from torch_gpubpe.encoding.merge_walk import GPU_BUDGET
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.gpu.device import get_gpu

    docs = corpus_docs("code_cpython_headers", 30_000, max_doc_bytes=4_000) + RUN_WORDS * 3
    want = [gpt2_tt.encode_ordinary(d) for d in docs]
    monkeypatch.setattr(get_gpu(), "is_cpu", False)
    default, small = Tokenizer(gpt2), Tokenizer(gpt2, thread_budget=8_000)
    smallest = Tokenizer(gpt2, thread_budget=1)
    assert default._session().budget == GPU_BUDGET
    assert small._session().budget == 8_000 // 4
    assert_same(default.encode_batch(docs).tolist(), want, "default budget")
    assert_same(small.encode_batch(docs).tolist(), want, "small budget")
    assert_same(smallest.encode_batch(docs).tolist(), want, "smallest budget")
    assert default._session().continuation_dispatches == 0
    assert smallest._session().continuation_dispatches > 0


@pytest.fixture(scope="module")
def gpu_rule(gpt2):
    """A merge-order tokenizer whose session opened under the GPU rule (GPU_BUDGET), here on
    lavapipe: the walks of the test below stay under its loop cap."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.gpu.device import get_gpu

    g = get_gpu()
    was, g.is_cpu = g.is_cpu, False
    try:
        tok = Tokenizer(gpt2, max_slice_bytes=600)
        tok._session()
    finally:
        g.is_cpu = was
    return tok


RUNS = st.sampled_from([" ", "-", "=", "\t", "/", "#", "a", "\n", "ab", " -", "🙂"])


@gpu
@HSET
@given(st.lists(st.lists(st.tuples(RUNS, st.integers(1, 160)), max_size=6)
                .map(lambda rs: "".join(p * k for p, k in rs)), min_size=1, max_size=5))
def test_gpu_budget_random_runs(gpu_rule, gpt2_tt, docs):
    """Random runs of punctuation, spaces and letters (up to 160 each, across slices of 600
    bytes) under the GPU budget: tiktoken's ids."""
    from torch_gpubpe.encoding.merge_walk import GPU_BUDGET

    assert gpu_rule._session().budget == GPU_BUDGET
    assert_same(gpu_rule.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])


@gpu
def test_gpu_large_slice_continuation(gpt2, gpt2_tt):
    """Single-character words of 50-100 KB on a budget that needs many continuation
    dispatches (tiktoken is quadratic on one long piece: larger sizes are in the heavy test)."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(gpt2, thread_budget=8_000)
    docs = ["a" * 100_000, "x" + "7" * 50_000, "🙂" * 15_000]
    assert_same(tok.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])
    assert tok._session().continuation_dispatches > 10


@gpu
def test_gpu_exported_hf_and_tiktoken_equal(tmp_path, trained, gpt2, gpt2_tok):
    import tiktoken.load
    import tokenizers

    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.export import export_all

    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 6_000, max_doc_bytes=2_000)]
    docs += PATHOLOGICAL[:4]
    for v, tok in ((trained, Tokenizer(trained)), (gpt2, gpt2_tok)):
        paths = export_all(v, tmp_path / f"out{len(v)}")
        hf = tokenizers.Tokenizer.from_file(str(paths["hf"]))
        got = tok.encode_batch(docs).tolist()
        assert_same(got, [hf.encode(d).ids for d in docs], "tokenizers")
        tt = tiktoken.Encoding("x", pat_str=SPLIT_PATTERN_PY,
                               mergeable_ranks=tiktoken.load.load_tiktoken_bpe(
                                   str(paths["tiktoken"])), special_tokens={})
        assert_same(got, [tt.encode_ordinary(d) for d in docs], "tokenizer.tiktoken")
        assert Vocab.load(paths["vocab"]) == v
        assert load_hf_tokenizer(paths["hf"]).token_bytes == v.token_bytes


@gpu
def test_gpu_transformers_loads_export(tmp_path, trained):
    import transformers

    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.export import export_all

    export_all(trained, tmp_path)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    docs = corpus_docs("en_python_docs", 5_000, max_doc_bytes=1_500)
    got = Tokenizer(trained).encode_batch(docs).tolist()
    assert_same(got, [hf(d, add_special_tokens=False)["input_ids"] for d in docs])


NO_SUBGROUP_SCRIPT = r"""
import sys, tiktoken
from torch_gpubpe.gpu import device as gpu
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY
from torch_gpubpe.core.vocab_files import load_tiktoken
v = load_tiktoken(sys.argv[1])
tok = Tokenizer(v, max_slice_bytes=2048, thread_budget=1, chunk_bytes=8)
assert not tok._session().gpu.has_subgroups
tt = tiktoken.Encoding("t", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=v.bpe_ranks,
                       special_tokens={})
docs = [open(p, encoding="utf-8").read() for p in sys.argv[2:]] + ["a" * 5000, "🙂" * 900]
assert tok.encode_batch(docs).tolist() == [tt.encode_ordinary(d) for d in docs]
print("ok", len(docs))
"""


@gpu
def test_gpu_no_subgroup_path(tmp_path):
    files = []
    for k, name in enumerate(("multi_udhr", "code_cpython_stdlib", "web_html")):
        p = tmp_path / f"{k}.txt"
        p.write_text("".join(corpus_docs(name, 6_000, max_doc_bytes=3_000)), encoding="utf-8")
        files.append(str(p))
    res = subprocess.run([sys.executable, "-c", NO_SUBGROUP_SCRIPT, str(GPT2), *files],
                         env=subprocess_env(TORCH_GPUBPE_NO_SUBGROUPS="1"),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.startswith("ok 5"), res.stdout + res.stderr


@gpu
@pytest.mark.heavy
def test_heavy_megabyte_words_and_corpora(gpt2, gpt2_tt):
    """For a real GPU (``pytest -m heavy``): 2 MB per corpus, MB single-character words, with
    GPT-2 and Qwen2. tiktoken is quadratic on one long piece, so MB words are checked against
    the Python walk (bpe.backtrack_encode, itself checked against tiktoken above) and across
    slicings."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    big = ["a" * (1 << 21), " " * (1 << 20) + "x", "9" * (1 << 20), "🙂" * (1 << 18),
           base64.b64encode(np.random.default_rng(0).bytes(3 << 19)).decode()]
    qwen = load_tiktoken(shared_vocab("qwen2.tiktoken"))
    for v, tt in ((gpt2, gpt2_tt), (qwen, tiktoken_of(qwen))):
        tok = Tokenizer(v)
        for name in CORPUS_NAMES:
            docs = corpus_docs(name, 2_000_000, max_doc_bytes=400_000)
            assert_same(tok.encode_batch(docs).tolist(), [tt.encode_ordinary(d) for d in docs],
                        name)
        t = bpe_tables(v)
        want = [[i for w in reference.split_words(d.encode()) for i in backtrack_encode(w, v, t)]
                for d in big]
        assert_same(tok.encode_batch(big).tolist(), want, "big")
        sliced = Tokenizer(v, max_slice_bytes=1 << 19)
        assert_same(sliced.encode_batch(big).tolist(), want, "big, sliced")


@gpu
def test_gpu_own_split_patterns_equal_tiktoken():
    """With the file's own split pattern (GPU regex pre-tokenizer), GPT-2 and Qwen2 ids equal
    tiktoken with that pattern: the vocabularies as their models use them."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.vocab_files import tiktoken_metadata

    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 5_000, max_doc_bytes=2_500)]
    docs += ["1234567890" * 40, "🙂🙂 🙂" * 100, "  \n\n\t  x it's " * 20]
    for name, family in (("gpt2.tiktoken", "gpt2"), ("qwen2.tiktoken", "qwen2")):
        path = shared_vocab(name)
        v = load_tiktoken(path)
        meta = tiktoken_metadata(path)
        tt = tiktoken.Encoding("t", pat_str=meta["pattern"], mergeable_ranks=v.bpe_ranks,
                               special_tokens={})
        got = Tokenizer(v, pre_tokenizer=family).encode_batch(docs).tolist()
        assert_same(got, [tt.encode_ordinary(d) for d in docs], name)


@gpu
def test_cli_encode_tiktoken_vocab(tmp_path, capsys, gpt2_tt):
    import gzip

    from torch_gpubpe.cli import main as cli

    docs = corpus_docs("en_fortunes", 15_000) + [""] + corpus_docs("multi_udhr", 6_000)
    data = tmp_path / "d.jsonl.gz"
    with gzip.open(data, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    for mode, want_of in (("bpe", gpt2_tt.encode_ordinary), ("greedy", None)):
        out = tmp_path / mode
        argv = ["encode", "--vocab", str(GPT2), "--data-files", str(data), "--out", str(out),
                "--batch-bytes", "5K", "--no-progress", "--append-eos",
                "--pre-tokenizer", "bytes-classes"]   # DESIGN.md §2 words, as gpt2_tt splits
        if mode == "greedy":
            argv += ["--mode", "greedy"]
        assert cli.main(argv) == 0, capsys.readouterr().err
        meta = json.loads((out / "meta.json").read_text())
        ids = np.fromfile(out / "ids.bin", dtype=np.dtype(meta["ids_dtype"]))
        offsets = np.load(out / "offsets.npy")
        if want_of is None:  # greedy longest match over GPT-2's tokens
            gv = load_tiktoken(GPT2, mode="greedy")

            def want_of(d, gv=gv):
                return _greedy(gv, d)
        for k, d in enumerate(docs):
            assert ids[offsets[k] : offsets[k + 1]].tolist() == want_of(d) + [50256], (mode, k)
    # No --pre-tokenizer: the split the sidecar names (GPT-2's regex), i.e. tiktoken's GPT-2 ids
    import tiktoken

    meta_tt = json.loads(GPT2.with_name(GPT2.name + ".json").read_text())
    real = tiktoken.Encoding("gpt2", pat_str=meta_tt["pattern"], mergeable_ranks=gpt2_tt._mergeable_ranks,
                             special_tokens={})
    out = tmp_path / "implied"
    assert cli.main(["encode", "--vocab", str(GPT2), "--data-files", str(data), "--out", str(out),
                     "--no-progress", "--append-eos"]) == 0, capsys.readouterr().err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["pre_tokenizer"] == "gpt2"
    ids = np.fromfile(out / "ids.bin", dtype=np.dtype(meta["ids_dtype"]))
    offsets = np.load(out / "offsets.npy")
    for k, d in enumerate(docs):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == real.encode_ordinary(d) + [50256], k


def _greedy(vocab: Vocab, text: str) -> list[int]:
    """Greedy longest match over an explicit token table (DESIGN.md §4), for the CLI test."""
    ids = vocab.bytes_to_id
    out = []
    for w in reference.split_words(text.encode()):
        j = 0
        while j < len(w):
            k = min(len(w) - j, 128)
            while w[j : j + k] not in ids:
                k -= 1
            out.append(ids[w[j : j + k]])
            j += k
    return out


@gpu
def test_cli_train_bpe_mode_exports(tmp_path, capsys):
    import tokenizers

    from torch_gpubpe.cli import main as cli
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    out = tmp_path / "v"
    assert cli.main(["train", "--vocab-size", "600", "--max-bytes", "300K", "--mode", "bpe",
                     "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    v = Vocab.load(out)
    assert v.mode == "bpe"
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    docs = corpus_docs("tr_manpages", 6_000, max_doc_bytes=2_000)
    assert_same(Tokenizer(v).encode_batch(docs).tolist(), [hf.encode(d).ids for d in docs])


@gpu
def test_tokenized_dataset_bpe_mode(gpt2, gpt2_tt):
    import torch

    from torch_gpubpe.integrations.torch_data import TokenizedDataset

    docs = corpus_docs("web_pypi_readmes", 12_000, max_doc_bytes=3_000)
    got = [t.tolist() for t in TokenizedDataset(docs, gpt2, batch_bytes=4_000)]
    assert got == [gpt2_tt.encode_ordinary(d) for d in docs]
    blocks = list(TokenizedDataset(docs, gpt2, mode="packed", seq_len=64, drop_last=False))
    stream = [i for d in docs for i in gpt2_tt.encode_ordinary(d) + [50256]]
    flat = torch.cat([b["input_ids"] for b in blocks]).tolist()[: len(stream)]
    assert flat == stream


@gpu
def test_gpu_arrow_reader_path_bpe_mode(gpt2_tok, gpt2_tt, tiny):
    """The ingestion path (pyarrow arrays, packed bytes) in merge-order mode, sliced too."""
    import pyarrow as pa

    docs = corpus_docs("tr_libreoffice_help", 15_000, max_doc_bytes=3_000) + ["", "a" * 3_000]
    want = [gpt2_tt.encode_ordinary(d) for d in docs]
    arr = pa.chunked_array([pa.array(docs[:5]), pa.array(docs[5:])])
    assert_same(gpt2_tok.encode_arrow(arr).tolist(), want, "arrow")
    assert_same(tiny.encode_arrow(pa.array(docs, pa.large_string())).tolist(), want,
                "arrow, tiny slices")


def _unreachable_vocab() -> Vocab:
    """Bytes + ab, abcd (BPE of b"abcd" stops at [ab, c, d]: unreachable), xy, yab, bc."""
    toks = [bytes([b]) for b in range(256)] + [b"ab", b"abcd", b"xy", b"yab", b"bc"]
    return Vocab(tokens=tuple(toks), mode="bpe")


@gpu
@HSET
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "x", "y", " ", "abcd", "yab"]),
                         max_size=60).map("".join), min_size=1, max_size=5))
def test_gpu_unreachable_tokens(docs):
    """A vocab with unreachable tokens (BPE of their own bytes does not end in them): the GPU
    walk leaves them out except for a whole word spelled by one (tiktoken's piece lookup)."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    v = _unreachable_vocab()
    t = bpe_tables(v)
    assert t.unreachable  # the non-ALL_REACHABLE kernel is the one under test
    tok = _UNREACHABLE_TOK.setdefault("tok", Tokenizer(v))
    tt = tiktoken_of(v)
    docs = docs + ["abcd", "abcd abcd", "xabcd", " abcd", "abcdabcd"]
    assert_same(tok.encode_batch(docs).tolist(), [tt.encode_ordinary(d) for d in docs])


_UNREACHABLE_TOK: dict = {}


def _replay_counts(docs, vocab: Vocab) -> tuple[list[list[int]], dict[str, int]]:
    """The GPU walk's work counters (benchmarks/_walk_work.py), counted by replaying the walk in
    Python word by word: trie steps (bytes the trie walk extends a match by), candidates tried,
    pair checks, shorter candidates, backtracks, tokens accepted. A walk that starts a run of a
    byte whose run path is ``RUN_MIN_DEPTH`` deep or more jumps over the run's first ``m`` bytes
    (the run's length in the word, at most that depth): ``m - 1`` trie steps fewer."""
    from torch_gpubpe.encoding.merge_walk import RUN_MIN_DEPTH, run_depth_bits

    t = bpe_tables(vocab)
    toks_b = vocab.token_bytes
    prefixes = {tb[:k] for i, tb in enumerate(toks_b) for k in range(1, len(tb) + 1)}
    run_depth = {}
    for b in range(256):
        k = 0
        while k < (1 << run_depth_bits()) - 1 and bytes([b]) * (k + 1) in prefixes:
            k += 1
        run_depth[b] = k if k >= RUN_MIN_DEPTH else 0
    ids = vocab.bytes_to_id
    c = dict.fromkeys(("steps", "tries", "checks", "shorter", "pops", "tokens"), 0)
    out = []
    for d in docs:
        doc = []
        for w in reference.split_words(reference.to_bytes(d)):
            toks, dead, pos, cand = [], set(), 0, None
            while pos < len(w):
                if cand is None:
                    k = 1
                    while pos + k < len(w) and w[pos : pos + k + 1] in prefixes:
                        k += 1
                    run = 1
                    while pos + run < len(w) and w[pos + run] == w[pos]:
                        run += 1
                    c["steps"] += k - 1 - max(min(run, run_depth[w[pos]]) - 1, 0)
                    cand = next(ids[w[pos : pos + j]] for j in range(k, 0, -1)
                                if w[pos : pos + j] in ids)
                c["tries"] += 1
                end = pos + len(toks_b[cand])
                ok = end not in dead
                if ok and toks:
                    c["checks"] += 1
                    ok = valid_pair(t, toks[-1], cand)
                if ok:
                    c["tokens"] += 1
                    toks.append(cand)
                    pos, cand = end, None
                elif t.next_prefix[cand] != 0xFFFFFFFF:
                    c["shorter"] += 1
                    cand = int(t.next_prefix[cand])
                else:
                    c["pops"] += 1
                    dead.add(pos)
                    cand = toks.pop()
                    pos -= len(toks_b[cand])
                    if t.next_prefix[cand] != 0xFFFFFFFF:  # cand ends at pos: not tried again
                        c["shorter"] += 1
                        cand = int(t.next_prefix[cand])
            doc += toks
        out.append(doc)
    return out, c


@gpu
def test_gpu_walk_work_counters(gpt2, gpt2_tok, gpt2_tt):
    """The PROFILE build's counters (benchmarks/bpe_work.py --gpu) count exactly the walk's
    work, and that build's ids are tiktoken's."""
    walk_work = benchmark_module("_walk_work").walk_work

    docs = [d for n in ("en_novels", "code_cpython_stdlib", "web_html")
            for d in corpus_docs(n, 4_000, max_doc_bytes=2_000)]
    docs += ["ab" * 100, "Donaudampfschifffahrtsgesellschaftskapitän " * 5, "1234567" * 20]
    ids: list = []
    w = walk_work(gpt2_tok, docs, ids_out=ids)
    want_ids, want = _replay_counts(docs, gpt2)
    assert_same([x.tolist() for x in ids], [gpt2_tt.encode_ordinary(d) for d in docs], "PROFILE")
    assert_same([x.tolist() for x in ids], want_ids, "replay")
    assert w["dispatches"] == 1  # no continuation: a resumed walk walks its trie again
    assert {k: w[k] for k in want} == want
    assert want["pops"] > 0 and want["shorter"] > 0 and want["checks"] > 100
    assert w["iters"] == w["steps"] + w["tries"]
    assert w["output_tokens"] == w["tokens"] - w["pops"] == sum(map(len, want_ids))
    assert w["checks"] >= w["check_loop"] > 0 and w["probes"] >= w["checks"]
    assert w["unwind"] >= w["check_loop"]
    assert w["scan"] < w["pops"]  # (a pop scans rarely: the token before is kept)
    sg = w["subgroup_size"]
    if sg:  # lockstep: per subgroup its longest lane, so between the mean and the total
        assert w["iters"] / sg <= w["lockstep"] <= w["iters"]
    again = gpt2_tok.encode_batch(docs)  # the tokenizer's own session is untouched
    assert_same(again.tolist(), want_ids, "after walk_work")


def test_fused_edges_and_depth2_table(gpt2):
    """fused_edges row e = (byte | nc << 8, fc, token) of edge e's child; depth2_table row
    b0 << 8 | b1 = the node of the two bytes (trie_lookup agrees), NO_TOKEN rows elsewhere."""
    from torch_gpubpe.encoding.merge_walk import depth2_table, fused_edges
    from torch_gpubpe.core.trie import compile_trie, trie_lookup

    trie = compile_trie(gpt2.token_bytes)
    nodes, edges = trie.nodes.reshape(-1, 3), trie.edges.reshape(-1, 2)
    fe = fused_edges(trie)
    for e in (0, 1, 255, 256, 1000, len(edges) - 1):
        c = nodes[edges[e, 1]]
        assert fe[e].tolist() == [int(edges[e, 0]) | int(c[1]) << 8, int(c[0]), int(c[2]), 0]
    d2 = depth2_table(trie)
    present = d2[:, 0] != 0xFFFFFFFF
    two = {tb for tb in gpt2.token_bytes if len(tb) >= 2}
    assert present.sum() == len({tb[:2] for tb in two})
    for key in np.flatnonzero(present)[::97].tolist() + [ord("t") << 8 | ord("h")]:
        pair = bytes([key >> 8, key & 0xFF])
        assert d2[key, 0] & 0xFF == key & 0xFF
        tid = trie_lookup(trie, pair)
        assert int(d2[key, 2]) == (0xFFFFFFFF if tid is None else tid)
    assert (d2[~present] == 0xFFFFFFFF).all()


def test_d1_rows_run_nodes(gpt2):
    """d1_rows' run header of a byte (first row << run_depth_bits() | depth, 0 below RUN_MIN_DEPTH) and its
    run rows: the node of b * k (trie_lookup agrees on its token) and the longest reachable
    token of b * 1 .. b * k with its length, for every depth k of the run's path."""
    from torch_gpubpe.core.bpe_tables import bpe_tables
    from torch_gpubpe.core.trie import compile_trie, trie_lookup
    from torch_gpubpe.encoding.merge_walk import RUN_MIN_DEPTH, d1_rows, run_depth_bits

    trie = compile_trie(gpt2.token_bytes)
    t = bpe_tables(gpt2)
    rows = d1_rows(trie, t)
    bits = run_depth_bits()
    prefixes = {tb[:k] for tb in gpt2.token_bytes for k in range(1, len(tb) + 1)}
    reachable = set(range(len(gpt2.token_bytes))) - set(t.unreachable)
    runs = 0
    for b in range(256):
        depth = 0
        while bytes([b]) * (depth + 1) in prefixes:
            depth += 1
        hdr = int(rows[3 * b, 3])
        if depth < RUN_MIN_DEPTH:
            assert hdr == 0, b
            continue
        runs += 1
        assert hdr & ((1 << bits) - 1) == depth, b
        best = None
        for k in range(1, depth + 1):
            r = rows[(hdr >> bits) + k - 1]
            tid = trie_lookup(trie, bytes([b]) * k)
            assert int(r[2]) == (0xFFFFFFFF if tid is None else tid)
            assert int(r[0]) & 0xFF == b
            if tid is not None and tid in reachable:
                best = (tid, k)
            assert (int(r[3]) & ((1 << 18) - 1), int(r[3]) >> 18) == best
    assert runs >= 3   # spaces, dashes, equals signs at least
    assert len(rows) == 768 + sum(int(h) & ((1 << bits) - 1) for h in rows[0:768:3, 3])


@gpu
@pytest.mark.parametrize("chunk", [64, 128])
def test_gpu_large_chunks_exact(gpt2, gpt2_tt, chunk):
    """Merge-order mode with the larger chunks benchmarks/encode.py times (--bpe-chunks):
    tiktoken's ids, continuations and pathological words included."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(gpt2, thread_budget=8_000, chunk_bytes=chunk)
    docs = corpus_docs("code_cpython_stdlib", 20_000, max_doc_bytes=4_000) + PATHOLOGICAL
    assert_same(tok.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])
    assert tok._session().continuation_dispatches > 0


@gpu
def test_gpu_word_bits_sliced(gpt2, gpt2_tt):
    """The word-start bits pass with slices of 300 bytes, a budget of one step and chunks of 4
    bytes (words cut across slices and continued across dispatches: the bits are the slice's,
    computed once per slice) gives tiktoken's ids."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(gpt2, max_slice_bytes=300, thread_budget=1, chunk_bytes=4)
    docs = corpus_docs("web_html", 6_000, max_doc_bytes=2_000) + [p[:3_000] for p in PATHOLOGICAL]
    assert_same(tok.encode_batch(docs).tolist(), [gpt2_tt.encode_ordinary(d) for d in docs])
    sess = tok._session()
    assert sess.bpe_bits_pipeline is not None and sess.slices > 20
    assert sess.continuation_dispatches > 0


@gpu
def test_gpu_call_above_one_slice_equals_small_calls(gpt2_tok, gpt2_tt):
    """One call holding more than a slice (documents in groups, two in flight; a document above
    the slice alone, in slices) == tiktoken, with ids put around each document by the GPU."""
    from torch_gpubpe.encoding.layout import GROUP_BYTES
    from torch_gpubpe.encoding.slicing import group_bounds
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 40_000, max_doc_bytes=3_000)]
    docs.insert(len(docs) // 2, " ".join(docs[:40]))  # longer than a slice
    docs += ["", "x"]
    small = Tokenizer(gpt2_tok.vocab, max_slice_bytes=20_000)
    want = [gpt2_tt.encode_ordinary(d) for d in docs]
    assert_same(small.encode_batch(docs).tolist(), want, "grouped")
    got = small.submit(docs, bos_id=7, eos_id=9).result().tolist()
    assert_same(got, [[7, *w, 9] for w in want], "grouped, bos and eos")
    offsets = np.array([0, 5, 10, 10, 40, 41, 60])
    assert group_bounds(offsets, 10, 100) == [0, 3, 4, 5, 6]
    assert group_bounds(offsets, 10, 1) == [0, 1, 2, 3, 4, 5, 6]
    assert GROUP_BYTES >= 1 << 20


@gpu
def test_gpu_documents_in_text_groups_equal_one_call(gpt2_tok, gpt2_tt, monkeypatch):
    """A large list is cut into groups of about a target size before packing (each group
    packed on a thread while the ones before run); the groups' encodings joined == tiktoken,
    with ids around each document, and a bad item is named by its index in the whole list."""
    from torch_gpubpe.encoding import tokenizer as tokenizer_module
    from torch_gpubpe.encoding.slicing import encode_in_groups, text_groups

    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, 30_000, max_doc_bytes=3_000)]
    docs += ["", "x"]
    groups = text_groups(docs, 10_000)
    assert len(groups) > 3 and [d for _, g in groups for d in g] == docs
    assert [a for a, _ in groups] == [0, *np.cumsum([len(g) for _, g in groups])[:-1]]
    assert text_groups(docs, 10 ** 9) is None and text_groups(["a", 5], 0) is None
    want = [gpt2_tt.encode_ordinary(d) for d in docs]
    got = encode_in_groups(lambda ag: gpt2_tok.submit(ag[1]), groups).tolist()
    assert_same(got, want, "text groups")
    monkeypatch.setattr(tokenizer_module, "GROUP_BYTES", 10_000)  # the call's own groups
    assert_same(gpt2_tok.encode_batch(docs).tolist(), want, "one call in groups")
    got = gpt2_tok.submit(docs, bos_id=7, eos_id=9).result().tolist()
    assert_same(got, [[7, *w, 9] for w in want], "one call in groups, bos and eos")
    bad = len(docs) - 5
    with pytest.raises(InputError, match=f"(item|document) {bad}\\b"):
        gpt2_tok.encode_batch(docs[:bad] + [["not", "text"]] + docs[bad + 1:])
    assert gpt2_tok.encode_batch(docs[:3]).tolist() == want[:3]  # the session goes on
