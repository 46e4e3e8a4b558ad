"""Streaming decode (DecodeStream): ids fed one or a few at a time give whole characters, and the
pieces join to ``vocab.decode`` of all the ids; Hugging Face's DecodeStream on GPT-2 as a
second opinion."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tokenizers
from tokenizers.decoders import DecodeStream as HFDecodeStream

from conftest import shared_vocab
from torch_gpubpe import Vocab
from torch_gpubpe.core import reference
from torch_gpubpe.core.export import hf_tokenizer_json
from torch_gpubpe.core.vocab_files import load_tiktoken
from torch_gpubpe.encoding.decoding import DecodeStream

TEXTS = ["hello world", "🙂 日本語", "👨‍👩‍👧 family, 🇯🇵 flag", "e\u0301 a\u0308 n\u0303o\u0328",
         "क्षत्रिय १२३", "Здравствуй, мир!", "x<|endoftext|>語<|endoftext|>", "", "\U0010ffff\t\n"]
# Bytes that are not UTF-8: a stray continuation, overlong, surrogate, truncated in the middle
# and at the end, a byte never valid; with multi-byte characters around them.
INVALID = [b"\x80a", b"\xc0\xaf\xe6\x97\xa5", b"\xed\xa0\x80\xf0\x9f", b"\xe6\x97(\xff\xfe\xe6",
           "日本".encode() + b"\xf0\x9f\x99", b"\xf4\x90\x80\x80 \xc3"]


@pytest.fixture(scope="module")
def gpt2() -> tuple[Vocab, tokenizers.Tokenizer]:
    vocab = load_tiktoken(shared_vocab("gpt2.tiktoken"))
    return vocab, tokenizers.Tokenizer.from_str(hf_tokenizer_json(vocab))


@pytest.fixture(scope="module")
def small() -> Vocab:
    """A few merges learnt on multi-byte text, so tokens of several bytes begin or end inside a
    character; ids of bytes that are not UTF-8 come from the reference encoder."""
    vocab = Vocab.from_merges(reference.train(TEXTS, 300, min_frequency=1), ["<|endoftext|>"])
    partial = [t for t in vocab.token_bytes[256:] if "\ufffd" in t.decode(errors="replace")]
    assert len(partial) > 10
    return vocab


def splits(ids: list[int], seed: int) -> list[list[list[int]]]:
    """``ids`` cut into pieces: one id each, all at once, at every single cut, at random."""
    rng = random.Random(seed)
    cuts = [[ids[:k], ids[k:]] for k in range(len(ids) + 1)]
    rand, pos = [], 0
    while pos < len(ids):
        step = rng.randint(1, 4)
        rand.append(ids[pos:pos + step])
        pos += step
    return [[[i] for i in ids], [ids], rand, *cuts]


def streamed(stream: DecodeStream, pieces: list[list[int]]) -> list[str]:
    out = [stream.step(p) for p in pieces]
    assert all(o is None or (isinstance(o, str) and o) for o in out)  # never ""
    return [o for o in out if o is not None] + [stream.finish()]


@pytest.mark.parametrize("text", TEXTS)
def test_stream_joins_to_decode_on_gpt2_with_no_replacement_char(gpt2, text):
    vocab, hf = gpt2
    ids = hf.encode(text).ids
    assert vocab.decode(ids) == text
    for pieces in splits(ids, seed=len(text)):
        out = streamed(DecodeStream(vocab), pieces)
        assert "".join(out) == text and all("\ufffd" not in o for o in out)


def test_per_token_decode_gives_replacement_chars_that_the_stream_avoids(gpt2):
    vocab, hf = gpt2
    ids = hf.encode("🙂 日本語").ids
    assert any("\ufffd" in vocab.decode([i]) for i in ids)
    stream = DecodeStream(vocab)
    assert [stream.step(i) for i in ids] == [None, "🙂", " ", None, "日", None, "本", None, "語"]


@pytest.mark.parametrize("data", INVALID + [t.encode() for t in TEXTS])
def test_stream_of_any_bytes_joins_to_decode_with_replace(small, data):
    ids = reference.encode(data, small.merges)
    assert small.decode_bytes(ids) == data
    for pieces in splits(ids, seed=len(data)):
        assert "".join(streamed(DecodeStream(small), pieces)) == small.decode(ids)


def test_incomplete_tail_waits_and_finish_replaces_it(small):
    stream = DecodeStream(small)
    assert [stream.step(b) for b in b"ab\xe6\x97"] == ["a", "b", None, None]
    assert stream.finish() == "\ufffd"
    assert stream.step(list(b"\xe6\x97\xa5")) == "日" and stream.finish() == ""  # a new sequence
    eot = small.special_token_ids["<|endoftext|>"]
    assert stream.step([0xE6, eot]) == "\ufffd<|endoftext|>"


@pytest.mark.parametrize("skip", [False, True])
def test_same_text_as_hugging_face_decode_stream_never_later(gpt2, skip):
    vocab, hf = gpt2
    eot = vocab.special_token_ids["<|endoftext|>"]
    ids = [i for t in TEXTS for i in [*hf.encode(t).ids, eot]]
    ours = DecodeStream(vocab, skip_special_tokens=skip)
    theirs = HFDecodeStream(skip_special_tokens=skip)
    ours_so_far = theirs_so_far = ""
    for i in ids:
        ours_so_far += ours.step(i) or ""
        theirs_so_far += theirs.step(hf, i) or ""
        # Ours gives each character once its bytes are complete; Hugging Face waits for a
        # token whose text is complete (" 日" comes as one piece, ours gives " " first).
        assert ours_so_far.startswith(theirs_so_far)
    assert ours_so_far == theirs_so_far == hf.decode(ids, skip_special_tokens=skip)
    assert ours.finish() == ""


def test_skip_special_tokens_drops_them(small):
    eot = small.special_token_ids["<|endoftext|>"]
    ids = [eot, *reference.encode("日本", small.merges), eot]
    out = streamed(DecodeStream(small), [[i] for i in ids])
    assert "".join(out) == "<|endoftext|>日本<|endoftext|>"
    stream = DecodeStream(small, skip_special_tokens=True)
    assert stream.step(eot) is None and "".join(streamed(stream, [ids])) == "日本"


def test_bad_ids_raise_and_leave_the_stream_unchanged(small):
    stream = DecodeStream(small)
    assert stream.step(list("🙂".encode()[:2])) is None
    for bad in (len(small), -1, [0x99, len(small) + 5]):
        with pytest.raises(ValueError, match=r"token id -?\d+ is outside the vocab"):
            stream.step(bad)
    for bad in ("a", 1.0, True, [0x99, 2.5], np.array([0.5])):
        with pytest.raises(TypeError, match="must be integers"):
            stream.step(bad)
    assert stream.step(list("🙂".encode()[2:])) == "🙂"


def test_ids_as_numpy_and_torch_arrays_and_scalars(small):
    torch = pytest.importorskip("torch")
    ids = reference.encode("é日本🙂", small.merges)
    for pieces in ([np.int64(i) for i in ids], [np.array(i) for i in ids],
                   [torch.tensor(i) for i in ids], [np.array(ids, np.uint16)], [torch.tensor(ids)]):
        assert "".join(streamed(DecodeStream(small), pieces)) == "é日本🙂"


def test_metaspace_vocab_spaces_and_drops_only_the_first():
    vocab = Vocab(tokens=tuple(bytes([i]) for i in range(256)) + ("▁hi".encode(), "▁".encode()),
                  normalizer="metaspace-prepend")
    ids = [256, 257, 256, *"▁".encode()]
    for pieces in splits(ids, seed=0):
        assert "".join(streamed(DecodeStream(vocab), pieces)) == vocab.decode(ids) == "hi  hi "


@pytest.mark.gpu
def test_tokenizer_decode_stream_on_gpu_encoded_ids():
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"))
    for text in ("🙂 日本語", "e\u0301 👨‍👩‍👧 क्षत्रिय"):
        ids = tok.encode(text)
        stream = tok.decode_stream()
        out = [stream.step(i) for i in ids] + [stream.finish()]
        assert "".join(o for o in out if o) == text and not any("\ufffd" in o for o in out if o)
