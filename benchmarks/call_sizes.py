"""Benchmark: one large corpus in memory (``list[str]``, e.g. 868 MB) encoded as one call, as
calls of N documents, and as a stream of batches, against gigatoken on the same documents.

    python3 benchmarks/call_sizes.py --jsonl /tmp/big.jsonl --json gpt2=/tmp/tj/gpt-2.json \\
        llama3=/tmp/tj/llama-bpe.json

Rows per ``tokenizer.json``, MB/s of UTF-8 input, best of ``--repeat`` after one untimed run:

* gigatoken: ``gigatoken.Tokenizer(path).encode_batch(docs)`` (one call, its threads).
* ``encode_batch`` once over all documents; ``encode_batch`` per ``--pieces`` documents; and
  ``encode_batches`` over pieces of the largest ``--pieces`` (two in flight).

Ids: the one-call result against gigatoken's, per document (text that spells a special token
is text in both: ``encode_batch`` without ``allowed_special``). Ends with the machine, date,
command and SM clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, print_footer  # noqa: E402

from torch_gpubpe.encoding.tokenizer import Tokenizer  # noqa: E402


def best(fn, repeat: int) -> tuple[float, object]:
    fn()  # untimed: warm caches and clocks
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t0, out))
    return min(runs, key=lambda r: r[0])


def flat(out) -> tuple[np.ndarray, np.ndarray]:
    """gigatoken's ids (an awkward array where awkward is installed, else a list) as one
    int64 array and the length of each document's."""
    try:
        import awkward as ak

        return (np.asarray(ak.to_numpy(ak.flatten(out)), np.int64),
                np.asarray(ak.to_numpy(ak.num(out)), np.int64))
    except ImportError:
        lens = np.fromiter(map(len, out), np.int64, len(out))
        return np.concatenate([np.asarray(x, np.int64) for x in out]), lens


def pieces(docs: list, n: int) -> list[list]:
    return [docs[i:i + n] for i in range(0, len(docs), n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jsonl", required=True, help='JSON Lines file, {"text": ...} per line')
    ap.add_argument("--json", nargs="+", metavar="NAME=PATH", required=True,
                    help="tokenizer.json files")
    ap.add_argument("--pieces", nargs="*", type=int, default=[5_000, 20_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import gigatoken

    with open(args.jsonl, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    total = sum(len(d.encode()) for d in docs)
    print(f"{len(docs):,} documents, {total / 1e6:,.1f} MB ({args.jsonl})", flush=True)
    rows = []
    for spec in args.json:
        name, _, path = spec.partition("=")
        giga = gigatoken.Tokenizer(path)
        g_s, g_out = best(lambda: giga.encode_batch(docs), args.repeat)
        g_ids, g_len = flat(g_out)
        del g_out
        tok = Tokenizer.from_hf(path)
        tok.encode_batch(docs[:64])
        res = [("gigatoken 0.10 encode_batch, one call", g_s)]
        with GPUMonitor() as mon:
            s, one = best(lambda: tok.encode_batch(docs), args.repeat)
            res.append(("torch_gpubpe encode_batch, one call", s))
            for n in args.pieces:
                ps = pieces(docs, n)
                s, _ = best(lambda: [tok.encode_batch(p) for p in ps], args.repeat)
                res.append((f"torch_gpubpe encode_batch per {n:,} documents", s))
            ps = pieces(docs, max(args.pieces))
            s, _ = best(lambda: list(tok.encode_batches(ps)), args.repeat)
            res.append((f"torch_gpubpe encode_batches, pieces of {max(args.pieces):,}", s))
        lens = np.diff(one.offsets)
        same_len = lens == g_len
        starts = np.concatenate([[0], np.cumsum(g_len)[:-1]])
        same = same_len.copy()
        if same_len.all() and len(one.ids) == len(g_ids):
            diff = np.flatnonzero(np.asarray(one.ids, np.int64) != g_ids)
            same[np.searchsorted(starts, diff, side="right") - 1] = False
        else:
            for k in np.flatnonzero(same_len).tolist():
                a, b = one.offsets[k], one.offsets[k + 1]
                same[k] = np.array_equal(one.ids[a:b], g_ids[starts[k]:starts[k] + g_len[k]])
        print(f"\n{name} ({Path(path).name}, pre-tokenizer {tok.pre_tokenizer}): one-call ids == "
              f"gigatoken's on {int(same.sum()):,} of {len(docs):,} documents; {mon.summary()}",
              flush=True)
        for what, s in res:
            rows.append((name, what, total / s / 1e6, g_s / s))
    print("\n| vocabulary | call | MB/s | vs gigatoken |\n|---|---|---:|---:|")
    for name, what, mbs, x in rows:
        print(f"| {name} | {what} | {mbs:,.0f} | {x:.2f}x |")
    print_footer()


if __name__ == "__main__":
    main()
