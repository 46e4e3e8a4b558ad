"""`encode --output-format llmc|megatron|bin` (torch_gpubpe.io.shards): each format read back the way
its users read it (llm.c's `_load_data_shard` header rules, Megatron's `_IndexReader` layout),
token for token equal to Tokenizer.encode; byte-identical whatever the batch size, thread count
and chunking; never overwritten unless asked; a killed run continues after its last complete
shard."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import corpus_docs
from torch_gpubpe import Vocab
from torch_gpubpe.cli import main as cli
from torch_gpubpe.core import reference
from torch_gpubpe.io import shards as shardmod

EOT = "<|endoftext|>"


# -- the readers of the formats' users (written from their layouts, not from shards.py) ----------
def llmc_load(path: Path) -> np.ndarray:
    """karpathy/llm.c train_gpt2.py _peek_data_shard / _load_data_shard (+ the llama-3 header)."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        assert header[0] in (20240520, 20240801), "magic number mismatch in the data .bin file"
        assert header[1] == (1 if header[0] == 20240520 else 7), "unsupported version"
        ntok = header[2]
        tokens = np.frombuffer(f.read(), dtype=np.uint16 if header[0] == 20240520 else np.uint32)
    assert len(tokens) == ntok, "number of tokens read does not match header"
    return tokens


def megatron_load(prefix: Path) -> list[list[int]]:
    """megatron/core/datasets/indexed_dataset.py _IndexReader + _MMapBinReader layout."""
    dtypes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
              7: np.float32, 8: np.uint16}
    with open(f"{prefix}.idx", "rb") as stream:
        assert stream.read(9) == b"MMIDIDX\x00\x00"
        assert struct.unpack("<Q", stream.read(8))[0] == 1
        dtype = dtypes[struct.unpack("<B", stream.read(1))[0]]
        seq_count = struct.unpack("<Q", stream.read(8))[0]
        doc_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()
    buf = memoryview(np.memmap(f"{prefix}.idx", mode="r", order="C"))
    lengths = np.frombuffer(buf, np.int32, seq_count, offset)
    pointers = np.frombuffer(buf, np.int64, seq_count, offset + lengths.nbytes)
    doc_idx = np.frombuffer(buf, np.int64, doc_count, offset + lengths.nbytes + pointers.nbytes)
    binbuf = memoryview(np.memmap(f"{prefix}.bin", mode="r", order="C"))
    seqs = [np.frombuffer(binbuf, dtype, int(n), int(p)).tolist()
            for n, p in zip(lengths, pointers)]
    assert doc_idx[0] == 0 and doc_idx[-1] == seq_count
    return [sum(seqs[doc_idx[d] : doc_idx[d + 1]], []) for d in range(doc_count - 1)]


@pytest.fixture(scope="module")
def docs() -> list[str]:
    out = corpus_docs("tr_ud_boun", max_bytes=25_000) + [""]
    out += corpus_docs("en_fortunes", max_bytes=25_000) + corpus_docs("multi_emoji",
                                                                       max_bytes=10_000)
    return out


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory, docs) -> Path:
    d = tmp_path_factory.mktemp("vocab")
    Vocab.from_merges(reference.train(docs[:200], 420, num_special_tokens=1), (EOT,)).save(
        d / "vocab.json")
    return d


@pytest.fixture(scope="module")
def want(vocab_dir, docs) -> list[list[int]]:
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(Vocab.load(vocab_dir / "vocab.json"))
    return [tok.encode(d) for d in docs]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, docs) -> dict[str, list[str]]:
    d = tmp_path_factory.mktemp("in")
    third = len(docs) // 3
    parts = [docs[:third], docs[third : 2 * third], docs[2 * third :]]
    pqs, jls = [], []
    for i, part in enumerate(parts):
        p = d / f"p{i}.parquet"
        pq.write_table(pa.table({"text": part}), p, row_group_size=37)
        pqs.append(str(p))
        j = d / f"j{i}.jsonl.gz"
        j.write_bytes(gzip.compress("".join(json.dumps({"text": x}) + "\n"
                                            for x in part).encode()))
        jls.append(str(j))
    return {"parquet": pqs, "jsonl.gz": jls}


def _encode(capsys, vocab_dir, files, out, *extra) -> str:
    code = cli.main(["encode", "--vocab", str(vocab_dir), "--data-files", *files, "--out",
                     str(out), "--no-progress", *extra])
    o, e = capsys.readouterr()
    assert code == 0, e
    return o


def _tree(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "meta.json"}


