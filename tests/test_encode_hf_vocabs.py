"""Hugging Face ``tokenizer.json`` vocabularies as models ship them, on the GPU, against
Hugging Face tokenizers' ids: ``ignore_merges`` off (only merges build tokens), added tokens
listed inside the model's vocab, vocabularies that lack some single bytes; and llama.cpp's
vocab test set (``tests/llamacpp_vocabs.py``) where ``$TORCH_GPUBPE_LLAMACPP_MODELS`` names
it (``.ci/run`` sets it).
"""

from __future__ import annotations

import json

import pytest

import llamacpp_vocabs
from conftest import corpus_docs
from torch_gpubpe import InputError
from torch_gpubpe.errors import VocabFormatError
from torch_gpubpe.core.bpe_tables import bpe_tables
from torch_gpubpe.core.export import byte_level_string
from torch_gpubpe.core.vocab_files import vocab_from_hf_dict
from torch_gpubpe.encoding.tokenizer import Tokenizer

tokenizers = pytest.importorskip("tokenizers")
pytestmark = pytest.mark.gpu


def small_hf(merges: list[tuple[str, str]], extra: list[str] = (), *, ignore_merges: bool,
             drop_bytes: bytes = b"", added: list[tuple[str, int]] = ()) -> dict:
    """A byte-level BPE tokenizer.json: the single bytes (but ``drop_bytes``), ``merges`` in
    order, tokens ``extra`` that no merge makes, then ``added`` (content, id) tokens; GPT-2's
    pre-tokenizer."""
    vocab: dict[str, int] = {}
    for b in range(256):
        if bytes([b]) not in drop_bytes:
            vocab[byte_level_string(bytes([b]))] = len(vocab)
    for a, b in merges:
        vocab.setdefault(byte_level_string((a + b).encode()), len(vocab))
    for t in extra:
        vocab[byte_level_string(t.encode())] = len(vocab)
    for s, i in added:
        if i < len(vocab):
            raise ValueError("test helper: added tokens inside the vocab replace nothing")
    for s, i in added:
        if i == len(vocab) and s.isascii():
            vocab[s] = i
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for s, i in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab,
                  "merges": [f"{byte_level_string(a.encode())} {byte_level_string(b.encode())}"
                             for a, b in merges]},
    }


