"""`python -m torch_gpubpe train|encode`, the document reader (torch_gpubpe.io.sources) and the
example script.

The CLI's vocab must equal the reference trainer's on the same documents (DESIGN.md §3), and
`encode`'s id file must equal reference.encode document by document (DESIGN.md §4).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPORA, corpus_docs, subprocess_env
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_gpubpe import InputError, Vocab
from torch_gpubpe.cli import main as cli
from torch_gpubpe.core import reference
from torch_gpubpe.io.sources import TextSource, infer_format, iter_texts, shipped_corpus

ROOT = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"


def _write_jsonl_gz(path: Path, docs: list[str], column: str = "text") -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for k, d in enumerate(docs):
            f.write(json.dumps({"id": k, column: d}, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="module")
def tr_docs() -> list[str]:
    return corpus_docs("tr_manpages", max_bytes=40_000, max_doc_bytes=8_000)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- parsing --------------------------------------------------------------------------------------
def test_parse_size():
    assert cli.parse_size("500000") == 500_000
    assert cli.parse_size("500K") == 500_000
    assert cli.parse_size("1.5M") == 1_500_000
    assert cli.parse_size("2G") == 2_000_000_000
    assert cli.parse_size("64MiB") == 64 << 20
    assert cli.parse_size("1_000") == 1000
    for bad in ("", "M", "1.5X", "-3", "1Mi"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
            cli.parse_size(bad)


def test_help_names_the_default_vocab_size(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"default: {cli.DEFAULT_VOCAB_SIZE}" in out and "shipped" in out


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "train" in capsys.readouterr().err


# -- train ----------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_train_on_files_equals_reference_and_exports(tmp_path, capsys, tr_docs):
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs)
    out = tmp_path / "vocab"
    code, stdout, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "420",
                             "--holdout-every", "0", "--out", str(out), "--no-progress",
                             "--summary-json", str(tmp_path / "s.json"))
    assert code == 0, err
    vocab = Vocab.load(out / "vocab.json")
    want = reference.train(tr_docs, 420, min_frequency=2, num_special_tokens=1)
    assert list(vocab.merges) == want
    assert vocab.special_tokens == (EOT,) and len(vocab) == 420
    assert {p.name for p in out.iterdir()} >= {"vocab.json", "tokenizer.json",
                                               "tokenizer.tiktoken", "tokenizer_config.json"}
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    for d in tr_docs[:5]:
        assert tok.encode(d).ids == reference.encode(d, vocab.merges)
    s = json.loads((tmp_path / "s.json").read_text())
    nbytes = sum(len(d.encode()) for d in tr_docs)
    assert s["corpus_bytes"] == nbytes and s["num_documents"] == len(tr_docs)
    assert s["unique_words"] == len(reference.count_words(tr_docs))
    assert s["num_merges"] == len(want)
    for line in ("corpus", "unique words", "merges", "time", "peak memory", "compression"):
        assert f"  {line} " in stdout
    assert f"{nbytes:,} bytes" in stdout


@pytest.mark.gpu
def test_train_count_on_cpu_equals_gpu(tmp_path, capsys, tr_docs):
    """--count-on cpu counts the words on the CPU: the same vocab as the GPU counter's."""
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs)
    got = {}
    for where in ("gpu", "cpu"):
        out = tmp_path / where
        code, _, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "400",
                            "--holdout-every", "0", "--out", str(out), "--no-progress",
                            "--count-on", where, "--summary-json", str(tmp_path / f"{where}.json"))
        assert code == 0, err
        got[where] = Vocab.load(out / "vocab.json")
        s = json.loads((tmp_path / f"{where}.json").read_text())
        assert s["unique_words"] == len(reference.count_words(tr_docs))
    assert got["gpu"].merges == got["cpu"].merges
    assert list(got["cpu"].merges) == reference.train(tr_docs, 400, min_frequency=2,
                                                      num_special_tokens=1)


