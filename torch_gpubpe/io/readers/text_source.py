"""The CLI's description of where documents come from: :class:`TextSource` (a Hub or local
dataset read through ``datasets``, or local files read by
:class:`~torch_gpubpe.io.readers.files.FileReader`), the lazily opened dataset reader, and the
one-line messages for a dataset that cannot be loaded."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from torch_gpubpe.errors import InputError
from torch_gpubpe.io.formats import DEFAULT_SAMPLE_BY, SAMPLE_BY, normal_format
from torch_gpubpe.io.readers.base import Reader
from torch_gpubpe.io.readers.files import FileReader
from torch_gpubpe.io.readers.hf import HFReader


@dataclass(frozen=True)
class TextSource:
    """Where documents come from: a Hub/local dataset (through ``datasets``) or local files
    (through :class:`FileReader`).

    Attributes:
        dataset: Hub dataset name (``"wikitext"``, ``"allenai/c4"``) or a local dataset folder;
            ``None`` when ``data_files`` are given.
        data_files: local files or glob patterns.
        config: dataset configuration name (Hub datasets with several, e.g. ``"en"``).
        split: split to read (``"train"``).
        text_column: the column holding the document text.
        streaming: datasets: read lazily (no copy into the ``datasets`` cache).
        file_format: one of :data:`FORMATS` for ``data_files``; ``None`` infers it from each
            extension (:func:`infer_format`).
        sample_by: for plain-text files, what one document is: ``"line"`` (line breaks kept, so
            the documents joined give the file back), ``"paragraph"`` or ``"document"``.
        threads, nice, read_ahead_bytes: :class:`FileReader`'s (``--read-threads``,
            ``--read-nice``; the ``train`` command bounds the read-ahead).
    """

    dataset: str | None = None
    data_files: tuple[str, ...] = ()
    config: str | None = None
    split: str = "train"
    text_column: str = "text"
    streaming: bool = True
    file_format: str | None = None
    sample_by: str = DEFAULT_SAMPLE_BY
    load_kwargs: dict = field(default_factory=dict, compare=False)
    threads: int | None = field(default=None, compare=False)
    nice: int = field(default=0, compare=False)
    read_ahead_bytes: int | None = field(default=None, compare=False)

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
        normal_format(self.file_format)

    def describe(self) -> str:
        """Short human-readable name of the source, used in messages and summaries."""
        if self.dataset is not None:
            parts = [self.dataset] + ([self.config] if self.config else [])
            return f"dataset {'/'.join(parts)!s} split {self.split!r}"
        shown = ", ".join(self.data_files[:3]) + (" ..." if len(self.data_files) > 3 else "")
        return f"files {shown}"

    def reader(self) -> Reader:
        """The :class:`Reader` of this source (files are checked here; datasets open lazily).

        Raises:
            InputError: a file does not exist or has an unknown extension.
        """
        if self.data_files:
            return FileReader(self.data_files, self.text_column, self.file_format,
                              self.sample_by, self.threads, nice=self.nice,
                              read_ahead_bytes=self.read_ahead_bytes)
        return LazyHFReader(self)

    def load(self):
        """Open a ``dataset=`` source with ``datasets.load_dataset``.

        Returns:
            a ``datasets.IterableDataset`` (``streaming=True``) or ``datasets.Dataset``.
        Raises:
            InputError: the dataset cannot be found or reached (offline: "cannot reach the
                Hugging Face Hub ..."), the config or split is unknown; names the source.
        """
        try:
            import datasets
        except ImportError as e:  # pragma: no cover - datasets is a dependency
            raise InputError("reading datasets needs `pip install datasets`") from e
        if self.data_files:
            raise InputError("TextSource.load() is for dataset= sources; use reader()")
        kwargs: dict[str, Any] = dict(split=self.split, streaming=self.streaming)
        kwargs.update(self.load_kwargs)
        args = (self.dataset,) + ((self.config,) if self.config else ())
        # (lazy: hub imports urllib.request and ssl, start-up time that file sources never need)
        from torch_gpubpe.io.hub import prepare_hub_access

        # without network: offline at once, instead of datasets' retries for minutes
        prepare_hub_access(self.dataset)
        try:
            return datasets.load_dataset(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - datasets raises many kinds; all become one line
            raise InputError(explain_load_error(self, e)) from e


class LazyHFReader(Reader):
    """A TextSource(dataset=...) opened with ``datasets`` on first read."""

    def __init__(self, src: TextSource) -> None:
        self.src, self.text_column = src, src.text_column
        self._r: HFReader | None = None
        self.stats: dict = {}

    def describe(self) -> str:
        return self.src.describe()

    def _reader(self) -> HFReader:
        if self._r is None:
            self._r = HFReader(self.src.load(), self.text_column, what=self.src.describe())
        return self._r

    def batches(self, shard: int = 0, num_shards: int = 1, start: int = 0):
        try:
            yield from self._reader().batches(shard, num_shards, start)
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - datasets/pyarrow errors while streaming
            raise InputError(explain_load_error(self.src, e)) from e

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _r=None, stats={})


def explain_load_error(src: TextSource, e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    what = src.describe()
    if isinstance(e, StopIteration):
        return f"empty corpus: {what} holds no rows (empty file?)"
    offline = isinstance(e, ConnectionError) or "Couldn't reach" in msg or "offline" in msg.lower()
    if offline:
        from torch_gpubpe.io.hub import explain_hub_failure  # (lazy: as in TextSource.load)

        line = explain_hub_failure(what, msg)  # unreachable, or HF_HUB_OFFLINE set by the user
        if line is not None:
            return line
        return (
            f"cannot load {what}: cannot reach the Hugging Face Hub ({msg}). Without network, "
            f"download the dataset elsewhere and pass its files with --data-files, or set "
            f"HF_HUB_OFFLINE=1 to use the local cache only"
        )
    if isinstance(e, FileNotFoundError):
        return f"cannot load {what}: no such dataset on the Hub or on disk ({msg})"
    if isinstance(e, ValueError) and "split" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --split)"
    if "config" in msg.lower():
        return f"cannot load {what}: {msg} (choose one with --config)"
    return f"cannot load {what}: {type(e).__name__}: {msg}"

