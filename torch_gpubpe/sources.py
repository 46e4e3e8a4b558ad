"""Reading documents (``str``) from Hugging Face datasets, local files, or Python iterables.

One entry point, :func:`iter_texts`, used by the training/encoding CLI and usable by the data
path (DESIGN.md §6: "raw text — an iterable of ``str``, a Hugging Face Dataset/IterableDataset
with a text column, or text files"). It yields one ``str`` per document and stops at
``max_docs`` documents or ``max_bytes`` UTF-8 bytes. Every error names the source and the row
index, so a bad row in a 10 GB dump can be found.

Where the data comes from (a :class:`TextSource`):

* a dataset on the Hugging Face Hub: ``TextSource(dataset="allenai/c4", config="en",
  split="train")`` → ``datasets.load_dataset(name, config, split=..., streaming=True)``;
* local files through the ``datasets`` loaders, format from the extension: ``.txt`` → ``text``,
  ``.json``/``.jsonl`` → ``json``, ``.parquet``, ``.csv``/``.tsv``, ``.arrow``; gzip/bz2/xz/zstd
  compressed files (``.jsonl.gz``) are decompressed by ``datasets``;
* a local dataset directory (``dataset="path/to/dir"``);
* an already opened ``datasets.Dataset``/``IterableDataset``, or any iterable of ``str`` or of
  row dicts.

Example::

    >>> from torch_gpubpe.sources import iter_texts, shipped_corpus
    >>> docs = list(iter_texts(shipped_corpus(), max_docs=3))
    >>> len(docs), type(docs[0]).__name__
    (3, 'str')

``datasets`` is imported only when a dataset or file is opened. Streaming is the default: files
are read as they are iterated, nothing is copied into the ``datasets`` cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .reference import to_bytes

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
"""Folder of the small English + Turkish corpus shipped in the package (see its README.md)."""

SHIPPED_CORPUS_FILES = ("en_eltec_novels.jsonl.gz", "tr_ud_boun.jsonl.gz")

_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
_FORMATS = {
    ".txt": "text", ".text": "text", ".md": "text",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
    ".parquet": "parquet", ".pq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".arrow": "arrow",
}
SAMPLE_BY = ("line", "paragraph", "document")


def _extension(path: str) -> str:
    """Lower-case extension under one compression suffix: ``a.JSONL.gz`` → ``".jsonl"``."""
    name = os.path.basename(str(path)).lower()
    for suf in _COMPRESSION:
        if name.endswith(suf):
            name = name[: -len(suf)]
            break
    return os.path.splitext(name)[1]


def infer_format(path: str) -> str:
    """The ``datasets`` loader for a file name: ``"text"``, ``"json"``, ``"parquet"``, ``"csv"``
    or ``"arrow"``, looking through one compression suffix (``a.jsonl.gz`` → ``"json"``).

    Raises:
        InputError: the extension is not one of the known ones (names the file and the
            ``file_format`` argument / ``--format`` option to pass).
    """
    ext = _extension(path)
    if ext not in _FORMATS:
        raise InputError(
            f"{path}: cannot tell the file format from the extension {ext or '(none)'!r}; "
            f"pass --format (file_format=) one of text, json, parquet, csv, arrow"
        )
    return _FORMATS[ext]


@dataclass(frozen=True)
class TextSource:
    """Where documents come from: a Hub/local dataset or local files.

    Attributes:
        dataset: Hub dataset name (``"wikitext"``, ``"allenai/c4"``) or a local dataset folder;
            ``None`` when ``data_files`` are given.
        data_files: local files or glob patterns, all of one format.
        config: dataset configuration name (Hub datasets with several, e.g. ``"en"``).
        split: split to read (``"train"``; slicing like ``"train[:1%]"`` needs
            ``streaming=False``).
        text_column: the column holding the document text.
        streaming: read lazily (no copy into the ``datasets`` cache; works offline for files).
        file_format: ``datasets`` loader for ``data_files``; ``None`` infers it from the
            extension (:func:`infer_format`).
        sample_by: for plain-text files, what one document is: ``"line"`` (line breaks kept, so
            the documents joined give the file back), ``"paragraph"`` or ``"document"`` (a file).
    """

    dataset: str | None = None
    data_files: tuple[str, ...] = ()
    config: str | None = None
    split: str = "train"
    text_column: str = "text"
    streaming: bool = True
    file_format: str | None = None
    sample_by: str = "line"
    load_kwargs: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        files = self.data_files
        if isinstance(files, (str, os.PathLike)):
            files = (files,)
        object.__setattr__(self, "data_files", tuple(str(f) for f in files))
        if (self.dataset is None) == (not self.data_files):
            raise InputError("give either a dataset name (--dataset) or data files (--data-files)")
        if self.sample_by not in SAMPLE_BY:
            raise InputError(f"sample_by must be one of {SAMPLE_BY}, got {self.sample_by!r}")
        if not self.text_column:
            raise InputError("text_column must be a non-empty column name")

    def describe(self) -> str:
        """Short human-readable name of the source, used in messages and summaries."""
        if self.dataset is not None:
            parts = [self.dataset] + ([self.config] if self.config else [])
            return f"dataset {'/'.join(parts)!s} split {self.split!r}"
        shown = ", ".join(self.data_files[:3]) + (" ..." if len(self.data_files) > 3 else "")
        return f"files {shown}"

    def load(self):
        """Open the source with ``datasets.load_dataset``.

        Returns:
            a ``datasets.IterableDataset`` (``streaming=True``) or ``datasets.Dataset``.
        Raises:
            InputError: a file does not exist, the dataset cannot be found or reached (offline:
                "cannot reach the Hugging Face Hub ..."), the config or split is unknown; the
                message names the source.
        """
        try:
            import datasets
        except ImportError as e:  # pragma: no cover - datasets is a dependency
            raise InputError("reading datasets and files needs `pip install datasets`") from e
        kwargs: dict[str, Any] = dict(split=self.split, streaming=self.streaming)
        kwargs.update(self.load_kwargs)
        if self.data_files:
            for f in self.data_files:
                if not any(ch in f for ch in "*?[") and not os.path.exists(f):
                    raise InputError(f"data file {f!r} does not exist")
            fmt = self.file_format or infer_format(self.data_files[0])
            if fmt == "text":
                kwargs.setdefault("sample_by", self.sample_by)
                kwargs.setdefault("keep_linebreaks", True)
            if fmt == "csv" and _extension(self.data_files[0]) == ".tsv":
                kwargs.setdefault("delimiter", "\t")
            args: tuple = (fmt,)
            kwargs["data_files"] = list(self.data_files)
        else:
            args = (self.dataset,) + ((self.config,) if self.config else ())
        try:
            return datasets.load_dataset(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - datasets raises many kinds; all become one line
            raise InputError(_explain_load_error(self, e)) from e


def _explain_load_error(src: TextSource, e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    what = src.describe()
    if isinstance(e, StopIteration) or (src.data_files and "empty" in msg.lower()):
        return f"empty corpus: {what} holds no rows (empty file?)"
    offline = isinstance(e, ConnectionError) or "Couldn't reach" in msg or "offline" in msg.lower()
    if src.dataset is not None and offline:
        return (
            f"cannot load {what}: cannot reach the Hugging Face Hub ({msg}). Without network, "
            f"download the dataset elsewhere and pass its files with --data-files, or set "
            f"HF_HUB_OFFLINE=1 to use the local cache only"
        )
    if isinstance(e, FileNotFoundError) and src.dataset is not None:
        return f"cannot load {what}: no such dataset on the Hub or on disk ({msg})"
    if isinstance(e, ValueError) and "split" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --split)"
    if "config" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --config)"
    return f"cannot load {what}: {type(e).__name__}: {msg}"


def _known_extension(path: str) -> bool:
    try:
        infer_format(path)
    except InputError:
        return False
    return True


def shipped_corpus() -> TextSource:
    """The English + Turkish corpus shipped inside the package (about 1.4 MB of text, 2,033
    documents; ``torch_gpubpe/corpus/README.md`` gives sources and licences)."""
    files = tuple(str(CORPUS_DIR / f) for f in SHIPPED_CORPUS_FILES)
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise InputError(f"the shipped corpus is missing from this installation: {missing}")
    return TextSource(data_files=files, file_format="json")


def _rows(src: Any) -> tuple[Iterable[Any], str]:
    """(iterable of rows, description) for every accepted kind of source."""
    if isinstance(src, TextSource):
        return src.load(), src.describe()
    if isinstance(src, (str, os.PathLike)):
        p = str(src)
        if os.path.isfile(p) or any(ch in p for ch in "*?[") or _known_extension(p):
            ts = TextSource(data_files=(p,))
        else:  # a local dataset folder or a Hub dataset name
            ts = TextSource(dataset=p)
        return ts.load(), ts.describe()
    name = type(src).__name__
    if hasattr(src, "__iter__"):
        return src, f"{name} object"
    raise InputError(f"cannot read documents from a {name}: pass a TextSource, a path, a dataset "
                     "name, a datasets.Dataset/IterableDataset or an iterable of str")


def iter_texts(
    source: Any,
    *,
    text_column: str | None = None,
    max_docs: int | None = None,
    max_bytes: int | None = None,
    skip_docs: int = 0,
    skip_none: bool = True,
    stats: dict | None = None,
) -> Iterator[str]:
    """Yield the documents of ``source`` as ``str``, in order.

    Args:
        source: a :class:`TextSource`; a path to a file (format from its extension) or a local
            dataset folder; a Hub dataset name; an opened ``datasets.Dataset`` or
            ``IterableDataset``; or any iterable of ``str`` or of row dicts.
        text_column: column of row dicts to read (default: the TextSource's, else ``"text"``).
        max_docs: stop after this many documents (``None``: no limit).
        max_bytes: stop once this many UTF-8 bytes were yielded; the document that crosses the
            limit is cut at a character boundary so the total is at most ``max_bytes``.
        skip_docs: skip this many documents first (after ``None`` rows are dropped).
        skip_none: drop rows whose text is ``None`` (missing values are common in Hub datasets);
            ``False`` raises on them.
        stats: if a dict, ``stats["skipped_none"]`` counts the dropped ``None`` rows and
            ``stats["skipped_none_rows"]`` lists the first 100 of their row indices (so that
            document k of the output can be matched back to its row).
    Yields:
        ``str``, one per document (``bytes`` rows are decoded as UTF-8, bad bytes → U+FFFD).
    Raises:
        InputError: the source cannot be opened; a row lacks ``text_column`` (names the row
            index and the columns there are); a value is not text (names the row index and its
            type); reading fails mid-way (names the row index).
    """
    for name, val in (("max_docs", max_docs), ("max_bytes", max_bytes)):
        if val is not None and (not isinstance(val, int) or val < 0):
            raise InputError(f"{name} must be a non-negative int or None, got {val!r}")
    column = text_column or (source.text_column if isinstance(source, TextSource) else "text")
    rows, what = _rows(source)
    if _is_hf_dataset(rows):
        rows = _column_values(rows, column, what)
    return _iter(rows, what, column, max_docs, max_bytes, skip_docs, skip_none, stats)


def _is_hf_dataset(obj: Any) -> bool:
    return type(obj).__name__ in ("Dataset", "IterableDataset") and hasattr(obj, "iter") and (
        type(obj).__module__.startswith("datasets"))


def _column_values(ds, column: str, what: str, batch_size: int = 1024) -> Iterator[Any]:
    """The values of one column, read in batches (much faster than row dicts)."""
    names = getattr(ds, "column_names", None)
    if names is not None and column not in names:
        raise InputError(
            f"{what}: row 0 has no column {column!r} (columns: {', '.join(names)}); "
            f"pass --text-column (text_column=) with one of them"
        )
    if names is not None and len(names) > 1 and hasattr(ds, "select_columns"):
        ds = ds.select_columns([column])
    k = 0
    for batch in ds.iter(batch_size=batch_size):
        if column not in batch:
            raise InputError(
                f"{what}: row {k} has no column {column!r} (columns: {', '.join(batch)}); "
                f"pass --text-column (text_column=) with one of them"
            )
        values = batch[column]
        k += len(values)
        yield from values


def _iter(rows, what, column, max_docs, max_bytes, skip_docs, skip_none,
          stats: dict | None = None) -> Iterator[str]:
    if max_docs == 0 or max_bytes == 0:
        return
    done_docs = done_bytes = 0
    seen = 0
    it = iter(rows)
    row_index = -1
    while True:
        row_index += 1
        try:
            row = next(it)
        except StopIteration:
            return
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - a reader error deep in datasets/pyarrow
            raise InputError(
                f"{what}: reading row {row_index} failed: {type(e).__name__}: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            ) from e
        text = _text_of(row, column, what, row_index)
        if text is None:
            if skip_none:
                if stats is not None:
                    stats["skipped_none"] = stats.get("skipped_none", 0) + 1
                    rows_list = stats.setdefault("skipped_none_rows", [])
                    if len(rows_list) < 100:
                        rows_list.append(row_index)
                continue
            raise InputError(f"{what}: row {row_index}: column {column!r} is None (missing)")
        seen += 1
        if seen <= skip_docs:
            continue
        if max_bytes is not None:
            data = to_bytes(text)
            nb = len(data)
            if done_bytes + nb > max_bytes:
                room = max_bytes - done_bytes
                text = data[:room].decode("utf-8", "ignore")
                nb = room
            done_bytes += nb
        yield text
        done_docs += 1
        if (max_docs is not None and done_docs >= max_docs) or (
            max_bytes is not None and done_bytes >= max_bytes
        ):
            return


def _text_of(row: Any, column: str, what: str, index: int) -> str | None:
    if isinstance(row, str):
        return row
    if isinstance(row, dict):
        if column not in row:
            cols = ", ".join(map(str, row)) or "none"
            raise InputError(
                f"{what}: row {index} has no column {column!r} (columns: {cols}); "
                f"pass --text-column (text_column=) with one of them"
            )
        value = row[column]
    else:
        value = row
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    raise InputError(
        f"{what}: row {index}: column {column!r} holds {type(value).__name__}, not text"
    )


def count_utf8_bytes(texts: Sequence[str]) -> int:
    """Total UTF-8 bytes of ``texts`` (lone surrogates count as U+FFFD, as the encoder sees
    them, DESIGN.md §1)."""
    return sum(len(to_bytes(t)) for t in texts)
