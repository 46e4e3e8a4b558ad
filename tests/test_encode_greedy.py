"""GPU encoder == reference.encode token for token (DESIGN.md §4), on lavapipe in CI.

Covers real corpora, random bytes, boundary lengths, words longer than a chunk / a slice /
a thread's budget, multi-pass slicing under forced tiny limits, the async double-buffered
submit, u16 and u32 ids, and the no-subgroup path on an adapter that has subgroups.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.gpu import device as gpumod
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import BatchEncoding, Tokenizer
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.vocab import Vocab

pytestmark = pytest.mark.gpu

SAMPLE = 6_000  # bytes per corpus for the shared vocab's training sample


@pytest.fixture(scope="module")
def merges():
    docs = []
    for name in CORPUS_NAMES:
        docs += corpus_docs(name, SAMPLE)
    return reference.train(docs, vocab_size=1200, min_frequency=2)


@pytest.fixture(scope="module")
def vocab(merges):
    return Vocab.from_merges(merges, special_tokens=["<|endoftext|>"])


@pytest.fixture(scope="module")
def tok(vocab):
    return Tokenizer(vocab)


def ref_batch(docs, merges):
    return reference.encode_batch(docs, merges)


def check_batch(tok, docs, merges):
    be = tok.encode_batch(docs)
    assert isinstance(be, BatchEncoding) and len(be) == len(docs)
    assert be.ids.dtype == tok.id_dtype and be.offsets.dtype == np.int64
    assert be.offsets.shape == (len(docs) + 1,) and be.offsets[0] == 0
    got = be.tolist()
    want = ref_batch(docs, merges)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"document {k}: first difference at token " + str(
            next(i for i in range(min(len(g), len(w)) + 1) if i >= min(len(g), len(w)) or g[i] != w[i])
        )
    return be


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpus_equals_reference(tok, merges, name):
    docs = corpus_docs(name, 25_000, max_doc_bytes=8_000)
    be = check_batch(tok, docs, merges)
    for k in range(min(3, len(docs))):
        assert tok.decode(be[k]) == docs[k]


@pytest.mark.parametrize("packer", ["str_pack", "fallback"])
def test_large_documents_upload_unjoined(tok, merges, monkeypatch, packer):
    from torch_gpubpe.core import str_pack
    from torch_gpubpe.encoding.tokenizer import _pack

    if packer == "fallback":   # (without the compiled packer: one to_bytes per document)
        monkeypatch.setitem(str_pack._state, "lib", None)

    docs = corpus_docs("tr_libreoffice_help", 60_000, max_doc_bytes=20_000)
    docs = ["".join(docs[i : i + 4]) for i in range(0, len(docs), 4)]  # >= 4 KiB on average
    docs[1] = "ascii only " * 500  # kept as the str itself (its characters are its UTF-8)
    parts, offsets = _pack(docs, keep_parts=True)
    assert isinstance(parts, list)  # the per-part upload path
    if packer == "str_pack":   # (one part: measured here, transcoded into the upload buffer)
        assert [type(p) for p in parts] == [str_pack.Packed]
    else:   # (the others: their bytes, made on this thread)
        assert parts[1] is docs[1] and any(type(p) is bytes for p in parts)
    assert offsets[-1] == sum(len(d.encode()) for d in docs)
    check_batch(tok, docs, merges)


def test_encode_batches_equals_encode_batch(tok, merges):
    """Tokenizer.encode_batches (packing ahead on a thread, two in flight) gives each batch's
    encode_batch result, in order, with specials, for a generator of batches (empty ones too)."""
    from torch_gpubpe.errors import InputError

    docs = corpus_docs("en_novels", 60_000, max_doc_bytes=9_000)
    bs = [docs[0:3], [], docs[3:4] * 2, (d for d in docs[4:9]), docs[9:10]]
    want = [tok.encode_batch(list(b) if not isinstance(b, list) else b) for b in
            [docs[0:3], [], docs[3:4] * 2, docs[4:9], docs[9:10]]]
    got = list(tok.encode_batches(iter(bs)))
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    eot = tok.n_vocab - 1
    got = list(tok.encode_batches([docs[0:2]], bos_id=eot))
    assert got[0].tolist() == [[eot] + x for x in want[0].tolist()[:2]]
    assert list(tok.encode_batches([])) == []
    with pytest.raises(InputError):
        list(tok.encode_batches([docs[0:2], [3]]))


@pytest.mark.parametrize("sizes", [[0, 3, 0, 5], [1 << 20, 7, (1 << 21) + 3, 0, 12_345],
                                   [5 << 20]])
def test_copy_parts_equals_a_join(sizes):
    """encoder.copy_parts (ASCII str read in place, bytes, pieces over threads) == b"".join."""
    from torch_gpubpe.encoding.tokenizer import copy_parts, join_parts

    rng = np.random.default_rng(len(sizes))
    parts = []
    for k, n in enumerate(sizes):
        raw = rng.integers(32, 127, n, dtype=np.uint8).tobytes()
        parts.append(raw.decode("ascii") if k % 2 else raw)  # ASCII str and bytes, mixed
    want = b"".join(p.encode() if isinstance(p, str) else p for p in parts)
    assert join_parts(parts).tobytes() == want
    dst = np.zeros(len(want), np.uint8)
    copy_parts(dst, parts)
    assert dst.tobytes() == want
    with pytest.raises(ValueError, match="bytes of parts"):
        copy_parts(np.zeros(len(want) + 1, np.uint8), parts)


def test_encode_single_and_types(tok, merges, vocab):
    text = "2026 yılı\tx=1;\r\n  hello  world"
    ids = tok.encode(text)
    assert isinstance(ids, list) and ids == reference.encode(text, merges)
    arr = tok.encode_to_numpy(text.encode())
    assert arr.dtype == np.uint16 and arr.tolist() == ids
    assert tok.n_vocab == len(vocab) == 1 + 256 + len(merges)
    assert tok.encode("") == [] and tok.encode(b"") == []
    # The special token's spelling is encoded as ordinary text.
    eot = vocab.special_token_ids["<|endoftext|>"]
    assert eot not in tok.encode("a<|endoftext|>b")
    assert tok.decode([eot]) == "<|endoftext|>"


def test_lengths_around_powers_of_two(tok, merges):
    src = "".join(corpus_docs("en_python_docs", 20_000)).encode()
    lengths = [0, 1, 2, 3, 5] + [x for k in range(3, 15) for x in (2**k - 1, 2**k, 2**k + 1)]
    docs = [src[:n] for n in lengths]  # bytes: cuts may split UTF-8 sequences
    check_batch(tok, docs, merges)
    for d in docs[::5]:
        assert tok.decode_bytes(tok.encode_to_numpy(d)) == d


def test_invalid_utf8_and_lone_surrogates(tok, merges):
    docs = [b"\xff\xfe abc \x80\x80\xc4", b"\x00" * 9 + b"a\x00b", "ok \ud800 x", b"\xc4\xb1" * 50]
    be = check_batch(tok, docs, merges)
    assert tok.decode_bytes(be[0]) == docs[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_random_bytes(tok, merges, docs):
    be = check_batch(tok, docs, merges)
    for k, d in enumerate(docs):
        assert tok.decode_bytes(be[k]) == d


WORDISH = st.sampled_from([b"a", b"e", b" ", b"  ", b"\n", b"1", b"=", b"\xc4\xb1", b"th", b"\t"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(WORDISH, max_size=400).map(b"".join), min_size=1, max_size=4))
def test_random_wordish_text(tok, merges, docs):
    check_batch(tok, docs, merges)


@pytest.fixture(scope="module")
def sliced(vocab):
    """Slices of ~128 bytes and a minimal walk budget: every boundary case in small inputs."""
    return Tokenizer(vocab, max_slice_bytes=128, thread_budget=1, chunk_bytes=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(WORDISH, max_size=300).map(b"".join), min_size=1, max_size=5))
def test_random_text_sliced_and_continued(sliced, merges, docs):
    check_batch(sliced, docs, merges)


def test_long_words_across_chunks_and_budget(vocab, merges):
    # Budget of 7 walk steps per thread: every word longer than ~3 bytes needs continuation
    # dispatches; the result must not change.
    small = Tokenizer(vocab, thread_budget=7, chunk_bytes=8)
    docs = [b"a" * 5000, b" " * 3000 + b"x", "yakınlık " * 50, b"=" * 777 + b"ab" * 500, b"q"]
    docs += corpus_docs("tr_manpages", 6_000)
    check_batch(small, docs, merges)
    assert small._session().continuation_dispatches > 0


def test_multi_pass_slicing(vocab, merges):
    docs = corpus_docs("web_html", 30_000, max_doc_bytes=3_000) + [b"a" * 2500, b"", b" " * 1500]
    docs += corpus_docs("tr_ud_boun", 4_000)
    total = sum(len(reference.to_bytes(d)) for d in docs)
    for limit in (256, 1000, 4096):
        t = Tokenizer(vocab, max_slice_bytes=limit)
        assert t._session().limit <= max(limit, 2 * t.trie.max_depth + 8)
        assert total > 3 * t._session().limit
        check_batch(t, docs, merges)
        assert t._session().slices > total // t._session().limit
    # A word longer than a slice, with a tiny budget too.
    t = Tokenizer(vocab, max_slice_bytes=300, thread_budget=50)
    check_batch(t, [b"ab" * 2000, b"x" + b"a" * 1999, "ğ" * 900], merges)


def test_async_submit_double_buffered(tok, merges):
    batches = [corpus_docs(n, 8_000, max_doc_bytes=1_500) for n in
               ("en_fortunes", "multi_xquad", "code_cpython_stdlib", "tr_libreoffice_help",
                "web_pypi_readmes")]
    want = [ref_batch(b, merges) for b in batches]
    p1 = tok.submit(batches[0])
    p2 = tok.submit(batches[1])
    r1 = p1.result()
    p3 = tok.submit(batches[2])
    r2 = p2.result()
    p4 = tok.submit(batches[3])
    assert not p3.done() and not p4.done()
    p5 = tok.submit(batches[4])  # two pending: completes the oldest (p3) first, internally
    assert p3.done() and not p4.done()
    got = [r1, r2, p3.result(), p4.result(), p5.result()]
    assert [r.tolist() for r in got] == want
    assert p1.result() is r1


def test_next_batch_staged_while_two_are_in_flight(vocab, merges):
    """With two batches pending, a submit writes its batch into the oldest one's upload buffer
    before reading that one back (the GPU meanwhile runs the newest); a batch larger than that
    slot's buffers is read back first instead. The ids are the same either way."""
    sizes = [4_000, 4_000, 3_000, 12_000, 2_000, 2_500]
    names = ["en_fortunes", "multi_xquad", "web_html", "code_cpython_stdlib",
             "tr_libreoffice_help", "multi_emoji"]
    batches = [corpus_docs(n, k, max_doc_bytes=700) for n, k in zip(names, sizes)]
    tok = Tokenizer(vocab)  # fresh slots: their buffers are sized by these batches
    pending, got = [], []
    for b in batches:
        pending.append(tok.submit(b))
        if len(pending) > 2:
            got.append(pending.pop(0).result())
    got += [p.result() for p in pending]
    assert [r.tolist() for r in got] == [ref_batch(b, merges) for b in batches]
    # staged: batches 3, 5 and 6 (into the slots of batches 1, 3 and 4); batch 4 (12 kB) is
    # larger than batch 2's slot (4 kB) and waits for batch 2's readback instead
    assert tok._session().staged_ahead == 3


