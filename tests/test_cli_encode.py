"""`python -m torch_gpubpe encode` as a whole command (the fixed cost around the GPU
work): the process exits as soon as the output is complete (os._exit after the files are
closed), reading starts before the vocab loads, an --overwrite-replaced output is deleted on a
thread while the new one is written, and --debug says where the time went. The bytes are those
of the in-process command and of Tokenizer.encode."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import corpus_docs, subprocess_env
from torch_gpubpe import Vocab
from torch_gpubpe.cli import main as cli
from torch_gpubpe.core import reference
from torch_gpubpe.io import shards as shardmod

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return corpus_docs("tr_ud_boun", max_bytes=20_000) + [""] + corpus_docs(
        "en_fortunes", max_bytes=20_000)


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory, docs) -> Path:
    d = tmp_path_factory.mktemp("vocab")
    Vocab.from_merges(reference.train(docs[:150], 400, num_special_tokens=1), (EOT,)).save(
        d / "vocab.json")
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory, docs) -> list[str]:
    d = tmp_path_factory.mktemp("in")
    half = len(docs) // 2
    out = []
    for i, part in enumerate((docs[:half], docs[half:])):
        p = d / f"p{i}.parquet"
        pq.write_table(pa.table({"text": part}), p, row_group_size=50)
        out.append(str(p))
    return out


def _argv(vocab_dir, files, out, *extra) -> list[str]:
    return ["encode", "--vocab", str(vocab_dir), "--data-files", *files, "--out", str(out),
            "--no-progress", "--output-format", "llmc", "--shard-tokens", "4000", *extra]


def _shards(out: Path) -> dict[str, bytes]:
    """The shards in their order (the validation shard 000000 first)."""
    return {p.name: p.read_bytes() for p in sorted(out.glob("data_*.bin"),
                                                   key=lambda p: p.stem[-6:])}


@pytest.mark.gpu
def test_python_m_encode_exits_with_the_output_complete(tmp_path, vocab_dir, files, docs,
                                                        capsys):
    """The subprocess (fast exit) writes what the in-process command writes, token for token
    Tokenizer.encode with EOT before each document; --debug names the phases."""
    ref = tmp_path / "in-process"
    assert cli.main(_argv(vocab_dir, files, ref)) == 0
    capsys.readouterr()
    out = tmp_path / "subprocess"
    r = subprocess.run([sys.executable, "-m", "torch_gpubpe", *_argv(vocab_dir, files, out),
                        "--debug"], env=subprocess_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert _shards(out) == _shards(ref) and len(_shards(out)) >= 2
    meta = json.loads((out / "meta.json").read_text())
    for phase in ("vocab_load", "output_open", "encoder_init", "first_batch_read",
                  "wait_gpu_open", "upload_and_submit", "close", "total"):
        assert phase in meta["seconds"] and f"{phase} " in r.stdout
    # the GPU's opening, in parts: the device (opened early, on its own thread), the trie and
    # the session (its pipelines among them)
    sec = meta["seconds"]
    for part in ("device_import", "device_adapter", "device_device", "open_wait_device",
                 "open_trie", "open_session", "gpu_open_pipelines", "gpu_open_trie_upload"):
        assert sec[part] >= 0, part
    assert sec["gpu_open_pipelines"] <= sec["open_session"] + 1e-3
    assert "process start → main()" in r.stdout
    # what the disk caches did (this vocab is below the size they keep: built, not saved)
    assert meta["caches"] == {"trie": "built", "bpe_tables": "not used"}
    assert "caches: trie built, bpe_tables not used" in r.stdout
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    vocab = Vocab.load(vocab_dir / "vocab.json")
    eot = vocab.token_to_id(EOT)
    want = [t for d in docs for t in [eot] + Tokenizer(vocab).encode(d)]
    got = np.concatenate([shardmod.read_llmc_shard(out / n) for n in _shards(out)])
    assert got.tolist() == want


@pytest.mark.gpu
def test_overwrite_deletes_the_old_output_on_a_thread(tmp_path, vocab_dir, files, capsys):
    out = tmp_path / "out"
    assert cli.main(_argv(vocab_dir, files, out)) == 0
    first = _shards(out)
    # A folder a killed --overwrite run left behind, and an old shard of another size
    left = out / f"{shardmod.REPLACED_PREFIX}999-0"
    left.mkdir()
    (left / "data_train_000007.bin").write_bytes(b"x" * 1000)
    assert cli.main(_argv(vocab_dir, files, out, "--overwrite", "--batch-bytes", "3K")) == 0
    capsys.readouterr()
    assert _shards(out) == first  # the same bytes, the old files replaced
    assert not list(out.glob(shardmod.REPLACED_PREFIX + "*"))  # all deleted by close()
    assert not [t for t in threading.enumerate() if "delete replaced" in t.name]


def test_replaced_files_are_moved_aside_at_once(tmp_path):
    """ShardWriter(overwrite=True) renames the old output away before it returns (the new run
    never sees it), deletes it on a thread and waits for that in close()."""
    w = shardmod.ShardWriter(tmp_path, "llmc", 1000, eot_id=0, shard_tokens=5)
    w.add(np.arange(1, 13, dtype=np.uint16), np.array([0, 4, 12]))
    old = w.close()["shards"]
    assert len(old) == 3
    w = shardmod.ShardWriter(tmp_path, "llmc", 1000, eot_id=0, shard_tokens=5, overwrite=True)
    assert not any((tmp_path / n).exists() for n in old) and not (tmp_path / "meta.json").exists()
    w.add(np.arange(1, 4, dtype=np.uint16), np.array([0, 3]))
    assert w.close()["shards"] == [shardmod.llmc_shard_name("data", 0)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data_val_000000.bin", "meta.json"]
    assert shardmod.read_llmc_shard(tmp_path / "data_val_000000.bin").tolist() == [0, 1, 2, 3]


@pytest.mark.gpu
def test_refused_output_stops_the_early_reader(tmp_path, vocab_dir, files, capsys):
    """Reading starts before the output is checked: a refused output (exists, no --overwrite)
    still ends with every reader thread stopped."""
    out = tmp_path / "out"
    assert cli.main(_argv(vocab_dir, files, out)) == 0
    assert cli.main(_argv(vocab_dir, files, out)) == 2
    assert "--overwrite" in capsys.readouterr().err
    names = [t.name for t in threading.enumerate()]
    assert not [n for n in names if n.startswith(("torch_gpubpe encode read", "gpubpe-read"))]


def test_encode_reads_at_lower_priority_by_default():
    """encode's reader threads yield the cores to the threads feeding the GPU unless told
    otherwise (--read-nice 0); train keeps niceness 0."""
    p = cli.build_parser()
    assert p.parse_args(["encode", "--vocab", "v", "--out", "o"]).read_nice == cli.ENCODE_READ_NICE
    assert p.parse_args(["encode", "--vocab", "v", "--out", "o", "--read-nice", "0"]).read_nice == 0
    assert p.parse_args(["train"]).read_nice == 0
    assert cli.source_from_args(p.parse_args(
        ["encode", "--vocab", "v", "--out", "o", "--data-files", __file__, "--format", "text"])
    ).reader().nice == cli.ENCODE_READ_NICE


@pytest.mark.gpu
def test_only_a_validation_shard_is_said(tmp_path, vocab_dir, files, capsys):
    """A corpus smaller than --shard-tokens gives llm.c's validation shard alone: the summary
    says so and names --shard-tokens; with a smaller one there are training shards."""
    assert cli.main(_argv(vocab_dir, files, tmp_path / "one")[:-2] + ["--shard-tokens",
                                                                     "100000000"]) == 0
    out = capsys.readouterr().out
    assert "only the validation shard was written" in out and "--shard-tokens" in out
    assert cli.main(_argv(vocab_dir, files, tmp_path / "many")) == 0
    assert "only the validation shard" not in capsys.readouterr().out
