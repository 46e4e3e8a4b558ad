"""The slow, obviously correct oracle of DESIGN.md §2–§4 (pure Python, no wgpu, no torch).

Every GPU kernel of torch_gpubpe is tested against this module token for token and merge for
merge. It favours plainness over speed; it is still usable on a few MB of text.

Example::

    >>> from torch_gpubpe.core import reference
    >>> reference.split_words(b"yakinlik ve")
    [b'yakinlik', b' ve']
    >>> merges = reference.train([b"aaaaa"], vocab_size=257, min_frequency=1)
    >>> merges
    [(97, 97)]
    >>> reference.encode(b"aaaaa", merges)
    [256, 256, 97]
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

# Byte classes of DESIGN.md §2.
LETTER, DIGIT, SPACE, PUNCT, NEWLINE = 0, 1, 2, 3, 4
WORD_START_BIT = 0x10000  # carried on a GPU symbol (seed §1)


def _byte_class(b: int) -> int:
    if b in (0x0A, 0x0D):
        return NEWLINE
    if b in (0x20, 0x09, 0x0B, 0x0C):
        return SPACE
    if 0x30 <= b <= 0x39:
        return DIGIT
    if 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A or b >= 0x80:
        return LETTER
    return PUNCT


BYTE_CLASS: tuple[int, ...] = tuple(_byte_class(b) for b in range(256))
"""``BYTE_CLASS[b]`` is the DESIGN.md §2 class of byte value ``b``."""

_WORDLIKE = (LETTER, DIGIT, PUNCT)


def to_bytes(text: str | bytes | bytearray | memoryview) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates in a ``str`` become U+FFFD (DESIGN.md §1)."""
    if isinstance(text, str):
        try:
            b = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates → U+FFFD, as tiktoken does
            b = str.encode(text, "utf-16", "surrogatepass").decode("utf-16", "replace").encode()
        if not isinstance(b, bytes):   # (a str subclass's own encode)
            raise TypeError(f"{type(text).__name__}.encode returned {type(b).__name__}, not bytes")
        return b if type(b) is bytes else bytes(b)
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            return bytes(text)
        except ValueError as e:  # a released memoryview
            raise TypeError(f"unreadable {type(text).__name__}: {e}") from e
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


def word_starts(data: bytes) -> list[bool]:
    """For each byte of one document, whether it is a word start (DESIGN.md §2).

    Args:
        data: the document's bytes.
    Returns:
        ``len(data)`` booleans.
    """
    n = len(data)
    out = [False] * n
    for i in range(n):
        c = BYTE_CLASS[data[i]]
        if i == 0:
            out[i] = True
            continue
        p = BYTE_CLASS[data[i - 1]]
        if c != p and not (data[i - 1] == 0x20 and c in _WORDLIKE):
            out[i] = True
        elif data[i] == 0x20 and p == SPACE and i + 1 < n and BYTE_CLASS[data[i + 1]] in _WORDLIKE:
            out[i] = True
    return out


def split_words(data: bytes) -> list[bytes]:
    """The words of one document, in order (DESIGN.md §2); ``b"".join`` gives ``data`` back."""
    starts = [i for i, s in enumerate(word_starts(data)) if s]
    ends = starts[1:] + [len(data)]
    return [data[s:e] for s, e in zip(starts, ends)]


def _check_documents(documents: object) -> None:
    if isinstance(documents, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            "expected an iterable of documents, got one str/bytes; pass [text] for one document"
        )


def count_words(documents: Iterable[str | bytes]) -> Counter[bytes]:
    """How often each word occurs over all documents (words never span documents).

    Raises:
        TypeError: ``documents`` is a single ``str``/``bytes`` or holds a non-text item.
    """
    _check_documents(documents)
    counts: Counter[bytes] = Counter()
    for doc in documents:
        counts.update(split_words(to_bytes(doc)))
    return counts


