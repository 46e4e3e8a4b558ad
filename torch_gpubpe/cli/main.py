"""``python -m torch_gpubpe train|encode|doctor`` (console script ``torch_gpubpe``).

``train``  reads documents (a Hugging Face dataset, local files, or — with no data arguments —
           the English + Turkish corpus shipped in the package), trains a byte-level BPE vocab
           on the GPU (DESIGN.md §3, :func:`torch_gpubpe.training.trainer.train`), prints a summary
           (corpus bytes, unique words, merges, time per stage, peak memory, compression on a
           held-out slice) and, with ``--out DIR``, writes ``vocab.json``, ``tokenizer.json``
           (+ ``tokenizer_config.json``) and ``tokenizer.tiktoken`` (:mod:`torch_gpubpe.core.export`).
``encode`` tokenizes documents with a trained vocab on the GPU (DESIGN.md §4,
           :class:`torch_gpubpe.encoding.tokenizer.Tokenizer`) into a flat array of token ids plus document
           offsets — the offline pre-tokenization step of many pretraining stacks.
``doctor`` reports the GPU adapters, the one used, its limits and an exact self-test
           (:mod:`torch_gpubpe.cli.doctor`), and what to install when there is no adapter.

Errors a user can act on (unknown dataset or column, empty corpus, bad vocab size, unwritable
output folder, no GPU adapter, ...) print one line ``torch_gpubpe: error: ...`` and exit with
status 2; ``--debug`` shows the traceback instead.

Examples::

    python -m torch_gpubpe train                                   # shipped corpus, 2,048 tokens
    python -m torch_gpubpe train --data-files ../shared/corpora/tr_manpages.jsonl.gz \\
        --vocab-size 4096 --out /tmp/v
    python -m torch_gpubpe train --dataset allenai/c4 --config en --max-bytes 1G \\
        --vocab-size 32768 --out c4-32k
    python -m torch_gpubpe encode --vocab /tmp/v --data-files docs.jsonl.gz --out /tmp/ids
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from torch_gpubpe.errors import GPUBPEError, InputError, NoAdapterError
from torch_gpubpe.core.vocab import MAX_VOCAB_SIZE, Vocab

# (the readers — pyarrow, ~0.3 s to import — are imported once the GPU has begun to open)

PROG = "torch_gpubpe"
DEFAULT_VOCAB_SIZE = 2048
DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>",)
DEFAULT_HOLDOUT_EVERY = 20
DEFAULT_HOLDOUT_MAX_BYTES = 4_000_000
DEFAULT_BATCH_BYTES = 16_000_000
DEFAULT_SHARD_TOKENS = 10**8
ENCODE_READ_NICE = 10
"""encode's default ``--read-nice``: its reader decompresses and parses ahead on up to 16 + 16
threads (files x parse pool; GBs of read-ahead) that release the GIL (inflate, JSON parse,
UTF-8 check): at niceness 0 they compete for the cores with the threads that feed the GPU. On
the H200 (16 cores, 3.2 GB of jsonl.gz) upload + submit took 2x its parquet time per byte and
the GPU session opened in 1.07 s instead of 0.28 s while they ran. Niced, they use what those
leave; the reader is ahead (it waits on a full queue, not for a core)."""
IDS_BIN, IDS_NPY, OFFSETS_NPY, META_JSON = "ids.bin", "ids.npy", "offsets.npy", "meta.json"

_SIZE_RE = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"500000"``, ``"500K"``, ``"1.5M"``, ``"2G"`` (powers of 1000) or ``"64MiB"`` (powers of
    1024) → bytes. Raises ``argparse.ArgumentTypeError`` on anything else."""
    m = _SIZE_RE.match(text)
    if not m or (m.group(3).lower() == "i"):
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (examples: 500000, 500K, 1.5M, 64MiB)")
    num, unit, binary = float(m.group(1).replace("_", "")), m.group(2).lower(), m.group(3)
    base = 1024 if binary.lower() == "ib" else 1000
    return int(num * base ** " kmgt".index(unit or " "))


