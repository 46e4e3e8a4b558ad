"""``python -m torch_gpubpe train``: read documents, train a byte-level BPE vocab on the GPU
(DESIGN.md §3, :func:`torch_gpubpe.training.trainer.train`), print a summary and, with
``--out DIR``, export it (:mod:`torch_gpubpe.core.export`). ``train --counts`` trains from a
counts file instead (:mod:`torch_gpubpe.cli.counts`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from torch_gpubpe.cli.common import (DEFAULT_BATCH_BYTES, PROG, adapter_name, add_debug,
                                     add_source_args, cli_names, error_text, parse_size,
                                     peak_rss_bytes, positive_int, prepare_out_dir, progress,
                                     source_from_args)
from torch_gpubpe.cli.counts import cmd_train_counts
from torch_gpubpe.cli.summary import print_train_summary, vocab_summary
from torch_gpubpe.core.vocab import MAX_VOCAB_SIZE, Vocab, checked_special_tokens
from torch_gpubpe.errors import InputError, UnsupportedVocabError

if TYPE_CHECKING:  # at run time imported where used: pyarrow takes ~0.3 s to import
    from torch_gpubpe.io.readers import TextSource

DEFAULT_VOCAB_SIZE = 2048
DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>",)
DEFAULT_HOLDOUT_EVERY = 0   # the same documents give the same vocab as train() by default
DEFAULT_HOLDOUT_MAX_BYTES = 4_000_000


def add_parser(sub) -> None:
    """Add the ``train`` subcommand to ``sub`` (argparse subparsers)."""
    t = sub.add_parser(
        "train", help="train a vocab (DESIGN.md §3) and export it",
        description="Train a byte-level BPE vocab on the GPU. With no input arguments it trains on "
                    "the ~1.4 MB English + Turkish corpus shipped in the package (offline; at the "
                    f"default --vocab-size {DEFAULT_VOCAB_SIZE}, a few seconds on a GPU and under half a "
                    "minute on lavapipe, the CPU Vulkan device, with 2 cores).",
    )
    add_source_args(t, default_note="default: the corpus shipped in the package")
    g = t.add_argument_group("training")
    g.add_argument("--vocab-size", type=positive_int, default=DEFAULT_VOCAB_SIZE, metavar="N",
                   help=f"tokens in the vocab, including 256 byte tokens and the special tokens "
                        f"(default: {DEFAULT_VOCAB_SIZE}: small enough to train the shipped corpus "
                        f"in seconds even on lavapipe; use 32768+ for real models; max "
                        f"{MAX_VOCAB_SIZE})")
    g.add_argument("--min-frequency", type=positive_int, default=2, metavar="N",
                   help="stop when the most frequent pair occurs fewer than N times (default: 2)")
    g.add_argument("--special-tokens", nargs="*", default=list(DEFAULT_SPECIAL_TOKENS),
                   metavar="TOKEN",
                   help="special tokens, ids after the last merge (default: <|endoftext|>; "
                        "give the option with no value for none)")
    g.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                   help="the word split: this project's byte classes (default) or a model's "
                        "regex split, done on the GPU: gpt2, cl100k, o200k, qwen2, llama3, "
                        "qwen35, starcoder (or a pat_str); the vocab and its exports record it")
    g.add_argument("--count-on", choices=("gpu", "cpu"), default="gpu",
                   help="where the words are counted before the merges (default: gpu; cpu: "
                        "vectorised numpy on all cores, for corpora with more distinct words "
                        "than the GPU's word table holds); same counts")
    g.add_argument("--max-memory", type=parse_size, metavar="SIZE",
                   help="host memory counting and merging may use (default: 80%% of RAM): "
                        "word counts beyond it spill to sorted runs on disk (exact); an error "
                        "names what to change when the corpus's unique words cannot fit")
    g.add_argument("--prune-below", type=int, default=0, metavar="N",
                   help="drop words counted fewer than N times before merging (default 0: "
                        "none, exact; the merges can differ when words are dropped)")
    g.add_argument("--counts", metavar="FILE",
                   help="train from a counts file (`count`, `merge-counts`) instead of "
                        "documents: the merges of training on the documents counted into it")
    g.add_argument("--holdout-every", type=int, default=DEFAULT_HOLDOUT_EVERY, metavar="K",
                   help="every K-th document is held out of training to measure compression "
                        "on text the vocab did not see (default: 0, none: the compression is "
                        "measured on the first training documents, and the vocab is train()'s)")
    g.add_argument("--holdout-max-bytes", type=parse_size, default=DEFAULT_HOLDOUT_MAX_BYTES,
                   metavar="SIZE", help="held-out slice size limit (default: 4M); later documents "
                                        "all go to training")
    o = t.add_argument_group("output")
    o.add_argument("--out", metavar="DIR",
                   help="write vocab.json (this project), tokenizer.json + tokenizer_config.json "
                        "(Hugging Face; same ids as this project) and tokenizer.tiktoken "
                        "(tiktoken; it applies merge-order BPE, not greedy longest match, so "
                        "its ids can differ) here (default: nothing is written)")
    o.add_argument("--mode", choices=("greedy", "bpe"), default="greedy",
                   help="the encoding mode saved with the vocab: greedy longest match (default) "
                        "or bpe merge order (then tokenizer.json is a real BPE model and "
                        "tokenizer.tiktoken gives the same ids)")
    o.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON")
    o.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_debug(o)


class CorpusReader:
    """The training documents of ``source`` as packed batches (:meth:`packed_batches`, what
    the trainer's word counters take: no Python object per document), read on another thread
    with a progress bar (bytes), every ``holdout_every``-th document diverted to a held-out slice
    (until ``holdout_max_bytes``).

    Read it once (the trainer does, DESIGN.md §3); afterwards ``train_bytes``, ``train_docs``,
    ``heldout_bytes`` and the held-out documents (:meth:`heldout_packed`, or :attr:`heldout` as
    a list of bytes) describe what was read and ``seconds`` is the wall time spent reading
    (reading + the trainer's word counting).
    """

    def __init__(self, args: argparse.Namespace, source: TextSource) -> None:
        self.args, self.source = args, source
        self.train_bytes = self.train_docs = self.heldout_bytes = 0
        # the held-out documents as packed pieces (bytes, lengths): kept packed, they are
        # encoded as they were read, with no Python object per document
        self._held: list[tuple[np.ndarray, np.ndarray]] = []
        self.heldout_is_training = False   # (holdout off: the held-out slice is training text)
        self.seconds = 0.0
        self.read_stats: dict = {}

    @property
    def stats(self) -> dict:
        """What reading counted (``skipped_none``: rows whose text is None), under a
        :class:`~torch_gpubpe.io.readers.Reader`'s name: ``train()`` records it."""
        return self.read_stats

    def packed_batches(self, batch_bytes: int):
        from torch_gpubpe.io.readers import documents, prefetch

        a = self.args
        every, cap = a.holdout_every, a.holdout_max_bytes
        stream = documents(self.source.reader(), max_docs=a.max_docs, max_bytes=a.max_bytes,
                           stats=self.read_stats, batch_bytes=batch_bytes)
        t0 = time.perf_counter()
        with progress(a, desc="read + count words", unit="B", unit_scale=True,
                       unit_divisor=1000, total=a.max_bytes) as bar:
            for p in prefetch(stream, 2, "torch_gpubpe read"):
                data, offsets = p.data, p.offsets
                bar.update(p.nbytes)
                if every > 0 and self.heldout_bytes < cap:
                    i = np.arange(p.first, p.first + len(p), dtype=np.int64)
                    cand = np.flatnonzero(i % every == every - 1)
                    lens = np.diff(offsets)
                    cl = lens[cand]
                    before = self.heldout_bytes + np.cumsum(cl) - cl
                    held = cand[before < cap]
                    if len(held):
                        self._held.append((np.concatenate(
                            [data[offsets[j] : offsets[j + 1]] for j in held.tolist()]),
                            lens[held]))
                        self.heldout_bytes += int(lens[held].sum())
                        keep = np.ones(len(p), bool)
                        keep[held] = False
                        # the runs of kept documents between held ones, copied as slices (a
                        # byte mask would cost ~10x more per byte of the batch)
                        cut_a = np.concatenate([[0], offsets[held + 1]]).tolist()
                        cut_b = np.concatenate([offsets[held], [offsets[-1]]]).tolist()
                        data = np.concatenate([data[a:b] for a, b in zip(cut_a, cut_b)])
                        offsets = np.zeros(int(keep.sum()) + 1, np.int64)
                        np.cumsum(lens[keep], out=offsets[1:])
                elif every == 0 and self.heldout_bytes < cap:
                    # no documents held out: the compression is reported on the first
                    # training documents (a copy; they are trained on too)
                    lens = np.diff(offsets)
                    k = int(np.searchsorted(self.heldout_bytes + np.cumsum(lens), cap, "right"))
                    if k:
                        self._held.append((data[: offsets[k]].copy(), lens[:k]))
                    self.heldout_bytes += int(lens[:k].sum())
                    self.heldout_is_training = True
                self.train_docs += len(offsets) - 1
                self.train_bytes += int(offsets[-1])
                yield data, offsets
        self.seconds = time.perf_counter() - t0

    def heldout_packed(self) -> tuple[np.ndarray, np.ndarray]:
        """The held-out documents as ``(data, offsets)`` (uint8 bytes, int64 offsets from 0),
        as :meth:`torch_gpubpe.encoding.tokenizer.Tokenizer.submit_packed` takes them."""
        data = np.concatenate([d for d, _ in self._held]) if self._held else np.zeros(0, np.uint8)
        offsets = np.zeros(sum(len(n) for _, n in self._held) + 1, np.int64)
        if self._held:
            np.cumsum(np.concatenate([n for _, n in self._held]), out=offsets[1:])
        return data, offsets

    @property
    def heldout(self) -> list[bytes]:
        """The held-out documents, one ``bytes`` each."""
        data, offsets = self.heldout_packed()
        raw, o = data.tobytes(), offsets.tolist()
        return [raw[o[j] : o[j + 1]] for j in range(len(o) - 1)]

    def __iter__(self):
        """Documents one by one as bytes (for callers without the packed path)."""
        for data, offsets in self.packed_batches(DEFAULT_BATCH_BYTES):
            raw, o = data.tobytes(), offsets.tolist()
            yield from (raw[o[j] : o[j + 1]] for j in range(len(o) - 1))


def cmd_train(args: argparse.Namespace) -> int:
    try:
        specials = checked_special_tokens(args.special_tokens or ())
    except ValueError as e:
        raise InputError(f"--special-tokens: {e}") from None
    if args.vocab_size < 256 + len(specials):
        raise InputError(
            f"--vocab-size {args.vocab_size} is below 256 byte tokens + {len(specials)} special "
            f"token(s); use at least {256 + len(specials)}"
        )
    if args.vocab_size > MAX_VOCAB_SIZE:
        raise InputError(f"--vocab-size {args.vocab_size} is above the maximum {MAX_VOCAB_SIZE}")
    if args.holdout_every < 0:
        raise InputError(f"--holdout-every must be >= 0, got {args.holdout_every}")
    out = prepare_out_dir(args.out) if args.out else None
    if args.counts:
        return cmd_train_counts(args, out)
    from torch_gpubpe.training.counting import READ_AHEAD_BYTES
    from torch_gpubpe.training.trainer import train  # the GPU trainer (DESIGN.md §3)

    source = dataclasses.replace(source_from_args(args), read_ahead_bytes=READ_AHEAD_BYTES)

    t0 = time.perf_counter()
    reader = CorpusReader(args, source)
    stats: dict = {}
    bar = None

    def on_progress(p) -> None:
        nonlocal bar
        if bar is None:  # created at the first report, once the reading bar is closed
            if reader.heldout_bytes:
                _precompile_heldout_encoder(args.pre_tokenizer)
            bar = progress(args, desc="merge", unit="merge", total=p.total_merges)
        bar.update(p.merges_done - bar.n)
        bar.set_postfix_str(f"last count {p.last_count:,}", refresh=False)

    on_progress.show_bars = not args.no_progress  # the trainer's own bars (spilled counts)
    try:
        with warnings.catch_warnings():  # said below as a note line, not as a Python warning
            warnings.filterwarnings("ignore", message="training stopped after")
            vocab = train(reader, args.vocab_size, min_frequency=args.min_frequency,
                          special_tokens=specials, progress=on_progress, stats=stats,
                          count_on=args.count_on, max_memory=args.max_memory,
                          prune_below=args.prune_below, pre_tokenizer=args.pre_tokenizer)
    except InputError as e:
        if reader.train_bytes or not str(e).startswith("empty corpus"):
            raise
        vocab = None  # the empty corpus, said with the source's name below
    finally:
        if bar is not None:
            bar.close()
    t_train = time.perf_counter() - t0
    if stats.get("stopped_early"):
        print(f"{PROG}: note: {cli_names(stats['stopped_early'])}", file=sys.stderr)
    if reader.train_bytes == 0:
        nulls = reader.read_stats.get("skipped_none", 0)
        raise InputError(
            f"empty corpus: {source.describe()} gave no text to train on ({reader.train_docs} "
            f"documents, 0 bytes" + (f"; skipped {nulls:,} null rows" if nulls else "")
            + "); check --text-column, --split, --max-docs/--max-bytes and the files"
        )
    if not isinstance(vocab, Vocab):  # tolerate a trainer that returns merges
        vocab = Vocab.from_merges(vocab, specials)
    if getattr(args, "mode", "greedy") != vocab.mode:
        vocab = vocab.with_mode(args.mode)
    held, held_offsets = reader.heldout_packed()
    held_docs, held_bytes = len(held_offsets) - 1, reader.heldout_bytes

    def export() -> tuple[dict[str, Path], float]:
        from torch_gpubpe.core.export import export_all

        t = time.perf_counter()
        return export_all(vocab, out), time.perf_counter() - t

    # The files are written while the held-out documents are encoded (the encoder's session
    # waits on the driver and the GPU, without the GIL); the encoder's trie, all Python and
    # numpy, is built first, not competing with the export for the GIL.
    held_refused = None   # why this project's encoder refuses the vocab, if it does
    with ThreadPoolExecutor(1, thread_name_prefix="torch_gpubpe export") as pool:
        exported = None
        t3 = time.perf_counter()
        try:
            encoder = None
            if held_docs:
                try:
                    encoder = _heldout_encoder(vocab)
                except UnsupportedVocabError as e:   # (the files take the vocab all the same)
                    held_refused = str(e)
            exported = pool.submit(export) if out is not None else None
            held_tokens = 0
            if encoder is not None:
                try:
                    held_tokens = _count_tokens(encoder, held, held_offsets)
                except UnsupportedVocabError as e:   # this adapter's, met as its session opens
                    held_refused = str(e)
        except BaseException:
            # Raised below, once the files are written; the export's own failure is said
            # first, not lost with it.
            if exported is None and out is not None:
                exported = pool.submit(export)
            if exported is not None and (err := exported.exception()) is not None:
                print(f"{PROG}: error: writing the files failed too: {error_text(err)}",
                      file=sys.stderr)
            raise
        t_eval = time.perf_counter() - t3
        written, t_export = exported.result() if exported is not None else ({}, 0.0)

    summary = {
        "command": "train",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "argv": sys.argv[1:],
        "source": source.describe(),
        "adapter": stats.get("adapter") or adapter_name(),
        "corpus_bytes": int(stats.get("corpus_bytes") or reader.train_bytes),
        "num_documents": int(stats.get("num_documents") or reader.train_docs),
        # rows whose text is None (null, a missing field): not documents, skipped (as encode's)
        "skipped_none_rows": int(reader.read_stats.get("skipped_none", 0)),
        "heldout_bytes": held_bytes,
        "heldout_documents": held_docs,
        "heldout_is_training": reader.heldout_is_training,
        **vocab_summary(args, vocab, specials, stats),
        "seconds": {
            "read_and_count": stats.get("seconds_count", reader.seconds),
            "merge": stats.get("seconds_merge"),
            "train_total": stats.get("seconds_total", t_train),
            "export": t_export,
            "heldout_encode": t_eval,
            "total": time.perf_counter() - t0,
        },
        "peak_rss_bytes": peak_rss_bytes(),
        "heldout_tokens": held_tokens,
        "heldout_bytes_per_token": (held_bytes / held_tokens) if held_tokens else None,
        "heldout_refused": held_refused,
        "written": {k: str(v) for k, v in written.items()},
    }
    print_train_summary(args, summary)
    if held_refused:
        print(f"{PROG}: note: compression not measured: this project's {vocab.mode} encoder "
              f"refuses the vocab: {held_refused}", file=sys.stderr)
    return 0


def _precompile_heldout_encoder(pre_tokenizer: str | None) -> None:
    """Compile the shaders the held-out encoder shares with every encoder of its split
    (:func:`torch_gpubpe.encoding.session.precompile`) on a daemon thread, while the GPU merges
    and the host mostly waits: a fresh process's encoder then opens its session without them on
    the critical path. A failure here is met again, and said, when the encoder opens."""
    from torch_gpubpe.encoding.session import precompile

    def run() -> None:
        try:
            precompile(pre_tokenizer or "bytes-classes")
        except Exception:  # noqa: BLE001, S110 - raised again by the encoder's own opening
            pass

    threading.Thread(target=run, name="torch_gpubpe precompile", daemon=True).start()


def _heldout_encoder(vocab: Vocab):
    """The GPU encoder of the held-out documents (DESIGN.md §4), its trie built."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    tok = Tokenizer(vocab)
    tok.trie  # noqa: B018 - built here (property)
    return tok


def _count_tokens(encoder, data: np.ndarray, offsets: np.ndarray) -> int:
    """Tokens of the packed documents ``data``, ``offsets`` with ``encoder``
    (:func:`_heldout_encoder`)."""
    return int(len(encoder.submit_packed(data, offsets).result().ids))
