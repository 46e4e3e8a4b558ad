"""Tables of exact merge-order BPE for the GPU's backtracking encoder .

Merge-order BPE (tiktoken's ``byte_pair_encode``; :func:`torch_gpubpe.core.reference.bpe_encode`)
merges, inside each word, the adjacent pair of parts whose concatenated bytes have the lowest
rank. The GPU computes the same result with the "backtracking" encoder of github/rust-gems
``crates/bpe`` (MIT; its README explains it; this is our own code): walk the trie for the longest
token at the current position; accept it only if it forms a *valid pair* with the previous token,
else try the next shorter token that is a prefix of it, and when none is left, pop the previous
token and mark the position dead (no token may end there again). A pair ``(t1, t2)`` is valid iff
merge-order BPE of ``bytes(t1) + bytes(t2)`` gives ``[t1, t2]``; :func:`valid_pair` decides it by
unwinding the two tokens' merges (``split``) and looking for a merge across the seam that would
have come first (``pair`` table). A token sequence whose adjacent pairs are all valid is the BPE
encoding, which makes the walk exact.

What the tables hold, per ordinary token id ``t`` (:class:`BpeTables`):

* ``split[t] = (left, right)``: the last merge of BPE applied to ``bytes(t)`` (the two parts left
  just before the final merge); ``(t, t)`` for single bytes. A token that BPE of its own bytes
  does not produce is *unreachable*: BPE never emits it except when a whole word is spelled by it
  (tiktoken looks a whole piece up first); it gets ``split = (NO_TOKEN, NO_TOKEN)``.
* ``next_prefix[t]``: the longest reachable token that is a proper prefix of ``t``.
* ``rank[t]``: the token's position in rank order (0 = merged first), dense, ``< 2^18``.
* ``pairs``: an open-addressing hash table ``(left, right) → t`` of every split (Murmur3 finaliser
  ``fmix`` of ``left * 0x9E3779B1 ^ right``, linear probing, at most ``max_probe`` probes; at
  most a quarter full).
* ``bounds[t] = (R, L)``: the lowest rank of any token whose split's left part lies on ``t``'s
  right spine (``t``, ``right(t)``, ``right(right(t))``, …), and of any token whose split's right
  part lies on ``t``'s left spine; ``NO_TOKEN`` when none. Every merge across the seam of
  ``(t1, t2)`` still possible in :func:`valid_pair`'s unwinding ranks at least
  ``max(R[t1], L[t2])``, and the limit it is compared with only falls, so the unwinding stops
  (valid) as soon as that bound reaches the limit: most pairs need no hash lookup.

``rank`` is not the file's rank but the order in which BPE can first form each token
(:func:`_merge_order`): the same as the file's for vocabularies trained by merges, different
where a token ranks before one of its parts (Llama 3's appended tokens). Supported vocabularies:
every rank file tiktoken accepts with each single byte a token.

Example::

    >>> from torch_gpubpe.core.bpe_tables import bpe_tables, valid_pair
    >>> from torch_gpubpe import Vocab
    >>> from torch_gpubpe.core import reference
    >>> v = Vocab.from_merges(reference.train(["abcabc abab"], 260, 1), mode="bpe")
    >>> t = bpe_tables(v)
    >>> [v.token_bytes[i] for i in t.split[256]]
    [b'a', b'b']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from torch_gpubpe.core import disk_cache as _disk_cache
from torch_gpubpe.core.trie import NO_TOKEN
from torch_gpubpe.core.vocab import Vocab

# Rank and length share one u32 on the GPU: rank | len << RANK_BITS. wgsl/encode_bpe.wgsl has
# the same constant (tests/test_gpu_shaders.py checks that they agree).
RANK_BITS = 18
MAX_WALK_TOKEN_BYTES = (1 << (32 - RANK_BITS)) - 1
"""The longest token the GPU's merge-order walk takes (its length shares a u32 with its rank)."""
_GOLDEN = 0x9E3779B1


