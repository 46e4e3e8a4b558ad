"""Ray Data recipes (torch_gpubpe.integrations.ray): token columns equal to the single-process encoder, and
word counts per block merged into the counts of the whole corpus.

The actor classes are tested directly on Arrow tables (fast), then once each on a local Ray
instance (``ray.init(num_cpus=2)``; lavapipe as the GPU) reading parquet files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import corpus_docs

from torch_gpubpe.core import reference
from torch_gpubpe.training.counts_file import read_counts, read_metadata
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.errors import InputError
from torch_gpubpe.integrations.ray import (CountBatches, TokenizeBatches, TokenizeFiles, WriteShards,
                              count_dataset, merge_shard_lists, tokenize_dataset, tokenize_files,
                              write_shards_from_files)
from torch_gpubpe.io.shards import read_llmc_shard, read_megatron
from torch_gpubpe.core.vocab import Vocab

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return (corpus_docs("tr_manpages", 25_000, 4_000) + corpus_docs("en_fortunes", 15_000)
            + corpus_docs("multi_emoji", 8_000) + ["", " ", "\r\n\r\n"])


@pytest.fixture(scope="module")
def vocab(docs) -> Vocab:
    return Vocab.from_merges(reference.train(docs[::3], 420, 2, 1), [EOT])


def _expected(vocab, docs, eos=None) -> list[list[int]]:
    enc = Tokenizer(vocab).encode_batch(docs)
    return [list(enc[k]) + ([] if eos is None else [eos]) for k in range(len(docs))]


# -- the actor classes, without Ray ---------------------------------------------------------------
def test_tokenize_batches_equals_encode_batch_on_every_arrow_layout(vocab, docs):
    want = _expected(vocab, docs)
    ids = pa.array(np.arange(len(docs)))
    for text in (pa.array(docs, pa.string()), pa.array(docs, pa.large_string()),
                 pa.array([d.encode() for d in docs], pa.binary()),
                 pa.chunked_array([docs[:7], docs[7:]], pa.string())):
        t = pa.table({"id": ids, "text": text})
        for fn in (TokenizeBatches(vocab), TokenizeBatches(vocab, sub_batch_bytes=1000)):
            out = fn(t)
            assert out.column_names == ["id", "text", "input_ids"]
            assert out.schema.field("input_ids").type == pa.list_(pa.uint16())
            assert out.column("input_ids").to_pylist() == want
    sliced = pa.table({"text": pa.array(docs, pa.string())}).slice(5, 20)  # non-zero offset
    assert TokenizeBatches(vocab)(sliced).column("input_ids").to_pylist() == want[5:25]


def test_tokenize_batches_two_calls_at_once_share_the_gpu_slots(vocab, docs):
    """What tokenize_dataset's calls_per_actor=2 does: two threads in one actor, their
    sub-batches interleaved in the Tokenizer's two slots; each call gets its own tokens."""
    from concurrent.futures import ThreadPoolExecutor

    fn = TokenizeBatches(vocab, sub_batch_bytes=700, append_eos=EOT)
    assert set(fn.ready().timings) == {"pin_gpu", "open_gpu", "warm_up"}   # opened by __init__
    want = _expected(vocab, docs, vocab.token_to_id(EOT))
    cuts = [(a, min(a + 9, len(docs))) for a in range(0, len(docs), 9)]
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda c: fn(pa.table({"text": docs[c[0]:c[1]]})), cuts * 3))
    for (a, b), out in zip(cuts * 3, outs):
        assert out.column("input_ids").to_pylist() == want[a:b]
    assert TokenizeBatches(vocab, open_gpu=False).timings == {}