@pytest.mark.gpu
def test_train_heldout_compression_and_sampling(tmp_path, capsys, tr_docs):
    """--max-docs samples the first documents; every 4th is held out of training; the reported
    compression is held-out bytes / tokens of the held-out documents."""
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs)
    n = min(len(tr_docs), 12)
    code, stdout, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "300",
                             "--max-docs", str(n), "--holdout-every", "4", "--special-tokens",
                             "--summary-json", str(tmp_path / "s.json"), "--no-progress")
    assert code == 0, err
    docs = tr_docs[:n]
    held = [d for i, d in enumerate(docs) if i % 4 == 3]
    train_docs = [d for i, d in enumerate(docs) if i % 4 != 3]
    s = json.loads((tmp_path / "s.json").read_text())
    merges = reference.train(train_docs, 300)
    assert s["num_merges"] == len(merges) and s["special_tokens"] == []
    tokens = sum(len(reference.encode(d, merges)) for d in held)
    held_bytes = sum(len(d.encode()) for d in held)
    assert s["heldout_tokens"] == tokens and s["heldout_bytes"] == held_bytes
    assert s["heldout_bytes_per_token"] == pytest.approx(held_bytes / tokens)
    assert f"{held_bytes / tokens:.3f} bytes/token" in stdout
    assert "nothing (pass --out DIR to save)" in stdout


@pytest.mark.gpu
def test_train_compression_on_the_first_documents_without_holdout(tmp_path, capsys, tr_docs):
    """Without --holdout-every the vocab is trained on every document and the compression is
    measured on the first ones, up to --holdout-max-bytes (whole documents)."""
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs)
    sizes = [len(d.encode()) for d in tr_docs]
    cap = sum(sizes[:5]) + sizes[5] // 2       # five documents fit, the sixth does not
    code, _, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "300",
                        "--holdout-max-bytes", str(cap), "--special-tokens",
                        "--summary-json", str(tmp_path / "s.json"), "--no-progress")
    assert code == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    merges = reference.train(tr_docs, 300)
    assert s["num_merges"] == len(merges) and s["heldout_is_training"]
    assert s["heldout_documents"] == 5 and s["heldout_bytes"] == sum(sizes[:5])
    assert s["heldout_tokens"] == sum(len(reference.encode(d, merges)) for d in tr_docs[:5])


@pytest.mark.gpu
def test_train_says_both_errors_when_encode_and_export_fail(tmp_path, capsys, tr_docs,
                                                          monkeypatch):
    """The files are written on a thread while the held-out documents are encoded: when both
    fail, the command fails with the encoder's error and says the export's, not losing it."""
    import torch_gpubpe.cli.train as train_cmd
    import torch_gpubpe.core.export as export

    def no_encoder(encoder, data, offsets):
        raise InputError("the held-out encode broke")

    def no_files(vocab, out):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train_cmd, "_count_tokens", no_encoder)
    monkeypatch.setattr(export, "export_all", no_files)
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs[:8])
    code, _, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "300",
                        "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 2
    assert "writing the files failed too: OSError: [Errno 28] No space left on device" in err
    assert err.rstrip().endswith("error: the held-out encode broke")


@pytest.mark.gpu
def test_train_writes_the_files_when_the_heldout_encoder_cannot_open(tmp_path, capsys, tr_docs,
                                                                    monkeypatch):
    """The held-out encoder is made before the export starts: when making it fails, the files
    are still written (the trained vocab is not lost) and the command fails with its error."""
    import torch_gpubpe.cli.train as train_cmd

    def no_encoder(vocab):
        raise InputError("no encoder for the held-out documents")

    monkeypatch.setattr(train_cmd, "_heldout_encoder", no_encoder)
    data = _write_jsonl_gz(tmp_path / "tr.jsonl.gz", tr_docs[:8])
    code, _, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "300",
                        "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 2
    assert err.rstrip().endswith("error: no encoder for the held-out documents")
    assert "failed too" not in err
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert Vocab.load(tmp_path / "out").merges