@dataclass(frozen=True)
class BpeTables:
    """Merge-order tables of one vocab (see the module docstring).

    Attributes:
        split: ``(num_tokens, 2)`` uint32; ``(t, t)`` for single bytes, ``NO_TOKEN`` pairs for
            unreachable tokens.
        next_prefix: ``(num_tokens,)`` uint32, ``NO_TOKEN`` where none.
        rank: ``(num_tokens,)`` uint32 dense rank.
        pairs: ``(3 * slots,)`` uint32 hash table of ``(left, right, token)``; empty slots have
            ``left = NO_TOKEN``.
        max_probe: most probes any lookup (hit or miss) needs.
        max_height: most split levels below any token (single bytes: 0).
        unreachable: ids of the unreachable tokens (multi-byte), ascending.
        bounds: ``(num_tokens, 2)`` uint32 ``(R, L)`` (module docstring).
        gpu_bounds: ``(num_tokens, 4)`` uint32 rows ``(R[t], L[t], R[right(t)], L[left(t)])``
            (``right``, ``left``: ``split``; unreachable tokens: ``NO_TOKEN``), as the GPU
            reads them: the second step of ``valid_pair`` needs no further load.
        gpu_info: ``(num_tokens, 4)`` uint32 rows ``(next_prefix, left, right,
            rank | len << 18)``, as the GPU reads them.
    """

    split: np.ndarray
    next_prefix: np.ndarray
    rank: np.ndarray
    pairs: np.ndarray
    max_probe: int
    max_height: int
    unreachable: tuple[int, ...]
    bounds: np.ndarray
    gpu_bounds: np.ndarray
    gpu_info: np.ndarray

    @property
    def pair_mask(self) -> int:
        return len(self.pairs) // 3 - 1


def fmix_np(h: np.ndarray) -> np.ndarray:
    """Murmur3 finaliser on uint32 arrays, bit for bit as ``fmix`` in ``wgsl/common.wgsl``."""
    h = h.astype(np.uint32)
    with np.errstate(over="ignore"):
        h ^= h >> np.uint32(16)
        h = h * np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h = h * np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h


