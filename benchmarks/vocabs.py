"""Benchmark: real models' tokenizers (``tokenizer.json``) in memory, on the same documents:
gigatoken first, then torch_gpubpe on the GPU, then Hugging Face tokenizers; every id checked.

    python3 benchmarks/vocabs.py --json llama3=/tmp/tj/llama-bpe.json qwen2=/tmp/tj/qwen2.json
    python3 benchmarks/vocabs.py --llamacpp-models <llama.cpp models folder> --names llama-bpe
    python3 benchmarks/vocabs.py ... --max-bytes 2000000 --skip-hf        # lavapipe

The ``tokenizer.json`` files: a model's own, or rebuilt from llama.cpp's vocab test files
(``tests/llamacpp_vocabs.py``; ``--llamacpp-models`` as ``$TORCH_GPUBPE_LLAMACPP_MODELS``).

Rows, MB/s of UTF-8 input (``list[str]`` in → ids out), best of ``--repeat``:

* gigatoken: ``gigatoken.Tokenizer(path).encode_batch(docs)`` (its threads, all cores).
* torch_gpubpe: ``Tokenizer.from_hf(path)``, batches of ``--batch-bytes``, two in flight, after
  ``--warm-s`` seconds of untimed runs
  (``submit``/``result``: text that spells an added token is text); its ids are checked with
  ``encode_batch(..., allowed_special="all")`` (added tokens matched, as HF and gigatoken do).
* HF tokenizers: ``Tokenizer.from_file(path).encode_batch(docs, add_special_tokens=False)``
  (Rust threads), the reference ids; with ``--skip-hf``, gigatoken's are.

Exit 1 if torch_gpubpe's ids differ from the reference on any document. Ends with the
machine, date, command and SM clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from _report import GPUMonitor, print_footer, sm_clock_now  # noqa: E402
from encode import CORPORA, DEFAULT_CORPORA, batches, read_docs  # noqa: E402

from torch_gpubpe.encoding.tokenizer import Tokenizer  # noqa: E402


def best(fn, repeat: int):
    """(seconds, result) of the fastest of ``repeat`` calls."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        runs.append((time.perf_counter() - t0, out))
    return min(runs, key=lambda r: r[0])


def gpu_pipelined(tok: Tokenizer, bs: list[list[str]]) -> list:
    """BatchEncodings of ``bs``, two in flight (ids stay numpy arrays: no Python list per
    document is timed)."""
    out, pending = [], []
    for b in bs:
        pending.append(tok.submit(b))
        if len(pending) == 2:
            out.append(pending.pop(0).result())
    return out + [p.result() for p in pending]