@pytest.mark.gpu
def test_train_bpe_vocab_the_gpu_walk_refuses_is_written_and_said(tmp_path, capsys):
    """A vocab with a token longer than merge-order mode's GPU walk takes (two documents with
    the same 20,000-space run): every file is written, the command succeeds and says once why
    the compression was not measured."""
    data = _write_jsonl_gz(tmp_path / "d.jsonl.gz", ["x" + " " * 20000, "y" + " " * 20000,
                                                      "hello world"])
    code, out, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "300",
                          "--pre-tokenizer", "cl100k", "--mode", "bpe",
                          "--out", str(tmp_path / "out"), "--no-progress")
    assert code == 0
    assert "n/a (the encoder refuses the vocab" in out
    assert err.count("compression not measured") == 1 and "at most 16,383 bytes" in err
    v = Vocab.load(tmp_path / "out")
    assert v.mode == "bpe" and max(map(len, v.token_bytes)) == 20000
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert (tmp_path / "out" / "tokenizer.tiktoken").is_file()


def test_error_special_token_without_a_utf8_spelling(tmp_path, capsys):
    code, _, err = _run(capsys, "train", "--special-tokens", "<\udcff>",
                        "--out", str(tmp_path / "out"))
    assert code == 2
    assert "lone surrogate" in _one_line_error(err)
    assert not (tmp_path / "out").exists()

@pytest.mark.gpu
def test_train_max_bytes_and_text_files(tmp_path, capsys):
    """Plain-text input (one document per line, line breaks kept) and --max-bytes (the last
    document cut at a character boundary)."""
    text = "\n".join(corpus_docs("tr_ud_boun", max_bytes=30_000))
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    code, _, err = _run(capsys, "train", "--data-files", str(tmp_path / "a.txt"), "--vocab-size",
                        "290", "--max-bytes", "10001", "--holdout-every", "0", "--out",
                        str(tmp_path / "o"), "--no-progress", "--summary-json",
                        str(tmp_path / "s.json"))
    assert code == 0, err
    # Expected documents built independently of the reader: lines with their line break, the
    # last one cut at 10,001 bytes on a character boundary.
    docs, total = [], 0
    for line in re.findall(r"[^\n]*\n|[^\n]+$", text):
        room = 10001 - total
        if room <= 0:
            break
        b = line.encode()
        if len(b) > room:
            line = b[:room].decode("utf-8", "ignore")
        docs.append(line)
        total += len(line.encode())
    assert docs == list(iter_texts(str(tmp_path / "a.txt"), max_bytes=10001))
    assert sum(len(d.encode()) for d in docs) <= 10001
    assert json.loads((tmp_path / "s.json").read_text())["corpus_bytes"] == sum(
        len(d.encode()) for d in docs)
    want = reference.train(docs, 290, num_special_tokens=1)
    assert list(Vocab.load(tmp_path / "o" / "vocab.json").merges) == want


@pytest.mark.gpu
def test_python_m_train_on_shipped_corpus(tmp_path):
    """`python -m torch_gpubpe train` with no input options reads the shipped corpus."""
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch_gpubpe", "train", "--max-bytes", "60K", "--vocab-size",
         "300", "--holdout-every", "20", "--out",
         str(tmp_path / "v"), "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "en_eltec_novels.jsonl.gz" in r.stdout and "60,000 bytes" in r.stdout
    docs = [d for i, d in enumerate(iter_texts(shipped_corpus(), max_bytes=60_000)) if i % 20 != 19]
    want = reference.train(docs, 300, num_special_tokens=1)
    assert list(Vocab.load(tmp_path / "v" / "vocab.json").merges) == want


