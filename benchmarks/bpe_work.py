"""Hardware-independent work count of the GPU walks: merge-order (``wgsl/encode_bpe.wgsl``) vs
greedy (``wgsl/encode.wgsl``).

    python3 benchmarks/bpe_work.py --help
    python3 benchmarks/bpe_work.py                         # GPT-2, 1 MB of each of 5 corpora
    python3 benchmarks/bpe_work.py --mb 4 --variants nested flat
    python3 benchmarks/bpe_work.py --mb 0.3 --variants none --gpu   # the kernel's load counters
    python3 benchmarks/bpe_work.py --mb 0.2 --variants flat-fast flat-fast+short flat-fast+all

A model, not a timing: each kernel's walk is replayed in Python word by word, exactly as the
shader does it (same candidates, pair checks, pops, trie steps), and its work is counted in
*dependent memory loads* (the chain of loads each step waits on: a trie step is the child search
— 1 load for a node with one child, 9 for the fixed 8-step binary search otherwise — plus the
child's node; a pair-check iteration is its table loads), per thread and per 32-thread warp in
lockstep: a warp pays, for every iteration of a loop, the most any of its lanes pays, and a
nested loop costs its longest lane on every outer iteration. Threads own ``--chunk`` bytes as on
the GPU (a thread starts at the first word start of its chunk and finishes the word that crosses
its end). The walk kernels are latency bound (PERFORMANCE.md), so warp-lockstep dependent loads
per byte is the figure the kernel time follows; the ratio of the two modes is compared with the
measured kernel ratio (docs/PERFORMANCE.md).

Variants of the merge-order walk (``--variants``):

* ``nested``: an earlier kernel: one outer iteration per candidate, with the trie
  walk and the pair check as inner loops (a subgroup waits for its longest walk, then for its
  longest check, on every candidate);
* ``flat``: one loop, each iteration one trie step, or (in the iteration that ends the walk) the
  try of the candidate with its whole pair check; the check as before;
* ``flat-fast``: the kernel: ``flat``, and each step of the pair check one round of loads
  (the hash probe issued with the rows of the token unwound to; the first step's hit needs no
  rank; the bound test after an unwinding reads the spine bounds of the unwound part from the
  rows already loaded, ``gpu_bounds``), a shorter candidate's length from its row, and a
  backtrack without the scan back for the token before the popped one (kept in a register)
  and without trying the popped token again (it ends at the dead position: its next shorter
  token comes at once).

* ``flat-overlap``: ``flat-fast`` with a lane's try costing beside, not after, the walking
  lanes' loads of the same iteration (an iteration costs its costliest lane's walk + try): what
  an overlapped try would aim at for a check's first step (an upper bound on the gain: later
  check steps and the emission still follow the walk; measured, the kernel built so was slower). GPT-2, 0.2 MB of each
  corpus: 1.40× greedy on en_novels and code vs ``flat-fast``'s 1.71–1.74×; tries free of
  cost would still be 1.30–1.33× (the extra iterations: shorter candidates, backtracking).
* ``gc-rest``, ``gc-fix`` (not kernels, models of an alternative): greedy longest match over all
  of a thread's words first (greedy's loop), then a check of every pair of each word; a word
  with an invalid pair is re-walked in merge order, ``gc-rest`` with the rest of the thread's
  words, ``gc-fix`` alone, in the checking loop. Both model worse than ``flat-fast`` (≈2.6×
  greedy on GPT-2): 3% of English words (35% on multi_udhr) differ from longest match, so
  nearly every 32-lane warp has a lane re-walking, and it waits for that lane.
* ``flat-fast+short``, ``+fused``, ``+d2`` (combinable, ``+all`` = the three): ``flat-fast``
  with the kernel's trie steps: a search of ``ceil(log2 nc)`` steps, not 8 (short), the found
  edge's row is the child's node row: no further load (fused), the walk's first step one load
  (d2). GPT-2, 0.2 MB of each corpus: 1.54x, 1.65x,
  1.64x, and 1.12x (all) greedy's warp loads per byte, vs ``flat-fast``'s 1.79x.

``--gpu`` also encodes the same documents with ``Tokenizer(mode="bpe")`` and prints the PROFILE
counters of the real kernel (``benchmarks/_walk_work.py``'s ``walk_work``): walk-loop iterations,
trie steps, tries, pair checks, backtracks, hash probes, and the subgroup lockstep iterations
(any adapter; the counts do not depend on it except ``lockstep``, which depends on the subgroup
size); then its global-memory load instructions per input byte by table (``ld_trie``, ``ld_rows``, ``ld_pairs``, ``ld_text``: one per load
instruction and lane, a vec4 row one), beside greedy's walk counted by
:meth:`Model.greedy_loads` (docs/PERFORMANCE.md has the figures).

Data: the corpora in ``TORCH_GPUBPE_CORPORA`` (default ``../shared/corpora``), the vocab
``--vocab`` (default tests/data/vocabs/gpt2.tiktoken). No GPU needed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from torch_gpubpe.core import reference  # noqa: E402
from torch_gpubpe.core.bpe_tables import NO_TOKEN, bpe_tables  # noqa: E402
from torch_gpubpe.core.vocab import Vocab  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))

CORPORA = Path(os.environ.get("TORCH_GPUBPE_CORPORA") or REPO.parent / "shared" / "corpora")
DEFAULT_CORPORA = ["en_novels", "code_cpython_stdlib", "web_html", "en_python_docs", "multi_udhr"]
WARP = 32


class Model:
    """The vocab's trie (as prefix → (children, token id)) and merge-order tables."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t = bpe_tables(vocab)
        self.toks = vocab.token_bytes
        self.ids = vocab.bytes_to_id
        kids: dict[bytes, int] = {}
        tid: dict[bytes, int] = {}
        for i, tb in enumerate(self.toks):
            if self.ids.get(tb) != i:
                continue
            tid[tb] = i
            for k in range(1, len(tb) + 1):
                kids.setdefault(tb[:k], 0)
        for p in kids:
            if len(p) > 1:
                kids[p[:-1]] += 1
        self.kids, self.tid = kids, tid
        self.reach = self.t.split[:, 0] != NO_TOKEN
        self.pairs = {}
        p = self.t.pairs.reshape(-1, 3)
        for a, b, c in p[p[:, 0] != NO_TOKEN].tolist():
            self.pairs[(a, b)] = c
        self.rank = self.t.rank.tolist()
        self.split = self.t.split.tolist()
        self.bounds = self.t.bounds.tolist()
        self.next_prefix = self.t.next_prefix.tolist()
        self._bpe_cache: dict[bytes, list] = {}
        self._greedy_cache: dict[bytes, list] = {}
        self._greedy_loads: dict[bytes, tuple[int, int]] = {}
        self.ranks = vocab.bpe_ranks  # (a property that builds the dict)
        self.fast = False
        self.trie_opts: frozenset[str] = frozenset()  # the merge-order walk's trie switches

    # -- pieces of work, in dependent loads -----------------------------------------------
    def child_cost(self, prefix: bytes) -> int:
        """Loads of find_child at the node spelled by ``prefix`` (+1 for the found child's
        node row is added by the caller)."""
        return 1 if self.kids.get(prefix, 0) <= 1 else 9

    def step_cost(self, prefix: bytes, found: bool) -> int:
        """Dependent loads of one trie step of the merge-order walk at the node spelled by
        ``prefix`` under ``self.trie_opts`` (the kernel's switches): ``short``
        (SHORT_SEARCH: ceil(log2 nc) search steps), ``fused`` (FUSED_EDGES: the found edge's
        row is the child's node row, no further load), ``d2`` (D2_LUT: the first step, at a
        single byte, is one load)."""
        o = self.trie_opts
        if "d2" in o and len(prefix) == 1:
            return 1
        nc = self.kids.get(prefix, 0)
        if nc <= 1:
            c = 1
        elif "short" in o:
            c = (nc - 1).bit_length() + 1
        else:
            c = 9
        return c + (found and "fused" not in o)

    def walk(self, word: bytes, pos: int) -> tuple[int, list[int]]:
        """Longest token at ``pos`` (reachable, as the BPE walk takes it) and the cost of each
        iteration of the trie walk (the last one: the failing child search, if any)."""
        q = pos + 1
        cand = self.tid[word[pos:q]]
        costs = []
        while q < len(word):
            if word[pos : q + 1] not in self.kids:
                costs.append(self.step_cost(word[pos:q], False))  # the failing search
                break
            costs.append(self.step_cost(word[pos:q], True))
            q += 1
            t = self.tid.get(word[pos:q])
            if t is not None and self.reach[t]:
                cand = t
        if q >= len(word):
            costs.append(0)  # the iteration that sees the word end (no child search)
        return cand, costs

    def valid_pair(self, t1: int, t2: int) -> tuple[bool, list[int]]:
        """bpe.valid_pair, with the loads of each iteration (bounds/tokinfo of the current
        tokens: 1; the hash probe: 1, + 1 for the merged token's rank on a hit)."""
        rank, split, bounds, pairs = self.rank, self.split, self.bounds, self.pairs
        limit = NO_TOKEN
        costs = []
        fast = self.fast
        while True:
            if max(bounds[t1][0], bounds[t2][1]) >= limit:
                if not fast or len(costs) != 1:
                    costs.append(1)
                return True, costs
            c = pairs.get((t1, t2))
            if fast:  # the first iteration: 1 level (probe, tokinfo and bounds of t2 together;
                # a hit is invalid without the rank), the second's bound test from the first's
                # rows (no load); later iterations 1 level + 1 for a hit's rank
                costs.append(1 + (bool(costs) and c is not None))
            else:
                costs.append(2 + (c is not None))
            if c is not None and rank[c] < limit:
                return False, costs
            if rank[t1] > rank[t2]:
                limit = rank[t1]
                n1 = split[t1][1]
                if n1 == t1:
                    limit = rank[t2] + 1
                    n2 = split[t2][0]
                    if n2 == t2:
                        return True, costs
                    t2 = n2
                else:
                    t1 = n1
            else:
                limit = rank[t2] + 1
                n2 = split[t2][0]
                if n2 == t2:
                    limit = rank[t1]
                    n1 = split[t1][1]
                    if n1 == t1:
                        return True, costs
                    t1 = n1
                else:
                    t2 = n2

    # -- one word, as the kernels walk it --------------------------------------------------
    def bpe_events(self, word: bytes) -> list[tuple]:
        """The merge-order walk of one word: a list of steps (outcome, walk costs, check costs,
        extra loads), outcome "acc" (accepted), "short" (rejected, a shorter one next), "pop".
        Checks the result against reference.bpe_encode."""
        key = (word, self.fast, self.trie_opts)
        ev = self._bpe_cache.get(key)
        if ev is not None:
            return ev
        ev = []
        toks: list[int] = []
        dead = set()
        pos, cand, known = 0, None, True
        while pos < len(word):
            wc: list[int] = []
            if cand is None:
                cand, wc = self.walk(word, pos)
            end = pos + len(self.toks[cand])
            ok, vc = end not in dead, []
            if ok and toks:
                ok, vc = self.valid_pair(toks[-1], cand)
            if ok:
                known = True
                ev.append(("acc", wc, vc, 0))
                toks.append(cand)
                pos, cand = end, None
            elif self.next_prefix[cand] != NO_TOKEN:
                ev.append(("short", wc, vc, 1 if self.fast else 2))  # next_prefix, its length
                cand = self.next_prefix[cand]
            else:
                dead.add(pos)
                cand = toks.pop()
                pos -= len(self.toks[cand])
                if self.fast and self.next_prefix[cand] != NO_TOKEN:
                    cand = self.next_prefix[cand]  # the popped token ends at a dead position
                back = len(self.toks[toks[-1]]) if toks else 0  # prev_token's scan
                if self.fast and known:
                    back = 0  # the token before the popped one is kept (pprev)
                known = False
                ev.append(("pop", wc, vc, 1 + back))
        want = reference.bpe_encode(word, self.ranks)
        got = [int(self.rank[t]) for t in toks]
        if got != want and [self.ids[self.toks[t]] for t in toks] != want:
            raise AssertionError(f"model walk differs from reference on {word!r}")
        self._bpe_cache[key] = ev
        return ev

    def greedy_loads(self, word: bytes) -> tuple[int, int]:
        """Global-memory load instructions of greedy's walk (``trie_tokenizer_chunked``) over
        one word as written in ``wgsl/encode.wgsl``, counted as the merge-order kernel's
        PROFILE build counts its own (``ld_trie``, ``ld_text``): a child search 2 edge loads at
        a node of at most one child, else 8 + 2; a found child's node row 3; per iteration
        the word-start test of the next byte (2 doc_bits, 3 text loads) and, when it searches,
        that byte again; per token the byte the next walk starts with. Returns (trie loads,
        text loads); the thread's first word-start scan and the end-of-chunk tests are left
        out (a few per 32 bytes)."""
        got = self._greedy_loads.get(word)
        if got is not None:
            return got
        trie = text = 0
        pos = 0
        while pos < len(word):
            q, best = pos + 1, 1
            text += 1  # text_byte(p) of the walk's first byte
            while True:
                text += 5  # word_start_at(q)
                if q >= len(word):
                    break
                text += 1  # text_byte(q)
                trie += 2 if self.kids.get(word[pos:q], 0) <= 1 else 10
                if word[pos : q + 1] not in self.kids:
                    break
                trie += 3
                q += 1
                if word[pos:q] in self.tid:
                    best = q - pos
            pos += best
        self._greedy_loads[word] = (trie, text)
        return trie, text

    def greedy_iters(self, word: bytes) -> list[int]:
        """The greedy walk of one word: the cost of each iteration of its flat loop."""
        it = self._greedy_cache.get(word)
        if it is not None:
            return it
        it, pos = [], 0
        while pos < len(word):
            q, best = pos + 1, 1
            while True:
                if q >= len(word):
                    it.append(1)  # the emit (no child search: word end)
                    break
                c = self.child_cost(word[pos:q])
                if word[pos : q + 1] not in self.kids:
                    it.append(c)  # failing search + emit
                    break
                it.append(c + 1)
                q += 1
                if word[pos:q] in self.tid:
                    best = q - pos
            pos += best
        self._greedy_cache[word] = it
        return it


