"""Collators for :class:`~torch_gpubpe.integrations.torch_data.TokenizedDataset` batches
(DESIGN.md §6): :class:`PadCollator` / :func:`pad_collate` pad per-document tensors,
:func:`packed_collate` stacks packed blocks; and the two helpers the data path shares (is
there an accelerator to pin memory for, warn once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from torch_gpubpe import notices

IGNORE_INDEX = -100
"""Label value of padded positions (PyTorch's ``cross_entropy`` default ``ignore_index``)."""


def accelerator_available() -> bool:
    """Whether torch has an accelerator (CUDA, MPS, ...) to pin host memory for."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        return bool(acc.is_available())
    return torch.cuda.is_available()


_warned: set[str] = set()


def warn_once(msg: str) -> None:
    """Warn ``msg`` (a :mod:`torch_gpubpe.notices` warning) the first time only."""
    if msg not in _warned:
        _warned.add(msg)
        notices.warn(msg, stacklevel=3)


@dataclass
class PadCollator:
    """Pads per-document token tensors to a batch (picklable, so it works in spawned workers).

    Args:
        pad_id: id written at padded positions of ``input_ids``.
        padding_side: ``"right"`` (tokens first) or ``"left"`` (padding first; for generation).
        max_length: if set, documents longer than this keep their first ``max_length`` tokens.
        dtype: of ``input_ids`` (default: the input tensors' dtype); ``attention_mask`` is
            ``torch.long``.
        pin_memory: pin the outputs (needs an accelerator; else ignored with a warning).
        labels: also return ``labels`` (``torch.long``, ``(B, T)``): ``input_ids`` on tokens,
            ``-100`` (:data:`IGNORE_INDEX`) on padding — the causal-LM labels of Hugging Face's
            ``DataCollatorForLanguageModeling(mlm=False)``, which the model shifts itself.

    Call with a list of 1-D integer tensors (or of dicts with ``"input_ids"``, whose other keys,
    e.g. ``doc_index``, are collected into a tensor). Returns ``{"input_ids": (B, T),
    "attention_mask": (B, T)}`` with ``T`` = the longest (truncated) length in the batch;
    ``attention_mask`` is 1 on tokens and 0 on padding. Mask and labels come from each
    document's length (positions), never from comparing ids with ``pad_id``: with ``pad_id``
    equal to the EOS id (GPT-2 style), real EOS tokens keep mask 1 and their label.

    Raises:
        ValueError: an empty batch, a tensor that is not 1-D, or a bad option.
    """

    pad_id: int = 0
    padding_side: str = "right"
    max_length: int | None = None
    dtype: torch.dtype | None = None
    pin_memory: bool = False
    labels: bool = False

    def __post_init__(self) -> None:
        if self.padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {self.padding_side!r}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be positive, got {self.max_length}")

    def __call__(self, batch: Sequence[torch.Tensor | Mapping]) -> dict[str, torch.Tensor]:
        if not len(batch):
            raise ValueError("PadCollator: empty batch")
        extra: dict[str, list] = {}
        seqs = []
        for j, item in enumerate(batch):
            if isinstance(item, Mapping):
                for key, v in item.items():
                    if key != "input_ids":
                        extra.setdefault(key, []).append(v)
                item = item["input_ids"]
            item = torch.as_tensor(item)
            if item.dim() != 1:
                raise ValueError(f"PadCollator: item {j} has shape {tuple(item.shape)}, not 1-D")
            seqs.append(item[: self.max_length] if self.max_length is not None else item)
        dtype = self.dtype or seqs[0].dtype
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=dtype)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, s in enumerate(seqs):
            n = len(s)
            if n == 0:
                continue
            cols = slice(0, n) if self.padding_side == "right" else slice(width - n, width)
            ids[j, cols] = s
            mask[j, cols] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        if self.labels:
            out["labels"] = ids.long().masked_fill(mask == 0, IGNORE_INDEX)
        for key, vals in extra.items():
            out[key] = torch.as_tensor(vals)
        if self.pin_memory:
            if accelerator_available():
                out = {k: v.pin_memory() for k, v in out.items()}
            else:
                warn_once("pin_memory=True ignored: no accelerator is available")
        return out


def pad_collate(
    batch: Sequence[torch.Tensor | Mapping],
    pad_id: int = 0,
    padding_side: str = "right",
    max_length: int | None = None,
    dtype: torch.dtype | None = None,
    labels: bool = False,
) -> dict[str, torch.Tensor]:
    """Function form of :class:`PadCollator` (use ``functools.partial`` or PadCollator to set
    options for a DataLoader)."""
    return PadCollator(pad_id, padding_side, max_length, dtype, labels=labels)(batch)


def packed_collate(batch: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stacks packed blocks: ``{"input_ids": (B, seq_len), "labels": (B, seq_len)}``."""
    return {k: torch.stack([b[k] for b in batch]) for k in batch[0]}