@pytest.mark.gpu
def test_cli_trains_on_every_document_by_default(tmp_path):
    """The CLI's default gives train()'s merges on the same documents (nothing held out); the
    compression is reported on the first training documents."""
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch_gpubpe", "train", "--max-bytes", "60K", "--vocab-size",
         "300", "--out", str(tmp_path / "v"), "--no-progress"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    docs = list(iter_texts(shipped_corpus(), max_bytes=60_000))
    want = reference.train(docs, 300, num_special_tokens=1)
    assert list(Vocab.load(tmp_path / "v" / "vocab.json").merges) == want
    assert "bytes/token on the first training documents" in r.stdout


@pytest.mark.gpu
def test_python_m_train_no_arguments(tmp_path):
    """The README's main command, as is: the whole shipped corpus, default vocab size."""
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "torch_gpubpe", "train"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "bytes/token on the first training documents" in r.stdout
    assert f"of {cli.DEFAULT_VOCAB_SIZE - 257:,}" in r.stdout


# -- errors a user can act on: one line, exit 2 ---------------------------------------------------
def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("torch_gpubpe: error: ") and "Traceback" not in err
    return lines[0]


def test_error_unknown_column(tmp_path, capsys):
    data = _write_jsonl_gz(tmp_path / "d.jsonl.gz", ["a b c"] * 3, column="content")
    code, _, err = _run(capsys, "train", "--data-files", str(data), "--no-progress")
    assert code == 2
    line = _one_line_error(err)
    assert "no column 'text'" in line and "content" in line and "--text-column" in line


