"""The flat result of encoding a batch: :class:`BatchEncoding` (every document's ids back to
back, and token offsets), as :meth:`Tokenizer.encode_batch` returns it and the shard writers
(:mod:`torch_gpubpe.io.shards`) store it.
"""

from __future__ import annotations

import numpy as np


class BatchEncoding:
    """Token ids of a batch of documents, stored flat.

    Attributes:
        ids: 1-D ``np.uint16`` or ``np.uint32`` array of every document's ids, back to back.
        offsets: ``np.int64`` array of shape ``(num_docs + 1,)``; document k is
            ``ids[offsets[k]:offsets[k+1]]`` (units: tokens).
    """

    __slots__ = ("ids", "offsets")

    def __init__(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        self.ids = ids
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"document {k} out of range for a batch of {n}")
        k %= n
        return self.ids[self.offsets[k] : self.offsets[k + 1]]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def tolist(self) -> list[list[int]]:
        """Per-document ids as Python lists."""
        flat = self.ids.tolist()
        o = self.offsets.tolist()
        return [flat[o[k] : o[k + 1]] for k in range(len(self))]

    def __repr__(self) -> str:
        return (f"BatchEncoding(num_docs={len(self)}, num_tokens={len(self.ids)}, "
                f"dtype={self.ids.dtype})")
