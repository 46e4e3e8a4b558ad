"""torch_gpubpe — byte-level BPE on the GPU (WebGPU compute shaders through ``wgpu``).

Public API (imported lazily, so ``import torch_gpubpe`` touches neither the GPU nor torch):

* :class:`Vocab` — merges + special tokens, save/load (``torch_gpubpe.core.vocab``)
* :class:`Tokenizer` — GPU greedy longest-match encoder/decoder (``torch_gpubpe.encoding.tokenizer``)
* :func:`train`, :func:`train_from_word_counts` — GPU BPE training (``torch_gpubpe.training.trainer``)
* :func:`train_from_counts_file` — training from merged per-shard word counts
  (``torch_gpubpe.training.counts_file``)
* :class:`TokenizedDataset`, :func:`make_dataloader` — PyTorch data path (``torch_gpubpe.integrations.torch_data``)
* ``torch_gpubpe.core.reference`` — the pure-Python oracle of DESIGN.md
* :class:`GPUBPEWarning` — the category of the package's notices, printed as one line
  (``torch_gpubpe.notices``)
"""

from __future__ import annotations

import importlib

from torch_gpubpe.errors import (
    GPUBPEError,
    GPUForkError,
    GPUOperationError,
    InputError,
    NoAdapterError,
    UnsupportedVocabError,
    VocabFormatError,
    VocabNotFoundError,
)
from torch_gpubpe import _moved
from torch_gpubpe.core import vocab_files  # noqa: F401  (registers the formats Vocab.load reads)
from torch_gpubpe.core.vocab import Vocab

__version__ = "0.1.0"

_LAZY = {
    "Tokenizer": "encoding.tokenizer",
    "BatchEncoding": "encoding.tokenizer",
    "DecodeStream": "encoding.decoding",
    "train": "training.trainer",
    "train_from_word_counts": "training.trainer",
    "train_from_counts_file": "training.counts_file",
    "TokenizedDataset": "integrations.torch_data",
    "make_dataloader": "integrations.torch_data",
    "pad_collate": "integrations.torch_data",
    "get_gpu": "gpu.device",
    "GPUBPEWarning": "notices",
}

__all__ = [
    "GPUBPEError",
    "GPUForkError",
    "GPUOperationError",
    "InputError",
    "NoAdapterError",
    "UnsupportedVocabError",
    "Vocab",
    "VocabFormatError",
    "VocabNotFoundError",
    *_LAZY,
]


_moved.install()


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'torch_gpubpe' has no attribute {name!r}")