def _positive_int(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


# -- argument parser -----------------------------------------------------------------------------
def _add_source_args(p: argparse.ArgumentParser, *, default_note: str) -> None:
    from torch_gpubpe.io.readers import FORMATS, SAMPLE_BY

    g = p.add_argument_group("input (" + default_note + ")")
    g.add_argument("--dataset", metavar="NAME",
                   help="Hugging Face dataset name (e.g. allenai/c4) or local dataset folder")
    g.add_argument("--config", metavar="NAME", help="dataset configuration (e.g. en)")
    g.add_argument("--split", default="train", help="split to read (default: train)")
    g.add_argument("--data-files", nargs="+", metavar="FILE",
                   help="local files or globs: .parquet, .arrow/.feather, .jsonl/.json (JSON "
                        "Lines), .csv/.tsv, .txt; JSON Lines and text optionally .gz/.zst/.bz2/"
                        ".xz/.lz4 compressed (several files decompressed at once)")
    g.add_argument("--format", dest="file_format", choices=FORMATS + ("jsonl",),
                   help="input format of every --data-files file (default: from each file "
                        "extension); binary: a file's bytes as they are, split like text, "
                        "without the check that refuses binary-looking .txt files")
    g.add_argument("--text-column", default="text", help="column with the text (default: text)")
    g.add_argument("--sample-by", choices=SAMPLE_BY, default="line",
                   help="for plain-text files: one document per line (default, line breaks kept), "
                        "per blank-line paragraph, or per file (document); the same names as "
                        "TokenizedDataset's sample_by")
    g.add_argument("--read-threads", type=_positive_int, metavar="N",
                   help="threads reading and decompressing files (default: CPU count, max 16)")
    g.add_argument("--read-nice", type=int, default=0, metavar="N", choices=range(20),
                   help="raise the reading threads' niceness by N (0-19; Linux): the threads "
                        "feeding the GPU get the cores first (default 0; encode: "
                        f"{ENCODE_READ_NICE}, its reader runs ahead on every core)")
    g.add_argument("--no-streaming", dest="streaming", action="store_false",
                   help="download/prepare the whole dataset first instead of streaming it")
    g.add_argument("--max-bytes", type=parse_size, metavar="SIZE",
                   help="read at most this many UTF-8 bytes (e.g. 500M, 2G, 64MiB); the last "
                        "document is cut at a character boundary")
    g.add_argument("--max-docs", type=_positive_int, metavar="N", help="read at most N documents")


def add_debug(p: argparse.ArgumentParser) -> None:
    """``--debug`` on a subcommand too (``torch_gpubpe train --debug``), as on the main parser."""
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks instead of one-line errors")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Byte-level BPE on the GPU (WebGPU): train a vocab, export it to Hugging Face "
                    "and tiktoken, tokenize corpora to token-id files.",
    )
    p.add_argument("--debug", action="store_true",
                   help="show tracebacks instead of one-line errors")
    from torch_gpubpe import __version__

    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{train,encode,doctor,count,merge-counts}")

    t = sub.add_parser(
        "train", help="train a vocab (DESIGN.md §3) and export it",
        description="Train a byte-level BPE vocab on the GPU. With no input arguments it trains on "
                    "the ~1.4 MB English + Turkish corpus shipped in the package (offline; at the "
                    f"default --vocab-size {DEFAULT_VOCAB_SIZE}, a few seconds on a GPU and under half a "
                    "minute on lavapipe, the CPU Vulkan device, with 2 cores).",
    )
    _add_source_args(t, default_note="default: the corpus shipped in the package")
    g = t.add_argument_group("training")
    g.add_argument("--vocab-size", type=_positive_int, default=DEFAULT_VOCAB_SIZE, metavar="N",
                   help=f"tokens in the vocab, including 256 byte tokens and the special tokens "
                        f"(default: {DEFAULT_VOCAB_SIZE}: small enough to train the shipped corpus "
                        f"in seconds even on lavapipe; use 32768+ for real models; max "
                        f"{MAX_VOCAB_SIZE})")
    g.add_argument("--min-frequency", type=_positive_int, default=2, metavar="N",
                   help="stop when the most frequent pair occurs fewer than N times (default: 2)")
    g.add_argument("--special-tokens", nargs="*", default=list(DEFAULT_SPECIAL_TOKENS),
                   metavar="TOKEN",
                   help="special tokens, ids after the last merge (default: <|endoftext|>; "
                        "give the option with no value for none)")
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
                        f"(default: {DEFAULT_HOLDOUT_EVERY}; 0: none)")
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

    e = sub.add_parser(
        "encode", help="tokenize documents to token files training code reads (DESIGN.md §4)",
        description="Tokenize documents on the GPU. --output-format bin (default) / npy: "
                    "DIR/ids.bin (or ids.npy) — all token ids back to back, uint16 when the vocab "
                    "has at most 65,536 tokens, else uint32 — and DIR/offsets.npy (int64, "
                    "documents + 1: document k is ids[offsets[k]:offsets[k+1]]), with "
                    "DIR/meta.json. llmc: llm.c / modded-nanogpt shards (256 x int32 header, "
                    "uint16 tokens, or uint32 for vocabs over 65,536; <|endoftext|> before each "
                    "document; the first shard is the validation split). megatron: Megatron-LM "
                    "indexed datasets (.bin + .idx, one sequence per document). An existing "
                    "output is kept unless --overwrite; a killed llmc/megatron run continues "
                    "after its last complete shard when run again with the same options.",
    )
    e.add_argument("--vocab", required=True, metavar="PATH",
                   help="vocab.json written by `train --out`, or its folder; or a tiktoken file "
                        "(*.tiktoken, e.g. gpt2.tiktoken) or a Hugging Face byte-level BPE "
                        "tokenizer.json (merge-order mode)")
    e.add_argument("--mode", choices=("greedy", "bpe"), default=None,
                   help="greedy longest match or bpe merge order (ids identical to tiktoken); "
                        "default: the vocab's (bpe for tiktoken / tokenizer.json files)")
    _add_source_args(e, default_note="default: the corpus shipped in the package")
    e.set_defaults(read_nice=ENCODE_READ_NICE)
    e.add_argument("--out", required=True, metavar="DIR", help="output folder")
    e.add_argument("--output-format", choices=("bin", "npy", "llmc", "megatron"), default="bin",
                   help="bin (default) / npy: flat ids + offsets.npy + meta.json; llmc: llm.c "
                        "shards; megatron: Megatron-LM .bin/.idx")
    e.add_argument("--shard-tokens", type=_positive_int, default=DEFAULT_SHARD_TOKENS,
                   metavar="N", help="tokens per llmc/megatron shard (default: 100,000,000; "
                                     "megatron shards end at a document end)")
    e.add_argument("--name", default="data", metavar="PREFIX",
                   help="llmc/megatron file name prefix (default: data → data_val_000000.bin, "
                        "data_train_000001.bin, ... / data_000000.bin + .idx)")
    e.add_argument("--overwrite", action="store_true",
                   help="replace an existing output in --out (default: refuse, or continue an "
                        "unfinished llmc/megatron run with the same options)")
    e.add_argument("--append-eos", action="store_true",
                   help="bin/npy/megatron: append <|endoftext|> (else the vocab's first special "
                        "token) after every document (llmc always puts it before each document)")
    e.add_argument("--batch-bytes", type=parse_size, default=DEFAULT_BATCH_BYTES, metavar="SIZE",
                   help="text per GPU batch (default: 16M)")
    e.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                   help="word split: bytes-classes (DESIGN.md §2), or a model's regex split "
                        "done exactly on the GPU: gpt2 (r50k/p50k), cl100k, qwen2, o200k (default: the "
                        "one the vocab file implies — a *.tiktoken file's JSON sidecar pattern, "
                        "a tokenizer.json's pre-tokenizer — else bytes-classes)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_debug(e)
    d = sub.add_parser(
        "doctor", help="show the GPU adapters, the one used, its limits, and what to install",
        description="Report what torch_gpubpe sees on this machine: wgpu's adapters, the one it "
                    "opens (subgroup size, limits), a small exact self-test on it, and the command "
                    "that installs a Vulkan device when there is none. Exit status 0 when usable.",
    )
    d.add_argument("--install", action="store_true",
                   help="first install Mesa's lavapipe (Vulkan on the CPU) with the system's "
                        "package manager when there is no Vulkan/Metal/D3D12 adapter (root or "
                        "sudo -n)")
    add_debug(d)
    from torch_gpubpe.cli.counts import add_parsers

    add_parsers(sub, _add_source_args, add_debug)
    return p