def test_a_gpu_that_fails_to_open_fails_every_call(monkeypatch, vocab):
    """__init__ opens the session on a thread; its error is raised by the calls (both of two
    at once), not lost with the thread."""
    from concurrent.futures import ThreadPoolExecutor

    from torch_gpubpe.errors import NoAdapterError

    def fail(self):
        raise NoAdapterError("no adapter (test)")

    monkeypatch.setattr(Tokenizer, "open", fail)
    fn = TokenizeBatches(vocab)
    with ThreadPoolExecutor(2) as pool:
        futs = [pool.submit(fn, pa.table({"text": ["a b"]})) for _ in range(2)]
    for f in futs:
        with pytest.raises(NoAdapterError, match="test"):
            f.result()
    with pytest.raises(NoAdapterError):
        list(TokenizeFiles(vocab)(pa.table({"path": ["x.parquet"]})))


def test_tokenize_batches_options_and_errors(vocab, docs):
    eos = vocab.token_to_id(EOT)
    t = pa.table({"text": docs[:12], "id": np.arange(12)})
    out = TokenizeBatches(vocab, append_eos=EOT, keep_columns=["id"],
                          output_column="tokens")(t)
    assert out.column_names == ["id", "tokens"]
    assert out.column("tokens").to_pylist() == _expected(vocab, docs[:12], eos)
    gpt2 = Tokenizer(vocab, pre_tokenizer="gpt2")                   # a Tokenizer with options
    out = TokenizeBatches(gpt2)(t)
    assert out.column("input_ids").to_pylist() == [list(x) for x in gpt2.encode_batch(docs[:12])]
    assert out.column("input_ids").to_pylist() == \
        TokenizeBatches(vocab, pre_tokenizer="gpt2")(t).column("input_ids").to_pylist()
    big = Vocab((), tuple(f"<s{k}>" for k in range(70_000)))              # > 65,536 ids
    out = TokenizeBatches(big)(t)
    assert out.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert out.column("input_ids").to_pylist() == [list(d.encode()) for d in docs[:12]]
    with pytest.raises(InputError, match="document 1 is null"):
        TokenizeBatches(vocab)(pa.table({"text": ["a", None]}))
    with pytest.raises(InputError, match="no column 'body'"):
        TokenizeBatches(vocab, text_column="body")(t)
    with pytest.raises(InputError, match="got int64"):
        TokenizeBatches(vocab, text_column="id")(t)


def test_tokenize_batches_takes_a_chunked_column_chunk_by_chunk(vocab, docs):
    """A batch Ray joined from blocks has several chunks: each is encoded in place (no
    concatenation), sub-batches run across the chunks' ends, and a null's row is the batch's."""
    want = _expected(vocab, docs)
    cuts = [0, 0, 3, 4, 30, 30, 31, len(docs)]                 # empty chunks, one-row chunks
    col = pa.chunked_array([pa.array(docs[a:b], pa.string()) for a, b in zip(cuts, cuts[1:])])
    for sub in (10**9, 700):
        out = TokenizeBatches(vocab, sub_batch_bytes=sub)(pa.table({"text": col}))
        assert out.column("input_ids").to_pylist() == want
    bad = pa.chunked_array([docs[:5], [docs[5], None]], pa.string())
    with pytest.raises(InputError, match="document 6 is null"):
        TokenizeBatches(vocab)(pa.table({"text": bad}))


@pytest.fixture(scope="module")
def text_files(tmp_path_factory, docs) -> list[str]:
    """Two parquet files (small row groups, a null row) and a JSON Lines file."""
    import json

    d = tmp_path_factory.mktemp("files")
    a = d / "a.parquet"
    pq.write_table(pa.table({"text": docs[:30] + [None] + docs[30:40]}), a, row_group_size=4)
    b = d / "b.parquet"
    pq.write_table(pa.table({"text": docs[40:]}), b, row_group_size=9)
    c = d / "c.jsonl"
    c.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[:25]), encoding="utf-8")
    return [str(a), str(b), str(c)]