def tokenizer_files(args) -> list[tuple[str, Path]]:
    files = []
    for spec in args.json:
        name, _, path = spec.partition("=")
        files.append((name, Path(path or name)))
    if args.llamacpp_models:
        import os

        import llamacpp_vocabs

        os.environ[llamacpp_vocabs.ENV] = str(args.llamacpp_models)
        tmp = Path(tempfile.mkdtemp(prefix="vocabs-bench-"))
        for name in args.names:
            p = tmp / f"{name}.json"
            p.write_text(json.dumps(llamacpp_vocabs.tokenizer_json(name), ensure_ascii=False),
                         encoding="utf-8")
            files.append((name, p))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", nargs="*", default=[], metavar="NAME=PATH",
                    help="tokenizer.json files to run")
    ap.add_argument("--llamacpp-models", type=Path,
                    help="llama.cpp's models folder: rebuild --names from its gguf files")
    ap.add_argument("--names", nargs="*", default=["gpt-2", "llama-bpe", "qwen2",
                                                     "deepseek-coder", "starcoder"])
    ap.add_argument("--corpora", nargs="*", default=DEFAULT_CORPORA)
    ap.add_argument("--max-bytes", type=int, default=102_000_000)
    ap.add_argument("--batch-bytes", type=int, default=32_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-hf", action="store_true", help="no HF tokenizers row")
    ap.add_argument("--warm-s", type=float, default=1.0,
                    help="seconds of untimed GPU runs before the timed ones (an idle GPU clocks "
                         "down while the peers run)")
    args = ap.parse_args()

    import gigatoken

    docs = read_docs([CORPORA / f"{c}.jsonl.gz" for c in args.corpora], args.max_bytes)
    total = sum(len(d.encode()) for d in docs)
    print(f"{len(docs):,} documents, {total / 1e6:.1f} MB ({', '.join(args.corpora)}); "
          f"SM clock {sm_clock_now()}", flush=True)
    bs = batches(docs, args.batch_bytes)
    table, failed = [], []
    for name, path in tokenizer_files(args):
        try:
            giga = gigatoken.Tokenizer(str(path))
        except Exception as e:  # (it refuses some pre-tokenizers: said in the row)
            print(f"\n{name}: gigatoken refuses it: {str(e).splitlines()[0][:200]}")
            giga = None
        g_s, g_ids = float("nan"), None
        if giga is not None:
            giga.encode_batch(docs[:16])
            g_s, g_out = best(lambda: giga.encode_batch(docs), args.repeat)
            g_ids = [list(x) for x in g_out]
        t0 = time.perf_counter()
        tok = Tokenizer.from_hf(path)
        tok.encode_batch(bs[0][:64])  # opens the GPU, compiles, warms up
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()  # the GPU at its clock again after the peer's CPU run
        while time.perf_counter() - t0 < args.warm_s:
            gpu_pipelined(tok, bs)
        with GPUMonitor() as mon:
            ours_s, _ = best(lambda: gpu_pipelined(tok, bs), args.repeat)
        # ids checked with added tokens matched in the text, as HF and gigatoken do (the
        # timed rows take special spellings as text, tiktoken's encode_ordinary)
        ours = [ids for b in bs for ids in tok.encode_batch(b, allowed_special="all").tolist()]
        ref, ref_name = g_ids, "gigatoken"
        rows = [("gigatoken 0.10 encode_batch", g_s)] if giga is not None else []
        rows.append(("torch_gpubpe GPU", ours_s))
        if giga is None and args.skip_hf:
            print(f"{name}: gigatoken refuses it and --skip-hf: no reference ids, left out")
            continue
        if not args.skip_hf:
            import tokenizers

            hf = tokenizers.Tokenizer.from_file(str(path))
            hf.encode_batch(docs[:16], add_special_tokens=False)
            h_s, h_out = best(lambda: hf.encode_batch(docs, add_special_tokens=False), 1)
            ref, ref_name = [e.ids for e in h_out], "HF tokenizers"
            rows.append(("HF tokenizers encode_batch", h_s))
        bad = sum(a != b for a, b in zip(ours, ref))
        g_bad = sum(a != b for a, b in zip(g_ids, ref)) if g_ids is not None else len(docs)
        print(f"\n{name} ({path.name}, pre-tokenizer {tok.pre_tokenizer}): torch_gpubpe ids == "
              f"{ref_name} on {len(docs) - bad} of {len(docs)} documents; gigatoken's on "
              f"{len(docs) - g_bad if g_ids is not None else 'none (refused)'}; setup "
              f"{setup:.1f} s; {mon.summary()}", flush=True)
        for what, s in rows:
            table.append((name, what, total / s / 1e6, g_s / s))
        if giga is None:
            table.append((name, "gigatoken 0.10", float("nan"), float("nan")))
        if bad:
            failed.append(name)
    print("\n| vocabulary | encoder | MB/s | vs gigatoken |\n|---|---|---:|---:|")
    for name, what, mbs, x in table:
        if mbs != mbs:
            print(f"| {name} | {what} | refused | |")
        else:
            vs = f"{x:,.2f}x" if x == x else "(refused)"
            print(f"| {name} | {what} | {mbs:,.1f} | {vs} |")
    print_footer()
    if failed:
        print(f"FAIL: torch_gpubpe's ids differ on {failed}")
        sys.exit(1)


if __name__ == "__main__":
    main()
