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
  ``--pattern``: a family name of torch_gpubpe.patterns, e.g. ``o200k``, whose ranks are not
  offline — its split with the ``--vocab`` ranks, the same for every encoder), two batches in
  flight (``submit``/``result``), batches of ``--batch-bytes``; best of ``--repeat``.
* tiktoken ``Encoding(pat_str=sidecar pattern, mergeable_ranks=file)``
  ``.encode_ordinary_batch(num_threads=N)``.
* tokenizers: the same vocab as a ``tokenizer.json`` (torch_gpubpe.export) whose pre-tokenizer
  is ``ByteLevel(use_regex=True)`` (GPT-2's; with ``--vocab`` of another family, its
  ``Split(Regex)``), ``encode_batch`` (Rust threads, ``RAYON_NUM_THREADS``).

The GPU's ids must equal tiktoken's for every document (else exit 1); HF's are compared too.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, batches, read_docs  # noqa: E402

from torch_gpubpe.encoder import Tokenizer  # noqa: E402
from torch_gpubpe.patterns import PATTERN_OF, resolve  # noqa: E402


def gpu_pipelined(tok: Tokenizer, bs: list[list[str]]) -> tuple[float, list]:
    t0 = time.perf_counter()
    out, pending = [], []
    for b in bs:
        pending.append(tok.submit(b))
        if len(pending) == 2:
            out.append(pending.pop(0).result())
    out += [p.result() for p in pending]
    return time.perf_counter() - t0, out


def hf_tokenizer(vocab, family: str):
    from tokenizers import Tokenizer as HFTokenizer

    from torch_gpubpe.export import hf_tokenizer_dict

    d = hf_tokenizer_dict(vocab)
    if family == "gpt2":
        d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": False, "use_regex": True}
    else:
        d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": PATTERN_OF[family]}
    return HFTokenizer.from_str(json.dumps(d, ensure_ascii=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=Path, default=REPO.parent / "shared" / "vocabs" / "gpt2.tiktoken")
    ap.add_argument("--corpora", nargs="*", default=DEFAULT_CORPORA)
    ap.add_argument("--max-bytes", type=int, default=102_000_000)
    ap.add_argument("--batch-bytes", type=int, default=32_000_000)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 16])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--pattern", default=None,
                    help="split pattern family (gpt2, cl100k, qwen2, o200k); default: the sidecar's")
    args = ap.parse_args()

    import tiktoken

    docs = read_docs([CORPORA / f"{c}.jsonl.gz" for c in args.corpora], args.max_bytes)
    total = sum(len(d.encode()) for d in docs)
    if args.pattern is None:
        pat_str = json.loads(Path(str(args.vocab) + ".json").read_text())["pattern"]
    else:
        pat_str = PATTERN_OF[resolve(args.pattern)]
    family = resolve(pat_str)
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
    print_footer()
    if bad:
        print(f"FAIL: documents {bad[:10]} differ from tiktoken")
        sys.exit(1)


if __name__ == "__main__":
    main()