def _files_expected(vocab, docs, eos=None):
    """(path index, row, tokens) that text_files should give."""
    want = _expected(vocab, docs, eos)
    rows = [(0, r, want[r]) for r in range(30)] + [(0, 31 + k, want[30 + k]) for k in range(10)]
    rows += [(1, r, want[40 + r]) for r in range(len(docs) - 40)]
    return rows + [(2, r, want[r]) for r in range(25)]


def test_tokenize_files_reads_in_the_actor_equal_to_encode_batch(vocab, docs, text_files):
    eos = vocab.token_to_id(EOT)
    for kw in ({}, {"batch_bytes": 600, "read_threads": 1}):
        fn = TokenizeFiles(vocab, append_eos=EOT, **kw)
        tables = list(fn(pa.table({"path": text_files, "other": [1, 2, 3]})))
        # one table per GPU batch; the CLI's one reader over the call's files: a batch runs
        # across the files' ends (the three small files are one GPU batch by default)
        assert len(tables) == 1 if not kw else len(tables) >= 10
        got = [(text_files.index(r["path"]), r["row"], r["input_ids"])
               for t in tables for r in t.to_pylist()]
        assert got == _files_expected(vocab, docs, eos)
        assert tables[0].schema.field("input_ids").type == pa.list_(pa.uint16())
        assert fn.stats["skipped_none"] == 1                  # the null row, as the CLI
    with pytest.raises(InputError, match="no column 'path'"):
        list(TokenizeFiles(vocab)(pa.table({"file": text_files})))
    with pytest.raises(InputError, match="does not exist|no such|not found"):
        list(TokenizeFiles(vocab)(pa.table({"path": [text_files[0] + ".missing"]})))
    import threading
    import time

    missing = [text_files[0], text_files[0] + ".missing", text_files[1], text_files[2]]
    with pytest.raises(InputError, match="does not exist|no such|not found"):
        list(TokenizeFiles(vocab, batch_bytes=600)(pa.table({"path": missing})))
    for _ in range(50):              # the files read ahead stop with the call
        if not any(t.name.startswith("torch_gpubpe ray") for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name.startswith("torch_gpubpe ray") for t in threading.enumerate())


def _read_shards(out, info, fmt) -> list[int] | list[list[int]]:
    if fmt == "llmc":
        return np.concatenate([read_llmc_shard(out / s) for s in info["shards"]]).tolist()
    return [d.tolist() for p in info["prefixes"] for d in read_megatron(out / p)]


@pytest.mark.parametrize("fmt", ["llmc", "megatron"])
def test_tokenize_files_writes_a_part_per_file_then_one_shard_list(tmp_path, vocab, docs,
                                                                  text_files, fmt):
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    files = [*text_files, str(empty)]
    eot = EOT if fmt == "llmc" else None
    fn = TokenizeFiles(vocab, out_dir=tmp_path / "parts", fmt=fmt, eot=eot, batch_bytes=600)
    batch = pa.table({"path": files[::-1], "index": [3, 2, 1, 0]})   # the index gives the order
    rows = [r for t in fn(batch) for r in t.to_pylist()]
    assert [r["path"] for r in rows] == files[::-1]
    assert [r["num_documents"] for r in rows] == [0, 25, len(docs) - 40, 40]
    info = merge_shard_lists(rows, tmp_path / "out", fmt=fmt)
    want = [w for _, _, w in _files_expected(vocab, docs)]
    got = _read_shards(tmp_path / "out", info, fmt)
    if fmt == "llmc":        # <|endoftext|> before every document, put in by the GPU
        assert got == [t for w in want for t in [vocab.token_to_id(EOT), *w]]
    else:
        assert got == want
    assert info["num_documents"] == len(want)
    with pytest.raises(ValueError, match="eot="):
        TokenizeFiles(vocab, out_dir=tmp_path, fmt="llmc", eot=None, open_gpu=False)


