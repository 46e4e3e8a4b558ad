"""Token offsets ("offset mapping", Hugging Face's ``return_offsets_mapping=True``) from the
GPU encoder's ids: each token's ``[start, end)`` span in its document, computed from the token
lengths of the vocab and the document's UTF-8 bytes (no re-tokenization on the CPU).

Spans follow Hugging Face ``tokenizers``' byte-level BPE exactly:

* ``str`` documents: spans in characters (code points of the ``str`` given). A token that
  starts or ends inside a multi-byte character spans that whole character: ``start`` is the
  character holding its first byte, ``end`` the one after the character holding its last byte
  (the ``ByteLevel`` pre-tokenizer maps each byte to the character it came from). So two
  tokens of one emoji both get ``(i, i + 1)``, and ``" 日"``'s first byte, merged with the space,
  gives ``(i, i + 2)``.
* ``bytes`` documents (any bytes, not necessarily UTF-8): spans in bytes.
* A special token spelled in the text (``allowed_special``) spans its spelling; an id put
  around a document (``bos_id`` / ``eos_id``, a post-processor's template) gets ``(0, 0)``, as
  Hugging Face gives the tokens its post-processor adds.
* ``trim_offsets=True``: Hugging Face's ``ByteLevel`` / ``RobertaProcessing`` post-processor
  with ``trim_offsets``: leading and trailing spaces of a token are cut from its span (a token
  of spaces only becomes empty at its end).

Text is turned into bytes as the encoder does (:func:`torch_gpubpe.encoding.batch_pack.pack_batch`:
lone surrogates → U+FFFD, one character; a surrogate pair → its character, whose span then
covers both code units of the ``str``). ``tokenizers`` refuses lone surrogates; on the text
with them replaced its spans equal these.

Example::

    >>> from torch_gpubpe import Vocab
    >>> from torch_gpubpe.encoding.tokenizer import Tokenizer
    >>> tok = Tokenizer(Vocab.from_merges([(104, 105)]))             # "hi"
    >>> enc = tok.encode_batch(["hi é", b"hi\\xff"])
    >>> [o.tolist() for o in offsets_mapping(tok, ["hi é", b"hi\\xff"], enc)]
    [[[0, 2], [2, 3], [3, 4], [3, 4]], [[0, 2], [2, 3]]]
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.encoding.batch_pack import pack_batch
from torch_gpubpe.errors import InputError

# Per vocab (keyed by id, checked through a weak reference: a Vocab's hash would read all its
# tokens): the byte length of every id, and the spaces Hugging Face trims at each end.
_TABLES: dict[int, tuple[weakref.ref, dict[str, np.ndarray]]] = {}

# Rust's char::is_whitespace (Unicode White_Space), which Hugging Face's trimming tests on a
# special token's characters; Python's str.isspace also takes U+001C..U+001F.
_WHITE_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                         "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def _vocab_table(vocab: Vocab, name: str) -> np.ndarray:
    """``"lengths"`` (bytes of each id, special ids: of their spelling), ``"lead"`` /
    ``"trail"`` (spaces at each end that trimming cuts), int64 of shape ``(len(vocab),)``,
    built once per vocab."""
    key = id(vocab)
    entry = _TABLES.get(key)
    if entry is None or entry[0]() is not vocab:
        for k in [k for k, (ref, _) in list(_TABLES.items()) if ref() is None]:
            del _TABLES[k]
        entry = (weakref.ref(vocab), {})
        _TABLES[key] = entry
    tables = entry[1]
    if name not in tables:
        toks = vocab.token_bytes
        specials = vocab.special_token_ids
        if name == "lengths":
            t = np.zeros(len(vocab), np.int64)
            t[:len(toks)] = np.fromiter(map(len, toks), np.int64, len(toks))
            for s, i in specials.items():
                t[i] = len(s.encode())
        else:
            # Ordinary tokens are byte-level strings, where only the space (Ġ) is whitespace;
            # a special token is its spelling.
            strip = bytes.lstrip if name == "lead" else bytes.rstrip
            t = np.zeros(len(vocab), np.int64)
            t[:len(toks)] = np.fromiter((len(b) - len(strip(b, b" ")) for b in toks), np.int64,
                                        len(toks))
            for s, i in specials.items():
                chars = s if name == "lead" else s[::-1]
                t[i] = next((k for k, c in enumerate(chars) if c not in _WHITE_SPACE), len(s))
        tables[name] = t
    return tables[name]


def _surrogate_pair_spans(text: str) -> tuple[np.ndarray, np.ndarray]:
    """For a ``str`` holding surrogate pairs: per character of its UTF-8 form, where it starts
    and ends in ``text`` (a pair is one character there, two code units here)."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    high = (codes >= 0xD800) & (codes < 0xDC00)
    low = (codes >= 0xDC00) & (codes < 0xE000)
    pair = np.zeros(len(codes), bool)   # a high surrogate followed by a low one
    pair[:-1] = high[:-1] & low[1:]
    second = np.zeros(len(codes), bool)
    second[1:] = pair[:-1]
    starts = np.flatnonzero(~second)
    return starts, starts + 1 + pair[starts]


