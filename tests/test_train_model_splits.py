"""train(pre_tokenizer=...) with the regex splits models use: words counted on the GPU from the
GPU pre-tokenizer's word starts (and by ``regex`` on the CPU), merges equal to rustbpe's with the
same pattern, and the split recorded in the vocab, its files and its exports."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe import InputError, Tokenizer, Vocab, train
from torch_gpubpe.core.export import export_all
from torch_gpubpe.core.patterns import PATTERN_OF, split
from torch_gpubpe.training.counting import count_words

pytestmark = pytest.mark.gpu
FAMILIES = ("gpt2", "cl100k", "o200k", "nanochat")
DOCS = [d for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=25_000)] + [
    "don't  stop\r\n", "x" * 600 + " y", "1234567 89", ""]


def rustbpe_tokens(docs, vocab_size, pattern) -> list[bytes]:
    import rustbpe

    r = rustbpe.Tokenizer()
    r.train_from_iterator(iter(docs), vocab_size, pattern=pattern)
    return [bytes(t) for t, _ in sorted(r.get_mergeable_ranks(), key=lambda x: x[1])]


@pytest.mark.parametrize("count_on", ["gpu", "cpu"])
@pytest.mark.parametrize("family", FAMILIES)
def test_merges_equal_rustbpe_with_the_same_pattern(family, count_on):
    v = train(DOCS, 1200, pre_tokenizer=family, count_on=count_on, min_frequency=1)
    assert v.pre_tokenizer == family
    assert list(v.token_bytes[:v.num_tokens]) == rustbpe_tokens(DOCS, 1200, PATTERN_OF[family])


@pytest.mark.parametrize("family", FAMILIES + ("qwen2", "llama3"))
def test_words_counted_are_regex_findall(family):
    want = Counter(w for d in DOCS for w in split(d, family))
    for count_on in ("gpu", "cpu"):
        got = count_words(DOCS, count_on=count_on, pre_tokenizer=family).to_dict()
        assert got == dict(want), count_on


@pytest.fixture(scope="module")
def cl100k_vocab():
    return train(DOCS, 1000, pre_tokenizer="cl100k", special_tokens=["<|endoftext|>"])


@pytest.fixture(scope="module", params=FAMILIES)
def trained(request):
    return train(DOCS, 1000, pre_tokenizer=request.param, special_tokens=["<|endoftext|>"])


def test_the_vocab_file_keeps_the_split(cl100k_vocab, tmp_path):
    cl100k_vocab.save(tmp_path / "v.json")
    back = Vocab.load(tmp_path / "v.json")
    assert back == cl100k_vocab and back.pre_tokenizer == "cl100k"
    assert Tokenizer(back).pre_tokenizer == "cl100k"
    with pytest.raises(InputError, match="trained with 'cl100k'"):
        Tokenizer(back, pre_tokenizer="gpt2")


def test_exports_give_the_gpu_ids(trained, tmp_path):
    """tokenizer.json in HF tokenizers and transformers, tokenizer.tiktoken (+ sidecar) in
    tiktoken and here: the GPU's merge-order ids."""
    import tiktoken
    import tokenizers
    from tiktoken.load import load_tiktoken_bpe
    from transformers import PreTrainedTokenizerFast

    v = trained.with_mode("bpe")
    paths = export_all(v, tmp_path)
    docs = DOCS[::3] + ["a<|endoftext|>b"]
    ours = Tokenizer(v).encode_batch(docs).tolist()
    hf = tokenizers.Tokenizer.from_file(str(paths["hf"]))
    assert [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)] == [
        Tokenizer(v).encode(d, allowed_special="all") for d in docs]
    fast = PreTrainedTokenizerFast(tokenizer_file=str(paths["hf"]))
    assert fast(docs[:-1], add_special_tokens=False)["input_ids"] == ours[:-1]
    side = json.loads((tmp_path / "tokenizer.tiktoken.json").read_text())
    assert side["pattern"] == PATTERN_OF[v.pre_tokenizer]
    enc = tiktoken.Encoding("t", pat_str=side["pattern"], special_tokens=side["special_tokens"],
                            mergeable_ranks=load_tiktoken_bpe(str(paths["tiktoken"])))
    assert enc.encode_ordinary_batch(docs) == ours
    assert Tokenizer.from_tiktoken(paths["tiktoken"]).encode_batch(docs).tolist() == ours