@pytest.mark.gpu
def test_llmc_shards_equal_tokenizer(capsys, tmp_path, vocab_dir, inputs, want):
    eot = Vocab.load(vocab_dir / "vocab.json").token_to_id(EOT)
    stream = [t for w in want for t in [eot] + w]
    for kind, files in inputs.items():
        out = tmp_path / kind
        _encode(capsys, vocab_dir, files, out, "--output-format", "llmc", "--shard-tokens",
                "5000", "--name", "corpus")
        names = sorted((p.name for p in out.glob("corpus_*.bin")), key=lambda n: n[-10:])
        assert names[0] == "corpus_val_000000.bin" and names[1] == "corpus_train_000001.bin"
        got = [llmc_load(out / n) for n in names]
        assert all(len(g) == 5000 for g in got[:-1]) and 0 < len(got[-1]) <= 5000
        assert np.concatenate(got).tolist() == stream, kind
        meta = json.loads((out / "meta.json").read_text())
        assert meta["shards"] == names and meta["num_tokens"] == len(stream)


@pytest.mark.gpu
def test_megatron_and_flat_equal_tokenizer(capsys, tmp_path, vocab_dir, inputs, want):
    files = inputs["parquet"]
    out = tmp_path / "mg"
    _encode(capsys, vocab_dir, files, out, "--output-format", "megatron", "--shard-tokens",
            "4000")
    prefixes = sorted(p.with_suffix("") for p in out.glob("data_*.idx"))
    assert len(prefixes) > 1
    got = [d for p in prefixes for d in megatron_load(p)]
    assert got == want
    eot = Vocab.load(vocab_dir / "vocab.json").token_to_id(EOT)
    _encode(capsys, vocab_dir, files, tmp_path / "mg-eos", "--output-format", "megatron",
            "--append-eos")
    assert megatron_load(tmp_path / "mg-eos" / "data_000000") == [w + [eot] for w in want]
    out = tmp_path / "flat"
    _encode(capsys, vocab_dir, files, out)
    ids = np.fromfile(out / "ids.bin", "<u2")
    offsets = np.load(out / "offsets.npy")
    assert [ids[offsets[k] : offsets[k + 1]].tolist() for k in range(len(want))] == want


@pytest.mark.gpu
def test_bytes_identical_whatever_batching_and_threads(capsys, tmp_path, vocab_dir, inputs):
    trees = []
    for i, (batch, threads) in enumerate([("4M", "1"), ("3K", "4"), ("777", "16")]):
        for kind in ("parquet", "jsonl.gz"):
            out = tmp_path / f"{kind}-{i}"
            _encode(capsys, vocab_dir, inputs[kind], out, "--output-format", "llmc",
                    "--shard-tokens", "3000", "--batch-bytes", batch, "--read-threads", threads)
            trees.append(_tree(out))
    assert all(t == trees[0] for t in trees[1:])


@pytest.mark.gpu
def test_never_overwritten_and_killed_run_resumes(capsys, tmp_path, vocab_dir, inputs,
                                                  monkeypatch):
    files = inputs["jsonl.gz"]
    for fmt in ("llmc", "megatron"):
        ref = tmp_path / f"ref-{fmt}"
        args = ["--output-format", fmt, "--shard-tokens", "2500", "--batch-bytes", "2K"]
        _encode(capsys, vocab_dir, files, ref, *args)
        # a second run on a complete output: refused, unless --overwrite
        code = cli.main(["encode", "--vocab", str(vocab_dir), "--data-files", *files, "--out",
                         str(ref), "--no-progress", *args])
        assert code == 2 and "--overwrite" in capsys.readouterr().err
        _encode(capsys, vocab_dir, files, ref, *args, "--overwrite")
        for kill_after in (3, 11):
            out = tmp_path / f"run-{fmt}-{kill_after}"
            real_add = shardmod.ShardWriter.add
            calls = {"n": 0}

            def add(self, ids, offsets, **kw):
                calls["n"] += 1
                if calls["n"] > kill_after:
                    raise KeyboardInterrupt
                real_add(self, ids, offsets, **kw)

            monkeypatch.setattr(shardmod.ShardWriter, "add", add)
            assert cli.main(["encode", "--vocab", str(vocab_dir), "--data-files", *files,
                             "--out", str(out), "--no-progress", *args]) == 130
            monkeypatch.setattr(shardmod.ShardWriter, "add", real_add)
            capsys.readouterr()
            partial = _tree(out)
            assert partial and not (out / "meta.json").exists()
            # other settings (another shard size): not resumed
            code = cli.main(["encode", "--vocab", str(vocab_dir), "--data-files", *files,
                             "--out", str(out), "--no-progress", "--output-format", fmt,
                             "--shard-tokens", "2400"])
            assert code == 2 and "other settings" in capsys.readouterr().err
            # the same settings (another batch size: the bytes do not depend on it): resumed
            code = cli.main(["encode", "--vocab", str(vocab_dir), "--data-files", *files,
                             "--out", str(out), "--no-progress", *args[:-1], "5K"])
            cap = capsys.readouterr()
            assert code == 0 and "continuing an unfinished run" in cap.err
            assert "resumed an unfinished run after its first" in cap.out
            meta = json.loads((out / "meta.json").read_text())
            assert 0 < meta["resumed_after_documents"] < meta["num_documents"]
            assert _tree(out) == _tree(ref), (fmt, kill_after)


