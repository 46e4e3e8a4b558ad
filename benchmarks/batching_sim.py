"""Simulation (CPU, no GPU): how many merges per step a batched trainer could apply exactly.

The rule checked here (a candidate design for the GPU trainer, not implemented there): at a
step, take the longest prefix Q1..QK of the current pair ranking (count desc, left asc, right
asc) whose pairs share no token and have left != right, then cut it back to the largest K with
count(Q_K) > count(Q_{K+1}) (strictly; K = 1 always allowed). Applying Q1..QK together gives
the same merges as K sequential steps: every pair a merge creates counts at most as much as an
old pair that ranks below Q_K, and disjoint pairs do not change each other's occurrences.

The script trains with the rule (on ``torch_gpubpe.reference``'s data structures), checks the
merges against ``reference.train_from_word_counts`` and prints the merges per step by phase.

Usage::

    python3 benchmarks/batching_sim.py --max-bytes 2500000 --vocab-size 8192
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._report import print_footer  # noqa: E402
from benchmarks.train import DEFAULT_CORPORA, load_docs  # noqa: E402
from torch_gpubpe import reference  # noqa: E402
from torch_gpubpe.reference import _apply_merge, _index  # noqa: E402


def simulate(word_counts, vocab_size: int, min_frequency: int, lookahead: int = 64):
    """(merges, steps' sizes) under the batching rule (see the module docstring)."""
    words = [tuple(w) for w, c in word_counts.items() if len(w) > 1 and c]
    weights = [int(c) for w, c in word_counts.items() if len(w) > 1 and c]
    counts, where, heap = _index(words, weights)

    def top(m: int) -> list:
        out, seen = [], set()
        while heap and len(out) < m:
            c, a, b = heapq.heappop(heap)
            if counts.get((a, b), 0) == -c and (a, b) not in seen:
                out.append((c, a, b))
                seen.add((a, b))
        for e in out:
            heapq.heappush(heap, e)
        return out

    merges: list = []
    sizes: list = []
    num = vocab_size - 256
    while len(merges) < num:
        q = top(lookahead)
        if not q or -q[0][0] < min_frequency:
            break
        k = 1
        used = {q[0][1], q[0][2]}
        if q[0][1] != q[0][2]:
            for c, a, b in q[1:]:
                if a == b or a in used or b in used or -c < min_frequency:
                    break
                used |= {a, b}
                k += 1
        while k > 1 and (k >= len(q) or -q[k - 1][0] <= -q[k][0]):
            k -= 1
        k = min(k, num - len(merges))
        sizes.append(k)
        for _, a, b in q[:k]:
            merges.append((a, b))
            _apply_merge((a, b), 256 + len(merges) - 1, words, weights, counts, where, heap)
    return merges, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", action="append")
    ap.add_argument("--max-bytes", type=int, default=500_000, help="per corpus")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--min-frequency", type=int, default=1)
    args = ap.parse_args()
    names = args.corpus or DEFAULT_CORPORA
    docs = load_docs(names, args.max_bytes)
    wc = reference.count_words(docs)
    t = time.perf_counter()
    merges, sizes = simulate(wc, args.vocab_size, args.min_frequency)
    sim_s = time.perf_counter() - t
    same = merges == reference.train_from_word_counts(wc, args.vocab_size, args.min_frequency)
    print(f"corpora: {', '.join(names)} ({sum(len(d.encode()) for d in docs) / 1e6:.1f} MB); "
          f"vocab {args.vocab_size}; min_frequency {args.min_frequency}")
    print(f"merges {len(merges)}, steps {len(sizes)}, merges per step "
          f"{len(merges) / max(1, len(sizes)):.2f}; same merges as sequential BPE: {same} "
          f"(simulated in {sim_s:.0f} s)")
    print("| merges | steps | merges per step |\n|---|---:|---:|")
    done = 0
    bounds = [0, 1000, 4000, 8000, 16000, 32000, 1 << 20]
    acc = {i: [0, 0] for i in range(len(bounds) - 1)}
    for k in sizes:
        i = next(j for j in range(len(bounds) - 1) if done < bounds[j + 1])
        acc[i][0] += 1
        acc[i][1] += k
        done += k
    for i, (steps, n) in acc.items():
        if steps:
            print(f"| {bounds[i]}–{min(bounds[i + 1], len(merges))} | {steps} | {n / steps:.2f} |")
    print_footer()
    if not same:
        raise SystemExit("the batched merges differ from sequential BPE")


if __name__ == "__main__":
    main()