def test_tokenize_files_cuts_a_gpu_batch_at_its_files_ends(tmp_path, vocab, docs, text_files):
    """One GPU batch (the default batch_bytes) holds the documents of every file of the call:
    the rows name their file by position (a file listed twice, empty files between), and the
    shard parts are cut at the files' ends."""
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    a, b, c = text_files
    files = [b, str(empty), a, a, c, str(empty)]
    by_file = {}
    for f, r, w in _files_expected(vocab, docs):
        by_file.setdefault(f, []).append((r, w))
    want = [(k, r, w) for k, f in enumerate(files) if f != str(empty)
            for r, w in by_file[text_files.index(f)]]
    fn = TokenizeFiles(vocab)
    tables = list(fn(pa.table({"path": files})))
    assert len(tables) == 1
    got = [r for t in tables for r in t.to_pylist()]
    assert [(r["path"], r["row"], r["input_ids"]) for r in got] == \
        [(files[k], r, w) for k, r, w in want]
    assert fn.stats["calls"] == 1 and fn.stats["seconds"]["upload_and_submit"] > 0
    fn = TokenizeFiles(vocab, out_dir=tmp_path / "parts", fmt="megatron", eot=None)
    rows = [r for t in fn(pa.table({"path": files, "index": range(len(files))}))
            for r in t.to_pylist()]
    assert [r["num_documents"] for r in rows] == [len(docs) - 40, 0, 40, 40, 25, 0]
    info = merge_shard_lists(rows, tmp_path / "out", fmt="megatron")
    assert _read_shards(tmp_path / "out", info, "megatron") == [w for _, _, w in want]


def test_tokenize_files_shards_hold_the_encode_clis_tokens(tmp_path, vocab, text_files):
    """The same files through the ``encode`` command and through TokenizeFiles' parts merged:
    the same documents' tokens (llm.c: the same token stream; Megatron: the same sequences)."""
    from torch_gpubpe.cli import main as cli

    vocab.save(tmp_path / "vocab.json")
    for fmt, eot in (("llmc", EOT), ("megatron", None)):
        cli_out = tmp_path / f"cli-{fmt}"
        assert cli.main(["encode", "--vocab", str(tmp_path / "vocab.json"), "--data-files",
                         *text_files, "--out", str(cli_out), "--output-format", fmt,
                         "--no-progress", "--batch-bytes", "2K"]) == 0
        cli_info = json.loads((cli_out / "meta.json").read_text())
        fn = TokenizeFiles(vocab, out_dir=tmp_path / f"parts-{fmt}", fmt=fmt, eot=eot)
        rows = [r for t in fn(pa.table({"path": text_files, "index": [0, 1, 2]}))
                for r in t.to_pylist()]
        info = merge_shard_lists(rows, tmp_path / f"ray-{fmt}", fmt=fmt)
        assert _read_shards(tmp_path / f"ray-{fmt}", info, fmt) == \
            _read_shards(cli_out, cli_info, fmt)
        assert info["num_documents"] == cli_info["num_documents"] and \
            info["num_tokens"] == cli_info["num_tokens"]


def test_tokenize_files_says_when_arrows_pool_decodes_csv_on_fewer_threads(tmp_path, vocab,
                                                                          docs):
    """Ray's OMP_NUM_THREADS=1 sizes Arrow's CPU pool, which parses CSV: recorded, warned."""
    import pyarrow.csv as pcsv

    from torch_gpubpe.integrations import ray as tray
    from torch_gpubpe.notices import GPUBPEWarning

    pcsv.write_csv(pa.table({"text": docs[:30]}), tmp_path / "a.csv")
    keep = pa.cpu_count()
    tray.TokenizeFiles._warned_pool = False
    try:
        pa.set_cpu_count(1)
        fn = TokenizeFiles(vocab, read_threads=2)
        with pytest.warns(GPUBPEWarning, match="Arrow's CPU pool, here 1 thread"):
            rows = [r for t in fn(pa.table({"path": [str(tmp_path / "a.csv")]}))
                    for r in t.to_pylist()]
        assert [r["input_ids"] for r in rows] == _expected(vocab, docs[:30])
        assert fn.stats["arrow_cpu_count"] == 1
        pa.set_cpu_count(2)
        fn = TokenizeFiles(vocab, read_threads=2)
        list(fn(pa.table({"path": [str(tmp_path / "a.csv")]})))
        assert "arrow_cpu_count" not in fn.stats
    finally:
        pa.set_cpu_count(keep)


