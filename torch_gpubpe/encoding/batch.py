"""The flat result of encoding a batch: :class:`BatchEncoding` (every document's ids back to
back, and token offsets), as :meth:`Tokenizer.encode_batch` returns it and the shard writers
(:mod:`torch_gpubpe.io.shards`) store it.
"""

from __future__ import annotations

import numpy as np


class BatchEncoding:
    """Token ids of a batch of documents, stored flat. ``enc[k]`` is document k's ids (an
    array); ``enc["input_ids"]`` and ``enc["attention_mask"]`` are ``transformers``' lists of
    lists (unpadded; ``tok(texts, padding=True)`` pads).

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

    def __getitem__(self, k: int | str):
        if isinstance(k, str):
            if k == "input_ids":
                return self.tolist()
            if k == "attention_mask":
                return [[1] * int(m) for m in np.diff(self.offsets).tolist()]
            raise KeyError(f"{k!r}: a BatchEncoding has 'input_ids' and 'attention_mask'")
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"document {k} out of range for a batch of {n}")
        k %= n
        return self.ids[self.offsets[k] : self.offsets[k + 1]]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def keys(self) -> tuple[str, str]:
        """The keys of ``transformers``' encoding: ``("input_ids", "attention_mask")``."""
        return ("input_ids", "attention_mask")

    def tolist(self) -> list[list[int]]:
        """Per-document ids as Python lists."""
        flat = self.ids.tolist()
        o = self.offsets.tolist()
        return [flat[o[k] : o[k + 1]] for k in range(len(self))]

    def __repr__(self) -> str:
        return (f"BatchEncoding(num_docs={len(self)}, num_tokens={len(self.ids)}, "
                f"dtype={self.ids.dtype})")
