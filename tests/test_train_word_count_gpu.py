"""GPU word counting (wgsl/wordcount.wgsl, torch_gpubpe.training.gpu_counter.count_words_gpu) against
``reference.count_words`` (DESIGN.md §2 words): the same words with the same counts, on every
corpus and on inputs that exercise each path — batches, table growth (rehash), the word store
growing, words at and past the GPU's length limit, documents larger than a batch, and the CPU
fallback after a probe sequence runs out. Sizes are small: lavapipe runs on 2 CPU cores.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from conftest import CORPUS_NAMES, corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.training import gpu_counter
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.batches import document_batches
from torch_gpubpe.training.gpu_counter import MAXW, GPUWordCounter, count_words_gpu
from torch_gpubpe.training.word_counts import WordCounts

pytestmark = pytest.mark.gpu


def gpu_counts(docs, **kw) -> dict[bytes, int]:
    wc = count_words_gpu(docs, **kw)
    assert isinstance(wc, WordCounts)
    assert wc.data.dtype == np.uint8 and wc.lengths.dtype == np.int64
    assert wc.counts.dtype == np.uint64
    d = wc.to_dict()
    assert len(d) == len(wc), "a word came out twice"
    return d


def ref_counts(docs) -> dict[bytes, int]:
    return dict(reference.count_words(docs))


@pytest.mark.parametrize("corpus", CORPUS_NAMES)
def test_counts_equal_reference_on_every_corpus(corpus):
    docs = corpus_docs(corpus, 60_000)
    info: dict = {}
    assert gpu_counts(docs, info=info) == ref_counts(docs)
    assert info["num_documents"] == len(docs)
    assert info["corpus_bytes"] == sum(len(reference.to_bytes(d)) for d in docs)


def test_many_batches_table_growth_and_store_growth():
    """Small batches and a table that starts at 64 slots: rehashes into larger tables and
    store copies happen many times; counts stay exact."""
    docs = (corpus_docs("multi_xquad", 120_000, max_doc_bytes=2_000)
            + corpus_docs("code_cpython_headers", 60_000, max_doc_bytes=2_000))
    counter = GPUWordCounter(batch_bytes=9_000, min_slots=64, min_store=64)
    for data, offsets in document_batches(docs, counter.batch_bytes, {}):
        counter.add_batch(data, offsets)
    got = counter.result().to_dict()
    assert counter.slots >= 4096 and counter.store_cap > 1_000   # both grew (from 64)
    assert not counter.cpu_has_short_words
    assert got == ref_counts(docs)


def _add_all(counter, docs) -> list[int]:
    """Count ``docs`` batch by batch; each batch's word starts (reference words counted)."""
    starts = []
    for data, offsets in document_batches(docs, counter.batch_bytes, {}):
        batch = [data[offsets[k]:offsets[k + 1]].tobytes() for k in range(len(offsets) - 1)]
        starts.append(sum(reference.count_words(batch).values()))
        counter.add_batch(data, offsets)
    return starts


def test_table_sized_by_the_share_of_new_words_is_smaller_and_exact():
    """Real text (a novel read four times) adds far fewer new words than it has word starts:
    the table is sized for NEW_WORDS_MARGIN × the share of new words seen, no batch is
    counted again, the table ends at most half the size that sizing for every word start
    gives, and the counts are exact."""
    docs = corpus_docs("en_novels", 500_000, max_doc_bytes=500_000) * 4
    counter = GPUWordCounter(batch_bytes=512 << 10, min_slots=64, min_store=64)
    starts = _add_all(counter, docs)
    got = counter.result().to_dict()
    assert got == ref_counts(docs)
    assert counter.estimate_retries == 0
    bound = 1 << (2 * (len(got) + max(starts)) - 1).bit_length()   # every start new
    assert 2 * counter.slots <= bound, (counter.slots, bound)
    assert 0 < counter.new_words_rate < gpu_counter.FIRST_NEW_WORDS