@pytest.mark.parametrize("fmt", ["llmc", "megatron", "flat"])
def test_write_shards_per_batch_then_one_shard_list(tmp_path, vocab, docs, fmt):
    eot = vocab.token_to_id(EOT)
    enc = Tokenizer(vocab).encode_batch(docs)
    tables = [pa.table({"id": np.arange(a, b), "text": docs[a:b]})
              for a, b in ((20, len(docs)), (0, 9), (9, 20))]          # out of order, as Ray may
    fn = WriteShards(vocab, tmp_path / "parts", fmt=fmt, order_column="id")
    rows = [fn(t).to_pylist()[0] for t in tables]
    info = merge_shard_lists(rows, tmp_path / "out", fmt=fmt)
    assert not (tmp_path / "parts").exists() or not list((tmp_path / "parts").iterdir())
    assert info["num_documents"] == len(docs) and info["parts"] == 3
    out = tmp_path / "out"
    if fmt == "llmc":        # [EOT] doc [EOT] doc ..., the first shard the validation split
        assert info["shards"][0] == "data_val_000000.bin"
        got = np.concatenate([read_llmc_shard(out / s) for s in info["shards"]]).tolist()
        assert got == [t for k in range(len(docs)) for t in [eot, *enc[k]]]
    elif fmt == "megatron":  # one sequence per document, EOT after it
        got = [d.tolist() for p in info["prefixes"] for d in read_megatron(out / p)]
        assert got == [[*enc[k], eot] for k in range(len(docs))]
        assert (out / "data_paths.txt").read_text().split()[0].endswith("data_000000")
    else:
        ids, offs = np.fromfile(out / "ids.bin", np.uint16), np.load(out / "offsets.npy")
        assert [ids[offs[k]:offs[k + 1]].tolist() for k in range(len(docs))] == \
            [[*enc[k], eot] for k in range(len(docs))]
    assert info["num_tokens"] == len(enc.ids) + len(docs)


def test_count_batches_writes_one_counts_file(tmp_path, docs):
    t = pa.table({"text": docs})
    row = CountBatches(tmp_path, count_on="cpu")(t).to_pylist()[0]
    assert read_counts(row["counts_file"]).to_dict() == dict(reference.count_words(docs))
    assert read_metadata(row["counts_file"])["num_documents"] == len(docs) == row["num_documents"]


@pytest.mark.parametrize("count_on", ["cpu", "gpu"])
def test_count_batches_with_a_model_split_records_it(tmp_path, docs, count_on):
    """Counts with cl100k's split (GPU or CPU) == the regex's words; the file records the
    split, and merging it with byte-class counts is refused by name."""
    from collections import Counter

    from torch_gpubpe.core.patterns import split
    from torch_gpubpe.training.counts_file import merge_counts

    t = pa.table({"text": docs})
    row = CountBatches(tmp_path, count_on=count_on, pre_tokenizer="cl100k")(t).to_pylist()[0]
    want = Counter(w for d in docs for w in split(d, "cl100k"))
    assert read_counts(row["counts_file"]).to_dict() == dict(want)
    assert read_metadata(row["counts_file"])["pre_tokenizer"] == "cl100k"
    other = CountBatches(tmp_path, count_on="cpu")(t).to_pylist()[0]["counts_file"]
    with pytest.raises(InputError, match="pre-tokenizer"):
        merge_counts([row["counts_file"], other], tmp_path / "mixed.parquet")
    with pytest.raises(InputError):
        CountBatches(tmp_path, pre_tokenizer="deepseek-llm")   # no pat_str to record


