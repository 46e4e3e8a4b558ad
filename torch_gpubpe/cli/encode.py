"""``python -m torch_gpubpe encode``: tokenize documents with a trained vocab on the GPU
(DESIGN.md §4, :class:`torch_gpubpe.encoding.tokenizer.Tokenizer`) into token files training
code reads (:mod:`torch_gpubpe.io.shards`: flat ids + offsets, llm.c or Megatron-LM shards),
through the pipeline of :mod:`torch_gpubpe.encoding.stream`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from torch_gpubpe.cli.common import (DEFAULT_BATCH_BYTES, PROG, adapter_name, add_debug,
                                     add_source_args, docs, implied_pre_tokenizer,
                                     load_vocab_arg, parse_size, positive_int, prepare_out_dir,
                                     progress, seconds_since_process_start, source_from_args,
                                     vocab_path)
from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.stream import ENCODE_READ_NICE
from torch_gpubpe.errors import InputError

if TYPE_CHECKING:  # at run time imported where used: pyarrow takes ~0.3 s to import
    from torch_gpubpe.io.readers import TextSource

DEFAULT_SHARD_TOKENS = 10**8
IDS_BIN, IDS_NPY, OFFSETS_NPY, META_JSON = "ids.bin", "ids.npy", "offsets.npy", "meta.json"


def add_parser(sub) -> None:
    """Add the ``encode`` subcommand to ``sub`` (argparse subparsers)."""
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
    add_source_args(e, default_note="default: the corpus shipped in the package")
    e.set_defaults(read_nice=ENCODE_READ_NICE)
    e.add_argument("--out", required=True, metavar="DIR", help="output folder")
    e.add_argument("--output-format", choices=("bin", "npy", "llmc", "megatron"), default="bin",
                   help="bin (default) / npy: flat ids + offsets.npy + meta.json; llmc: llm.c "
                        "shards; megatron: Megatron-LM .bin/.idx")
    e.add_argument("--shard-tokens", type=positive_int, default=DEFAULT_SHARD_TOKENS,
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


def _eot_id(vocab: Vocab, option: str, path: str) -> int:
    if not vocab.special_tokens:
        raise InputError(f"{option}: the vocab {path!r} has no special tokens")
    specials = vocab.special_tokens
    return vocab.token_to_id("<|endoftext|>" if "<|endoftext|>" in specials else specials[0])


def _fingerprint(args: argparse.Namespace, source: TextSource, vocab: Vocab) -> dict:
    """What decides the bytes of an encode output: a run is resumed only with the same."""
    vp = vocab_path(args.vocab).resolve()
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

    # The device (most of a second on a real GPU) has been opening since main() began
    # (cli.main's early open), while Python imported the readers; the session (pipelines, trie) opens on this thread
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
    # Reading starts now, on other threads (stream.read_ahead: the pipeline TokenizeFiles runs
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
    with progress(args, desc="encode", unit="B", unit_scale=True, unit_divisor=1000) as bar:

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
            # Reading, decompressing and packing run on other threads (stream.read_ahead);
            # the GPU encodes batch i (two in flight, Tokenizer.stream) while batch i - 2 is
            # written. The GPU puts the end-of-text token in while reading the ids back:
            # before every document for llm.c, after it for the others (--append-eos).
            for p, enc in tok.stream(batches, stages=stages, t0=t0,
                                     before_first=opening.result, **specials):
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
        "vocab_file": str(vocab_path(args.vocab).resolve()),
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
        f"{PROG} encode: {docs(n_docs)}, {n_bytes:,} bytes → {n_tokens:,} tokens "
        f"({bpt} bytes/token) in {seconds:.2f} s ({rate:.2f} MB/s, "
        f"{n_tokens / max(seconds, 1e-9):,.0f} tokens/s) on {adapter_name()}\n"
        f"  wrote {args.output_format} output in {out}: {shown}, {META_JSON}"
        + (f"\n  resumed an unfinished run after its first {writer.resume_documents:,} "
           f"documents ({writer.resume_tokens:,} tokens); the figures above are this run's"
           if writer.resume_documents else "")
        + (f"\n  note: only the validation shard was written (llm.c's first shard; the "
           f"{n_tokens:,} tokens are fewer than --shard-tokens {args.shard_tokens:,}): pass a "
           "smaller --shard-tokens to size the validation split and get training shards"
           if args.output_format == "llmc" and len(meta.get("shards") or ()) == 1 else "")
    )
    if getattr(args, "debug", False):
        since = seconds_since_process_start()
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

