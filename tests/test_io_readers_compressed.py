"""Compressed JSON Lines and text files (torch_gpubpe.io.readers): gzip inflated by ISA-L (python-isal)
or, without it, by zlib (said in stats and warned once) gives the same documents as Python's gzip
module; line numbers count across chunks; corrupt or truncated files raise InputError naming the
file. No GPU."""

from __future__ import annotations

import gzip
import json
import sys
import time
import warnings

import pyarrow as pa
import pyarrow.json as pj
import pytest

from conftest import corpus_docs
from torch_gpubpe import notices
from torch_gpubpe.io import compression
from torch_gpubpe.errors import InputError
from torch_gpubpe.notices import GPUBPEWarning
from torch_gpubpe.io.readers import FileReader, documents

pytest.importorskip("isal")  # a dependency (pyproject.toml); CI fails on any skip


@pytest.fixture(params=["isal", "isal (buffered)", "zlib"])
def inflate(request, monkeypatch):
    """Both decompressors: "zlib" is a machine where ``import isal`` fails; "isal (buffered)" a
    python-isal without the unbuffered inflater this reader reads into."""
    if request.param == "zlib":
        monkeypatch.setitem(sys.modules, "isal", None)
    if request.param == "isal (buffered)":
        monkeypatch.setattr(compression, "isal_inflater", lambda f: None)
    monkeypatch.setattr(notices, "said", set())
    return request.param


def values(reader):
    return [v for b in reader.batches() for v in b.values.cast(pa.large_binary()).to_pylist()]