def both(obj: dict, tmp_path, name: str = "tokenizer.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return Tokenizer.from_hf(path), tokenizers.Tokenizer.from_file(str(path))


MERGES = [("a", "b"), ("c", "d"), ("ab", "cd"), (" ", "ab"), ("e", "f")]
TEXTS = ["abcd", "abcde", " abcd abcdx", "xyzw abcdxyzw xyzw", "ab cd ef abcdef", "xyzwxyzw",
         "efgh", " efgh", "abcd" * 50, ""]


@pytest.mark.parametrize("ignore_merges", [False, True])
def test_words_that_no_merge_builds(tmp_path, ignore_merges):
    """'xyzw' and 'efgh' are tokens no merge builds: Hugging Face emits them for a word that
    spells them only with ignore_merges; the GPU follows the file."""
    tok, hf = both(small_hf(MERGES, ["xyzw", "efgh"], ignore_merges=ignore_merges), tmp_path)
    assert len(bpe_tables(tok.vocab).unreachable) == 2
    assert tok.vocab.ignore_merges is ignore_merges
    want = [hf.encode(t, add_special_tokens=False).ids for t in TEXTS]
    assert tok.encode_batch(TEXTS).tolist() == want
    xyzw = tok.vocab.token_to_id(b"xyzw")
    assert any(xyzw in w for w in want) is ignore_merges  # the case is not vacuous


def test_ignore_merges_is_kept_by_the_vocab_file(tmp_path):
    tok, _ = both(small_hf(MERGES, ["xyzw"], ignore_merges=False), tmp_path)
    tok.vocab.save(tmp_path / "v.json")
    back = Tokenizer(tmp_path / "v.json", pre_tokenizer="gpt2")
    assert not back.vocab.ignore_merges
    assert back.encode("xyzw") == tok.encode("xyzw") == [ord("x"), ord("y"), ord("z"),
                                                         ord("w")]


def test_added_tokens_inside_the_model_vocab(tmp_path):
    """GPT-2's and StarCoder's files list their special tokens in model.vocab as well: they
    are special ids (matched in text when allowed, as Hugging Face matches added tokens) and
    never ordinary tokens."""
    obj = small_hf(MERGES, ignore_merges=False, added=[("<|endoftext|>", 261)])
    tok, hf = both(obj, tmp_path)
    assert "<|endoftext|>" in obj["model"]["vocab"]
    assert tok.vocab.special_token_ids == {"<|endoftext|>": 261} and len(tok.vocab) == 262
    texts = ["abcd<|endoftext|>ef", "<|endoftext|>", "x<|endoftext|><|endoftext|> ab"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert tok.encode_batch(texts, allowed_special="all").tolist() == want
    # as ordinary text (this project's default) the spelling is never the special id
    assert 261 not in tok.encode("<|endoftext|>")
    assert tok.decode([261]) == "<|endoftext|>"
    with pytest.raises(Exception, match="which model.vocab gives"):
        obj["added_tokens"][0]["content"] = "<|other|>"
        vocab_from_hf_dict(obj)


def test_vocab_without_some_bytes(tmp_path):
    """A vocab that lacks bytes UTF-8 never has (0xC0, 0xC1, 0xF5-0xFF: DeepSeek, MPT) encodes
    text as Hugging Face does; bytes that hold one are refused by name and nothing is lost."""
    missing = bytes([0xC0, 0xC1, *range(0xF5, 0x100)])
    tok, hf = both(small_hf(MERGES, ignore_merges=False, drop_bytes=missing), tmp_path)
    assert tok.vocab.missing_bytes == tuple(missing)
    texts = corpus_docs("multi_udhr", 20_000)[:30] + TEXTS + ["😀 ﻿ \x00\x7f"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert tok.encode_batch(texts).tolist() == want
    assert tok.encode_batch([t.encode() for t in texts]).tolist() == want
    for bad in ([b"abcd", b"ab\xffcd"], [b"\xc0"], ["abcd", bytearray(b"\xf5")]):
        with pytest.raises(InputError, match="0x"):
            tok.encode_batch(bad)
    assert tok.encode_batch(texts[:3]).tolist() == want[:3]  # the session goes on


def test_vocab_without_bytes_text_holds(tmp_path):
    """A vocab without 0x03 (a control character) and 0xF1 (the lead byte of U+40000..U+7FFFF;
    StarCoder, Falcon): the packed UTF-8 is searched for them, from ``str`` and bytes alike."""
    tok, hf = both(small_hf(MERGES, ignore_merges=False, drop_bytes=b"\x03\xf1"), tmp_path)
    texts = corpus_docs("multi_emoji", 20_000)[:30] + TEXTS + ["\x04 \U00080000 \U0003ffff"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert tok.encode_batch(texts).tolist() == want
    for bad in (["ab", "x\x03y"], ["\U00040000"], ["😀" * 3000 + "\U0007ffff"],
                [b"\xf1\x80\x80\x80"], ["ab" * 5000, "\x03"]):
        with pytest.raises(InputError, match="0x03|0xF1"):
            tok.encode_batch(bad)
    assert tok.encode_batch(texts[:3]).tolist() == want[:3]


@pytest.mark.parametrize("drop", [b"\xe0", b"\xf0", b"\xef", b"\xf1", b"\xf4"])
def test_vocab_without_a_lead_byte(tmp_path, drop):
    """A missing lead byte: the characters that hold it are refused, in str documents
    through surrogates too (a pair is its character, a lone one U+FFFD), and ASCII text is
    not."""
    tok, hf = both(small_hf(MERGES, ignore_merges=False, drop_bytes=drop), tmp_path)
    assert tok.encode("hello ab") == hf.encode("hello ab").ids
    holds = {b"\xe0": ["\u0800", "\u0fff"], b"\xf0": ["\U00010000", "\ud800\udc00"],
             b"\xef": ["\ufffd", "a\ud800b", "\udfff"], b"\xf1": ["\ud8c0\udc00"],
             b"\xf4": ["\U0010ffff", "\udbff\udfff"]}[drop]
    for text in holds:
        with pytest.raises(InputError, match=f"0x{drop[0]:02X}"):
            tok.encode_batch(["ab", text])
    others = ["\u07ff", "\uffff" if drop != b"\xef" else "\ue000", "\U0003ffff"
              if drop != b"\xf0" else "\U00040000", "\ud7ff"]
    assert tok.encode_batch(others).tolist() == [hf.encode(t).ids for t in others]


def test_raw_token_hides_no_missing_byte(tmp_path):
    """A raw model.vocab entry for a single byte ("\n" where the byte-level one is "Ċ") is
    decoded only: text holding that byte is refused, not encoded with a stray id."""
    obj = small_hf(MERGES, ignore_merges=False)
    v = obj["model"]["vocab"]
    v["\n"] = v.pop(byte_level_string(b"\n"))
    tok, _ = both(obj, tmp_path)
    assert 0x0A in tok.vocab.missing_bytes
    with pytest.raises(InputError, match="0x0A"):
        tok.encode("ab\ncd")


@pytest.mark.parametrize("flag", ["lstrip", "rstrip", "single_word"])
def test_added_token_flags_refused(flag):
    obj = small_hf(MERGES, ignore_merges=False, added=[("<mask>", 261)])
    obj["added_tokens"][0][flag] = True
    with pytest.raises(VocabFormatError, match=flag):
        vocab_from_hf_dict(obj)
    del obj["added_tokens"][0]["id"]
    with pytest.raises(VocabFormatError, match="needs a"):
        vocab_from_hf_dict(obj)


def test_vocab_without_continuation_bytes_refused(tmp_path):
    tok_json = small_hf(MERGES, ignore_merges=False, drop_bytes=b"\x80\xc0")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tok_json), encoding="utf-8")
    with pytest.raises(InputError, match="0x80, which continue"):
        Tokenizer.from_hf(path)


def test_nfc_normalizer_and_raw_tokens(tmp_path):
    """Command-R's form: an NFC normalizer (applied on every path, str and bytes, and kept by
    the vocab file) and tokens spelled outside the byte-level alphabet, one of them with the
    bytes of a byte-level token: Hugging Face never emits them, nor does the GPU."""
    obj = small_hf(MERGES, ignore_merges=False)
    # merges over byte-level strings: "™" (E2 84 A2) and "é" (C3 A9) are byte-level tokens
    extra = [(byte_level_string(b"\xe2"), byte_level_string(b"\x84")),
             (byte_level_string(b"\xe2\x84"), byte_level_string(b"\xa2")),
             (byte_level_string(b"\xc3"), byte_level_string(b"\xa9"))]
    for a, b in extra:
        obj["model"]["vocab"][a + b] = len(obj["model"]["vocab"])
        obj["model"]["merges"].append(f"{a} {b}")
    obj["model"]["vocab"]["™"] = len(obj["model"]["vocab"])     # raw, bytes of a token
    obj["model"]["vocab"]["‼"] = len(obj["model"]["vocab"])     # raw, bytes of none
    obj["normalizer"] = {"type": "NFC"}
    tok, hf = both(obj, tmp_path)
    assert tok.vocab.normalizer == "nfc" and len(tok.vocab.decode_only) == 2
    texts = ["cafe\u0301 ™‼ e\u0301\u0301", "™™", "‼", "A\u030a ab", "plain"] + TEXTS
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert any(len(w) < len(t.encode()) for w, t in zip(want, texts))
    assert tok.encode_batch(texts).tolist() == want
    assert tok.encode_batch([t.encode() for t in texts]).tolist() == want
    for k in tok.vocab.decode_only:
        assert all(k not in w for w in want)
        assert tok.decode([k]) in ("™", "‼")
    tok.vocab.save(tmp_path / "v.json")
    back = Tokenizer(tmp_path / "v.json", pre_tokenizer="gpt2")
    assert back.vocab == tok.vocab and back.encode_batch(texts).tolist() == want


def small_spm(prepend: bool = True) -> dict:
    """A SentencePiece BPE tokenizer.json (Llama 2's form): byte tokens, characters of 1-4
    bytes, merges; "丫" and "😀" are no piece (byte fallback), "中" shares its first bytes
    with "丫"."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["▁", "a", "b", "c", "中", "文", "é", "𠀀", "▁a", "ab", "▁ab", "中文", "▁中", "bc"]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [["▁", "a"], ["a", "b"], ["▁a", "b"], ["▁", "ab"], ["中", "文"], ["▁", "中"],
              ["b", "c"]]
    steps = [{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]
    if prepend:
        steps.insert(0, {"type": "Prepend", "prepend": "▁"})
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, t in enumerate(pieces[:3])],
        "normalizer": {"type": "Sequence", "normalizers": steps}, "pre_tokenizer": None,
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}


SPM_TEXTS = ["ab abc", "a中文 中丫文", "😀 é𠀀𠀁", "", " ", "  a  b  ", "丫" * 40, "ab" * 500,
             "x\ny\u3000z", "▁a ▁"]


@pytest.mark.parametrize("prepend", [True, False])
def test_sentencepiece_bpe(tmp_path, prepend):
    """Merges over characters, byte fallback for characters that are no piece (also one whose
    first bytes are another's: the encoder's prefix token is expanded), spaces as "▁": Hugging
    Face's ids on every path, and the vocab file keeps it."""
    tok, hf = both(small_spm(prepend), tmp_path)
    assert tok.vocab.units == "chars" and tok.pre_tokenizer == "whole"
    assert tok._units.first_prefix < len(tok._units.vocab.token_bytes)  # prefix tokens exist
    want = [hf.encode(t, add_special_tokens=False).ids for t in SPM_TEXTS]
    assert any(0xE4 + 3 in w for w in want)  # "<0xE4>": byte fallback is exercised
    assert tok.encode_batch(SPM_TEXTS).tolist() == want
    assert tok.encode_batch([t.encode() for t in SPM_TEXTS]).tolist() == want
    assert [tok.encode(t) for t in SPM_TEXTS] == want
    tok.vocab.save(tmp_path / "v.json")
    back = Tokenizer(tmp_path / "v.json", pre_tokenizer="whole")
    assert back.vocab == tok.vocab and back.encode_batch(SPM_TEXTS).tolist() == want


def test_sentencepiece_bpe_refusals():
    obj = small_spm()
    obj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                            "prepend_scheme": "first", "split": False}
    with pytest.raises(Exception, match="pre-tokenizer"):
        vocab_from_hf_dict(obj)
    obj = small_spm()
    obj["model"]["vocab"]["x丫"] = len(obj["model"]["vocab"])
    with pytest.raises(Exception, match="which is no piece"):
        vocab_from_hf_dict(obj)
    obj = small_spm()
    obj["model"]["merges"].append(["a", "b"])  # ab again, after other pieces' merges
    with pytest.raises(Exception, match="later priority"):
        vocab_from_hf_dict(obj)
    obj = small_hf(MERGES, ignore_merges=False)
    obj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "split": True}
    with pytest.raises(Exception, match="without byte fallback"):
        vocab_from_hf_dict(obj)


