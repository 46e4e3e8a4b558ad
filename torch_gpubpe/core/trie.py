"""Vocab → flat breadth-first trie for the GPU encoder (DESIGN.md §5; seed "compileVocabToTrie").

Layout (all ``uint32``)::

    nodes[3*k : 3*k+3] = (first_edge, num_children, token_id or NO_TOKEN)
    edges[2*e : 2*e+2] = (byte, child_node)

Node 0 is the root. Nodes are numbered breadth first and the children of a node are consecutive
and sorted by byte, so the GPU can binary-search them and cache the root's 256 children (nodes
1..256, one per byte value) in workgroup memory. A node's ``token_id`` is the SMALLEST id whose
bytes spell the path to it (odd merge lists can spell one byte string twice; ``reference.encode``
makes the same choice). Nodes that are only a prefix of longer tokens have ``NO_TOKEN``.

Compilation is vectorised (numpy): tokens are sorted once, the longest common prefix of
neighbours gives the nodes each token adds in depth-first order, and a stable sort by depth turns
that order into breadth-first order. A 262,144-token vocab compiles in well under a second;
:func:`cached_trie` keeps the trie of a large vocab on disk for later processes.

Example::

    >>> from torch_gpubpe.core.trie import compile_trie, trie_lookup
    >>> t = compile_trie([bytes([b]) for b in range(256)] + [b"ab", b"abc"])
    >>> t.num_nodes, t.max_depth
    (259, 3)
    >>> trie_lookup(t, b"abc"), trie_lookup(t, b"abd")
    (257, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from torch_gpubpe.core import disk_cache as _disk_cache

NO_TOKEN = 0xFFFFFFFF
"""``token_id`` of a node that is only a prefix (no vocab token spells it); the "no token"
value of every table and buffer the encoder shares with the GPU (wgsl/common.wgsl's
``NO_TOKEN``; tests/test_gpu_shaders.py checks that they agree)."""


@dataclass(frozen=True)
class Trie:
    """A compiled trie (see the module docstring for the layout).

    Attributes:
        nodes: uint32, shape ``(3 * num_nodes,)``.
        edges: uint32, shape ``(2 * (num_nodes - 1),)``.
        num_nodes: node count, root included.
        max_depth: bytes of the longest token (the deepest node's depth).
        token_length: uint32, shape ``(num_tokens,)``: bytes of each token id.
    """

    nodes: np.ndarray
    edges: np.ndarray
    num_nodes: int
    max_depth: int
    token_length: np.ndarray


W = 16  # bytes compared at once by the vectorised sort and prefix computations


def _head_matrix(flat: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """uint8 ``(N, W)``: the first ``W`` bytes of every token, zero-padded."""
    n, total = len(lens), len(flat)
    mat = np.zeros((n, W), np.uint8)
    inside = np.arange(W) < lens[:, None]
    pos = np.arange(total) - np.repeat(offs, lens)  # byte index inside its token
    mat[inside] = flat[pos < W]
    return mat


def _cols(flat: np.ndarray, offs: np.ndarray, lens: np.ndarray, col: int) -> np.ndarray:
    """int16 ``(N, W)``: bytes ``col .. col+W`` of the given tokens, -1 past their end."""
    j = np.arange(col, col + W)
    idx = np.minimum(offs[:, None] + j, max(len(flat) - 1, 0))
    return np.where(j < lens[:, None], flat[idx].astype(np.int16), -1)


def _sort_tokens(toks: list[bytes], head: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Ids sorted by (bytes, id): lexicographic, a prefix before its extensions, and among
    equal spellings the smallest id first."""
    be = head.view(">u8")  # two big-endian u64 per row compare like the bytes
    ids = np.arange(len(lens))
    order = np.lexsort((ids, lens, be[:, 1], be[:, 0]))
    # Rows longer than W tie on their head: re-sort those runs exactly (rare, few tokens).
    long_ = lens[order] > W
    if long_.any():
        k0, k1 = be[order, 0], be[order, 1]
        run = np.concatenate([[True], (k0[1:] != k0[:-1]) | (k1[1:] != k1[:-1])])
        run_id = np.cumsum(run) - 1  # ascending: each run is one slice of `order`
        runs = np.unique(run_id[long_])
        starts, ends = np.searchsorted(run_id, runs), np.searchsorted(run_id, runs, "right")
        for a, b in zip(starts.tolist(), ends.tolist()):
            order[a:b] = sorted(order[a:b].tolist(), key=lambda i: (toks[i], i))
    return order


def _lcp_sorted(flat: np.ndarray, offs: np.ndarray, lens: np.ndarray,
                head: np.ndarray) -> np.ndarray:
    """Longest common prefix of each (sorted) token with the previous one, in bytes
    (``lcp[0] = 0``). ``head`` is :func:`_head_matrix` of the same (sorted) tokens."""
    n = len(lens)
    lcp = np.zeros(n, np.int64)
    if n < 2:
        return lcp
    neq = head[1:] != head[:-1]
    anyneq = neq.any(axis=1)
    first = np.where(anyneq, neq.argmax(axis=1), W)
    lcp[1:] = np.minimum(first, np.minimum(lens[1:], lens[:-1]))
    pend = np.flatnonzero((~anyneq) & (lens[1:] > W) & (lens[:-1] > W)) + 1
    col = W
    while len(pend):  # long tokens equal over their first `col` bytes
        a = _cols(flat, offs[pend - 1], lens[pend - 1], col)
        b = _cols(flat, offs[pend], lens[pend], col)
        diff = a != b
        anyd = diff.any(axis=1)
        lcp[pend] = col + np.where(anyd, diff.argmax(axis=1), W)
        col += W
        short = np.minimum(lens[pend], lens[pend - 1]) <= col  # equal up to the shorter end
        pend = pend[~anyd & ~short]
    return np.minimum(lcp, np.minimum(lens, np.concatenate([[0], lens[:-1]])))


def compile_trie(token_bytes: Sequence[bytes], skip: Iterable[int] = ()) -> Trie:
    """Compile the ordinary tokens of a vocab (special tokens excluded) into a :class:`Trie`.

    Args:
        token_bytes: ``token_bytes[i]`` is the byte string of id ``i``; the single bytes
            are among them (a byte-level vocab, DESIGN.md §1; ids 0..255 in this project's
            own vocabs, any ids in e.g. GPT-2's). A byte that is no token (vocabularies that
            never saw it) still gets its root child, with no token: the root has 256 children,
            and encoders refuse text holding such a byte before the walk.
        skip: ids left out (a vocab's shadowed spellings: decoded, never emitted).
    Returns:
        the :class:`Trie`.
    Raises:
        ValueError: an empty token.
    """
    all_lens = np.fromiter(map(len, token_bytes), np.int64, len(token_bytes))
    if (all_lens == 0).any():
        raise ValueError(f"token id {int(np.argmin(all_lens))} is empty")
    skip = set(skip)
    ids = np.array([i for i in range(len(token_bytes)) if i not in skip], np.int64)
    toks = [token_bytes[i] for i in ids.tolist()]
    real = len(toks)
    lens = all_lens[ids]
    singles = {t[0] for t in toks if len(t) == 1}
    if len(singles) != 256:
        toks += [bytes([b]) for b in range(256) if b not in singles]
        lens = np.fromiter(map(len, toks), np.int64, len(toks))
    flat = np.frombuffer(b"".join(toks), np.uint8)
    offs = np.zeros(len(toks), np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    head = _head_matrix(flat, offs, lens)
    order = _sort_tokens(toks, head, lens)
    s_lens, s_offs = lens[order], offs[order]
    lcp = _lcp_sorted(flat, s_offs, s_lens, head[order])
    keep = lcp < s_lens
    keep[0] = True
    order, s_lens, s_offs, lcp = order[keep], s_lens[keep], s_offs[keep], lcp[keep]

    # Depth-first (pre-order) nodes: sorted token i adds the nodes at depths lcp_i+1 .. len_i.
    new = s_lens - lcp
    tok_of = np.repeat(np.arange(len(order)), new)
    first_new = np.repeat(np.cumsum(new) - new, new)
    depth = lcp[tok_of] + (np.arange(len(tok_of)) - first_new) + 1
    byte = flat[s_offs[tok_of] + depth - 1]
    own = order[tok_of]
    tid = np.where((depth == s_lens[tok_of]) & (own < real), ids[np.minimum(own, real - 1)],
                   NO_TOKEN)
    depth = np.concatenate([[0], depth])  # the root is pre-order node 0
    byte = np.concatenate([[0], byte])
    tid = np.concatenate([[NO_TOKEN], tid])
    num_nodes = len(depth)

    # Breadth-first order: a stable sort by depth keeps pre-order inside a level, which makes
    # the children of a node consecutive, in parent order, and sorted by byte.
    bfs = np.argsort(depth, kind="stable")
    d_b = depth[bfs]
    key = d_b * (num_nodes + 1) + bfs  # bfs[k] is node k's pre-order index
    # Parent: the last node one level up that precedes this one in pre-order.
    parent = np.searchsorted(key, key[1:] - (num_nodes + 1), side="left") - 1
    nchild = np.bincount(parent, minlength=num_nodes)
    first_edge = np.cumsum(nchild) - nchild  # children come in parent order

    nodes = np.empty((num_nodes, 3), np.uint32)
    nodes[:, 0], nodes[:, 1], nodes[:, 2] = first_edge, nchild, tid[bfs]
    edges = np.empty((num_nodes - 1, 2), np.uint32)
    edges[:, 0], edges[:, 1] = byte[bfs][1:], np.arange(1, num_nodes)
    if nchild[0] != 256:  # pragma: no cover - guaranteed by the byte check above
        raise AssertionError("root must have 256 children")
    return Trie(
        nodes=nodes.reshape(-1),
        edges=edges.reshape(-1),
        num_nodes=num_nodes,
        max_depth=int(d_b[-1]),
        token_length=all_lens.astype(np.uint32),
    )


TRIE_CACHE_FORMAT = 1  # bump when Trie's fields or their meaning change
TRIE_CACHE_MIN_TOKENS = _disk_cache.MIN_TOKENS  # smaller vocabs compile in a few ms
_TRIE_CACHE = _disk_cache.ArrayCache("trie", "trie", "the vocab's trie", __file__,
                                     TRIE_CACHE_FORMAT)
trie_cache_stats: dict = _TRIE_CACHE.stats
"""What :func:`cached_trie` did in this process: tries restored from the disk cache, compiled,
written to it; errors met (the trie was compiled then)."""


def trie_cache_key(token_bytes: Sequence[bytes], skip: Sequence[int] = ()) -> str:
    """Hash of what :func:`compile_trie` reads (every token's bytes, in id order, and the ids
    it skips), the cache format and this module's source (a change of the algorithm is a new
    key)."""
    toks = list(token_bytes)
    parts = [np.fromiter(map(len, toks), np.int64, len(toks)), b"".join(toks)]
    if skip:
        parts.append(np.asarray(skip, np.int64))
    return _TRIE_CACHE.key(*parts)


def _trie_from_arrays(f: Mapping[str, np.ndarray], num_tokens: int) -> Trie:
    num_nodes = int(_disk_cache.check_array(f, "num_nodes", np.int64, ()))
    return Trie(nodes=_disk_cache.check_array(f, "nodes", np.uint32, (3 * num_nodes,)),
                edges=_disk_cache.check_array(f, "edges", np.uint32, (2 * (num_nodes - 1),)),
                num_nodes=num_nodes,
                max_depth=int(_disk_cache.check_array(f, "max_depth", np.int64, ())),
                token_length=_disk_cache.check_array(f, "token_length", np.uint32,
                                                     (num_tokens,)))


def _trie_to_arrays(t: Trie) -> dict[str, np.ndarray]:
    return {"nodes": t.nodes, "edges": t.edges, "num_nodes": np.int64(t.num_nodes),
            "max_depth": np.int64(t.max_depth), "token_length": t.token_length}


def cached_trie(token_bytes: Sequence[bytes], skip: Iterable[int] = ()) -> Trie:
    """:func:`compile_trie` of ``token_bytes``, kept on disk for vocabs of
    :data:`TRIE_CACHE_MIN_TOKENS` tokens or more (a fraction of a second to compile 65k tokens;
    loaded in a few ms).

    The file: ``$XDG_CACHE_HOME/torch_gpubpe/trie/trie-<key>.npz`` (default ``~/.cache``), key
    :func:`trie_cache_key`. A damaged file is compiled again and rewritten; an unwritable
    folder is warned once (``trie_cache_stats``); ``TORCH_GPUBPE_NO_TABLE_CACHE=1`` turns this
    cache off, as the merge-order tables' (:mod:`torch_gpubpe.core.disk_cache`).

    Returns:
        a :class:`Trie` equal, array for array, to ``compile_trie(token_bytes)``.
    Raises:
        ValueError: as :func:`compile_trie`.
    """
    toks = token_bytes if isinstance(token_bytes, (list, tuple)) else list(token_bytes)
    n = len(toks)
    skip = sorted(set(skip))
    return _TRIE_CACHE.get((lambda: trie_cache_key(toks, skip)) if n >= TRIE_CACHE_MIN_TOKENS
                           else None,
                           lambda: compile_trie(toks, skip), _trie_to_arrays,
                           lambda f: _trie_from_arrays(f, n))


def trie_lookup(trie: Trie, word: bytes) -> int | None:
    """Token id spelled exactly by ``word`` (``None`` if no token), walking the flat arrays as
    the GPU does (root LUT, then binary search over sorted children). For tests and debugging."""
    nodes, edges = trie.nodes, trie.edges
    node = 0
    for b in word:
        fc, nc = int(nodes[3 * node]), int(nodes[3 * node + 1])
        bytes_ = edges[2 * fc : 2 * (fc + nc) : 2]
        k = int(np.searchsorted(bytes_, b))
        if k >= nc or bytes_[k] != b:
            return None
        node = int(edges[2 * (fc + k) + 1])
    t = int(nodes[3 * node + 2])
    return None if t == NO_TOKEN else t
