"""``tok.as_tiktoken()`` behaves as ``tiktoken.Encoding`` on the same vocab and split: ids,
special-token rules and errors, decoding, single tokens."""

from __future__ import annotations

import pytest

from conftest import CORPUS_NAMES, corpus_docs, shared_vocab
from torch_gpubpe.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.gpu
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def pair():
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    from torch_gpubpe.core.patterns import PATTERN_OF

    path = shared_vocab("gpt2.tiktoken")
    ranks = load_tiktoken_bpe(str(path))
    ref = tiktoken.Encoding("gpt2", pat_str=PATTERN_OF["gpt2"], mergeable_ranks=ranks,
                            special_tokens={EOT: len(ranks)})
    ours = Tokenizer.from_tiktoken(path, pattern="gpt2").as_tiktoken("gpt2")
    return ours, ref


DOCS = [d for n in CORPUS_NAMES for d in corpus_docs(n, max_bytes=8_000)] + [
    "", " ", "😀 日本語", "a" * 300, "x\r\n\r\n y"]


def test_ids_equal_tiktoken(pair):
    ours, ref = pair
    assert ours.encode_ordinary_batch(DOCS) == ref.encode_ordinary_batch(DOCS)
    assert ours.encode_batch(DOCS) == ref.encode_batch(DOCS)
    assert [ours.encode(d) for d in DOCS[:20]] == [ref.encode(d) for d in DOCS[:20]]
    assert ours.encode_ordinary(DOCS[0]) == ref.encode_ordinary(DOCS[0])
    assert ours.encode_to_numpy(DOCS[1]).tolist() == ref.encode_to_numpy(DOCS[1]).tolist()


def test_special_tokens_follow_tiktoken(pair):
    ours, ref = pair
    text = f"a{EOT}b"
    for kw in ({"allowed_special": "all"}, {"allowed_special": {EOT}},
               {"disallowed_special": ()}, {"allowed_special": set(), "disallowed_special": ()}):
        assert ours.encode(text, **kw) == ref.encode(text, **kw), kw
        assert ours.encode_batch([text, "x"], **kw) == ref.encode_batch([text, "x"], **kw), kw
    for enc in (ours, ref):
        with pytest.raises(ValueError):
            enc.encode(text)
        with pytest.raises(ValueError):
            enc.encode_batch(["x", text])
    assert ours.encode_ordinary(text) == ref.encode_ordinary(text)


def test_attributes_and_decoding(pair):
    ours, ref = pair
    assert (ours.n_vocab, ours.max_token_value, ours.eot_token, ours.special_tokens_set) == (
        ref.n_vocab, ref.max_token_value, ref.eot_token, ref.special_tokens_set)
    ids = ref.encode("😀 日本語 and more", allowed_special="all")
    assert ours.decode(ids) == ref.decode(ids)
    assert ours.decode(ids[:1]) == ref.decode(ids[:1])        # a cut character: replaced
    assert ours.decode_bytes(ids) == ref.decode_bytes(ids)
    assert ours.decode_tokens_bytes(ids) == ref.decode_tokens_bytes(ids)
    assert ours.decode_batch([ids, ids[:2]]) == ref.decode_batch([ids, ids[:2]])
    assert ours.encode_single_token(EOT) == ref.encode_single_token(EOT)
    assert ours.encode_single_token(b" the") == ref.encode_single_token(b" the")
    with pytest.raises(KeyError):
        ours.encode_single_token(b"no such token \x00")
    assert ours.token_byte_values() == ref.token_byte_values()


def test_a_vocab_without_endoftext_makes_an_encoding():
    from torch_gpubpe import Vocab

    enc = Tokenizer(Vocab(merges=[(104, 105)], mode="bpe", pre_tokenizer="gpt2")).as_tiktoken()
    assert enc.n_vocab == 257 and enc.special_tokens_set == set()
    with pytest.raises(KeyError, match="endoftext"):
        enc.eot_token    # as tiktoken's: asked for, not at construction