def test_error_empty_corpus(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    code, _, err = _run(capsys, "train", "--data-files", str(tmp_path / "empty.jsonl"),
                        "--no-progress")
    assert code == 2
    assert "empty corpus" in _one_line_error(err)
    data = _write_jsonl_gz(tmp_path / "blank.jsonl.gz", ["", ""])
    code, _, err = _run(capsys, "train", "--data-files", str(data), "--no-progress")
    assert code == 2
    assert "empty corpus" in _one_line_error(err) and "2 documents, 0 bytes" in err


def test_error_max_memory_names_what_to_change(capsys):
    code, _, err = _run(capsys, "train", "--max-memory", "1M", "--no-progress")
    assert code == 2
    line = _one_line_error(err)
    assert "--max-memory 0.00 GB cannot work" in line and "max_memory" not in line
    assert "raise --max-memory to at least" in line


def test_error_vocab_size_too_small(capsys):
    code, _, err = _run(capsys, "train", "--vocab-size", "256", "--special-tokens", "<|a|>")
    assert code == 2
    line = _one_line_error(err)
    assert "--vocab-size 256" in line and "at least 257" in line


def test_error_unwritable_out_dir(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, _, err = _run(capsys, "train", "--out", str(tmp_path / "file" / "sub"))
    assert code == 2
    assert "--out" in _one_line_error(err) and "cannot write" in err


def test_error_missing_file_and_unknown_format(tmp_path, capsys):
    code, _, err = _run(capsys, "train", "--data-files", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "does not exist" in _one_line_error(err)
    (tmp_path / "x.weird").write_text("hello")
    code, _, err = _run(capsys, "train", "--data-files", str(tmp_path / "x.weird"))
    assert code == 2 and "--format" in _one_line_error(err)


def test_error_unknown_dataset_offline(tmp_path):
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch_gpubpe", "train", "--dataset", "no-such-user/no-such-set",
         "--no-progress"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    line = _one_line_error(r.stderr)
    assert "no-such-user/no-such-set" in line and "--data-files" in line


def test_offline_error_message_names_the_fix():
    src = TextSource(dataset="allenai/c4", config="en")
    from torch_gpubpe.io.sources import _explain_load_error

    msg = _explain_load_error(src, ConnectionError("Couldn't reach 'allenai/c4' on the Hub"))
    assert "allenai/c4/en" in msg and "cannot reach the Hugging Face Hub" in msg
    assert "--data-files" in msg


@pytest.mark.gpu
def test_error_no_adapter(tmp_path, capsys, monkeypatch):
    from torch_gpubpe.gpu import device as gpu

    data = _write_jsonl_gz(tmp_path / "d.jsonl.gz", ["hello world"] * 3)
    monkeypatch.setenv("TORCH_GPUBPE_ADAPTER", "no-such-adapter-xyz")
    gpu.reset_gpu()
    try:
        code, _, err = _run(capsys, "train", "--data-files", str(data), "--vocab-size", "260",
                            "--min-frequency", "1", "--no-progress")
    finally:
        monkeypatch.delenv("TORCH_GPUBPE_ADAPTER")
        gpu.reset_gpu()
    assert code == 2
    assert "no-such-adapter-xyz" in _one_line_error(err)


def test_debug_shows_the_exception(capsys):
    with pytest.raises(InputError, match="--vocab-size 100"):
        cli.main(["--debug", "train", "--vocab-size", "100"])
    with pytest.raises(InputError, match="--vocab-size 100"):
        cli.main(["train", "--vocab-size", "100", "--debug"])
    assert cli.main(["train", "--vocab-size", "100"]) == 2


# -- encode ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory, tr_docs) -> Path:
    d = tmp_path_factory.mktemp("vocab")
    Vocab.from_merges(reference.train(tr_docs, 400, num_special_tokens=1), (EOT,)).save(
        d / "vocab.json")
    return d


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bin", "npy"])
def test_encode_equals_reference(tmp_path, capsys, small_vocab, fmt):
    docs = corpus_docs("en_fortunes", max_bytes=20_000) + [""] + corpus_docs("multi_udhr",
                                                                              max_bytes=8_000)
    data = _write_jsonl_gz(tmp_path / "d.jsonl.gz", docs)
    out = tmp_path / "enc"
    code, stdout, err = _run(capsys, "encode", "--vocab", str(small_vocab), "--data-files",
                             str(data), "--out", str(out), "--output-format", fmt,
                             "--batch-bytes", "7K", "--no-progress")
    assert code == 0, err
    meta = json.loads((out / "meta.json").read_text())
    offsets = np.load(out / "offsets.npy")
    if fmt == "npy":
        ids = np.load(out / "ids.npy")
    else:
        ids = np.fromfile(out / "ids.bin", dtype=np.dtype(meta["ids_dtype"]))
    assert ids.dtype == np.uint16 and offsets.dtype == np.int64
    assert len(offsets) == len(docs) + 1 and offsets[-1] == len(ids) == meta["num_tokens"]
    merges = Vocab.load(small_vocab / "vocab.json").merges
    for k, d in enumerate(docs):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == reference.encode(d, merges), k
    assert meta["num_documents"] == len(docs)
    assert meta["text_bytes"] == sum(len(d.encode()) for d in docs)
    assert "MB/s" in stdout and "bytes/token" in stdout


@pytest.mark.gpu
def test_encode_append_eos(tmp_path, capsys, small_vocab):
    docs = ["Merhaba dünya", "", "ikinci belge  burada"]
    data = _write_jsonl_gz(tmp_path / "d.jsonl.gz", docs)
    code, _, err = _run(capsys, "encode", "--vocab", str(small_vocab / "vocab.json"),
                        "--data-files", str(data), "--out", str(tmp_path / "e"),
                        "--append-eos", "--no-progress")
    assert code == 0, err
    vocab = Vocab.load(small_vocab / "vocab.json")
    eot = vocab.token_to_id(EOT)
    ids = np.fromfile(tmp_path / "e" / "ids.bin", dtype="<u2").tolist()
    offsets = np.load(tmp_path / "e" / "offsets.npy").tolist()
    want = [reference.encode(d, vocab.merges) + [eot] for d in docs]
    assert ids == [i for w in want for i in w]
    assert [ids[offsets[k] : offsets[k + 1]] for k in range(len(docs))] == want


def test_encode_errors(tmp_path, capsys, small_vocab):
    code, _, err = _run(capsys, "encode", "--vocab", str(tmp_path / "missing"), "--out",
                        str(tmp_path / "o"))
    assert code == 2 and "--vocab" in _one_line_error(err)
    (tmp_path / "bad.json").write_text("{}")
    code, _, err = _run(capsys, "encode", "--vocab", str(tmp_path / "bad.json"), "--out",
                        str(tmp_path / "o"))
    assert code == 2 and "not a torch_gpubpe vocab" in _one_line_error(err)
    Vocab.from_merges([]).save(tmp_path / "nospecial.json")
    code, _, err = _run(capsys, "encode", "--vocab", str(tmp_path / "nospecial.json"), "--out",
                        str(tmp_path / "o"), "--append-eos")
    assert code == 2 and "no special tokens" in _one_line_error(err)


def test_npy_header_roundtrip(tmp_path):
    from torch_gpubpe.io.shards import npy_header  # the header of encode's ids.npy

    for n in (0, 1, 12345, 10**12):
        hdr = npy_header(np.uint32, n)
        assert len(hdr) == 128
        f = io.BytesIO(hdr)
        assert np.lib.format.read_magic(f) == (1, 0)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        assert shape == (n,) and not fortran and dtype == np.dtype("<u4")
        if n <= 5:
            p = tmp_path / "a.npy"
            p.write_bytes(hdr + np.arange(n, dtype="<u4").tobytes())
            assert np.load(p).tolist() == list(range(n))


# -- sources --------------------------------------------------------------------------------------
def test_iter_texts_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = ["İlk belge.\n", "second  doc", "", "üç\r\n"]
    _write_jsonl_gz(tmp_path / "a.jsonl.gz", docs)
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    pq.write_table(pa.table({"body": docs, "n": list(range(4))}), tmp_path / "c.parquet")
    (tmp_path / "d.txt").write_text("one\ntwo\n\nthree", encoding="utf-8")
    import csv

    with open(tmp_path / "e.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text"])
        w.writerows([["a b"], ["İlk belge."]])
    assert list(iter_texts(str(tmp_path / "a.jsonl.gz"))) == docs
    assert list(iter_texts(str(tmp_path / "b.jsonl"))) == docs
    assert list(iter_texts(str(tmp_path / "c.parquet"), text_column="body")) == docs
    assert list(iter_texts(str(tmp_path / "d.txt"))) == ["one\n", "two\n", "\n", "three"]
    assert list(iter_texts(TextSource(data_files=(str(tmp_path / "d.txt"),),
                                      sample_by="document"))) == ["one\ntwo\n\nthree"]
    assert list(iter_texts(str(tmp_path / "e.csv"))) == ["a b", "İlk belge."]
    (tmp_path / "f.tsv").write_text("id\ttext\n1\tbir iki\n", encoding="utf-8")
    assert list(iter_texts(str(tmp_path / "f.tsv"))) == ["bir iki"]
    src = TextSource(data_files=(str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl")),
                     file_format="json", streaming=False)
    assert list(iter_texts(src, max_docs=6)) == (docs + docs)[:6]


def test_iter_texts_local_dataset_folder(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "train.jsonl").write_text('{"text": "a b"}\n{"text": "ç"}\n')
    assert list(iter_texts(TextSource(dataset=str(tmp_path / "ds")))) == ["a b", "ç"]
    assert list(iter_texts(str(tmp_path / "ds"))) == ["a b", "ç"]
    with pytest.raises(InputError, match="split"):
        list(iter_texts(TextSource(dataset=str(tmp_path / "ds"), split="validation")))


def test_iter_texts_on_real_corpus_equals_stdlib_read():
    path = CORPORA / "tr_ud_boun.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        want = [json.loads(line)["text"] for line in f]
    assert list(iter_texts(str(path))) == want
    assert list(iter_texts(str(path), max_docs=7, skip_docs=3)) == want[3:10]


def test_infer_format():
    assert infer_format("a/b.jsonl.gz") == "json"
    assert infer_format("x.TXT") == "text"
    assert infer_format("x.parquet") == "parquet"
    assert infer_format("x.tsv.bz2") == "csv"
    with pytest.raises(InputError, match="--format"):
        infer_format("x.docx")


def test_iter_texts_row_errors_name_the_row():
    rows = [{"text": "a"}, {"text": None}, {"text": b"b\xff"}, {"text": 7}]
    with pytest.raises(InputError, match=r"row 3: column 'text' holds int"):
        list(iter_texts(rows))
    assert list(iter_texts(rows[:3])) == ["a", "b\ufffd"]
    with pytest.raises(InputError, match=r"row 1: column 'text' is None"):
        list(iter_texts(rows[:3], skip_none=False))
    with pytest.raises(InputError, match=r"row 0 has no column 'body' \(columns: text\)"):
        list(iter_texts(rows, text_column="body"))
    with pytest.raises(InputError, match="max_docs"):
        iter_texts(rows, max_docs=-1)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=()), max_size=12), max_size=8),
       st.integers(0, 80))