def test_readback_queued_before_the_next_batch(tok, merges, monkeypatch):
    """Submitting batch k + 1 first queues batch k's readback (before k + 1's passes: queued
    after them, it would wait for all of them); a readback that fails there is raised by batch
    k's own result(), and the batches after it are unaffected."""
    from torch_gpubpe.encoding.tokenizer import _Slot
    from torch_gpubpe.errors import GPUOperationError

    a, b, c = (corpus_docs(n, 4_000, max_doc_bytes=800)
               for n in ("en_fortunes", "multi_xquad", "web_html"))
    p1 = tok.submit(a)
    assert not p1._readback_queued
    p2 = tok.submit(b)
    assert p1._readback_queued and not p2._readback_queued
    assert p1.result().tolist() == ref_batch(a, merges)

    def fail(self, specials=None):
        raise GPUOperationError("injected readback failure")

    with monkeypatch.context() as m:
        m.setattr(_Slot, "submit_readback", fail)
        p3 = tok.submit(c)  # queues p2's readback, which fails: kept for p2
    with pytest.raises(GPUOperationError, match="injected"):
        p2.result()
    assert p3.result().tolist() == ref_batch(c, merges)
    assert tok.encode_batch(b).tolist() == ref_batch(b, merges)


def test_empty_batches(tok):
    for docs in ([], [""], ["", b"", ""]):
        be = tok.encode_batch(docs)
        assert len(be) == len(docs) and len(be.ids) == 0 and (be.offsets == 0).all()
    be = tok.encode_batch(iter(["", "ab", "", "c", ""]))  # any iterable; empties between
    assert be.offsets.tolist() == [0, 0, len(be[1]), len(be[1]), len(be.ids), len(be.ids)]


