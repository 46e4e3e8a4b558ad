"""Token offsets (:func:`torch_gpubpe.encoding.offsets.offsets_mapping`) against Hugging Face
``tokenizers``' ``encode(text).offsets`` over the same vocab (GPT-2 and Qwen2, shipped in
tests/data/vocabs, written as a ``tokenizer.json`` with the model's pre-tokenizer): on corpus
samples, multi-byte edge cases, special tokens in the text and around it, trimmed offsets and
random text; bytes documents against the bytes of their tokens.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, TEST_VOCABS, corpus_docs, shared_vocab
from torch_gpubpe import Vocab
from torch_gpubpe.core.export import hf_tokenizer_dict
from torch_gpubpe.core.patterns import HF_PATTERN_OF
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.encoding.offsets import offsets_mapping
from torch_gpubpe.encoding.specials import insert_special_tokens
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.errors import InputError

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.gpu

EOT = "<|endoftext|>"
HSET = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

# Texts whose tokens start or end inside characters of 2, 3 and 4 bytes, and sequences of
# characters (combining marks, ZWJ emoji, flags) that byte-level tokens cut anywhere.
EDGE_TEXTS = [
    "", " ", "a", "😀", "😀😀😀", " 😀", "日本語", " 日本語の文章", "é", "e\u0301", "a\u0308\u0301b",
    "\u0915\u094d\u0937\u093f", "🇹🇷🇩🇪", "👨\u200d👩\u200d👧 family", "\ufffd", "\ufffd\ufffd x",
    "Привет, мир!", "مرحبا بالعالم", "  \n\n\t x  ", "x" * 300 + "😀" * 40, "ǅ\u00a0\u2003z",
    f"ab{EOT}cd", f"{EOT}", f"😀{EOT}日", f" {EOT} ",
]


def byte_level_tokenizer_json(tok: Tokenizer, *, gpt2_form: bool = False,
                              post_processor: dict | None = None) -> str:
    """``tok``'s vocab as a Hugging Face ``tokenizer.json`` that gives the same ids: the
    export's BPE model and added tokens, the model's split (``gpt2_form``: GPT-2's own
    ``ByteLevel(use_regex=True)``, else ``Split`` + ``ByteLevel``), ``post_processor``."""
    d = hf_tokenizer_dict(tok.vocab)
    if gpt2_form:
        d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True}
    else:
        d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
            "Regex": HF_PATTERN_OF[tok.pre_tokenizer]}
    d["post_processor"] = post_processor
    return json.dumps(d, ensure_ascii=False)


@pytest.fixture(scope="module")
def gpt2():
    tok = Tokenizer.from_tiktoken(TEST_VOCABS / "gpt2.tiktoken")
    return tok, tokenizers.Tokenizer.from_str(byte_level_tokenizer_json(tok, gpt2_form=True))


@pytest.fixture(scope="module")
def qwen2():
    tok = Tokenizer.from_tiktoken(shared_vocab("qwen2.tiktoken"))
    return tok, tokenizers.Tokenizer.from_str(byte_level_tokenizer_json(tok))


def assert_offsets_equal_hf(tok, hf, texts):
    """Same ids as Hugging Face (else the offsets could not agree), then the same offsets."""
    enc = tok.encode_batch(texts, allowed_special="all")  # (HF matches added tokens in text)
    got = offsets_mapping(tok, texts, enc)
    assert len(got) == len(texts)
    for k, (text, ids, offs) in enumerate(zip(texts, enc.tolist(), got)):
        want = hf.encode(text)
        assert ids == want.ids, f"document {k}: ids differ from Hugging Face's"
        assert offs.dtype == np.int64 and offs.shape == (len(ids), 2)
        assert [tuple(o) for o in offs.tolist()] == want.offsets, f"document {k}: {text[:80]!r}"


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_gpt2_offsets_equal_hf_on_corpora(gpt2, name):
    assert_offsets_equal_hf(*gpt2, corpus_docs(name, 20_000, max_doc_bytes=4_000))


@pytest.mark.parametrize("name", ["multi_emoji", "multi_udhr", "multi_xquad", "tr_ud_boun"])
def test_qwen2_offsets_equal_hf_on_multilingual_corpora(qwen2, name):
    assert_offsets_equal_hf(*qwen2, corpus_docs(name, 20_000, max_doc_bytes=4_000))


def test_offsets_equal_hf_at_multibyte_boundaries(gpt2, qwen2):
    """Tokens that split a character: each spans the whole character, as in Hugging Face."""
    for tok, hf in (gpt2, qwen2):
        assert_offsets_equal_hf(tok, hf, EDGE_TEXTS)
    tok, _ = gpt2
    enc = tok.encode_batch(["😀", " 日"])
    # the emoji's two tokens both span it; the space merged with 日's first byte spans both
    assert [o.tolist() for o in offsets_mapping(tok, ["😀", " 日"], enc)] == [
        [[0, 1], [0, 1]], [[0, 2], [1, 2], [1, 2]]]


def test_empty_batch_and_empty_documents(gpt2):
    tok, _ = gpt2
    assert offsets_mapping(tok, [], tok.encode_batch([])) == []
    got = offsets_mapping(tok, ["", "", b""], tok.encode_batch(["", "", b""]))
    assert [o.shape for o in got] == [(0, 2)] * 3


def test_lone_surrogates_are_one_character(gpt2):
    """A lone surrogate is encoded as U+FFFD, still one character of the str: the spans equal
    Hugging Face's on the text with it replaced (``tokenizers`` refuses the str itself)."""
    tok, hf = gpt2
    texts = ["ab\ud800 cd", "\udfff", "x\udc00\ud800y 😀\ud83d"]
    enc = tok.encode_batch(texts)
    for text, offs in zip(texts, offsets_mapping(tok, texts, enc)):
        fixed = to_bytes(text).decode()
        assert len(fixed) == len(text)
        assert [tuple(o) for o in offs.tolist()] == hf.encode(fixed).offsets


