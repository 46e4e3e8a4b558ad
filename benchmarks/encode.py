"""Benchmark: GPU greedy encoder (torch_gpubpe.encoding.tokenizer) vs tiktoken, same vocab and split pattern.

    python3 benchmarks/encode.py --help
    python3 benchmarks/encode.py                                   # 5 corpora, 102 MB, vocab 32,768
    python3 benchmarks/encode.py --max-bytes 2000000 --vocab-size 2048 --threads 1 2   # lavapipe
    python3 benchmarks/encode.py --vocab my.vocab.json --batch-bytes 64000000 --json-out r.json

Measures, on the same Python ``str`` documents:

* end to end: ``list[str]`` in → numpy ids + offsets out, two batches in flight
  (``Tokenizer.submit``/``result``), MB/s and tokens/s;
* where the time goes, from a second, synchronous run: host packing (str → UTF-8 bytes), upload
  + submit, GPU wait (token count), token readback; and the GPU time of each pass from
  timestamp queries, as kernel GB/s;
* tiktoken built with the SAME vocab (``mergeable_ranks = {token bytes: id}``) and the SAME split
  pattern (``SPLIT_PATTERN_PY``), ``encode_ordinary_batch(num_threads=N)``. tiktoken applies
  merges by rank, we take the longest match (DESIGN.md §4), so ids may differ slightly; the
  table shows both tokens-per-byte figures.

Ends with a table (machine, adapter, date, command). Exactness is the tests' job
(tests/test_encode_greedy.py); here a sample of documents is still checked against
``reference.encode``.

Merge-order rows, with ``--bpe-vocab tests/data/vocabs/gpt2.tiktoken``: the same
documents encoded with GPT-2's vocabulary by ``Tokenizer(vocab, mode="bpe")`` (ids identical to
tiktoken: checked on a sample, and the token totals must match), tiktoken with GPT-2's ranks and
the same §2 pattern (each ``--threads`` count), Hugging Face ``tokenizers`` on the exported
``tokenizer.json`` (its own thread pool), greedy mode end to end on the same vocab and path (other
ids: longest match), where the main thread's time goes in each mode (a separate, instrumented
run), and the GPU kernel times of merge-order mode (the default chunk size and each
``--bpe-chunks`` size, one column each) beside greedy mode on the SAME vocab and input, at the loaded clock, the same method for
every column (benchmarks/_kernel_clock.py): a warm-up of back-to-back submits (``--warm-s``),
then the column's bpe build and greedy mode interleaved batch by batch, each batch's passes run
``--repeat-passes`` times per submit and every repetition timed, ``--pass-rounds`` rounds;
min and median per pass, the SM clock sampled during each column. ``--only-bpe`` skips the
greedy rows with the trained vocab::

    python3 benchmarks/encode.py --bpe-vocab tests/data/vocabs/gpt2.tiktoken --only-bpe \
        --threads 1 16
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from torch_gpubpe.core import reference  # noqa: E402
from torch_gpubpe.encoding.tokenizer import Tokenizer, _pack, join_parts  # noqa: E402
from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY, Vocab  # noqa: E402

CORPORA = Path(os.environ.get("TORCH_GPUBPE_CORPORA") or REPO.parent / "shared" / "corpora")
DEFAULT_CORPORA = [
    "en_novels", "code_cpython_stdlib", "web_html", "en_python_docs", "multi_udhr"]  # ~102 MB


def read_docs(paths: list[Path], max_bytes: int) -> list[str]:
    """Documents round robin over the files until ``max_bytes`` UTF-8 bytes."""
    files = [gzip.open(p, "rt", encoding="utf-8") for p in paths]
    docs, total = [], 0
    while files and total < max_bytes:
        for f in list(files):
            line = f.readline()
            if not line:
                files.remove(f)
                continue
            text = json.loads(line)["text"]
            docs.append(text)
            total += len(text.encode())
            if total >= max_bytes:
                break
    return docs


def batches(docs: list[str], batch_bytes: int) -> list[list[str]]:
    out, cur, size = [], [], 0
    for d in docs:
        cur.append(d)
        size += len(d)  # characters: close enough for batching
        if size >= batch_bytes:
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def get_vocab(args, docs: list[str]) -> Vocab:
    if args.vocab:
        return Vocab.load(args.vocab)
    sample, size = [], 0
    for d in docs:
        sample.append(d[: max(1, args.train_bytes // 32)])
        size += len(sample[-1])
        if size >= args.train_bytes:
            break
    t0 = time.perf_counter()
    merges = reference.train(sample, vocab_size=args.vocab_size, min_frequency=2)
    print(f"trained {len(merges)} merges with reference.train on {size / 1e6:.1f} MB "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)
    if 256 + len(merges) < args.vocab_size:
        print(f"note: only {256 + len(merges)} ids (pairs below min_frequency 2); raise "
              "--train-bytes for the full --vocab-size", flush=True)
    return Vocab.from_merges(merges)


def run_gpu_pipelined(tok: Tokenizer, bs: list[list[str]]) -> tuple[float, int]:
    """End to end with two batches in flight; returns (seconds, tokens)."""
    t0 = time.perf_counter()
    ntok = 0
    pending = []
    for b in bs:
        pending.append(tok.submit(b))
        if len(pending) == 2:
            ntok += len(pending.pop(0).result().ids)
    for p in pending:
        ntok += len(p.result().ids)
    return time.perf_counter() - t0, ntok


def run_gpu_stream(tok: Tokenizer, bs: list[list[str]]) -> tuple[float, int]:
    """End to end through ``Tokenizer.encode_batches`` (two in flight, the next batch packed
    on a thread meanwhile); returns (seconds, tokens)."""
    t0 = time.perf_counter()
    ntok = sum(len(be.ids) for be in tok.encode_batches(bs))
    return time.perf_counter() - t0, ntok


def run_gpu_phases(tok: Tokenizer, bs: list[list[str]]) -> dict[str, float]:
    """Synchronous run split into phases (seconds, summed over batches) + GPU pass times."""
    sess = tok._session()
    ph = {"pack": 0.0, "upload+submit": 0.0, "wait count": 0.0, "readback ids": 0.0}
    passes: dict[str, float] = {}
    sliced = 0
    for b in bs:
        t0 = time.perf_counter()
        data, offsets = _pack(b, keep_parts=True)
        t1 = time.perf_counter()
        ph["pack"] += t1 - t0
        total = int(offsets[-1])
        if total > sess.limit:
            sliced += 1
            if isinstance(data, list):
                data = join_parts(data)
            tok._encode_sliced(data, offsets)
            ph["upload+submit"] += time.perf_counter() - t1
            continue
        slot = sess.slots[0]
        slot.start(data, 0, total, offsets[:-1].astype(np.uint32), True)
        t2 = time.perf_counter()
        total, unfinished, _ = slot._read_meta()
        t3 = time.perf_counter()
        for k, v in tok.last_pass_us.items():
            passes[k] = passes.get(k, 0.0) + v
        # Same readback as Slot.finish (the count is known now).
        slot.meta_promise = None
        nbytes = (total * sess.id_size + 3) // 4 * 4
        g = sess.gpu
        enc = g.device.create_command_encoder()
        enc.copy_buffer_to_buffer(slot.out, 0, slot.rb_tok, 0, max(nbytes, 4))
        g.device.queue.submit([enc.finish()])
        g.wait_map(slot.rb_tok, "READ_NOSYNC", 0, (max(nbytes, 4) + 7) // 8 * 8)
        np.frombuffer(slot.rb_tok.read_mapped(0, max(nbytes, 4)), np.uint8)
        slot.rb_tok.unmap()
        t4 = time.perf_counter()
        ph["upload+submit"] += t2 - t1
        ph["wait count"] += t3 - t2
        ph["readback ids"] += t4 - t3
        assert not unfinished, "a word needed continuation passes; phases would be off"
    ph["sliced batches"] = sliced
    return ph, passes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", type=Path,
                    help="jsonl.gz file (repeatable); default: en_novels, code_cpython_stdlib, web_html, en_python_docs, multi_udhr")
    ap.add_argument("--max-bytes", type=int, default=102_000_000, help="bytes of text to encode")
    ap.add_argument("--vocab-size", type=int, default=32_768)
    ap.add_argument("--vocab", type=Path, help="vocab file (skips training)")
    ap.add_argument("--train-bytes", type=int, default=8_000_000,
                    help="bytes of the sample reference.train learns the vocab on")
    ap.add_argument("--batch-bytes", type=int, default=32_000_000, help="bytes per GPU batch")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1],
                    help="tiktoken thread counts")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions (best is reported)")
    ap.add_argument("--chunk-bytes", type=int, default=32)
    ap.add_argument("--skip-tiktoken", action="store_true")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--bpe-vocab", type=Path,
                    help="add merge-order rows with this vocabulary (a *.tiktoken file, e.g. "
                         "tests/data/vocabs/gpt2.tiktoken)")
    ap.add_argument("--only-bpe", action="store_true", help="only the merge-order rows")
    ap.add_argument("--skip-hf", action="store_true", help="no Hugging Face tokenizers row")
    ap.add_argument("--repeat-passes", type=int, default=8,
                    help="merge-order rows: each batch's GPU passes run this many times back to "
                         "back in its submit, each one timed (benchmarks/_kernel_clock.py)")
    ap.add_argument("--pass-rounds", type=int, default=2,
                    help="merge-order rows: rounds over the batches per kernel column")
    ap.add_argument("--bpe-chunks", type=int, nargs="*", default=[64, 128],
                    help="merge-order rows: also kernel columns at these chunk_bytes (bpe and "
                         "greedy both at that size)")
    ap.add_argument("--warm-s", type=float, default=0.25,
                    help="merge-order rows: seconds of back-to-back submits before each kernel "
                         "column (untimed), so that it starts at the loaded clock")
    args = ap.parse_args()

    paths = args.corpus or [CORPORA / f"{n}.jsonl.gz" for n in DEFAULT_CORPORA]
    docs = read_docs(paths, args.max_bytes)
    nbytes = sum(len(d.encode()) for d in docs)
    print(f"{len(docs)} documents, {nbytes / 1e6:.1f} MB from {', '.join(p.name for p in paths)}",
          flush=True)
    if args.bpe_vocab:
        bpe_json = bpe_rows(args, docs, nbytes)
        if args.only_bpe:
            if args.json_out:
                args.json_out.write_text(json.dumps(bpe_json, indent=1))
            return
    vocab = get_vocab(args, docs)
    bs = batches(docs, args.batch_bytes)

    t0 = time.perf_counter()
    tok = Tokenizer(vocab, chunk_bytes=args.chunk_bytes, profile=True)
    first = tok.encode_batch(bs[0][:50])  # opens the GPU, compiles, warms up
    setup = time.perf_counter() - t0
    sess = tok._session()
    check = bs[0][:20]
    assert tok.encode_batch(check).tolist() == [reference.encode(d, vocab.merges) for d in check]
    del first

    rows = []
    best = min((run_gpu_pipelined(tok, bs) for _ in range(args.repeat)), key=lambda r: r[0])
    gpu_s, gpu_tok = best
    rows.append(("torch_gpubpe (2 in flight)", gpu_s, gpu_tok))
    ph, passes = run_gpu_phases(tok, bs)
    kernel_s = sum(passes.values()) / 1e6

    if not args.skip_tiktoken:
        import tiktoken

        ranks: dict[bytes, int] = {}
        for i, tb in enumerate(vocab.token_bytes):
            ranks.setdefault(tb, i)
        enc = tiktoken.Encoding("gpubpe-bench", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=ranks,
                                special_tokens={})
        for n in args.threads:
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                ntok = sum(len(x) for b in bs for x in enc.encode_ordinary_batch(b, num_threads=n))
                runs.append((time.perf_counter() - t0, ntok))
            s, ntok = min(runs)
            rows.append((f"tiktoken {n} thread{'s' if n > 1 else ''}", s, ntok))

    g = sess.gpu
    print()
    print("| method | seconds | MB/s | Mtokens/s | tokens/byte |")
    print("|---|---:|---:|---:|---:|")
    for name, s, ntok in rows:
        print(f"| {name} | {s:.3f} | {nbytes / s / 1e6:,.1f} | {ntok / s / 1e6:,.2f} | {ntok / nbytes:.4f} |")
    print()
    total_ph = sum(v for k, v in ph.items() if k != "sliced batches")
    print("| phase (synchronous run) | seconds | share | MB/s |")
    print("|---|---:|---:|---:|")
    for k, v in ph.items():
        if k == "sliced batches":
            continue
        print(f"| {k} | {v:.3f} | {100 * v / max(total_ph, 1e-12):.0f}% | {nbytes / max(v, 1e-12) / 1e6:,.0f} |")
    if ph["sliced batches"]:
        print(f"({ph['sliced batches']} batch(es) above the slice limit were run sliced and "
              "counted under upload+submit)")
    print()
    if passes:
        print("| GPU pass (timestamp queries) | ms | GB/s of input |")
        print("|---|---:|---:|")
        for k, v in passes.items():
            print(f"| {k} | {v / 1e3:.3f} | {nbytes / (v / 1e6) / 1e9:.3g} |")
        print(f"| all three | {kernel_s * 1e3:.3f} | {nbytes / kernel_s / 1e9:.3g} |")
    else:
        print("(no timestamp queries on this adapter)")
    bound = max(((k, v) for k, v in ph.items() if k != "sliced batches"), key=lambda kv: kv[1])
    print(f"\nbounded by: {bound[0]} ({100 * bound[1] / max(total_ph, 1e-12):.0f}% of the synchronous run)")
    print()
    print("| machine | adapter | date (UTC) | command |")
    print("|---|---|---|---|")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    cmd = "python3 " + " ".join(sys.argv)
    print(f"| {platform.node()} ({os.cpu_count()} CPUs) | {g.adapter_name}, subgroup size "
          f"{g.subgroup_size} | {date} | `{cmd}` |")
    print(f"\nvocab {len(vocab)} ids ({np.dtype(tok.id_dtype).name}), {len(bs)} batches of "
          f"~{args.batch_bytes / 1e6:g} MB, slice limit {sess.limit / 1e6:.1f} MB, "
          f"set-up {setup:.2f} s")
    if args.json_out:
        args.json_out.write_text(json.dumps({
            "machine": platform.node(), "adapter": g.adapter_name, "date": date, "command": cmd,
            "bytes": nbytes, "docs": len(docs), "vocab_size": len(vocab),
            "rows": [{"method": n, "seconds": s, "tokens": t} for n, s, t in rows],
            "phases_s": ph, "gpu_pass_us": passes, "setup_s": setup,
        }, indent=1))


def pipelined_breakdown(tok: Tokenizer, bs: list[list[str]]) -> tuple[float, dict[str, float]]:
    """One more end-to-end run as :func:`run_gpu_pipelined`, with the main thread's time split
    by what it was doing (seconds, each step's own time, nested steps taken out): ``pack``
    (``str`` → UTF-8 parts: the encoding of the non-ASCII documents), ``upload copy`` (into the
    mapped staging buffer, several threads), ``submit, rest`` (bit arrays, recording,
    ``queue.submit``), ``wait for the GPU`` (the token-count readback), ``ids copy`` (out of
    the mapped readback, several threads, into fresh memory), ``readback, rest`` (waiting for
    the ids' copy to land, continuation submits) and ``other``
    (the loop, offsets). Wraps the encoder's private steps, so it is a separate run from the
    timed one."""
    import torch_gpubpe.encoding.tokenizer as E
    import torch_gpubpe.encoding.slot as S   # (the slot copies and reads back)

    acc = {k: 0.0 for k in ("pack", "upload copy", "submit, rest", "wait for the GPU",
                            "ids copy", "readback, rest", "other")}
    stack: list[list] = []  # [key, time of nested steps]

    def timed(fn, key):
        def w(*a, **kw):
            k = key
            if k is None:  # parallel_copy: the ids out of the readback, or an upload
                k = "ids copy" if any(f[0] == "readback, rest" for f in stack) else "upload copy"
            stack.append([k, 0.0])
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t0
                _, inner = stack.pop()
                acc[k] += dt - inner
                if stack:
                    stack[-1][1] += dt
        return w

    hooks = [(E, "pack_batch", "pack"), (S, "copy_parts", "upload copy"),
             (S, "parallel_copy", None),
             (S.Slot, "start", "submit, rest"), (S.Slot, "read_meta", "wait for the GPU"),
             (S.Slot, "submit_readback", "readback, rest"),
             (S.Slot, "read_ids", "readback, rest")]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in hooks]
    for obj, name, key in hooks:
        setattr(obj, name, timed(getattr(obj, name), key))
    try:
        total, _ = run_gpu_pipelined(tok, bs)
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
    acc["other"] = total - sum(v for k, v in acc.items() if k != "other")
    return total, acc


def bpe_rows(args, docs: list[str], nbytes: int) -> dict:
    """The merge-order rows (module docstring); prints their tables, returns them as a dict."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _report import GPUMonitor, print_footer, sm_clock_now

    from torch_gpubpe.core.export import hf_tokenizer_json

    vocab = Vocab.load(args.bpe_vocab).with_mode("bpe")
    bs = batches(docs, args.batch_bytes)
    print(f"merge-order: {args.bpe_vocab.name}, {len(vocab)} ids; SM clock before: "
          f"{sm_clock_now()}", flush=True)
    t0 = time.perf_counter()
    tok = Tokenizer(vocab, chunk_bytes=args.chunk_bytes)  # mode="bpe" (the vocab's)
    tok.encode_batch(bs[0][:50])
    setup = time.perf_counter() - t0
    greedy_e2e = Tokenizer(vocab, chunk_bytes=args.chunk_bytes, mode="greedy")
    greedy_e2e.encode_batch(bs[0][:50])
    import tiktoken

    enc = tiktoken.Encoding("bench-bpe", pat_str=SPLIT_PATTERN_PY,
                            mergeable_ranks=vocab.bpe_ranks, special_tokens={})
    check = [d for b in bs for d in b[:5]]
    got = tok.encode_batch(check).tolist()
    same = got == [enc.encode_ordinary(d) for d in check]
    print(f"exactness sample ({len(check)} documents): GPU == tiktoken: {same}", flush=True)
    rows = []
    with GPUMonitor() as mon:
        best = min((run_gpu_pipelined(tok, bs) for _ in range(args.repeat)), key=lambda r: r[0])
    rows.append(("torch_gpubpe bpe mode (2 in flight)", best[0], best[1]))
    gpu_tokens = best[1]
    with GPUMonitor() as smon:
        sbest = min((run_gpu_stream(tok, bs) for _ in range(args.repeat)), key=lambda r: r[0])
    rows.append(("torch_gpubpe bpe mode, encode_batches (next batch packed on a thread)",
                 *sbest))
    with GPUMonitor() as gmon:
        gbest = min((run_gpu_pipelined(greedy_e2e, bs) for _ in range(args.repeat)),
                    key=lambda r: r[0])
    rows.append(("torch_gpubpe greedy mode, same vocab (2 in flight; other ids)", *gbest))
    breakdown = {"bpe": pipelined_breakdown(tok, bs), "greedy": pipelined_breakdown(greedy_e2e, bs)}
    for n in args.threads:
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ntok = sum(len(x) for b in bs for x in enc.encode_ordinary_batch(b, num_threads=n))
            runs.append((time.perf_counter() - t0, ntok))
        s, ntok = min(runs)
        rows.append((f"tiktoken {n} thread{'s' if n > 1 else ''}", s, ntok))
    if not args.skip_hf:
        import tokenizers

        hf = tokenizers.Tokenizer.from_str(hf_tokenizer_json(vocab))
        t0 = time.perf_counter()
        ntok = sum(len(e.ids) for b in bs for e in hf.encode_batch(b, add_special_tokens=False))
        rows.append((f"HF tokenizers encode_batch ({os.cpu_count()} CPUs)",
                     time.perf_counter() - t0, ntok))
    from torch_gpubpe.encoding.tokenizer import _pack

    packed = [_pack(b) for b in bs]
    from _kernel_clock import METHOD, ClockTokenizer, time_columns

    ktok = ClockTokenizer(vocab, chunk_bytes=args.chunk_bytes, profile=True)  # mode="bpe"
    greedy = ClockTokenizer(vocab, chunk_bytes=args.chunk_bytes, profile=True, mode="greedy")
    for t in (ktok, greedy):
        t.encode_batch(bs[0][:50])
    # Larger chunks (a thread starts the words of chunk_bytes bytes): a warp waits for its
    # longest lane, about chunk + the longest word crossing a chunk end, so the share lost to
    # that wait falls as chunks grow. Each such column has greedy mode at the same chunk size.
    variants = {f"chunk_bytes {c}": c for c in args.bpe_chunks if c != args.chunk_bytes}
    builds, peers = {}, {args.chunk_bytes: greedy}
    check_docs = [d for b in bs for d in b[:5]]
    check_ids = [enc.encode_ordinary(d) for d in check_docs]
    for name, chunk in variants.items():
        builds[name] = ClockTokenizer(vocab, chunk_bytes=chunk, profile=True)
        if builds[name].encode_batch(check_docs).tolist() != check_ids:
            raise AssertionError(f"the walk build '{name}' differs from tiktoken")
        if chunk not in peers:
            peers[chunk] = ClockTokenizer(vocab, chunk_bytes=chunk, profile=True, mode="greedy")
            peers[chunk].encode_batch(bs[0][:50])

    jobs = [lambda t, d=d, o=o: t.submit_packed(d, o) for d, o in packed]
    kw = {"reps": args.repeat_passes, "rounds": args.pass_rounds, "warm_s": args.warm_s}
    cols = {"bpe mode": time_columns({"bpe": ktok, "greedy": greedy}, jobs, **kw)}
    for name, t in builds.items():
        cols[name] = time_columns({"bpe": t, "greedy": peers[variants[name]]}, jobs, **kw)
    print()
    print("| method (GPT-2 vocabulary, merge order) | seconds | MB/s | Mtokens/s | tokens/byte | "
          "same token count as GPU |")
    print("|---|---:|---:|---:|---:|---|")
    for name, s, ntok in rows:
        print(f"| {name} | {s:.3f} | {nbytes / s / 1e6:,.1f} | {ntok / s / 1e6:,.2f} | "
              f"{ntok / nbytes:.4f} | "
              f"{'yes' if ntok == gpu_tokens else 'n/a' if 'greedy' in name else 'NO'} |")
    tt16 = [r for r in rows if r[0].startswith("tiktoken") and not r[0].endswith(" 1 thread")]
    if tt16:
        print(f"\nGPU end to end vs {tt16[-1][0]}: {tt16[-1][1] / best[0]:.1f}x (submit/result), "
              f"{tt16[-1][1] / sbest[0]:.1f}x (encode_batches)")
    print(f"GPU during the end-to-end runs: bpe mode {mon.summary()}; encode_batches "
          f"{smon.summary()}; greedy mode {gmon.summary()}")
    print()
    print("| main thread, one more end-to-end run (s) | "
          + " | ".join(f"{m} mode" for m in breakdown) + " |")
    print("|---|" + "---:|" * len(breakdown))
    for k in next(iter(breakdown.values()))[1]:
        print(f"| {k} | " + " | ".join(f"{b[1][k]:.4f}" for b in breakdown.values()) + " |")
    print("| total | " + " | ".join(f"{b[0]:.4f}" for b in breakdown.values()) + " |")
    print()
    print(METHOD.format(warm=args.warm_s, reps=args.repeat_passes, rounds=args.pass_rounds,
                        nb=len(packed)) + "; each row's ratios are to the greedy mode timed "
          "in the same column (same vocab and input, min over min) unless it says otherwise")
    print("each row after the bpe mode column is merge-order mode at the chunk size it names")
    nan = float("nan")
    base = cols["bpe mode"]
    walk_k = "trie_tokenizer_chunked"

    def mm(c, k):
        return f"{c['min'].get(k, nan) / 1e3:.3f} / {c['median'].get(k, nan) / 1e3:.3f}"

    def ratio(a, g, k):
        g = g["min"].get(k, 0.0)
        return f"{a['min'].get(k, nan) / g if g else nan:.2f}"

    def clk(c):
        c = c["clock"]
        return f"{int(statistics.median(c)):,} (min {min(c):,})" if c else "n/a"
    print("One row per column (the bpe build it names, timed beside greedy mode; ms summed over "
          "the batches, min / median):")
    print("| column: bpe build | walk ms | trie_prefix_sum ms | trie_tokenizer_compact ms | all "
          "passes ms | greedy walk ms (same column) | greedy all passes ms | walk / greedy walk "
          "| all / greedy all | all / greedy all of the bpe mode column | SM clock MHz, median "
          "(min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, c in cols.items():
        b, g = c["bpe"], c["greedy"]
        label = name if name == "bpe mode" else f"bpe, {name}"
        print(f"| {label} | {mm(b, walk_k)} | {mm(b, 'trie_prefix_sum')} | "
              f"{mm(b, 'trie_tokenizer_compact')} | {mm(b, 'all passes')} | {mm(g, walk_k)} | "
              f"{mm(g, 'all passes')} | {ratio(b, g, walk_k)} | {ratio(b, g, 'all passes')} | "
              f"{ratio(b, base['greedy'], 'all passes')} | {clk(c)} |")
    tb, tg = base["bpe"]["min"]["all passes"], base["greedy"]["min"]["all passes"]
    print(f"(kernel GB/s of input, min: bpe {nbytes / max(tb, 1e-9) / 1e3:.3g}, greedy "
          f"{nbytes / max(tg, 1e-9) / 1e3:.3g}; continuation dispatches during the bpe mode "
          f"column, not in the pass times: bpe {base['bpe']['continuations']}, greedy "
          f"{base['greedy']['continuations']}; batches over one slice: "
          f"{base['bpe']['multi_slice']}; SM clock during the bpe mode column: "
          f"{base['clock_summary']})")
    print(f"set-up (tables, trie, pipelines, first batch): {setup:.2f} s; "
          f"{len(bs)} batches of ~{args.batch_bytes / 1e6:g} MB")
    print_footer()
    return {"bpe_vocab": str(args.bpe_vocab), "bytes": nbytes, "exact_sample": same,
            "rows": [{"method": n, "seconds": s, "tokens": t} for n, s, t in rows],
            "kernel_columns": cols, "setup_s": setup,
            "sm_clock": mon.summary(), "repeat_passes": args.repeat_passes,
            "pass_rounds": args.pass_rounds, "warm_s": args.warm_s,
            "main_thread_s": {m: b[1] for m, b in breakdown.items()}}


if __name__ == "__main__":
    main()
