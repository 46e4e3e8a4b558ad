"""The Arrow reader layer (torch_gpubpe.io.readers): every reader gives, byte for byte, the documents
that pyarrow / datasets give for the same file — on files made from the real corpora and on
hypothesis-made ones (nulls, empty rows, invalid UTF-8 in binary columns, CRLF, large rows) —
and shards, resumes and refuses bad input as documented. No GPU."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import corpus_docs
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.readers import (
    FileReader,
    HFReader,
    PyReader,
    arrow_to_packed,
    documents,
    open_source,
    packed_to_arrow,
)

HYP = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])


def read_all(reader, shard=0, num_shards=1, start=0):
    """(global index, value) of every document, value as bytes or None."""
    out = []
    for b in reader.batches(shard, num_shards, start):
        vals = b.values.cast(pa.large_binary()).to_pylist()
        out += list(zip(b.indices.tolist(), vals))
    return out


def as_bytes(values):
    return [None if v is None else (v.encode("utf-8", "surrogatepass") if isinstance(v, str)
                                    else bytes(v)) for v in values]


@pytest.fixture(scope="module")
def real_docs() -> list[str]:
    docs = []
    for name in ("tr_ud_boun", "en_fortunes", "multi_emoji", "code_cpython_headers",
                 "web_html"):
        docs += corpus_docs(name, max_bytes=40_000)
    return docs + ["", "a\r\nb\r\n", "x" * 300_000]


# -- arrow_to_packed -------------------------------------------------------------------------------
@HYP
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30),
       st.integers(0, 5), st.integers(0, 5), st.sampled_from(["binary", "large_binary"]))
def test_arrow_to_packed_slices_and_nulls(values, a, b, kind):
    arr = pa.array(values, getattr(pa, kind)())
    arr = arr.slice(min(a, len(arr)), max(0, len(arr) - a - b))
    got = arr.to_pylist()
    data, offsets = arrow_to_packed(arr, nulls="skip")
    want = [v for v in got if v is not None]
    assert offsets.dtype == np.int64 and offsets[0] == 0 and len(offsets) == len(want) + 1
    assert [bytes(data[offsets[j] : offsets[j + 1]]) for j in range(len(want))] == want
    data, offsets = arrow_to_packed(arr, nulls="empty")
    assert [bytes(data[offsets[j] : offsets[j + 1]]) for j in range(len(got))] == [
        v or b"" for v in got]
    if None in got:
        with pytest.raises(InputError, match=f"document {got.index(None)} is null"):
            arrow_to_packed(arr)
    else:
        data, offsets = arrow_to_packed(arr)
        if len(data):  # zero copy: a view of the Arrow buffer
            assert not data.flags.owndata
        assert packed_to_arrow(data, offsets).to_pylist() == got


def test_arrow_to_packed_strings_and_errors():
    arr = pa.chunked_array([pa.array(["ç", "ab"]), pa.array(["", "ğğ"], pa.string())])
    data, offsets = arrow_to_packed(arr)
    assert bytes(data) == "çabğğ".encode() and offsets.tolist() == [0, 2, 4, 4, 8]
    with pytest.raises(InputError, match="string or binary"):
        arrow_to_packed(pa.array([1, 2]))


# -- real files of every format ----------------------------------------------------------------------
def _write_all_formats(docs: list[str], d: Path, column="text") -> dict[str, Path]:
    t = pa.table({"id": list(range(len(docs))), column: docs})
    paths = {"parquet": d / "a.parquet", "arrow": d / "a.arrow", "feather": d / "a.feather",
             "jsonl": d / "a.jsonl", "jsonl.gz": d / "a.jsonl.gz", "jsonl.zst": d / "a.jsonl.zst"}
    pq.write_table(t, paths["parquet"], row_group_size=max(1, len(docs) // 5))
    with pa.OSFile(str(paths["arrow"]), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=max(1, len(docs) // 3))
    feather.write_feather(t, paths["feather"])
    lines = "".join(json.dumps({"id": k, column: x}) + "\n" for k, x in enumerate(docs))
    paths["jsonl"].write_text(lines, encoding="utf-8")
    paths["jsonl.gz"].write_bytes(gzip.compress(lines.encode()))
    with pa.output_stream(str(paths["jsonl.zst"]), compression="zstd") as f:
        f.write(lines.encode())
    return paths


def test_every_format_equals_pyarrow_and_datasets(tmp_path, real_docs):
    import datasets

    paths = _write_all_formats(real_docs, tmp_path)
    want = [d.encode() for d in real_docs]
    for name, p in paths.items():
        r = FileReader(p, chunk_bytes=64_000, threads=3)
        got = read_all(r)
        assert [k for k, _ in got] == list(range(len(want))), name
        assert [v for _, v in got] == want, name
    # what datasets gives for the same files
    hf_json = datasets.load_dataset("json", data_files=str(paths["jsonl.gz"]), split="train")
    assert [v for _, v in read_all(FileReader(paths["jsonl.gz"]))] == as_bytes(hf_json["text"])
    hf_pq = datasets.load_dataset("parquet", data_files=str(paths["parquet"]), split="train")
    assert [v for _, v in read_all(FileReader(paths["parquet"]))] == as_bytes(hf_pq["text"])
    # a datasets.Dataset / IterableDataset directly (its Arrow table)
    assert [v for _, v in read_all(HFReader(hf_pq))] == want
    assert [v for _, v in read_all(HFReader(hf_pq.to_iterable_dataset(num_shards=2)))] == want


def test_text_files_sample_by_equals_datasets(tmp_path, real_docs):
    import datasets

    text = "".join(d.replace("\r", "") + ("\n\n" if k % 3 else "\n")
                   for k, d in enumerate(real_docs[:400]))
    p = tmp_path / "t.txt"
    p.write_text(text, encoding="utf-8")
    for sample_by in ("line", "paragraph", "document"):
        hf = datasets.load_dataset("text", data_files=str(p), split="train", sample_by=sample_by,
                                   keep_linebreaks=True)
        got = [v for _, v in read_all(FileReader(p, sample_by=sample_by, chunk_bytes=5000))]
        assert got == as_bytes(hf["text"]), sample_by
    # bytes as they are: CRLF kept (datasets' text loader turns it into LF), invalid UTF-8 kept
    raw = b"a\r\nb\xff\n\nc\r\n\r\n\n\nd"
    p.write_bytes(raw)
    assert [v for _, v in read_all(FileReader(p))] == io.BytesIO(raw).readlines()
    assert [v for _, v in read_all(FileReader(p, sample_by="paragraph"))] == [
        x for x in raw.split(b"\n\n") if x]
    assert [v for _, v in read_all(FileReader(p, sample_by="document"))] == [raw]


@HYP
@given(st.lists(st.one_of(st.none(), st.binary(max_size=30),
                          st.binary(min_size=2000, max_size=70_000)), max_size=25),
       st.integers(1, 4), st.integers(1, 7))
def test_binary_columns_with_nulls_and_invalid_utf8(tmp_path_factory, values, num_shards, rg):
    """parquet / Arrow IPC binary columns: invalid UTF-8, nulls, empty and large rows, read by
    shard, equal pyarrow's own reading."""
    d = tmp_path_factory.mktemp("bin")
    t = pa.table({"text": pa.array(values, pa.binary())})
    pq.write_table(t, d / "b.parquet", row_group_size=rg)
    feather.write_feather(t, d / "b.arrow")
    want = pq.read_table(d / "b.parquet").column("text").to_pylist()
    assert want == values
    for f in ("b.parquet", "b.arrow"):
        for shard in range(num_shards):
            got = read_all(FileReader(d / f, threads=2), shard, num_shards)
            assert got == [(k, v) for k, v in enumerate(want) if k % num_shards == shard], f
        start = 2
        got = read_all(FileReader(d / f), 1 % num_shards, num_shards, start)
        assert all(k // num_shards >= start for k, _ in got)


@settings(HYP, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large])
@given(st.lists(st.one_of(st.none(), st.text(max_size=30),
                          # rows over the 2 KB chunk sizes drawn below, on purpose: that makes
                          # the inputs large (hypothesis' data_too_large check, a flake in CI)
                          st.text(st.characters(codec="utf-8"), min_size=3000, max_size=9000)),
                max_size=20),
       st.sampled_from(["\n", "\r\n"]), st.booleans(), st.integers(200, 5000))