def test_surrogate_pair_spans_both_code_units(gpt2):
    """A surrogate pair in a str is one character of its UTF-8 (to_bytes): its tokens span
    both code units of the str given, so ``text[start:end]`` still cuts whole characters."""
    tok, hf = gpt2
    text = "a\ud83d\ude00b \ud800\ud83d\ude00"   # a, pair, b, space, lone high, pair
    offs = offsets_mapping(tok, [text], tok.encode_batch([text]))[0].tolist()
    fixed = to_bytes(text).decode()   # "a😀b \ufffd😀": one character per pair
    assert fixed == "a😀b \ufffd😀"
    to_str = [0, 1, 3, 4, 5, 6, 8]    # fixed text's character boundaries in the str
    assert offs == [[to_str[s], to_str[e]] for s, e in hf.encode(fixed).offsets]
    assert [text[s:e] for s, e in offs][1:3] == ["\ud83d\ude00"] * 2


def test_bytes_documents_give_byte_spans(gpt2):
    """Bytes documents (invalid UTF-8 allowed) get byte spans: back to back over the
    document, each the bytes of its token; a str and its UTF-8 as bytes differ in units only."""
    tok, _ = gpt2
    docs = [b"\xff\xfe hi \xc3", "日本 😀".encode(), b"\x80\x80abc\xf0\x9f\x98", b"plain text"]
    enc = tok.encode_batch(docs)
    for doc, ids, offs in zip(docs, enc, offsets_mapping(tok, docs, enc)):
        assert offs[0, 0] == 0 and offs[-1, 1] == len(doc)
        assert (offs[1:, 0] == offs[:-1, 1]).all()
        assert [doc[s:e] for s, e in offs.tolist()] == [tok.vocab.id_to_bytes(int(i))
                                                        for i in ids]
    text = "日本 😀"
    mixed = [text, text.encode()]
    chars, byts = offsets_mapping(tok, mixed, tok.encode_batch(mixed))
    alone = offsets_mapping(tok, mixed[1:], tok.encode_batch(mixed[1:]))[0]
    assert byts.tolist() == alone.tolist()
    # tokens 日[:2] 日[2:] 本[:2] 本[2:] " "+😀[:3] 😀[3:]
    assert chars.tolist() == [[0, 1], [0, 1], [1, 2], [1, 2], [2, 4], [3, 4]]
    assert byts.tolist() == [[0, 2], [2, 3], [3, 5], [5, 6], [6, 10], [10, 11]]


def test_bos_eos_get_zero_spans_as_hf_post_processor(gpt2):
    """Ids put around each document (``submit(bos_id=, eos_id=)``) get ``(0, 0)``, as the
    tokens of Hugging Face's TemplateProcessing; a special spelled in the text spans it."""
    tok, _ = gpt2
    eot = tok.eot_token
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": EOT, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": EOT, "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                "special_tokens": {EOT: {"id": EOT, "ids": [eot], "tokens": [EOT]}}}
    hf = tokenizers.Tokenizer.from_str(byte_level_tokenizer_json(tok, gpt2_form=True,
                                                                 post_processor=template))
    texts = ["hello world", "", "😀 日本"] + corpus_docs("multi_emoji", 4_000)
    for bos, eos in ((eot, eot), (eot, None), (None, eot)):
        enc = tok.submit(texts, bos_id=bos, eos_id=eos).result()
        got = offsets_mapping(tok, texts, enc, bos_id=bos, eos_id=eos)
        keep = slice(0 if bos is not None else 1, None if eos is not None else -1)
        for text, ids, offs in zip(texts, enc.tolist(), got):
            want = hf.encode(text)
            assert ids == want.ids[keep]
            assert [tuple(o) for o in offs.tolist()] == want.offsets[keep], text[:80]
    # specials spelled in the text (allowed_special) beside the ones put around it, as tok(...)
    texts = [f"{EOT}x", f"a{EOT}", EOT, f"😀{EOT}{EOT} 日"]
    be = tok.encode_batch(texts, allowed_special="all")
    enc = BatchEncoding(*insert_special_tokens(be.ids, be.offsets, eot, eot))
    got = offsets_mapping(tok, texts, enc, bos_id=eot, eos_id=eot)
    for text, ids, offs in zip(texts, enc.tolist(), got):
        want = hf.encode(text)
        assert ids == want.ids
        assert [tuple(o) for o in offs.tolist()] == want.offsets, text


