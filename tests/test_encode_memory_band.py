"""Long runs keep host memory in a fixed band after warm-up: 200,000 small ``encode_batch`` calls,
and a 1 GB streaming epoch of ``TokenizedDataset`` (documents made on the fly, none kept). On
lavapipe the GPU's buffers are host memory too, so the resident set covers both."""

from __future__ import annotations

import itertools

import pytest

from conftest import shared_vocab
from torch_gpubpe.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.gpu
MiB = 1 << 20


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_200k_small_calls_keep_memory_in_a_band():
    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="gpt2")
    docs = [f"a small document, number {k}: it's short" for k in range(4)]
    for _ in range(2_000):                       # warm-up: buffers, caches, allocator pools
        tok.encode_batch(docs)
    samples = []
    for k in range(200_000):
        tok.encode_batch(docs)
        if k % 5_000 == 0:
            samples.append(rss())
    assert max(samples) - min(samples) < 32 * MiB, [s // MiB for s in samples]
    assert tok.encode_batch(docs).tolist() == [tok.encode(d) for d in docs]


def test_a_1gb_streaming_epoch_keeps_memory_in_a_band():
    from torch_gpubpe.integrations.torch_data import TokenizedDataset

    words = ["alpha", "beta", "gamma", "delta", "it's", "42", "\n", "naïve", "日本"]

    def documents():   # ~1 GB, made on the fly
        for k in itertools.count():
            yield " ".join(words[(k + j) % len(words)] for j in range(2_000))

    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="gpt2")
    doc_bytes = len(next(documents()).encode())
    n = (1 << 30) // doc_bytes
    ds = TokenizedDataset(itertools.islice(documents(), n), tok, mode="packed", seq_len=1024)
    samples, tokens = [], 0
    for k, item in enumerate(ds):
        tokens += item["input_ids"].numel()
        if k % 2_000 == 0:
            samples.append(rss())
    warm = samples[len(samples) // 10:]
    assert tokens > 200_000_000
    assert max(warm) - min(warm) < 128 * MiB, [s // MiB for s in samples]
