"""What the command line says: the Python API's messages with the CLI's option names, and the
null rows that training skipped.

| case | expected | test |
|---|---|---|
| each form of keyword argument in the library's messages | the option's name (and value) | test_cli_names_turns_keywords_into_options |
| input errors raised by the reader layer, through ``train`` | ``--format``, ``--text-column``; no ``name=`` | test_cli_errors_name_options |
| ``train --prune-below`` on a tiny corpus: the pruning notice, the stopped-early note | ``--prune-below 2``, ``--min-frequency 2`` | test_cli_notices_name_options |
| parquet with null texts: ``train``'s summary, ``--summary-json``, ``train(stats=)`` | "skipped 3 null rows", ``skipped_none_rows``, ``stats["skipped_none"]`` | test_train_counts_skipped_null_rows |
| only null texts | the empty-corpus error says how many were skipped | test_train_counts_skipped_null_rows |
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import subprocess_env

from torch_gpubpe.cli import main as cli
from torch_gpubpe.cli.common import cli_names

KEYWORD = re.compile(r"\b(max_memory|prune_below|max_bytes|min_frequency|text_column|"
                     r"file_format|format|count_on|pre_tokenizer)=")


def test_cli_names_turns_keywords_into_options():
    cases = {
        # keyword, then its option in parentheses
        "above max_memory=1.00 GB; raise max_memory (--max-memory), read fewer documents "
        "(max_bytes / --max-bytes), or drop rare words with prune_below=2 (--prune-below 2; "
        "the merges can then differ from exact training)":
        "above --max-memory 1.00 GB; raise --max-memory, read fewer documents (--max-bytes), "
        "or drop rare words with --prune-below 2 (the merges can then differ from exact "
        "training)",
        "prune_below=3 (--prune-below 3) would keep 4 words and fit":
        "--prune-below 3 would keep 4 words and fit",
        # option, then its keywords in parentheses
        "pass --format binary (format='binary' / file_format='binary'), or give the bytes":
        "pass --format binary, or give the bytes",
        "pass --text-column (text_column=) with one of them":
        "pass --text-column with one of them",
        # keywords alone
        "occurs at least min_frequency=2 times any more":
        "occurs at least --min-frequency 2 times any more",
        "pass text_column= to name the field": "pass --text-column to name the field",
        "count on the CPU (count_on='cpu')": "count on the CPU (--count-on cpu)",
        "pre_tokenizer='a b', but": "--pre-tokenizer 'a b', but",
    }
    for message, want in cases.items():
        assert cli_names(message) == want
    # names inside other words, quoted keys and values are left alone
    same = "stats['max_memory_bytes']; the file's vocab_size 300; output_format=npy"
    assert cli_names(same) == same


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("torch_gpubpe: error: ")
    return lines[0]


def test_cli_errors_name_options(tmp_path, capsys):
    (tmp_path / "x.weird").write_text("hello")
    (tmp_path / "rows.jsonl").write_text('{"text": "a"}\n[1, 2]\n', encoding="utf-8")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    for name, option in (("x.weird", "--format"), ("rows.jsonl", "--text-column"),
                         ("t.parquet", "--text-column")):
        code = cli.main(["train", "--data-files", str(tmp_path / name), "--no-progress"])
        line = _one_line_error(capsys.readouterr().err)
        assert code == 2 and option in line and not KEYWORD.search(line), line
        assert line.count(name) == 1, line


@pytest.mark.gpu
def test_cli_notices_name_options(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n"
                            for t in ["aa bb", "aa cc", "dd"]), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "torch_gpubpe", "train", "--data-files", str(data),
                        "--vocab-size", "300", "--prune-below", "2", "--no-progress"],
                       cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "--prune-below 2 dropped" in r.stderr, r.stderr
    assert "at least --min-frequency 2 times" in r.stderr, r.stderr
    assert not KEYWORD.search(r.stderr), r.stderr


@pytest.mark.gpu
def test_train_counts_skipped_null_rows(tmp_path, capsys):
    from torch_gpubpe import train
    from torch_gpubpe.io.readers import FileReader

    data = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": ["aa bb", None, "aa cc", None, None, "aa"]}), data)
    summary = tmp_path / "summary.json"
    assert cli.main(["train", "--data-files", str(data), "--vocab-size", "260",
                     "--min-frequency", "1", "--no-progress", "--summary-json",
                     str(summary)]) == 0
    out = capsys.readouterr().out
    assert "in 3 documents; skipped 3 null rows" in out, out
    assert json.loads(summary.read_text())["skipped_none_rows"] == 3
    for progress in (False, True):
        stats: dict = {}
        train(FileReader(data), 260, min_frequency=1, stats=stats, progress=progress)
        assert stats["skipped_none"] == 3 and stats["num_documents"] == 3
    capsys.readouterr()   # (the progress bars)
    nulls = tmp_path / "all_null.parquet"
    pq.write_table(pa.table({"text": pa.array([None, None], pa.string())}), nulls)
    assert cli.main(["train", "--data-files", str(nulls), "--no-progress"]) == 2
    assert "skipped 2 null rows" in _one_line_error(capsys.readouterr().err)


def test_count_says_how_many_null_rows_it_skipped(tmp_path, capsys):
    data = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": ["aa bb", None, "aa cc", None]}), data)
    assert cli.main(["count", "--data-files", str(data), "--out", str(tmp_path / "c.parquet"),
                     "--count-on", "cpu", "--no-progress"]) == 0
    assert "2 documents" in (out := capsys.readouterr().out) and "skipped 2 null rows" in out
    nulls = tmp_path / "all_null.parquet"
    pq.write_table(pa.table({"text": pa.array([None], pa.string())}), nulls)
    assert cli.main(["count", "--data-files", str(nulls), "--out", str(tmp_path / "d.parquet"),
                     "--no-progress"]) == 2
    assert "skipped 1 null row " in _one_line_error(capsys.readouterr().err)