def test_threads_share_a_tokenizer(tok, merges):
    import threading

    docs = corpus_docs("en_fortunes", 6_000, max_doc_bytes=500)
    want = ref_batch(docs, merges)
    errors = []

    def work():
        try:
            for _ in range(3):
                assert tok.encode_batch(docs).tolist() == want
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
        assert not t.is_alive(), "a thread is stuck in the tokenizer"
    assert not errors, errors


def test_pickle_without_session(tok, merges):
    import pickle

    tok.encode("x")  # the session exists
    clone = pickle.loads(pickle.dumps(tok))
    assert clone._sess is None and clone.vocab == tok.vocab
    assert clone.encode("pickled ok") == reference.encode("pickled ok", merges)


def test_input_errors(tok):
    with pytest.raises(InputError, match="document 2"):
        tok.encode_batch(["a", b"b", 3])
    with pytest.raises(InputError):
        tok.encode(12)
    with pytest.raises(InputError):
        tok.encode_batch("not a list")
    with pytest.raises(ValueError, match="position 1"):
        tok.decode([1, 10**6])
    with pytest.raises(ValueError, match="position 0"):
        tok.decode_bytes(np.array([-1], np.int64))


def test_decode_matches_vocab(tok, vocab):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab.num_tokens, 500)
    assert tok.decode_bytes(ids) == vocab.decode_bytes(ids.tolist())
    assert tok.decode_bytes(ids.astype(np.uint16)) == vocab.decode_bytes(ids.tolist())
    assert tok.decode(iter(ids.tolist())) == vocab.decode(ids.tolist())
    assert tok.decode_bytes(np.zeros(0, np.uint16)) == b""