def lanes_of(data: bytes, starts: list[bool], chunk: int) -> list[list[bytes]]:
    """Words walked by each thread: thread c starts at the first word start in its chunk."""
    n = len(data)
    bounds = [i for i in range(n) if starts[i]] + [n]
    out = []
    wi = 0
    for cs in range(0, n, chunk):
        ce = min(cs + chunk, n)
        while wi < len(bounds) - 1 and bounds[wi] < cs:
            wi += 1
        words = []
        j = wi
        while j < len(bounds) - 1 and bounds[j] < ce:
            words.append(data[bounds[j] : bounds[j + 1]])
            j += 1
        out.append(words)
    return out


def warp_cost_flat(seqs: list[list[int]]) -> int:
    """Lockstep cost of one flat loop: per iteration, the most any lane pays."""
    m = max((len(s) for s in seqs), default=0)
    return sum(max((s[k] for s in seqs if k < len(s)), default=0) for k in range(m))


def bpe_lane(model: Model, words: list[bytes], variant: str) -> list:
    """One thread's merge-order work as loop iterations of ``variant``:
    nested: list of (walk costs, check costs, extra) per outer iteration;
    flat: list of (branch, cost) per iteration."""
    steps = []
    base, _, opts = variant.partition("+")
    model.fast = base in ("flat-fast", "flat-overlap")
    model.trie_opts = frozenset(opts.split("+")) - {""} if opts else frozenset()
    if "all" in model.trie_opts:
        model.trie_opts = frozenset({"short", "fused", "d2"})
    variant = base
    for w in words:
        steps += model.bpe_events(w)
    if variant == "nested":
        return [(sum(wc), sum(vc), x) for _, wc, vc, x in steps]
    out = []
    for kind, wc, vc, x in steps:
        # A slot: the walk's child searches, one per iteration; the one that fails (or the
        # word end) shares its iteration with the B slot: the candidate's try
        for c in wc[:-1]:
            out.append((c, 0))
        a = wc[-1] if wc else 0
        if variant == "flat":  # the pair check as an inner loop of the B slot
            out.append((a, sum(vc) + x + 1))
        elif variant in ("flat-fast", "flat-overlap"):  # first two check steps: one level
            out.append((a, sum(vc) + x))
        else:  # "flat-inc": one pair-check iteration per loop iteration
            vcs = vc or [0]
            out.append((a, vcs[0] + 1 + (x if len(vcs) == 1 else 0)))
            for j, c in enumerate(vcs[1:], 2):
                out.append((0, c + 1 + (x if j == len(vcs) else 0)))
    return out


