"""torch_gpubpe — byte-level BPE on the GPU (WebGPU compute shaders through ``wgpu``).

Public API (imported lazily, so ``import torch_gpubpe`` touches neither the GPU nor torch):

* :class:`Vocab` — merges + special tokens, save/load (``torch_gpubpe.vocab``)
* :class:`Tokenizer` — GPU greedy longest-match encoder/decoder (``torch_gpubpe.encoder``)
* :func:`train`, :func:`train_from_word_counts` — GPU BPE training (``torch_gpubpe.trainer``)
* :func:`train_from_counts_file` — training from merged per-shard word counts
  (``torch_gpubpe.counts``)
* :class:`TokenizedDataset`, :func:`make_dataloader` — PyTorch data path (``torch_gpubpe.data``)
* ``torch_gpubpe.reference`` — the pure-Python oracle of DESIGN.md
* :class:`GPUBPEWarning` — the category of the package's notices, printed as one line
  (``torch_gpubpe.notices``)
"""

from __future__ import annotations

import importlib

from .errors import (
    GPUBPEError,
    GPUForkError,
    GPUOperationError,
    InputError,
    NoAdapterError,
    VocabFormatError,
)
from .vocab import Vocab

__version__ = "0.1.0"

_LAZY = {
    "Tokenizer": "encoder",
    "BatchEncoding": "encoder",
    "train": "trainer",
    "train_from_word_counts": "trainer",
    "train_from_counts_file": "counts",
    "TokenizedDataset": "data",
    "make_dataloader": "data",
    "pad_collate": "data",
    "get_gpu": "gpu",
    "GPUBPEWarning": "notices",
}

__all__ = [
    "GPUBPEError",
    "GPUForkError",
    "GPUOperationError",
    "InputError",
    "NoAdapterError",
    "Vocab",
    "VocabFormatError",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torch_gpubpe' has no attribute {name!r}")