@pytest.mark.parametrize("chunk", [4, 64])
def test_chunk_sizes(vocab, merges, chunk):
    docs = corpus_docs("en_novels", 12_000, max_doc_bytes=4_000) + [b"b" * 300]
    check_batch(Tokenizer(vocab, chunk_bytes=chunk), docs, merges)


def test_u32_ids_and_duplicate_spellings():
    # > 65,536 ids: ids come back as uint32. Random merges (left: any id, right: a letter)
    # repeat pairs, so many byte strings are spelled twice: the smallest id must win.
    rng = np.random.default_rng(1)
    letters = np.frombuffer(b"abc", np.uint8)
    merges = []
    for k in range(70_000 - 256):
        left = int(rng.integers(0, 256 + k)) if k % 3 else int(rng.choice(letters))
        merges.append((left, int(rng.choice(letters))))
    vocab = Vocab.from_merges(merges)
    t = Tokenizer(vocab)
    assert t.id_dtype == np.uint32
    tb = vocab.token_bytes
    first = {}
    for i, b in enumerate(tb):
        first.setdefault(b, i)
    high = [i for i in range(1 << 16, len(tb)) if first[tb[i]] == i][:40]
    assert len(high) == 40 and len({first[b] for b in tb}) < len(tb)  # duplicates exist
    docs = [b" ".join(tb[i] for i in high), b"ab ab  abc\ncab" * 20, b"", b"c",
            b"".join(tb[i] for i in high[:5]) + b"caab"]
    ids = t.encode_batch(docs)
    assert ids.ids.dtype == np.uint32
    assert ids.tolist() == ref_batch(docs, merges)
    assert ids[0][0] == high[0] and int(ids.ids.max()) >= 1 << 16