@pytest.mark.parametrize("bad", ["deepseek-llm", "whole", r"\w+"])
def test_splits_without_a_pat_str_are_refused_by_name(bad):
    with pytest.raises(InputError, match="pre_tokenizer|cannot be split"):
        train(DOCS[:3], 300, pre_tokenizer=bad)


def test_train_cli_takes_the_split(tmp_path):
    """`train --pre-tokenizer cl100k`: the API's merges; the vocab and tiktoken sidecar record
    the split; `encode --vocab` then uses it."""
    import subprocess
    import sys

    from conftest import subprocess_env

    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "torch_gpubpe", "train", "--data-files", str(src),
                        "--vocab-size", "700", "--pre-tokenizer", "cl100k", "--out",
                        str(tmp_path / "v"), "--no-progress"], env=subprocess_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    v = Vocab.load(tmp_path / "v")
    assert v.pre_tokenizer == "cl100k"
    api = train(DOCS, 700, pre_tokenizer="cl100k", special_tokens=["<|endoftext|>"])
    assert v.merges == api.merges


def test_counts_files_carry_the_split(tmp_path):
    """`count_to_file(pre_tokenizer=)` records the split; merging files of different splits is
    refused; training from the file gives train()'s merges and records the split."""
    from torch_gpubpe.training.counts_file import (count_to_file, merge_counts,
                                                   train_from_counts_file)

    a = count_to_file(DOCS[::2], tmp_path / "a.parquet", pre_tokenizer="cl100k")
    b = count_to_file(DOCS[1::2], tmp_path / "b.parquet", pre_tokenizer="cl100k")
    c = count_to_file(DOCS[1::2], tmp_path / "c.parquet")
    merged = merge_counts([a, b], tmp_path / "ab.parquet")
    v = train_from_counts_file(merged, 800, special_tokens=["<|endoftext|>"])
    assert v.pre_tokenizer == "cl100k"
    assert v.merges == train(DOCS, 800, pre_tokenizer="cl100k",
                             special_tokens=["<|endoftext|>"]).merges
    with pytest.raises(Exception, match="pre-tokenizer|pre_tokenizer"):
        merge_counts([a, c], tmp_path / "ac.parquet")


def test_a_model_files_path_gives_its_split(trained, tmp_path):
    """``Tokenizer(path)`` of an exported ``tokenizer.json`` or ``tokenizer.tiktoken`` (with its
    sidecar) splits as the file says, as ``from_hf`` / ``from_tiktoken`` do."""
    v = trained.with_mode("bpe")
    paths = export_all(v, tmp_path)
    want = Tokenizer(v).encode_batch(DOCS[::4]).tolist()
    for p in (paths["hf"], paths["tiktoken"]):
        tok = Tokenizer(p)
        assert tok.pre_tokenizer == v.pre_tokenizer, p
        assert tok.encode_batch(DOCS[::4]).tolist() == want, p


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet="ab 1\n\t'.中😀é") | st.text(), min_size=1, max_size=12))
def test_gpu_word_counts_on_any_text_and_boundary_sizes(docs):
    """Random text, plus runs that end at thread-chunk and workgroup-block edges (32, 8192
    bytes): the GPU's regex word counts equal ``regex``'s."""
    docs = docs + ["x" * 31 + " 12345", " " * 8191 + "a", "1" * 8193, "ab " * 2731]
    for family in ("cl100k", "nanochat"):
        want = Counter(w for d in docs for w in split(d, family))
        assert count_words(docs, pre_tokenizer=family).to_dict() == dict(want), family