def cmd_doctor(args: argparse.Namespace) -> int:
    from torch_gpubpe.cli.doctor import run

    return run(install_missing=args.install)


# -- shared helpers ------------------------------------------------------------------------------
def source_from_args(args: argparse.Namespace) -> TextSource:
    """The :class:`TextSource` named by the input options; the shipped corpus when none is."""
    from torch_gpubpe.io.readers import TextSource
    from torch_gpubpe.io.sources import shipped_corpus

    if args.dataset and args.data_files:
        raise InputError("give --dataset or --data-files, not both")
    if not args.dataset and not args.data_files:
        return shipped_corpus()
    return TextSource(
        dataset=args.dataset, data_files=tuple(args.data_files or ()), config=args.config,
        split=args.split, text_column=args.text_column, streaming=args.streaming,
        file_format=args.file_format, sample_by=args.sample_by,
        threads=getattr(args, "read_threads", None), nice=getattr(args, "read_nice", 0),
    )


def prepare_out_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """Create ``path`` and check that a file can be written in it, before any long work.

    Raises:
        InputError: it cannot be created or is not writable (names the option and the reason).
    """
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as e:
        raise InputError(
            f"{option} {str(path)!r}: cannot write there ({e.strerror or e}); choose another folder"
        ) from e
    return out


class _NoBar:
    """What ``--no-progress`` shows (tqdm's interface, without importing it: ~0.1 s)."""

    n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, k=1) -> None:
        self.n += k

    def set_postfix_str(self, *a, **kw) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(args, **kw):
    if args.no_progress:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(disable=True if args.no_progress else None, file=sys.stderr, dynamic_ncols=True,
                **kw)


def _peak_rss_bytes() -> int:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def _adapter_name() -> str:
    try:
        from torch_gpubpe.gpu.device import get_gpu

        return get_gpu().adapter_name
    except Exception:  # noqa: BLE001 - only for the summary
        return "?"


def _vocab_path(path: str) -> Path:
    p = Path(path)
    return p / "vocab.json" if p.is_dir() else p


def load_vocab_arg(path: str) -> Vocab:
    """``--vocab``: a vocab.json file or a folder holding one; InputError if neither."""
    p = _vocab_path(path)
    if not p.is_file():
        raise InputError(
            f"--vocab {path!r}: no such vocab file (expected vocab.json or its folder, a "
            "*.tiktoken file or a tokenizer.json)")
    return Vocab.load(p)


