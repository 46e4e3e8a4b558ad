"""Real vocabularies end to end on the GPU: GPT-2's and Qwen2's tiktoken files with their own
split patterns give tiktoken's ids, token for token, on every corpus sample."""

from __future__ import annotations

import base64
import functools
import json

import pytest

from conftest import CORPUS_NAMES, benchmark_module, corpus_docs, shared_vocab
from torch_gpubpe import InputError
from torch_gpubpe.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.gpu


@functools.cache
def tiktoken_encoding(name: str):
    import tiktoken

    path = shared_vocab(f"{name}.tiktoken")
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(path))}
    meta = json.loads(open(str(path) + ".json").read())
    return tiktoken.Encoding(name, pat_str=meta["pattern"], mergeable_ranks=ranks,
                             special_tokens={})


@functools.cache
def gpu_tokenizer(name: str, **kw) -> Tokenizer:
    return Tokenizer.from_tiktoken(shared_vocab(f"{name}.tiktoken"), **kw)


EXTRA = ["I'm  ok 12345 don't 'LL\r\n\r\n  x", "", "١٢٣٤ 😀😀 क्षत्रिय\n\n\t z  ", " " * 300 + "y",
         "7" * 1001, "\n\n\n", "İstanbul'da 'S 'll\t'Re"]


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_ids_equal_tiktoken(name, corpus):
    docs = corpus_docs(corpus, max_bytes=30_000) + EXTRA
    got = gpu_tokenizer(name).encode_batch(docs).tolist()
    enc = tiktoken_encoding(name)
    for k, d in enumerate(docs):
        assert got[k] == enc.encode_ordinary(d), f"{corpus} document {k}"


@pytest.mark.parametrize("mode", ["bpe", "greedy"])
def test_profile_repeat_times_every_repetition(mode):
    """The benchmarks' timing hook (benchmarks/_kernel_clock.py): with the split computed on
    the GPU in the same submit, each of ``profile_repeat`` repetitions (pre-tokenizer and walk)
    is timed, and the ids are unchanged (bpe: tiktoken's; greedy: those of one repetition)."""
    import numpy as np

    clock = benchmark_module("_kernel_clock").ClockTokenizer
    tok = clock.from_tiktoken(shared_vocab("gpt2.tiktoken"), profile=True, mode=mode)
    docs = corpus_docs("multi_udhr", max_bytes=20_000) + EXTRA
    enc = [d.encode() for d in docs]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in enc])]).astype(np.int64)
    data = np.frombuffer(b"".join(enc), np.uint8)
    once = tok.submit_packed(data, offsets).result().tolist()
    sess = tok._session()
    sess.profile_repeat = 3
    try:
        got = tok.submit_packed(data, offsets).result().tolist()
    finally:
        sess.profile_repeat = 1
    assert got == once
    if mode == "bpe":
        assert got == [tiktoken_encoding("gpt2").encode_ordinary(d) for d in docs]
    if sess.profile:
        reps = sess.rep_pass_us
        assert len(reps) == 3 and reps[-1] == tok.last_pass_us
        assert all(set(r) == set(reps[-1]) and min(r.values()) > 0 for r in reps)
        assert "pt_local" in reps[0] and "trie_tokenizer_chunked" in reps[0]


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_ids_equal_tiktoken_sliced(name):
    """Batches above the slice limit: the split is computed first, the cuts follow it."""
    docs = corpus_docs("code_cpython_stdlib", max_bytes=40_000) + EXTRA
    tok = Tokenizer.from_tiktoken(shared_vocab(f"{name}.tiktoken"), max_slice_bytes=8192)
    got = tok.encode_batch(docs).tolist()
    enc = tiktoken_encoding(name)
    assert tok._sess.slices > 3
    for k, d in enumerate(docs):
        assert got[k] == enc.encode_ordinary(d), f"document {k}"


def test_pattern_is_named_or_refused(tmp_path):
    src = shared_vocab("gpt2.tiktoken")
    (tmp_path / "v.tiktoken").write_bytes(src.read_bytes())
    with pytest.raises(InputError, match="no split pattern"):
        Tokenizer.from_tiktoken(tmp_path / "v.tiktoken")
    with pytest.raises(InputError, match="cannot be split exactly"):
        Tokenizer.from_tiktoken(tmp_path / "v.tiktoken", pattern=r"\w+|\s+")
    assert Tokenizer.from_tiktoken(tmp_path / "v.tiktoken", pattern="o200k_base").pre_tokenizer \
        == "o200k"
    tok = Tokenizer.from_tiktoken(tmp_path / "v.tiktoken", pattern="gpt2")
    assert tok.pre_tokenizer == "gpt2" and tok.mode == "bpe"


