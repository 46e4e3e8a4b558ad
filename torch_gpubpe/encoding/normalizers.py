"""Text normalizers of models' tokenizers (:attr:`torch_gpubpe.core.vocab.Vocab.normalizer`),
applied to a packed batch before it is encoded.

Hugging Face tokenizers normalizes each text before it splits it (``tokenizer.json``
``"normalizer"``); a vocabulary trained on normalized text gives its model's ids only on
normalized input. Supported: ``"nfc"`` (Unicode NFC, Command-R), ``"metaspace"`` (every space
becomes ``▁``, U+2581: SentencePiece) and ``"metaspace-prepend"`` (also one ``▁`` before a
non-empty text: Llama 2's ``Prepend`` + ``Replace``). Any other normalizer is refused by name
where the file is read (:func:`torch_gpubpe.core.vocab_files.vocab_from_hf_dict`).

NFC runs on the host, per document, and only on documents that hold a non-ASCII byte (ASCII
text is NFC): Python's :mod:`unicodedata`. Hugging Face tokenizers' NFC (0.23) has older
combining classes: ~100 marks assigned in Unicode 10-14 (e.g. U+0898-U+089F, U+1AC1-U+1ACE,
U+1DF6-U+1DFA) are reordered by Python and left in place by it, so text holding one of them
after another mark can give other ids than HF's. Bytes that are not UTF-8 pass through
unchanged (each is its own code point, which composes with nothing).
"""

from __future__ import annotations

import unicodedata

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.core.copy_pool import join_parts


METASPACE = "\u2581".encode()


def _metaspace(arr: np.ndarray, offsets: np.ndarray, prepend: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    if not prepend and not (arr == 0x20).any():
        return arr, offsets
    done = str_pack.metaspace(arr, offsets, prepend)
    if done is not None:  # (the compiled packer's threads)
        return done
    sizes = np.diff(offsets)
    nonempty = sizes > 0
    grow = np.zeros(len(sizes), np.int64)
    starts = offsets[:-1][nonempty]
    if len(starts):
        grow[nonempty] = 2 * np.add.reduceat(arr == 0x20, starts)
    if prepend:
        grow[nonempty] += len(METASPACE)
    new_off = np.zeros(len(offsets), np.int64)
    np.cumsum(sizes + grow, out=new_off[1:])
    raw = arr.tobytes()
    lead = METASPACE if prepend else b""
    out = b"".join(lead + raw[a:b].replace(b" ", METASPACE) if b > a else b""
                   for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    return np.frombuffer(out, np.uint8), new_off


def normalize_packed(data: np.ndarray | list, offsets: np.ndarray, normalizer: str = "nfc"
                     ) -> tuple[np.ndarray | list, np.ndarray]:
    """``normalizer`` (one of :data:`torch_gpubpe.core.vocab.NORMALIZERS`) of each document of
    a packed batch (``data``: the UTF-8 array, or parts for ``join_parts``; ``offsets``: int64
    document bounds). Returns ``(data, offsets)``, the same objects when nothing changes."""
    arr = join_parts(data) if isinstance(data, list) else data
    if normalizer.startswith("metaspace"):
        return _metaspace(arr, offsets, normalizer == "metaspace-prepend")
    high = arr >= 0x80
    if not high.any():
        return data, offsets
    starts = offsets[:-1]
    nonempty = offsets[1:] > starts
    has = np.zeros(len(starts), bool)
    has[nonempty] = np.add.reduceat(high, starts[nonempty]) > 0
    out, changed = [], False
    for k in np.flatnonzero(has).tolist():
        raw = arr[offsets[k] : offsets[k + 1]].tobytes()
        text = raw.decode("utf-8", "surrogateescape")
        if unicodedata.is_normalized("NFC", text):
            continue
        out.append((k, unicodedata.normalize("NFC", text).encode("utf-8", "surrogateescape")))
        changed = True
    if not changed:
        return arr, offsets
    sizes = np.diff(offsets)
    pieces = [arr[offsets[k] : offsets[k + 1]] for k in range(len(starts))]
    for k, b in out:
        pieces[k] = np.frombuffer(b, np.uint8)
        sizes[k] = len(b)
    new_off = np.zeros(len(offsets), np.int64)
    np.cumsum(sizes, out=new_off[1:])
    return np.concatenate(pieces) if pieces else arr, new_off