def test_no_subgroup_path_forced(vocab, merges):
    had_subgroups = gpumod.get_gpu().has_subgroups  # (lavapipe and most GPUs have them)
    assert had_subgroups, "this test forces the no-subgroup path on an adapter that has them"
    docs = corpus_docs("multi_udhr", 15_000, max_doc_bytes=3_000) + [b"a" * 700]
    old = os.environ.get(gpumod.ENV_NO_SUBGROUPS)
    os.environ[gpumod.ENV_NO_SUBGROUPS] = "1"
    gpumod.reset_gpu()
    try:
        plain = Tokenizer(vocab, max_slice_bytes=2048, thread_budget=100)
        assert not plain._session().gpu.has_subgroups
        check_batch(plain, docs, merges)
    finally:
        if old is None:
            os.environ.pop(gpumod.ENV_NO_SUBGROUPS, None)
        else:
            os.environ[gpumod.ENV_NO_SUBGROUPS] = old
        gpumod.reset_gpu()
    assert gpumod.get_gpu().has_subgroups == had_subgroups


@pytest.mark.heavy
def test_heavy_corpora_and_megabyte_words():
    """For a real GPU (``pytest -m heavy``): MBs per corpus, a larger vocab, 1 MB words."""
    train = []
    for name in CORPUS_NAMES:
        train += corpus_docs(name, 60_000)
    merges = reference.train(train, vocab_size=8192, min_frequency=2)
    t = Tokenizer(Vocab.from_merges(merges))
    for name in CORPUS_NAMES:
        check_batch(t, corpus_docs(name, 2_000_000, max_doc_bytes=400_000), merges)
    check_batch(t, [b"a" * (1 << 20), b" " * (1 << 20) + b"x", b"=-" * (1 << 19)], merges)


def test_docstring_examples():
    import doctest

    import torch_gpubpe.encoding.tokenizer as encoder_mod
    import torch_gpubpe.core.trie as trie_mod

    for mod in (encoder_mod, trie_mod):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


@pytest.mark.parametrize("k", [1, 2, 3])
def test_prefix_sum_over_many_blocks(vocab, merges, k):
    """Slices of more than 256 blocks (256 threads × 4-byte chunks per block): the prefix sum's
    threads then add several blocks each. Real text of 256·1024·k ± 1 bytes."""
    text = "".join(corpus_docs("en_novels", 300_000 * k, max_doc_bytes=100_000))
    data = text.encode()
    n = 256 * 1024 * k
    tok4 = Tokenizer(vocab, chunk_bytes=4)
    for size in (n - 1, n + 1):
        doc = data[:size]
        assert tok4.encode_batch([doc, b"x", doc[:1000]]).tolist() == ref_batch(
            [doc, b"x", doc[:1000]], merges)


@pytest.mark.heavy  # ~70 s on lavapipe with 2 cores; run on the lent GPU
def test_two_dimensional_grid(vocab, merges):
    """A slice needing more than 65,535 workgroups (2-D dispatch grid): ~65 MiB with 4-byte
    chunks, made of a few real documents repeated; each copy must equal its source's encoding."""
    srcs = [d.encode() for d in corpus_docs("multi_xquad", 40_000, max_doc_bytes=3_000)[:8]]
    srcs.append(b"a" * 4097)
    want = {s: w for s, w in zip(srcs, ref_batch(srcs, merges))}
    need = 65_536 * 256 * 4 + 10_000
    reps = need // sum(map(len, srcs)) + 1
    docs = srcs * reps
    tok4 = Tokenizer(vocab, chunk_bytes=4)
    be = tok4.encode_batch(docs)
    assert int(be.offsets[-1]) == sum(len(want[d]) for d in srcs) * reps
    for k in range(0, len(docs), 97):  # a spread of copies, all positions in the slice
        assert be[k].tolist() == want[docs[k]], f"document {k}"
    assert be[len(docs) - 1].tolist() == want[docs[-1]]
