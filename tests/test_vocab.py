"""Vocab file format and decode errors (issue: foundation, item 4)."""

from __future__ import annotations

import json

import pytest

from torch_gpubpe import Vocab, VocabFormatError, reference


@pytest.fixture
def vocab():
    merges = reference.train([b"hello world, hello there"], 270, min_frequency=1)
    return Vocab.from_merges(merges, ["<|endoftext|>", "<|pad|>"])


def test_roundtrip(tmp_path, vocab):
    p = tmp_path / "v.json"
    vocab.save(p)
    back = Vocab.load(p)
    assert back == vocab and len(back) == 256 + len(vocab.merges) + 2
    assert back.special_token_ids == {"<|endoftext|>": back.num_tokens, "<|pad|>": back.num_tokens + 1}
    obj = json.loads(p.read_text())
    assert obj["format"] == "torch_gpubpe.vocab" and obj["version"] == 1
    assert obj["pre_tokenizer"] == "gpubpe-bytes-v1"


@pytest.mark.parametrize(
    "content, match",
    [
        (b"\x00\xff garbage", "not JSON"),
        (b"[1, 2]", "not a torch_gpubpe vocab"),
        (b'{"format": "other"}', "not a torch_gpubpe vocab"),
        (b'{"format": "torch_gpubpe.vocab", "version": 99}', "version 99"),
        (b'{"format": "torch_gpubpe.vocab", "version": 1, "pre_tokenizer": "gpt2"}', "pre-tokenizer"),
        (b'{"format": "torch_gpubpe.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 2, 3]]}', "merges"),
        (b'{"format": "torch_gpubpe.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 300]]}', "not yet defined"),
        (b'{"format": "torch_gpubpe.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 2]], "vocab_size": 999}', "damaged"),
        (b'{"format": "torch_gpubpe.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [], "special_tokens": ["a", "a"]}', "duplicate"),
    ],
)
def test_damaged_or_foreign_file(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(VocabFormatError, match=match) as e:
        Vocab.load(p)
    assert str(p) in str(e.value)


def test_truncated_file(tmp_path, vocab):
    p = tmp_path / "v.json"
    vocab.save(p)
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(VocabFormatError, match=str(p)):
        Vocab.load(p)


def test_decode_out_of_vocab_names_id_and_position(vocab):
    bad = len(vocab)
    with pytest.raises(ValueError, match=rf"token id {bad} at position 2"):
        vocab.decode_bytes([104, 105, bad])
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        vocab.decode([-1])


def test_decode_specials_and_bytes(vocab):
    eos = vocab.token_to_id("<|endoftext|>")
    assert vocab.decode_bytes([104, eos, 0xFF]) == b"h<|endoftext|>\xff"
    assert vocab.decode([0xFF]) == "\ufffd"
    with pytest.raises(KeyError, match="not a special token"):
        vocab.token_to_id("<|nope|>")


def test_decode_rejects_non_integer_ids(vocab):
    import numpy as np

    with pytest.raises(TypeError, match="position 1"):
        vocab.decode_bytes([104, 104.9])
    with pytest.raises(TypeError, match="position 0"):
        vocab.decode_bytes([True])
    assert vocab.decode_bytes(np.array([104, 105], np.uint16)) == b"hi"


def test_load_from_folder_and_short_repr(tmp_path, vocab):
    vocab.save(tmp_path / "vocab.json")
    assert Vocab.load(tmp_path) == vocab
    assert repr(vocab) == f"Vocab(size={len(vocab)}, merges={len(vocab.merges)}, " \
                          "special_tokens=['<|endoftext|>', '<|pad|>'])"
