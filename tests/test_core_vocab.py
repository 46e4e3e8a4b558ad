"""Vocab file format and decode errors (issue: foundation, item 4)."""

from __future__ import annotations

import gc
import json
import re

import numpy as np
import pytest

from torch_gpubpe import Vocab, VocabFormatError
from torch_gpubpe.core import reference


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
    assert obj["format"] == "torch_gpubpe.core.vocab" and obj["version"] == 1
    assert obj["pre_tokenizer"] == "gpubpe-bytes-v1"


@pytest.mark.parametrize(
    "content, match",
    [
        (b"\x00\xff garbage", "not JSON"),
        (b"[1, 2]", "not a torch_gpubpe vocab"),
        (b'{"format": "other"}', "not a torch_gpubpe vocab"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 99}', "version 99"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpt2"}', "pre-tokenizer"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 2, 3]]}', "merges"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 300]]}', "not yet defined"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [[1, 2]], "vocab_size": 999}', "damaged"),
        (b'{"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",'
         b' "merges": [], "special_tokens": ["a", "a"]}', "duplicate"),
    ],
)
def test_damaged_or_foreign_file(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(VocabFormatError, match=match) as e:
        Vocab.load(p)
    assert str(p) in str(e.value) and gc.isenabled()


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


def _merges_as_before(merges):
    """The per-merge check ``Vocab`` ran before it was vectorised: the spec of its result."""
    merges = tuple((int(a), int(b)) for a, b in merges)
    for k, (a, b) in enumerate(merges):
        if not (0 <= a < 256 + k and 0 <= b < 256 + k):
            raise ValueError(f"merge {k} = ({a}, {b}) refers to an id not yet defined")
    return merges


@pytest.mark.parametrize("merges", [
    [], [(97, 98)], [(97, 98), (256, 99), (257, 256)], [[97, 98], [256, 256]],
    [(np.int64(97), np.uint16(98))], [(True, False)], [(97.9, 98)], ((a, a) for a in range(3)),
    [(97, 256)], [(-1, 5)], [(97, 98), (258, 97)], [(97, 98), (97, 2**70)], [(2**64, 0)],
    [(97, 98), (0, -(2**70))],
])
def test_merge_check_is_the_per_merge_loop(merges):
    merges = list(merges)
    try:
        want = _merges_as_before(merges)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            Vocab.from_merges(merges)
        return
    got = Vocab.from_merges(merges)
    assert got.merges == want and all(type(i) is int for m in got.merges for i in m)
    assert got.token_bytes == tuple(reference.token_bytes(want))


def test_load_of_a_large_file_is_exact(tmp_path):
    rng = np.random.default_rng(7)
    merges = [(int(rng.integers(0, 256 + k)), int(rng.integers(0, min(256 + k, 600))))
              for k in range(5000)]
    v = Vocab.from_merges(merges, ["<|endoftext|>"])
    v.save(tmp_path / "v.json")
    back = Vocab.load(tmp_path / "v.json")
    assert back == v and back.merges == tuple(map(tuple, merges))
    assert back.token_bytes == tuple(reference.token_bytes(merges))
    assert gc.isenabled()  # the load's collector pause is over


@pytest.mark.parametrize("specials, match", [
    (["<s\ud800>"], "lone surrogate at 2"), ([""], "non-empty"), (["a", "a"], "duplicate"),
])
def test_special_tokens_without_a_utf8_spelling_are_refused(specials, match):
    with pytest.raises(ValueError, match=match):
        Vocab(merges=[(97, 98)], special_tokens=specials)
    with pytest.raises(ValueError, match=match):
        Vocab(tokens=[bytes([b]) for b in range(256)], special_tokens=specials)