# -- on a local Ray instance ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")   # the test extra installs ray; CI fails on any skip
    # Ray 2.60's read_parquet starts 32 footer-reading actors (processes) per read: 2 are
    # plenty for a few local files on 2 cores (torch_gpubpe.integrations.ray's docstring)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT),
                                       "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS": "2"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def parquet_files(tmp_path_factory, docs) -> list[str]:
    d = tmp_path_factory.mktemp("pq")
    cuts = [0, 9, 20, len(docs)]
    files = []
    for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        path = d / f"part-{k}.parquet"
        pq.write_table(pa.table({"id": np.arange(a, b), "text": docs[a:b]}), path,
                       row_group_size=5)
        files.append(str(path))
    return files


def test_ray_tokenize_equals_single_process_encode(ray_local, vocab, docs, parquet_files):
    ds = ray_local.data.read_parquet(parquet_files)
    # two calls at once in the actor, many sub-batches each
    ds = tokenize_dataset(ds, vocab, num_gpus=0, batch_size=7, calls_per_actor=2,
                          append_eos=EOT, sub_batch_bytes=500)
    rows = {r["id"]: list(r["input_ids"]) for r in ds.take_all()}
    want = _expected(vocab, docs, vocab.token_to_id(EOT))
    assert rows == dict(enumerate(want))


def test_ray_tokenize_files_equals_single_process_encode(ray_local, vocab, docs, text_files):
    # the actor reads the files; two calls (files) at once, many GPU batches each
    ds = tokenize_files(text_files, vocab, num_gpus=0, calls_per_actor=2, append_eos=EOT,
                        batch_bytes=600)
    got = sorted((text_files.index(r["path"]), r["row"], list(r["input_ids"]))
                 for r in ds.take_all())
    assert got == _files_expected(vocab, docs, vocab.token_to_id(EOT))
    with pytest.raises(InputError, match="num_gpus=0"):
        tokenize_files(text_files, vocab)                    # the cluster has no GPU


def test_ray_write_shards_from_files_equals_single_process(ray_local, tmp_path, vocab, docs,
                                                           text_files):
    info = write_shards_from_files(text_files, vocab, tmp_path / "out", fmt="llmc",
                                   num_gpus=0, batch_bytes=600)
    want = [w for _, _, w in _files_expected(vocab, docs)]
    eot = vocab.token_to_id(EOT)
    assert _read_shards(tmp_path / "out", info, "llmc") == [t for w in want for t in [eot, *w]]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        sorted(info["shards"] + ["meta.json"])                  # parts merged and removed


def test_ray_gpus_asked_of_a_cluster_without_them_are_refused(ray_local, vocab, parquet_files):
    # ray.init(num_cpus=2) has no GPU: num_gpus=1 (the default) would wait forever
    ds = ray_local.data.read_parquet(parquet_files)
    assert ray_local.cluster_resources().get("GPU", 0) == 0
    with pytest.raises(InputError, match="num_gpus=0"):
        tokenize_dataset(ds, vocab)
    tokenize_dataset(ds, vocab, check_gpus=False)   # lazy: nothing runs, nothing refused


def test_ray_count_dataset_equals_whole_corpus_counts(ray_local, tmp_path, docs, parquet_files):
    ds = ray_local.data.read_parquet(parquet_files)
    st: dict = {}
    out = count_dataset(ds, tmp_path / "all.parquet", count_on="cpu", batch_size=6,
                        stats=st)
    assert read_counts(out).to_dict() == dict(reference.count_words(docs))
    assert st["num_batches"] >= 3 and read_metadata(out)["num_documents"] == len(docs)
    assert [p.name for p in tmp_path.iterdir()] == ["all.parquet"]   # block files removed
    out = count_dataset(ds, tmp_path / "cl100k.parquet", count_on="cpu", batch_size=6,
                        pre_tokenizer="cl100k")
    assert read_metadata(out)["pre_tokenizer"] == "cl100k"


