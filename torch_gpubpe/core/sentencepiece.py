"""SentencePiece BPE with byte fallback (Llama 2, Mistral, Phi-3 ...), as Hugging Face
tokenizers runs it, on this project's byte-level merge-order encoder (no wgpu, no torch).

Hugging Face's form (``tokenizer.json``): the normalizer writes ``▁`` for every space (and one
before the text: ``Prepend``), there is no pre-tokenizer (a document is one word), and BPE
starts from the word's characters: a character that is a token is one symbol, any other
becomes the byte tokens ``<0xXX>`` of its UTF-8 (byte fallback); then the listed merges apply,
lowest first. The ids are in :func:`vocab_from_spm_hf`'s :class:`~torch_gpubpe.core.vocab.Vocab`
(``units="chars"``): each piece's UTF-8 (a byte token's single byte), and ranks that put every
single-byte symbol first, then the characters, then the merges in their order.

The GPU encoder merges bytes. :func:`byte_units` gives it a table where each character token is
built from its bytes by merges that rank below every listed merge, through *prefix* tokens
(the first 2 or 3 bytes of a character token that are no token themselves): BPE of any text
then forms every character token first and never merges across characters before that, which
is BPE over characters. A character that is no token stops at a prefix token or its single
bytes; a prefix token left in the output is that character's first bytes, which the encoder
expands into their byte tokens (:meth:`ByteUnits.expand`): byte fallback. Single bytes that are
both a character and a byte token (``a`` and ``<0x61>``) are the character (lowest rank); the
byte token is decoded only.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.core.vocab import MAX_VOCAB_SIZE, Vocab
from torch_gpubpe.errors import VocabFormatError

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
METASPACE = "\u2581"
_JOINED = re.compile(rb"(?<!\xe2\x96\x81)\xe2\x96\x81")  # a ▁ after anything but ▁


def joined_to_metaspace(vocab: Vocab) -> bytes | None:
    """The first token of a SentencePiece vocab (``units="chars"``) that holds a code point
    followed by ``▁`` (Gemma's ``>▁</``), or ``None``. Without one, no merge joins the two
    sides of a ``▁`` run's start after another code point, so a document cut there
    (:mod:`torch_gpubpe.core.patterns` ``"metaspace-words"``) gives the ids of the whole."""
    for t in vocab.token_bytes:
        if _JOINED.search(t, 1):
            return t
    return None

# Ranks (any distinct ints order them): single bytes, prefix tokens (byte_units), characters,
# merges, then what no merge builds.
_PREFIX, _CHAR, _MERGE, _LATE = 1 << 19, 1 << 20, 1 << 22, 1 << 24


def _metaspace_normalizer(obj: dict, source: str) -> str:
    """``"metaspace-prepend"`` (``Prepend("▁")`` then ``Replace(" ", "▁")``, Llama 2's) or
    ``"metaspace"`` (``Replace`` only), from a SentencePiece ``tokenizer.json``."""
    pre, norm = obj.get("pre_tokenizer"), obj.get("normalizer")
    if pre is not None:
        raise VocabFormatError(
            f"{source}: a SentencePiece BPE file with a pre-tokenizer ({pre.get('type')!r}) is "
            "not supported yet; the form with a normalizer (Prepend, Replace) and none is")
    steps = norm.get("normalizers") if isinstance(norm, dict) and norm.get(
        "type") == "Sequence" else [norm]
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}
    if steps == [{"type": "Prepend", "prepend": METASPACE}, replace]:
        return "metaspace-prepend"
    if steps == [replace]:
        return "metaspace"
    raise VocabFormatError(f"{source}: SentencePiece BPE normalizer {norm!r} is not supported "
                           "(Prepend('▁') + Replace(' ', '▁'), or Replace alone, are)")


def vocab_from_spm_hf(obj: dict, special: dict[str, int], source: str = "<tokenizer.json>",
                      mode: str = "bpe") -> Vocab:
    """The :class:`Vocab` of a SentencePiece BPE ``tokenizer.json`` (``model.byte_fallback``),
    whose ``added_tokens`` are ``special`` (spelling → id, checked by the caller).

    Raises:
        VocabFormatError: another normalizer or a pre-tokenizer, a piece holding a character
            that is no piece, merges that merge-order BPE would not reproduce.
    """
    from torch_gpubpe.core.bpe_tables import bpe_tables, check_merge_list

    model = obj["model"]
    normalizer = _metaspace_normalizer(obj, source)
    if mode != "bpe":
        raise VocabFormatError(f"{source}: SentencePiece BPE is merge-order BPE (mode='bpe')")
    hv = model.get("vocab")
    if not isinstance(hv, dict):
        raise VocabFormatError(f"{source}: model.vocab must be an object")
    n = len(hv)
    toks: list[bytes | None] = [None] * n
    byte_ids = {}
    for s, i in hv.items():
        if not isinstance(i, int) or not 0 <= i < n or toks[i] is not None:
            raise VocabFormatError(f"{source}: model.vocab ids must be 0..{n - 1}, each once "
                                   f"(token {s!r} has {i!r})")
        m = _BYTE_TOKEN.fullmatch(s)
        if m:
            toks[i] = bytes([int(m.group(1), 16)])
            byte_ids[toks[i][0]] = i
        else:
            toks[i] = s.encode("utf-8")
    if len(byte_ids) != 256:
        raise VocabFormatError(f"{source}: byte fallback needs the 256 tokens <0x00>..<0xFF> "
                               f"({256 - len(byte_ids)} missing)")

    ranks = [_LATE + i for i in range(n)]
    for b, i in byte_ids.items():
        c = hv.get(chr(b)) if b < 0x80 else None
        ranks[i] = b if c is None else _LATE + i
        if c is not None:
            ranks[c] = b
    chars = sorted(i for s, i in hv.items() if len(s) == 1 and ord(s) >= 0x80
                   and s not in special)
    for k, i in enumerate(chars):
        ranks[i] = _CHAR + k
    merges = model.get("merges", [])
    first: dict[str, int] = {}
    pairs: list[tuple[int, int, int]] = []
    for k, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not isinstance(pair, list) or len(pair) != 2 or any(p not in hv for p in pair):
            raise VocabFormatError(f"{source}: merge {k} {m!r} is not a pair of pieces")
        c = hv.get(pair[0] + pair[1])
        if c is None:
            raise VocabFormatError(f"{source}: merge {k} {m!r} makes no piece of the vocab")
        first.setdefault(pair[0] + pair[1], k)
        pairs.append((hv[pair[0]], hv[pair[1]], c))
    for s, k in first.items():
        ranks[hv[s]] = _MERGE + k
    for s, i in hv.items():
        if s in special or _BYTE_TOKEN.fullmatch(s):
            continue
        for ch in s:
            if ch not in hv:
                raise VocabFormatError(f"{source}: piece {s!r} holds {ch!r}, which is no piece: "
                                       "BPE over characters cannot build it")
    names = tuple(special)
    outside = sorted(special[s] for s in names if special[s] >= n)
    if outside != list(range(n, n + len(outside))):
        raise VocabFormatError(f"{source}: added token ids must follow the vocab contiguously")
    for s in names:
        if special[s] < n and toks[special[s]] != s.encode("utf-8"):
            raise VocabFormatError(f"{source}: added token {s!r} has id {special[s]}, which "
                                   f"model.vocab gives to {toks[special[s]]!r}")
    try:
        vocab = Vocab(tokens=tuple(toks), ranks=tuple(ranks), special_tokens=names,
                      special_ids=tuple(special[s] for s in names), mode="bpe",
                      ignore_merges=bool(model.get("ignore_merges", False)),
                      normalizer=normalizer, units="chars")
        units = byte_units(vocab)
        t = bpe_tables(units.vocab)
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e
    try:  # (a split into a prefix token: a character BPE builds from its bytes)
        check_merge_list(pairs, ranks, t.split, lambda i: toks[i] if i < n else i,
                         skip=lambda c, sp: sp[0] >= n or sp[0] == c)
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e
    return vocab


@dataclass(frozen=True)
class ByteUnits:
    """The byte-level table the encoder runs for a ``units="chars"`` vocab (module docs).

    Attributes:
        vocab: the vocab's tokens, its special tokens after the table (decoded only), then the
            prefix tokens, ids from ``first_prefix`` on.
        first_prefix: the first prefix token's id.
        expansion: per prefix token, the byte-token ids of its bytes.
    """

    vocab: Vocab
    first_prefix: int
    expansion: tuple[tuple[int, ...], ...]

    @functools.cached_property
    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(table, lens)``: row k of the uint32 ``table`` holds prefix token k's byte
        tokens, ``lens[k]`` (uint8) how many."""
        width = max(map(len, self.expansion), default=1)
        table = np.zeros((len(self.expansion), width), np.uint32)
        for k, e in enumerate(self.expansion):
            table[k, :len(e)] = e
        return table, np.fromiter(map(len, self.expansion), np.uint8, len(self.expansion))

    def expand(self, ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ids`` (and document ``offsets``) with each prefix token replaced by its byte
        tokens; the same arrays when there is none."""
        table, lens = self.tables
        if ids.dtype in (np.uint16, np.uint32) and len(ids) == int(offsets[-1]):
            done = str_pack.expand_ids(ids, offsets, self.first_prefix, table, lens)
            if done is not None:  # (compiled, on the packing threads)
                return done
        at = np.flatnonzero(ids >= self.first_prefix)
        if not len(at):
            return ids, offsets
        width = table.shape[1]
        which = ids[at].astype(np.int64) - self.first_prefix
        extra = lens[which].astype(np.int64) - 1
        counts = np.ones(len(ids), np.uint8)
        counts[at] += extra.astype(np.uint8)
        out = np.repeat(ids, counts)
        shift = np.zeros(len(at) + 1, np.int64)
        np.cumsum(extra, out=shift[1:])
        pos = at + shift[:-1]   # where each prefix token's bytes go
        for j in range(width):
            m = lens[which] > j
            out[pos[m] + j] = table[which[m], j]
        return out, offsets + shift[np.searchsorted(at, offsets, side="left")]


def byte_units(vocab: Vocab) -> ByteUnits:
    """The encoder's byte-level table of a ``units="chars"`` vocab (module docs)."""
    toks = list(vocab.token_bytes)
    ranks = list(vocab.ranks) if vocab.ranks is not None else list(range(len(toks)))
    lookup = vocab.bytes_to_id
    decode_only = list(vocab.decode_only)
    for k, i in enumerate(range(vocab.num_tokens, len(vocab))):
        toks.append(vocab.id_to_bytes(i))
        ranks.append(_LATE * 2 + k)
        decode_only.append(i)
    prefixes = set()
    for tb, i in lookup.items():
        if len(tb) < 3:
            continue
        try:
            if len(tb.decode("utf-8")) != 1:
                continue
        except UnicodeDecodeError:
            continue
        prefixes.update(tb[:k] for k in range(2, len(tb)) if tb[:k] not in lookup)
    first = len(toks)
    ordered = sorted(prefixes, key=lambda p: (len(p), p))
    if first + len(ordered) > MAX_VOCAB_SIZE:
        raise ValueError(f"this SentencePiece BPE vocab of {len(vocab):,} ids needs "
                         f"{len(ordered):,} prefix tokens more on the GPU, above the "
                         f"{MAX_VOCAB_SIZE:,} ids the merge-order encoder holds")
    for k, p in enumerate(ordered):
        toks.append(p)
        ranks.append(_PREFIX + k)
    expansion = tuple(tuple(lookup[bytes([b])] for b in p) for p in ordered)
    table = Vocab(tokens=tuple(toks), ranks=tuple(ranks), decode_only=tuple(decode_only),
                  mode="bpe", ignore_merges=vocab.ignore_merges)
    return ByteUnits(vocab=table, first_prefix=first, expansion=expansion)