def implied_pre_tokenizer(path: str) -> str:
    """The word split a ``--vocab`` file implies: a ``*.tiktoken`` file's sidecar pattern
    (``path.json``), a ``tokenizer.json``'s pre-tokenizer, else DESIGN.md §2's bytes-classes.

    Raises:
        InputError: the file implies a split the GPU cannot do exactly (names it).
    """
    p = _vocab_path(path)
    if p.suffix == ".tiktoken":
        from torch_gpubpe.core.vocab_files import tiktoken_metadata

        return tiktoken_metadata(p).get("pattern") or "bytes-classes"
    if p.name.endswith(".json") and p.name != "vocab.json":
        from torch_gpubpe.core.patterns import from_hf_pre_tokenizer

        with open(p, encoding="utf-8") as f:
            pre = json.load(f).get("pre_tokenizer")
        return from_hf_pre_tokenizer(pre) if pre else "bytes-classes"
    return "bytes-classes"


# -- train ---------------------------------------------------------------------------------------
class CorpusReader:
    """The training documents of ``source`` as packed batches (:meth:`packed_batches`, what
    the trainer's word counters take: no Python object per document), read on another thread
    with a progress bar (bytes), every ``holdout_every``-th document diverted to a held-out slice
    (until ``holdout_max_bytes``).

    Read it once (the trainer does, DESIGN.md §3); afterwards ``train_bytes``, ``train_docs``,
    ``heldout`` (list of bytes) and ``heldout_bytes`` describe what was read and ``seconds`` is
    the wall time spent reading (reading + the trainer's word counting).
    """

    def __init__(self, args: argparse.Namespace, source: TextSource) -> None:
        self.args, self.source = args, source
        self.train_bytes = self.train_docs = self.heldout_bytes = 0
        self.heldout: list[bytes] = []
        self.seconds = 0.0
        self.read_stats: dict = {}

    def packed_batches(self, batch_bytes: int):
        import numpy as np

        from torch_gpubpe.io.readers import documents, prefetch

        a = self.args
        every, cap = a.holdout_every, a.holdout_max_bytes
        stream = documents(self.source.reader(), max_docs=a.max_docs, max_bytes=a.max_bytes,
                           stats=self.read_stats, batch_bytes=batch_bytes)
        t0 = time.perf_counter()
        with _progress(a, desc="read + count words", unit="B", unit_scale=True,
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
                        for j in held.tolist():
                            self.heldout.append(data[offsets[j] : offsets[j + 1]].tobytes())
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
                self.train_docs += len(offsets) - 1
                self.train_bytes += int(offsets[-1])
                yield data, offsets
        self.seconds = time.perf_counter() - t0

    def __iter__(self):
        """Documents one by one as bytes (for callers without the packed path)."""
        for data, offsets in self.packed_batches(DEFAULT_BATCH_BYTES):
            raw, o = data.tobytes(), offsets.tolist()
            yield from (raw[o[j] : o[j + 1]] for j in range(len(o) - 1))


def cmd_train(args: argparse.Namespace) -> int:
    specials = tuple(args.special_tokens or ())
    if len(set(specials)) != len(specials) or any(not s for s in specials):
        raise InputError(
            f"--special-tokens must be distinct non-empty strings, got {list(specials)}")
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
        from torch_gpubpe.cli.counts import cmd_train_counts

        return cmd_train_counts(args, out)
    source = source_from_args(args)
    from torch_gpubpe.training.trainer import train  # the GPU trainer (DESIGN.md §3)

    t0 = time.perf_counter()
    reader = CorpusReader(args, source)
    stats: dict = {}
    bar = None

    def on_progress(p) -> None:
        nonlocal bar
        if bar is None:  # created at the first report, once the reading bar is closed
            bar = _progress(args, desc="merge", unit="merge", total=p.total_merges)
        bar.update(p.merges_done - bar.n)
        bar.set_postfix_str(f"last count {p.last_count:,}", refresh=False)

    on_progress.show_bars = not args.no_progress  # the trainer's own bars (spilled counts)
    try:
        with warnings.catch_warnings():  # said below as a note line, not as a Python warning
            warnings.filterwarnings("ignore", message="training stopped after")
            vocab = train(reader, args.vocab_size, min_frequency=args.min_frequency,
                          special_tokens=specials, progress=on_progress, stats=stats,
                          count_on=args.count_on, max_memory=args.max_memory,
                          prune_below=args.prune_below)
    except InputError as e:
        if reader.train_bytes or not str(e).startswith("empty corpus"):
            raise
        vocab = None  # the empty corpus, said with the source's name below
    finally:
        if bar is not None:
            bar.close()
    t_train = time.perf_counter() - t0
    if stats.get("stopped_early"):
        print(f"{PROG}: note: {stats['stopped_early']}", file=sys.stderr)
    if reader.train_bytes == 0:
        raise InputError(
            f"empty corpus: {source.describe()} gave no text to train on ({reader.train_docs} "
            f"documents, 0 bytes); check --text-column, --split, --max-docs/--max-bytes and "
            f"the files"
        )
    if not isinstance(vocab, Vocab):  # tolerate a trainer that returns merges
        vocab = Vocab.from_merges(vocab, specials)
    if getattr(args, "mode", "greedy") != vocab.mode:
        vocab = vocab.with_mode(args.mode)
    held, held_bytes = reader.heldout, reader.heldout_bytes

    written: dict[str, Path] = {}
    t2 = time.perf_counter()
    if out is not None:
        from torch_gpubpe.core.export import export_all

        written = export_all(vocab, out)
    t_export = time.perf_counter() - t2

    t3 = time.perf_counter()
    held_tokens = _count_tokens(vocab, held) if held else 0
    t_eval = time.perf_counter() - t3

    summary = {
        "command": "train",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "argv": sys.argv[1:],
        "source": source.describe(),
        "adapter": stats.get("adapter") or _adapter_name(),
        "corpus_bytes": int(stats.get("corpus_bytes") or reader.train_bytes),
        "num_documents": int(stats.get("num_documents") or reader.train_docs),
        "heldout_bytes": held_bytes,
        "heldout_documents": len(held),
        **vocab_summary(args, vocab, specials, stats),
        "seconds": {
            "read_and_count": stats.get("seconds_count", reader.seconds),
            "merge": stats.get("seconds_merge"),
            "train_total": stats.get("seconds_total", t_train),
            "export": t_export,
            "heldout_encode": t_eval,
            "total": time.perf_counter() - t0,
        },
        "peak_rss_bytes": _peak_rss_bytes(),
        "heldout_tokens": held_tokens,
        "heldout_bytes_per_token": (held_bytes / held_tokens) if held_tokens else None,
        "written": {k: str(v) for k, v in written.items()},
    }
    print_train_summary(args, summary)
    return 0


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
    }


