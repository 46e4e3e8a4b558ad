"""Run under ``torchrun --nproc_per_node=2`` by tests/test_integrations_ddp_even.py: two ranks
whose shards differ in length iterate ``make_dataloader`` for two epochs with an all_reduce per
step (as a DDP training step does); each rank writes a JSON line per epoch of what it saw into ``<out>/rank<R>.jsonl``.

    python -m torch.distributed.run --nproc_per_node=2 tests/ddp_unequal_shards.py even 5 0 OUT
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from pathlib import Path

from torch_gpubpe import Vocab
from torch_gpubpe.integrations.torch_data import TokenizedDataset, make_dataloader


def main() -> None:
    even = sys.argv[1] in ("even", "fail")
    ndocs = int(sys.argv[2])
    workers = int(sys.argv[3])
    out = open(Path(sys.argv[4]) / f"rank{os.environ['RANK']}.jsonl", "w")   # (one per rank)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    docs = [f"document {k} " * (k + 1) for k in range(ndocs)]
    if sys.argv[1] == "fail":
        docs[3] = None   # rank 1's second document: an error on that rank only   # rank 0: 0, 2, 4...; rank 1: 1, 3...
    vocab = Vocab.load(Path(__file__).parent / "data" / "vocabs" / "gpt2.tiktoken")
    loader = make_dataloader(TokenizedDataset(docs, vocab, with_index=True), batch_size=1,
                             num_workers=workers, **({} if even else {"even_batches": False}))
    seen = []
    try:
        for epoch in range(2):
            steps = 0
            for batch in loader:
                seen.append(int(batch["doc_index"][0]))
                dist.all_reduce(torch.ones(1))   # a training step's collective
                steps += 1
            print(json.dumps({"rank": rank, "epoch": epoch, "steps": steps, "seen": seen,
                              "even_stats": getattr(loader, "even_stats", None)}), file=out,
                  flush=True)
            seen = []
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"rank": rank, "error": f"{type(e).__name__}: {e}"}), file=out,
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":   # (spawned DataLoader workers import this module)
    main()
