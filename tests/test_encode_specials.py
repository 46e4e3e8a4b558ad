"""Special tokens put in by the GPU while reading back (wgsl/specials.wgsl): the ids of
``submit_packed(..., bos_id=, eos_id=)`` equal the encoder's ids with the token added before /
after every document by plain Python, for u16 and u32 ids, empty documents, greedy and
merge-order mode, and batches that go through the multi-slice path (the host puts them in
there)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs, shared_vocab
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.errors import InputError
from torch_gpubpe.encoding.pretokenize import pack_documents
from torch_gpubpe.core.vocab import Vocab

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def docs():
    out = []
    for name in CORPUS_NAMES:
        out += corpus_docs(name, 4_000)
    # empty documents first, last, in runs
    return ["", ""] + out[:40] + ["", "", ""] + out[40:] + ["x", ""]


@pytest.fixture(scope="module")
def vocab(docs):
    merges = reference.train(docs, vocab_size=600, min_frequency=2)
    return Vocab.from_merges(merges, special_tokens=["<|endoftext|>"])


def expected(tok, docs, bos, eos):
    plain = tok.encode_batch(docs).tolist()
    return [([bos] if bos is not None else []) + d + ([eos] if eos is not None else [])
            for d in plain]


def check(tok, docs, bos, eos):
    data, offsets = pack_documents(docs)
    be = tok.submit_packed(data, offsets, bos_id=bos, eos_id=eos).result()
    assert be.ids.dtype == tok.id_dtype and be.offsets.dtype == np.int64
    assert be.offsets[0] == 0 and be.offsets[-1] == len(be.ids)
    want = expected(tok, docs, bos, eos)
    got = be.tolist()
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"document {k} differs"


@pytest.mark.parametrize("bos,eos", [("eot", None), (None, "eot"), (3, "eot")])
def test_specials_u16(vocab, docs, bos, eos):
    eot = vocab.token_to_id("<|endoftext|>")
    bos, eos = (eot if x == "eot" else x for x in (bos, eos))
    check(Tokenizer(vocab), docs, bos, eos)


def test_specials_u32_and_merge_order(vocab, docs):
    """Qwen2 (151,646 ids: u32, merge order, its regex split) and our vocab in merge order."""
    qwen = Tokenizer.from_tiktoken(shared_vocab("qwen2.tiktoken"))
    assert qwen.id_dtype == np.uint32
    eot = qwen.eot_token
    check(qwen, docs[:60], eot, None)
    check(qwen, docs[:60], 70_000, 5)  # an id above u16
    check(Tokenizer(vocab, mode="bpe"), docs, 600, 600)


def test_specials_multi_slice_path(vocab, docs):
    """A batch above the slice limit is encoded in slices; the host puts the specials in."""
    eot = vocab.token_to_id("<|endoftext|>")
    check(Tokenizer(vocab, max_slice_bytes=700), docs, eot, None)
    check(Tokenizer(vocab, max_slice_bytes=700), docs, None, eot)


def test_specials_empty_and_errors(vocab):
    tok = Tokenizer(vocab)
    be = tok.submit(["", ""], bos_id=1).result()  # no bytes: the GPU is not needed
    assert be.tolist() == [[1], [1]]
    with pytest.raises(InputError, match="bos_id"):
        tok.submit(["a"], bos_id=70_000)  # above u16 ids
    with pytest.raises(InputError, match="eos_id"):
        tok.submit(["a"], eos_id=-1)
    # inside the output dtype but not an id of this vocab (a fresh user's find: it was written)
    with pytest.raises(InputError, match=f"n_vocab {tok.n_vocab}"):
        tok.encode_arrow(pa.array(["hi"]), eos_id=tok.n_vocab)
    with pytest.raises(InputError, match="bos_id"):
        tok.submit_packed(np.frombuffer(b"hi", np.uint8), np.array([0, 2]), bos_id=tok.n_vocab)
    assert tok.encode_arrow(pa.array(["hi"]), eos_id=tok.n_vocab - 1)[0][-1] == tok.n_vocab - 1


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(max_size=60), min_size=1, max_size=40),
       st.sampled_from([(7, None), (None, 9), (7, 9)]))
def test_specials_random(vocab, docs_b, specials):
    check(Tokenizer(vocab), docs_b, *specials)


@pytest.mark.parametrize("n", [0, 1, (1 << 20) - 1, 2 << 20, (5 << 20) + 3, 9 << 20])
def test_parallel_copy_equals_a_plain_copy(n):
    """encoder.parallel_copy (uploads into, and ids out of, mapped GPU memory) at sizes below,
    at and above its part size, odd lengths included."""
    from torch_gpubpe.encoding.tokenizer import PARALLEL_COPY_MIN, parallel_copy

    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(n, np.uint8)
    parallel_copy(dst, src)
    assert np.array_equal(dst, src) and PARALLEL_COPY_MIN == 1 << 20
    ids = src[: n // 2 * 2].view(np.uint16)
    out = np.zeros_like(ids)
    parallel_copy(out, ids)
    assert np.array_equal(out, ids)


@pytest.mark.parametrize("n_specials", [2, 20])
def test_split_at_specials_passes_over_documents_without_a_spelling(n_specials):
    """Documents that spell no special token come back as they are (no plan); those that do
    are split, also where the spellings' first characters are too many to pre-check (then
    every document goes through the regex); a disallowed spelling is still refused."""
    from torch_gpubpe.encoding.specials import split_at_specials

    names = [f"{chr(0x41 + k)}|sp{k}|" for k in range(n_specials)]
    ids_of = {t: 100 + k for k, t in enumerate(names)}
    allowed = frozenset(names[1:])
    plain = ["no special <| here", b"bytes A| too", "", bytearray(b"x")]
    pieces, plan = split_at_specials(plain, ids_of, allowed, frozenset(names[:1]))
    assert plan is None and pieces == plain
    docs = plain + [f"a{names[1]}b", names[-1].encode() + b"c"]
    pieces, plan = split_at_specials(docs, ids_of, allowed, frozenset())
    assert pieces == ["no special <| here", b"bytes A| too", b"x", "a", "b", b"c"]
    assert plan == [[-1], [-1], [], [-1], [-1, 101, -1], [100 + n_specials - 1, -1]]
    with pytest.raises(InputError, match="disallowed_special"):
        split_at_specials(["ok", "x" + names[0]], ids_of, allowed, frozenset(names[:1]))
