"""Benchmark: GPT-2's real tokenizer end to end on the GPU (merge-order BPE + GPT-2's regex
split, both on the GPU) vs tiktoken (1 and N threads) and Hugging Face ``tokenizers``' GPT-2,
on the same documents; every id is checked against tiktoken's.

    python3 benchmarks/gpt2.py --help
    python3 benchmarks/gpt2.py                               # 5 corpora, ~102 MB, GPT-2
    python3 benchmarks/gpt2.py --vocab ../shared/vocabs/qwen2.tiktoken    # Qwen2 instead
    python3 benchmarks/gpt2.py --pattern o200k    # o200k_base's split, GPT-2's ranks
    python3 benchmarks/gpt2.py --max-bytes 1000000 --threads 1 2          # lavapipe

Rows, MB/s of UTF-8 input (``list[str]`` in → ids out):

* torch_gpubpe: ``Tokenizer.from_tiktoken(path)`` (pattern from the sidecar, or
  ``--pattern``: a family name of torch_gpubpe.core.patterns, e.g. ``o200k``, whose ranks are not
  offline — its split with the ``--vocab`` ranks, the same for every encoder), two batches in
  flight (``submit``/``result``), batches of ``--batch-bytes``; best of ``--repeat``.
* tiktoken ``Encoding(pat_str=sidecar pattern, mergeable_ranks=file)``
  ``.encode_ordinary_batch(num_threads=N)``.
* tokenizers: the same vocab as a ``tokenizer.json`` (torch_gpubpe.core.export) whose pre-tokenizer
  is ``ByteLevel(use_regex=True)`` (GPT-2's; with ``--vocab`` of another family, its
  ``Split(Regex)``), ``encode_batch`` (Rust threads, ``RAYON_NUM_THREADS``).

The GPU's ids must equal tiktoken's for every document (else exit 1); HF's are compared too.

Then, where the GPU's time goes: GPU ms per pass (the regex pre-tokenizer's ``pt_local`` for
GPT-2, else ``pt_classify``/``pt_scan_blocks``/``pt_mark``; the walk
``trie_tokenizer_chunked``, which is the merge-order walk in bpe mode; prefix sum, compaction)
of merge-order mode beside greedy mode on the same vocab and split (other ids), timed by
benchmarks/_kernel_clock.py at the loaded clock: a warm-up of back-to-back submits, the two
modes interleaved batch by batch, each batch's passes ``--repeat-passes`` times per submit,
every repetition timed, min and median, the SM clock sampled during it; the walks continued in
further dispatches and the batches over one slice.

``--data-files`` (e.g. ``/tmp/ingest/parquet/*.parquet``): the same for what
``python -m torch_gpubpe encode --output-format llmc`` does with those files, minus reading and
writing: the files are read into packed batches of ``--files-batch-bytes`` first (not timed),
then ``submit_packed(bos_id=<|endoftext|>)`` two in flight (the CLI's loop: wall clock, time
in ``submit`` and in ``result``, GPU busy and clock), then the pass table as above.
Ends with the machine, date, command and SM clock.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, batches, read_docs  # noqa: E402

from torch_gpubpe.encoding.tokenizer import Tokenizer  # noqa: E402
from torch_gpubpe.core.patterns import PATTERN_OF, resolve  # noqa: E402


def gpu_pipelined(tok: Tokenizer, bs: list[list[str]]) -> tuple[float, list]:
    t0 = time.perf_counter()
    out, pending = [], []
    for b in bs:
        pending.append(tok.submit(b))
        if len(pending) == 2:
            out.append(pending.pop(0).result())
    out += [p.result() for p in pending]
    return time.perf_counter() - t0, out


def packed_batches(bs: list[list[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each batch as ``submit_packed``'s ``(data, offsets)``: its documents' UTF-8 bytes."""
    out = []
    for b in bs:
        enc = [d.encode() for d in b]
        offsets = np.zeros(len(enc) + 1, np.int64)
        np.cumsum([len(e) for e in enc], out=offsets[1:])
        out.append((np.frombuffer(b"".join(enc), np.uint8), offsets))
    return out


