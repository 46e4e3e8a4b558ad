"""Train a byte-level BPE vocab on the GPU and export it — the API behind
`python -m torch_gpubpe train`, top to bottom.

    python examples/train_vocab.py                                   # the shipped corpus
    python examples/train_vocab.py --data-files ../shared/corpora/tr_manpages.jsonl.gz
    python examples/train_vocab.py --dataset allenai/c4 --config en --max-bytes 100000000

Ends with a sanity check: the GPU encoder, the exported Hugging Face tokenizer.json and the
pure-Python reference (DESIGN.md §4) give the same ids on held-out documents.
"""

from __future__ import annotations

import argparse
import sys
import time

import tokenizers

from torch_gpubpe.core import reference
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.core.export import export_all
from torch_gpubpe.io.sources import TextSource, iter_texts, shipped_corpus
from torch_gpubpe.training.trainer import train

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--dataset", help="Hugging Face dataset name (needs network) or local folder")
p.add_argument("--config")
p.add_argument("--data-files", nargs="+")
p.add_argument("--max-bytes", type=int, default=300_000, help="bytes to read (default 300,000)")
p.add_argument("--vocab-size", type=int, default=1024)
p.add_argument("--out", default="gpubpe-example-vocab")
args = p.parse_args()

# 1. Where the documents come from: a TextSource (Hub dataset, local files) or the corpus shipped
#    in the package. iter_texts yields one str per document and stops at max_bytes.
if args.dataset or args.data_files:
    source = TextSource(dataset=args.dataset, config=args.config,
                        data_files=tuple(args.data_files or ()))
else:
    source = shipped_corpus()
docs = list(iter_texts(source, max_bytes=args.max_bytes))
n_held = max(1, len(docs) // 10)  # the last tenth is held out of training
train_docs, held_out = docs[:-n_held], docs[-n_held:]
print(f"{len(train_docs)} training documents, {len(held_out)} held out, from {source.describe()}")

# 2. Train on the GPU (DESIGN.md §3). `progress` is called after each batch of merges; `stats`
#    is filled with what happened.
stats: dict = {}
t0 = time.perf_counter()
vocab = train(
    train_docs, args.vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"],
    progress=lambda pr: print(f"\r  {pr.merges_done}/{pr.total_merges} merges, "
                              f"{pr.merges_per_s:,.0f}/s", end="", file=sys.stderr),
    stats=stats,
)
print(f"\ntrained {len(vocab)} tokens ({stats['num_merges']} merges, "
      f"{stats['unique_words']:,} unique words) in {time.perf_counter() - t0:.1f} s")

# 3. Export: vocab.json (this project), tokenizer.json (+ config; Hugging Face),
#    tokenizer.tiktoken (tiktoken; merge-order BPE there, so ids may differ).
paths = export_all(vocab, args.out)
print("wrote", ", ".join(str(p) for p in paths.values()))

# 4. Encode the held-out documents on the GPU; compression in bytes per token.
tok = Tokenizer(vocab)
enc = tok.encode_batch(held_out)
nbytes = sum(len(d.encode()) for d in held_out)
print(f"held out: {nbytes:,} bytes -> {len(enc.ids):,} tokens "
      f"({nbytes / max(1, len(enc.ids)):.2f} bytes/token)")

# 5. Sanity check: GPU encoder == Hugging Face tokenizer.json == reference, and decode round-trips.
hf = tokenizers.Tokenizer.from_file(str(paths["hf"]))
for k, d in enumerate(held_out[:20]):
    gpu_ids = enc[k].tolist()
    assert gpu_ids == hf.encode(d).ids == reference.encode(d, vocab.merges), f"document {k}"
    assert vocab.decode(gpu_ids) == d
print("ok: GPU encoder, tokenizer.json and the reference agree")