def pair_hash(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Home slot hash of pairs (before masking), as ``pair_slot`` in ``wgsl/encode_bpe.wgsl``."""
    with np.errstate(over="ignore"):
        return fmix_np((left.astype(np.uint32) * np.uint32(_GOLDEN)) ^ right.astype(np.uint32))


def _split_of(tok: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes] | None:
    """The two parts that BPE of ``tok`` merges last, or ``None`` when BPE of ``tok`` does not
    end in one part (unreachable)."""
    parts = [tok[j : j + 1] for j in range(len(tok))]
    get = ranks.get
    none = 1 << 62  # no such token
    # pr[j]: rank of parts[j] + parts[j + 1]; after a merge only its two neighbours change
    pr = [get(parts[j] + parts[j + 1], none) for j in range(len(parts) - 1)]
    while len(parts) > 2:
        best = min(pr)  # the leftmost lowest rank (list.index)
        if best == none:
            return None
        at = pr.index(best)
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
        del pr[at]
        if at > 0:
            pr[at - 1] = get(parts[at - 1] + parts[at], none)
        if at < len(pr):
            pr[at] = get(parts[at] + parts[at + 1], none)
    return parts[0], parts[1]


TABLE_CACHE_FORMAT = 1  # bump when BpeTables' fields or their meaning change
TABLE_CACHE_MIN_TOKENS = _disk_cache.MIN_TOKENS  # smaller vocabs build in well under 0.1 s
ENV_NO_TABLE_CACHE = _disk_cache.ENV_OFF
_TABLE_CACHE = _disk_cache.ArrayCache("bpe_tables", "bpe", "merge-order tables", __file__,
                                      TABLE_CACHE_FORMAT)
table_cache_stats: dict = _TABLE_CACHE.stats
"""What :func:`bpe_tables` did in this process: tables restored from the disk cache, built,
written to it; errors met (the tables were built then)."""


def check_merge_list(pairs, rank, split: np.ndarray, spell, skip=lambda c, sp: False) -> None:
    """Whether a ``tokenizer.json`` merge list gives the ids of BPE by rank (the encoder's).

    Hugging Face applies a listed pair by its index; the encoder merges any pair whose join is a
    token, by that token's rank. They agree when the merges of each token come in one block, the
    blocks in rank order (one merge per token, as trained; or every split of a token, as
    tiktoken vocabularies converted to ``tokenizer.json`` list them), and BPE's last merge of
    each token is listed.

    Args:
        pairs: ``(left, right, made)`` ids per merge, in the file's order.
        rank: rank of each id; split: :attr:`BpeTables.split`; spell: id → what the error shows.
        skip: ``(made, split pair)`` → True for tokens whose split is not checked (BPE never
            builds them).
    Raises:
        ValueError: the first disagreement, named.
    """
    listed: dict[int, set[tuple[int, int]]] = {}
    last = 0
    for k, (a, b, c) in enumerate(pairs):
        if rank[c] < last:
            raise ValueError(
                f"merge {k} ({spell(a)!r} + {spell(b)!r}) makes token {c} ({spell(c)!r}) after "
                "merges of other tokens: Hugging Face gives this pair a later priority than BPE "
                "by rank does")
        last = rank[c]
        listed.setdefault(c, set()).add((a, b))
    for c, ps in listed.items():
        sp = (int(split[c, 0]), int(split[c, 1]))
        if sp[0] != NO_TOKEN and not skip(c, sp) and sp not in ps:
            raise ValueError(
                f"no merge of token {c} ({spell(c)!r}) is what BPE by rank of its parts merges "
                f"last ({[spell(x) for x in sp]}): this merge list cannot be reproduced by BPE "
                "by rank")


def table_cache_dir() -> Path:
    """Where built tables are kept: ``$XDG_CACHE_HOME/torch_gpubpe/bpe_tables`` (default
    ``~/.cache``)."""
    return _TABLE_CACHE.directory()


def table_cache_key(vocab: Vocab) -> str:
    """Hash of everything :func:`bpe_tables` reads: each token's bytes, rank and id, the cache
    format and this module's source (a change of the algorithm is a new key)."""
    toks, ranks, ids = vocab.token_bytes, vocab.bpe_ranks, vocab.bytes_to_id
    n = len(toks)
    return _TABLE_CACHE.key(
        np.fromiter(map(len, toks), np.int64, n), b"".join(toks),
        np.fromiter((ranks.get(t, -1) for t in toks), np.int64, n),
        np.fromiter((ids.get(t, -1) for t in toks), np.int64, n))


def _tables_from_arrays(f: Mapping[str, np.ndarray], n: int) -> BpeTables:
    shapes = {"split": (n, 2), "next_prefix": (n,), "rank": (n,), "bounds": (n, 2),
              "gpu_bounds": (n, 4), "gpu_info": (n, 4)}
    tables = {k: _disk_cache.check_array(f, k, np.uint32, shape) for k, shape in shapes.items()}
    return BpeTables(**tables, pairs=f["pairs"].astype(np.uint32, copy=False),
                     max_probe=int(f["max_probe"]), max_height=int(f["max_height"]),
                     unreachable=tuple(int(i) for i in f["unreachable"]))


def _tables_to_arrays(t: BpeTables) -> dict[str, np.ndarray]:
    arrays = {f.name: np.asarray(getattr(t, f.name)) for f in fields(t)}
    arrays["unreachable"] = np.array(t.unreachable, np.int64)
    return arrays


def bpe_tables(vocab: Vocab) -> BpeTables:
    """Compute (once per vocab object, then cached on it) the :class:`BpeTables` of ``vocab``.

    Cost: one BPE of every token's bytes in Python (seconds for a
    vocab of 50k-150k tokens). Vocabs of :data:`TABLE_CACHE_MIN_TOKENS` tokens or more keep
    the result on disk (:func:`table_cache_dir`, ``bpe-<key>.npz``, key
    :func:`table_cache_key`), so that later processes load it in milliseconds. A damaged file
    is rebuilt; an unwritable folder is warned once (``table_cache_stats``);
    ``TORCH_GPUBPE_NO_TABLE_CACHE=1`` turns the disk cache off (and the trie's:
    :mod:`torch_gpubpe.core.disk_cache`).

    Raises:
        ValueError: the vocab is not supported (a split part does not rank below its token, or
            more than 2^18 tokens / a token of 2^14 bytes or more).
    """
    cached = vocab.__dict__.get("_bpe_tables")
    if cached is not None:
        return cached
    n = len(vocab.token_bytes)
    out = _TABLE_CACHE.get(
        (lambda: table_cache_key(vocab)) if n >= TABLE_CACHE_MIN_TOKENS else None,
        lambda: _build_tables(vocab), _tables_to_arrays, lambda f: _tables_from_arrays(f, n))
    object.__setattr__(vocab, "_bpe_tables", out)
    return out


def _merge_order(split: list[tuple[int, int]], ranks: list[int]) -> list[int]:
    """The token ids in the order merge-order BPE can first form them: by rank, except that a
    token waits for its parts (its ``split``).

    In tiktoken's BPE a pair merges when its rank is the lowest among the pairs present, so a
    token whose part ranks *after* it (Llama 3 appended tokens such as ``b'.:.:'`` = ``b'.:.'``
    + ``b':'`` to cl100k's ranks) forms right after that part, never at its own rank. Ranking
    tokens in this order (parts first, else by rank) gives the same BPE of every string: a pair
    that waits for a part P is never present before P forms, and once P forms the pairs it
    enables rank below every other pair present. The backtracking walk and ``valid_pair``
    need parts ranked below their token; with this order they are, for any rank file.
    For vocabularies trained by merges the order is the rank order itself.
    """
    import heapq

    n = len(split)
    waiting = [0] * n
    users: list[list[int]] = [[] for _ in range(n)]
    for t, (a, b) in enumerate(split):
        if a != NO_TOKEN and a != t:
            for part in {a, b}:
                waiting[t] += 1
                users[part].append(t)
    ready = [(ranks[t], t) for t in range(n) if not waiting[t]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, t = heapq.heappop(ready)
        order.append(t)
        for u in users[t]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (ranks[u], u))
    if len(order) != n:  # a cycle of splits cannot come from BPE
        raise ValueError("the tokens' merges form a cycle: not a BPE vocabulary")
    return order


def _build_tables(vocab: Vocab) -> BpeTables:
    toks = vocab.token_bytes
    n = len(toks)
    if n > 1 << RANK_BITS:
        raise ValueError(f"merge-order mode supports at most {1 << RANK_BITS} tokens, got {n}")
    ranks = vocab.bpe_ranks
    ids = vocab.bytes_to_id
    none = 1 << 62
    split_l = [(NO_TOKEN, NO_TOKEN)] * n
    unreachable = []
    for i, tb in enumerate(toks):
        if ids.get(tb) != i:  # a shadowed spelling (Vocab.shadowed_ids): never emitted
            unreachable.append(i)
        elif len(tb) == 1:
            split_l[i] = (i, i)
        elif (sp := _split_of(tb, ranks)) is None:
            unreachable.append(i)
        else:
            split_l[i] = (ids[sp[0]], ids[sp[1]])
    order = _merge_order(split_l, [ranks.get(t, none) for t in toks])
    rank = np.empty(n, np.uint32)
    rank[order] = np.arange(n, dtype=np.uint32)
    height_l = [0] * n
    for i in order:  # a token's parts come before it
        a, b = split_l[i]
        if a != NO_TOKEN and a != i:
            height_l[i] = 1 + max(height_l[a], height_l[b])
    split = np.array(split_l, np.uint32).reshape(n, 2)
    height = np.array(height_l, np.int64)
    reach = split[:, 0] != NO_TOKEN
    # Longest proper prefix that is a reachable token.
    reach_l = reach.tolist()
    reach_ids = {toks[i]: i for i in range(n) if reach_l[i]}
    prefix_l = [NO_TOKEN] * n
    for i, tb in enumerate(toks):
        for k in range(len(tb) - 1, 0, -1):
            j = reach_ids.get(tb[:k])
            if j is not None:
                prefix_l[i] = j
                break
    next_prefix = np.array(prefix_l, np.uint32)
    # Pair table.
    multi = np.flatnonzero(reach & (split[:, 0] != np.arange(n, dtype=np.uint32)))
    slots = 1 << max(4, int(4 * max(len(multi), 1) - 1).bit_length())
    mask = slots - 1
    table = np.full((slots, 3), NO_TOKEN, np.uint32)
    home = (pair_hash(split[multi, 0], split[multi, 1]) & np.uint32(mask)).astype(np.int64)
    max_probe = 1
    taken = bytearray(slots)  # (a Python-level probe: numpy scalar reads cost ~10x more)
    at = []
    for h in home.tolist():
        k = 0
        while taken[(h + k) & mask]:
            k += 1
        taken[(h + k) & mask] = 1
        at.append((h + k) & mask)
        if k + 1 > max_probe:
            max_probe = k + 1
    if len(multi):
        table[at] = np.stack([split[multi, 0], split[multi, 1], multi.astype(np.uint32)], 1)
    # A miss probes until an empty slot: bound that too (the table is at most half full).
    occupied = table[:, 0] != NO_TOKEN
    edges = np.diff(np.concatenate([[0], occupied, occupied, [0]]).astype(np.int8))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)  # runs wrap around
    longest = int(runs.max()) if len(runs) else 0
    max_probe = max(max_probe, min(longest, slots) + 1)
    # Spine bounds (module docstring), in rank order: a token's parts come before it.
    min_as_left = np.full(n, NO_TOKEN, np.uint32)
    min_as_right = np.full(n, NO_TOKEN, np.uint32)
    np.minimum.at(min_as_left, split[multi, 0].astype(np.int64), rank[multi])
    np.minimum.at(min_as_right, split[multi, 1].astype(np.int64), rank[multi])
    left_l, right_l = min_as_left.tolist(), min_as_right.tolist()
    for i in order:
        a, b = split_l[i]
        if reach_l[i] and a != i:
            left_l[i] = min(left_l[i], left_l[b])  # right spine continues in b
            right_l[i] = min(right_l[i], right_l[a])  # left spine continues in a
    bounds = np.stack([np.array(left_l, np.uint32), np.array(right_l, np.uint32)], axis=1)
    lens = np.fromiter(map(len, toks), np.int64, n)
    # Longer tokens are clipped in the GPU rows: the walk refuses such a vocab
    # (torch_gpubpe.encoding.tokenizer), the exports read no length.
    lens = np.minimum(lens, MAX_WALK_TOKEN_BYTES)
    gb = np.full((n, 4), NO_TOKEN, np.uint32)
    gb[:, :2] = bounds
    r = np.flatnonzero(reach)
    gb[r, 2] = bounds[split[r, 1].astype(np.int64), 0]
    gb[r, 3] = bounds[split[r, 0].astype(np.int64), 1]
    info = np.empty((n, 4), np.uint32)
    info[:, 0] = next_prefix
    info[:, 1:3] = split
    info[:, 3] = rank | (lens.astype(np.uint32) << np.uint32(RANK_BITS))
    out = BpeTables(split=split, next_prefix=next_prefix, rank=rank, pairs=table.reshape(-1),
                    max_probe=int(max_probe), max_height=int(height.max()),
                    unreachable=tuple(sorted(unreachable)), bounds=bounds, gpu_bounds=gb,
                    gpu_info=info)
    return out


def valid_pair(t: BpeTables, t1: int, t2: int) -> bool:
    """Whether merge-order BPE of ``bytes(t1) + bytes(t2)`` gives ``[t1, t2]`` (rust-gems'
    ``is_valid_token_pair``, with ranks in place of ids): unwind the merges of the two tokens,
    the later one first, and fail if a merge across the seam ranks before what is still allowed.
    The GPU's ``valid_pair`` mirrors it."""
    rank, split, bounds = t.rank, t.split, t.bounds
    lookup = _pair_dict(t)
    limit = NO_TOKEN
    while True:
        if max(int(bounds[t1, 0]), int(bounds[t2, 1])) >= limit:
            return True  # no merge across the seam can come first any more
        c = lookup.get((t1, t2))
        if c is not None and rank[c] < limit:
            return False
        if rank[t1] > rank[t2]:
            limit = int(rank[t1])
            n1 = int(split[t1, 1])
            if n1 == t1:
                limit = int(rank[t2]) + 1
                n2 = int(split[t2, 0])
                if n2 == t2:
                    return True
                t2 = n2
            else:
                t1 = n1
        else:
            limit = int(rank[t2]) + 1
            n2 = int(split[t2, 0])
            if n2 == t2:
                limit = int(rank[t1])
                n1 = int(split[t1, 1])
                if n1 == t1:
                    return True
                t1 = n1
            else:
                t2 = n2


def _pair_dict(t: BpeTables) -> dict[tuple[int, int], int]:
    d = t.__dict__.get("_pair_dict")
    if d is None:
        p = t.pairs.reshape(-1, 3)
        p = p[p[:, 0] != NO_TOKEN]
        d = {(int(a), int(b)): int(c) for a, b, c in p}
        object.__setattr__(t, "_pair_dict", d)
    return d


def backtrack_encode(word: bytes, vocab: Vocab, t: BpeTables) -> list[int]:
    """The GPU's backtracking walk in Python, on one word (for tests and debugging); equals
    :func:`torch_gpubpe.core.reference.bpe_encode` mapped to ids."""
    cache = t.__dict__.get("_py_walk")
    if cache is None:
        cache = (vocab.bytes_to_id, t.split[:, 0] != NO_TOKEN, max(map(len, vocab.token_bytes)))
        object.__setattr__(t, "_py_walk", cache)
    ids, reach, maxlen = cache
    whole = ids.get(word)
    if whole is not None:  # tiktoken looks a whole piece up first
        return [whole]

    def longest(pos: int) -> int:
        for k in range(min(maxlen, len(word) - pos), 0, -1):
            j = ids.get(word[pos : pos + k])
            if j is not None and reach[j]:
                return j
        raise AssertionError("a byte without a token")

    toks: list[int] = []
    dead = set()
    pos, cand = 0, longest(0)
    while pos < len(word):
        end = pos + len(vocab.token_bytes[cand])
        if end not in dead and (not toks or valid_pair(t, toks[-1], cand)):
            toks.append(cand)
            pos = end
            if pos < len(word):
                cand = longest(pos)
        elif t.next_prefix[cand] != NO_TOKEN:
            cand = int(t.next_prefix[cand])
        else:
            dead.add(pos)
            cand = toks.pop()
            pos -= len(vocab.token_bytes[cand])
    return toks
