"""What the commands of :mod:`torch_gpubpe.cli` share: the input options and the source they
name, sizes and counts on the command line, the ``--out`` check, progress bars, the ``--vocab``
argument, and the figures of a summary (peak memory, adapter, sizes).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from torch_gpubpe.core.vocab import Vocab, load_vocab_file, vocab_file
from torch_gpubpe.encoding.stream import ENCODE_READ_NICE
from torch_gpubpe.errors import GPUBPEError, InputError, NoAdapterError

if TYPE_CHECKING:  # at run time imported where used: pyarrow takes ~0.3 s to import
    from torch_gpubpe.io.readers import TextSource

PROG = "torch_gpubpe"
DEFAULT_BATCH_BYTES = 16_000_000
"""Text per batch: ``encode``'s ``--batch-bytes`` default, and the training reader's batches
when it is read document by document."""

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


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (``_`` separators allowed)."""
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v



def add_source_args(p: argparse.ArgumentParser, *, default_note: str) -> None:
    """The input options (``--dataset``, ``--data-files``, ...) of ``train``, ``encode`` and
    ``count``; :func:`source_from_args` reads them."""
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
    g.add_argument("--read-threads", type=positive_int, metavar="N",
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
    g.add_argument("--max-docs", type=positive_int, metavar="N", help="read at most N documents")


# The keyword arguments that messages of the Python API name, and the options that set them
# here: a message that reaches the command line names what its user can type.
CLI_OPTIONS = {
    "max_memory": "--max-memory", "prune_below": "--prune-below", "max_bytes": "--max-bytes",
    "max_docs": "--max-docs", "vocab_size": "--vocab-size", "min_frequency": "--min-frequency",
    "special_tokens": "--special-tokens", "text_column": "--text-column",
    "file_format": "--format", "format": "--format", "sample_by": "--sample-by",
    "count_on": "--count-on", "pre_tokenizer": "--pre-tokenizer", "batch_bytes": "--batch-bytes",
    "nice": "--read-nice",
}
_NAMES = "|".join(sorted(map(re.escape, CLI_OPTIONS), key=len, reverse=True))
_NAME = rf"(?<![\w'\"-])(?P<name>{_NAMES})"     # (not inside another name or a quoted key)
_VALUE = r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^\s,;)]+"
_KW = rf"(?<![\w'\"-])(?:{_NAMES})=(?:{_VALUE})?"
_OPT = r"--[a-z][a-z-]*"
# keyword (=value) followed by its option: "max_memory (--max-memory)",
# "prune_below=2 (--prune-below 2; the merges can differ)"
_KW_THEN_OPT = re.compile(_NAME + rf"(?:=(?P<val>{_VALUE}))?\s*\((?P<opt>{_OPT})"
                          r"(?P<oval>[^;)]*)(?:;\s*(?P<rest>[^)]*))?\)")
# option followed by its keywords: "--format binary (format='binary' / file_format='binary')"
_OPT_THEN_KW = re.compile(rf"(?P<opt>{_OPT}(?: [^\s(]+)?)\s*\(\s*{_KW}(?:\s*/\s*{_KW})*\s*\)")
# keyword or option: "max_bytes / --max-bytes"
_KW_OR_OPT = re.compile(_NAME + rf"\s*/\s*(?P<opt>{_OPT})")
_KW_VALUE = re.compile(_NAME + rf"=(?P<val>{_VALUE})?")


def _plain(value: str | None) -> str:
    """A value as typed after its option: ``'cpu'`` → ``cpu`` (quotes kept where needed)."""
    if not value:
        return ""
    if value[0] in "'\"" and re.fullmatch(r"[\w.+-]+", value[1:-1]):
        value = value[1:-1]
    return " " + value


def cli_names(message: str) -> str:
    """``message`` of the Python API with the command line's option names for its keyword
    arguments (:data:`CLI_OPTIONS`): ``max_memory=0.50 GB`` → ``--max-memory 0.50 GB``,
    ``raise max_memory (--max-memory)`` → ``raise --max-memory``, ``--format (format=)`` →
    ``--format``.

    Example::

        >>> cli_names("above max_memory=0.50 GB; raise max_memory (--max-memory), or read "
        ...           "fewer documents (max_bytes / --max-bytes)")
        'above --max-memory 0.50 GB; raise --max-memory, or read fewer documents (--max-bytes)'
    """
    def kw_then_opt(m: re.Match) -> str:
        val = m["oval"].rstrip() or _plain(m["val"])
        return m["opt"] + val + (f" ({m['rest']})" if m["rest"] else "")

    message = _KW_THEN_OPT.sub(kw_then_opt, message)
    message = _OPT_THEN_KW.sub(lambda m: m["opt"], message)
    message = _KW_OR_OPT.sub(lambda m: m["opt"], message)
    return _KW_VALUE.sub(lambda m: CLI_OPTIONS[m["name"]] + _plain(m["val"]), message)


def error_text(e: BaseException) -> str:
    """The command line's text of an error: its message with the option names
    (:func:`cli_names`); on one line, but for a missing adapter (what is missing, what to run);
    the type's name before it unless it is one of this package's errors."""
    if isinstance(e, NoAdapterError):
        msg = str(e).strip()
    else:
        msg = " ".join(str(e).split()) or type(e).__name__
    if not isinstance(e, GPUBPEError):
        msg = f"{type(e).__name__}: {msg}"
    return cli_names(msg)


def add_debug(p: argparse.ArgumentParser) -> None:
    """``--debug`` on a subcommand too (``torch_gpubpe train --debug``), as on the main parser."""
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks instead of one-line errors")



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


class NoBar:
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


def progress(args, **kw):
    """A tqdm progress bar on stderr, or a :class:`NoBar` with ``--no-progress``."""
    if args.no_progress:
        return NoBar()
    from tqdm.auto import tqdm

    return tqdm(disable=True if args.no_progress else None, file=sys.stderr, dynamic_ncols=True,
                **kw)


def peak_rss_bytes() -> int:
    """The peak resident memory of this process in bytes (0 where unknown)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def fmt_bytes(n: float) -> str:
    """``"1,234 B"``, ``"12.3 MB"``: powers of 1000."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def adapter_name() -> str:
    """The name of the GPU adapter this process uses, ``"?"`` when none opens."""
    try:
        from torch_gpubpe.gpu.device import get_gpu

        return get_gpu().adapter_name
    except Exception:  # noqa: BLE001 - only for the summary
        return "?"


vocab_path = vocab_file


def load_vocab_arg(path: str) -> Vocab:
    """``--vocab``: :func:`~torch_gpubpe.core.vocab.load_vocab_file` with the CLI's name."""
    return load_vocab_file(path, what="--vocab")


def implied_pre_tokenizer(path: str) -> str | None:
    """The word split a ``--vocab`` file implies
    (:func:`torch_gpubpe.encoding.loaders.implied_split`).

    Raises:
        InputError: the file implies a split the GPU cannot do exactly (names it).
    """
    from torch_gpubpe.encoding.loaders import implied_split

    return implied_split(vocab_path(path))


def docs(n: int) -> str:
    """``"1 document"``, ``"2 documents"``."""
    return f"{n:,} document" + ("" if n == 1 else "s")



def seconds_since_process_start() -> float | None:
    """Seconds since this process started (Linux: ``/proc/self/stat`` field 22, in clock
    ticks of boot time, 10 ms resolution), else None."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22; fields[0] is field 3
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError, AttributeError):
        return None
