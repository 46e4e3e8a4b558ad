"""The GPU encoder with a regex pre-tokenizer (Tokenizer(pre_tokenizer=...)): ids == greedy
longest match over the words of regex.finditer(pat_str)."""

from __future__ import annotations

import functools

import pytest

from conftest import corpus_docs
from torch_gpubpe import InputError, Vocab
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.core.patterns import FAMILIES, split

pytestmark = pytest.mark.gpu

CORPORA = ["code_cpython_stdlib", "multi_udhr", "multi_emoji", "web_html", "tr_ud_boun"]


@functools.cache
def vocab() -> Vocab:
    docs = [d for name in CORPORA for d in corpus_docs(name, max_bytes=6_000)]
    return Vocab.from_merges(reference.train(docs, vocab_size=600, min_frequency=2))


def greedy_reference(doc, family: str, v: Vocab) -> list[int]:
    """DESIGN.md §4's greedy longest match, word by word, over the regex split."""
    lookup = {}
    for i, tb in enumerate(v.token_bytes[: v.num_tokens] if hasattr(v, "num_tokens") else
                           v.token_bytes):
        lookup.setdefault(tb, i)
    longest = max(map(len, lookup))
    ids = []
    for word in split(doc, family):
        j = 0
        while j < len(word):
            for n in range(min(longest, len(word) - j), 0, -1):
                if word[j : j + n] in lookup:
                    ids.append(lookup[word[j : j + n]])
                    j += n
                    break
    return ids


DOCS = ["I'm  ok 12345 don't 'LL\r\n\r\n  x", "", "a", "١٢٣٤ 😀😀 क्षत्रिय\n\n\t z",
        b"a\xff\xe2\x82b \xed\xa0\x80z", "x" * 9000, " " * 5000 + "y", "7" * 3001]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("max_slice", [None, 4096])
def test_greedy_over_regex_words(family, max_slice):
    v = vocab()
    docs = DOCS + [d for name in CORPORA for d in corpus_docs(name, max_bytes=15_000)]
    tok = Tokenizer(v, pre_tokenizer=family, max_slice_bytes=max_slice)
    got = tok.encode_batch(docs).tolist()
    for k, doc in enumerate(docs):
        assert got[k] == greedy_reference(doc, family, v), f"document {k}"
    if max_slice:
        assert tok._sess.slices > 2  # the sliced path ran


def test_default_is_the_byte_class_rule():
    v = vocab()
    doc = "I'm  ok 12345\tx"
    assert Tokenizer(v).encode(doc) == reference.encode(doc, v.merges)
    assert Tokenizer(v, pre_tokenizer="bytes-classes").encode(doc) == reference.encode(doc, v.merges)


def test_unsupported_pre_tokenizer_is_refused():
    with pytest.raises(InputError, match="cannot be split exactly"):
        Tokenizer(vocab(), pre_tokenizer=r"\w+|\s+")


@pytest.mark.parametrize("family", ["cl100k", "o200k"])
def test_cli_encode_pre_tokenizer(tmp_path, family):
    import gzip
    import json

    import numpy as np

    from torch_gpubpe.cli import main as cli

    docs = DOCS[:4] + corpus_docs("multi_udhr", max_bytes=8_000)
    data = tmp_path / "d.jsonl.gz"
    with gzip.open(data, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d if isinstance(d, str) else d.decode("latin-1")}) + "\n")
    texts = [json.loads(line)["text"] for line in gzip.open(data, "rt", encoding="utf-8")]
    vocab().save(tmp_path / "vocab.json")
    assert cli.main(["encode", "--vocab", str(tmp_path / "vocab.json"), "--data-files", str(data),
                     "--out", str(tmp_path / "enc"), "--pre-tokenizer", family,
                     "--no-progress"]) == 0
    meta = json.loads((tmp_path / "enc" / "meta.json").read_text())
    assert meta["pre_tokenizer"] == family
    ids = np.fromfile(tmp_path / "enc" / "ids.bin", dtype=np.dtype(meta["ids_dtype"]))
    off = np.load(tmp_path / "enc" / "offsets.npy")
    for k, d in enumerate(texts):
        assert ids[off[k] : off[k + 1]].tolist() == greedy_reference(d, family, vocab()), k


@pytest.mark.parametrize("family", ["qwen2", "o200k"])
def test_dataset_keeps_the_pre_tokenizer_in_workers(family):
    import pickle

    from torch_gpubpe.integrations.torch_data import TokenizedDataset

    docs = ["I'm  ok 12345\tx", "don't\r\n\r\n  y", "HelloWORLDFoo DON'T ./\n/x"]
    for arg, kw in ((Tokenizer(vocab(), pre_tokenizer=family), {}),
                    (vocab(), {"pre_tokenizer": family})):
        ds = TokenizedDataset(docs, arg, background=False, **kw)
        ds = pickle.loads(pickle.dumps(ds))  # as a DataLoader worker receives it
        got = [t.tolist() for t in ds]
        assert got == [greedy_reference(d, family, vocab()) for d in docs]
    with pytest.raises(ValueError, match="splits with"):
        TokenizedDataset(docs, Tokenizer(vocab(), pre_tokenizer="gpt2"), pre_tokenizer="qwen2")


@pytest.mark.parametrize("family", ["bytes-classes", "cl100k"])
def test_precompile_makes_the_modules_a_greedy_session_opens_with(family, monkeypatch):
    """precompile(split) creates every shader module a greedy session of that split then asks
    for (on a device of its own, whose caches start empty), and the session encodes as the
    oracle does."""
    import torch_gpubpe.encoding.session as session
    from torch_gpubpe.gpu.device import GPU

    g = GPU()
    asked: list[tuple] = []
    make = g.module

    def module(name, source=None):
        asked.append((name, source))
        return make(name, source)

    monkeypatch.setattr(g, "module", module)
    monkeypatch.setattr(session, "get_gpu", lambda: g)
    session.precompile(family, gpu=g)
    made = set(asked)
    asked.clear()
    v = vocab()
    tok = Tokenizer(v, pre_tokenizer=family)
    docs = corpus_docs("multi_udhr", max_bytes=20_000)
    got = tok.encode_batch(docs)
    encode_modules = {k for k in asked if k[0] == "encode"}
    assert encode_modules and encode_modules <= made
    want = [greedy_reference(d, family, v) if family != "bytes-classes"
            else reference.encode(d, v.merges) for d in docs]
    assert got.tolist() == want
