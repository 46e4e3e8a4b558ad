"""Tokens/s delivered to a training loop: the GPU data path vs tiktoken in DataLoader workers.

    python benchmarks/dataloader.py --help
    python benchmarks/dataloader.py --max-bytes 64000000 --num-workers 4 --step-ms 0 5
    python benchmarks/dataloader.py --quick          # small sizes, for lavapipe

Runs (each a full pass over the same documents, packed into ``seq_len`` blocks with EOS,
``batch_size`` blocks per batch; the "training loop" sleeps ``--step-ms`` per batch to stand in
for the model, so the producer has time to overlap):

* ``gpubpe overlap``    TokenizedDataset, 2 GPU batches in flight + background thread
* ``gpubpe no-overlap`` the same, ``pipeline_depth=1, background=False`` (submit, wait, build)
* ``gpubpe workers=N``  the overlapped dataset in N DataLoader workers (one GPU session each)
* ``tiktoken workers=N`` tiktoken (same vocab, same §2 split pattern; merge-order BPE, so its
  ids may differ) encoding the same shards in N DataLoader workers, packed the same way

Reports steady-state tokens/s (after every worker delivered its first batch) and the time to
the first batch (worker start-up and GPU session set-up), then a
table with the machine, the date and the command. Exactness is the tests' job
(tests/test_integrations_torch_data.py). Worker runs come first: this process must not open the GPU before its
workers start (then 'forkserver' is used; DESIGN.md §8).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from torch_gpubpe.core import reference  # noqa: E402
from torch_gpubpe.integrations.torch_data import TokenizedDataset, make_dataloader, packed_collate  # noqa: E402
from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY, Vocab  # noqa: E402

CORPORA = Path(os.environ.get("TORCH_GPUBPE_CORPORA") or REPO.parent / "shared" / "corpora")
DEFAULT_CORPORA = ["en_novels", "code_cpython_stdlib", "web_html"]
EOT = "<|endoftext|>"


def read_docs(folder: Path, names: list[str], max_bytes: int, max_doc_bytes: int) -> list[str]:
    """Documents of the corpora, round robin over files, each cut to ``max_doc_bytes`` chars."""
    files = [gzip.open(folder / f"{n}.jsonl.gz", "rt", encoding="utf-8") for n in names]
    docs, total = [], 0
    while files and total < max_bytes:
        for f in list(files):
            line = f.readline()
            if not line:
                files.remove(f)
                continue
            text = json.loads(line)["text"]
            for i in range(0, len(text), max_doc_bytes):
                docs.append(text[i : i + max_doc_bytes])
                total += len(docs[-1].encode())
                if total >= max_bytes:
                    return docs
    return docs


def get_vocab(args, docs: list[str]) -> Vocab:
    if args.vocab and Path(args.vocab).is_file():
        return Vocab.load(args.vocab)
    sample, n = [], 0
    for d in docs:
        sample.append(d)
        n += len(d)
        if n > args.train_bytes:
            break
    t0 = time.perf_counter()
    try:  # the GPU trainer, when this checkout has it (then workers start by 'spawn')
        from torch_gpubpe.training.trainer import train

        vocab = train(sample, args.vocab_size, min_frequency=2, special_tokens=[EOT])
        how = "GPU trainer"
    except ImportError:
        merges = reference.train(sample, args.vocab_size, min_frequency=2, num_special_tokens=1)
        vocab = Vocab.from_merges(merges, [EOT])
        how = "reference trainer"
    print(f"vocab {len(vocab)} trained on {n:,} chars by the {how} in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    if args.vocab:
        vocab.save(args.vocab)
    return vocab


class TiktokenPacked(IterableDataset):
    """Baseline: tiktoken encodes this worker's shard (document k → worker k mod N), documents
    joined with EOS and cut into ``seq_len`` blocks exactly as TokenizedDataset does."""

    def __init__(self, docs, vocab: Vocab, seq_len: int, batch_docs: int = 256):
        self.docs, self.vocab, self.seq_len, self.batch_docs = docs, vocab, seq_len, batch_docs

    def __iter__(self):
        import tiktoken

        ranks: dict[bytes, int] = {}
        for i, tb in enumerate(self.vocab.token_bytes):
            ranks.setdefault(tb, i)
        enc = tiktoken.Encoding("gpubpe-bench", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=ranks,
                                special_tokens={})
        eos, L = self.vocab.token_to_id(EOT), self.seq_len
        w = get_worker_info()
        mine = self.docs[w.id :: w.num_workers] if w else self.docs
        carry = np.zeros(0, np.int64)
        for s in range(0, len(mine), self.batch_docs):
            ids = enc.encode_ordinary_batch(mine[s : s + self.batch_docs])
            stream = np.concatenate([carry] + [np.array(x + [eos], np.int64) for x in ids])
            m = (len(stream) - 1) // L if len(stream) > L else 0
            flat = torch.from_numpy(stream[: m * L + 1])
            inputs, labels = flat[: m * L].view(m, L), flat[1:].view(m, L)
            for i in range(m):
                yield {"input_ids": inputs[i], "labels": labels[i]}
            carry = stream[m * L :]


def consume(loader, step_s: float, warm_batches: int = 1) -> dict:
    """Iterate like a training loop. Steady-state tokens/s are counted after ``warm_batches``
    batches (with N workers, N: the DataLoader takes batches from the workers in turn, so by
    then every worker has opened its GPU session and delivered once)."""
    t0 = time.perf_counter()
    t_warm, tokens, batches = None, 0, 0
    t_first = None
    for batch in loader:
        batches += 1
        if t_first is None:
            t_first = time.perf_counter()
        if t_warm is not None:
            tokens += batch["input_ids"].numel()
        elif batches >= warm_batches:
            t_warm = time.perf_counter()
        if step_s:
            time.sleep(step_s)
    t_end = time.perf_counter()
    steady = tokens / max(t_end - t_warm, 1e-9) if t_warm and tokens else float("nan")
    return {"first_s": (t_first or t_end) - t0, "total_s": t_end - t0, "tok_s": steady,
            "batches": batches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--corpora-dir", type=Path, default=CORPORA,
                    help="folder of *.jsonl.gz (default: env TORCH_GPUBPE_CORPORA or "
                         "../shared/corpora)")
    ap.add_argument("--corpora", nargs="+", default=DEFAULT_CORPORA,
                    help="corpus names in that folder")
    ap.add_argument("--max-bytes", type=int, default=32 << 20, help="bytes of text to encode")
    ap.add_argument("--max-doc-bytes", type=int, default=200_000, help="cut documents to this")
    ap.add_argument("--vocab", default=None, help="vocab file (loaded if it exists, else saved)")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--train-bytes", type=int, default=2 << 20, help="text to train the vocab")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16, help="blocks per batch")
    ap.add_argument("--batch-bytes", type=int, default=4 << 20, help="bytes per GPU batch")
    ap.add_argument("--num-workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--step-ms", type=float, nargs="+", default=[0.0, 20.0],
                    help="simulated model time per batch")
    ap.add_argument("--skip", nargs="*", default=[], help="run names to skip (e.g. tiktoken)")
    ap.add_argument("--quick", action="store_true", help="small sizes for lavapipe/CI")
    args = ap.parse_args()
    if args.quick:
        args.max_bytes, args.vocab_size, args.train_bytes = 256 << 10, 1024, 100_000
        args.seq_len, args.batch_bytes, args.num_workers = 256, 64 << 10, [2]
        args.step_ms, args.max_doc_bytes = [0.0, 10.0], 20_000

    docs = read_docs(args.corpora_dir, args.corpora, args.max_bytes, args.max_doc_bytes)
    nbytes = sum(len(d.encode()) for d in docs)
    print(f"{len(docs):,} documents, {nbytes:,} bytes from {', '.join(args.corpora)}", flush=True)
    vocab = get_vocab(args, docs)

    def gpu_ds(**kw):
        return TokenizedDataset(docs, vocab, mode="packed", seq_len=args.seq_len,
                                batch_bytes=args.batch_bytes, **kw)

    rows = []

    def run(name, loader_fn, step_ms, workers=0):
        if any(s in name for s in args.skip):
            return
        r = consume(loader_fn(), step_ms / 1000, max(1, workers))
        rows.append((name, step_ms, r))
        print(f"{name:28s} step {step_ms:5.1f} ms: {r['tok_s']:>14,.0f} tokens/s  first batch "
              f"{r['first_s']:6.2f} s  total {r['total_s']:7.2f} s  {r['batches']} batches",
              flush=True)

    # Workers first: they must start before this process opens the GPU ('forkserver').
    for nw in args.num_workers:
        for step in args.step_ms:
            run(f"tiktoken workers={nw}",
                lambda nw=nw: torch.utils.data.DataLoader(
                    TiktokenPacked(docs, vocab, args.seq_len), batch_size=args.batch_size,
                    num_workers=nw, collate_fn=packed_collate,
                    multiprocessing_context="forkserver"), step, nw)
            run(f"gpubpe workers={nw}",
                lambda nw=nw: make_dataloader(gpu_ds(), batch_size=args.batch_size,
                                              num_workers=nw), step, nw)
    for step in args.step_ms:
        run("gpubpe overlap", lambda: make_dataloader(gpu_ds(), batch_size=args.batch_size), step)
        run("gpubpe no-overlap",
            lambda: make_dataloader(gpu_ds(pipeline_depth=1, background=False),
                                    batch_size=args.batch_size), step)

    # -- table ------------------------------------------------------------------------------------
    from torch_gpubpe.gpu.device import get_gpu

    try:
        adapter = get_gpu().adapter_name
    except Exception as e:  # noqa: BLE001 - report, do not fail the table
        adapter = f"unavailable ({e})"
    print()
    print(f"machine: {platform.node()} · {platform.processor() or platform.machine()} · "
          f"{os.cpu_count()} CPUs · GPU adapter {adapter}")
    print(f"date:    {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"command: {' '.join([sys.executable] + sys.argv)}")
    print(f"data:    {nbytes:,} bytes, {len(docs):,} docs, vocab {len(vocab)}, seq_len "
          f"{args.seq_len}, batch {args.batch_size} blocks, GPU batch {args.batch_bytes:,} B")
    print()
    print(f"| {'run':28s} | step ms | {'tokens/s':>14s} | first batch s | total s |")
    print(f"|{'-' * 30}|---------|{'-' * 16}|--------------|---------|")
    for name, step, r in rows:
        print(f"| {name:28s} | {step:7.1f} | {r['tok_s']:14,.0f} | {r['first_s']:12.2f} | "
              f"{r['total_s']:7.2f} |")
    by = {(n, s): r for n, s, r in rows}
    for step in args.step_ms:
        a, b = by.get(("gpubpe overlap", step)), by.get(("gpubpe no-overlap", step))
        if a and b and b["tok_s"]:
            print(f"double-buffered readback + background thread vs none, model step {step} ms: "
                  f"{a['tok_s'] / b['tok_s']:.2f}x steady-state tokens/s")


if __name__ == "__main__":
    main()
