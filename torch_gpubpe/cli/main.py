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

This module holds the parser and the entry point; each command is a module of its own
(:mod:`~torch_gpubpe.cli.train`, :mod:`~torch_gpubpe.cli.encode`, :mod:`~torch_gpubpe.cli.doctor`,
:mod:`~torch_gpubpe.cli.counts`; what they share is :mod:`~torch_gpubpe.cli.common`), and its
names stay importable from here.

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
import os
import sys
import warnings
from collections.abc import Sequence

from torch_gpubpe import __version__
from torch_gpubpe.cli import counts, doctor, encode, train
from torch_gpubpe.cli.common import (DEFAULT_BATCH_BYTES, PROG, add_debug, cli_names, error_text,
                                     implied_pre_tokenizer, load_vocab_arg, parse_size,
                                     prepare_out_dir, seconds_since_process_start,
                                     source_from_args)
from torch_gpubpe.cli.doctor import cmd_doctor
from torch_gpubpe.cli.encode import (DEFAULT_SHARD_TOKENS, IDS_BIN, IDS_NPY, META_JSON,
                                     OFFSETS_NPY, cmd_encode)
from torch_gpubpe.cli.summary import format_train_summary, print_train_summary, vocab_summary
from torch_gpubpe.cli.train import (DEFAULT_HOLDOUT_EVERY, DEFAULT_HOLDOUT_MAX_BYTES,
                                    DEFAULT_SPECIAL_TOKENS, DEFAULT_VOCAB_SIZE, CorpusReader,
                                    cmd_train)
from torch_gpubpe.encoding.stream import ENCODE_READ_NICE
from torch_gpubpe.errors import GPUBPEError
from torch_gpubpe.notices import GPUBPEWarning

# (the readers — pyarrow, ~0.3 s to import — are imported once the GPU has begun to open)

__all__ = [  # this module's names, and those it has always offered from the command modules
    "DEFAULT_BATCH_BYTES", "DEFAULT_HOLDOUT_EVERY", "DEFAULT_HOLDOUT_MAX_BYTES",
    "DEFAULT_SHARD_TOKENS", "DEFAULT_SPECIAL_TOKENS", "DEFAULT_VOCAB_SIZE", "ENCODE_READ_NICE",
    "IDS_BIN", "IDS_NPY", "META_JSON", "OFFSETS_NPY", "PROG", "CorpusReader", "add_debug",
    "build_parser", "cmd_doctor", "cmd_encode", "cmd_train", "format_train_summary",
    "implied_pre_tokenizer", "load_vocab_arg", "main", "parse_size", "prepare_out_dir",
    "print_train_summary", "run", "source_from_args", "vocab_summary",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Byte-level BPE on the GPU (WebGPU): train a vocab, export it to Hugging Face "
                    "and tiktoken, tokenize corpora to token-id files.",
    )
    p.add_argument("--debug", action="store_true",
                   help="show tracebacks instead of one-line errors")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{train,encode,doctor,count,merge-counts}")
    train.add_parser(sub)
    encode.add_parser(sub)
    doctor.add_parser(sub)
    counts.add_parsers(sub)
    return p


# -- entry point ---------------------------------------------------------------------------------
def _open_gpu_early(argv: Sequence[str]):
    """For ``encode`` and ``train``: start opening the process's GPU (:func:`get_gpu`, most of
    a second on a real GPU, mostly in the driver, without the GIL) on a daemon thread before
    the parser imports the readers (pyarrow); a ``Future`` of it, or None for other commands.
    A failure (no adapter) is raised where the device is first needed, as without this."""
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
    since_start = seconds_since_process_start()
    argv = list(sys.argv[1:] if argv is None else argv)
    gpu_future = _open_gpu_early(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    args._gpu_future, args._main_since_start = gpu_future, since_start
    handler = {"train": cmd_train, "encode": cmd_encode, "doctor": cmd_doctor,
               **counts.HANDLERS}[args.command]
    try:
        with warnings.catch_warnings():   # (restores the warnings' printer afterwards)
            warnings.showwarning = _with_cli_names(warnings.showwarning)
            return handler(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (GPUBPEError, OSError, ValueError) as e:
        if args.debug:
            raise
        print(f"{PROG}: error: {error_text(e)}", file=sys.stderr)
        return 2


def _with_cli_names(show):
    """``warnings.showwarning`` that prints the package's notices with the command line's
    option names (:func:`cli_names`), as the errors are."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if isinstance(category, type) and issubclass(category, GPUBPEWarning):
            message = category(cli_names(str(message)))
        show(message, category, filename, lineno, file, line)

    return showwarning


def run() -> None:
    """The console entry point (``python -m torch_gpubpe``, the ``torch_gpubpe`` script):
    :func:`main`, then, with everything written, flushed and closed, ``os._exit``: the
    interpreter's teardown (wgpu's device, pyarrow's and numpy's GBs of buffers, the threads)
    would add ~0.3-0.5 s after the work is done. Under a tracer or coverage (tools that run
    at interpreter exit) the exit is a normal one."""
    status = main()
    if sys.gettrace() is not None or "coverage" in sys.modules:
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
