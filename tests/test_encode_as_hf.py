"""``tok.as_hf()``: a ``transformers.PreTrainedTokenizerFast`` encoding on the GPU gives what
transformers' own fast tokenizer gives on the same ``tokenizer.json`` — calls, padding,
truncation, tensors, ``DataCollatorWithPadding``, ``save_pretrained`` → ``AutoTokenizer`` —
and hands what it does not compute to that backend, counted and said once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from conftest import CORPUS_NAMES, corpus_docs
from test_encode_hf_call import BOS, SEQ, gpt2_json, template
from torch_gpubpe import InputError
from torch_gpubpe.encoding.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")  # (in the [test] extras: never skipped in CI)
pytestmark = pytest.mark.gpu
EOT = "<|endoftext|>"
TEXTS = ["Hello world", f"a{EOT}b 🙂 日本語", "", "  x  \n\n", "It's 12345 ok"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(as_hf of a GPT-2 tokenizer.json with a BOS template, transformers' own on the file)."""
    path = gpt2_json(tmp_path_factory.mktemp("as_hf"), template(BOS + SEQ))
    ours = Tokenizer.from_hf(path).as_hf()
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=path, eos_token=EOT,
                                               clean_up_tokenization_spaces=False)
    for t in (ours, ref):
        t.pad_token = EOT
    return ours, ref


def same(a, b) -> None:
    assert list(a.keys()) == list(b.keys())
    for k in b:
        x, y = a[k], b[k]
        if hasattr(y, "shape"):
            assert type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape, k
            assert (np.asarray(x) == np.asarray(y)).all(), k
        else:
            assert x == y, k


CALLS = [{}, {"add_special_tokens": False}, {"padding": True, "return_tensors": "pt"},
         {"padding": "max_length", "max_length": 40, "truncation": True, "return_tensors": "np"},
         {"truncation": True, "max_length": 5}, {"padding": True, "padding_side": "left",
                                                 "pad_to_multiple_of": 8, "return_length": True},
         {"padding": "longest", "return_attention_mask": False},
         {"split_special_tokens": True}]


@pytest.mark.parametrize("kw", CALLS)
def test_calls_equal_transformers(pair, kw):
    ours, ref = pair
    assert isinstance(ours, transformers.PreTrainedTokenizerFast)
    docs = TEXTS + [d for n in CORPUS_NAMES for d in corpus_docs(n, 4_000, max_doc_bytes=1_500)]
    before = ours.stats["gpu_calls"]
    same(ours(docs, **kw), ref(docs, **kw))
    same(ours(docs[1], **kw), ref(docs[1], **kw))
    assert ours.stats["gpu_calls"] == before + 2  # (the GPU encoded them)


def test_encode_decode_and_special_attributes(pair):
    ours, ref = pair
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text)
        assert ours.decode(ours.encode(text), skip_special_tokens=True) == ref.decode(
            ref.encode(text), skip_special_tokens=True)
    assert ours.batch_decode([ours.encode(t) for t in TEXTS]) == ref.batch_decode(
        [ref.encode(t) for t in TEXTS])
    assert (ours.eos_token, ours.pad_token_id, len(ours), ours.vocab_size) == (
        ref.eos_token, ref.pad_token_id, len(ref), ref.vocab_size)


def test_data_collator_with_padding_gives_the_same_tensors(pair):
    ours, ref = pair
    got = transformers.DataCollatorWithPadding(ours, return_tensors="pt")([ours(t) for t in TEXTS])
    want = transformers.DataCollatorWithPadding(ref, return_tensors="pt")([ref(t) for t in TEXTS])
    same(got, want)


def test_what_the_gpu_does_not_compute_goes_to_the_backend_said_once(pair):
    ours, ref = pair
    before = ours.stats["hf_backend_calls"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            same(ours(TEXTS, return_offsets_mapping=True), ref(TEXTS, return_offsets_mapping=True))
        same(ours(TEXTS[:2], TEXTS[2:4]), ref(TEXTS[:2], TEXTS[2:4]))
    assert ours.stats["hf_backend_calls"] == before + 3
    said = [str(w.message) for w in caught if "backend" in str(w.message)]
    assert sum("return_offsets_mapping" in m for m in said) <= 1


def test_save_pretrained_loads_back_in_auto_tokenizer(pair, tmp_path):
    ours, _ = pair
    ours.save_pretrained(tmp_path)
    back = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert [back.encode(t) for t in TEXTS] == [ours.encode(t) for t in TEXTS]


def test_a_vocab_trained_here_with_a_model_split(tmp_path):
    """A vocab from tiktoken ranks split by a family (no tokenizer.json behind it): the
    backend is its export with that split, and the GPU's ids equal it."""
    from conftest import shared_vocab

    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="cl100k")
    ours = tok.as_hf()
    docs = TEXTS + ["1234567 abc's", "x\r\n\r\n  y"]
    got = ours(docs, add_special_tokens=False)["input_ids"]
    want = [e.ids for e in ours.backend_tokenizer.encode_batch(docs, add_special_tokens=False)]
    assert got == want == tok.encode_batch(docs, allowed_special="all").tolist()


def test_a_split_without_a_tokenizer_json_form_is_refused():
    from conftest import shared_vocab

    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="deepseek-coder")
    with pytest.raises(InputError, match="'deepseek-coder', which the exported files cannot"):
        tok.as_hf()


def test_added_tokens_that_are_not_special_and_short_truncation(tmp_path):
    """``split_special_tokens=True`` still matches added tokens that are not special; a
    ``max_length`` that leaves no room beside the template truncates nothing (as transformers)."""
    import json

    path = gpt2_json(tmp_path, template(BOS + SEQ))
    d = json.loads(open(path, encoding="utf-8").read())
    d["added_tokens"].append({"id": 50257, "content": "[PLAIN]", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": False})
    open(path, "w", encoding="utf-8").write(json.dumps(d))
    ours = Tokenizer.from_hf(path).as_hf()
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=path,
                                               clean_up_tokenization_spaces=False)
    texts = [f"a [PLAIN] b {EOT} c", "x"]
    for kw in ({"split_special_tokens": True}, {}, {"truncation": True, "max_length": 1},
               {"truncation": True, "max_length": 2}, {"truncation": True, "max_length": 0}):
        same(ours(texts, **kw), ref(texts, **kw))


def test_truncation_to_zero_tokens(tmp_path):
    path = gpt2_json(tmp_path, None)   # (no template: max_length=0 leaves no token)
    ours = Tokenizer.from_hf(path).as_hf()
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    kw = {"truncation": True, "max_length": 0}
    assert ours("a b c", **kw)["input_ids"] == ref("a b c", **kw)["input_ids"] == []
