"""Train a tiny causal language model on text tokenized on the GPU, through the data path.

    python examples/pretrain_loop.py                       # a corpus from ../shared/corpora
    python examples/pretrain_loop.py --corpus my.jsonl.gz --steps 200 --device cuda

Sections: 1. documents · 2. vocab · 3. data (TokenizedDataset, packed blocks, 2 workers) ·
4. model (a few nn.TransformerEncoder layers with a causal mask) · 5. training loop (tokens/s,
loss) · 6. sanity check: the first batch equals the CPU reference encoding (DESIGN.md §4, §6).
Runs on the CPU in CI in well under a minute (the GPU encoder runs on lavapipe there).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_gpubpe.core import reference
from torch_gpubpe.integrations.torch_data import TokenizedDataset, make_dataloader
from torch_gpubpe.core.vocab import Vocab

REPO = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"


def default_corpus() -> Path:
    """``$TORCH_GPUBPE_CORPORA`` or ../shared/corpora beside the checkout, else the small corpus
    shipped in the package."""
    shared = Path(os.environ.get("TORCH_GPUBPE_CORPORA") or REPO.parent / "shared" / "corpora")
    for cand in (shared / "tr_ud_boun.jsonl.gz",
                 REPO / "torch_gpubpe" / "io" / "corpus" / "tr_ud_boun.jsonl.gz"):
        if cand.is_file():
            return cand
    raise SystemExit("no corpus found: pass --corpus PATH.jsonl.gz")


# -- 1. documents ----------------------------------------------------------------------------------
def read_documents(path: Path, max_bytes: int) -> list[str]:
    """The first documents of a JSON Lines file (gzip allowed) up to ``max_bytes`` UTF-8 bytes."""
    docs, total = [], 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                docs.append(json.loads(line)["text"])
                total += len(docs[-1].encode())
                if total >= max_bytes:
                    break
    return docs


# -- 4. model --------------------------------------------------------------------------------------
class TinyCausalLM(nn.Module):
    """Token + position embeddings, ``layers`` pre-norm encoder layers under a causal mask, a
    tied output head. Input ``(B, T)`` int64 ids → logits ``(B, T, vocab)``."""

    def __init__(self, vocab_size: int, seq_len: int, d: int = 128, heads: int = 4,
                 layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(seq_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len))
        nn.init.normal_(self.tok.weight, std=0.02)  # small: the head is tied to it
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
        return self.norm(x) @ self.tok.weight.T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=None, help="JSON Lines corpus (gzip ok)")
    ap.add_argument("--max-bytes", type=int, default=200_000, help="bytes of text to read")
    ap.add_argument("--vocab", type=Path, default=None, help="a saved Vocab (else trained)")
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", default="cpu", help="torch device of the model")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: 1 on machines with at most 4 CPUs, where "
                         "OpenMP threads spinning against the DataLoader workers cost ~20x)")
    args = ap.parse_args()
    torch.manual_seed(0)
    threads = args.threads or (1 if (os.cpu_count() or 1) <= 4 else None)
    if threads:
        torch.set_num_threads(threads)

    # 1. documents
    corpus = args.corpus or default_corpus()
    docs = read_documents(corpus, args.max_bytes)
    print(f"corpus {corpus.name}: {len(docs)} documents, "
          f"{sum(len(d.encode()) for d in docs):,} bytes")

    # 2. vocab: trained by the CPU reference here, so this process never opens the GPU (its
    #    DataLoader workers then start by 'forkserver'; DESIGN.md §8).
    t0 = time.perf_counter()
    if args.vocab:
        vocab = Vocab.load(args.vocab)
    else:
        merges = reference.train(docs, args.vocab_size, min_frequency=2, num_special_tokens=1)
        vocab = Vocab.from_merges(merges, [EOT])
    print(f"vocab: {len(vocab)} tokens ({time.perf_counter() - t0:.1f} s)")

    # 3. data: documents joined with EOS, cut into seq_len blocks; each worker encodes its own
    #    shard of the documents on the GPU.
    ds = TokenizedDataset(docs, vocab, mode="packed", seq_len=args.seq_len, batch_bytes=32_768)
    loader = make_dataloader(ds, batch_size=args.batch_size, num_workers=args.num_workers,
                             persistent_workers=args.num_workers > 0, timeout=300)

    # 4. model
    dev = torch.device(args.device)
    model = TinyCausalLM(len(vocab), args.seq_len).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {dev}")

    # 5. training loop (epochs repeat if the corpus runs out)
    step, tokens, first_batch = 0, 0, None
    t_start = time.perf_counter()
    while step < args.steps:
        for batch in loader:
            if first_batch is None:
                first_batch = batch["input_ids"].clone()
                t_first = time.perf_counter() - t_start
                t_start = time.perf_counter()  # throughput excludes worker start-up
            ids, labels = batch["input_ids"].to(dev), batch["labels"].to(dev)
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            tokens += ids.numel()
            dt = max(time.perf_counter() - t_start, 1e-9)
            print(f"step {step:4d}  loss {loss.item():.3f}  tokens/s {tokens / dt:,.0f}")
            if step >= args.steps:
                break
    assert math.isfinite(loss.item())
    print(f"first batch after {t_first:.1f} s (worker start-up); {tokens:,} tokens trained")

    # 6. sanity check: worker 0 delivers the first batch, blocks of the shard docs[0::workers].
    shard = docs[:: max(1, args.num_workers)]
    eos, need = vocab.token_to_id(EOT), first_batch.numel()
    stream: list[int] = []
    for d in shard:
        stream += reference.encode(d, vocab.merges) + [eos]
        if len(stream) > need:
            break
    want = torch.tensor(stream[: first_batch.numel()]).view_as(first_batch)
    assert torch.equal(first_batch, want), "first batch differs from the CPU reference"
    print("sanity check: first batch equals the CPU reference encoding")
    print("sample:", repr(vocab.decode(first_batch[0, :40].tolist())))


if __name__ == "__main__":
    main()