def docs_file(tmp_path, docs, name="a.jsonl.gz", members=1, blank_every=0):
    lines = []
    for k, x in enumerate(docs):
        lines.append(json.dumps({"id": k, "text": x}, ensure_ascii=bool(k % 2)) + "\n")
        if blank_every and k % blank_every == 0:
            lines.append("\n")
    raw = "".join(lines).encode("utf-8", "surrogatepass")
    step = -(-len(raw) // members)
    # several gzip members back to back (as `cat a.gz b.gz`, or pigz/bgzip output)
    (tmp_path / name).write_bytes(b"".join(gzip.compress(raw[a : a + step])
                                           for a in range(0, len(raw), step)))
    return tmp_path / name, raw


@pytest.mark.parametrize("chunk", [700, 64 << 10, 8 << 20])
def test_gzip_jsonl_equals_pyarrow_json(tmp_path, inflate, chunk):
    docs = corpus_docs("multi_udhr", max_bytes=300_000) + ["", "y" * 200_000, "a\r\nb"]
    p, raw = docs_file(tmp_path, docs, members=3, blank_every=5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = FileReader(p, chunk_bytes=chunk, threads=2)
        got = values(r)
        again = values(FileReader(p, chunk_bytes=chunk, threads=2))
    want = pj.read_json(pa.py_buffer(raw)).column("text").cast(pa.large_binary()).to_pylist()
    assert got == again == want
    assert r.stats["gzip_inflate"] == inflate
    said = [str(x.message) for x in w if issubclass(x.category, GPUBPEWarning)]
    want_said = {"isal": [], "zlib": [compression.GZIP_WITHOUT_ISAL],
                 "isal (buffered)": [compression.ISAL_BUFFERED]}[inflate]
    assert said == want_said  # once per process, not per file


def test_isal_inflates_into_the_buffer_given(tmp_path):
    """The python-isal this project installs has the unbuffered inflater (else every .gz chunk
    takes the slower, warned path), and reading through it gives the file's bytes."""
    p, raw = docs_file(tmp_path, [f"doc {k} " * (k % 50) for k in range(5000)], members=2)
    stats: dict = {}
    with compression.open_raw(str(p), stats) as f:
        assert isinstance(f, compression.Inflating)
        buf = bytearray(1 << 16)
        got = bytearray()
        while k := f.readinto(buf):
            got += buf[:k]
    assert bytes(got) == raw and stats["gzip_inflate"] == "isal"


def test_line_numbers_count_across_chunks(tmp_path, inflate):
    docs = [f"document {k} " * (k % 13) for k in range(3000)]
    lines = [json.dumps({"text": x}) for x in docs]
    lines[2500] = '{"text": 17}'
    lines[1000:1000] = ["", "  "]  # blank lines count as lines, not as rows
    p = tmp_path / "n.jsonl.gz"
    p.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    r = FileReader(p, chunk_bytes=4096, threads=3)
    with pytest.raises(InputError, match=rf"n.jsonl.gz:{2500 + 2 + 1}: column 'text' holds int"):
        list(documents(r))


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.txt.gz"])
def test_corrupt_or_truncated_gzip_names_the_file(tmp_path, inflate, name):
    docs = [f"line {k} " * 20 for k in range(20_000)]
    p, _ = docs_file(tmp_path, docs, name=name)
    whole = p.read_bytes()
    p.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match=rf"{name}: cannot be decompressed as gzip"):
        list(documents(FileReader(p, chunk_bytes=1 << 16)))
    bad = bytearray(whole)
    bad[len(bad) // 2 : len(bad) // 2 + 8] = b"\xff" * 8
    p.write_bytes(bytes(bad))
    # Inflate may give garbage for a while before it sees the damage (at worst at the CRC):
    # then a chunk parsed meanwhile is refused first, naming its line.
    with pytest.raises(InputError, match=rf"{name}(: cannot be decompressed as gzip|:\d+: not a "
                                         rf"JSON Lines record)"):
        list(documents(FileReader(p, chunk_bytes=1 << 16)))


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.txt.gz"])
def test_small_gzip_truncated_or_with_trailing_garbage_names_the_file(tmp_path, inflate, name):
    """A .gz file whose damage is within the first bytes the format check reads (a file of a
    few lines, cut anywhere or followed by junk): python-isal raises EOFError there, which is
    no OSError; it is an InputError naming the file, as Python's gzip refuses it too."""
    whole = gzip.compress(b'{"text": "a"}\n', mtime=0)
    p = tmp_path / name
    for bad in [whole[:n] for n in range(1, len(whole))] + [whole + b"xyz", whole + b"\x1f"]:
        with pytest.raises((OSError, EOFError)):
            gzip.decompress(bad)
        p.write_bytes(bad)
        with pytest.raises(InputError, match=rf"{name}: cannot be decompressed as gzip") as e:
            list(documents(FileReader(p, chunk_bytes=7)))
        assert "formats are" not in str(e.value)  # its format is right: the file is damaged


def test_nice_lowers_only_the_reader_threads(tmp_path):
    import os
    import threading

    p, _ = docs_file(tmp_path, [f"doc {k} " * 50 for k in range(20_000)])
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    r = FileReader([p, p], nice=3, threads=2, chunk_bytes=1 << 16)
    it = r.batches()
    next(it)

    def niceness():
        return {t.name: os.getpriority(os.PRIO_PROCESS, t.native_id)
                for t in threading.enumerate()
                if t.name.startswith(("gpubpe-read", "gpubpe-decompress")) and t.is_alive()}

    # A pool thread is alive before its initializer (which renices it) has run: wait for that
    # (bounded), then every reader thread must have it.
    deadline = time.monotonic() + 5
    seen = niceness()
    # (and the decompressing threads may start after the first batch: wait for one of them too)
    while ((set(seen.values()) != {mine + 3}
            or not any(n.startswith("gpubpe-decompress") for n in seen))
           and time.monotonic() < deadline):
        time.sleep(0.01)
        seen = niceness()
    rest = sum(len(b) for b in it)
    assert rest > 0 and r.stats["nice"] == 3
    assert any(n.startswith("gpubpe-decompress") for n in seen)
    assert set(seen.values()) == {mine + 3}, seen
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    with pytest.raises(InputError, match="nice must be"):
        FileReader(p, nice=-1)


def test_batches_held_while_chunk_buffers_are_reused(tmp_path):
    """Chunk arrays go back to a pool once parsed: the batches (and their error locations)
    must not refer to them. All batches are held until the end, with a read-ahead so small
    that the decompressing threads reuse the arrays many times."""
    docs = [f"doc {k} é " * (k % 40) for k in range(30_000)]
    files = []
    for i in range(3):
        p, _ = docs_file(tmp_path, docs[i::3], name=f"f{i}.jsonl.gz", blank_every=7 if i else 0)
        files.append(p)
    r = FileReader(files, chunk_bytes=1 << 14, threads=3, read_ahead_bytes=1 << 16)
    held = list(r.batches())
    got = [v for b in held for v in b.values.cast(pa.large_binary()).to_pylist()]
    assert got == [x.encode() for i in range(3) for x in docs[i::3]]
    # row r of a file without blank lines is line r + 1; with them, the lines are counted
    first = [b for b in held if str(files[0]) in b.where(0)]
    assert first[-1].where(len(first[-1]) - 1) == f"{files[0]}:{len(docs[0::3])}"
    last = held[-1]
    n2 = len(docs[2::3])
    assert last.where(len(last) - 1) == f"{files[2]}:{n2 + -(-n2 // 7)}"
