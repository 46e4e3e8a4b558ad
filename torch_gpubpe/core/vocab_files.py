"""Vocabularies from outside: tiktoken files and Hugging Face ``tokenizer.json``.

Both load as a :class:`~torch_gpubpe.core.vocab.Vocab` with an explicit id → bytes table, merge ranks
and ``mode="bpe"`` (merge-order BPE, ids identical to tiktoken / Hugging Face). A ``Vocab``
holds no split: ``Tokenizer(vocab)`` splits by this project's DESIGN.md §2 rule;
``Tokenizer.from_tiktoken(path)`` / ``Tokenizer.from_hf(path)`` apply the file's own pattern
(:func:`tiktoken_metadata`, the ``tokenizer.json`` pre-tokenizer) on the GPU
(:mod:`torch_gpubpe.encoding.regex_pretok`).

tiktoken (``name.tiktoken``)
    One line per token: ``base64(token bytes) rank``; rank = token id. Ids must be dense
    (0..N-1). An optional JSON sidecar ``name.tiktoken.json`` (as in ``../shared/vocabs``)
    gives ``"special_tokens": {spelling: id}``; their ids must follow the ordinary tokens
    contiguously.

Hugging Face ``tokenizer.json``
    Accepted: ``model.type == "BPE"`` over the byte-level alphabet (GPT-2's ``bytes_to_unicode``;
    the pre-tokenizer has a ``ByteLevel`` step), no normalizer but NFC (recorded in the vocab),
    no dropout, no ``continuing_subword_prefix`` / ``end_of_word_suffix``, no
    ``byte_fallback``. The rank of a token is the index of the merge that creates it (bytes
    first); ``ignore_merges`` is kept. Added tokens are special ids, after the ordinary ones or
    at the model.vocab entry that spells them. Tokens spelled outside the byte-level alphabet
    (Command-R's raw "™") that no merge uses can never match a byte-level word: they keep their
    UTF-8 and are never emitted (``ignore_merges`` off). Rejected with
    :class:`~torch_gpubpe.errors.VocabFormatError`: WordPiece, Unigram, WordLevel, other
    normalizers, and merge lists that merge-order by rank would not reproduce (a token none of
    whose merges is what BPE of its bytes gives last, or merges of one token apart).

Example::

    >>> from torch_gpubpe.core.vocab_files import load_tiktoken
    >>> v = load_tiktoken("../shared/vocabs/gpt2.tiktoken")  # doctest: +SKIP
    >>> len(v), v.mode                                        # doctest: +SKIP
    (50257, 'bpe')
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path

from torch_gpubpe.errors import VocabFormatError
from torch_gpubpe.core.vocab import FOREIGN_FORMATS, Vocab


def _specials_in_order(specials: dict, num_tokens: int, source: str) -> tuple[str, ...]:
    items = sorted(((int(i), s) for s, i in specials.items()), key=lambda x: x[0])
    want = list(range(num_tokens, num_tokens + len(items)))
    if [i for i, _ in items] != want:
        raise VocabFormatError(
            f"{source}: special token ids {[i for i, _ in items][:5]}... must follow the "
            f"{num_tokens} ordinary tokens contiguously ({num_tokens}..)")
    return tuple(s for _, s in items)


def tiktoken_metadata(path: str | os.PathLike) -> dict:
    """The JSON sidecar ``path + ".json"`` (``pattern``, ``special_tokens``), or ``{}``."""
    side = Path(str(path) + ".json")
    if not side.is_file():
        return {}
    try:
        obj = json.loads(side.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabFormatError(f"{side}: not JSON ({e})") from e
    if not isinstance(obj, dict):
        raise VocabFormatError(f"{side}: expected a JSON object")
    return obj


def load_tiktoken(path: str | os.PathLike, special_tokens: dict[str, int] | None = None,
                  mode: str = "bpe") -> Vocab:
    """Read a tiktoken BPE file (``base64 rank`` lines) as a merge-order :class:`Vocab`.

    Args:
        path: the ``.tiktoken`` file.
        special_tokens: spelling → id; default: the sidecar's ``special_tokens``, else none.
        mode: the vocab's encoding mode (``"bpe"``; ``"greedy"`` for longest match).
    Raises:
        VocabFormatError: a malformed line (names the line), ranks that are not 0..N-1, a
            missing single byte, duplicate tokens, or special ids that do not follow the tokens.
        OSError: the file cannot be read.
    """
    source = str(path)
    raw = Path(path).read_bytes()
    toks: dict[int, bytes] = {}
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected 'base64 rank'")
            tb, r = base64.b64decode(parts[0], validate=True), int(parts[1])
        except (ValueError, binascii.Error) as e:
            raise VocabFormatError(f"{source}:{lineno}: not a tiktoken line ({e})") from e
        if r in toks:
            raise VocabFormatError(f"{source}:{lineno}: rank {r} appears twice")
        toks[r] = tb
    n = len(toks)
    if n == 0 or min(toks) != 0 or max(toks) != n - 1:
        raise VocabFormatError(f"{source}: ranks must be 0..{n - 1} without gaps "
                               f"(found {min(toks, default=None)}..{max(toks, default=None)})")
    if special_tokens is None:
        special_tokens = tiktoken_metadata(path).get("special_tokens", {})
    specials = _specials_in_order(dict(special_tokens), n, source)
    try:
        return Vocab(tokens=tuple(toks[i] for i in range(n)), special_tokens=specials, mode=mode)
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e


def _unicode_to_bytes() -> dict[str, int]:
    from torch_gpubpe.core.export import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def _has_byte_level(pre: object) -> bool:
    if not isinstance(pre, dict):
        return False
    if pre.get("type") == "ByteLevel":
        return True
    if pre.get("type") == "Sequence":
        return any(_has_byte_level(p) for p in pre.get("pretokenizers", []))
    return False


def _added_tokens(obj: dict, source: str) -> dict[str, int]:
    """``added_tokens`` as spelling → id. Raises VocabFormatError for a malformed entry, and
    for ``lstrip`` / ``rstrip`` / ``single_word`` (whitespace taken with the token, or a match
    only as a whole word: not how this project matches special tokens)."""
    out = {}
    for a in obj.get("added_tokens") or []:
        if not (isinstance(a, dict) and isinstance(a.get("content"), str) and a["content"]
                and isinstance(a.get("id"), int)):
            raise VocabFormatError(f"{source}: added token {a!r} needs a \"content\" string and "
                                   "an \"id\"")
        for flag in ("lstrip", "rstrip", "single_word"):
            if a.get(flag):
                raise VocabFormatError(f"{source}: added token {a['content']!r} has {flag}: "
                                       "not supported (special tokens match their spelling "
                                       "only)")
        out[a["content"]] = a["id"]
    return out


def vocab_from_hf_dict(obj: dict, source: str = "<tokenizer.json>", mode: str = "bpe") -> Vocab:
    """A merge-order :class:`Vocab` from a parsed Hugging Face ``tokenizer.json`` (see the
    module docstring for what is accepted).

    Raises:
        VocabFormatError: not a byte-level BPE tokenizer, or one this project cannot reproduce;
            the message names the field.
    """
    model = obj.get("model")
    if not isinstance(model, dict):
        raise VocabFormatError(f"{source}: no \"model\" object: not a Hugging Face tokenizer.json")
    kind = model.get("type", "BPE" if "merges" in model else None)
    if kind != "BPE":
        hint = ""
        if kind == "WordPiece" and model.get("continuing_subword_prefix") == "":
            # (export.py's form of a greedy-mode vocab: longest match, no "##" prefix)
            hint = ("; it looks like torch_gpubpe's export of a greedy-mode vocab: load the "
                    "vocab.json saved beside it, e.g. Tokenizer('<its folder>')")
        raise VocabFormatError(f"{source}: model type {kind!r} is not supported; only byte-level "
                               f"BPE (WordPiece, Unigram and WordLevel are not BPE merges){hint}")
    if model.get("byte_fallback"):
        from torch_gpubpe.core.sentencepiece import vocab_from_spm_hf

        return vocab_from_spm_hf(obj, _added_tokens(obj, source), source, mode)
    if "\u2581" in json.dumps([obj.get("normalizer"), obj.get("pre_tokenizer")],
                              ensure_ascii=False):
        raise VocabFormatError(f"{source}: \"▁\" for spaces without byte fallback: a "
                               "SentencePiece vocabulary this project does not encode (BPE with "
                               "byte fallback and byte-level BPE are)")
    normalizer = None
    if obj.get("normalizer") not in (None, {}):
        kind = obj["normalizer"].get("type") if isinstance(obj["normalizer"], dict) else None
        if kind != "NFC":
            raise VocabFormatError(f"{source}: a normalizer ({kind!r}) is not supported: the "
                                   "GPU encodes the text's UTF-8 as it is, or after NFC")
        normalizer = "nfc"
    for key in ("dropout",):
        if model.get(key) not in (None, 0, 0.0):
            raise VocabFormatError(f"{source}: model.{key} = {model[key]!r} is not supported")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key) not in (None, ""):
            raise VocabFormatError(f"{source}: model.{key} = {model[key]!r} is not byte-level BPE")
    if model.get("byte_fallback"):
        raise VocabFormatError(f"{source}: model.byte_fallback is not byte-level BPE")
    if not _has_byte_level(obj.get("pre_tokenizer")):
        raise VocabFormatError(f"{source}: the pre-tokenizer has no ByteLevel step: tokens are "
                               "not over the byte-level alphabet")
    u2b = _unicode_to_bytes()
    hv = model.get("vocab")
    if not isinstance(hv, dict):
        raise VocabFormatError(f"{source}: model.vocab must be an object")
    n = len(hv)
    toks: list[bytes | None] = [None] * n
    raw = []  # tokens spelled outside the byte-level alphabet
    for s, i in hv.items():
        if not isinstance(i, int) or not 0 <= i < n or toks[i] is not None:
            raise VocabFormatError(f"{source}: model.vocab ids must be 0..{n - 1}, each once "
                                   f"(token {s!r} has {i!r})")
        try:
            toks[i] = bytes(u2b[c] for c in s)
        except KeyError:
            toks[i] = s.encode("utf-8")
            raw.append(s)
    merges = model.get("merges", [])
    tb_set = set(toks)
    rank = {}
    for b in range(256):  # (a byte the vocab lacks stays out: Hugging Face drops it from words)
        if bytes([b]) in tb_set:
            rank[bytes([b])] = b
    for k, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not isinstance(pair, list) or len(pair) != 2:
            raise VocabFormatError(f"{source}: merge {k} {m!r} is not a pair")
        try:
            merged = bytes(u2b[c] for c in pair[0] + pair[1])
        except KeyError as e:
            raise VocabFormatError(f"{source}: merge {k} {m!r} is outside the alphabet") from e
        if merged not in rank:
            rank[merged] = 256 + k
    missing = [t for t in rank if t not in tb_set]
    if missing:
        raise VocabFormatError(f"{source}: merge result {missing[0]!r} is not in the vocab")
    extra = 256 + len(merges)
    ranks = []
    raw_ids = {hv[s] for s in raw}
    for i, t in enumerate(toks):
        if i in raw_ids:  # after every merge, its own rank (its bytes may be another's)
            ranks.append(extra)
            extra += 1
            continue
        if t not in rank:  # a token no merge creates: after every merge (unreachable)
            rank[t] = extra
            extra += 1
        ranks.append(rank[t])
    # Ranks in id order (bytes first, in any order: single bytes are never merged into): keep
    # rank = id, so that the vocab exports to tiktoken (rank = id) unchanged.
    order = sorted(range(n), key=lambda i: (len(toks[i]) > 1, ranks[i] if len(toks[i]) > 1
                                            else 0, i))
    if order == list(range(n)):
        ranks = None
    specials = _added_tokens(obj, source)
    inside = {s: i for s, i in specials.items() if isinstance(i, int) and i < n}
    for s, i in inside.items():  # Hugging Face files list them in model.vocab too
        if toks[i] != s.encode("utf-8"):
            raise VocabFormatError(f"{source}: added token {s!r} has id {i}, which model.vocab "
                                   f"gives to {toks[i]!r}")
    outside = _specials_in_order({s: i for s, i in specials.items() if s not in inside}, n,
                                 source)
    names = tuple(inside) + outside
    try:
        vocab = Vocab(tokens=tuple(toks), ranks=None if ranks is None else tuple(ranks),
                      special_tokens=names, mode=mode,
                      special_ids=(*inside.values(), *range(n, n + len(outside))),
                      ignore_merges=bool(model.get("ignore_merges", False)),
                      normalizer=normalizer, decode_only=tuple(raw_ids))
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e
    # Merge-order by rank (tiktoken) must give back each merge of the file.
    from torch_gpubpe.core.bpe_tables import bpe_tables, check_merge_list

    try:
        t = bpe_tables(vocab)
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e
    ids = vocab.bytes_to_id
    pairs = []
    for m in merges:
        pair = m.split(" ") if isinstance(m, str) else m
        a = ids[bytes(u2b[c] for c in pair[0])]
        b = ids[bytes(u2b[c] for c in pair[1])]
        pairs.append((a, b, ids[vocab.token_bytes[a] + vocab.token_bytes[b]]))
    try:
        check_merge_list(pairs, {c: rank[vocab.token_bytes[c]] for _, _, c in pairs}, t.split,
                         lambda i: vocab.token_bytes[i])
    except ValueError as e:
        raise VocabFormatError(f"{source}: {e}") from e
    return vocab


def load_hf_tokenizer(path: str | os.PathLike, mode: str = "bpe") -> Vocab:
    """Read a Hugging Face ``tokenizer.json`` (or a folder holding one) as a merge-order
    :class:`Vocab`; see :func:`vocab_from_hf_dict`.

    Raises:
        VocabFormatError: not JSON, or not a tokenizer this project can reproduce.
        OSError: the file cannot be read.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VocabFormatError(f"{p}: not JSON ({e})") from e
    if not isinstance(obj, dict):
        raise VocabFormatError(f"{p}: not a Hugging Face tokenizer.json")
    return vocab_from_hf_dict(obj, source=str(p), mode=mode)


def load_vocab(path: str | os.PathLike) -> Vocab:
    """Any vocab file: this project's ``vocab.json`` (or a folder with it), ``*.tiktoken``, a
    Hugging Face ``tokenizer.json`` (by content), or a SentencePiece ``*.model``. Raises ``VocabFormatError`` / ``OSError``."""
    return Vocab.load(path)


def load_sentencepiece(path: str | os.PathLike) -> Vocab:
    """A SentencePiece BPE ``tokenizer.model`` (:mod:`torch_gpubpe.core.spm_model`; encoded
    with no split, ``"whole"``). Raises ``VocabFormatError`` (named), ``ImportError``, ``OSError``."""
    from torch_gpubpe.core.spm_model import hf_dict_from_model

    return vocab_from_hf_dict(hf_dict_from_model(path), str(path))


FOREIGN_FORMATS.update({"tiktoken": load_tiktoken, "tokenizer.json": vocab_from_hf_dict,
                        "sentencepiece": load_sentencepiece})