# -- llama.cpp's vocab test set --------------------------------------------------------------
# Byte-level BPE vocabularies the GPU encodes exactly, and the reason each other one is refused
# (a pre-tokenizer step or normalizer the GPU split cannot do exactly).
EXACT = ("gpt-2", "llama-bpe", "qwen2", "qwen35", "mpt", "starcoder", "refact", "command-r",
         "deepseek-coder", "deepseek-llm", "llama-spm", "phi-3")
REFUSED = {"falcon": "pre-tokenizer",
           "gemma-4": "prefix tokens more on the GPU"}
assert set(EXACT) | set(REFUSED) == set(llamacpp_vocabs.BPE_NAMES + llamacpp_vocabs.SPM_NAMES)
llamacpp = pytest.mark.skipif(llamacpp_vocabs.models_dir() is None,
                              reason=f"${llamacpp_vocabs.ENV} is not set (.ci/run sets it)")


@pytest.fixture(scope="module")
def llamacpp_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("llamacpp")

    def path(name: str):
        p = out / f"{name}.json"
        if not p.exists():
            p.write_text(json.dumps(llamacpp_vocabs.tokenizer_json(name), ensure_ascii=False),
                         encoding="utf-8")
        return p
    return path


@llamacpp
@pytest.mark.parametrize("name", llamacpp_vocabs.BPE_NAMES + llamacpp_vocabs.SPM_NAMES)
def test_llamacpp_files_rebuild_hugging_face_ids(llamacpp_json, name):
    """The rebuilt tokenizer.json gives llama.cpp's recorded Hugging Face ids (the oracle
    below is right)."""
    hf = tokenizers.Tokenizer.from_file(str(llamacpp_json(name)))
    for text, ids in llamacpp_vocabs.cases(name):
        assert hf.encode(text, add_special_tokens=False).ids == ids, text