def test_more_new_words_than_guessed_are_counted_again_exactly(monkeypatch):
    """Every word distinct (the guess of FIRST_NEW_WORDS is far too low): the batch overfills
    the table, is undone and counted again into a table sized for every word start; the
    counts are exact, the retries counted."""
    monkeypatch.setattr(gpu_counter, "MIN_NEW_WORDS", 16)
    def word(i: int, k: int) -> str:      # letters only: one word start per word
        return "".join(chr(97 + i // 26 ** j % 26) for j in range(4)) + chr(97 + k)

    docs = [" ".join(word(i, k) for i in range(4_000)) for k in range(6)]
    counter = GPUWordCounter(batch_bytes=40_000, min_slots=64, min_store=64)
    _add_all(counter, docs)
    assert counter.result().to_dict() == ref_counts(docs)
    assert counter.estimate_retries >= 1
    assert counter.new_words_rate > 0.9


def test_retries_double_the_guess_even_when_batches_end_on_the_cpu(monkeypatch):
    """Probe sequences of 2 (colliding hashes run out): batches overflow whatever the guess and
    end on the CPU, which teaches no share of new words; each retry still doubles the next
    guess, so a few batches are counted again, not every one. Counts exact."""
    monkeypatch.setattr(gpu_counter, "MIN_NEW_WORDS", 16)
    rnd = random.Random(7)

    def word() -> str:
        return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3))

    # a first batch of one repeated long word (a tiny table, a low share), then dense new
    # words (three letters and a digit: two word starts each)
    docs = [(" " + "a" * 200) * 20] + ["".join(word() + str(i % 10) for i in range(1000))
                                       for _ in range(30)]
    counter = GPUWordCounter(batch_bytes=4_096, min_slots=64, min_store=64, max_probe=2)
    batches = len(_add_all(counter, docs))
    assert counter.result().to_dict() == ref_counts(docs)
    assert batches >= 12 and 1 <= counter.estimate_retries <= 4, (batches, counter.estimate_retries)


def test_word_length_limit_and_long_words():
    """Words of MAXW bytes stay on the GPU, longer ones are counted on the host; runs of one
    byte class (spaces, letters, digits) and long words that recur."""
    docs = ["a" * MAXW, "a" * MAXW, "b" * (MAXW + 1), " " + "c" * (MAXW - 1), "x" * 5000,
            "x" * 5000 + " y", " " * 3000 + "z", "7" * 1000, "é" * 400, "a" * (MAXW - 1)]
    assert gpu_counts(docs) == ref_counts(docs)


def test_document_larger_than_a_batch_and_empty_documents():
    big = " ".join(corpus_docs("en_fortunes", 30_000))
    docs = ["", big, "", "tail words", big[:500], "", big[:3_000], big[3_000:9_000]]
    counter = GPUWordCounter(max_batch_bytes=8_000)
    assert counter.batch_bytes == 4_000
    for data, offsets in document_batches(docs, 20_000, {}):     # batches over the limit: split
        counter.add_batch(data, offsets)
    assert counter.cpu_has_short_words                            # big went to the CPU
    assert counter.result().to_dict() == ref_counts(docs)
    assert gpu_counts(docs, _counter_kw={"max_batch_bytes": 8_000}) == ref_counts(docs)