def check_word(model: Model, word: bytes) -> tuple[bool, list[int]]:
    """The greedy-then-check walk's phase 2 over one word: whether its greedy tokens are the
    merge-order ones (every adjacent pair valid), and the cost of each check iteration (the
    token's scratch load, its rows, then the pair check's loads; stops at the first bad pair)."""
    toks, p = [], 0
    while p < len(word):
        best = 1
        for k in range(p + 1, len(word) + 1):
            if word[p:k] in model.tid:
                best = k - p
            if word[p:k] not in model.kids:
                break
        toks.append(model.tid[word[p:p + best]])
        p += best
    model.fast = True
    costs = [2]
    for a, b in zip(toks, toks[1:]):
        ok, vc = model.valid_pair(a, b) if model.reach[a] and model.reach[b] else (False, [])
        costs.append(2 + sum(vc))
        if not ok:
            return False, costs
    return True, costs


def gc_lanes(model: Model, words_of: list[list[bytes]], variant: str) -> int:
    """Warp cost of the greedy-then-check kernel: phase 1 (greedy walk of every word, lockstep
    as greedy's loop), then ``gc-rest``: the checks up to a lane's first bad word, whose words
    from there on go to the merge-order loop (flat-fast); ``gc-fix``: one loop of checks in
    which a bad word is re-walked by the merge-order loop in place (lanes checking and lanes
    re-walking share the loop's iterations: walk part + try part)."""
    g = warp_cost_flat([[c for w in ws for c in model.greedy_iters(w)] for ws in words_of])
    if variant == "gc-rest":
        checks, rest = [], []
        for ws in words_of:
            seq, tail = [], []
            for i, w in enumerate(ws):
                ok, cc = check_word(model, w)
                seq += cc
                if not ok:
                    tail = ws[i:]
                    seq += [1] * sum(1 for _ in tail)  # the undo (tokens of the rest)
                    break
            checks.append(seq)
            rest.append(bpe_lane(model, tail, "flat-fast") if tail else [])
        return g + warp_cost_flat(checks) + warp_cost_bpe(rest, "flat-fast")
    seqs = []
    for ws in words_of:
        seq = []
        for w in ws:
            ok, cc = check_word(model, w)
            seq += [(0, c) for c in cc]
            if not ok:
                seq += [(0, 1)] * len(cc)  # the undo of the word's tokens
                seq += bpe_lane(model, [w], "flat-fast")
        seqs.append(seq)
    return g + warp_cost_bpe(seqs, "flat-fast")