def test_hugging_face_tokenizer_json(tmp_path):
    """GPT-2 as a tokenizer.json (ByteLevel with its regex): the GPU ids equal HF tokenizers'."""
    from tokenizers import Tokenizer as HFTokenizer

    from torch_gpubpe.core.export import hf_tokenizer_dict

    d = hf_tokenizer_dict(gpu_tokenizer("gpt2").vocab)
    d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": True}
    (tmp_path / "tokenizer.json").write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    tok = Tokenizer.from_hf(tmp_path)
    assert tok.pre_tokenizer == "gpt2"
    hf = HFTokenizer.from_file(str(tmp_path / "tokenizer.json"))
    docs = corpus_docs("web_html", max_bytes=20_000) + EXTRA
    got = tok.encode_batch(docs).tolist()
    for k, doc in enumerate(docs):
        assert got[k] == hf.encode(doc, add_special_tokens=False).ids == \
            tiktoken_encoding("gpt2").encode_ordinary(doc), k


PIECES = ["'s", "'S", "'ll", "'Ve", "'", " ", "  ", "\t", "\n", "\r\n", "\u3000", "\x85", "7",
          "12345", "\u0663", "a", "the", " the", "Zz", "ı", "ſ", "\u0301", "\x00", ".", "..",
          "😀", "ก", "中文", "K", "é", "İ"]


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_ids_equal_tiktoken_on_random_text(name):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    text = st.lists(st.sampled_from(PIECES) | st.text(max_size=3), max_size=50).map("".join)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(text, min_size=1, max_size=6))
    def check(docs):
        got = gpu_tokenizer(name).encode_batch(docs).tolist()
        assert got == [tiktoken_encoding(name).encode_ordinary(d) for d in docs]

    check()


# -- o200k_base: its pattern with a vocabulary trained here (o200k's ranks are not offline) -----

@functools.cache
def o200k_vocab_file(tmp: str) -> str:
    """A merge-order vocab trained on o200k words of every corpus, written as a tiktoken file
    with a sidecar naming o200k's pat_str (as a tiktoken file of o200k would carry it)."""
    from collections import Counter
    from pathlib import Path

    from torch_gpubpe import Vocab
    from torch_gpubpe.core import reference
    from torch_gpubpe.core.export import save_tiktoken
    from torch_gpubpe.core.patterns import O200K_PATTERN, split

    counts = Counter(w for name in CORPUS_NAMES for d in corpus_docs(name, max_bytes=6_000)
                     for w in split(d, "o200k"))
    merges = reference.train_from_word_counts(counts, vocab_size=2_000, min_frequency=2)
    path = save_tiktoken(Vocab.from_merges(merges, mode="bpe"),
                         Path(tmp) / "o200k_trained.tiktoken")
    Path(str(path) + ".json").write_text(json.dumps({"pattern": O200K_PATTERN}))
    return str(path)


@pytest.fixture(scope="module")
def o200k(tmp_path_factory):
    """(GPU tokenizer from the file, the tiktoken oracle over the same ranks and pat_str)."""
    import tiktoken

    from torch_gpubpe.core.patterns import O200K_PATTERN

    path = o200k_vocab_file(str(tmp_path_factory.mktemp("o200k")))
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(path))}
    tok = Tokenizer.from_tiktoken(path)
    assert tok.pre_tokenizer == "o200k" and tok.mode == "bpe"
    enc = tiktoken.Encoding("o200k_trained", pat_str=O200K_PATTERN, mergeable_ranks=ranks,
                            special_tokens={})
    return tok, enc


O200K_EXTRA = EXTRA + ["HelloWORLDFoo DON'T don'T 'S X'S ǅungla", "a/b .//\n//x ./\r\n/\n.",
                       "A中B A中B'S 中A'B \u0301AB cd\u0301E", "camelCaseXMLHttpRequest"]


@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_o200k_ids_equal_tiktoken(o200k, corpus):
    tok, enc = o200k
    docs = corpus_docs(corpus, max_bytes=30_000) + O200K_EXTRA
    got = tok.encode_batch(docs).tolist()
    for k, d in enumerate(docs):
        assert got[k] == enc.encode_ordinary(d), f"{corpus} document {k}"


def test_o200k_ids_equal_tiktoken_sliced(o200k):
    tok, enc = o200k
    sliced = Tokenizer(tok.vocab, pre_tokenizer="o200k", max_slice_bytes=8192)
    docs = corpus_docs("code_cpython_stdlib", max_bytes=40_000) + O200K_EXTRA
    got = sliced.encode_batch(docs).tolist()
    assert sliced._sess.slices > 3
    for k, d in enumerate(docs):
        assert got[k] == enc.encode_ordinary(d), f"document {k}"


def test_o200k_ids_equal_tiktoken_on_random_text(o200k):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    tok, enc = o200k
    pieces = PIECES + ["HelloWORLDFoo", "ǅ", "DON'T", "A", "中", "ʰ", "/", "\u0903", "ΣΑΣ"]
    text = st.lists(st.sampled_from(pieces) | st.text(max_size=3), max_size=50).map("".join)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(text, min_size=1, max_size=6))
    def check(docs):
        assert tok.encode_batch(docs).tolist() == [enc.encode_ordinary(d) for d in docs]

    check()