def test_bos_eos_must_match_enc(gpt2):
    tok, _ = gpt2
    eot = tok.eot_token
    texts = ["hello world", "x"]
    with pytest.raises(InputError, match="pass bos_id / eos_id"):
        offsets_mapping(tok, texts, tok.submit(texts, bos_id=eot).result())
    with pytest.raises(InputError, match=f"eos_id={eot}: document 0 of enc does not end"):
        offsets_mapping(tok, texts, tok.submit(texts, bos_id=eot).result(), bos_id=eot,
                        eos_id=eot)
    with pytest.raises(InputError, match="document 0 of enc has 1 tokens, fewer than"):
        offsets_mapping(tok, [""], tok.submit([""], bos_id=eot).result(), bos_id=eot,
                        eos_id=eot)


def test_trim_offsets_as_hf_byte_level_post_processor(gpt2):
    """``trim_offsets=True`` cuts the spaces at each end of a span as Hugging Face's
    ``ByteLevel`` post-processor (``trim_offsets``) does; a token of spaces becomes empty."""
    tok, _ = gpt2
    trim = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": True}
    hf = tokenizers.Tokenizer.from_str(byte_level_tokenizer_json(tok, gpt2_form=True,
                                                                 post_processor=trim))
    texts = EDGE_TEXTS + ["hello  world  ", "   ", " a", "a \n b", " 😀  "]
    texts += corpus_docs("en_python_docs", 8_000) + corpus_docs("code_cpython_stdlib", 8_000)
    enc = tok.encode_batch(texts, allowed_special="all")
    got = offsets_mapping(tok, texts, enc, trim_offsets=True)
    for text, ids, offs in zip(texts, enc.tolist(), got):
        want = hf.encode(text)
        assert ids == want.ids
        assert [tuple(o) for o in offs.tolist()] == want.offsets, text[:80]
    assert got[len(EDGE_TEXTS)].tolist()[1] == [6, 6]   # "hello  world": the lone space


@HSET
@given(st.lists(st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60),
    st.text(alphabet="a é日😀\u0301\n" + "\U0001F1F9\U0001F1F7", max_size=40),
    st.sampled_from(["", EOT, f"x{EOT}😀", " \u00a0 "])), max_size=8))
def test_random_text_offsets_equal_hf(gpt2, texts):
    assert_offsets_equal_hf(*gpt2, texts)


@HSET
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_random_bytes_spans_are_the_token_bytes(gpt2, docs):
    tok, _ = gpt2
    enc = tok.encode_batch(docs)
    for doc, ids, offs in zip(docs, enc, offsets_mapping(tok, docs, enc)):
        assert b"".join(doc[s:e] for s, e in offs.tolist()) == doc
        assert [doc[s:e] for s, e in offs.tolist()] == [tok.vocab.id_to_bytes(int(i))
                                                        for i in ids]


def test_enc_of_other_texts_is_refused(gpt2):
    tok, _ = gpt2
    enc = tok.encode_batch(["hello", "world"])
    with pytest.raises(InputError, match="enc holds 2 documents, texts 1"):
        offsets_mapping(tok, ["hello"], enc)
    with pytest.raises(InputError, match="document 1 spell 5 bytes, the document holds 6"):
        offsets_mapping(tok, ["hello", "world!"], enc)
    with pytest.raises(InputError, match="bos_id=0: document 0 of enc does not start"):
        offsets_mapping(tok, ["hello", "world"], enc, bos_id=0)


def test_normalized_vocab_is_refused():
    """NFC (and SentencePiece's Metaspace) change the text before it is split: refused with a
    clear message rather than spans that could differ from Hugging Face's."""
    tok = Tokenizer(Vocab(normalizer="nfc"))
    empty = BatchEncoding(np.zeros(0, np.uint16), np.zeros(2, np.int64))
    with pytest.raises(InputError, match="offsets are not supported for normalized vocab"):
        offsets_mapping(tok, ["é", ""], empty)


def test_docstring_example():
    import doctest

    import torch_gpubpe.encoding.offsets as offsets

    res = doctest.testmod(offsets)
    assert res.attempted >= 3 and res.failed == 0