def test_jsonl_equals_pyarrow_json(tmp_path_factory, docs, eol, blank, chunk):
    import pyarrow.json as pj

    d = tmp_path_factory.mktemp("jl")
    lines = []
    for k, x in enumerate(docs):
        lines.append(json.dumps({"k": k, "text": x}, ensure_ascii=bool(k % 2)) + eol)
        if blank and k % 3 == 0:
            lines.append(eol)
    raw = "".join(lines).encode("utf-8", "surrogatepass")
    (d / "a.jsonl.gz").write_bytes(gzip.compress(raw))
    got = [v for _, v in read_all(FileReader(d / "a.jsonl.gz", chunk_bytes=chunk))]
    if any(isinstance(x, str) and any(0xD800 <= ord(c) < 0xE000 for c in x) for x in docs):
        # lone surrogates: pyarrow refuses them; read line by line, U+FFFD as reference.to_bytes
        from torch_gpubpe.core.reference import to_bytes

        assert got == [None if x is None else to_bytes(x) for x in docs]
        return
    if docs:
        want = pj.read_json(pa.py_buffer(raw)).column("text").to_pylist()
        assert got == as_bytes(want)
    else:
        assert got == []


def test_many_files_in_parallel_keep_their_order(tmp_path, real_docs):
    files = []
    for i in range(7):
        sub = real_docs[i::7]
        p = tmp_path / f"f{i}.jsonl.gz"
        p.write_bytes(gzip.compress("".join(json.dumps({"text": x}) + "\n" for x in sub).encode()))
        files.append((p, sub))
    want = [x.encode() for _, sub in files for x in sub]
    for threads in (1, 3, 16):
        r = FileReader([p for p, _ in files], threads=threads, chunk_bytes=10_000)
        assert [v for _, v in read_all(r)] == want
    mixed = [files[0][0], tmp_path / "m.parquet", files[1][0]]
    pq.write_table(pa.table({"text": ["p1", "p2"]}), mixed[1])
    assert [v for _, v in read_all(FileReader(mixed))] == (
        [x.encode() for x in files[0][1]] + [b"p1", b"p2"] + [x.encode() for x in files[1][1]])


