"""Tokenizer.from_sentencepiece (a SentencePiece BPE ``tokenizer.model``) == SentencePiece's
own ids, on models trained here by the ``sentencepiece`` package (the oracle)."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe import VocabFormatError
from torch_gpubpe.core.reference import to_bytes
from torch_gpubpe.encoding.tokenizer import Tokenizer

spm = pytest.importorskip("sentencepiece")  # (in the [test] extras: never skipped in CI)
pytestmark = pytest.mark.gpu

LINES = [ln for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=40_000)
         for ln in d.split("\n") if ln.strip()]


def train(tmp_path, name="m", **kw) -> tuple[str, object]:
    """A model file trained on the corpora, and its SentencePieceProcessor."""
    opts = dict(model_type="bpe", vocab_size=1500, byte_fallback=True,
                character_coverage=0.9995, normalization_rule_name="identity",
                remove_extra_whitespaces=False, minloglevel=2)
    opts.update(kw)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(LINES), model_writer=buf, **opts)
    path = tmp_path / f"{name}.model"
    path.write_bytes(buf.getvalue())
    return str(path), spm.SentencePieceProcessor(model_proto=buf.getvalue())


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path, sp = train(tmp_path_factory.mktemp("spm"), split_digits=True)
    return Tokenizer.from_sentencepiece(path), sp


EDGES = ["", " ", "  a  b ", "héllo 😀 中文", "\x00\x01", "a\nb\r\n", "Ǳ ﬁ ﬃ", "12345 678",
         "\u2581x \u2581", "<s> </s> <unk>", "\ud800x"]


def test_ids_equal_sentencepiece_on_the_corpora(model):
    tok, sp = model
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=30_000)] + EDGES
    got = tok.encode_batch(docs).tolist()
    for d, g in zip(docs, got):  # (a lone surrogate is U+FFFD, DESIGN.md §1)
        assert g == sp.encode(to_bytes(d).decode()), repr(d[:80])
    assert any(sp.is_byte(x) for g in got for x in g)  # byte fallback was exercised


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet="ab cd\n\t😀中é\u2581 ") | st.text(), min_size=1, max_size=20))
def test_ids_equal_sentencepiece_on_any_text(model, docs):
    tok, sp = model
    docs = [d.encode("utf-8", "replace").decode() for d in docs]  # (SentencePiece takes UTF-8)
    assert tok.encode_batch(docs).tolist() == [sp.encode(d) for d in docs]


def test_without_dummy_prefix(tmp_path):
    path, sp = train(tmp_path, add_dummy_prefix=False)
    docs = ["hello world", " two  spaces", "x"]
    assert Tokenizer.from_sentencepiece(path).encode_batch(docs).tolist() == sp.encode(docs)


def test_decode_gives_the_text_back(model):
    tok, sp = model
    text = "Hello  wörld 😀\nnext"
    ids = tok.encode(text)
    assert sp.decode(ids) == text


@pytest.mark.parametrize("kw, match", [
    (dict(model_type="unigram"), "not BPE"),
    (dict(byte_fallback=False), "without byte fallback"),
    (dict(normalization_rule_name="nmt_nfkc"), "normalization rule"),
    (dict(remove_extra_whitespaces=True), "remove_extra_whitespaces"),
    (dict(user_defined_symbols=["<tool>"]), "user-defined"),
])
def test_models_it_cannot_encode_exactly_are_refused_by_name(tmp_path, kw, match):
    path, _ = train(tmp_path, **kw)
    with pytest.raises(VocabFormatError, match=match):
        Tokenizer.from_sentencepiece(path)


def test_not_a_model_file(tmp_path):
    p = tmp_path / "x.model"
    p.write_bytes(b"\xff\xfe not a protobuf")
    with pytest.raises(VocabFormatError, match="not a SentencePiece model"):
        Tokenizer.from_sentencepiece(p)


def test_a_model_file_is_a_vocab_file_the_cli_reads(tmp_path):
    """``Vocab.load`` (and so ``--vocab`` of the CLI) reads a ``.model``, which implies no
    split."""
    from torch_gpubpe.cli.common import implied_pre_tokenizer
    from torch_gpubpe.core.vocab import Vocab

    path, sp = train(tmp_path)
    tok = Tokenizer(Vocab.load(path), pre_tokenizer=implied_pre_tokenizer(path))
    docs = ["hello world", "  x\ny  ", "中文 😀"]
    assert implied_pre_tokenizer(path) == "whole"
    assert tok.encode_batch(docs).tolist() == sp.encode(docs)


def test_a_model_files_path_gives_no_split(tmp_path):
    path, sp = train(tmp_path)
    tok = Tokenizer(path)
    assert tok.pre_tokenizer == "whole"
    assert tok.encode_batch(["a  b c", "héllo wörld"]).tolist() == sp.encode(["a  b c",
                                                                                "héllo wörld"])


def test_documents_are_cut_into_words_only_where_the_ids_stay_the_same(tmp_path, model):
    """A vocab whose pieces never join a character to a following ``▁`` is encoded as words
    (``gpu_split == "metaspace-words"``); one trained across whitespace (pieces such as
    ``a▁k``) keeps each document whole and says so once. Both give SentencePiece's ids, on
    documents longer than the long-word threshold too."""
    import warnings

    tok, sp = model
    assert tok.gpu_split == "metaspace-words"
    path, sp_joined = train(tmp_path, "joined", split_by_whitespace=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        joined = Tokenizer.from_sentencepiece(path)
    assert joined.gpu_split == "whole"
    assert any("one document per word" in str(w.message) for w in caught)
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=20_000)] + EDGES
    docs.append(" ".join(docs)[:300_000])
    for t, p in ((tok, sp), (joined, sp_joined)):
        for d, g in zip(docs, t.encode_batch(docs).tolist()):
            assert g == p.encode(to_bytes(d).decode()), repr(d[:80])


def test_a_call_above_one_slice_is_normalized_once(tmp_path):
    """Documents in groups (a call above the slice limit): each normalized once (one ``▁``
    prepended), SentencePiece's ids."""
    path, sp = train(tmp_path)
    small = Tokenizer.from_sentencepiece(path, max_slice_bytes=8_000)
    docs = [d for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=20_000)][:60] + EDGES
    assert small.encode_batch(docs).tolist() == [sp.encode(to_bytes(d).decode()) for d in docs]