def pass_table(args, vocab, pat_str: str, packed: list, nbytes: int, what: str,
               **submit_kw) -> dict:
    """GPU time per pass of merge-order mode (the file's vocab and split) and of greedy mode
    (same vocab and split; other ids) on ``packed``, timed by benchmarks/_kernel_clock.py
    (warm-up, the two interleaved batch by batch, every repetition timed, min and median, SM
    clock during); prints the table, returns the timings."""
    from _kernel_clock import METHOD, ClockTokenizer, time_columns

    toks = {m: ClockTokenizer.from_tiktoken(vocab, pattern=pat_str, profile=True, mode=m)
            for m in ("bpe", "greedy")}
    for t in toks.values():
        t.submit_packed(*packed[0], **submit_kw).result()  # compiles, opens the session
    jobs = [lambda t, d=d, o=o: t.submit_packed(d, o, **submit_kw) for d, o in packed]
    r = time_columns(toks, jobs, reps=args.repeat_passes, rounds=args.pass_rounds,
                     warm_s=args.warm_s)
    print(f"\nGPU time per pass, {what} ({len(packed)} batches): "
          + METHOD.format(warm=args.warm_s, reps=args.repeat_passes, rounds=args.pass_rounds,
                          nb=len(packed)))
    print(f"SM clock during the timed part: {r['clock_summary']}")
    print("| GPU pass | bpe mode ms, min / median | GB/s of input (min) | share | greedy mode ms, "
          "min / median (same vocab and split) | bpe / greedy (min) |")
    print("|---|---:|---:|---:|---:|---:|")
    b, g = r["bpe"], r["greedy"]
    tot = b["min"]["all passes"]
    for k, v in b["min"].items():
        gv = g["min"].get(k, 0.0)
        print(f"| {k} | {v / 1e3:,.3f} / {b['median'][k] / 1e3:,.3f} | "
              f"{nbytes / max(v, 1e-9) / 1e3:.3g} | {v / max(tot, 1e-9):.0%} | "
              f"{gv / 1e3:,.3f} / {g['median'].get(k, 0.0) / 1e3:,.3f} | "
              f"{v / gv if gv else float('nan'):.2f} |")
    print(f"continuation dispatches during the column (not in the pass times): bpe "
          f"{b['continuations']}, greedy {g['continuations']}; batches over one slice (their "
          f"times are the last slice's; its pre-tokenizer runs in its own submits, untimed): bpe "
          f"{b['multi_slice']}, greedy {g['multi_slice']}")
    return r


def files_rows(args, pat_str: str) -> None:
    """``--data-files``: the CLI's encode loop on packed batches held in memory (module docs)."""
    import glob

    from torch_gpubpe.io.readers import FileReader, documents

    paths = sorted(p for g in args.data_files for p in glob.glob(g)) or args.data_files
    for bb in args.files_batch_bytes:
        t0 = time.perf_counter()
        packed = [(p.data, p.offsets) for p in documents(FileReader(paths), batch_bytes=int(bb))]
        read_s = time.perf_counter() - t0
        nbytes = sum(len(d) for d, _ in packed)
        ndocs = sum(len(o) - 1 for _, o in packed)
        tok = Tokenizer.from_tiktoken(args.vocab, pattern=pat_str)
        eot = tok.eot_token
        tok.submit_packed(*packed[0], bos_id=eot).result()  # opens the GPU, compiles
        print(f"\n--data-files: {len(paths)} files, {ndocs:,} documents, {nbytes / 1e6:,.1f} MB "
              f"in {len(packed)} batches of {bb / 1e6:.0f} MB (read in {read_s:.1f} s, not timed); "
              "submit_packed(bos_id=<|endoftext|>), 2 in flight (the CLI's loop, no file I/O)")
        for rep in range(args.repeat):
            t_sub = t_res = 0.0
            ntok = 0
            with GPUMonitor() as mon:
                t0 = time.perf_counter()
                pending = None
                for d, o in packed:
                    t = time.perf_counter()
                    fut = tok.submit_packed(d, o, bos_id=eot)
                    t1 = time.perf_counter()
                    t_sub += t1 - t
                    if pending is not None:
                        ntok += len(pending.result().ids)
                        t_res += time.perf_counter() - t1
                    pending = fut
                t = time.perf_counter()
                ntok += len(pending.result().ids)
                t_res += time.perf_counter() - t
                wall = time.perf_counter() - t0
            print(f"  run {rep + 1}: {wall:.2f} s = {nbytes / wall / 1e6:,.0f} MB/s, {ntok:,} ids; "
                  f"in submit_packed {t_sub:.2f} s, in result() {t_res:.2f} s; {mon.summary()}")
        pass_table(args, args.vocab, pat_str, packed, nbytes,
                   f"--data-files, batches of {bb / 1e6:.0f} MB", bos_id=eot)
        del packed


