"""Hugging Face tokenizer.json and tiktoken export (torch_gpubpe.core.export).

The exported tokenizer.json must encode every text to exactly this project's ids (DESIGN.md §4,
greedy longest match; reference.encode is the oracle the GPU encoder is tested against), on a
sample of every real corpus and on random text.
"""

from __future__ import annotations

import base64
import json

import pytest
import tokenizers
from conftest import CORPUS_NAMES, corpus_docs
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_gpubpe import UnsupportedVocabError, Vocab
from torch_gpubpe.core import reference
from torch_gpubpe.core.export import (
    MAX_INPUT_CHARS_PER_WORD,
    byte_level_strings,
    bytes_to_unicode,
    export_all,
    hf_tokenizer_json,
    hf_vocab,
    save_hf_tokenizer,
    save_tiktoken,
    tiktoken_encoding,
    tiktoken_ranks,
)

EOT = "<|endoftext|>"


def _hf(vocab: Vocab) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_str(hf_tokenizer_json(vocab))


@pytest.fixture(scope="module")
def mixed():
    """A vocab trained (reference oracle, DESIGN.md §3) on a slice of every corpus, plus
    held-out test documents of every corpus."""
    train_docs, test_docs = [], {}
    for name in CORPUS_NAMES:
        docs = corpus_docs(name, max_bytes=24_000, max_doc_bytes=6_000)
        train_docs += docs[0::2]
        test_docs[name] = docs[1::2] or docs
    merges = reference.train(train_docs, vocab_size=1200)
    vocab = Vocab.from_merges(merges, (EOT, "<|pad|>"))
    return vocab, test_docs


def _reference_ids(vocab: Vocab, texts: list[str]) -> list[list[int]]:
    return reference.encode_batch(texts, vocab.merges)


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_hf_ids_equal_reference_on_every_corpus(mixed, name):
    vocab, test_docs = mixed
    tok = _hf(vocab)
    docs = test_docs[name]
    want = _reference_ids(vocab, docs)
    got = [e.ids for e in tok.encode_batch(docs)]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{name} document {k}: first difference at token {_first_diff(g, w)}"
    for d, ids in zip(docs, got):
        assert tok.decode(ids, skip_special_tokens=False) == d


def _first_diff(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.gpu
def test_hf_ids_equal_gpu_encoder(mixed):
    """Against the GPU encoder itself (torch_gpubpe.encoding.tokenizer.Tokenizer)."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    vocab, test_docs = mixed
    docs = [d for docs in test_docs.values() for d in docs[:3]]
    enc = Tokenizer(vocab).encode_batch(docs)
    tok = _hf(vocab)
    for k, (d, e) in enumerate(zip(docs, tok.encode_batch(docs))):
        gpu = enc.ids[enc.offsets[k] : enc.offsets[k + 1]].tolist()
        assert e.ids == gpu, f"document {k}"


_ALPHABET = st.sampled_from(
    list("aAzZ09 \t\n\r\x0b\x0c\x00\x1f!/:@[`{~\x7f")
    + ["ı", "ş", "İ", "é", "中", "😀", "\u00a0", "\u2028", "\ufeff", "  ", "   "]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_hf_ids_equal_reference_on_random_text(mixed, text):
    vocab, _ = mixed
    tok = _hf(vocab)
    ids = tok.encode(text).ids
    assert ids == reference.encode(text, vocab.merges)
    assert tok.decode(ids) == text


def test_long_words_and_space_runs():
    """WordPiece's default max_input_chars_per_word (100) would give the unknown token."""
    vocab = Vocab.from_merges(reference.train(["a" * 50, " " * 40, "ab" * 30], 270, 1))
    tok = _hf(vocab)
    for text in ["a" * 5000, " " * 3000 + "x", "ab" * 2000, "x" + "\n" * 1000]:
        assert tok.encode(text).ids == reference.encode(text, vocab.merges)
    assert json.loads(hf_tokenizer_json(vocab))["model"]["max_input_chars_per_word"] == (
        MAX_INPUT_CHARS_PER_WORD
    )


def test_special_tokens_hf_matches_them_in_text_ours_does_not(mixed):
    vocab, _ = mixed
    eot = vocab.token_to_id(EOT)
    tok = _hf(vocab)
    text = f"Merhaba dünya.{EOT}Hello<|pad|> x"
    ours = reference.encode(text, vocab.merges)
    assert eot not in ours  # DESIGN.md §1: encode never emits a special id
    # Hugging Face's default: the spelling in text becomes the special id.
    assert tok.encode(text).ids.count(eot) == 1
    assert tok.encode(text).ids != ours
    # encode_special_tokens=True (transformers: split_special_tokens=True): identical ids.
    tok.encode_special_tokens = True
    assert tok.encode(text).ids == ours
    # special ids decode to their spelling; skip_special_tokens drops them
    assert tok.decode([eot], skip_special_tokens=False) == EOT
    assert tok.token_to_id("<|pad|>") == vocab.token_to_id("<|pad|>")
    assert tok.get_vocab_size() == len(vocab)


def test_duplicate_spellings_keep_smallest_id():
    # 257 = "aaa" = (aa, a) and 258 = "aaa" = (a, aa): two ids, same bytes
    vocab = Vocab.from_merges([(97, 97), (256, 97), (97, 256)], (EOT,))
    assert vocab.token_bytes[257] == vocab.token_bytes[258] == b"aaa"
    tok = _hf(vocab)
    for text in ["aaa", "aaaa", " aaaaaaa", "a"]:
        assert tok.encode(text).ids == reference.encode(text, vocab.merges)
    assert 258 not in tok.encode("aaa aaa").ids
    assert tok.get_vocab_size() == len(vocab)  # the id space stays dense
    assert sorted(hf_vocab(vocab).values()) == list(range(vocab.num_tokens))
    assert tok.token_to_id(EOT) == vocab.token_to_id(EOT)


def test_special_token_spelled_like_a_vocab_token_is_refused():
    vocab = Vocab.from_merges([(104, 105)], ("hi",))
    with pytest.raises(ValueError, match="'hi'.*spelled like an ordinary token"):
        hf_tokenizer_json(vocab)


def test_byte_level_alphabet_is_gpt2():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
    from tokenizers.pre_tokenizers import ByteLevel

    assert set(table.values()) == set(ByteLevel.alphabet())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=12), max_size=40))
