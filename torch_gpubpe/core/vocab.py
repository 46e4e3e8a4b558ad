"""Vocab: merges + special tokens, and its one-file format (no wgpu, no torch).

Ids (DESIGN.md §1): 0..255 are the byte values, merge k creates id ``256 + k``, special tokens
take the ids after the last merge, in the order given.

A vocabulary from outside (tiktoken file, Hugging Face ``tokenizer.json``; see
:mod:`torch_gpubpe.core.vocab_files`) is instead an explicit id → bytes table (``tokens``) with a merge
rank per id (``ranks``, default: the id), since e.g. GPT-2's byte tokens are not ids 0..255.
``mode`` says how text is encoded: ``"greedy"`` longest match (DESIGN.md §4, this project's
default) or ``"bpe"`` merge order (lowest rank first, as tiktoken).

File format (JSON, UTF-8), self-describing; version 1 (greedy mode, merges only)::

    {"format": "torch_gpubpe.core.vocab", "version": 1, "pre_tokenizer": "gpubpe-bytes-v1",
     "merges": [[left_id, right_id], ...], "special_tokens": ["<|endoftext|>", ...]}

version 2 adds ``"mode"`` and, for explicit tables, ``"tokens"`` (base64 of each token's bytes,
by id), ``"ranks"`` and ``"special_ids"``; a vocab version 1 can hold is written as version 1.
"""

from __future__ import annotations

import base64
from binascii import b2a_base64
import contextlib
import gc
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np

from torch_gpubpe.errors import VocabFormatError, VocabNotFoundError
from torch_gpubpe.core.reference import token_bytes

FORMAT_NAME = "torch_gpubpe.core.vocab"
FORMAT_VERSION = 1
FORMAT_VERSIONS = (1, 2)
MODES = ("greedy", "bpe")
PRE_TOKENIZER = "gpubpe-bytes-v1"
"""Name of the DESIGN.md §2 word rule; stored in every vocab file."""

TRAINED_SPLITS = ("gpt2", "cl100k", "qwen2", "o200k", "llama3", "qwen35", "starcoder", "nanochat")
"""The regex splits a vocab may record as trained with (:attr:`Vocab.pre_tokenizer`): the
families of :data:`torch_gpubpe.core.patterns.PATTERN_OF` (it checks they are the same)."""
SPLIT_PATTERN = (
    r" ?[A-Za-z\x{80}-\x{10FFFF}]+| ?[0-9]+| ?[\x00-\x08\x0E-\x1F!-/:-@\[-`{-\x7F]+|[\r\n]+"
    r"|[ \t\x0B\x0C]+?(?= (?:[A-Za-z\x{80}-\x{10FFFF}]|[0-9]|[\x00-\x08\x0E-\x1F!-/:-@\[-`{-\x7F]))"
    r"|[ \t\x0B\x0C]+"
)
"""The DESIGN.md §2 rule as a Rust-regex (rustbpe, Hugging Face ``tokenizers``)."""

SPLIT_PATTERN_PY = SPLIT_PATTERN.replace(r"\x{80}", r"\u0080").replace(r"\x{10FFFF}", r"\U0010FFFF")
"""The same pattern for Python's ``regex`` module and tiktoken's ``pat_str``."""

MAX_VOCAB_SIZE = 1 << 18


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (restored after, also on error). A vocab file
    becomes ~200k containers that all stay alive: the collector's passes over them (and over
    everything else the process holds) were a third of ``Vocab.load`` of 65k merges (0.03 of
    0.09 s), and pausing it does not move that work to later collections (measured)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _int_pairs(items: Sequence, kind: type) -> bool:
    """Whether every item is a ``kind`` (list, tuple) of exactly two exact ``int`` s (no
    ``bool``, no numpy ints). One flat test per item: 65k merges in ~5 ms."""
    return all(type(m) is kind and len(m) == 2 and type(m[0]) is int and type(m[1]) is int
               for m in items)


