"""The summary ``train`` prints at the end (and writes as JSON with ``--summary-json``), for
both ``train`` and ``train --counts``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torch_gpubpe.cli.common import PROG, docs, fmt_bytes
from torch_gpubpe.core.vocab import Vocab


def vocab_summary(args: argparse.Namespace, vocab: Vocab, specials: tuple[str, ...],
                  stats: dict) -> dict:
    """The train summary's fields about the vocab (``train`` and ``train --counts``): unique
    words (from the trainer's ``stats``), vocab size and merges (got and asked for: ``specials``
    are the special tokens asked for), ``min_frequency`` and the special tokens, in this order."""
    return {
        "unique_words": stats.get("unique_words"),
        "vocab_size": len(vocab),
        "requested_vocab_size": args.vocab_size,
        "num_merges": len(vocab.merges),
        "requested_merges": args.vocab_size - 256 - len(specials),
        "min_frequency": args.min_frequency,
        "special_tokens": list(vocab.special_tokens),
        "mode": vocab.mode,
        "pre_tokenizer": vocab.pre_tokenizer or "bytes-classes",
    }


def print_train_summary(args: argparse.Namespace, summary: dict) -> None:
    """Print :func:`format_train_summary` of ``summary``; also write it as JSON (UTF-8, indent 2)
    to ``args.summary_json`` when given."""
    print(format_train_summary(summary))
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")



def format_train_summary(s: dict) -> str:
    """The human-readable end-of-training table (one ``name  value`` line per item)."""
    sec, min_frequency = s["seconds"], s.get("min_frequency", 2)
    nulls = s.get("skipped_none_rows", 0)

    def t(x):
        return "-" if x is None else f"{x:.2f} s"

    stopped = ""
    if s["num_merges"] < s["requested_merges"]:
        stopped = f" (stopped early: no pair occurs {min_frequency}+ times)"
    where, how = (("the first training documents", "; up to --holdout-max-bytes, or "
                   "--holdout-every K to hold documents out of training")
                  if s.get("heldout_is_training") else ("the held-out slice", ""))
    held = (
        f"{s['heldout_bytes_per_token']:.3f} bytes/token on {where} "
        f"({s['heldout_bytes']:,} bytes in {docs(s['heldout_documents'])} → "
        f"{s['heldout_tokens']:,} tokens{how})"
        if s["heldout_tokens"] else
        "n/a (the encoder refuses the vocab: see the note below)" if s.get("heldout_refused")
        else "n/a (no held-out documents; see --holdout-every)"
    )
    rows = [
        ("source", s["source"]),
        ("adapter", s["adapter"]),
        ("corpus", f"{s['corpus_bytes']:,} bytes ({fmt_bytes(s['corpus_bytes'])}) in "
                   f"{docs(s['num_documents'])}" + (
                       f"; skipped {nulls:,} null row{'s' * (nulls != 1)} (text None)"
                       if nulls else "")),
        ("unique words", "-" if s["unique_words"] is None else f"{s['unique_words']:,}"),
        ("merges", f"{s['num_merges']:,} of {s['requested_merges']:,}{stopped}"),
        ("vocab size", f"{s['vocab_size']:,} (256 bytes + {s['num_merges']:,} merges + "
                       f"{len(s['special_tokens'])} special: "
                       f"{' '.join(s['special_tokens']) or '-'})"),
        ("time", f"read + count words {t(sec['read_and_count'])} | merge {t(sec['merge'])} | "
                 f"train total {t(sec['train_total'])} | export {t(sec['export'])} | "
                 f"compression encode {t(sec['heldout_encode'])} | all {t(sec['total'])}"),
        ("peak memory", f"{fmt_bytes(s['peak_rss_bytes'])} (host RSS)"),
        ("compression", held),
        ("written", (", ".join(s["written"].values()) + (
            " (tokenizer.tiktoken: tiktoken applies merge order, so its ids differ from this "
            "greedy vocab's; train --mode bpe for identical ids)"
            if s.get("mode") == "greedy" and "tiktoken" in s["written"] else ""))
         or "nothing (pass --out DIR to save)"),
        ("date", s["date"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{PROG} train: summary"] + [f"  {k:<{width}}  {v}" for k, v in rows])
