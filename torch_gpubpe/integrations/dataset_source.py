"""Which documents one iterator of
:class:`~torch_gpubpe.integrations.torch_data.TokenizedDataset` reads (DESIGN.md §6): the
source normalised to a :class:`~torch_gpubpe.io.readers.Reader` (with clear errors for the
usual mistakes), the vocab named by a path, and the shard (rank × DataLoader worker).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.errors import InputError
from torch_gpubpe.io.readers import Reader, TextFiles, TextSource, open_source


def load_vocab_path(path: str | os.PathLike) -> Vocab:
    """A vocab.json file, or the folder holding one (the CLI's ``--vocab``)."""
    p = os.fspath(path)
    f = os.path.join(p, "vocab.json") if os.path.isdir(p) else p
    if not os.path.isfile(f):
        raise InputError(f"vocab path {p!r}: no such vocab file (expected a vocab.json or the "
                         "folder holding one, as written by `python -m torch_gpubpe train --out`)")
    return Vocab.load(f)


def normalize_source(source: object, text_column: str, sample_by: str = "line") -> object:
    """The :class:`~torch_gpubpe.io.readers.Reader` of ``source`` (clear errors for the usual
    mistakes)."""
    if isinstance(source, (Reader, TextSource)):
        return open_source(source)
    if isinstance(source, (str, os.PathLike)):
        if isinstance(source, str) and not os.path.isfile(source):
            raise InputError(
                f"source is a str that names no file ({source[:60]!r}); pass a list of documents "
                "(e.g. [text]), a path, or TextFiles(...)"
            )
        return TextFiles(source, text_column=text_column, sample_by=sample_by)
    if isinstance(source, Sequence) and source and all(isinstance(p, os.PathLike) for p in source):
        return TextFiles(source, text_column=text_column, sample_by=sample_by)
    if (isinstance(source, Sequence) and 0 < len(source) <= 10_000
            and all(isinstance(p, str) and len(p) < 4096 and "\n" not in p
                    and os.path.isfile(p) for p in source)):
        # A list of str is a list of documents; one made only of existing file names is almost
        # certainly meant as files: say so instead of tokenizing the names.
        raise InputError(
            f"source is a list of {len(source)} str that all name existing files "
            f"({source[0]!r}, ...): a list of str is read as the documents themselves. Pass "
            "[pathlib.Path(p) for p in paths] or TextFiles(paths) to read the files"
        )
    return open_source(source, text_column=text_column)


@dataclass(frozen=True)
class ShardInfo:
    """Which part of the source one iterator reads: shard ``rank * num_workers + worker``."""

    rank: int
    world_size: int
    worker: int
    num_workers: int

    @property
    def shard(self) -> int:
        return self.rank * self.num_workers + self.worker

    @property
    def num_shards(self) -> int:
        return self.world_size * self.num_workers

    def describe(self) -> str:
        return (
            f"shard {self.shard} of {self.num_shards}: rank {self.rank}/{self.world_size}, "
            f"worker {self.worker}/{self.num_workers}"
        )


def distributed_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` from ``torch.distributed`` when initialised, else None."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return None