def test_null_missing_and_non_text_values(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"text": "a"}\n{"text": null}\n{"other": 1}\n{"text": 5}\n{"text": "b"}\n')
    b = next(FileReader(p).batches())
    assert [b.problem(j) for j in range(5)] == [
        None, ("null", "None"), ("missing", "no 'text' field (found ['other'])"),
        ("type", "int"), None]
    assert b.where(3) == f"{p}:4"
    with pytest.raises(InputError, match=r"a.jsonl:4: column 'text' holds int"):
        list(documents(FileReader(p)))
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "n.parquet")
    with pytest.raises(InputError, match=r"n.parquet:row 0: column 'text' holds int64"):
        list(documents(FileReader(tmp_path / "n.parquet")))
    with pytest.raises(InputError, match=r"no column 'body' \(columns: text\)"):
        FileReader(tmp_path / "n.parquet", text_column="body").batches().__next__()


def test_refuses_files_it_cannot_read(tmp_path):
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "real.parquet")
    (tmp_path / "fake.txt").write_bytes((tmp_path / "real.parquet").read_bytes())
    with pytest.raises(InputError, match=r"fake.txt: read as text but it is a parquet file.*"
                                         r"parquet, arrow, json, csv, text"):
        list(FileReader(tmp_path / "fake.txt").batches())
    (tmp_path / "z.jsonl").write_bytes(gzip.compress(b'{"text": "x"}\n'))
    with pytest.raises(InputError, match="it is a gzip file"):
        list(FileReader(tmp_path / "z.jsonl").batches())
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot be read as parquet.*formats are"):
        list(FileReader(tmp_path / "bad.parquet").batches())
    (tmp_path / "x.docx").write_text("hello")
    with pytest.raises(InputError, match="--format"):
        FileReader(tmp_path / "x.docx")
    with pytest.raises(InputError, match="does not exist"):
        FileReader(tmp_path / "nope.jsonl")
    # an executable or an image named .txt (found trying the product as a new user)
    import shutil
    import sys

    shutil.copy(sys.executable, tmp_path / "python.txt")
    with pytest.raises(InputError, match="python.txt: read as text but it is an ELF"):
        list(FileReader(tmp_path / "python.txt").batches())
    (tmp_path / "img.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(InputError, match="it is a PNG file"):
        list(FileReader(tmp_path / "img.txt").batches())


def test_python_sources_shard_and_pack(tmp_path):
    docs = ["a", b"\xff", None, {"text": "row"}, "ç\ud800"]
    r = open_source(docs)
    assert isinstance(r, PyReader)
    assert read_all(r) == [(0, b"a"), (1, b"\xff"), (2, None), (3, b"row"),
                           (4, "ç\ufffd".encode())]
    assert read_all(r, 1, 2) == [(1, b"\xff"), (3, b"row")]
    assert read_all(open_source(iter(docs)), 0, 2, 1) == [(2, None), (4, "ç\ufffd".encode())]
    assert read_all(open_source(lambda: ["x", "y"])) == [(0, b"x"), (1, b"y")]
    big = [f"doc {i}" for i in range(200_000)]
    got = [b for b in PyReader(big).batches()]
    assert len(got) > 1 and sum(len(b) for b in got) == len(big)


def test_documents_limits_and_batching():
    docs = ["aaa", None, "çç", "bbbb", "", "ccc"]
    st_: dict = {}
    packs = list(documents(open_source(docs), stats=st_, batch_bytes=4))
    flat = [bytes(p.data[p.offsets[j] : p.offsets[j + 1]]) for p in packs for j in range(len(p))]
    assert flat == [b"aaa", "çç".encode(), b"bbbb", b"", b"ccc"]
    assert st_["skipped_none"] == 1 and st_["skipped_none_rows"] == [1]
    assert all(p.nbytes <= 8 for p in packs) and len(packs) > 1
    cut = list(documents(open_source(docs), max_bytes=5))
    assert b"".join(bytes(p.data) for p in cut) == "aaaç".encode()
    cut = list(documents(open_source(docs), max_bytes=4))  # "ç" is not split
    assert b"".join(bytes(p.data) for p in cut) == b"aaa" and sum(map(len, cut)) == 2
    assert [len(p) for p in documents(open_source(docs), max_docs=2)] == [2]


@HYP
@given(st.lists(st.sampled_from([b"a", b"\n", b"\r\n", b"\n\n", b"\xff", b"\xc3\xa7", b" ",
                                 b"\r", b"x" * 5000]), max_size=40),
       st.sampled_from(["line", "paragraph", "document"]), st.integers(1, 9000))
def test_text_files_split_as_bytes(tmp_path_factory, pieces, sample_by, chunk):
    """Plain text is bytes (CRLF, invalid UTF-8 kept): lines as io.BytesIO.readlines(),
    paragraphs as bytes.split(b"\\n\\n") without empty pieces, or the whole file; gzip alike."""
    raw = b"".join(pieces)
    d = tmp_path_factory.mktemp("txt")
    (d / "a.txt").write_bytes(raw)
    (d / "a.txt.gz").write_bytes(gzip.compress(raw))
    want = {"line": io.BytesIO(raw).readlines(),
            "paragraph": [x for x in raw.split(b"\n\n") if x],
            "document": [raw]}[sample_by]
    for name in ("a.txt", "a.txt.gz"):
        got = read_all(FileReader(d / name, sample_by=sample_by, chunk_bytes=chunk))
        assert [v for _, v in got] == want, name
        assert [k for k, _ in got] == list(range(len(want)))


def test_sharded_reading_in_a_fresh_process_does_not_import_pandas(tmp_path):
    """A DataLoader worker is a fresh process that reads its shard: taking every k-th row,
    skipping null rows, and packing rows with nulls (``documents``) must not import pandas
    (pyarrow's ``pa.array(...)`` and ``to_numpy()`` do, 0.3 s per worker). The shard's
    documents are the right rows."""
    import subprocess
    import sys

    from conftest import subprocess_env

    docs = [None if i % 5 == 3 else f"row {i} text" for i in range(40)]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": pa.array(docs, pa.large_string())}), path)
    code = (
        "import json, sys\n"
        "from torch_gpubpe.io.readers import documents, open_source\n"
        f"r = open_source({str(path)!r})\n"
        "got = [b.values.to_pylist() for b in r.batches(shard=1, num_shards=3)]\n"
        "packed = b''.join(p.data.tobytes() for p in documents(r))\n"
        "print(json.dumps({'got': [x for g in got for x in g], 'packed': packed.decode(),\n"
        "                  'pandas': 'pandas' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env=subprocess_env())
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert not res["pandas"]
    assert res["packed"] == "".join(d for d in docs if d is not None)  # null rows skipped
    want = [d.encode() if d is not None else None for d in docs[1::3]]
    got = [x.encode() if isinstance(x, str) else x for x in res["got"]]
    assert [g for g in got if g is not None] == [w for w in want if w is not None]


def test_ordered_keeps_results_in_order_and_in_flight_bytes_under_the_window():
    """``ordered`` with sizes: when a result is handed on, the tasks submitted after it hold at
    most ``max_size`` bytes (one task at least, however large), the next task is already
    submitted (reading overlaps the consumer, also when one task fills the window), and the
    results come in task order."""
    from concurrent.futures import ThreadPoolExecutor

    from torch_gpubpe._util import ordered

    sizes = [40, 10, 70, 10, 10, 200, 5, 5, 60, 30, 120, 130, 90]

    class Counting(ThreadPoolExecutor):
        submitted = 0

        def submit(self, fn, /, *args, **kwargs):
            self.submitted += 1
            return super().submit(fn, *args, **kwargs)

    for ahead in (8, 2):
        out = []
        with Counting(8) as pool:
            for i in ordered((lambda i=i: i for i in range(len(sizes))), pool, ahead,
                             sizes=iter(sizes), max_size=100):
                out.append(i)
                after = range(i + 1, pool.submitted)   # submitted, not yet handed on
                assert len(after) <= ahead
                assert sum(sizes[j] for j in after) <= 100 or len(after) == 1, (i, after)
                if i + 1 < len(sizes):
                    assert len(after) >= 1, i   # the next one is being read already
        assert out == list(range(len(sizes)))


def test_parquet_read_ahead_window_gives_the_same_documents(tmp_path):
    """A parquet file of many row groups read with a read-ahead window smaller than one row
    group, and with none: the same documents in the same order as pyarrow's."""
    docs = corpus_docs("en_novels")[:400]
    pq.write_table(pa.table({"text": docs}), tmp_path / "w.parquet", row_group_size=37)
    want = [d.encode() for d in pq.read_table(tmp_path / "w.parquet").column("text").to_pylist()]
    for window in (1, 4096, None):
        got = [v for _, v in read_all(FileReader(tmp_path / "w.parquet", threads=4,
                                                 read_ahead_bytes=window))]
        assert got == want, window
