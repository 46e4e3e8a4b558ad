"""Benchmark: the GPU regex pre-tokenizers (torch_gpubpe.encoding.regex_pretok) vs regex.finditer and
tiktoken, on the same documents.

    python3 benchmarks/pretokenize.py --help
    python3 benchmarks/pretokenize.py                     # 5 corpora, ~102 MB, gpt2 cl100k qwen2 o200k
    python3 benchmarks/pretokenize.py --max-bytes 2000000 --threads 1 2      # lavapipe

Per pattern family, MB/s of UTF-8 input:

* GPU: packed documents (uint8 + offsets) in → per-byte word-start mask (bool) on the host out:
  upload, the three passes (pt_classify → pt_scan_blocks → pt_mark), readback of 1 bit per byte;
  batches of ``--batch-bytes``; the first batch is a warm-up and not timed.
* ``regex.finditer(pat_str)`` over each ``str`` document, one thread (the CPU reference; on the
  first ``--regex-max-bytes`` only, it is slow).
* tiktoken ``encode_ordinary_batch(num_threads=N)`` with the same ``pat_str`` and GPT-2's ranks
  (``--ranks``, default ../shared/vocabs/gpt2.tiktoken): its regex split plus its BPE, the work a
  CPU tokenizer spends; an upper bound on its split alone.

A sample of documents is checked against the oracle (``patterns.reference_word_starts``).
Ends with the machine, date, command and SM clock.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, batches, read_docs  # noqa: E402

from torch_gpubpe.encoding.tokenizer import _pack  # noqa: E402
from torch_gpubpe.core.patterns import FAMILIES, PATTERN_OF, reference_word_starts  # noqa: E402
from torch_gpubpe.encoding.regex_pretok import UnicodePreTokenizer  # noqa: E402


def gpu_run(family: str, packed: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, list]:
    pre = UnicodePreTokenizer(family)
    pre.mask(*packed[0])  # warm-up: pipelines, buffers
    masks = []
    t0 = time.perf_counter()
    for data, offsets in packed:
        masks.append(pre.mask(data, offsets))
    return time.perf_counter() - t0, masks


def regex_run(family: str, docs: list[str]) -> float:
    import regex

    pat = regex.compile(PATTERN_OF[family])
    t0 = time.perf_counter()
    for d in docs:
        for _ in pat.finditer(d):
            pass
    return time.perf_counter() - t0


def tiktoken_run(family: str, docs: list[str], ranks: dict[bytes, int], threads: int) -> float:
    import tiktoken

    enc = tiktoken.Encoding(f"bench-{family}", pat_str=PATTERN_OF[family], mergeable_ranks=ranks,
                            special_tokens={})
    enc.encode_ordinary_batch(docs[:8], num_threads=threads)
    t0 = time.perf_counter()
    enc.encode_ordinary_batch(docs, num_threads=threads)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", nargs="*", default=DEFAULT_CORPORA,
                    help=f"names of {CORPORA}/*.jsonl.gz (default: %(default)s)")
    ap.add_argument("--max-bytes", type=int, default=102_000_000)
    ap.add_argument("--batch-bytes", type=int, default=32_000_000)
    ap.add_argument("--regex-max-bytes", type=int, default=10_000_000)
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 16])
    ap.add_argument("--ranks", type=Path, default=REPO.parent / "shared" / "vocabs" / "gpt2.tiktoken")
    ap.add_argument("--check-docs", type=int, default=300)
    args = ap.parse_args()

    docs = read_docs([CORPORA / f"{c}.jsonl.gz" for c in args.corpora], args.max_bytes)
    total = sum(len(d.encode()) for d in docs)
    packed = [_pack(b) for b in batches(docs, args.batch_bytes)]
    packed = [(np.frombuffer(b"".join(d), np.uint8) if isinstance(d, list) else d, o)
              for d, o in packed]
    rdocs, rbytes = [], 0
    for d in docs:
        if rbytes >= args.regex_max_bytes:
            break
        rdocs.append(d)
        rbytes += len(d.encode())
    ranks = None
    if args.ranks.is_file():
        ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(args.ranks))}
    print(f"{len(docs):,} documents, {total / 1e6:.1f} MB, {len(packed)} GPU batches of "
          f"≤ {args.batch_bytes / 1e6:.0f} MB; regex on {rbytes / 1e6:.1f} MB; "
          f"SM clock {sm_clock_now()}")

    rows = []
    for fam in args.families:
        with GPUMonitor() as mon:
            t_gpu, masks = gpu_run(fam, packed)
        # exactness on a sample (the tests cover it fully)
        flat = np.concatenate(masks)
        offs = np.concatenate([[0], np.cumsum([len(d.encode()) for d in docs])])
        for k in range(min(args.check_docs, len(docs))):
            if not np.array_equal(flat[offs[k] : offs[k + 1]], reference_word_starts(docs[k], fam)):
                raise SystemExit(f"{fam}: document {k} differs from regex.finditer")
        words = int(flat.sum())
        row = {"family": fam, "gpu": total / t_gpu / 1e6, "words": words, "gpu_mon": mon.summary(),
               "regex": rbytes / regex_run(fam, rdocs) / 1e6}
        for th in args.threads if ranks else []:
            row[f"tiktoken {th}T"] = total / tiktoken_run(fam, docs, ranks, th) / 1e6
        rows.append(row)
        print(f"  {fam}: done ({row['gpu_mon']})", flush=True)

    cols = ["regex"] + [f"tiktoken {th}T" for th in (args.threads if ranks else [])]
    print("\n| pattern | words | GPU MB/s | " + " | ".join(f"{c} MB/s" for c in cols)
          + " | GPU / regex | " + " | ".join(f"GPU / {c}" for c in cols[1:]) + " |")
    print("|---|---:|---:|" + "---:|" * (2 * len(cols)))
    def f(x: float) -> str:
        return f"{x:,.0f}" if x >= 100 else f"{x:.2g}"

    for r in rows:
        print(f"| {r['family']} | {r['words']:,} | {f(r['gpu'])} | "
              + " | ".join(f(r[c]) for c in cols) + f" | {f(r['gpu'] / r['regex'])}x | "
              + " | ".join(f"{f(r['gpu'] / r[c])}x" for c in cols[1:]) + " |")
    print("\nGPU: bytes in → word-start mask out (upload, 3 passes, 1 bit/byte readback); "
          "tiktoken: its regex split + BPE with GPT-2's ranks and the same pat_str.")
    print_footer()


if __name__ == "__main__":
    main()
