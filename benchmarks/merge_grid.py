"""Benchmark: the word-list merge loop's grids (find_max4's and wl_merge's workgroups) at scale.

The words are counted once (GPU); then the merge phase (``GPUTrainer.run_arrays``, the default
algorithm) runs once per grid setting in the same process, the device open and the pipelines
compiled (a first, untimed run warms up). Every setting must give the same merges as the first
(exactness of the grid-stride walks and scans); the table says µs per merge, the upload and
where the rebuilds went, and the SM clock while each ran.

Usage::

    python3 benchmarks/merge_grid.py --jsonl /tmp/big.jsonl --vocab-size 65536
    python3 benchmarks/merge_grid.py --find 132,1056 --walk 132,385 --jsonl /tmp/big.jsonl

``--find``: find_max4's largest grid (train_wordlist.FIND_WORKGROUPS, default 1,056);
``--walk``: wl_merge's grid (default: train_wordlist.grid_workgroups' choice, "auto").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._report import GPUMonitor, print_footer  # noqa: E402
from benchmarks.train import load_docs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jsonl", help="JSON Lines corpus ({'text': ...} per line)")
    ap.add_argument("--corpus", action="append", help="shared corpus name (repeatable)")
    ap.add_argument("--max-bytes", type=int, default=None)
    ap.add_argument("--vocab-size", type=int, default=65536)
    ap.add_argument("--find", default="1056,528,264,132", help="find_max4 grids, comma-separated")
    ap.add_argument("--walk", default="auto,132,264,1056",
                    help="wl_merge grids ('auto' = the trainer's choice), comma-separated")
    args = ap.parse_args()

    import numpy as np

    import torch_gpubpe.training.wordlist_loop as tw
    from torch_gpubpe.training.trainer import get_trainer
    from torch_gpubpe.training.wordcount import count_words_gpu

    docs = load_docs(args.corpus or ["en_novels"], args.max_bytes, args.jsonl)
    t = time.perf_counter()
    wc = count_words_gpu(docs)
    print(f"counted {len(wc.lengths):,} unique words in {time.perf_counter() - t:.2f} s",
          flush=True)
    keep = wc.lengths >= 2
    data = wc.data[np.repeat(keep, wc.lengths)]
    lens, counts = wc.lengths[keep], wc.counts[keep]
    tr = get_trainer()
    merges = args.vocab_size - 256
    auto_grid = tw.grid_workgroups
    default_find = tw.FIND_WORKGROUPS

    def run(find: int, walk: str) -> tuple[dict, list, str]:
        tw.FIND_WORKGROUPS = find
        tw.grid_workgroups = auto_grid if walk == "auto" else (lambda n, cpu: int(walk))
        st: dict = {}
        try:
            with GPUMonitor() as mon:
                got = tr.run_arrays(data, lens, counts, merges, 1, stats=st)
        finally:
            tw.FIND_WORKGROUPS, tw.grid_workgroups = default_find, auto_grid
        return st, got, mon.summary()

    run(default_find, "auto")     # warm-up (lazy driver work)
    rows, ref = [], None
    for find in (int(x) for x in args.find.split(",")):
        for walk in args.walk.split(","):
            st, got, clock = run(find, walk)
            ref = got if ref is None else ref
            n = len(got)
            rows.append((find, st.get("walk_workgroups"), f"{st['seconds_merge']:.3f}",
                         f"{1e6 * st['seconds_merge'] / max(1, n):.1f}",
                         f"{st['seconds_upload']:.3f}", st["rebuilds"],
                         f"{st.get('seconds_rebuilds', 0):.3f}", n,
                         "yes" if got == ref else "NO", clock))
            print(*rows[-1], sep=" | ", flush=True)
    head = ("find_max4 grid", "wl_merge grid", "merge s", "µs/merge", "upload s", "rebuilds",
            "rebuild s", "merges", "= first", "SM clock")
    print(f"\n{len(docs):,} documents, {len(lens):,} words of ≥ 2 bytes, "
          f"{int(lens.sum()):,} symbols; vocab {args.vocab_size}; min_frequency 1")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    print(f"adapter: {tr.gpu.adapter_name}")
    print_footer()


if __name__ == "__main__":
    main()
