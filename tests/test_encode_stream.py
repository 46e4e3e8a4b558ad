"""The ``encode`` CLI's reading + encoding pipeline (torch_gpubpe.encoding.stream), which
torch_gpubpe.integrations.ray.TokenizeFiles runs too: FileReader's file_starts name the file of every
document over files of every format (empty files, a file listed twice, None rows), parquet is
decoded on the reader's threads (not Arrow's CPU pool, one thread in a Ray worker), and the
loop gives the encoder's tokens in order with the CLI's stage names."""

from __future__ import annotations

import gzip
import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from conftest import corpus_docs
from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.encoding.stream import encode_in_flight, read_ahead
from torch_gpubpe.io.readers import FileReader, documents
from torch_gpubpe.core.vocab import Vocab


@pytest.fixture(scope="module")
def docs() -> list[str]:
    out = [d.replace("\n", " ").replace("\r", " ")          # one line each (text files)
           for d in corpus_docs("tr_manpages", 40_000, 400) + corpus_docs("multi_emoji", 20_000, 300)]
    # the corpora shipped in tests/data are short: repeated (marked) until every file has rows
    k = 0
    while len(out) < 120:
        out += [f"{k} {d}" for d in out[:120 - len(out)]]
        k += 1
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory, docs) -> tuple[list[str], list[list[str | None]]]:
    """Files of every format (one empty, one listed twice in a row, a None row) and each
    file's rows as FileReader reads them."""
    d = tmp_path_factory.mktemp("pipeline")
    rows_a = docs[:20] + [None] + docs[20:35]
    pq.write_table(pa.table({"text": rows_a}), d / "a.parquet", row_group_size=6)
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), d / "empty.parquet")
    rows_j = docs[35:60]
    with gzip.open(d / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"text": t}) + "\n" for t in rows_j))
    (d / "empty.jsonl").write_text("")
    rows_t = [t + "\n" for t in docs[60:80]]
    (d / "c.txt").write_text("".join(rows_t), encoding="utf-8")
    rows_f = docs[80:95]
    feather.write_feather(pa.table({"text": rows_f}), d / "e.arrow", chunksize=4)
    rows_c = docs[95:110]
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.table({"text": rows_c}), d / "f.csv")
    order = [("a.parquet", rows_a), ("empty.parquet", []), ("a.parquet", rows_a),
             ("b.jsonl.gz", rows_j), ("empty.jsonl", []), ("c.txt", rows_t),
             ("e.arrow", rows_f), ("f.csv", rows_c), ("a.parquet", rows_a)]
    return [str(d / n) for n, _ in order], [r for _, r in order]


def test_file_starts_name_the_file_of_every_document(files):
    paths, rows = files
    assert all(rows[k] for k in (0, 3, 5, 6, 7))
    for kw in ({}, {"threads": 1, "chunk_bytes": 700}):
        reader = FileReader(paths, **kw)
        got = []
        for p in documents(reader, batch_bytes=3_000):
            starts = np.array(reader.file_starts).reshape(-1, 2)
            k = np.searchsorted(starts[:, 0], p.indices, "right") - 1
            for j, (f, r) in enumerate(zip(starts[k, 1], p.indices - starts[k, 0])):
                got.append((int(f), int(r), p.data[p.offsets[j]:p.offsets[j + 1]].tobytes()))
        want = [(f, r, t.encode()) for f, rs in enumerate(rows) for r, t in enumerate(rs)
                if t is not None]
        assert got == want
        assert [f for _, f in reader.file_starts] == [f for f, rs in enumerate(rows) if rs]


