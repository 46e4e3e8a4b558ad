"""The module names of the flat layout (before the layered packages), kept as aliases for one
release: ``import torch_gpubpe.encoder`` gives :mod:`torch_gpubpe.encoding.tokenizer`, the same
module object, with a :class:`DeprecationWarning` that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from torch_gpubpe import notices

MOVED = {
    "reference": "core.reference",
    "vocab": "core.vocab",
    "patterns": "core.patterns",
    "trie": "core.trie",
    "bpe": "core.bpe_tables",
    "str_pack": "core.str_pack",
    "_cpython_str": "core.cpython_str",
    "_utf8_native": "core.utf8_native",
    "_disk_cache": "core.disk_cache",
    "_unicode_gen": "core.unicode_gen",
    "vocab_io": "core.vocab_files",
    "export": "core.export",
    "pretokenize": "encoding.pretokenize",
    "gpu": "gpu.device",
    "devices": "gpu.adapters",
    "shaders": "gpu.shaders",
    "_wgpu_internals": "gpu.wgpu_internals",
    "readers": "io.readers",
    "sources": "io.sources",
    "shards": "io.shards",
    "hub": "io.hub",
    "encoder": "encoding.tokenizer",
    "encoder_bpe": "encoding.merge_walk",
    "unicode_pretok": "encoding.regex_pretok",
    "pipeline": "encoding.stream",
    "trainer": "training.trainer",
    "train_seed": "training.seed_loop",
    "train_table": "training.pair_table",
    "train_wordlist": "training.wordlist_loop",
    "wordcount": "training.wordcount",
    "count_pipeline": "training.count_stream",
    "count_budget": "training.budget",
    "counts": "training.counts_file",
    "data": "integrations.torch_data",
    "ray": "integrations.ray",
    "cli": "cli.main",
    "cli_counts": "cli.counts",
    "doctor": "cli.doctor",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``torch_gpubpe.<old name>`` and loads it as the module it moved to."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package == "torch_gpubpe" and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = "torch_gpubpe." + MOVED[spec.name.rpartition(".")[2]]
        notices.deprecated(f"{spec.name} is now {new}; the old name goes in the next release",
                           stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        """Nothing to run: ``create_module`` returned the loaded module."""


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