def hf_tokenizer(vocab, family: str):
    from tokenizers import Tokenizer as HFTokenizer

    from torch_gpubpe.core.export import hf_tokenizer_dict

    d = hf_tokenizer_dict(vocab)
    if family == "gpt2":
        d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": False, "use_regex": True}
    else:
        d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": PATTERN_OF[family]}
    return HFTokenizer.from_str(json.dumps(d, ensure_ascii=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=Path, default=REPO / "tests" / "data" / "vocabs" / "gpt2.tiktoken")
    ap.add_argument("--corpora", nargs="*", default=DEFAULT_CORPORA)
    ap.add_argument("--max-bytes", type=int, default=102_000_000)
    ap.add_argument("--batch-bytes", type=int, default=32_000_000)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 16])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--pattern", default=None,
                    help="split pattern family (gpt2, cl100k, qwen2, o200k); default: the sidecar's")
    ap.add_argument("--data-files", nargs="*", default=[],
                    help="parquet/jsonl.gz files or globs: also the CLI's encode loop on them")
    ap.add_argument("--files-batch-bytes", nargs="*", type=float, default=[16e6],
                    help="--data-files: batch sizes to try (the CLI's default: 16e6)")
    ap.add_argument("--repeat-passes", type=int, default=8,
                    help="pass table: each batch's passes run this many times per submit, each "
                         "timed (benchmarks/_kernel_clock.py)")
    ap.add_argument("--pass-rounds", type=int, default=2, help="pass table: rounds over the batches")
    ap.add_argument("--warm-s", type=float, default=0.25,
                    help="pass table: seconds of back-to-back submits first (untimed)")
    ap.add_argument("--skip-memory", action="store_true",
                    help="only the --data-files rows (no in-memory rows, no tiktoken)")
    args = ap.parse_args()

    import tiktoken

    docs = read_docs([CORPORA / f"{c}.jsonl.gz" for c in args.corpora], args.max_bytes)
    total = sum(len(d.encode()) for d in docs)
    if args.pattern is None:
        pat_str = json.loads(Path(str(args.vocab) + ".json").read_text())["pattern"]
    else:
        pat_str = PATTERN_OF[resolve(args.pattern)]
    family = resolve(pat_str)
    if args.skip_memory:
        files_rows(args, pat_str)
        print_footer()
        return
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(args.vocab))}
    enc = tiktoken.Encoding(args.vocab.stem, pat_str=pat_str, mergeable_ranks=ranks,
                            special_tokens={})
    print(f"{len(docs):,} documents, {total / 1e6:.1f} MB; vocab {args.vocab.name} "
          f"({len(ranks):,} tokens, pattern {family}); SM clock {sm_clock_now()}", flush=True)

    t0 = time.perf_counter()
    tok = Tokenizer.from_tiktoken(args.vocab, pattern=pat_str)
    bs = batches(docs, args.batch_bytes)
    tok.encode_batch(bs[0][:64])  # opens the GPU, compiles, warms up
    setup = time.perf_counter() - t0
    runs = []
    with GPUMonitor() as mon:
        for _ in range(args.repeat):
            runs.append(gpu_pipelined(tok, bs))
    gpu_s, gpu_out = min(runs, key=lambda r: r[0])
    gpu_ids = [ids.tolist() for be in gpu_out for ids in be]

    rows = [("torch_gpubpe GPU (2 batches in flight)", gpu_s, sum(map(len, gpu_ids)))]
    ref = None
    for th in args.threads:
        enc.encode_ordinary_batch(docs[:16], num_threads=th)
        t0 = time.perf_counter()
        out = enc.encode_ordinary_batch(docs, num_threads=th)
        rows.append((f"tiktoken {th} thread(s)", time.perf_counter() - t0, sum(map(len, out))))
        ref = out
    bad = [k for k in range(len(docs)) if gpu_ids[k] != ref[k]]
    if not args.skip_hf:
        hf = hf_tokenizer(tok.vocab, family)
        hf.encode_batch(docs[:16])
        t0 = time.perf_counter()
        hout = hf.encode_batch(docs, add_special_tokens=False)
        rows.append((f"HF tokenizers (RAYON_NUM_THREADS={os.environ.get('RAYON_NUM_THREADS', 'all')})",
                     time.perf_counter() - t0, sum(len(e.ids) for e in hout)))
        hf_bad = sum(1 for k in range(len(docs)) if hout[k].ids != ref[k])
        print(f"HF tokenizers ids differ from tiktoken on {hf_bad} of {len(docs)} documents")

    print(f"\nGPU ids == tiktoken ids on {len(docs) - len(bad)} of {len(docs)} documents "
          f"(setup {setup:.1f} s; {mon.summary()})")
    print("\n| encoder | MB/s | tokens | GPU speed-up |\n|---|---:|---:|---:|")
    for name, s, ntok in rows:
        print(f"| {name} | {total / s / 1e6:,.1f} | {ntok:,} | {s / gpu_s:,.1f}x |")
    pass_table(args, args.vocab, pat_str, packed_batches(bs), total,
               f"in memory, batches of {args.batch_bytes / 1e6:.0f} MB")
    if args.data_files:
        files_rows(args, pat_str)
    print_footer()
    if bad:
        print(f"FAIL: documents {bad[:10]} differ from tiktoken")
        sys.exit(1)


if __name__ == "__main__":
    main()
