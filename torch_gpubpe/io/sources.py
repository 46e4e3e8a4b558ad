"""Where documents come from, for the CLI: :class:`TextSource` and :func:`iter_texts`
(compatibility names; the reader layer is :mod:`torch_gpubpe.io.readers`).

A :class:`TextSource` names a Hugging Face dataset (``TextSource(dataset="allenai/c4",
config="en")``, read with ``datasets`` streaming) or local files (``TextSource(data_files=...)``,
read by :class:`torch_gpubpe.io.readers.FileReader`: parquet, Arrow IPC/feather, JSON Lines plain or
compressed, CSV/TSV, plain text by ``sample_by``). :func:`iter_texts` yields one ``str`` per
document (the slow path, for small inputs); the CLI and the trainer take packed Arrow batches
(:func:`torch_gpubpe.io.readers.documents`).

Example::

    >>> from torch_gpubpe.io.sources import iter_texts, shipped_corpus
    >>> docs = list(iter_texts(shipped_corpus(), max_docs=3))
    >>> len(docs), type(docs[0]).__name__
    (3, 'str')
"""

from __future__ import annotations

import os
from pathlib import Path

from torch_gpubpe.errors import InputError
from torch_gpubpe.io.readers import (  # noqa: F401 - re-exported names
    FORMATS,
    SAMPLE_BY,
    TextSource,
    count_utf8_bytes,
    explain_load_error,
    infer_format,
    iter_texts,
)

_explain_load_error = explain_load_error  # its former name

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
"""Folder of the small English + Turkish corpus shipped in the package (see its README.md)."""

SHIPPED_CORPUS_FILES = ("en_eltec_novels.jsonl.gz", "tr_ud_boun.jsonl.gz")


def shipped_corpus() -> TextSource:
    """The English + Turkish corpus shipped inside the package (about 1.4 MB of text, 2,033
    documents; ``torch_gpubpe/io/corpus/README.md`` gives sources and licences)."""
    files = tuple(str(CORPUS_DIR / f) for f in SHIPPED_CORPUS_FILES)
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise InputError(f"the shipped corpus is missing from this installation: {missing}")
    return TextSource(data_files=files, file_format="json")


__all__ = ["CORPUS_DIR", "FORMATS", "SAMPLE_BY", "TextSource", "count_utf8_bytes",
           "infer_format", "iter_texts", "shipped_corpus"]
