"""Counting MB-long words under a memory budget: the paths count_budget takes for
them are exact.

| case | expected | test |
|---|---|---|
| few long words, repeats, prefixes of each other, in several parts, some with counts | group_words (digest path) == Counter of the words | test_group_few_long_words_is_exact |
| long words written by write_long_counts (1 MB row groups, words above and below a group) | read_counts == the words; sorted as write_counts sorts; a repeated word / count 0 refused | test_write_long_counts_round_trips_in_counts_order |
| runs of long words merged (iter_merged reads them a row group at a time) | == the summed counts, in order; a run's batches hold about BATCH_BYTES | test_merged_long_word_runs_equal_the_summed_counts |
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from torch_gpubpe.training import counts_file as cmod
from torch_gpubpe.training import counts_merge
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.wordcount import LONG_GROUP_BYTES, WordCounts, group_words


def _words(seed: int, n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = [bytes((rng.integers(0, 3, int(rng.integers(size // 2, size))) + 97).astype(np.uint8))
           for _ in range(n)]
    # prefixes of each other, and a shared 64 KB head that differs only at the end
    out += [out[0][: len(out[0]) // 2], out[0] + b"a", b"b" * size, b"b" * size + b"c"]
    return out


def _wc(d: dict[bytes, int]) -> WordCounts:
    words = list(d)
    return WordCounts(np.frombuffer(b"".join(words), np.uint8).copy(),
                      np.array([len(w) for w in words], np.int64),
                      np.array([d[w] for w in words], np.uint64))


def _as_dict(wc: WordCounts) -> dict[bytes, int]:
    o = wc.offsets()
    return {wc.data[o[k]:o[k + 1]].tobytes(): int(wc.counts[k]) for k in range(len(wc))}


def test_group_few_long_words_is_exact():
    words = _words(1, 12, 300_000)
    seq = words + words[:5] + words[3:4] * 3          # repeats
    want = Counter(seq)
    half = len(seq) // 2
    part1 = (np.frombuffer(b"".join(seq[:half]), np.uint8).copy(),
             np.array([len(w) for w in seq[:half]], np.int64))
    grouped = _wc(Counter(seq[half:]))                # a part with counts (grouped before)
    parts = [part1, (grouped.data, grouped.lengths, grouped.counts)]
    assert sum(len(w) for w in seq) >= LONG_GROUP_BYTES * len(seq)   # the digest path
    wc = group_words(parts)
    assert parts == []                                # the caller's list is emptied
    assert _as_dict(wc) == dict(want) and len(wc) == len(want)


@pytest.mark.parametrize("seed", [3, 4])
def test_group_many_words_by_arrow_is_exact(seed):
    """The other path (many words, or short ones: Arrow's dictionary encoding, uint64 sums):
    random words of 1-300 bytes with repeats, prefixes of each other and all 256 byte values,
    over parts with and without counts, one count above 2^40; equal to a Counter."""
    rng = np.random.default_rng(seed)
    words = [rng.integers(0, 256, int(rng.integers(1, 300))).astype(np.uint8).tobytes()
             for _ in range(3_000)]
    words += [w[: len(w) // 2] for w in words[:500] if len(w) > 1] + [bytes(range(256))]
    seq = [words[int(i)] for i in rng.integers(0, len(words), 20_000)]
    want = Counter(seq)
    third = len(seq) // 3
    plain = (np.frombuffer(b"".join(seq[:third]), np.uint8).copy(),
             np.array([len(w) for w in seq[:third]], np.int64))
    counted = Counter(seq[third:])
    counted[seq[0]] += 1 << 41
    want[seq[0]] += 1 << 41
    grouped = _wc(counted)
    parts = [plain, (grouped.data, grouped.lengths, grouped.counts)]
    assert sum(len(w) for w in seq) < LONG_GROUP_BYTES * len(seq)     # not the digest path
    wc = group_words(parts)
    assert _as_dict(wc) == dict(want) and len(wc) == len(want)
    assert wc.counts.dtype == np.uint64


def test_write_long_counts_round_trips_in_counts_order(tmp_path):
    d = Counter(_words(2, 9, 700_000))
    d[b"x" * 3_000_000] = 7                           # one word above a row group
    wc = _wc(d)
    p = cmod.write_long_counts(wc, tmp_path / "long.parquet")
    back = cmod.read_counts(p)
    assert _as_dict(back) == dict(d)
    q = cmod.write_counts(wc, tmp_path / "plain.parquet")
    a = [w for w, _ in cmod.iter_count_batches(p, 2) for w in w.to_pylist()]
    b = [w for w, _ in cmod.iter_count_batches(q, 1 << 16) for w in w.to_pylist()]
    assert a == b == sorted(d)                        # memcmp order, like write_counts
    dup = WordCounts(np.concatenate([wc.data, wc.data[: wc.lengths[0]]]),
                     np.concatenate([wc.lengths, wc.lengths[:1]]),
                     np.concatenate([wc.counts, wc.counts[:1]]))
    with pytest.raises(InputError, match="twice"):
        cmod.write_long_counts(dup, tmp_path / "dup.parquet")
    zero = WordCounts(wc.data, wc.lengths, np.zeros(len(wc), np.uint64))
    with pytest.raises(InputError, match="count of 0"):
        cmod.write_long_counts(zero, tmp_path / "zero.parquet")


def test_merged_long_word_runs_equal_the_summed_counts(tmp_path):
    words = _words(3, 10, 500_000)
    runs, total = [], Counter()
    rng = np.random.default_rng(4)
    for r in range(4):
        pick = {words[int(i)]: int(rng.integers(1, 5)) for i in rng.choice(len(words), 7,
                                                                            replace=False)}
        total.update(pick)
        runs.append(cmod.write_long_counts(_wc(pick), tmp_path / f"run{r}.parquet"))
    assert counts_merge._rows_within(runs[0], 1 << 16) <= 3  # about BATCH_BYTES (1 MB) per batch
    got = []
    for w, c in cmod.iter_merged(runs, 1 << 16):
        got += list(zip(w.to_pylist(), c.tolist()))
    assert got == sorted(total.items())