def test_batch_with_too_many_words_for_the_table_is_split():
    """A batch whose words could overfill the largest table is split at document boundaries
    (halves, recursively); one document with too many words is counted on the CPU; once the
    table is full of distinct words the rest is counted on the CPU: nothing is lost."""
    docs = ["the cat sat " * 100] * 20 + ["on the mat " * 2000] + ["a b c"] * 3
    counter = GPUWordCounter(min_slots=64, max_slots=8192)
    for data, offsets in document_batches(docs, 1 << 20, {}):      # all in one batch: 9,000 words
        counter.add_batch(data, offsets)
    assert counter.cpu_has_short_words          # the 6,000-word document went to the CPU
    assert counter.result().to_dict() == ref_counts(docs)
    def letters(k: int) -> str:      # distinct letter-only words (digits would split them)
        return "".join(chr(97 + (k // 26 ** e) % 26) for e in range(3))

    distinct = [" ".join(letters(50 * i + j) for j in range(50)) for i in range(60)]
    counter = GPUWordCounter(batch_bytes=2_000, min_slots=64, max_slots=4096)
    for data, offsets in document_batches(distinct, counter.batch_bytes, {}):
        counter.add_batch(data, offsets)
    assert counter.table_full
    assert counter.result().to_dict() == ref_counts(distinct)


def test_probe_overflow_falls_back_to_the_cpu_exactly():
    """With one probe per word every collision overflows: the batch is undone on the GPU and
    counted on the CPU; earlier and later batches stay on the GPU; the merge is exact."""
    docs = corpus_docs("tr_ud_boun", 40_000, max_doc_bytes=1_500)
    counter = GPUWordCounter(batch_bytes=5_000, min_slots=64, max_probe=1)
    fell_back = []
    for data, offsets in document_batches(docs, counter.batch_bytes, {}):
        before = len(counter.extra)
        counter.add_batch(data, offsets)
        fell_back.append(len(counter.extra) > before)
    assert any(fell_back)
    assert gpu_counts(docs, batch_bytes=5_000,
                      _counter_kw={"max_probe": 1, "min_slots": 64}) == ref_counts(docs)


def test_rehash_overflow_moves_the_words_to_the_cpu_exactly():
    """With one probe per word, moving the words into a grown table overflows: the words
    counted so far and everything after are counted on the CPU; nothing is lost (found by a
    hostile-input review: it used to raise)."""
    docs = ["w637", "w261", "w759", "w367", "w814", "w707", "w965", "w861"] * 3
    counter = GPUWordCounter(batch_bytes=1, min_slots=4, max_probe=1)
    for data, offsets in document_batches(docs, counter.batch_bytes, {}):
        counter.add_batch(data, offsets)
    assert counter.table_full
    assert counter.result().to_dict() == ref_counts(docs)


def test_random_bytes_and_str_inputs():
    rnd = random.Random(7)
    docs = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 2_000))) for _ in range(40)]
    docs += ["lone \ud800 surrogate", "naïve café", b"\x00\xff bytes", bytearray(b"ba ba")]
    assert gpu_counts(docs, batch_bytes=7_000) == ref_counts(docs)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hst.lists(hst.text(alphabet="ab \n.1é", max_size=80), max_size=25))
def test_random_documents(docs):
    assert gpu_counts(docs, batch_bytes=300) == ref_counts(docs)


def test_bad_input_is_named():
    with pytest.raises(InputError, match="one str/bytes"):
        count_words_gpu("a single string")
    with pytest.raises(InputError, match="document 1"):
        count_words_gpu(["ok", 3])
    for bad in (5, None):
        with pytest.raises(InputError, match="iterable of documents"):
            count_words_gpu(bad)
    released = memoryview(b"gone")
    released.release()
    with pytest.raises(InputError, match="document 2"):
        count_words_gpu(["ok", b"fine", released])


@pytest.mark.heavy
def test_heavy_counts_equal_the_cpu_counter_at_corpus_scale():
    """Every corpus whole (≈116 MB: batches of 64 MiB, long words, big tables) on the real GPU
    against the vectorised CPU counter (itself checked against the reference elsewhere)."""
    from torch_gpubpe.training.wordcount import count_words

    docs: list[str] = []
    for name in CORPUS_NAMES:
        docs += corpus_docs(name, 40_000_000, max_doc_bytes=20_000_000)
    assert count_words_gpu(docs).to_dict() == dict(count_words(docs))


def test_counts_carry_past_two_to_the_32():
    """Counts are 64-bit: with every count set just below 2^32 on the GPU, a second batch of
    the same words carries into the high word exactly."""
    docs = ["aa bb aa cc aa", "bb dd"] * 3
    counter = GPUWordCounter()
    for data, offsets in document_batches(docs, 1 << 20, {}):
        counter.add_batch(data, offsets)
    first = ref_counts(docs)
    base = (1 << 32) - 2
    occupied = np.zeros(counter.slots, bool)
    keys = counter.g.read_u32(counter.keys, 0, counter.slots)
    occupied[keys != 0] = True
    lo = np.where(occupied, np.uint32(base & 0xFFFFFFFF), np.uint32(0)).astype(np.uint32)
    counts = np.zeros((counter.slots, 2), np.uint32)
    counts[:, 0] = lo
    counter.g.device.queue.write_buffer(counter.counts, 0, counts)
    for data, offsets in document_batches(docs, 1 << 20, {}):
        counter.add_batch(data, offsets)
    got = counter.result().to_dict()
    assert got == {w: base + c for w, c in first.items()}
    assert all(v > (1 << 32) for v in got.values())
