"""``python -m torch_gpubpe count | merge-counts | train --counts`` (distributed vocabularies).

A vocabulary from a corpus spread over machines (:mod:`torch_gpubpe.training.counts_file`)::

    # on each machine, for its shard (GPU or --count-on cpu):
    python -m torch_gpubpe count --data-files 'shard-003/*.parquet' --out counts/003.parquet
    # anywhere, once all shards are counted (streaming, bounded memory, exact 64-bit sums):
    python -m torch_gpubpe merge-counts counts/*.parquet --out all.parquet
    # on one GPU: the merges of training on the whole corpus at once
    python -m torch_gpubpe train --counts all.parquet --vocab-size 65536 --out vocab/
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from torch_gpubpe.cli.common import (PROG, adapter_name, add_debug, add_source_args,
                                     peak_rss_bytes, prepare_out_dir, progress, source_from_args)
from torch_gpubpe.cli.summary import print_train_summary, vocab_summary
from torch_gpubpe.errors import InputError


def add_parsers(sub) -> None:
    """Add the ``count`` and ``merge-counts`` subcommands to ``sub`` (argparse subparsers)."""
    c = sub.add_parser(
        "count", help="count the words of a corpus shard into a counts file",
        description="Count the words (DESIGN.md §2) of the documents into a counts file: Parquet, "
                    "columns word (binary) and count (uint64), sorted by word bytes "
                    "(torch_gpubpe.training.counts_file). Merge the files of all shards with merge-counts, "
                    "then train --counts.",
    )
    add_source_args(c, default_note="default: the corpus shipped in the package")
    c.add_argument("--out", required=True, metavar="FILE", help="counts file to write (.parquet)")
    c.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                   help="the word split, as train's (default: this project's byte classes); "
                        "the file records it, and `train --counts` gives its vocab that split")
    c.add_argument("--count-on", choices=("gpu", "cpu"), default="gpu",
                   help="count on the GPU (default) or the CPU (vectorised numpy); same counts")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_debug(c)

    m = sub.add_parser(
        "merge-counts", help="merge counts files into one (exact sums)",
        description="Merge counts files (from count or earlier merges) into one: a streaming "
                    "k-way merge of the sorted files, exact 64-bit sums, memory bounded by "
                    "--fan-in × --batch-rows rows.",
    )
    m.add_argument("inputs", nargs="+", metavar="FILE", help="counts files to merge")
    m.add_argument("--out", required=True, metavar="FILE", help="merged counts file to write")
    m.add_argument("--batch-rows", type=int, default=None, metavar="N",
                   help="rows read from each input per step (default: 65,536)")
    m.add_argument("--fan-in", type=int, default=None, metavar="K",
                   help="inputs merged at once; more go through intermediate files (default: 64)")
    add_debug(m)


def _has_source(args) -> bool:
    return bool(args.dataset or args.data_files)


def cmd_count(args: argparse.Namespace) -> int:
    from torch_gpubpe.training.counts_file import count_to_file
    from torch_gpubpe.io.readers import documents, prefetch

    out = Path(args.out)
    prepare_out_dir(out.parent if str(out.parent) else ".", "--out")
    source = source_from_args(args)
    stats: dict = {}
    read_stats: dict = {}
    t0 = time.perf_counter()
    with progress(args, desc="read + count", unit="B", unit_scale=True,
                       unit_divisor=1000, total=args.max_bytes) as bar:
        class _Read:
            """The documents as packed Arrow batches (no Python object per document)."""

            def __iter__(self):  # the counters take packed_batches; this is the slow path
                for data, offsets in self.packed_batches(16 << 20):
                    raw, o = data.tobytes(), offsets.tolist()
                    yield from (raw[o[j] : o[j + 1]] for j in range(len(o) - 1))

            def packed_batches(self, batch_bytes: int):
                stream = documents(source.reader(), max_docs=args.max_docs,
                                   max_bytes=args.max_bytes, batch_bytes=batch_bytes,
                                   stats=read_stats)
                for p in prefetch(stream, 2, "torch_gpubpe count read"):
                    bar.update(p.nbytes)
                    yield p.data, p.offsets

        count_to_file(_Read(), out, count_on=args.count_on, stats=stats,
                      pre_tokenizer=args.pre_tokenizer)
    nulls = read_stats.get("skipped_none", 0)
    skipped = f"; skipped {nulls:,} null row{'s' * (nulls != 1)} (text None)" if nulls else ""
    if stats["num_documents"] == 0:
        out.unlink()
        raise InputError(f"empty corpus: {source.describe()} gave no documents to count"
                         f"{skipped}")
    print(f"{PROG} count: {stats['num_documents']:,} documents, {stats['corpus_bytes']:,} "
          f"bytes → {stats['num_words']:,} distinct words in {time.perf_counter() - t0:.2f} s "
          f"(count on {args.count_on}){skipped}\n  wrote {out}")
    return 0


def cmd_merge_counts(args: argparse.Namespace) -> int:
    from torch_gpubpe.training.counts_file import DEFAULT_BATCH_ROWS, DEFAULT_FAN_IN, merge_counts

    out = Path(args.out)
    prepare_out_dir(out.parent if str(out.parent) else ".", "--out")
    stats: dict = {}
    merge_counts(args.inputs, out, batch_rows=args.batch_rows or DEFAULT_BATCH_ROWS,
                 fan_in=args.fan_in or DEFAULT_FAN_IN, stats=stats)
    print(f"{PROG} merge-counts: {stats['num_inputs']:,} files → {stats['num_words']:,} "
          f"distinct words, {stats['total_count']:,} words in all, in {stats['seconds']:.2f} s "
          f"(at most {stats['peak_rows_held']:,} input rows held)\n  wrote {out}")
    return 0


def cmd_train_counts(args: argparse.Namespace, out) -> int:
    """``train --counts FILE``: the training half of :func:`torch_gpubpe.cli.train.cmd_train`."""
    from torch_gpubpe.training.counts_file import read_metadata, train_from_counts_file

    if _has_source(args):
        raise InputError("give --counts or the input options (--dataset/--data-files), not both")
    specials = tuple(args.special_tokens or ())
    meta = read_metadata(args.counts)
    if args.pre_tokenizer:   # (the words were split when counted: the file says how)
        from torch_gpubpe.core.patterns import DEFAULT
        from torch_gpubpe.core.vocab import PRE_TOKENIZER
        from torch_gpubpe.training.counting import training_split

        fam = training_split(args.pre_tokenizer)
        if (PRE_TOKENIZER if fam == DEFAULT else fam) != meta.get("pre_tokenizer"):
            raise InputError(
                f"--pre-tokenizer {args.pre_tokenizer} with --counts {args.counts}: its words "
                f"were split with {meta.get('pre_tokenizer')!r} when counted; give that split "
                "or none, or count again with `count --pre-tokenizer`")
    t0 = time.perf_counter()
    stats: dict = {}
    bar = None

    def on_progress(p) -> None:
        nonlocal bar
        if bar is None:
            bar = progress(args, desc="merge", unit="merge", total=p.total_merges)
        bar.update(p.merges_done - bar.n)

    try:
        vocab = train_from_counts_file(args.counts, args.vocab_size,
                                       min_frequency=args.min_frequency,
                                       special_tokens=specials, progress=on_progress,
                                       stats=stats)
    finally:
        if bar is not None:
            bar.close()
    if args.mode != vocab.mode:
        vocab = vocab.with_mode(args.mode)
    t_train = time.perf_counter() - t0
    written: dict = {}
    t2 = time.perf_counter()
    if out is not None:
        from torch_gpubpe.core.export import export_all

        written = export_all(vocab, out)
    summary = {
        "command": "train",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "argv": sys.argv[1:],
        "source": f"counts file {args.counts} ({meta.get('num_shards', '?')} shard(s))",
        "adapter": stats.get("adapter") or adapter_name(),
        "corpus_bytes": int(meta.get("corpus_bytes", 0)),
        "num_documents": int(meta.get("num_documents", 0)),
        "heldout_bytes": 0, "heldout_documents": 0, "heldout_tokens": 0,
        "heldout_bytes_per_token": None,
        **vocab_summary(args, vocab, specials, stats),
        "seconds": {"read_and_count": stats.get("seconds_count"),
                    "merge": stats.get("seconds_merge"), "train_total": t_train,
                    "export": time.perf_counter() - t2, "heldout_encode": None,
                    "total": time.perf_counter() - t0},
        "peak_rss_bytes": peak_rss_bytes(),
        "written": {k: str(v) for k, v in written.items()},
    }
    print_train_summary(args, summary)
    return 0


HANDLERS = {"count": cmd_count, "merge-counts": cmd_merge_counts}