def test_byte_level_strings_spell_each_byte_in_the_alphabet(tokens):
    """Each token's string (all translated at once) is its bytes, one alphabet character
    each, in order: the spelling a per-byte lookup gives."""
    table = bytes_to_unicode()
    assert byte_level_strings(tokens) == ["".join(table[b] for b in t) for t in tokens]


def test_save_and_load_from_file(tmp_path, mixed):
    vocab, test_docs = mixed
    path = save_hf_tokenizer(vocab, tmp_path / "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(str(path))
    docs = test_docs[CORPUS_NAMES[0]][:3]
    assert [e.ids for e in tok.encode_batch(docs)] == _reference_ids(vocab, docs)


def test_export_all_files(tmp_path, mixed):
    vocab, _ = mixed
    paths = export_all(vocab, tmp_path / "out")
    assert {p.name for p in paths.values()} == {
        "vocab.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.tiktoken",
        "tokenizer.tiktoken.json"}
    assert {p.name for p in (tmp_path / "out").iterdir()} == {p.name for p in paths.values()}
    assert Vocab.load(paths["vocab"]) == vocab
    cfg = json.loads(paths["hf_config"].read_text())
    assert cfg["eos_token"] == EOT and cfg["clean_up_tokenization_spaces"] is False


def test_tiktoken_file_and_encoding(tmp_path, mixed):
    """The file loads in tiktoken with the vocab's ranks; decode gives the text back. Ids may
    differ from ours (merge-order BPE vs greedy longest match), so they are not compared."""
    from tiktoken.load import load_tiktoken_bpe

    vocab, test_docs = mixed
    path = save_tiktoken(vocab, tmp_path / "v.tiktoken")
    ranks = load_tiktoken_bpe(str(path))
    assert ranks == tiktoken_ranks(vocab)
    assert len(ranks) == vocab.num_tokens
    first = path.read_text().splitlines()[0].split()
    assert base64.b64decode(first[0]) == b"\x00" and first[1] == "0"
    enc = tiktoken_encoding(vocab)
    for docs in test_docs.values():
        for d in docs[:2]:
            ids = enc.encode_ordinary(d)
            assert enc.decode_bytes(ids) == d.encode()
            assert max(ids, default=0) < vocab.num_tokens
    assert enc.encode(EOT, allowed_special="all") == [vocab.token_to_id(EOT)]


def test_transformers_fast_tokenizer(tmp_path, mixed):
    """transformers.PreTrainedTokenizerFast loads the file with the same ids (transformers is a
    test extra)."""
    vocab, test_docs = mixed
    paths = export_all(vocab, tmp_path / "hf")
    docs = [d for docs in test_docs.values() for d in docs[:2]]
    want = _reference_ids(vocab, docs)
    tok = tokenizers.Tokenizer.from_file(str(paths["hf"]))
    assert [e.ids for e in tok.encode_batch(docs)] == want
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_file=str(paths["hf"]),
                                   clean_up_tokenization_spaces=False)
    assert [fast(d, add_special_tokens=False)["input_ids"] for d in docs] == want
    assert fast.decode(want[0]) == docs[0]
    text = f"a{EOT}b"
    split = PreTrainedTokenizerFast(tokenizer_file=str(paths["hf"]), split_special_tokens=True)
    ours = reference.encode(text, vocab.merges)
    assert split(text, add_special_tokens=False)["input_ids"] == ours
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert auto(docs[0], add_special_tokens=False)["input_ids"] == want[0]
    assert auto.eos_token_id == vocab.token_to_id(EOT)