def test_iter_texts_max_bytes_cuts_at_character_boundary(docs, limit):
    got = list(iter_texts(docs, max_bytes=limit))
    enc = [reference.to_bytes(d) for d in docs]
    total = sum(len(reference.to_bytes(g)) for g in got)
    assert total <= limit
    joined_in, joined_out = b"".join(enc), b"".join(map(reference.to_bytes, got))
    assert joined_in.startswith(joined_out)
    # stops only when the limit is reached or the input is exhausted; at most 3 bytes short
    # (a multi-byte character that did not fit)
    assert total == len(joined_in) or limit - total <= 3
    for g, d in zip(got[:-1], docs):
        # the same text (a lone surrogate is U+FFFD either way: DESIGN.md §1)
        assert reference.to_bytes(g) == reference.to_bytes(d)


def test_shipped_corpus_is_in_the_package():
    src = shipped_corpus()
    for f in src.data_files:
        assert Path(f).is_file() and Path(f).parent.name == "corpus"
    corpus = Path(src.data_files[0]).parent
    assert (corpus / "README.md").is_file() and (corpus / "LICENSE-CC-BY-SA-4.0.txt").is_file()
    total = sum(Path(f).stat().st_size for f in src.data_files)
    assert total <= 2_000_000
    docs = list(iter_texts(src))
    nbytes = sum(len(d.encode()) for d in docs)
    assert 1_000_000 <= nbytes <= 2_000_000
    assert any("ı" in d for d in docs) and any("Alice" in d for d in docs)


