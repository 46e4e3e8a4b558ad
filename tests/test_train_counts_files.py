"""Distributed vocabularies (torch_gpubpe.training.counts_file, `count` / `merge-counts` / `train --counts`).

Counting shards into files, merging the files and training from the result must give the word
counts of reference.count_words on the whole corpus and the merges of train() on the whole
corpus at once (DESIGN.md §3: training depends only on the word counts). Real corpus samples,
split into shards; hypothesis for the merge itself.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import corpus_docs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from torch_gpubpe.cli import main as cli
from torch_gpubpe.core import reference
from torch_gpubpe.training.counts_file import (META_KEY, count_packed, count_to_file, merge_counts,
                                 read_counts, read_metadata, sort_order, train_from_counts_file,
                                 write_counts)
from torch_gpubpe.errors import InputError
from torch_gpubpe.training.trainer import train
from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.training.batches import document_batches
from torch_gpubpe.training.word_counts import WordCounts


@pytest.fixture(scope="module")
def docs() -> list[str]:
    # Several languages, code and markup: many distinct words, long ones, non-ASCII bytes.
    return (corpus_docs("tr_manpages", 30_000, 6_000) + corpus_docs("en_fortunes", 20_000)
            + corpus_docs("code_cpython_headers", 15_000) + corpus_docs("multi_udhr", 15_000)
            + corpus_docs("web_html", 10_000))


def _shards(docs: list[str], k: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(docs)), k - 1))
    return [docs[a:b] for a, b in zip([0, *cuts], [*cuts, len(docs)])]


def _table(path) -> pa.Table:
    return pq.read_table(path).replace_schema_metadata(None)


# -- counts files and the merge ------------------------------------------------------------------
@pytest.mark.gpu
def test_shards_counted_merged_and_trained_equal_the_whole_corpus(tmp_path, docs):
    shards = _shards(docs, 4)
    files = [count_to_file(s, tmp_path / f"s{k}.parquet", count_on="gpu" if k % 2 else "cpu")
             for k, s in enumerate(shards)]
    stats: dict = {}
    merged = merge_counts(files, tmp_path / "all.parquet", batch_rows=97, fan_in=3, stats=stats)
    assert stats["rounds"] == 2                      # 4 files, fan-in 3: one intermediate round
    assert stats["peak_rows_held"] <= 3 * 97
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp files left
    whole = reference.count_words(docs)
    assert read_counts(merged).to_dict() == dict(whole)
    meta = read_metadata(merged)
    assert meta["num_documents"] == len(docs) and meta["num_shards"] == 4
    assert meta["corpus_bytes"] == sum(len(d.encode()) for d in docs)
    assert meta["num_words"] == len(whole) and meta["total_count"] == sum(whole.values())

    direct = train(docs, 600, min_frequency=2, special_tokens=["<|endoftext|>"])
    st: dict = {}
    got = train_from_counts_file(merged, 600, min_frequency=2, special_tokens=["<|endoftext|>"],
                                 stats=st)
    assert got == direct
    assert got.merges == tuple(reference.train(docs, 600, 2, 1))
    assert st["num_documents"] == len(docs) and st["unique_words"] == len(whole)


def test_merge_does_not_depend_on_order_batch_rows_or_fan_in(tmp_path, docs):
    files = [count_to_file(s, tmp_path / f"s{k}.parquet", count_on="cpu")
             for k, s in enumerate(_shards(docs, 5, seed=1))]
    a = merge_counts(files, tmp_path / "a.parquet")
    b = merge_counts(files[::-1], tmp_path / "b.parquet", batch_rows=1, fan_in=2)
    c = merge_counts([a, files[0]], tmp_path / "c.parquet", batch_rows=13)
    ta, tb = _table(a), _table(b)
    assert ta.equals(tb)
    words = ta.column("word").to_pylist()
    assert words == sorted(words) and len(set(words)) == len(words)   # memcmp order, unique
    assert ta.schema.field("count").type == pa.uint64()
    # a merged file merges again: files[0] counted twice
    want = Counter(read_counts(a).to_dict())
    want.update(read_counts(files[0]).to_dict())
    assert read_counts(c).to_dict() == dict(want)
    assert read_metadata(c)["num_shards"] == 6


def test_counts_are_exact_in_64_bits(tmp_path):
    big = (1 << 63, (1 << 63) - 1)
    for k, c in enumerate(big):
        write_counts(WordCounts.from_dict({b"x": c, bytes([k]): 5}), tmp_path / f"{k}.parquet")
    m = merge_counts([tmp_path / "0.parquet", tmp_path / "1.parquet"], tmp_path / "m.parquet")
    assert read_counts(m).to_dict() == {b"\x00": 5, b"\x01": 5, b"x": (1 << 64) - 1}
    assert read_metadata(m)["total_count"] == (1 << 64) - 1 + 10
    write_counts(WordCounts.from_dict({b"x": 1}), tmp_path / "2.parquet")
    with pytest.raises(InputError, match="reaches 2\\^64"):
        merge_counts([m, tmp_path / "2.parquet"], tmp_path / "bad.parquet")
    assert not (tmp_path / "bad.parquet").exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=hst.lists(hst.dictionaries(hst.binary(min_size=1, max_size=12),
                                         hst.integers(1, 1 << 62), max_size=30),
                        min_size=1, max_size=6),
       batch_rows=hst.integers(1, 8), fan_in=hst.integers(2, 4))
def test_merge_equals_counter_sum(tmp_path_factory, shards, batch_rows, fan_in):
    d = tmp_path_factory.mktemp("h")
    files = [write_counts(WordCounts.from_dict(s), d / f"{k}.parquet") for k, s in enumerate(shards)]
    stats: dict = {}
    m = merge_counts(files, d / "m.parquet", batch_rows=batch_rows, fan_in=fan_in, stats=stats)
    want: Counter = Counter()
    for s in shards:
        want.update(s)
    got = read_counts(m)
    assert got.to_dict() == dict(want)
    assert [bytes(w) for w in _table(m).column("word").to_pylist()] == sorted(want)
    assert stats["peak_rows_held"] <= fan_in * batch_rows


_PREFIXES = [b"", b"\0", b"a", b"\0" * 9, b"abcdefgh", b"abcdefghijklmnop", b"\xff" * 17]


@settings(max_examples=200, deadline=None)
@given(hst.lists(hst.binary(max_size=40), max_size=50),
       hst.lists(hst.sampled_from(_PREFIXES), max_size=4))
def test_sort_order_is_arrows_binary_order(words, prefixes):
    # Shared prefixes of 0, 8, 16 and 17+ bytes and zero bytes (the padding of the u64 keys)
    # hit each tie-breaking stage of sort_order; equal words keep their input order.
    words = [p + w for p in prefixes for w in words] + words
    off = np.zeros(len(words) + 1, np.int64)
    np.cumsum([len(w) for w in words], out=off[1:])
    order = sort_order(np.frombuffer(b"".join(words), np.uint8), off)
    assert order.tolist() == sorted(range(len(words)), key=lambda i: words[i])
    if len(words) > 1:
        arr = pa.array(words, pa.large_binary())
        assert order.tolist() == pc.sort_indices(arr).to_pylist()


def test_count_packed_gpu_equals_cpu_equals_reference(docs):
    batches = list(document_batches(docs, 20_000, {}))
    want = dict(reference.count_words(docs))
    assert count_packed(batches, count_on="cpu").to_dict() == want
    assert count_packed(iter(batches), count_on="gpu").to_dict() == want
    with pytest.raises(ValueError, match="count_on"):
        count_packed(batches, count_on="tpu")


# -- bad files -----------------------------------------------------------------------------------
def test_bad_counts_files_are_named(tmp_path):
    good = write_counts(WordCounts.from_dict({b"a": 1, b"b": 2}), tmp_path / "good.parquet")
    head = json.loads(pq.ParquetFile(good).metadata.metadata[META_KEY.encode()])

    def write(name, words, counts, meta):
        t = pa.table({"word": pa.array(words, pa.large_binary()),
                      "count": pa.array(counts, pa.uint64())})
        if meta is not None:
            t = t.replace_schema_metadata({META_KEY: json.dumps(meta)})
        pq.write_table(t, tmp_path / name)
        return tmp_path / name

    unsorted = write("unsorted.parquet", [b"a", b"c", b"b"], [1, 1, 1], head)
    dup = write("dup.parquet", [b"a", b"a"], [1, 1], head)
    zero = write("zero.parquet", [b"a", b"b"], [1, 0], head)
    foreign = write("foreign.parquet", [b"a"], [1], None)
    v2 = write("v2.parquet", [b"a"], [1], {**head, "version": 2})
    other = write("other.parquet", [b"a"], [1], {**head, "pre_tokenizer": "gpt2"})
    out = tmp_path / "m.parquet"
    for path, match in ((unsorted, "unsorted.parquet.*not sorted.*row 2"),
                        (dup, "dup.parquet.*not sorted/unique at row 1"),
                        (zero, "zero.parquet.*count 0 < 1 at row 1"),
                        (foreign, "foreign.parquet.*not a torch_gpubpe.word_counts"),
                        (v2, "v2.parquet.*version 2 is not supported"),
                        (other, "different pre-tokenizers.*gpt2"),
                        (tmp_path / "missing.parquet", "no such counts file")):
        with pytest.raises(InputError, match=match):
            merge_counts([good, path], out, batch_rows=2)
        assert not out.exists()
    with pytest.raises(InputError, match="at least one"):
        merge_counts([], out)
    unknown = write("unknown.parquet", [b"a"], [1], {**head, "pre_tokenizer": "mystery"})
    with pytest.raises(InputError, match="pre-tokenizer 'mystery'"):
        train_from_counts_file(unknown, 300)
    with pytest.raises(InputError, match="twice"):
        write_counts(WordCounts(np.frombuffer(b"aa", np.uint8), np.array([1, 1]),
                                np.array([1, 1], np.uint64)), tmp_path / "x.parquet")


# -- command line --------------------------------------------------------------------------------
def _jsonl(path: Path, docs: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    return path


@pytest.mark.gpu
def test_cli_count_merge_train_equals_train_on_all_files(tmp_path, capsys, docs):
    shards = _shards(docs, 3, seed=2)
    data = [_jsonl(tmp_path / f"d{k}.jsonl.gz", s) for k, s in enumerate(shards)]
    for k, f in enumerate(data):
        assert cli.main(["count", "--data-files", str(f), "--out", str(tmp_path / f"c{k}.parquet"),
                         "--count-on", ("cpu", "gpu")[k % 2], "--no-progress"]) == 0
    assert cli.main(["merge-counts", *(str(tmp_path / f"c{k}.parquet") for k in range(3)),
                     "--out", str(tmp_path / "all.parquet"), "--batch-rows", "50"]) == 0
    assert cli.main(["train", "--counts", str(tmp_path / "all.parquet"), "--vocab-size", "500",
                     "--out", str(tmp_path / "v"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "distinct words" in out and "3 shard(s)" in out
    want = train(docs, 500, min_frequency=2, special_tokens=["<|endoftext|>"])
    assert Vocab.load(tmp_path / "v" / "vocab.json") == want
    # errors: one line, status 2
    assert cli.main(["train", "--counts", str(tmp_path / "all.parquet"), "--data-files",
                     str(data[0])]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["merge-counts", str(data[0]), "--out", str(tmp_path / "x.parquet")]) == 2
    assert "not a Parquet counts file" in capsys.readouterr().err


@pytest.mark.gpu
def test_cli_train_counts_takes_mode_and_the_files_split_and_refuses_no_words(tmp_path, capsys):
    docs = ["hello world hello there, hello again"] * 3
    f = _jsonl(tmp_path / "d.jsonl.gz", docs)
    counts = tmp_path / "c.parquet"
    assert cli.main(["count", "--data-files", str(f), "--out", str(counts),
                     "--pre-tokenizer", "cl100k", "--no-progress"]) == 0
    # --mode bpe reaches the vocab and its exports (a real BPE model in tokenizer.json)
    assert cli.main(["train", "--counts", str(counts), "--vocab-size", "280", "--mode", "bpe",
                     "--pre-tokenizer", "cl100k", "--out", str(tmp_path / "v"),
                     "--no-progress"]) == 0
    v = Vocab.load(tmp_path / "v" / "vocab.json")
    assert (v.mode, v.pre_tokenizer) == ("bpe", "cl100k")
    assert json.loads((tmp_path / "v" / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    capsys.readouterr()
    # another split than the file's: refused, naming both
    assert cli.main(["train", "--counts", str(counts), "--vocab-size", "280",
                     "--pre-tokenizer", "gpt2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--pre-tokenizer gpt2" in err and "'cl100k'" in err
    # a counts file of empty documents: no words, refused as train() refuses an empty corpus
    empty = _jsonl(tmp_path / "e.jsonl.gz", ["", ""])
    assert cli.main(["count", "--data-files", str(empty), "--out", str(tmp_path / "e.parquet"),
                     "--no-progress"]) == 0
    with pytest.raises(InputError, match="empty corpus: the counts file .* holds no words"):
        train_from_counts_file(tmp_path / "e.parquet", 300)