def test_docstring_example():
    import doctest

    import torch_gpubpe.core.export as export

    res = doctest.testmod(export)
    assert res.attempted >= 3 and res.failed == 0


def test_lone_surrogates_need_replacing_for_hf(mixed):
    vocab, _ = mixed
    tok = _hf(vocab)
    text = "ab\ud800 cd"
    with pytest.raises(TypeError):
        tok.encode(text)
    fixed = reference.to_bytes(text).decode()
    assert fixed == "ab\ufffd cd"
    assert tok.encode(fixed).ids == reference.encode(text, vocab.merges)


def test_save_into_an_existing_folder(tmp_path, mixed):
    vocab, test_docs = mixed
    p = save_hf_tokenizer(vocab, tmp_path)
    assert p == tmp_path / "tokenizer.json"
    doc = next(iter(test_docs.values()))[0]
    assert tokenizers.Tokenizer.from_file(str(p)).encode(doc).ids == _reference_ids(vocab, [doc])[0]
    assert save_tiktoken(vocab, tmp_path) == tmp_path / "tokenizer.tiktoken"


def test_config_names_the_pad_token(tmp_path):
    """A ``<|pad|>`` special token becomes ``pad_token`` of the exported config."""
    from transformers import AutoTokenizer

    vocab = Vocab.from_merges([(97, 98)], ["<|endoftext|>", "<|pad|>"])
    export_all(vocab, tmp_path)
    auto = AutoTokenizer.from_pretrained(str(tmp_path))
    assert auto.pad_token == "<|pad|>" and auto.pad_token_id == vocab.token_to_id("<|pad|>")
    assert auto("ab<|pad|>", padding=False)["input_ids"] == [256, vocab.token_to_id("<|pad|>")]


def test_tiktoken_export_loads_back_without_naming_its_split(tmp_path, mixed):
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    vocab, test_docs = mixed
    v = vocab.with_mode("bpe")
    paths = export_all(v, tmp_path)
    docs = [d for docs in test_docs.values() for d in docs[:2]]
    back = Tokenizer.from_tiktoken(paths["tiktoken"])
    assert back.pre_tokenizer == "bytes-classes"
    assert back.encode_batch(docs).tolist() == Tokenizer(v).encode_batch(docs).tolist()


def test_tokens_longer_than_the_gpu_walk_takes_export_and_are_refused_by_name(tmp_path):
    # 14 doublings of a space: a token of 16,384 bytes, one above merge-order mode's GPU limit
    merges = [(32, 32)] + [(256 + k, 256 + k) for k in range(13)]
    v = Vocab(merges=merges, special_tokens=(EOT,), mode="bpe", pre_tokenizer="gpt2")
    longest = 256 + len(merges) - 1
    assert len(v.token_bytes[longest]) == 16384
    export_all(v, tmp_path)     # the exports read no length: written, and exact in HF, tiktoken
    text = " " * 16384 + "\n" + " " * 5
    ids = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(text).ids
    assert ids[0] == longest
    assert ids == tiktoken_encoding(v).encode_ordinary(text)
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    with pytest.raises(UnsupportedVocabError, match="at most 16,383 bytes; this vocab has one of 16,384"):
        Tokenizer(v)
    assert Tokenizer(v, mode="greedy").mode == "greedy"
