"""The reader layer's error messages (torch_gpubpe.io): each names the argument that fixes it as
the Python API spells it, says the real error before any notice, and names its file once.

| case | expected | test |
|---|---|---|
| an executable, random bytes or an unknown extension read as text | "an ELF", ``format=`` (FileReader's argument), never ``file_format=`` | test_binary_file_hints_name_the_format_argument |
| a JSON Lines line that is not JSON | InputError naming file:line and column, no slow-path notice before it | test_malformed_json_line_is_the_only_message |
| a row that is not text, a null row refused, an unreadable file | the file named once | test_row_errors_name_the_file_once |
| a JSON Lines value that is a dict | "holds dict, not text" | test_dict_value_is_named_as_such |
| a CSV file without the column | InputError naming the file and its columns | test_csv_without_the_column_names_its_columns |
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError, NotTextError
from torch_gpubpe.io.compression import read_failed
from torch_gpubpe.io.readers import FileReader, documents, open_source


def _error(reader_or_call, **kw) -> str:
    with pytest.raises(InputError) as e:
        if callable(reader_or_call):
            reader_or_call()
        else:
            list(documents(reader_or_call, **kw))
    return str(e.value)


def test_binary_file_hints_name_the_format_argument(tmp_path):
    shutil.copy(sys.executable, tmp_path / "python.txt")
    msg = _error(lambda: list(FileReader(tmp_path / "python.txt").batches()))
    assert "it is an ELF executable file" in msg
    assert "format=" in msg and "file_format" not in msg
    (tmp_path / "random.txt").write_bytes(os.urandom(20_000))
    with pytest.raises(NotTextError) as e:
        list(FileReader(tmp_path / "random.txt").batches())
    assert "format='binary'" in str(e.value) and "file_format" not in str(e.value)
    (tmp_path / "x.weird").write_text("hello")
    msg = _error(lambda: FileReader(tmp_path / "x.weird"))
    assert "format=" in msg and "file_format" not in msg
    # the other kinds keep "a"
    (tmp_path / "img.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    assert "it is a PNG file" in _error(lambda: list(FileReader(tmp_path / "img.txt").batches()))


def test_malformed_json_line_is_the_only_message(tmp_path, monkeypatch):
    monkeypatch.setattr(notices, "said", set())   # the slow-path notice not said yet
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n', encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        msg = _error(lambda: list(FileReader(bad).batches()))
    assert msg == f"{bad}:2: not a JSON Lines record (Expecting value at column 10)"
    assert [str(w.message) for w in caught] == []
    # a chunk the slow path reads to its end still says so, once
    ok = tmp_path / "surrogate.jsonl"
    ok.write_text('{"text": "a\\ud800b"}\n', encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(FileReader(ok).batches())) == 1
    assert ["line by line" in str(w.message) for w in caught] == [True]


def test_row_errors_name_the_file_once(tmp_path):
    js = tmp_path / "rows.jsonl"
    js.write_text('{"text": "ok"}\n{"text": 5}\n', encoding="utf-8")
    msg = _error(FileReader(js))
    assert msg == f"{js}:2: column 'text' holds int, not text"
    nulls = tmp_path / "nulls.jsonl"
    nulls.write_text('{"text": "ok"}\n{"text": null}\n', encoding="utf-8")
    msg = _error(FileReader(nulls), skip_none=False)
    assert msg.count(str(nulls)) == 1 and f"{nulls}:2:" in msg
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    msg = _error(FileReader(tmp_path / "ints.parquet"))
    assert msg.count("ints.parquet") == 1 and "row 0" in msg
    # a reader without files names the source and the row
    assert _error(open_source(["a", 5])) == "list object: row 1: column 'text' holds int, not text"
    # an OSError's own text ends with the file name: said once
    p = str(tmp_path / "locked.jsonl")
    msg = str(read_failed(p, PermissionError(13, "Permission denied", p)))
    assert msg == f"{p}: cannot be read (PermissionError: Permission denied)"


def test_dict_value_is_named_as_such(tmp_path):
    p = tmp_path / "dict.jsonl"
    p.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"text": {"a": 1}}) + "\n",
                 encoding="utf-8")
    assert _error(FileReader(p)) == f"{p}:2: column 'text' holds dict, not text"


def test_csv_without_the_column_names_its_columns(tmp_path):
    p = tmp_path / "table.csv"
    p.write_text("a,b\n1,2\n", encoding="utf-8")
    msg = _error(FileReader(p))
    assert msg.startswith(f"{p}: no column 'text' (columns: a, b)")


@pytest.mark.parametrize("load", ["Vocab.load", "Tokenizer", "Tokenizer.from_hf",
                                  "Tokenizer.from_tiktoken"])
def test_a_missing_vocab_path_in_python_gets_the_clis_message(tmp_path, load):
    """The CLI's ``--vocab`` message for a path that holds no vocab, from Python too; the error
    is also a FileNotFoundError."""
    from torch_gpubpe import Tokenizer, Vocab, VocabNotFoundError

    path = str(tmp_path / "no" / "such")
    fn = {"Vocab.load": Vocab.load, "Tokenizer": Tokenizer, "Tokenizer.from_hf": Tokenizer.from_hf,
          "Tokenizer.from_tiktoken": Tokenizer.from_tiktoken}[load]
    with pytest.raises(VocabNotFoundError, match="no such vocab file") as e:
        fn(path)
    assert isinstance(e.value, FileNotFoundError) and path in str(e.value)


def test_a_non_text_value_is_the_only_message(tmp_path, monkeypatch):
    """A chunk refused for a value that is not text says so, without the slow-path notice
    before it."""
    monkeypatch.setattr(notices, "said", set())   # the slow-path notice not said yet
    js = tmp_path / "rows.jsonl"
    js.write_text('{"text": "ok"}\n{"text": 5}\n', encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        msg = _error(FileReader(js))
    assert msg == f"{js}:2: column 'text' holds int, not text"
    assert [str(w.message) for w in caught] == []