def _checked_merges(merges: Iterable) -> tuple[tuple[int, int], ...]:
    """``merges`` as a tuple of ``(left_id, right_id)`` tuples of ints (``int()`` of each id
    that is not an exact ``int``), every id defined before its merge.

    Exact ints in tuples (what :meth:`Vocab.from_dict` passes) are kept as they are and the
    ids checked by numpy: ``Vocab.load`` of a 65k-merge file runs no Python loop here.

    Raises:
        ValueError: merge ``k`` refers to an id that is negative or not below ``256 + k``.
    """
    merges = tuple(merges)
    if not _int_pairs(merges, tuple):
        merges = tuple((int(a), int(b)) for a, b in merges)  # lists, numpy ints, bools, ...
    try:
        ids = np.fromiter(chain.from_iterable(merges), np.int64, 2 * len(merges))
        ok = bool(((ids >= 0) & (ids < 256 + np.arange(len(ids)) // 2)).all())
    except OverflowError:  # an id beyond int64: out of range
        ok = False
    if not ok:
        for k, (a, b) in enumerate(merges):
            if not (0 <= a < 256 + k and 0 <= b < 256 + k):
                raise ValueError(f"merge {k} = ({a}, {b}) refers to an id not yet defined")
    return merges


NORMALIZERS = ("nfc", "metaspace", "metaspace-prepend")
"""Text normalizers a vocab may name (:attr:`Vocab.normalizer`)."""


# Readers of the other vocabulary files :meth:`Vocab.load` takes, registered by the module that
# reads them (:mod:`torch_gpubpe.core.vocab_files`, imported with the package), so this module
# needs none of their parsing: "tiktoken" ``(path) -> Vocab``, "tokenizer.json"
# ``(parsed_json, source=...) -> Vocab``.
FOREIGN_FORMATS: dict[str, Callable[..., Vocab]] = {}



def checked_special_tokens(special_tokens) -> tuple[str, ...]:
    """``special_tokens`` as a tuple, checked: each a non-empty ``str`` that UTF-8 can spell (no
    lone surrogate: every file format and encoder writes the spelling as UTF-8), none twice.

    Raises:
        TypeError: one ``str`` given for the list.
        ValueError: naming the first token that is not one.
    """
    if isinstance(special_tokens, str):
        raise TypeError("special_tokens must be a list of str, not one str: pass [token]")
    specials = tuple(special_tokens)
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty str, got {s!r}")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"special token {s!r} is not valid Unicode text (a lone surrogate "
                             f"at {e.start}): it has no UTF-8 spelling") from None
    if len(set(specials)) != len(specials):
        raise ValueError(f"duplicate special tokens in {specials!r}")
    return specials


@dataclass(frozen=True)
class Vocab:
    """A byte-level BPE vocab (DESIGN.md §1).

    Attributes:
        merges: ``(left_id, right_id)`` pairs; merge k creates id ``256 + k``.
        special_tokens: spellings of the special tokens, ids ``num_tokens + i`` (or
            ``special_ids``).
        mode: ``"greedy"`` (longest match, DESIGN.md §4) or ``"bpe"`` (merge order).
        tokens: ``None`` (ids from ``merges``) or the explicit bytes of every ordinary id
            (vocabularies from outside; then ``merges`` is empty). Spellings must be distinct
            unless ``ranks`` are given (then the lowest rank's id is the one emitted, and the
            others decode only: :attr:`shadowed_ids`);
            single bytes with no token (:attr:`missing_bytes`, as in vocabularies that never
            saw some byte values) are allowed here.
        ranks: ``None`` (rank = id) or the merge rank of every id of ``tokens`` (distinct ints;
            lower merges first).
        special_ids: ``None`` (special ids follow the ordinary ones) or the id of each special
            token: ``num_tokens + k`` for the k-th of those outside the table, or the id of the
            table entry that spells it (Hugging Face files list added tokens inside the model's
            vocab too; such a token is special when text is matched, and is never an ordinary
            token the encoder emits: no merge builds it).
        normalizer: ``None`` or how text is normalized before it is split (one of
            :data:`NORMALIZERS`: ``"nfc"``, as Command-R's ``tokenizer.json`` says); every
            :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer` of the vocab applies it.
        units: ``"bytes"`` (byte-level BPE) or ``"chars"`` (SentencePiece BPE: merges start
            from characters, and a character that is no token becomes its byte tokens;
            :mod:`torch_gpubpe.core.sentencepiece`).
        decode_only: ids of the table that are decoded but never encoded (tokens of a
            ``tokenizer.json`` spelled outside its byte-level alphabet, which no text matches).
        ignore_merges: a word that is itself a token is that token (tiktoken; Hugging Face's
            ``ignore_merges``, as in Llama 3), else only merges build tokens (Hugging Face's
            default). The same for every vocab whose tokens BPE can all build.
        pre_tokenizer: the regex family it was trained with (``train(pre_tokenizer=...)``,
            :data:`torch_gpubpe.core.patterns.PATTERN_OF`), which every ``Tokenizer`` of it
            uses (another one is refused); ``None``: not recorded (DESIGN.md §2's split for
            this project's vocabs; a model file's own, as its loader says).
    Raises:
        ValueError: inconsistent merges, tokens, ranks, mode or special tokens.
    """

    merges: tuple[tuple[int, int], ...] = ()
    special_tokens: tuple[str, ...] = ()
    mode: str = "greedy"
    tokens: tuple[bytes, ...] | None = field(default=None, repr=False)
    ranks: tuple[int, ...] | None = field(default=None, repr=False)
    special_ids: tuple[int, ...] | None = field(default=None, repr=False)
    ignore_merges: bool = field(default=True, repr=False)
    normalizer: str | None = None
    decode_only: tuple[int, ...] = field(default=(), repr=False)
    units: str = "bytes"
    pre_tokenizer: str | None = None
    _bytes: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pre_tokenizer is not None and self.pre_tokenizer not in TRAINED_SPLITS:
            raise ValueError(f"pre_tokenizer must be None or one of {TRAINED_SPLITS}, got "
                             f"{self.pre_tokenizer!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.normalizer is not None and self.normalizer not in NORMALIZERS:
            raise ValueError(f"normalizer must be None or one of {NORMALIZERS}, got "
                             f"{self.normalizer!r}")
        if self.units not in ("bytes", "chars") or (self.units == "chars"
                                                    and self.tokens is None):
            raise ValueError(f"units must be 'bytes' or 'chars' (with a tokens table), got "
                             f"{self.units!r}")
        if self.tokens is not None:
            self._init_table()
            return
        if self.ranks is not None or self.special_ids is not None or self.decode_only:
            raise ValueError("ranks, special_ids and decode_only need an explicit tokens table")
        merges = _checked_merges(self.merges)
        specials = checked_special_tokens(self.special_tokens)
        object.__setattr__(self, "merges", merges)
        object.__setattr__(self, "special_tokens", specials)
        object.__setattr__(self, "_bytes", tuple(token_bytes(merges)))
        if len(self) > MAX_VOCAB_SIZE:
            raise ValueError(f"vocab size {len(self)} is above the maximum {MAX_VOCAB_SIZE}")

    def _init_table(self) -> None:
        """Validate an explicit id → bytes table (vocabularies from outside)."""
        if self.merges:
            raise ValueError("give either merges or an explicit tokens table, not both")
        toks = tuple(bytes(t) for t in self.tokens)
        if any(not t for t in toks):
            raise ValueError(f"token id {next(i for i, t in enumerate(toks) if not t)} is empty")
        dec = set(self.decode_only)
        if len(set(toks)) != len(toks) and self.ranks is None:
            seen: dict[bytes, int] = {}
            for i, t in enumerate(toks):
                if i in dec:
                    continue
                if t in seen:
                    raise ValueError(f"token ids {seen[t]} and {i} both spell {t!r}")
                seen[t] = i
        if self.ranks is not None:
            ranks = tuple(int(r) for r in self.ranks)
            if len(ranks) != len(toks) or len(set(ranks)) != len(ranks):
                raise ValueError("ranks must hold one distinct rank per token")
            object.__setattr__(self, "ranks", ranks)
        specials = checked_special_tokens(self.special_tokens)
        if self.special_ids is not None:
            sids = tuple(int(i) for i in self.special_ids)
            outside = [i for i in sids if i >= len(toks)]
            if len(sids) != len(specials) or outside != list(range(len(toks), len(toks)
                                                                        + len(outside))):
                raise ValueError("special_ids must give each special token an id: the ids "
                                 "after the table in order, or a table entry spelling it")
            for s, i in zip(specials, sids):
                if i < len(toks) and toks[i] != s.encode("utf-8"):
                    raise ValueError(f"special token {s!r} has id {i}, which spells {toks[i]!r}")
            object.__setattr__(self, "special_ids", None if outside == list(sids) else sids)
        dec = tuple(sorted({int(i) for i in self.decode_only}))
        if dec and not 0 <= dec[0] <= dec[-1] < len(toks):
            raise ValueError("decode_only ids must be ids of the table")
        object.__setattr__(self, "decode_only", dec)
        object.__setattr__(self, "tokens", toks)
        object.__setattr__(self, "merges", ())
        object.__setattr__(self, "special_tokens", specials)
        object.__setattr__(self, "_bytes", toks)
        if len(self) > MAX_VOCAB_SIZE:
            raise ValueError(f"vocab size {len(self)} is above the maximum {MAX_VOCAB_SIZE}")

    def with_mode(self, mode: str) -> Vocab:
        """The same vocab with another encoding ``mode`` (``"greedy"`` or ``"bpe"``)."""
        import dataclasses

        return dataclasses.replace(self, mode=mode)

    @property
    def bpe_ranks(self) -> dict[bytes, int]:
        """Token bytes → merge rank of the ordinary tokens (tiktoken's "mergeable ranks"); for a
        spelling shared by several ids (odd merge lists) the smallest id's."""
        if self.tokens is not None:
            ranks = self.ranks
            return {tb: i if ranks is None else ranks[i] for tb, i in self._lookup().items()}
        out: dict[bytes, int] = {}
        for i, tb in enumerate(self._bytes):
            out.setdefault(tb, i)
        return out

    @property
    def bytes_to_id(self) -> dict[bytes, int]:
        """Token bytes → id of the ordinary tokens (for a shared spelling, the id of the
        lowest rank, or the smallest id)."""
        return dict(self._lookup())

    @property
    def shadowed_ids(self) -> frozenset[int]:
        """Ordinary ids never encoded, only decoded: :attr:`decode_only`, and ids whose bytes
        another id is emitted for (:attr:`bytes_to_id`)."""
        lookup = self._lookup()
        return frozenset(i for i, tb in enumerate(self._bytes) if lookup.get(tb) != i)

    def __repr__(self) -> str:
        table = "" if self.tokens is None else ", table=True"
        mode = "" if self.mode == "greedy" else f", mode={self.mode!r}"
        return (f"Vocab(size={len(self)}, merges={len(self.merges)}, "
                f"special_tokens={list(self.special_tokens)}{mode}{table})")

    # -- sizes and lookups -------------------------------------------------------------------
    # Sizes: ``len(vocab)`` == ``vocab.n_vocab`` == ``vocab.vocab_size`` is the number of ids,
    # special tokens included (tiktoken's ``n_vocab``; ``train(vocab_size=...)`` and the file's
    # ``"vocab_size"``). ``vocab.num_ordinary_tokens`` (alias ``num_tokens``) is 256 + merges
    # (or the size of an outside vocab's table):
    # the ids :meth:`Tokenizer.encode` can emit from text, which is what Hugging Face's
    # ``PreTrainedTokenizer.vocab_size`` counts (it leaves out added tokens; its ``len(tok)``
    # is our ``n_vocab``).
    def __len__(self) -> int:
        """Number of ids: ordinary tokens (256 + merges, or the table) + special tokens
        (= :attr:`n_vocab`)."""
        if self.special_ids is None:
            return self.num_tokens + len(self.special_tokens)
        return self.num_tokens + sum(i >= self.num_tokens for i in self.special_ids)

    @property
    def n_vocab(self) -> int:
        """Number of ids, special tokens included (tiktoken's name; ``len(vocab)``)."""
        return len(self)

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (``len(vocab)``; as ``train(vocab_size=)``).
        Not Hugging Face's ``vocab_size``, which leaves out added tokens: that is
        :attr:`num_ordinary_tokens`."""
        return len(self)

    @property
    def num_ordinary_tokens(self) -> int:
        """Number of ordinary (non-special) ids: 256 + len(merges), or len(tokens) for a vocab
        from outside; special ids start here."""
        return self.num_tokens

    @property
    def num_tokens(self) -> int:
        """Same as :attr:`num_ordinary_tokens` (256 + len(merges), or len(tokens); special tokens
        NOT counted); kept for existing callers: prefer the explicit name."""
        return 256 + len(self.merges) if self.tokens is None else len(self.tokens)

    @property
    def special_token_ids(self) -> dict[str, int]:
        """Special token spelling → id."""
        if self.special_ids is not None:
            return dict(zip(self.special_tokens, self.special_ids))
        return {s: self.num_tokens + i for i, s in enumerate(self.special_tokens)}

    @property
    def missing_bytes(self) -> tuple[int, ...]:
        """The byte values no single-byte token spells (empty for every vocab trained here)."""
        if self.tokens is None:
            return ()
        dec = set(self.decode_only)
        return tuple(sorted(set(range(256)) - {t[0] for i, t in enumerate(self._bytes)
                                               if len(t) == 1 and i not in dec}))

    def _outside_specials(self) -> tuple[str, ...]:
        """The special tokens with ids after the table, in id order."""
        if self.special_ids is None:
            return self.special_tokens
        return tuple(s for s, i in zip(self.special_tokens, self.special_ids)
                     if i >= self.num_tokens)

    def token_to_id(self, token: str | bytes) -> int:
        """Id of any token: a special token's spelling, or an ordinary token's bytes (``bytes``)
        or text (``str``, looked up as its UTF-8 bytes).

        A ``str`` that spells a special token gives the special id; ``bytes`` give the ordinary
        id when there is one (as tiktoken's ``encode_single_token``). When several ids spell the
        same bytes, the smallest (the one :meth:`Tokenizer.encode` emits) is returned.

        Raises:
            KeyError: no token is spelled so (names it and the special tokens).
            TypeError: ``token`` is neither ``str`` nor bytes-like.
        """
        if isinstance(token, str):
            sid = self.special_token_ids.get(token)
            if sid is not None:
                return sid
            key = token.encode("utf-8", "surrogatepass")
        elif isinstance(token, (bytes, bytearray, memoryview)):
            key = bytes(token)
        else:
            raise TypeError(f"a token is str or bytes, got {type(token).__name__}")
        tid = self._lookup().get(key)
        if tid is None and isinstance(token, (bytes, bytearray, memoryview)):
            try:
                tid = self.special_token_ids.get(key.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        if tid is None:
            raise KeyError(f"{token!r} is no token of this vocab: not the bytes of an ordinary "
                           f"token, and not a special token (its special tokens: "
                           f"{list(self.special_tokens)})")
        return tid

    def get_vocab(self) -> dict[bytes | str, int]:
        """Every token → id: ordinary tokens as ``bytes`` (smallest id for shared spellings),
        special tokens as ``str``."""
        out: dict[bytes | str, int] = dict(self._lookup())
        out.update(self.special_token_ids)
        return out

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_ids_by_bytes", None)  # a cache: rebuilt on first lookup, not pickled
        return state

    def _lookup(self) -> dict[bytes, int]:
        table = self.__dict__.get("_ids_by_bytes")
        if table is None:
            table = {}
            ranks = self.ranks if self.tokens is not None else None
            skip = set(self.decode_only)
            for i, tb in enumerate(self._bytes):
                if i in skip:
                    continue
                j = table.setdefault(tb, i)
                if ranks is not None and ranks[i] < ranks[j]:
                    table[tb] = i
            object.__setattr__(self, "_ids_by_bytes", table)
        return table

    @property
    def token_bytes(self) -> tuple[bytes, ...]:
        """Bytes of every ordinary token, indexed by id (length ``num_tokens``)."""
        return self._bytes

    def id_to_bytes(self, token_id: int) -> bytes:
        """Bytes of one id (a special token's UTF-8 spelling for special ids)."""
        if 0 <= token_id < self.num_tokens:
            return self._bytes[token_id]
        if self.num_tokens <= token_id < len(self):
            return self._outside_specials()[token_id - self.num_tokens].encode()
        raise ValueError(f"token id {token_id} is outside the vocab (size {len(self)})")

    # -- decode ------------------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Concatenated bytes of ``ids`` (ints or a 1-D integer array; special ids give their
        spelling).

        Raises:
            ValueError: an id outside ``[0, len(vocab))``, naming the id and its position.
            TypeError: an id that is not an integer (float, bool, str), naming its position.
        """
        table, n, specials = self._bytes, self.num_tokens, self._outside_specials()
        out = []
        for pos, i in enumerate(ids):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(
                    f"token ids must be integers; got {type(i).__name__} {i!r} at position {pos}"
                )
            i = int(i)
            if 0 <= i < n:
                out.append(table[i])
            elif n <= i < len(self):
                out.append(specials[i - n].encode())
            else:
                raise ValueError(
                    f"token id {i} at position {pos} is outside the vocab (size {len(self)})"
                )
        return b"".join(out)

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """``decode_bytes(ids)`` as text (invalid UTF-8 → U+FFFD unless ``errors`` says else);
        with a Metaspace normalizer (SentencePiece), ``▁`` back to spaces and the one put
        before the text dropped, as Hugging Face's decoder does."""
        return self.undo_normalizer(self.decode_bytes(ids).decode("utf-8", errors=errors))

    def undo_normalizer(self, text: str) -> str:
        """Decoded ``text`` as the model's decoder gives it: SentencePiece's ``▁`` as spaces
        (and the leading one of ``"metaspace-prepend"`` dropped); other vocabs: unchanged."""
        if self.normalizer not in ("metaspace", "metaspace-prepend"):
            return text
        text = text.replace("\u2581", " ")
        if self.normalizer == "metaspace-prepend" and text.startswith(" "):
            text = text[1:]
        return text

    # -- file format -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "pre_tokenizer": self.pre_tokenizer or PRE_TOKENIZER,
            "vocab_size": len(self),
            "merges": [list(m) for m in self.merges],
            "special_tokens": list(self.special_tokens),
        }
        if self.mode != "greedy" or self.tokens is not None or self.pre_tokenizer:
            out["version"] = 2
            out["mode"] = self.mode
        if self.tokens is not None:
            out["tokens"] = [b2a_base64(t, newline=False).decode("ascii") for t in self.tokens]
            if self.ranks is not None:
                out["ranks"] = list(self.ranks)
            if self.special_ids is not None:
                out["special_ids"] = list(self.special_ids)
            if self.decode_only:
                out["decode_only"] = list(self.decode_only)
            if not self.ignore_merges:
                out["ignore_merges"] = False
        if self.normalizer is not None:
            out["version"] = 2
            out["mode"] = self.mode
            out["normalizer"] = self.normalizer
        if self.units != "bytes":
            out["units"] = self.units
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocab file (JSON; see the module docstring)."""
        # (json.dumps: its C encoder; json.dump to a file encodes in Python, several times
        # slower on a 65k vocab)
        text = json.dumps(self.to_dict(), ensure_ascii=False)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a vocab file written by :meth:`save` (or ``path/vocab.json`` when ``path`` is a
        folder, as written by ``python -m torch_gpubpe train --out``). A tiktoken file
        (``*.tiktoken``), a Hugging Face ``tokenizer.json`` or a SentencePiece BPE model
        (``*.model``) is read by :func:`torch_gpubpe.core.vocab_files.load_vocab` (mode
        ``"bpe"``).

        Raises:
            VocabNotFoundError: no file there (the message says what is expected).
            VocabFormatError: the file is not valid JSON, not a torch_gpubpe vocab, of another
                version or pre-tokenizer, or its merges are inconsistent; the message names the
                file and what is wrong.
            OSError: the file cannot be read.
        """
        missing(path)
        if os.path.isdir(path):
            path = os.path.join(path, "vocab.json")
        if str(path).endswith(".tiktoken"):
            return FOREIGN_FORMATS["tiktoken"](path)
        if str(path).endswith(".model"):
            return FOREIGN_FORMATS["sentencepiece"](path)
        with _gc_paused():
            try:
                with open(path, encoding="utf-8") as f:
                    obj = json.load(f)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise VocabFormatError(
                    f"{path}: not a torch_gpubpe vocab file (not JSON: {e})") from e
            hf = isinstance(obj, dict) and "model" in obj and "format" not in obj
            if not hf:
                return cls.from_dict(obj, source=str(path))
        return FOREIGN_FORMATS["tokenizer.json"](obj, source=str(path))

    @classmethod
    def from_dict(cls, obj: object, source: str = "<dict>") -> Vocab:
        """Build a vocab from :meth:`to_dict` output; ``VocabFormatError`` if malformed."""
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise VocabFormatError(
                f"{source}: not a torch_gpubpe vocab file (missing \"format\": \"{FORMAT_NAME}\")"
            )
        if obj.get("version") not in FORMAT_VERSIONS:
            raise VocabFormatError(
                f"{source}: unsupported vocab format version {obj.get('version')!r} "
                f"(this torch_gpubpe reads versions {FORMAT_VERSIONS})"
            )
        pre = obj.get("pre_tokenizer")
        if pre != PRE_TOKENIZER and not (obj["version"] >= 2 and pre in TRAINED_SPLITS):
            raise VocabFormatError(
                f"{source}: pre-tokenizer {pre!r} is not supported (expected "
                f"{PRE_TOKENIZER!r} or, version 2, one of {TRAINED_SPLITS})"
            )
        merges, specials = obj.get("merges"), obj.get("special_tokens", [])
        if not isinstance(merges, list) or not _int_pairs(merges, list):
            raise VocabFormatError(f"{source}: \"merges\" must be a list of [left_id, right_id]")
        if not isinstance(specials, list):
            raise VocabFormatError(f"{source}: \"special_tokens\" must be a list of strings")
        mode = obj.get("mode", "greedy") if obj["version"] >= 2 else "greedy"
        tokens, ranks, sids = obj.get("tokens"), obj.get("ranks"), obj.get("special_ids")
        try:
            if tokens is not None:
                if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                    raise ValueError("\"tokens\" must be a list of base64 strings")
                tokens = tuple(base64.b64decode(t, validate=True) for t in tokens)
                if ranks is not None and not (isinstance(ranks, list)
                                              and all(type(r) is int for r in ranks)):
                    raise ValueError("\"ranks\" must be a list of ints")
                if sids is not None and not (isinstance(sids, list)
                                             and all(type(i) is int for i in sids)):
                    raise ValueError("\"special_ids\" must be a list of ints")
            vocab = cls(tuple(map(tuple, merges)), tuple(specials), mode=mode,
                        tokens=tokens, ranks=None if ranks is None else tuple(ranks),
                        special_ids=None if sids is None else tuple(sids),
                        ignore_merges=obj.get("ignore_merges", True) is not False,
                        normalizer=obj.get("normalizer"),
                        decode_only=tuple(obj.get("decode_only") or ()),
                        units=obj.get("units", "bytes"),
                        pre_tokenizer=None if pre == PRE_TOKENIZER else pre)
        except (ValueError, TypeError) as e:
            raise VocabFormatError(f"{source}: {e}") from e
        if "vocab_size" in obj and obj["vocab_size"] != len(vocab):
            raise VocabFormatError(
                f"{source}: vocab_size {obj['vocab_size']} does not match its merges and special "
                f"tokens ({len(vocab)}); the file is damaged"
            )
        return vocab

    @classmethod
    def from_merges(
        cls, merges: Sequence[tuple[int, int]], special_tokens: Sequence[str] = (),
        mode: str = "greedy",
    ) -> Vocab:
        return cls(tuple(tuple(m) for m in merges), tuple(special_tokens), mode=mode)


def vocab_file(path: str | os.PathLike) -> Path:
    """The vocab file ``path`` names: ``path/vocab.json`` for a folder (as ``python -m
    torch_gpubpe train --out`` writes it), else ``path`` itself (a vocab.json, a ``*.tiktoken``
    file or a ``tokenizer.json``). The one rule every ``vocab=`` / ``--vocab`` argument follows."""
    p = Path(path)
    return p / "vocab.json" if p.is_dir() else p


def load_vocab_file(path: str | os.PathLike, *, what: str = "vocab path") -> Vocab:
    """:meth:`Vocab.load` of :func:`vocab_file` ``(path)``.

    Args:
        what: how the message names the argument (``"--vocab"`` in the CLI).
    Raises:
        InputError: no such file (the message says what is expected).
        VocabFormatError, OSError: see :meth:`Vocab.load`.
    """
    missing(path, what)
    return Vocab.load(vocab_file(path))


def missing(path: str | os.PathLike, what: str = "vocab path") -> None:
    """VocabNotFoundError where ``path`` (or its folder's ``vocab.json``) is no file."""
    if not vocab_file(path).is_file():
        raise VocabNotFoundError(
            f"{what} {os.fspath(path)!r}: no such vocab file (expected a vocab.json or the "
            "folder holding one, as `python -m torch_gpubpe train --out` writes, a *.tiktoken "
            "file, a tokenizer.json or a tokenizer.model)")