def test_llmc_uint32_variant_and_writer_edges(tmp_path):
    w = shardmod.ShardWriter(tmp_path / "big", "llmc", 100_000, eot_id=99_999, shard_tokens=4)
    w.add(np.array([70_000, 1, 2, 3, 4], np.uint32), np.array([0, 2, 2, 5]))
    info = w.close()
    got = np.concatenate([llmc_load(tmp_path / "big" / n) for n in info["shards"]])
    assert got.dtype == np.uint32 and got.tolist() == [99_999, 70_000, 1, 99_999, 99_999, 2, 3, 4]
    assert info["shards"] == ["data_val_000000.bin", "data_train_000001.bin"]
    with pytest.raises(Exception, match="end-of-text"):
        shardmod.ShardWriter(tmp_path / "x", "llmc", 300)
    w = shardmod.ShardWriter(tmp_path / "mg", "megatron", 100_000, shard_tokens=10)
    w.add(np.array([70_000, 5], np.uint32), np.array([0, 1, 2]))
    w.close()
    assert megatron_load(tmp_path / "mg" / "data_000000") == [[70_000], [5]]



@pytest.mark.parametrize("fmt, stale", [("llmc", "data_val_000000.bin.tmp"),
                                        ("megatron", "data_000000.bin.tmp"),
                                        ("flat", "ids.bin.tmp")])
def test_files_of_others_in_the_output_folder_are_left_alone(tmp_path, fmt, stale):
    """Only the writer's own files (its shards, metadata, progress and their ``.tmp``) are
    its to delete, replace or resume from; anything else in the folder stays as it was."""
    foreign = {"notes.tmp": "keep", "data_raw.bin": "keep", "README.txt": "keep",
               "data_val_notes.bin": "keep", "ids.bin.bak": "keep"}
    for name, text in foreign.items():
        (tmp_path / name).write_text(text)
    (tmp_path / stale).write_bytes(b"left by a killed run")
    for overwrite in (False, True):
        w = shardmod.ShardWriter(tmp_path, fmt, 50_000, eot_id=50_256 - 1, shard_tokens=4,
                                 overwrite=overwrite)
        w.add(np.array([1, 2, 3, 4, 5], np.uint16), np.array([0, 2, 5]))
        w.close()
        w.wait_flushed()
        assert {n: (tmp_path / n).read_text() for n in foreign} == foreign
        assert not (tmp_path / stale).exists()


@pytest.mark.parametrize("avg", [0, 3, 255, 300, 5000])
def test_eot_insertion_both_ways(avg):
    """The EOT-before-each-document stream (mask pass for short documents, slice copies for
    long ones) equals numpy.insert."""
    rng = np.random.default_rng(avg)
    lens = rng.integers(0, 2 * avg + 1, 40)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    ids = rng.integers(0, 60_000, int(offsets[-1])).astype(np.uint16)
    got = shardmod._insert_before(ids, offsets, 65_535, np.uint16)
    assert got.tolist() == np.insert(ids, offsets[:-1], 65_535).tolist()


def test_gpt2_llmc_shards_equal_llmc_fineweb_method(tmp_path, capsys):
    """``encode --vocab gpt2.tiktoken --output-format llmc`` writes the bytes that llm.c's
    ``dev/data/fineweb.py`` writes (tiktoken GPT-2, ``[eot] + encode_ordinary(doc)`` per
    document, uint16 shards with its header): GPT-2's regex split and merge order on the GPU."""
    import base64

    import tiktoken

    from conftest import shared_vocab

    vocab = shared_vocab("gpt2.tiktoken")
    side = json.loads(Path(str(vocab) + ".json").read_text())
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(vocab))}
    eot = side["special_tokens"]["<|endoftext|>"]
    enc = tiktoken.Encoding("gpt2", pat_str=side["pattern"], mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": eot})
    docs = (corpus_docs("en_novels", 20_000) + corpus_docs("code_cpython_stdlib", 15_000)
            + [""] + corpus_docs("multi_udhr", 15_000))
    src = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": docs}), src, row_group_size=7)
    stream = []
    for d in docs:  # fineweb.py tokenize()
        stream += [eot] + enc.encode_ordinary(d)
    shard = 4_000
    out = tmp_path / "out"
    assert cli.main(["encode", "--vocab", str(vocab), "--data-files", str(src), "--out",
                     str(out), "--output-format", "llmc", "--shard-tokens", str(shard),
                     "--batch-bytes", "9K", "--no-progress"]) == 0
    capsys.readouterr()
    files = sorted(out.glob("data_*.bin"), key=lambda f: f.stem[-6:])  # val_000000 first
    assert len(files) == -(-len(stream) // shard)
    for k, f in enumerate(files):  # fineweb.py write_datafile(): header, then uint16 tokens
        part = np.array(stream[k * shard : (k + 1) * shard], np.uint16)
        header = np.zeros(256, np.int32)
        header[:3] = 20240520, 1, len(part)
        assert f.read_bytes() == header.tobytes() + part.tobytes(), f"shard {k} differs"
