"""Peer check: rustbpe with the DESIGN.md §2 regex learns exactly the reference's merges."""

from __future__ import annotations

import pytest
import rustbpe  # a test extra: pip install '.[test]'

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.core.vocab import SPLIT_PATTERN


def rustbpe_token_bytes(docs, vocab_size):
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), vocab_size, pattern=SPLIT_PATTERN)
    return [bytes(b) for b, _ in sorted(tok.get_mergeable_ranks(), key=lambda kv: kv[1])]


@pytest.mark.parametrize(
    "corpus", ["en_fortunes", "tr_ud_boun", "tr_manpages", "code_cpython_headers", "multi_xquad"]
)
def test_reference_merges_equal_rustbpe(corpus):
    docs = corpus_docs(corpus, 150_000)
    merges = reference.train(docs, 800, min_frequency=1)
    assert len(merges) == 800 - 256
    assert reference.token_bytes(merges) == rustbpe_token_bytes(docs, 800)