# -- the example ----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_example_train_vocab_runs(tmp_path):
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "train_vocab.py"), "--out",
                        str(tmp_path / "ex"), "--max-bytes", "40000", "--vocab-size", "320"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ex" / "tokenizer.json").is_file()
    assert "ok: GPU encoder, tokenizer.json and the reference agree" in r.stdout


def test_wheel_carries_the_shipped_corpus(tmp_path):
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, timeout=600)
    (wheel,) = tmp_path.glob("torch_gpubpe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    corpus = Path(shipped_corpus().data_files[0]).parent
    for f in sorted(corpus.iterdir()):
        assert f"torch_gpubpe/io/corpus/{f.name}" in names
    assert {"torch_gpubpe/cli/main.py", "torch_gpubpe/__main__.py", "torch_gpubpe/core/export.py",
            "torch_gpubpe/io/sources.py"} <= names
    assert wheel.stat().st_size <= 2_000_000


def test_sources_docstring_example():
    import doctest

    import torch_gpubpe.io.sources as sources

    res = doctest.testmod(sources)
    assert res.attempted >= 2 and res.failed == 0


@pytest.mark.gpu
def test_summary_says_tiktoken_applies_merge_order_to_a_greedy_vocab(tmp_path):
    env = subprocess_env(HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "torch_gpubpe", "train", "--max-bytes", "30K",
                        "--vocab-size", "300", "--out", str(tmp_path / "v"), "--no-progress"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "tiktoken applies merge order" in r.stdout
    assert (tmp_path / "v" / "tokenizer.tiktoken.json").exists()