def warp_cost_bpe(lanes: list[list], variant: str) -> int:
    m = max((len(s) for s in lanes), default=0)
    tot = 0
    for k in range(m):
        act = [s[k] for s in lanes if k < len(s)]
        if variant == "nested":
            # inner loops in lockstep cost at least their longest lane (a lower bound)
            tot += 1 + max(a[0] for a in act) + max(a[1] for a in act) + max(a[2] for a in act)
        elif variant == "flat-overlap":  # a lane's try waits beside the walking lanes' loads
            tot += max(a[0] + a[1] for a in act)
        else:
            tot += max(a[0] for a in act) + max(a[1] for a in act)
    return tot


def gpu_work(vocab, chunk: int, docs: list[bytes]) -> dict[str, int]:
    """The PROFILE build's counters (_walk_work.walk_work); the ids are checked against
    reference.bpe_encode_batch."""
    from _walk_work import WorkTokenizer, walk_work

    ids: list = []
    w = walk_work(WorkTokenizer(vocab, mode="bpe", chunk_bytes=chunk), docs, ids_out=ids)
    want = reference.bpe_encode_batch(docs, vocab.bpe_ranks)
    if [x.tolist() for x in ids] != [list(x) for x in want]:
        raise AssertionError("the PROFILE build differs from the reference")
    return w