@llamacpp
@pytest.mark.parametrize("name", EXACT)
def test_llamacpp_vocab_ids_on_gpu(llamacpp_json, name):
    cases = llamacpp_vocabs.cases(name)
    tok = Tokenizer.from_hf(llamacpp_json(name))
    got = tok.encode_batch([t for t, _ in cases], allowed_special="all").tolist()
    for (text, ids), g in zip(cases, got):
        assert g == ids, text


@llamacpp
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_llamacpp_vocab_refused_by_name(llamacpp_json, name):
    with pytest.raises((InputError, VocabFormatError), match=REFUSED[name]):
        Tokenizer.from_hf(llamacpp_json(name))


@llamacpp
@pytest.mark.parametrize("name", ["llama-spm", "llama-bpe", "deepseek-coder"])
def test_llamacpp_vocab_ids_on_corpora(llamacpp_json, name):
    """Beyond the test strings: every corpus, and text made of characters the vocab has and
    lacks (byte fallback, byte tokens), long runs."""
    import random

    from conftest import CORPUS_NAMES

    hf = tokenizers.Tokenizer.from_file(str(llamacpp_json(name)))
    tok = Tokenizer.from_hf(llamacpp_json(name))
    docs = [d for c in CORPUS_NAMES for d in corpus_docs(c, 6_000, max_doc_bytes=2_000)]
    rng = random.Random(1)
    alpha = list("ab Z1  \t\n'.,中文한😀\u0301é\U00040000\U0001f9ff丫齉𠀀 ▁")
    docs += ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 60))) for _ in range(300)]
    docs += ["a" * 3000, " " * 2000, "中" * 500 + "丫" * 50]
    got = tok.encode_batch(docs, allowed_special="all").tolist()  # (HF matches added tokens)
    for d, g in zip(docs, got):
        assert g == hf.encode(d, add_special_tokens=False).ids, d[:80]
    if tok.vocab.units == "chars":  # SentencePiece: "▁" decodes to spaces, as HF's decoder
        for d, g in zip(docs[:200], got):
            assert tok.vocab.decode(g) == tok.decode(g) == hf.decode(g) == d, d[:80]
