"""Adapters reporting storage bindings of 4 GiB and more: no size the host
derives from the limits lets a shader index pass 2^31 (every index is a u32 in WGSL), and the
pipelines stay exact under such limits. (The encoder's own slices:
tests/test_encode_long_words.py::test_slice_limit_keeps_positions_32_bit.)"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import corpus_docs
from torch_gpubpe.gpu import device as gpumod
from torch_gpubpe.core import reference
from torch_gpubpe.encoding import regex_pretok as unicode_pretok

pytestmark = pytest.mark.gpu

BIG = [1 << 32, 1 << 36, (1 << 40) + 12345]


@pytest.fixture(params=BIG, ids=["4GiB", "64GiB", "1TiB"])
def big_limits(request, monkeypatch):
    g = gpumod.get_gpu()
    monkeypatch.setattr(g, "max_storage_binding", request.param)
    monkeypatch.setattr(g, "max_buffer_size", request.param)
    monkeypatch.setattr(unicode_pretok, "_CACHE", {})  # built under the real limits
    return g


def test_derived_sizes_keep_indices_below_2_31(big_limits):
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.encoding.pretokenize import GPUPreTokenizer
    from torch_gpubpe.core.vocab import Vocab
    from torch_gpubpe.training.wordcount import GPUWordCounter

    g = big_limits
    for e in (1, 4, 8):
        assert g.binding_bytes(e) == min(e << 31, g.max_storage_binding)
    assert GPUPreTokenizer(g).max_slice_bytes < 1 << 31                  # 4 B out per byte
    assert unicode_pretok.UnicodePreTokenizer("gpt2").max_slice_bytes <= 1 << 31
    wc = GPUWordCounter()
    assert 2 * wc.max_slots <= 1 << 31 and wc.max_batch < 1 << 31      # (lo, hi) per slot
    sess = Tokenizer(Vocab.from_merges([(97, 98)]))._session()
    assert sess.max_docs < 1 << 31


def test_pipelines_exact_under_large_limits(big_limits):
    from torch_gpubpe.core.patterns import reference_word_starts
    from torch_gpubpe.training.trainer import train
    from torch_gpubpe.encoding.regex_pretok import word_starts
    from torch_gpubpe.training.wordcount import count_words_gpu

    docs = corpus_docs("multi_udhr", 20_000, max_doc_bytes=2_000) + ["a" * 3000, ""]
    assert count_words_gpu(docs).to_dict() == dict(reference.count_words(docs))
    for d, got in zip(docs, word_starts(docs, "cl100k")):
        assert np.array_equal(got, reference_word_starts(d, "cl100k"))
    assert list(train(docs, 300, min_frequency=2).merges) == reference.train(docs, 300, 2)


def test_trainer_stream_limit_boundary(monkeypatch):
    """The stream of unique-word symbols must fit one binding (4 B each): at the boundary it
    trains, one element below it is a named error before any GPU work."""
    from torch_gpubpe.errors import InputError
    from torch_gpubpe.training.trainer import train

    docs = [f"abcdefgh{i} " * 3 for i in range(300)]
    st: dict = {}
    want = train(docs, 270, stats=st)
    n = st["stream_symbols"]
    g = gpumod.get_gpu()
    monkeypatch.setattr(g, "max_storage_binding", 4 * (n + 64))
    # (words counted on the CPU: the GPU counter has its own, larger minimum buffers)
    assert train(docs, 270, count_on="cpu").merges == want.merges
    monkeypatch.setattr(g, "max_storage_binding", 4 * (n + 64) - 4)
    with pytest.raises(InputError, match=rf"hold {n} symbols; this adapter binds at most {n + 63}"):
        train(docs, 270, count_on="cpu")