LOADS = ("ld_trie", "ld_rows", "ld_pairs", "ld_text")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=Path, default=REPO / "tests" / "data" / "vocabs" / "gpt2.tiktoken")
    ap.add_argument("--corpora", nargs="+", default=DEFAULT_CORPORA)
    ap.add_argument("--mb", type=float, default=1.0,
                    help="MB of each corpus (documents cut to a quarter of it)")
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--variants", nargs="+", default=["nested", "flat", "flat-fast",
                                                      "flat-overlap"],
                    help="models of the walk (module docstring), or 'none'")
    ap.add_argument("--gpu", action="store_true", help="also the real kernel's work counters")
    args = ap.parse_args()
    args.gpu_variants = ["default"]   # (the one build of the walk)
    if args.variants == ["none"]:
        args.variants = []
    vocab = Vocab.load(args.vocab).with_mode("bpe")
    model = Model(vocab)
    print(f"vocab {args.vocab.name} ({len(vocab)} ids), chunk {args.chunk} bytes, warp {WARP}; "
          f"units: dependent loads")
    print("| corpus | MB | tokens/byte | greedy warp loads/byte | "
          + " | ".join(f"{v} warp loads/byte | {v}/greedy" for v in args.variants)
          + " | pops/token | shorter tries/token | pair-check iterations/token | "
            "thread loads/byte greedy, bpe |")
    print("|---|---:|---:|---:|" + "---:|---:|" * len(args.variants) + "---:|---:|---:|---:|")
    tot = {"bytes": 0, "greedy": 0, **{v: 0 for v in args.variants}}
    gpu_rows: list = []
    greedy_ld: dict[str, tuple[int, int]] = {}
    for name in args.corpora:
        data_docs = []
        total = 0
        with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                b = json.loads(line)["text"][: int(args.mb * 250_000)].encode()
                data_docs.append(b)
                total += len(b)
                if total >= args.mb * 1e6:
                    break
        data = b"".join(data_docs)
        starts = []
        for d in data_docs:
            starts += reference.word_starts(d)
        lanes = lanes_of(data, starts, args.chunk)
        g = 0
        costs = {v: 0 for v in args.variants}
        ntok = npop = ntry = nvp = 0
        lane_g = lane_b = 0
        gl_trie = gl_text = 0
        for w0 in range(0, len(lanes), WARP):
            warp = lanes[w0 : w0 + WARP]
            for ws in warp:
                for w in ws:
                    a, b = model.greedy_loads(w)
                    gl_trie += a
                    gl_text += b
            if not args.variants:
                continue
            gseq = [[c for w in ws for c in model.greedy_iters(w)] for ws in warp]
            g += warp_cost_flat(gseq)
            lane_g += sum(map(sum, gseq))
            for v in args.variants:
                if v.startswith("gc-"):
                    costs[v] += gc_lanes(model, warp, v)
                else:
                    costs[v] += warp_cost_bpe([bpe_lane(model, ws, v) for ws in warp], v)
            for ws in warp:
                model.fast, model.trie_opts = False, frozenset()
                for w in ws:
                    for kind, wc, vc, x in model.bpe_events(w):
                        npop += kind == "pop"
                        ntry += kind == "short"
                        ntok += (kind == "acc") - (kind == "pop")
                        nvp += len(vc)
                        lane_b += sum(wc) + sum(vc) + x + 1
        n = len(data)
        greedy_ld[name] = (gl_trie, gl_text, n)
        if args.gpu:
            gpu_rows.append((name, n, {"default": gpu_work(vocab, args.chunk, data_docs)}))
        tot["bytes"] += n
        tot["greedy"] += g
        for v in args.variants:
            tot[v] += costs[v]
        if args.variants:
            print(f"| {name} | {n / 1e6:.2f} | {ntok / n:.3f} | {g / n:.2f} | "
                  + " | ".join(f"{costs[v] / n:.2f} | {costs[v] / g:.2f}" for v in args.variants)
                  + f" | {npop / ntok:.4f} | {ntry / ntok:.4f} | {nvp / ntok:.2f} | "
                    f"{lane_g / n:.2f}, {lane_b / n:.2f} |", flush=True)
    n = tot["bytes"]
    if args.variants:
        print(f"| all | {n / 1e6:.2f} | | {tot['greedy'] / n:.2f} | "
              + " | ".join(f"{tot[v] / n:.2f} | {tot[v] / tot['greedy']:.2f}"
                           for v in args.variants) + " | | | | |")
    if gpu_rows:
        keys = ["iters", "steps", "tries", "checks", "check_loop", "unwind", "probes",
                "shorter", "pops", "scan", "lockstep"]
        sg = gpu_rows[0][2]["default" if "default" in args.gpu_variants
                           else args.gpu_variants[0]]["subgroup_size"]
        first = args.gpu_variants[0]
        print(f"\nGPU kernel work counters (walk_work, build {first}), per 1,000 bytes; "
              f"lockstep: subgroups of {sg} lanes x their longest lane's iterations")
        print("| corpus | " + " | ".join(keys) + " | tokens/byte |")
        print("|---|" + "---:|" * (len(keys) + 1))
        for name, _, ws in gpu_rows:
            w = ws[first]
            b = w["bytes"] / 1000
            vals = [w[k] / b for k in keys[:-1]] + [w["lockstep"] * max(sg, 1) / b]
            print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in vals)
                  + f" | {w['output_tokens'] / w['bytes']:.3f} |")
        print("\nGlobal-memory load instructions per input byte (per lane; a vec4 row is one): "
              "the merge-order kernel's PROFILE counters by build (ids checked against "
              "reference.bpe_encode), and greedy's walk counted by the model (Model.greedy_loads; "
              "its rows, pairs: none)")
        print("| corpus | build | trie | rows | pairs | text | total | total vs default build |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        sums: dict[str, list[int]] = {}
        for name, nb, ws in gpu_rows:
            gt, gx, _ = greedy_ld[name]
            print(f"| {name} | greedy (model) | {gt / nb:.2f} | 0 | 0 | {gx / nb:.2f} | "
                  f"{(gt + gx) / nb:.2f} | |")
            s0 = sum(ws[first][k] for k in LOADS)
            acc = sums.setdefault("greedy (model)", [0, 0, 0, 0, 0])
            for i, x in enumerate((gt, 0, 0, gx, nb)):
                acc[i] += x
            for v, w in ws.items():
                tl = sum(w[k] for k in LOADS)
                print(f"| {name} | {v} | " + " | ".join(f"{w[k] / nb:.2f}" for k in LOADS)
                      + f" | {tl / nb:.2f} | {tl / s0:.2f} |")
                acc = sums.setdefault(v, [0, 0, 0, 0, 0])
                for i, k in enumerate(LOADS):
                    acc[i] += w[k]
                acc[4] += nb
        s0 = sum(sums[first][:4])
        for v, acc in sums.items():
            nb = acc[4]
            print(f"| all | {v} | " + " | ".join(f"{x / nb:.2f}" for x in acc[:4])
                  + f" | {sum(acc[:4]) / nb:.2f} | "
                  + (f"{sum(acc[:4]) / s0:.2f}" if v != "greedy (model)" else "") + " |")


if __name__ == "__main__":
    main()