def test_actor_with_a_ray_gpu_pins_its_adapter_by_uuid(monkeypatch):
    ray = pytest.importorskip("ray")
    from torch_gpubpe.gpu import adapters as devices
    from torch_gpubpe.integrations import ray_gpu as tray
    from torch_gpubpe.integrations.ray_gpu import pin_assigned_gpu as _pin_assigned_gpu

    # setenv first, so that monkeypatch restores the variable's absence after _pin_assigned_gpu
    # sets it (delenv of an absent variable records nothing, and the value would leak into
    # every later test)
    monkeypatch.setenv("TORCH_GPUBPE_ADAPTER", "")
    monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [3])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    u, nv = "ab" * 16, "cd" * 16
    monkeypatch.setattr(devices, "cuda_devices", lambda: [devices.CudaDevice(0, "H200", u)])
    monkeypatch.setattr(tray, "nvml_uuids", lambda: None)                  # no NVML: torch
    _pin_assigned_gpu()
    assert devices.os.environ["TORCH_GPUBPE_ADAPTER"] == f"uuid:{u}"
    monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
    monkeypatch.setattr(tray, "nvml_uuids", lambda: [nv, "ef" * 16])       # 2 GPUs: torch
    _pin_assigned_gpu()
    assert devices.os.environ["TORCH_GPUBPE_ADAPTER"] == f"uuid:{u}"
    monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(tray, "nvml_uuids", lambda: [nv])        # the only GPU: NVML's UUID
    _pin_assigned_gpu()
    assert devices.os.environ["TORCH_GPUBPE_ADAPTER"] == f"uuid:{nv}"
    monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-12345678-9abc-def0-1234-56789abcdef0,1")
    _pin_assigned_gpu()                                          # named by UUID: taken as is
    assert devices.os.environ["TORCH_GPUBPE_ADAPTER"] == "uuid:123456789abcdef0123456789abcdef0"
    monkeypatch.setattr(tray, "nvml_uuids", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("TORCH_GPUBPE_ADAPTER", "#1")          # the user's choice stands
    _pin_assigned_gpu()
    assert devices.os.environ["TORCH_GPUBPE_ADAPTER"] == "#1"
    monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
    monkeypatch.setattr(devices, "cuda_devices", lambda: [])
    with pytest.warns(RuntimeWarning, match="cannot tell its UUID"):
        _pin_assigned_gpu()
    assert "TORCH_GPUBPE_ADAPTER" not in devices.os.environ
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])         # a CPU actor: nothing to pin
    _pin_assigned_gpu()
    assert "TORCH_GPUBPE_ADAPTER" not in devices.os.environ


def test_ray_write_shards_equals_single_process(ray_local, tmp_path, vocab, docs, parquet_files):
    ctx = ray_local.data.DataContext.get_current()
    keep, ctx.execution_options.preserve_order = ctx.execution_options.preserve_order, True
    ds = ray_local.data.read_parquet(parquet_files)       # batches in order: contiguous ids
    rows = ds.map_batches(WriteShards, fn_constructor_kwargs={
        "vocab": vocab, "out_dir": str(tmp_path / "parts"), "fmt": "llmc", "order_column": "id"},
        batch_format="pyarrow", batch_size=7, concurrency=1).take_all()
    ctx.execution_options.preserve_order = keep
    info = merge_shard_lists(rows, tmp_path / "out", fmt="llmc")
    eot, enc = vocab.token_to_id(EOT), Tokenizer(vocab).encode_batch(docs)
    got = np.concatenate([read_llmc_shard(tmp_path / "out" / s) for s in info["shards"]])
    assert got.tolist() == [t for k in range(len(docs)) for t in [eot, *enc[k]]]