def print_train_summary(args: argparse.Namespace, summary: dict) -> None:
    """Print :func:`format_train_summary` of ``summary``; also write it as JSON (UTF-8, indent 2)
    to ``args.summary_json`` when given."""
    print(format_train_summary(summary))
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def _count_tokens(vocab: Vocab, texts: list[str]) -> int:
    """Tokens of ``texts`` with the GPU encoder (DESIGN.md §4)."""
    from torch_gpubpe.encoding.tokenizer import Tokenizer

    enc = Tokenizer(vocab).encode_batch(texts)
    return int(len(enc.ids))


def _docs(n: int) -> str:
    return f"{n:,} document" + ("" if n == 1 else "s")


def format_train_summary(s: dict) -> str:
    """The human-readable end-of-training table (one ``name  value`` line per item)."""
    sec, min_frequency = s["seconds"], s.get("min_frequency", 2)

    def t(x):
        return "-" if x is None else f"{x:.2f} s"

    stopped = ""
    if s["num_merges"] < s["requested_merges"]:
        stopped = f" (stopped early: no pair occurs {min_frequency}+ times)"
    held = (
        f"{s['heldout_bytes_per_token']:.3f} bytes/token on the held-out slice "
        f"({s['heldout_bytes']:,} bytes in {_docs(s['heldout_documents'])} → "
        f"{s['heldout_tokens']:,} tokens)"
        if s["heldout_tokens"] else "n/a (no held-out documents; see --holdout-every)"
    )
    rows = [
        ("source", s["source"]),
        ("adapter", s["adapter"]),
        ("corpus", f"{s['corpus_bytes']:,} bytes ({_fmt_bytes(s['corpus_bytes'])}) in "
                   f"{_docs(s['num_documents'])}"),
        ("unique words", "-" if s["unique_words"] is None else f"{s['unique_words']:,}"),
        ("merges", f"{s['num_merges']:,} of {s['requested_merges']:,}{stopped}"),
        ("vocab size", f"{s['vocab_size']:,} (256 bytes + {s['num_merges']:,} merges + "
                       f"{len(s['special_tokens'])} special: "
                       f"{' '.join(s['special_tokens']) or '-'})"),
        ("time", f"read + count words {t(sec['read_and_count'])} | merge {t(sec['merge'])} | "
                 f"train total {t(sec['train_total'])} | export {t(sec['export'])} | "
                 f"held-out encode {t(sec['heldout_encode'])} | all {t(sec['total'])}"),
        ("peak memory", f"{_fmt_bytes(s['peak_rss_bytes'])} (host RSS)"),
        ("compression", held),
        ("written", ", ".join(s["written"].values()) or "nothing (pass --out DIR to save)"),
        ("date", s["date"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{PROG} train: summary"] + [f"  {k:<{width}}  {v}" for k, v in rows])


# -- encode --------------------------------------------------------------------------------------
def _npy_header(dtype, n: int, size: int = 128) -> bytes:
    """A .npy v1.0 header of exactly ``size`` bytes (:func:`torch_gpubpe.io.shards.npy_header`)."""
    from torch_gpubpe.io.shards import npy_header

    return npy_header(dtype, n, size)


def _eot_id(vocab: Vocab, option: str, path: str) -> int:
    if not vocab.special_tokens:
        raise InputError(f"{option}: the vocab {path!r} has no special tokens")
    specials = vocab.special_tokens
    return vocab.token_to_id("<|endoftext|>" if "<|endoftext|>" in specials else specials[0])


def _fingerprint(args: argparse.Namespace, source: TextSource, vocab: Vocab) -> dict:
    """What decides the bytes of an encode output: a run is resumed only with the same."""
    vp = _vocab_path(args.vocab).resolve()
    files = []
    for f in source.data_files:
        try:
            st = os.stat(f)
            files.append([os.path.abspath(f), st.st_size, int(st.st_mtime)])
        except OSError:
            files.append([f, None, None])
    return {"vocab": str(vp), "vocab_bytes": vp.stat().st_size, "vocab_size": len(vocab),
            "source": source.describe() if not files else None, "files": files,
            "text_column": source.text_column, "sample_by": source.sample_by,
            "file_format": source.file_format, "split": source.split,
            "max_docs": args.max_docs, "max_bytes": args.max_bytes,
            "output_format": args.output_format, "shard_tokens": args.shard_tokens,
            "name": args.name, "append_eos": bool(args.append_eos),
            "pre_tokenizer": getattr(args, "pre_tokenizer", None),
            "mode": getattr(args, "mode", None) or vocab.mode}


def _skip_documents(stream, n: int):
    """The packed stream without its first ``n`` documents (a resumed run: they are read, not
    encoded)."""
    for p in stream:
        if n >= len(p):
            n -= len(p)
            continue
        if n:
            a = int(p.offsets[n])
            p.data, p.offsets = p.data[a:], p.offsets[n:] - a
            p.indices, p.first, n = p.indices[n:], p.first + n, 0
        yield p


def cmd_encode(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    # The device (≈0.6 s on the H200) has been opening since main() began (_open_gpu_early),
    # while Python imported the readers; the session (pipelines, trie) opens on this thread
    # once the vocab is loaded, while the first batch is read.
    device = getattr(args, "_gpu_future", None)
    opener = ThreadPoolExecutor(1, thread_name_prefix="torch_gpubpe open")
    if device is None:
        from torch_gpubpe.gpu.device import get_gpu

        device = opener.submit(get_gpu)
    try:
        return _encode(args, opener, device)
    finally:
        opener.shutdown(wait=True)


def _encode(args: argparse.Namespace, opener, device) -> int:
    from torch_gpubpe.encoding.stream import read_ahead

    t_epoch = time.time()
    t0 = time.perf_counter()
    # Where the time goes (seconds; meta.json "seconds", printed with --debug). Before the
    # loop: loading the vocab, opening the output, building the encoder — while the reader
    # threads read the first batch and the GPU opens. In the loop, the main thread: waiting for
    # the reader threads, uploading + submitting, waiting for the GPU + reading the ids back,
    # waiting for the writer thread; the writer thread's own busy time; after it, closing the
    # output (the last shard written and flushed to disk, meta.json).
    stages = dict.fromkeys(("vocab_load", "output_open", "encoder_init", "wait_reader",
                            "upload_and_submit", "wait_gpu_and_readback", "wait_writer",
                            "writer_busy"), 0.0)
    source = source_from_args(args)
    read_stats: dict = {}
    # Reading starts now, on other threads (pipeline.read_ahead: the pipeline TokenizeFiles runs
    # too): the first batch is read while the vocab loads and the GPU opens.
    reader = source.reader()
    pump = read_ahead(reader, batch_bytes=args.batch_bytes, stats=read_stats,
                      max_docs=args.max_docs, max_bytes=args.max_bytes)
    batches = iter(pump)
    try:
        return _encode_run(args, opener, device, source, batches, read_stats, stages,
                           t0, t_epoch)
    finally:
        batches.close()
        pump.close()


def _encode_run(args, opener, device, source, batches, read_stats, stages, t0,
                t_epoch) -> int:
    from torch_gpubpe.io.shards import ShardWriter

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        stages[name] += now - since
        return now

    t = time.perf_counter()
    vocab = load_vocab_arg(args.vocab)
    t = lap("vocab_load", t)
    out = prepare_out_dir(args.out)
    fmt = {"bin": "flat", "npy": "flat"}.get(args.output_format, args.output_format)
    eos = None
    if args.output_format == "llmc" or args.append_eos:
        eos = _eot_id(vocab, "--output-format llmc" if args.output_format == "llmc"
                      else "--append-eos", args.vocab)
    writer = ShardWriter(out, fmt, len(vocab), name=args.name, eot_id=eos,
                         shard_tokens=args.shard_tokens,
                         fingerprint=_fingerprint(args, source, vocab),
                         overwrite=args.overwrite, flat_npy=args.output_format == "npy")
    t = lap("output_open", t)
    from torch_gpubpe.encoding.tokenizer import Tokenizer  # the GPU encoder (DESIGN.md §4)

    tok = Tokenizer(vocab, pre_tokenizer=args.pre_tokenizer or implied_pre_tokenizer(args.vocab),
                    mode=args.mode)
    # The session (pipelines, trie upload) on the device opening since main() began, in the
    # background; both are waited for before the first submit.
    def open_session() -> None:  # on the opener thread; its parts go to --debug's seconds
        t = time.perf_counter()
        stages.update({f"device_{k}": v for k, v in device.result().open_seconds.items()})
        t1 = time.perf_counter()
        tok.trie  # noqa: B018 (built on first use: the flat trie of the vocab)
        t2 = time.perf_counter()
        tok.open()
        stages.update(open_wait_device=t1 - t, open_trie=t2 - t1,
                      open_session=time.perf_counter() - t2)

    opening = opener.submit(open_session)
    lap("encoder_init", t)
    specials = {} if eos is None else (
        {"bos_id": eos} if args.output_format == "llmc" else {"eos_id": eos})
    n_docs = n_bytes = n_tokens = 0
    if writer.resume_documents:
        print(f"{PROG} encode: continuing an unfinished run in {out} after "
              f"{len(writer.shards)} complete shard(s) ({writer.resume_documents:,} documents)",
              file=sys.stderr)
        batches = _skip_documents(batches, writer.resume_documents)
    with _progress(args, desc="encode", unit="B", unit_scale=True, unit_divisor=1000) as bar:

        from concurrent.futures import ThreadPoolExecutor

        write_pool = ThreadPoolExecutor(1, thread_name_prefix="torch_gpubpe write")
        writing = None  # the batch being written while the GPU encodes the next one

        def timed_add(ids, offsets) -> None:
            t = time.perf_counter()
            writer.add(ids, offsets, eot_included=eos is not None)
            stages["writer_busy"] += time.perf_counter() - t

        def drain(enc, nb: int) -> None:
            nonlocal n_tokens, n_docs, n_bytes, writing
            t1 = time.perf_counter()
            if writing is not None:
                writing.result()  # in order, at most one batch waiting to be written
            stages["wait_writer"] += time.perf_counter() - t1
            writing = write_pool.submit(timed_add, enc.ids, enc.offsets)  # EOT in: see below
            n_tokens += len(enc.ids) - (len(enc.offsets) - 1 if eos is not None else 0)
            n_docs += len(enc.offsets) - 1
            n_bytes += nb
            bar.update(nb)
            dt = time.perf_counter() - t0
            if dt > 0:
                bar.set_postfix_str(f"{n_tokens / dt:,.0f} tokens/s", refresh=False)

        try:
            from torch_gpubpe.encoding.stream import encode_in_flight

            # Reading, decompressing and packing run on other threads (pipeline.read_ahead);
            # the GPU encodes batch i (two in flight, Tokenizer's double buffering) while batch
            # i - 1 is written. The GPU puts the end-of-text token in while reading the ids
            # back: before every document for llm.c, after it for the others (--append-eos).
            for p, enc in encode_in_flight(tok, batches, stages, specials=specials, t0=t0,
                                           before_first=opening.result):
                drain(enc, p.nbytes)
            if writing is not None:
                writing.result()
        finally:
            write_pool.shutdown(wait=True)
            t = time.perf_counter()
            writer.wait_flushed()  # also when stopped early: complete shards stay resumable
            stages["wait_fsync"] = time.perf_counter() - t
    if n_docs == 0 and not writer.resume_documents:
        raise InputError(f"empty corpus: {source.describe()} gave no documents to encode")
    t_close = time.perf_counter()
    meta_seconds: dict = {}  # filled in below, before meta.json is written (by close)
    meta = writer.close({
        "num_documents": writer.resume_documents + n_docs,
        # this run's bytes: after a resume, those of the documents it encoded
        "text_bytes": n_bytes,
        "resumed_after_documents": writer.resume_documents,
        "vocab_file": str(_vocab_path(args.vocab).resolve()),
        "vocab_size": len(vocab),
        "pre_tokenizer": tok.pre_tokenizer,
        "source": source.describe(),
        # Rows whose text is None (missing) are not documents: document k is not row k then.
        "skipped_none_rows": read_stats.get("skipped_none", 0),
        "skipped_none_row_indices": read_stats.get("skipped_none_rows", []),
        "seconds": meta_seconds,
        # what the disk caches did in this process (README "Something off?"): the vocab's
        # trie and merge-order tables loaded from ~/.cache/torch_gpubpe or built here
        "caches": _cache_report(),
    }, before_meta=lambda: meta_seconds.update(_encode_seconds(
        stages, writer, t0, t_close, tok.host_seconds, tok.open_seconds)))
    seconds = meta_seconds["total"]
    rate = n_bytes / seconds / 1e6 if seconds > 0 else float("inf")
    bpt = f"{n_bytes / n_tokens:.3f}" if n_tokens else "-"
    files = meta.get("shards") or meta.get("prefixes") or [meta.get("ids_file"), "offsets.npy"]
    shown = ", ".join(map(str, files[:3])) + (f" ... ({len(files)} in all)" if len(files) > 3
                                              else "")
    print(
        f"{PROG} encode: {_docs(n_docs)}, {n_bytes:,} bytes → {n_tokens:,} tokens "
        f"({bpt} bytes/token) in {seconds:.2f} s ({rate:.2f} MB/s, "
        f"{n_tokens / max(seconds, 1e-9):,.0f} tokens/s) on {_adapter_name()}\n"
        f"  wrote {args.output_format} output in {out}: {shown}, {META_JSON}"
        + (f"\n  resumed an unfinished run after its first {writer.resume_documents:,} "
           f"documents ({writer.resume_tokens:,} tokens); the figures above are this run's"
           if writer.resume_documents else "")
    )
    if getattr(args, "debug", False):
        since = _seconds_since_process_start()
        print("  seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in meta["seconds"].items())
              + f"; process start → main() {_fmt_s(getattr(args, '_main_since_start', None))}"
              f", → done {_fmt_s(since)}; started at epoch {t_epoch:.3f}, done at "
              f"{time.time():.3f}; caches: "
              + ", ".join(f"{k} {v}" for k, v in meta.get("caches", {}).items()))
    if read_stats.get("skipped_none"):
        rows = read_stats["skipped_none_rows"]
        print(f"  skipped {read_stats['skipped_none']:,} rows whose text is None (missing), "
              f"rows {', '.join(map(str, rows[:10]))}{' …' if len(rows) > 10 else ''}: "
              "document k of the output is not row k (see meta.json)")
    return 0


def _cache_report() -> dict:
    """``{"trie": ..., "bpe_tables": ...}``: for each disk cache, ``"loaded"``, ``"built"``
    (``"built and saved"``), ``"not used"`` (a vocab below the size cached, or the cache off)
    or ``"error: ..."`` (built; the first error met), from its stats in this process."""
    from torch_gpubpe.core import bpe_tables as bpe
    from torch_gpubpe.core import trie

    out = {}
    for name, st in (("trie", trie.trie_cache_stats), ("bpe_tables", bpe.table_cache_stats)):
        if st["errors"]:
            out[name] = f"error: {st['errors'][0]}"
        elif st["loaded"]:
            out[name] = "loaded"
        elif st["built"]:
            out[name] = "built and saved" if st["saved"] else "built"
        else:
            out[name] = "not used"
    return out


def _encode_seconds(stages: dict, writer, t0: float, t_close: float,
                    encoder_seconds: dict, open_seconds: dict | None = None) -> dict:
    """meta.json's ``seconds``: ``total`` (the command from reading's start to meta.json),
    the stages, ``close`` (the last shard written and on disk), the writer's own times and the
    encoder's host steps (``encoder_*``: Tokenizer.host_seconds, the parts of
    upload_and_submit and wait_gpu_and_readback) and the GPU session's opening (``gpu_open_*``:
    Tokenizer.open_seconds, the parts of wait_gpu_open and of the time before it)."""
    now = time.perf_counter()
    return {"total": round(now - t0, 4), **{k: round(v, 4) for k, v in stages.items()},
            "close": round(now - t_close, 4),
            **{f"writer_{k}": round(v, 4) for k, v in writer.seconds.items()},
            **{f"encoder_{k}": round(v, 4) for k, v in encoder_seconds.items()},
            **{f"gpu_open_{k}": round(v, 4) for k, v in (open_seconds or {}).items()}}


def _fmt_s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} s"


def _seconds_since_process_start() -> float | None:
    """Seconds since this process started (Linux: ``/proc/self/stat`` field 22, in clock
    ticks of boot time, 10 ms resolution), else None."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22; fields[0] is field 3
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError, AttributeError):
        return None


# -- entry point ---------------------------------------------------------------------------------
def _open_gpu_early(argv: Sequence[str]):
    """For ``encode`` and ``train``: start opening the process's GPU (:func:`get_gpu`, ≈0.6 s
    on the H200, mostly in the driver, without the GIL) on a daemon thread before the parser
    imports the readers (pyarrow); a ``Future`` of it, or None for other commands. A failure
    (no adapter) is raised where the device is first needed, as without this."""
    import threading
    from concurrent.futures import Future

    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in ("encode", "train") or {"-h", "--help"} & set(argv):
        return None
    fut: Future = Future()

    def run() -> None:
        try:
            from torch_gpubpe.gpu.device import get_gpu

            fut.set_result(get_gpu())
        except BaseException as e:  # noqa: BLE001 - raised by fut.result() where it is needed
            fut.set_exception(e)

    threading.Thread(target=run, name="torch_gpubpe open early", daemon=True).start()
    return fut


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 usage or input error, 130
    interrupted)."""
    since_start = _seconds_since_process_start()
    argv = list(sys.argv[1:] if argv is None else argv)
    gpu_future = _open_gpu_early(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    args._gpu_future, args._main_since_start = gpu_future, since_start
    from torch_gpubpe.cli.counts import HANDLERS

    handler = {"train": cmd_train, "encode": cmd_encode, "doctor": cmd_doctor,
               **HANDLERS}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (GPUBPEError, OSError, ValueError) as e:
        if args.debug:
            raise
        if isinstance(e, NoAdapterError):  # a few lines: what is missing, what to run
            msg = str(e).strip()
        else:
            msg = " ".join(str(e).split()) or type(e).__name__
        if not isinstance(e, GPUBPEError):
            msg = f"{type(e).__name__}: {msg}"
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2


def run() -> None:
    """The console entry point (``python -m torch_gpubpe``, the ``torch_gpubpe`` script):
    :func:`main`, then, with everything written, flushed and closed, ``os._exit``: the
    interpreter's teardown (wgpu's device, pyarrow's and numpy's GBs of buffers, the threads)
    would add ~0.3-0.5 s after the work is done. ``TORCH_GPUBPE_NO_FAST_EXIT=1``: a normal
    exit (for tools that run at interpreter exit, e.g. coverage)."""
    status = main()
    if os.environ.get("TORCH_GPUBPE_NO_FAST_EXIT"):
        sys.exit(status)
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(status)


if __name__ == "__main__":  # pragma: no cover
    run()