def _merge_word(word: tuple[int, ...], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """Replace ``pair`` by ``new_id`` left to right without overlap ("aaaaa" → aa aa a)."""
    out: list[int] = []
    j = 0
    while j < len(word):
        if j + 1 < len(word) and word[j] == pair[0] and word[j + 1] == pair[1]:
            out.append(new_id)
            j += 2
        else:
            out.append(word[j])
            j += 1
    return tuple(out)


def _pairs(word: tuple[int, ...]) -> Counter[tuple[int, int]]:
    """Overlapping pair occurrences in one word ("aaa" has (a, a) twice)."""
    return Counter(zip(word, word[1:]))


def train_from_word_counts(
    word_counts: Mapping[bytes, int],
    vocab_size: int,
    min_frequency: int = 2,
    num_special_tokens: int = 0,
) -> list[tuple[int, int]]:
    """Learn merges from a word → count mapping (DESIGN.md §3).

    Each step merges the pair with the highest total count (sum over words of count × overlapping
    occurrences); ties go to the smallest left id, then the smallest right id. Training stops when
    ``256 + len(merges) + num_special_tokens == vocab_size`` or the best count is below
    ``min_frequency``.

    Implementation: incremental pair counts with a lazy max-heap; only words containing the merged
    pair are recounted. ``tests/test_core_reference.py`` checks it against a recount-everything loop.

    Returns:
        merges: list of ``(left_id, right_id)``; merge k creates id ``256 + k``.
    Raises:
        ValueError: ``vocab_size < 256 + num_special_tokens``, ``min_frequency < 1`` or a
            negative count.
    """
    num_merges = vocab_size - 256 - num_special_tokens
    if num_merges < 0:
        raise ValueError(
            f"vocab_size={vocab_size} is below 256 byte tokens + {num_special_tokens} special tokens"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    words: list[tuple[int, ...]] = []
    weights: list[int] = []
    for w, c in word_counts.items():
        if c < 0:
            raise ValueError(f"negative count {c} for word {w!r}")
        if c and len(w) > 1:
            words.append(tuple(w))
            weights.append(int(c))

    counts, where, heap = _index(words, weights)

    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges:
        # Pop until the top entry is current (lazy deletion of stale counts).
        while heap and counts.get((heap[0][1], heap[0][2]), 0) != -heap[0][0]:
            heapq.heappop(heap)
        if not heap or -heap[0][0] < min_frequency:
            break
        _, a, b = heapq.heappop(heap)
        merges.append((a, b))
        _apply_merge((a, b), 256 + len(merges) - 1, words, weights, counts, where, heap)
    return merges


def _index(words: list[tuple[int, ...]], weights: list[int]) -> tuple[dict, dict, list]:
    """(pair → count, pair → indices of the words holding it, lazy max-heap of the counts)."""
    counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for wi, word in enumerate(words):
        for pair, k in _pairs(word).items():
            counts[pair] = counts.get(pair, 0) + k * weights[wi]
            where.setdefault(pair, set()).add(wi)
    heap = [(-c, a, b) for (a, b), c in counts.items()]
    heapq.heapify(heap)
    return counts, where, heap


def _apply_merge(pair: tuple[int, int], new_id: int, words: list[tuple[int, ...]],
                 weights: list[int], counts: dict, where: dict, heap: list) -> None:
    """Merge ``pair`` into ``new_id`` in every word holding it, updating the pair counts, the
    pair → words index and the lazy heap (entries for changed counts pushed)."""
    touched: set[tuple[int, int]] = set()
    for wi in sorted(where.pop(pair, ())):
        old, weight = words[wi], weights[wi]
        new = _merge_word(old, pair, new_id)
        for p, k in _pairs(old).items():
            counts[p] -= k * weight
            touched.add(p)
        for p, k in _pairs(new).items():
            counts[p] = counts.get(p, 0) + k * weight
            where.setdefault(p, set()).add(wi)
            touched.add(p)
        words[wi] = new
    counts.pop(pair, None)
    for p in touched:
        c = counts.get(p, 0)
        if c > 0:
            heapq.heappush(heap, (-c, p[0], p[1]))
        else:
            counts.pop(p, None)


def train(
    documents: Iterable[str | bytes],
    vocab_size: int,
    min_frequency: int = 2,
    num_special_tokens: int = 0,
) -> list[tuple[int, int]]:
    """Learn merges from documents: pre-tokenize (§2), count words, then
    :func:`train_from_word_counts` (§3)."""
    return train_from_word_counts(
        count_words(documents), vocab_size, min_frequency, num_special_tokens
    )


def token_bytes(merges: Sequence[tuple[int, int]]) -> list[bytes]:
    """``token_bytes(merges)[i]`` is the byte string of token id ``i`` (256 bytes + merges)."""
    table = [bytes([b]) for b in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table


def encode_batch(texts: Iterable[str | bytes], merges: Sequence[tuple[int, int]]) -> list[list[int]]:
    """Greedy longest-match encoding of each document (DESIGN.md §4); see :func:`encode`.

    Raises:
        TypeError: ``texts`` is a single ``str``/``bytes``, or an item is not text.
    """
    _check_documents(texts)
    lookup: dict[bytes, int] = {}
    for i, tb in enumerate(token_bytes(merges)):
        lookup.setdefault(tb, i)  # several ids may spell the same bytes: the smallest wins
    max_len = max(len(t) for t in lookup)
    out = []
    for text in texts:
        ids: list[int] = []
        for word in split_words(to_bytes(text)):
            j = 0
            while j < len(word):
                for length in range(min(max_len, len(word) - j), 0, -1):
                    tid = lookup.get(word[j : j + length])
                    if tid is not None:
                        ids.append(tid)
                        j += length
                        break
        out.append(ids)
    return out


def encode(text: str | bytes, merges: Sequence[tuple[int, int]]) -> list[int]:
    """Greedy longest-match encoding of one document (DESIGN.md §4).

    Per word, repeatedly take the longest vocab token that is a prefix of the rest of the word.
    If several ids spell the same bytes (possible with odd merge lists), the smallest id wins.
    """
    return encode_batch([text], merges)[0]


def decode_bytes(ids: Iterable[int], merges: Sequence[tuple[int, int]]) -> bytes:
    """Bytes spelled by ``ids`` (no special tokens here: ids must be < 256 + len(merges)).

    Raises:
        ValueError: an id outside ``[0, 256 + len(merges))``, naming the id and its position.
    """
    table = token_bytes(merges)
    out = []
    for pos, i in enumerate(ids):
        if not 0 <= i < len(table):
            raise ValueError(f"token id {i} at position {pos} is outside the vocab ({len(table)})")
        out.append(table[i])
    return b"".join(out)


# -- merge-order BPE ------------------------------------------------------------------------

def bpe_encode(word: bytes, ranks: Mapping[bytes, int]) -> list[int]:
    """Merge-order BPE of one word, as tiktoken's ``byte_pair_encode`` does it (the oracle of
    ``Tokenizer(mode="bpe")``).

    Start from the word's single bytes; repeatedly merge the adjacent pair of parts whose
    concatenated bytes have the LOWEST rank in ``ranks`` (ties: the leftmost pair); stop when no
    adjacent concatenation is a token. A word that is itself a token is that token at once (as
    tiktoken looks a whole piece up first; it matters only for a token that BPE of its own bytes
    does not produce). Returns the ranks of the final parts (tiktoken files: rank = token id;
    see :func:`bpe_encode_batch` for vocabularies where ids differ).

    Args:
        word: the word's bytes (one pre-token).
        ranks: token bytes → rank (lower merges first); every byte of ``word`` must be in it.
    Raises:
        KeyError: a byte of ``word`` has no rank.
    """
    return [ranks[p] for p in bpe_parts(word, ranks)]


def bpe_parts(word: bytes, ranks: Mapping[bytes, int]) -> list[bytes]:
    """:func:`bpe_encode` returning the final parts' bytes instead of their ranks."""
    if word in ranks:
        return [word]
    parts = [word[j : j + 1] for j in range(len(word))]
    while len(parts) > 1:
        best, at = None, -1
        for j in range(len(parts) - 1):  # the lowest rank; the leftmost among equals
            r = ranks.get(parts[j] + parts[j + 1])
            if r is not None and (best is None or r < best):
                best, at = r, j
        if best is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return parts


def bpe_encode_batch(texts: Iterable[str | bytes], ranks: Mapping[bytes, int],
                     ids: Mapping[bytes, int] | None = None) -> list[list[int]]:
    """Merge-order BPE of each document over the DESIGN.md §2 words (:func:`bpe_encode` per
    word). ``ids`` maps token bytes → output id when ids are not the ranks (default: ranks).

    Raises:
        TypeError: ``texts`` is a single ``str``/``bytes``, or an item is not text.
        KeyError: a byte has no rank.
    """
    _check_documents(texts)
    idmap = ranks if ids is None else ids
    out = []
    for text in texts:
        doc: list[int] = []
        for word in split_words(to_bytes(text)):
            doc += [idmap[p] for p in bpe_parts(word, ranks)]
        out.append(doc)
    return out


def bpe_encode_text(text: str | bytes, ranks: Mapping[bytes, int]) -> list[int]:
    """:func:`bpe_encode_batch` of one document."""
    return bpe_encode_batch([text], ranks)[0]


def merge_ranks(merges: Sequence[tuple[int, int]]) -> dict[bytes, int]:
    """This project's vocab as merge-order ranks: token bytes → id (256 bytes, then merge k →
    256 + k; the smallest id of a spelling shared by several ids)."""
    ranks: dict[bytes, int] = {}
    for i, tb in enumerate(token_bytes(merges)):
        ranks.setdefault(tb, i)
    return ranks
