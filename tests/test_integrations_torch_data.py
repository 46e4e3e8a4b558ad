"""PyTorch data path (torch_gpubpe.integrations.torch_data, DESIGN.md §6, §8): every tensor is checked against
torch_gpubpe.core.reference.encode, on real corpora and random text, at batch and block edges."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import pickle
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPORA, corpus_docs, subprocess_env
from torch_gpubpe.integrations import collate as collatemod
from torch_gpubpe.integrations import torch_data as datamod
from torch_gpubpe.core import reference
from torch_gpubpe.integrations.torch_data import (
    IGNORE_INDEX,
    PadCollator,
    TextFiles,
    TokenizedDataset,
    add_special_tokens,
    make_dataloader,
    pad_collate,
)
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.sources import TextSource
from torch_gpubpe.core.vocab import Vocab

REPO = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"


# ------------------------------------------------------------------------------------------------
# Fixtures: a small real corpus, a vocab trained on it, the reference encoding
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def docs() -> list[str]:
    out = []
    for name, nbytes in (("tr_ud_boun", 12_000), ("en_fortunes", 12_000),
                         ("multi_xquad", 16_000), ("code_cpython_headers", 12_000)):
        out += corpus_docs(name, max_bytes=nbytes, max_doc_bytes=3_000)
    out += ["", f"a literal {EOT} is text", EOT, "", "x"]
    return out


@pytest.fixture(scope="module")
def vocab(docs) -> Vocab:
    merges = reference.train(docs, vocab_size=600, min_frequency=1, num_special_tokens=2)
    return Vocab.from_merges(merges, [EOT, "<|bos|>"])


@pytest.fixture(scope="module")
def ref(vocab):
    """text → reference ids (memoised: the oracle is slow)."""
    cache: dict = {}

    def encode(text):
        key = text if isinstance(text, (str, bytes)) else bytes(text)
        if key not in cache:
            cache[key] = reference.encode(key, vocab.merges)
        return cache[key]

    return encode


@pytest.fixture(scope="module")
def tok(vocab):
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    return Tokenizer(vocab)


def stream_of(docs, ref, eos, bos=None):
    out = []
    for d in docs:
        out += ([bos] if bos is not None else []) + ref(d) + ([eos] if eos is not None else [])
    return out


def fake_worker(monkeypatch, wid: int, num_workers: int) -> None:
    info = SimpleNamespace(id=wid, num_workers=num_workers)
    monkeypatch.setattr(datamod, "get_worker_info", lambda: info if num_workers > 1 else None)


# ------------------------------------------------------------------------------------------------
# Pure host helpers (no GPU)
# ------------------------------------------------------------------------------------------------
@settings(deadline=None)
@given(st.lists(st.lists(st.integers(0, 999), max_size=6), max_size=6),
       st.sampled_from([None, 1000]), st.sampled_from([None, 1001]))
def test_add_special_tokens(lists, bos, eos):
    ids = np.array([t for x in lists for t in x], np.uint32)
    offsets = np.cumsum([0] + [len(x) for x in lists]).astype(np.int64)
    got, off = add_special_tokens(ids, offsets, bos, eos)
    want = [([bos] if bos else []) + x + ([eos] if eos else []) for x in lists]
    assert [got[off[k] : off[k + 1]].tolist() for k in range(len(lists))] == want
    assert got.dtype == np.int64


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(0, 70000), max_size=9), min_size=1, max_size=6),
       st.integers(-1, 5), st.sampled_from(["right", "left"]),
       st.sampled_from([None, 1, 4]), st.sampled_from([torch.long, torch.int32]))
def test_pad_collate_shapes_and_contents(seqs, pad_id, side, max_length, dtype):
    batch = [torch.tensor(s, dtype=dtype) for s in seqs]
    out = pad_collate(batch, pad_id=pad_id, padding_side=side, max_length=max_length)
    kept = [s[:max_length] if max_length else s for s in seqs]
    width = max(len(s) for s in kept)
    assert out["input_ids"].shape == out["attention_mask"].shape == (len(seqs), width)
    assert out["input_ids"].dtype == dtype and out["attention_mask"].dtype == torch.long
    for row, mask, s in zip(out["input_ids"].tolist(), out["attention_mask"].tolist(), kept):
        pad = width - len(s)
        if side == "right":
            assert row == s + [pad_id] * pad and mask == [1] * len(s) + [0] * pad
        else:
            assert row == [pad_id] * pad + s and mask == [0] * pad + [1] * len(s)


def test_pad_collator_dicts_and_errors():
    out = PadCollator(pad_id=7)([{"input_ids": torch.tensor([1, 2]), "doc_index": 4},
                                 {"input_ids": torch.tensor([3]), "doc_index": 9}])
    assert out["input_ids"].tolist() == [[1, 2], [3, 7]]
    assert out["doc_index"].tolist() == [4, 9]
    with pytest.raises(ValueError, match="padding_side"):
        PadCollator(padding_side="middle")
    with pytest.raises(ValueError, match="not 1-D"):
        pad_collate([torch.zeros(2, 2, dtype=torch.long)])
    with pytest.raises(ValueError, match="empty batch"):
        pad_collate([])
    pickle.loads(pickle.dumps(PadCollator(pad_id=3, padding_side="left", max_length=5)))


def test_argument_errors(vocab):
    with pytest.raises(ValueError, match="seq_len"):
        TokenizedDataset(["a"], vocab, mode="packed")
    with pytest.raises(ValueError, match="mode"):
        TokenizedDataset(["a"], vocab, mode="blocks")
    with pytest.raises(ValueError, match="dtype"):
        TokenizedDataset(["a"], vocab, dtype=torch.float32)
    with pytest.raises(ValueError, match="rank"):
        TokenizedDataset(["a"], vocab, rank=2, world_size=2)
    with pytest.raises(InputError, match="no special token '<\\|eos\\|>'"):
        TokenizedDataset(["a"], vocab, mode="packed", seq_len=4, eos_token="<|eos|>")
    with pytest.raises(InputError, match="names no file"):
        TokenizedDataset("just some text", vocab)


def test_pickles_without_gpu_state(vocab, tok):
    ds = TokenizedDataset([f"doc {i}" for i in range(5)], tok)
    list(ds)  # the session exists in this process now
    assert ds._tok is not None
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._tok is None and isinstance(clone._tokenizer_arg, Vocab)
    gen = TokenizedDataset((t for t in ["a", "b"]), vocab)
    with pytest.raises(InputError, match="one-shot iterator"):
        pickle.dumps(gen)


# ------------------------------------------------------------------------------------------------
# GPU: exact against the reference
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("batch_bytes", [1, 5_000, 1 << 20])
def test_documents_mode_equals_reference(docs, ref, tok, batch_bytes):
    ds = TokenizedDataset(docs, tok, batch_bytes=batch_bytes)
    out = list(ds)
    assert len(out) == len(docs)
    for k, (t, d) in enumerate(zip(out, docs)):
        assert t.dtype == torch.long and t.dim() == 1
        assert t.tolist() == ref(d), f"document {k}"


@pytest.mark.gpu
def test_documents_mode_options(docs, ref, tok, vocab):
    eos, bos = vocab.token_to_id(EOT), vocab.token_to_id("<|bos|>")
    ds = TokenizedDataset(docs[:40], tok, add_bos=True, add_eos=True, bos_token="<|bos|>",
                          dtype=torch.int32, with_index=True, batch_bytes=3000)
    items = list(ds)
    assert len(items) == 40
    for k, item in enumerate(items):
        assert item["doc_index"] == k
        assert item["input_ids"].dtype == torch.int32
        assert item["input_ids"].tolist() == [bos] + ref(docs[k]) + [eos]


@pytest.mark.gpu
@pytest.mark.parametrize("side", ["right", "left"])
def test_dataloader_pads_documents_against_reference(docs, ref, tok, side):
    ds = TokenizedDataset(docs[:30], tok, with_index=True, pad_id=-1, batch_bytes=4000)
    dl = make_dataloader(ds, batch_size=4,
                         collate_fn=PadCollator(pad_id=-1, padding_side=side, max_length=50))
    seen = 0
    for batch in dl:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        for row, m, k in zip(ids.tolist(), mask.tolist(), batch["doc_index"].tolist()):
            want = ref(docs[k])[:50]
            assert [t for t, keep in zip(row, m) if keep] == want
            assert sum(m) == len(want) and all(t == -1 for t, keep in zip(row, m) if not keep)
            seen += 1
        assert ids.shape[1] == min(50, max(len(ref(docs[k])) for k in batch["doc_index"]))
    assert seen == 30


def test_pin_memory_without_accelerator_warns(vocab, monkeypatch):
    collatemod._warned.clear()
    monkeypatch.setattr(collatemod, "accelerator_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="pin_memory"):
        out = PadCollator(pin_memory=True)([torch.tensor([1, 2])])
    assert not out["input_ids"].is_pinned()


@pytest.mark.gpu
def test_eos_literal_is_text(tok, vocab, ref):
    eos = vocab.token_to_id(EOT)
    docs = [EOT, f"x{EOT}y", EOT * 3]
    got = list(TokenizedDataset(docs, tok))
    assert len(got) == len(docs)
    for t, d in zip(got, docs):
        assert eos not in t.tolist() and t.tolist() == ref(d)
    blocks = list(TokenizedDataset(docs, tok, mode="packed", seq_len=3, drop_last=False))
    ids = torch.cat([b["input_ids"] for b in blocks]).tolist()
    assert ids.count(eos) == len(docs)  # one EOS per document, none from the text


@pytest.mark.gpu
@pytest.mark.parametrize("seq_len,add_bos,batch_bytes", [(1, False, 4000), (61, True, 7000),
                                                         (512, False, 1 << 20)])
def test_packed_blocks_equal_reference_stream(docs, ref, tok, vocab, seq_len, add_bos,
                                              batch_bytes):
    eos = vocab.token_to_id(EOT)
    stream = stream_of(docs, ref, eos, eos if add_bos else None)
    ds = TokenizedDataset(docs, tok, mode="packed", seq_len=seq_len, add_bos=add_bos,
                          batch_bytes=batch_bytes)
    blocks = list(ds)
    m = (len(stream) - 1) // seq_len
    assert len(blocks) == m
    for i, b in enumerate(blocks):
        assert b["input_ids"].shape == b["labels"].shape == (seq_len,)
        assert b["input_ids"].tolist() == stream[i * seq_len : (i + 1) * seq_len]
        assert b["labels"].tolist() == stream[i * seq_len + 1 : (i + 1) * seq_len + 1]
    # drop_last=False: the tail comes as one padded block; labels -100 past the stream.
    last = list(TokenizedDataset(docs, tok, mode="packed", seq_len=seq_len, add_bos=add_bos,
                                 batch_bytes=batch_bytes, drop_last=False, pad_id=0))
    tail = stream[m * seq_len :]
    assert len(last) == m + 1
    assert last[-1]["input_ids"].tolist() == tail + [0] * (seq_len - len(tail))
    assert last[-1]["labels"].tolist() == tail[1:] + [IGNORE_INDEX] * (seq_len - len(tail) + 1)
    dl = make_dataloader(ds, batch_size=4)
    first = next(iter(dl))
    assert first["input_ids"].shape == (min(4, m), seq_len)


@pytest.mark.gpu
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from([EOT, ""]),
                max_size=12),
       st.integers(1, 9), st.integers(1, 200), st.booleans())
def test_random_text_packed_and_documents(tok, vocab, texts, seq_len, batch_bytes, background):
    ref = lambda t: reference.encode(t, vocab.merges)  # noqa: E731
    eos = vocab.token_to_id(EOT)
    got = list(TokenizedDataset(texts, tok, batch_bytes=batch_bytes, background=background))
    assert [t.tolist() for t in got] == [ref(t) for t in texts]
    stream = stream_of(texts, ref, eos)
    blocks = list(TokenizedDataset(texts, tok, mode="packed", seq_len=seq_len,
                                   batch_bytes=batch_bytes, background=background,
                                   drop_last=False, pipeline_depth=1 + background))
    ids = [t for b in blocks for t in b["input_ids"].tolist()]
    assert ids[: len(stream)] == stream and len(ids) - len(stream) < seq_len
    labels = [t for b in blocks for t in b["labels"].tolist()]
    assert labels[: len(stream) - 1] == stream[1:]
    assert all(x == IGNORE_INDEX for x in labels[max(0, len(stream) - 1):])


@pytest.mark.gpu
def test_empty_and_huge_documents(tok, ref, vocab):
    huge = corpus_docs("en_novels", max_bytes=150_000, max_doc_bytes=150_000)[0]
    docs = ["", huge, "", " " * 70_000 + "a", "", "ş" * 20_000, ""]
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    # The second tokenizer slices every batch into 8 KiB passes and lets a GPU thread walk
    # only 500 steps per dispatch: the data path must not care.
    for tk in (tok, Tokenizer(vocab, max_slice_bytes=8192, thread_budget=500)):
        got = list(TokenizedDataset(docs, tk, batch_bytes=1000))
        assert [len(t) == 0 for t in got] == [d == "" for d in docs]
        for k, (t, d) in enumerate(zip(got, docs)):
            assert t.tolist() == ref(d), f"document {k}"
    assert list(TokenizedDataset([], tok)) == []
    blocks = list(TokenizedDataset(["", ""], tok, mode="packed", seq_len=1))
    eos = vocab.token_to_id(EOT)
    assert [(b["input_ids"].tolist(), b["labels"].tolist()) for b in blocks] == [([eos], [eos])]


@pytest.mark.gpu
def test_background_thread_runs_ahead_and_stops_on_close(docs, tok):
    import threading

    before = set(threading.enumerate())  # readers other tests left to the garbage collector

    def readers():
        return [t for t in threading.enumerate()
                if t.name.startswith("torch_gpubpe reader") and t not in before]

    # Enough batches that the reader is still blocked on its bounded queue after the first item,
    # however fast the GPU is.
    ds = TokenizedDataset(docs * 50, tok, batch_bytes=500)
    it = iter(ds)
    next(it)
    assert len(readers()) == 1  # reading + GPU submits run beside the consumer
    it.close()
    assert readers() == []
    it = iter(TokenizedDataset(docs, tok, background=False))
    next(it)
    assert readers() == []
    it.close()


@pytest.mark.gpu
def test_bad_documents_raise_or_skip(tok, ref):
    docs = ["ok", "fine", None, "good", 17]
    with pytest.raises(InputError, match=r"document 2 \(item 2; shard 0 of 1.*None"):
        list(TokenizedDataset(docs, tok))
    ds = TokenizedDataset(docs, tok, on_bad_document="skip", with_index=True)
    got = list(ds)
    assert [g["doc_index"] for g in got] == [0, 1, 3]
    assert [g["input_ids"].tolist() for g in got] == [ref("ok"), ref("fine"), ref("good")]
    assert ds.skipped_documents == 2


@pytest.mark.gpu
def test_error_in_worker_names_document_and_shard(tok, monkeypatch):
    fake_worker(monkeypatch, 1, 2)
    docs = ["a", "b", "c", None]
    with pytest.raises(InputError,
                       match=r"document 3 \(item 3; shard 1 of 2: rank 0/1, worker 1/2"):
        list(TokenizedDataset(docs, tok))


# ------------------------------------------------------------------------------------------------
# Sharding: every document read by exactly one worker of one rank
# ------------------------------------------------------------------------------------------------
def _hf_sources(docs, tmp_path):
    import datasets

    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for k, d in enumerate(docs):
            f.write(json.dumps({"id": k, "body": d}) + "\n")
            if k % 7 == 0:
                f.write("\n")  # blank lines are not documents
    hf = datasets.Dataset.from_dict({"body": docs})
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torch_gpubpe.io.readers import FileReader

    pq.write_table(pa.table({"body": docs}), tmp_path / "docs.parquet", row_group_size=7)
    return {
        "parquet": (FileReader(tmp_path / "docs.parquet", text_column="body"), "ignored"),
        "list": (docs, "text"),
        "jsonl.gz": (TextFiles(path, text_column="body"), "text"),
        "hf": (hf, "body"),
        "hf-stream": (hf.to_iterable_dataset(num_shards=3), "body"),
        "TextSource": (TextSource(data_files=(str(path),), text_column="body"), "ignored"),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("world_size,num_workers", [(1, 1), (2, 3), (3, 2)])
def test_sharding_exact_workers_times_ranks(docs, ref, tok, tmp_path, monkeypatch, world_size,
                                            num_workers):
    sub = docs[:: max(1, len(docs) // 60)]
    for name, (source, col) in _hf_sources(sub, tmp_path).items():
        seen = Counter()
        for rank in range(world_size):
            for w in range(num_workers):
                fake_worker(monkeypatch, w, num_workers)
                ds = TokenizedDataset(source, tok, text_column=col, rank=rank,
                                      world_size=world_size, with_index=True, batch_bytes=2000)
                for item in ds:
                    k = item["doc_index"]
                    assert k % (world_size * num_workers) == rank * num_workers + w, name
                    assert item["input_ids"].tolist() == ref(sub[k]), (name, k)
                    seen[k] += 1
        assert seen == Counter(range(len(sub))), name


@pytest.mark.gpu
def test_more_shards_than_documents_end_cleanly(tok, ref, monkeypatch):
    docs = ["alpha", "beta"]
    seen = []
    for w in range(5):
        fake_worker(monkeypatch, w, 5)
        seen += [i["doc_index"] for i in TokenizedDataset(docs, tok, with_index=True)]
        blocks = list(TokenizedDataset(docs, tok, mode="packed", seq_len=1))
        assert len(blocks) == (len(ref(docs[w])) if w < 2 else 0)
    assert sorted(seen) == [0, 1]


@pytest.mark.gpu
def test_rank_from_torch_distributed(tok, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
    ds = TokenizedDataset([str(i) for i in range(10)], tok, with_index=True)
    assert [i["doc_index"] for i in ds] == [1, 4, 7]


def test_text_files_plain_text(tmp_path, vocab):
    (tmp_path / "a.txt").write_bytes(b"line one\nline two\n\xff bad utf-8\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"second file"))
    files = [tmp_path / "a.txt", tmp_path / "b.txt.gz"]

    def docs(reader, shard=0, n=1):
        return [(int(k), v) for b in reader.batches(shard, n)
                for k, v in zip(b.indices, b.values.to_pylist())]

    per_file = docs(TextFiles(files, sample_by="document"))
    assert [t for _, t in per_file] == [b"line one\nline two\n\xff bad utf-8\n", b"second file"]
    # the same rule and names as the CLI's --sample-by: lines keep their "\n"
    per_line = docs(TextFiles(files, sample_by="line"), 1, 2)
    assert per_line == [(1, b"line two\n"), (3, b"second file")]
    assert docs(TextFiles(files, text_documents="file")) == per_file  # the former keyword
    with pytest.raises(InputError, match="does not exist"):
        TextFiles(tmp_path / "missing.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n{"txt": "y"}\n')
    b = next(TextFiles(bad).batches())
    assert b.problem(0) is None and b.problem(1) == ("missing", "no 'text' field (found ['txt'])")
    with pytest.raises(InputError, match=r"bad.jsonl:2: no 'text' field"):
        list(TokenizedDataset(TextFiles(bad), vocab, background=False))


# ------------------------------------------------------------------------------------------------
# Resume (torchdata StatefulDataLoader convention)
# ------------------------------------------------------------------------------------------------
def _run_in_pieces(make, stops):
    """Iterate, stopping after each count in ``stops``, saving and reloading the state into a
    fresh dataset each time; returns the concatenated items."""
    out, state = [], None
    for n in stops + [None]:
        ds = make()
        if state is not None:
            ds.load_state_dict(pickle.loads(pickle.dumps(state)))
        it = iter(ds)
        for item in it if n is None else (next(it) for _ in range(n)):
            out.append(item)
        state = ds.state_dict()
        it.close()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["packed", "documents"])
def test_resume_twice_equals_uninterrupted(docs, tok, mode):
    kw = dict(mode=mode, batch_bytes=2500, on_bad_document="skip")
    kw.update(seq_len=37, add_bos=True) if mode == "packed" else None
    src = docs[:80] + [None] + docs[80:120]
    make = lambda: TokenizedDataset(src, tok, **kw)  # noqa: E731
    full = list(make())
    key = (lambda b: b["input_ids"].tolist()) if mode == "packed" else (lambda t: t.tolist())
    for stops in ([3, 4], [1, 1], [len(full) // 2, len(full) // 3], [len(full) - 1, 1]):
        got = _run_in_pieces(make, stops)
        assert [key(x) for x in got] == [key(x) for x in full], stops
    other = TokenizedDataset(src, tok, mode="packed", seq_len=5)
    with pytest.raises(ValueError, match="seq_len"):
        other.load_state_dict(make().state_dict())


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_stateful_dataloader_workers_resume_twice(docs, vocab, tok, monkeypatch):
    """torchdata StatefulDataLoader, 2 forkserver workers, stopped and resumed twice, gives the
    batches of an uninterrupted run (computed in-process: the DataLoader takes batches from the
    workers in turn, then from the one left)."""
    from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: F401

    src, kw = docs[:60], dict(mode="packed", seq_len=64, batch_bytes=3000)
    per_worker = []
    for w in range(2):
        fake_worker(monkeypatch, w, 2)
        blocks = [b["input_ids"] for b in TokenizedDataset(src, tok, **kw)]
        per_worker.append([torch.stack(blocks[i : i + 2]) for i in range(0, len(blocks), 2)])
    monkeypatch.undo()
    full = [b for pair in itertools.zip_longest(*per_worker) for b in pair if b is not None]
    assert len(full) > 6

    got, state = [], None
    for n in (3, 2, None):
        dl = make_dataloader(TokenizedDataset(src, vocab, **kw), batch_size=2, num_workers=2,
                             stateful=True, multiprocessing_context="forkserver", timeout=600)
        if state is not None:
            dl.load_state_dict(state)
        it = iter(dl)
        got += [b["input_ids"] for b in (it if n is None else itertools.islice(it, n))]
        state = dl.state_dict()
        del it, dl
    assert len(got) == len(full)
    assert all(torch.equal(a, b) for a, b in zip(got, full))


# ------------------------------------------------------------------------------------------------
# Processes: spawn / forkserver / fork
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_spawn_workers_same_tokens_as_in_process(docs, ref, vocab, tok):
    src = docs[:50]
    ds = TokenizedDataset(src, vocab, with_index=True, batch_bytes=2000)
    dl = make_dataloader(ds, batch_size=None, num_workers=2, timeout=600)
    assert dl.multiprocessing_context.get_start_method() == "spawn"  # this process has a GPU
    got = {item["doc_index"]: item["input_ids"].tolist() for item in dl}
    assert got == {k: ref(d) for k, d in enumerate(src)}
    inproc = Counter(t for x in TokenizedDataset(src, tok) for t in x.tolist())
    assert Counter(t for ids in got.values() for t in ids) == inproc


def _script(body: str, timeout: float = 150) -> subprocess.CompletedProcess:
    prelude = textwrap.dedent(f"""
        import sys, torch
        sys.path[:0] = [{str(REPO)!r}]
        from torch_gpubpe.core import reference
        from torch_gpubpe.core.vocab import Vocab
        from torch_gpubpe.integrations.torch_data import TokenizedDataset, make_dataloader
        docs = [f"document {{i}}: {{'şey ' * (i % 7)}}end" for i in range(23)]
        vocab = Vocab.from_merges(reference.train(docs, 300, 1, 1), ["<|endoftext|>"])
    """)
    env = dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(body)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.gpu
def test_fork_works_until_gpu_touched_then_clear_error():
    """One fresh process: fork workers while it has not opened the GPU (works, same tokens),
    then open the GPU and fork again (GPUForkError from make_dataloader and from the worker,
    within the timeout: never a hang)."""
    r = _script("""
        from torch.utils.data import DataLoader
        from torch_gpubpe.gpu import device as gpu
        from torch_gpubpe.errors import GPUForkError
        if __name__ == "__main__":
            ds = TokenizedDataset(docs, vocab, mode="packed", seq_len=8)
            dl = make_dataloader(ds, batch_size=None, num_workers=2,
                                 multiprocessing_context="fork", timeout=120)
            got = sorted(t for b in dl for t in b["input_ids"].tolist())
            assert gpu._touched_pid is None, "the parent must not have touched the GPU"
            want = []
            for w in range(2):
                s = [t for d in docs[w::2]
                     for t in reference.encode(d, vocab.merges) + [vocab.num_tokens]]
                want += s[: (len(s) - 1) // 8 * 8]
            assert got == sorted(want), (len(got), len(want))
            print("FORK-OK")

            gpu.get_gpu()
            try:
                make_dataloader(ds, num_workers=2, multiprocessing_context="fork")
            except GPUForkError as e:
                print("EARLY-OK", e)
            dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork",
                            timeout=60)
            try:
                list(dl)
            except GPUForkError as e:
                assert "spawn" in str(e) and "forkserver" in str(e)
                print("WORKER-OK")
    """)
    for mark in ("FORK-OK", "EARLY-OK", "WORKER-OK"):
        assert mark in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------
# The example runs (executable documentation)
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_example_pretrain_loop_runs():
    corpus = CORPORA / "tr_ud_boun.jsonl.gz"
    r = subprocess.run(
        [sys.executable, str(REPO / "examples" / "pretrain_loop.py"), "--corpus", str(corpus),
         "--steps", "4", "--max-bytes", "60000", "--vocab-size", "400", "--seq-len", "64"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env=subprocess_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tokens/s" in r.stdout and "loss" in r.stdout


def test_list_of_file_names_and_missing_eos_are_clear_errors(vocab, tmp_path):
    from torch_gpubpe import Vocab

    f = tmp_path / "a.txt"
    f.write_text("hello")
    with pytest.raises(InputError, match=r"TextFiles\(paths\)"):
        TokenizedDataset([str(f)], vocab)
    assert len(list(TokenizedDataset([f], vocab, background=False))) == 1  # Path objects: files
    plain = Vocab.from_merges(vocab.merges)  # no special tokens
    with pytest.raises(InputError, match=r"special_tokens=\['<\|endoftext\|>'\]"):
        TokenizedDataset(["x"], plain, mode="packed", seq_len=4)


def test_rows_as_dicts_use_the_text_column(vocab, ref):
    rows = [{"text": "merhaba dünya", "id": 1}, {"text": "", "id": 2}]
    got = [t.tolist() for t in TokenizedDataset(rows, vocab, background=False)]
    assert got == [ref("merhaba dünya"), []]
    for rows in ([{"body": "x"}], [{"text": "hello"}, {"body": "x"}]):   # (named as files do)
        with pytest.raises(InputError, match=r"has no column 'text' \(columns: body\); pass "
                                             "text_column="):
            list(TokenizedDataset(rows, vocab, background=False))


@pytest.mark.gpu
@pytest.mark.parametrize("sample_by", ["line", "paragraph", "document"])
def test_text_files_same_documents_as_the_cli(tmp_path, tok, ref, sample_by):
    """One rule, one name: TokenizedDataset(path, sample_by=...) reads the documents the CLI's
    --sample-by reads (the reader behind `train`/`encode`)."""
    from torch_gpubpe.io.sources import TextSource, iter_texts

    p = tmp_path / "a.txt"
    p.write_bytes("bir iki\r\n\nüç\n\n\ndört beş\nson".encode())
    cli_docs = list(iter_texts(TextSource(data_files=(str(p),), sample_by=sample_by)))
    got = [t.tolist() for t in TokenizedDataset(p, tok, sample_by=sample_by, background=False)]
    assert got == [ref(d) for d in cli_docs] and len(got) == {"line": 7, "paragraph": 3,
                                                             "document": 1}[sample_by]