def test_parquet_is_decoded_on_the_readers_threads(monkeypatch, files):
    """Not on Arrow's CPU pool: its size follows OMP_NUM_THREADS, which Ray sets to 1 in a
    worker without num_cpus (every row group would wait for that one thread)."""
    calls = []
    orig = pq.ParquetFile.read_row_group

    def spy(self, *a, **kw):
        calls.append((kw.get("use_threads", True), threading.current_thread().name))
        return orig(self, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    paths = [p for p in files[0] if p.endswith("a.parquet")]
    n = sum(len(p) for p in documents(FileReader(paths, threads=3)))
    assert n == 3 * 35 and len(calls) == 3 * 6
    assert {c[0] for c in calls} == {False}
    assert all(c[1].startswith("gpubpe-read") for c in calls)


def test_the_pipeline_gives_the_encoders_tokens_in_order(files, docs):
    vocab = Vocab.from_merges(reference.train(docs[::4], 300, 2, 1), ["<|endoftext|>"])
    eot = vocab.token_to_id("<|endoftext|>")
    paths, rows = files
    texts = [t for rs in rows for t in rs if t is not None]
    want = Tokenizer(vocab).encode_batch(texts)
    tok = Tokenizer(vocab)
    stages: dict = {}
    st: dict = {}
    opened = []
    pump = read_ahead(FileReader(paths), batch_bytes=2_000, stats=st)
    try:
        out = [(p, enc) for p, enc in encode_in_flight(tok, iter(pump), stages,
                                                       specials={"eos_id": eot},
                                                       before_first=lambda: opened.append(1))]
    finally:
        pump.close()
    assert len(out) > 3 and opened == [1] and st["skipped_none"] == 3
    assert tok._session().staged_ahead >= 1  # two pending: batch i staged before i - 2's readback
    got = [list(enc[j]) for _, enc in out for j in range(len(enc))]
    assert got == [[*want[k], eot] for k in range(len(texts))]
    assert sum(p.nbytes for p, _ in out) == sum(len(t.encode()) for t in texts)
    assert set(stages) == {"wait_reader", "first_batch_read", "wait_gpu_open",
                           "upload_and_submit", "wait_gpu_and_readback", "steady_encode"}
    # the steady state holds every step after the first batch was read and the GPU opened
    assert stages["steady_encode"] >= stages["upload_and_submit"] - 1e-6


def test_tokenizer_stream_pairs_batches_in_order(docs):
    """Tokenizer.stream: each batch handed back with its encoding, the same for batches of
    documents (packed on a thread) and packed ones, for every depth; BOS/EOS put in by the
    GPU; closed early, the session is left idle; errors name their batch through on_error."""
    from torch_gpubpe.errors import InputError
    from torch_gpubpe.io.readers import Packed

    vocab = Vocab.from_merges(reference.train(docs[::4], 300, 2, 1), ["<|endoftext|>"])
    eot = vocab.token_to_id("<|endoftext|>")
    tok = Tokenizer(vocab)
    batches = [docs[i:i + 7] for i in range(0, 60, 7)] + [[]] + [docs[60:61]]
    want = [tok.encode_batch(b) for b in batches]
    for ahead in (2, 1, 0):
        stages: dict = {}
        got = list(tok.stream(iter(batches), eos_id=eot, ahead=ahead, stages=stages))
        assert [b for b, _ in got] == batches
        assert [[list(e[j]) for j in range(len(e))] for _, e in got] == \
            [[[*w[j], eot] for j in range(len(w))] for w in want]
        assert set(stages) == {"wait_reader", "first_batch_read", "wait_gpu_open",
                               "upload_and_submit", "wait_gpu_and_readback", "steady_encode"}
    packed = []
    for b in batches:
        raw = [t.encode() for t in b]
        offs = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
        packed.append(Packed(np.frombuffer(b"".join(raw), np.uint8), offs,
                             np.arange(len(b)), 0))
    got = [e for _, e in tok.stream(packed, bos_id=eot)]
    assert [[list(e[j]) for j in range(len(e))] for e in got] == \
        [[[eot, *w[j]] for j in range(len(w))] for w in want]
    assert [e.tolist() for e in tok.encode_batches(batches)] == [w.tolist() for w in want]

    it = tok.stream(iter(batches))
    next(it)
    it.close()
    assert not tok._inflight           # the batches in flight were read back
    with pytest.raises(InputError, match="eos_id"):
        tok.stream(batches, eos_id=10**9)   # at the call
    seen = []
    with pytest.raises(InputError):
        list(tok.stream([docs[:2], [3]], on_error=lambda b, step, e: seen.append((b, step))))
    assert list(tok.encode_batches([])) == []
