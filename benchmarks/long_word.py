"""Benchmark: one long word (MBs of one kind of character) vs the same bytes split into words.

    python3 benchmarks/long_word.py --help
    python3 benchmarks/long_word.py                      # 5 MB per case, vocab 4,096, best of 3
    python3 benchmarks/long_word.py --mb 1 --repeat 2    # lavapipe
    python3 benchmarks/long_word.py --serial             # also the one-thread walk (before issue 17)
    python3 benchmarks/long_word.py --cases --train      # only the trainer's submit gaps
    python3 benchmarks/long_word.py --train              # encoder, trainer, encoder again

Each case encodes one document that is ONE word of ``--mb`` MB (``b"a" * 5_000_000``, a space run,
digits, ``=``, ``ş``, emoji, ``ab`` alternating) and the same character(s) split into words
(``b"a " * 2_500_000`` for ``a``; a separator every 8 bytes for the others), with
``Tokenizer.encode_to_numpy`` (public API, warm session), and prints the times and their ratio
(issue 17's target: long ≤ 3× split). With ``--serial`` the long word is also encoded with
``long_word_bytes=None`` (each word walked by one GPU thread, the pre-issue-17 path) and the ids
are compared. Every long-word result is checked against a run oracle (one-byte runs) or the
serial path on its first MB. With ``--train``, ``torch_gpubpe.train`` also runs on one document
of ``--mb`` MB that is one word (``b"a" * 5_000_000``; ``b"abab…"``) and on a base64 blob of
random bytes (one document; the DESIGN.md §2 rule cuts it where letters and digits meet), and
prints the merge phase's submits, the largest interval between two of them
(``stats["max_submit_gap_s"]``; issue 17's target: at most 50 ms), the kinds of the two submits
around it (count, merges, continue, ...), how much of it the host was blocked on a GPU readback
or inside the submit call (a CPU adapter runs the work there), the GPU time measured per merge /
per continuation dispatch (what caps the work per submit: ``trainer.TARGET_SUBMIT_S``), its
seconds, and the chains the long-chain path (``wgsl/train_long.wgsl``) took and its rounds.

A *gap* (``stats["max_submit_gap_s"]``) is the time from the start of one ``queue.submit`` call
of the merge phase to the start of the next one (every submit from the first pair count to the
last batch of merges: counts, batches of merges, continuations), so it holds the host's work
between them, its waits for readbacks and the submit call itself. On a GPU it is how long the
device can go without new work; on a CPU adapter (lavapipe), where one submission runs at a
time and a submit or readback waits for the one before, it is about the work of one submit
(``stats["max_submit_gap_cpu_s"]``, the process's CPU time over the gap, tells that from a
busy machine). lavapipe, 2 shared cores, ``--mb 1`` (17:41 UTC): a 39.6 ms, ab 29.2 ms, base64
130 ms (there a single merge's find_max4 rescans ~100 dirty 1024-slot table blocks: 30-75 ms
of GPU time on lavapipe; 64 KB of base64 stays within 50 ms); before this session's changes
1.8 s, 2.2 s and 7.1 s.

With ``--train`` and encoder cases (``--order both``, the default) the encoder table is run
twice in one process, before any training and right after the trainer cases, and the two are
printed side by side (absolute times of the long word and of the split document: which one
moved), each headed by the process's RSS, tracked Python objects and live threads.
Ends with the SM clock, the machine, the date and the command.

``--mode bpe``: the same cases in merge-order mode (``Tokenizer(vocab, mode="bpe")``, default
vocab GPT-2's ``tests/data/vocabs/gpt2.tiktoken``), plus random digits and random letters (a run
of one character is periodic; these are not). A long merge-order word is cut into pieces walked
side by side (``torch_gpubpe.encoding.long_bpe``); the table shows its time, MB/s, the walk
dispatches, and the cuts checked / failed / moved / removed. The first 64 KB of each
long word are checked against the Python backtracking encoder
(``torch_gpubpe.core.bpe_tables.backtrack_encode``, itself tested against tiktoken), leaving out
the last 64 tokens (a prefix of a word ends inside it), and the whole ids must decode to the
word (the tests check whole long words against tiktoken). Example::

    python3 benchmarks/long_word.py --mode bpe --mb 1 --repeat 1

Data: none (the inputs are generated); the vocab is trained with ``reference.train`` on the
corpora in ``TORCH_GPUBPE_CORPORA`` (or ``../shared/corpora``, else ``tests/data/corpora``) plus a
few runs, or read from ``--vocab``.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402

from torch_gpubpe import Tokenizer, Vocab, reference  # noqa: E402

CASES = {  # name: (the repeated unit of the long word, the unit of the split document)
    "a": (b"a", b"a "),
    "space": (b" ", b"       a"),
    "digits": (b"7", b"7777777 "),
    "=": (b"=", b"======= "),
    "ab": (b"ab", b"abababa "),
    "ş (2 B)": ("ş".encode(), "şşş".encode() + b"  "),
    "emoji (4 B)": ("😀".encode(), "😀".encode() + b"    "),
}


def corpora_dir() -> Path:
    env = os.environ.get("TORCH_GPUBPE_CORPORA")
    for cand in (env, REPO.parent / "shared" / "corpora", REPO / "tests" / "data" / "corpora"):
        if cand and any(Path(cand).glob("*.jsonl.gz")):
            return Path(cand)
    raise SystemExit("no corpora found: set TORCH_GPUBPE_CORPORA or pass --vocab")


def get_vocab(args) -> Vocab:
    if args.vocab:
        return Vocab.load(args.vocab)
    docs, size = [], 0
    for path in sorted(corpora_dir().glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for k, line in enumerate(f):
                if k >= 40:
                    break
                docs.append(json.loads(line)["text"][:3000])
                size += len(docs[-1])
    docs += [u.decode() * 40 for u, _ in CASES.values()] * 3  # runs make long-run tokens
    t0 = time.perf_counter()
    merges = reference.train(docs, vocab_size=args.vocab_size, min_frequency=2)
    print(f"vocab: {256 + len(merges)} ids, reference.train on {size / 1e6:.1f} MB "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)
    return Vocab.from_merges(merges)


def best(tok: Tokenizer, doc: bytes, repeat: int) -> tuple[float, np.ndarray]:
    ts, ids = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        ids = tok.encode_to_numpy(doc)
        ts.append(time.perf_counter() - t0)
    return min(ts), ids


def expected_prefix(vocab: Vocab, unit: bytes, doc: bytes, serial: Tokenizer) -> list[int]:
    """Ids of the first MB of ``doc``, from a run oracle (one-byte unit) or the serial path.
    A prefix of a one-word document that ends at a whole unit ends inside the same word, so
    only the last few tokens may differ: the comparison leaves out the last 64."""
    n = min(1 << 20, len(doc)) // len(unit) * len(unit)
    if len(unit) == 1:
        lookup: dict[bytes, int] = {}
        for i, tb in enumerate(vocab.token_bytes[: vocab.num_tokens]):
            lookup.setdefault(tb, i)
        k = max(m for m in range(1, 257) if unit * m in lookup)
        return [lookup[unit * k]] * (n // k) + [lookup[b] for b in
                                                 _greedy(unit * (n % k), lookup)]
    return serial.encode_to_numpy(doc[:n]).tolist()


def _greedy(word: bytes, lookup: dict[bytes, int]) -> list[bytes]:
    out, j = [], 0
    while j < len(word):
        for m in range(len(word) - j, 0, -1):
            if word[j : j + m] in lookup:
                out.append(word[j : j + m])
                j += m
                break
    return out


TRAIN_CASES = {  # name: document of n bytes
    "a": lambda n: b"a" * n,
    "ab": lambda n: (b"ab" * (n // 2 + 1))[:n],
    "base64": lambda n: base64.b64encode(np.random.default_rng(17).bytes(n * 3 // 4 + 3))[:n],
}


def train_gaps(nbytes: int, vocab_size: int) -> list[dict]:
    """``train([doc], vocab_size)`` on each of TRAIN_CASES; its submits and largest gap."""
    import warnings

    from torch_gpubpe import GPUBPEWarning, get_gpu, train

    with warnings.catch_warnings():  # compile the pipelines first (lavapipe: at first dispatch)
        warnings.simplefilter("ignore", GPUBPEWarning)
        train(["ab abc abd " * 50, "a" * 3000], 300, min_frequency=1, progress=False)
    print(f"\ntrainer on {get_gpu().adapter_name}; SM clock {sm_clock_now()}")
    print(f"{'train on':<12} {'MB':>5} {'words':>8} {'merges':>7} {'submits':>8} "
          f"{'max gap':>9} {'after':>9} {'before':>9} {'waited':>8} {'merge s':>8} "
          f"{'total s':>8}  target <= 50 ms")
    print("  (max gap: the longest interval between two submits; after/before: the kinds of "
          "the submits around it; waited: of it, the host blocked on a GPU readback, the rest "
          "host work, or in the submit call (a CPU adapter runs the work there))")
    rows = []
    for name, make in TRAIN_CASES.items():
        doc = make(nbytes)
        st: dict = {}
        t0 = time.perf_counter()
        vocab = train([doc], vocab_size, min_frequency=2, stats=st, progress=False)
        total = time.perf_counter() - t0
        gap = st.get("max_submit_gap_s", 0.0)
        print(f"{name:<12} {len(doc) / 1e6:>5.1f} {st['unique_words']:>8,} "
              f"{len(vocab.merges):>7,} {st.get('submits', 0):>8} {gap * 1e3:>7.1f}ms "
              f"{st.get('max_submit_gap_after', '-'):>9} "
              f"{st.get('max_submit_gap_before', '-'):>9} "
              f"{st.get('max_submit_gap_wait_s', 0.0) * 1e3:>6.1f}ms {st['seconds_merge']:>8.2f} "
              f"{total:>8.2f}  {'ok' if gap <= 0.050 else 'ABOVE'}", flush=True)
        keys = ("submits", "max_submit_gap_after", "max_submit_gap_before",
                "max_submit_gap_wait_s", "max_submit_gap_in_submit_s", "seconds_merge",
                "seconds_upload", "walks_paused",
                "continuation_dispatches", "continue_s_per_dispatch",
                "seconds_gpu_per_merge_max", "walk_budget", "long_chains",
                "long_chains_serial", "long_rounds")
        print("    " + ", ".join(f"{k}={st[k]:.4g}" if isinstance(st.get(k), float)
                                 else f"{k}={st.get(k)}" for k in keys[4:]), flush=True)
        rows.append({"case": name, "bytes": len(doc), "max_submit_gap_s": gap,
                     **{k: st.get(k) for k in keys}})
    return rows


def process_state() -> str:
    """This process's resident memory, live Python objects and threads (what a trainer run
    before can leave behind: the encoder's long-word ratio was 1.8x in a fresh process and
    4.4-5.0x right after the trainer cases on the H200)."""
    import gc
    import threading

    rss = next((int(line.split()[1]) // 1024 for line in open("/proc/self/status")
                if line.startswith("VmRSS:")), -1) if os.path.exists("/proc/self/status") else -1
    names = sorted({t.name.rstrip("0123456789_-") for t in threading.enumerate()})
    return (f"RSS {rss:,} MB, {len(gc.get_objects()):,} Python objects tracked, "
            f"threads: {', '.join(names)}")


def encode_cases(args, nbytes: int, vocab: Vocab, tok: Tokenizer, serial: Tokenizer,
                 label: str) -> list[dict]:
    """The encoder table: each case's long word and split document, best of ``--repeat``."""
    sess = tok._session()
    print(f"\n== encoder, {label}; SM clock {sm_clock_now()}; {process_state()}")
    head = (f"{'case':<12} {'long word':>11} {'split':>9} {'ratio':>6} {'MB/s long':>10} "
            f"{'MB/s split':>10}")
    print(head + ("  " + f"{'serial':>9} {'speedup':>8}" if args.serial else ""))
    rows = []
    with GPUMonitor() as mon:
        for name in args.cases:
            unit, split_unit = CASES[name]
            long_doc = unit * (nbytes // len(unit))
            split_doc = split_unit * (nbytes // len(split_unit))
            r0 = sess.long_regions
            t_long, ids = best(tok, long_doc, args.repeat)
            assert sess.long_regions > r0, "the long-word path did not run"
            want = expected_prefix(vocab, unit, long_doc, serial)
            got = ids[: len(want)].tolist()
            assert got[: len(want) - 64] == want[: len(want) - 64], f"{name}: ids differ"
            t_split, _ = best(tok, split_doc, args.repeat)
            line = (f"{name:<12} {t_long * 1e3:>9.1f}ms {t_split * 1e3:>7.1f}ms "
                    f"{t_long / t_split:>6.2f} {len(long_doc) / t_long / 1e6:>10.1f} "
                    f"{len(split_doc) / t_split / 1e6:>10.1f}")
            row = {"case": name, "bytes": len(long_doc), "long_s": t_long, "split_s": t_split}
            if args.serial:
                t_ser, ids_ser = best(serial, long_doc, 1)
                assert np.array_equal(ids_ser, ids), f"{name}: serial and parallel ids differ"
                line += f"  {t_ser * 1e3:>7.1f}ms {t_ser / t_long:>7.1f}x"
                row["serial_s"] = t_ser
            print(line, flush=True)
            rows.append(row)
    print(mon.summary())
    print(f"worst ratio long/split ({label}): "
          f"{max(r['long_s'] / r['split_s'] for r in rows):.2f} (issue 17 target: <= 3)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=5.0, help="MB per document (default 5)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case, best kept")
    ap.add_argument("--vocab", help="a vocab file (default: train one, --vocab-size)")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--serial", action="store_true",
                    help="also time long_word_bytes=None (one thread per word) and compare ids")
    ap.add_argument("--mode", choices=["greedy", "bpe"], default="greedy",
                    help="bpe: merge-order mode (its serial walk), default vocab GPT-2's")
    ap.add_argument("--train", action="store_true",
                    help="also train on one --mb word and a base64 blob: submit gaps "
                         "(--cases with no names: only that)")
    ap.add_argument("--order", choices=["both", "train-first", "encode-first"], default="both",
                    help="with --train and encoder cases: encode, train, encode again (both, "
                         "default), or only one order")
    ap.add_argument("--train-vocab-size", type=int, default=1024)
    args = ap.parse_args()
    nbytes = int(args.mb * 1_000_000)
    if args.mode == "bpe":
        if args.train:
            with GPUMonitor() as mon:
                train_gaps(nbytes, args.train_vocab_size)
            print(f"\n{mon.summary()}\n")
        bpe_main(args, nbytes)
        return
    if args.train and not args.cases:
        with GPUMonitor() as mon:
            train_gaps(nbytes, args.train_vocab_size)
        print(f"\n{mon.summary()}")
        print_footer()
        return
    vocab = get_vocab(args)
    tok = Tokenizer(vocab)
    serial = Tokenizer(vocab, long_word_bytes=None)
    tok.encode(b"warm up " * 1000 + b"a" * 100_000)
    serial.encode(b"warm up")
    sess = tok._session()
    print(f"adapter: {sess.gpu.adapter_name}; SM clock at start {sm_clock_now()}")
    print(f"long-word path: from {sess.long_from} B past a chunk, tiles of {sess.lc} B, "
          f"windows of {sess.ldw} nodes (longest token)")
    tables = {}
    if not args.train or args.order in ("both", "encode-first"):
        tables["before any training"] = encode_cases(args, nbytes, vocab, tok, serial,
                                                     "before any training (fresh process)")
    if args.train:
        with GPUMonitor() as mon:
            train_gaps(nbytes, args.train_vocab_size)
        print(f"\n{mon.summary()}")
        if args.order in ("both", "train-first"):
            tables["after the trainer"] = encode_cases(args, nbytes, vocab, tok, serial,
                                                       "right after the trainer cases")
    if len(tables) == 2:
        a, b = tables.values()
        print("\nthe two orders (ms, best of --repeat): long before -> after, split before -> "
              "after, ratio before -> after")
        for ra, rb in zip(a, b):
            print(f"  {ra['case']:<12} long {ra['long_s'] * 1e3:8.1f} -> {rb['long_s'] * 1e3:8.1f}"
                  f"   split {ra['split_s'] * 1e3:8.1f} -> {rb['split_s'] * 1e3:8.1f}   ratio "
                  f"{ra['long_s'] / ra['split_s']:5.2f} -> {rb['long_s'] / rb['split_s']:5.2f}")
    print_footer()


def bpe_main(args, nbytes: int) -> None:
    """--mode bpe: the serial merge-order walk of one long word vs the same bytes split."""
    from torch_gpubpe.core.bpe_tables import backtrack_encode, bpe_tables

    path = args.vocab or str(REPO / "tests" / "data" / "vocabs" / "gpt2.tiktoken")
    vocab = Vocab.load(path).with_mode("bpe")
    tables = bpe_tables(vocab)
    tok = Tokenizer(vocab, mode="bpe")
    tok.encode(b"warm up " * 1000)
    sess = tok._session()
    print(f"merge-order mode, vocab {Path(path).name} ({len(vocab)} ids); adapter: "
          f"{sess.gpu.adapter_name}; SM clock at start {sm_clock_now()}; walk budget "
          f"{sess.budget} loop iterations per thread per dispatch\n")
    print(f"{'case':<16} {'long word':>11} {'split':>9} {'ratio':>7} {'MB/s long':>10} "
          f"{'dispatches':>10} {'cuts checked/failed/moved/removed':>34}")
    rng = np.random.default_rng(0)
    cases = {name: (CASES[name][0] * (nbytes // len(CASES[name][0])),
                    CASES[name][1] * (nbytes // len(CASES[name][1]))) for name in args.cases}
    for name, alphabet in (("digits (random)", b"0123456789"),
                           ("letters (random)", b"abcdefghijklmnopqrstuvwxyz")):
        word = np.frombuffer(alphabet, np.uint8)[rng.integers(0, len(alphabet), nbytes)]
        split = word.copy()
        split[7::8] = ord(" ")
        cases[name] = (word.tobytes(), split.tobytes())
    stat = ("long_bpe_checks", "long_bpe_failed", "long_bpe_moved", "long_bpe_removed")
    rows = []
    with GPUMonitor() as mon:
        for name, (long_doc, split_doc) in cases.items():
            d0 = sess.continuation_dispatches
            s0 = [getattr(sess, k) for k in stat]
            t_long, ids = best(tok, long_doc, args.repeat)
            disp = (sess.continuation_dispatches - d0) // args.repeat
            cuts = "/".join(str((getattr(sess, k) - v) // args.repeat) for k, v in zip(stat, s0))
            want = backtrack_encode(long_doc[: 1 << 16], vocab, tables)
            got = ids[: len(want)].tolist()
            assert got[: len(want) - 64] == want[: len(want) - 64], f"{name}: ids differ"
            assert tok.decode_bytes(ids.tolist()) == long_doc, f"{name}: not the bytes"
            t_split, _ = best(tok, split_doc, args.repeat)
            print(f"{name:<16} {t_long * 1e3:>9.1f}ms {t_split * 1e3:>7.1f}ms "
                  f"{t_long / t_split:>7.1f} {len(long_doc) / t_long / 1e6:>10.2f} {disp:>10} "
                  f"{cuts:>34}", flush=True)
            rows.append({"case": name, "long_s": t_long, "split_s": t_split})
    print(f"\n{mon.summary()}")
    print(f"worst ratio long/split: {max(r['long_s'] / r['split_s'] for r in rows):.1f}")
    print_footer()


if __name__ == "__main__":
    main()
