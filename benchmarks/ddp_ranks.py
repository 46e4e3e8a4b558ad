"""Check: a DDP job with one GPU per local rank (torch_gpubpe.gpu.adapters) — each rank's tokens on
its own GPU, no document twice or missing across ranks, tokens equal to one process.

    torchrun --nproc_per_node=2 benchmarks/ddp_ranks.py                 # 2 GPUs (or lavapipe)
    torchrun --nproc_per_node=2 benchmarks/ddp_ranks.py --docs 20000 --repeat 4

Every rank (``torch.distributed`` with the gloo backend, so no NCCL is needed):

1. opens its GPU (``LOCAL_RANK`` → the Vulkan adapter of ``torch.cuda`` device ``LOCAL_RANK``,
   matched by UUID) and says which adapter it got and why;
2. rank 0 trains a small vocab and broadcasts it;
3. iterates ``TokenizedDataset(docs, vocab, with_index=True)`` (sharded by rank as always) and
   counts its documents, tokens and MB/s;
4. rank 0 gathers everything and checks: the ranks' document indices are disjoint and cover
   every document; each rank's tokens equal a single-process ``encode_batch`` of its documents;
   on a machine with at least as many GPU adapters as ranks, every rank had another adapter.

Exits non-zero when a check fails; prints the machine / date / command footer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import torch.distributed as dist  # noqa: E402
from _report import print_footer  # noqa: E402


def shipped_docs(n: int, repeat: int) -> list[str]:
    docs = []
    for p in sorted((REPO / "torch_gpubpe" / "io" / "corpus").glob("*.jsonl.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            docs += [json.loads(line)["text"] for line in f]
    docs = (docs * repeat)[:n] if n else docs * repeat
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=0, help="first N documents (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="repeat the shipped corpus K times")
    ap.add_argument("--vocab-size", type=int, default=1024)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    from torch_gpubpe.gpu import adapters as devices
    from torch_gpubpe.integrations.torch_data import TokenizedDataset
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.gpu.device import get_gpu
    from torch_gpubpe.training.trainer import train

    g = get_gpu()
    choice = devices.last_choice
    me = {"rank": rank, "local_rank": os.environ.get("LOCAL_RANK"), "adapter": g.adapter_name,
          "reason": choice.reason if choice else "wgpu default (no LOCAL_RANK)",
          "adapter_id": None}
    descs = devices.describe_adapters(list(g.wgpu.gpu.enumerate_adapters_sync()),
                                      devices.vulkan_identities())
    if choice is not None and choice.index is not None:
        me["adapter_id"] = descs[choice.index].uuid or f"#{choice.index}"
    else:
        me["adapter_id"] = g.adapter_name
    me["gpu_adapters"] = sum(d.is_gpu for d in descs)

    docs = shipped_docs(a.docs, a.repeat)
    box = [None]
    if rank == 0:
        box[0] = train(docs[: max(1, len(docs) // 4)], a.vocab_size,
                       special_tokens=["<|endoftext|>"])
    dist.broadcast_object_list(box, src=0)
    vocab = box[0]

    ds = TokenizedDataset(docs, vocab, with_index=True, rank=rank, world_size=world)
    t0 = time.perf_counter()
    seen, tokens = {}, 0
    for item in ds:
        seen[int(item["doc_index"])] = item["input_ids"].tolist()
        tokens += len(item["input_ids"])
    secs = time.perf_counter() - t0
    nbytes = sum(len(docs[k].encode()) for k in seen)
    ref = Tokenizer(vocab).encode_batch([docs[k] for k in sorted(seen)])
    me.update(documents=len(seen), tokens=tokens, seconds=secs, mb_s=nbytes / secs / 1e6,
              equal=all(seen[k] == list(ref[j]) for j, k in enumerate(sorted(seen))),
              indices=sorted(seen))
    everyone = [None] * world
    dist.all_gather_object(everyone, me)
    ok = True
    if rank == 0:
        print(f"{world} ranks, {len(docs):,} documents, vocab {len(vocab):,}")
        print("| rank | LOCAL_RANK | adapter | why | documents | tokens | MB/s | equal |")
        print("|---|---|---|---|---:|---:|---:|---|")
        for r in everyone:
            print(f"| {r['rank']} | {r['local_rank']} | {r['adapter']} ({r['adapter_id']}) | "
                  f"{r['reason']} | {r['documents']:,} | {r['tokens']:,} | {r['mb_s']:.1f} | "
                  f"{r['equal']} |")
        all_idx = [k for r in everyone for k in r["indices"]]
        dup = len(all_idx) - len(set(all_idx))
        missing = len(set(range(len(docs))) - set(all_idx))
        own = len({r["adapter_id"] for r in everyone}) == world
        print(f"duplicates {dup}, missing {missing}, tokens equal to one process: "
              f"{all(r['equal'] for r in everyone)}, one adapter per rank: {own} "
              f"({everyone[0]['gpu_adapters']} GPU adapter(s))")
        ok = (dup == 0 and missing == 0 and all(r["equal"] for r in everyone)
              and (own or everyone[0]["gpu_adapters"] < world))
        print_footer()
    flag = [ok]
    dist.broadcast_object_list(flag, src=0)
    dist.destroy_process_group()
    sys.exit(0 if flag[0] else 1)


if __name__ == "__main__":
    main()