def offsets_mapping(tok, texts: Sequence[str | bytes], enc: BatchEncoding, *,
                    bos_id: int | None = None, eos_id: int | None = None,
                    trim_offsets: bool = False, prefix_space: bool = False
                    ) -> list[np.ndarray]:
    """Each token's ``[start, end)`` span in its document, as Hugging Face's
    ``encode(text).offsets`` (module docstring).

    Args:
        tok: the :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer` that encoded ``texts``.
        texts: the documents, ``str`` or bytes-like, as given to ``tok.encode_batch``.
        enc: the :class:`BatchEncoding` it returned (special ids spelled in the text included).
        bos_id, eos_id: the ids ``submit`` / ``encode_batches`` put before / after every
            document (their spans are ``(0, 0)``); None: none was put.
        trim_offsets: cut leading and trailing spaces from each span (Hugging Face's
            post-processor option of that name).
        prefix_space: that post-processor's ``add_prefix_space``: a document's first token (or
            one starting at 0) keeps a single leading space, as the one it would have added.
    Returns:
        Per document an ``np.int64`` array of shape ``(num_tokens, 2)``: characters (code
        points) for ``str`` documents, bytes for bytes documents.
    Raises:
        InputError: a vocab with a normalizer (SentencePiece, NFC), whose spans this does not
            compute yet; ``enc`` that does not encode ``texts`` (another number of documents,
            tokens that spell another number of bytes than a document holds: names it), or
            that lacks ``bos_id`` / ``eos_id`` where given.
    """
    vocab = tok.vocab
    if tok.normalizer is not None or vocab.units != "bytes":
        raise InputError(f"offsets are not supported for normalized vocabularies yet: this "
                         f"vocab's normalizer ({tok.normalizer or 'SentencePiece'!r}) changes "
                         "the text before it is tokenized, so its tokens do not spell spans of "
                         "the text given; use a byte-level vocab without a normalizer")
    if not isinstance(texts, (list, tuple)):
        texts = list(texts) if not isinstance(texts, (str, bytes, bytearray)) else texts
    data, doc_bytes = pack_batch(texts)
    doc_bytes = np.asarray(doc_bytes, np.int64)
    n = len(doc_bytes) - 1
    tok_offsets = np.asarray(enc.offsets, np.int64)
    if len(tok_offsets) != n + 1 or tok_offsets[-1] != len(enc.ids):
        raise InputError(f"enc holds {len(tok_offsets) - 1} documents, texts {n}: pass the "
                         "BatchEncoding that encode_batch(texts) returned")
    ids = np.asarray(enc.ids).astype(np.int64, copy=False)
    lengths = _vocab_table(vocab, "lengths")
    if len(ids) and (ids.min() < 0 or ids.max() >= len(lengths)):
        raise InputError(f"enc holds ids outside this vocab (0..{len(lengths) - 1})")

    # The ids put around each document spell no text.
    added = np.zeros(len(ids), bool)
    ntok = np.diff(tok_offsets)
    need = (bos_id is not None) + (eos_id is not None)
    short = np.flatnonzero(ntok < need)
    if len(short):
        raise InputError(f"bos_id={bos_id}, eos_id={eos_id}: document {int(short[0])} of enc "
                         f"has {int(ntok[short[0]])} tokens, fewer than the ids put around it")
    for name, tid, at in (("bos_id", bos_id, tok_offsets[:-1]),
                          ("eos_id", eos_id, tok_offsets[1:] - 1)):
        if tid is None:
            continue
        bad = np.flatnonzero(ids[at] != tid)
        if len(bad):
            raise InputError(f"{name}={tid}: document {int(bad[0])} of enc does not "
                             f"{'start' if name == 'bos_id' else 'end'} with it")
        added[at] = True
    tok_len = np.where(added, 0, lengths[ids])

    # Token byte bounds, global over the packed batch: documents and their tokens are both
    # back to back, so once every document's tokens spell its bytes the sums line up.
    ends = np.cumsum(tok_len)
    spelled = np.concatenate([[0], ends])[tok_offsets]
    wrong = np.flatnonzero(np.diff(spelled) != np.diff(doc_bytes))
    if len(wrong):
        k = int(wrong[0])
        raise InputError(
            f"enc does not encode texts: the tokens of document {k} spell "
            f"{int(spelled[k + 1] - spelled[k])} bytes, the document holds "
            f"{int(doc_bytes[k + 1] - doc_bytes[k])} (ids put around documents: pass bos_id / "
            "eos_id)")
    starts = ends - tok_len

    # Bytes → characters: a position's character index is the number of bytes before it that
    # start a character (not a UTF-8 continuation byte). Bytes documents count every byte.
    str_len = np.fromiter((len(t) if isinstance(t, str) else -1 for t in texts), np.int64, n)
    is_str = str_len >= 0
    cont = (data & 0xC0) == 0x80
    if not is_str.all():
        cont &= np.repeat(is_str, np.diff(doc_bytes))
    cont_at = np.flatnonzero(cont)

    def units_before(p: np.ndarray) -> np.ndarray:
        return p - np.searchsorted(cont_at, p)

    doc_of = np.repeat(np.arange(n), ntok)
    base = units_before(doc_bytes)
    out = np.empty((len(ids), 2), np.int64)
    out[:, 0] = units_before(starts + 1) - 1 - base[doc_of]
    out[:, 1] = units_before(ends) - base[doc_of]
    out[tok_len == 0] = 0

    # A surrogate pair of a str is one character of its UTF-8: spans in code units of the str.
    for k in np.flatnonzero(is_str & (np.diff(base) != str_len)):
        a, b = tok_offsets[k], tok_offsets[k + 1]
        first, after = _surrogate_pair_spans(texts[k])
        span = out[a:b]
        keep = tok_len[a:b] > 0
        span[keep, 0] = first[span[keep, 0]]
        span[keep, 1] = after[span[keep, 1] - 1]

    if trim_offsets:
        keep = tok_len > 0
        s, e = out[keep, 0], out[keep, 1]
        lead = _vocab_table(vocab, "lead")[ids[keep]]
        if prefix_space:   # (Hugging Face keeps the one space it would have added)
            first = (np.arange(len(ids)) == tok_offsets[doc_of])[keep] | (s == 0)
            lead = np.where(first & (lead == 1), 0, lead)
        s = np.minimum(s + lead, e)
        # (HF also asks end >= trailing spaces: always so, the spaces lie before the end)
        e = np.maximum(e - _vocab_table(vocab, "trail")[ids[keep]], s)
        out[keep, 0], out[keep, 1] = s, e
    return np.split(out, tok_offsets[1:-1]) if n else []
