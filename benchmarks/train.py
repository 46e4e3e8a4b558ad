"""Benchmark: GPU BPE training (torch_gpubpe.training.trainer) vs rustbpe vs Hugging Face tokenizers.

Same documents, same pre-tokenizer (DESIGN.md §2 regex, vocab.SPLIT_PATTERN), same vocab size.
Each method runs in its own child process (fresh interpreter) so that its peak host memory
(``VmHWM``, see ``_report.peak_rss_bytes``) is its own; the child loads the documents itself.

Usage::

    python3 benchmarks/train.py                                  # 4 largest corpora, vocab 32,768
    python3 benchmarks/train.py --corpus en_novels --max-bytes 20000000 --vocab-size 8192
    python3 benchmarks/train.py --skip-hf --profile --json-out out.json
    python3 benchmarks/train.py --skip-hf --skip-count --jsonl /tmp/big.jsonl --vocab-size 65536
        # a JSON Lines corpus ({"text": ...} per line, e.g. ../shared/device/gather_text.py's)

Both GPU algorithms run, each in its own fresh process: ``gpubpe`` (the default,
``algorithm="wordlist"``) and ``gpubpe_seed`` (``algorithm="seed"``, the seed's pipeline;
``--skip-seed`` leaves it out). Each row shows the SM clock sampled while it ran.

Reports wall time (split into word counting and merging where the method allows), peak RSS,
merges/s, whether the merges equal rustbpe's (token bytes in rank order), and with
``--profile`` the GPU time per kernel per merge from timestamp queries. The GPU trainer trains
twice in its process: the first row includes opening the device and compiling the pipelines,
the "(warm)" row is the second training (the device already open). Counting-only rows: the GPU
word counter (device opened first, not timed), the CPU word counter and rustbpe's own counting.
With ``--parquet DIR``: the ``train`` CLI on the files (``gpubpe_cli``), what an API user writes
(``pq.read_table`` + ``train`` + ``Vocab.save``, ``gpubpe_api_files``; ``train(FileReader(files))``
+ ``Vocab.save``, ``gpubpe_api_reader``), all whole processes timed from outside, and
gigatoken's ``train_bpe`` on the same files.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

DEFAULT_CORPORA = ["en_novels", "code_cpython_stdlib", "web_html", "en_python_docs"]


def corpora_dir() -> Path:
    env = os.environ.get("TORCH_GPUBPE_CORPORA")
    return Path(env) if env else REPO.parent / "shared" / "corpora"


def load_docs(names: list[str], max_bytes: int | None, jsonl: str | None = None,
              repeat: int = 1) -> list[str]:
    """Documents of the named corpora in file order (or of the JSON Lines file ``jsonl``);
    each corpus cut at ``max_bytes`` bytes; the whole list repeated ``repeat`` times."""
    out: list[str] = []
    if jsonl:
        opener = gzip.open if jsonl.endswith(".gz") else open
        with opener(jsonl, "rt", encoding="utf-8") as f:
            out = [json.loads(line)["text"] for line in f]
        return out * repeat
    for name in names:
        total = 0
        with gzip.open(corpora_dir() / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                out.append(text)
                total += len(text.encode())
                if max_bytes and total >= max_bytes:
                    break
    return out * repeat


def peak_rss_mb() -> float:
    from benchmarks._report import peak_rss_bytes

    return peak_rss_bytes() / 2**20


# -- methods (run inside a child process) --------------------------------------------------------
PRE_TOKENIZER = None   # --pre-tokenizer: the split of every method (None: DESIGN.md §2's)


def split_pattern() -> str:
    """The pat_str the peers split with: the family's, else DESIGN.md §2's."""
    from torch_gpubpe.core.patterns import PATTERN_OF, resolve
    from torch_gpubpe.core.vocab import SPLIT_PATTERN

    return PATTERN_OF[resolve(PRE_TOKENIZER)] if PRE_TOKENIZER else SPLIT_PATTERN


def run_gpubpe(docs, vocab_size, min_frequency, profile, algorithm="wordlist", count_on="gpu"):
    """A first training in a fresh process (includes opening the device and compiling the
    pipelines), then a second one in the same process ("warm": the device is open)."""
    from torch_gpubpe.training.trainer import train

    out = {}
    for run in ("cold", "warm"):
        stats: dict = {}
        t = time.perf_counter()
        vocab = train(docs, vocab_size, min_frequency=min_frequency, stats=stats,
                      profile=profile, algorithm=algorithm, count_on=count_on,
                      pre_tokenizer=PRE_TOKENIZER)
        wall = time.perf_counter() - t
        out[run] = {"wall_s": wall, "count_s": stats.get("seconds_count"),
                    "merge_s": stats.get("seconds_merge"), "num_merges": len(vocab.merges),
                    "token_bytes": [b.hex() for b in vocab.token_bytes], "stats": {
                        k: v for k, v in stats.items()
                        if isinstance(v, (int, float, str, dict))}}
        if profile:
            break
    if os.environ.get("GPUBPE_SAVE_VOCAB") and not profile:
        vocab.save(os.environ["GPUBPE_SAVE_VOCAB"])  # reused by benchmarks/encode.py
    res = out["cold"]
    if "warm" in out:
        res["warm"] = out["warm"]
    return res


def run_rustbpe(docs, vocab_size, min_frequency, profile):
    import rustbpe


    t = time.perf_counter()
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), vocab_size, pattern=split_pattern())
    wall = time.perf_counter() - t
    ranks = [bytes(b) for b, _ in sorted(tok.get_mergeable_ranks(), key=lambda kv: kv[1])]
    return {"wall_s": wall, "num_merges": len(ranks) - 256, "token_bytes": [b.hex() for b in ranks]}


def run_rustbpe_count(docs, vocab_size, min_frequency, profile):
    """rustbpe's own counting (pre-tokenize + count), measured as a training to 257 tokens."""
    import rustbpe


    t = time.perf_counter()
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), 257, pattern=split_pattern())
    return {"wall_s": time.perf_counter() - t, "num_merges": 1}


def run_gpubpe_count(docs, vocab_size, min_frequency, profile):
    """GPU word counting, the device opened first (not timed)."""
    from torch_gpubpe.gpu.device import get_gpu
    from torch_gpubpe.training.wordcount import count_words_gpu

    get_gpu()
    count_words_gpu(docs[:10])          # compile the pipelines
    t = time.perf_counter()
    counts = count_words_gpu(docs)
    return {"wall_s": time.perf_counter() - t, "num_merges": 0, "unique_words": len(counts)}


def run_cpu_count(docs, vocab_size, min_frequency, profile):
    """The CPU word counter (vectorised numpy, all cores)."""
    from torch_gpubpe.training.wordcount import count_words

    t = time.perf_counter()
    counts = count_words(docs)
    return {"wall_s": time.perf_counter() - t, "num_merges": 0, "unique_words": len(counts)}


def run_hf(docs, vocab_size, min_frequency, profile):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from torch_gpubpe.core.vocab import SPLIT_PATTERN

    t = time.perf_counter()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(docs, trainer)
    wall = time.perf_counter() - t
    return {"wall_s": wall, "num_merges": tok.get_vocab_size() - 256}


def run_gpubpe_seed(docs, vocab_size, min_frequency, profile):
    """``algorithm="seed"``: the seed's pipeline (stream compacted every merge)."""
    return run_gpubpe(docs, vocab_size, min_frequency, profile, algorithm="seed")


def run_warmup(docs, vocab_size, min_frequency, profile):
    """The driver's shader cache: a GPU process's first run on a machine compiles the
    pipelines (with the same split as the timed rows: a regex split has its own) (the NVIDIA driver keeps them on disk; 2.4 s of the first training at 23:10 UTC on
    the H200, 0.25 s in the next process). Both algorithms train on the first ~4 MB once, so
    that every timed row is a fresh process with the driver's cache warm, as a user's second
    run is."""
    from torch_gpubpe.training.trainer import train

    head, size = [], 0
    for d in docs:
        head.append(d)
        size += len(d)
        if size >= 4_000_000:
            break
    out = {}
    for algorithm in ("wordlist", "seed"):
        t = time.perf_counter()
        train(head, min(vocab_size, 2048), min_frequency=min_frequency, algorithm=algorithm,
              pre_tokenizer=PRE_TOKENIZER)
        out[algorithm] = time.perf_counter() - t
    if sum(map(len, docs)) >= 2 ** 31:  # 64-bit pair counts (trainer: total pairs >= 2^31):
        t = time.perf_counter()         # other pipelines; a few merges on everything
        train(docs, 300, min_frequency=min_frequency)
        out["wordlist, 64-bit counts"] = time.perf_counter() - t
    return {"warmup_s": out}


def _parquet_files() -> list[str]:
    d = Path(os.environ["GPUBPE_PARQUET_DIR"])
    return [str(f) for f in sorted(d.glob("*.parquet"))]


def run_gpubpe_cli(docs, vocab_size, min_frequency, profile):
    """The ``train`` CLI on the parquet files (``--parquet``): a fresh ``python -m
    torch_gpubpe`` process, timed from outside, as a user runs it."""
    import tempfile

    out = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "torch_gpubpe", "train", "--data-files", *_parquet_files(),
           "--vocab-size", str(vocab_size), "--min-frequency", str(min_frequency),
           "--out", out, "--no-progress", "--summary-json", f"{out}/summary.json",
           "--special-tokens"]  # none, as the API and peers
    if PRE_TOKENIZER:
        cmd += ["--pre-tokenizer", PRE_TOKENIZER]
    res = _whole_process(cmd, out)
    res["cli_seconds"] = json.loads(Path(out, "summary.json").read_text())["seconds"]
    return res


def _whole_process(cmd: list[str], vocab_path: str) -> dict:
    """Run ``cmd`` (a fresh process that saves a vocab at ``vocab_path``), timed from outside."""
    import resource

    from torch_gpubpe.core.vocab import Vocab

    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode:
        raise RuntimeError(p.stderr[-1500:])
    vocab = Vocab.load(vocab_path)
    return {"wall_s": wall, "num_merges": len(vocab.merges),
            "token_bytes": [b.hex() for b in vocab.token_bytes],
            "child_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


_API_SCRIPT = """
import sys
import pyarrow.parquet as pq
from torch_gpubpe import train
out, vocab_size, min_frequency, pre_tokenizer, *files = sys.argv[1:]
texts = pq.read_table(files, columns=["text"]).column("text")
vocab = train(texts, int(vocab_size), min_frequency=int(min_frequency),
              pre_tokenizer=pre_tokenizer or None)
vocab.save(out)
"""


def run_gpubpe_api_files(docs, vocab_size, min_frequency, profile):
    """What a user of the API writes to train from the parquet files (``--parquet``):
    ``pq.read_table`` + ``train`` + ``Vocab.save`` in a fresh ``python`` process, timed from
    outside like the CLI row (interpreter start and imports included in both)."""
    import tempfile

    out = os.path.join(tempfile.mkdtemp(), "vocab.json")
    return _whole_process([sys.executable, "-c", _API_SCRIPT, out, str(vocab_size),
                           str(min_frequency), PRE_TOKENIZER or "", *_parquet_files()], out)


_READER_SCRIPT = """
import sys
from torch_gpubpe import train
from torch_gpubpe.io.readers import FileReader
out, vocab_size, min_frequency, pre_tokenizer, *files = sys.argv[1:]
vocab = train(FileReader(files), int(vocab_size), min_frequency=int(min_frequency),
              pre_tokenizer=pre_tokenizer or None)
vocab.save(out)
"""


def run_gpubpe_api_reader(docs, vocab_size, min_frequency, profile):
    """The API streaming the parquet files as the README shows (``train(FileReader(files))``
    + ``Vocab.save``), a fresh ``python`` process timed from outside like the CLI row: the
    same reading as the CLI, without its export of three formats and its compression line."""
    import tempfile

    out = os.path.join(tempfile.mkdtemp(), "vocab.json")
    return _whole_process([sys.executable, "-c", _READER_SCRIPT, out, str(vocab_size),
                           str(min_frequency), PRE_TOKENIZER or "", *_parquet_files()], out)


def run_gigatoken(docs, vocab_size, min_frequency, profile):
    """gigatoken's trainer (``train_bpe``) on the same parquet files (``--parquet``), or on the
    JSON Lines file; its own GPT-2-style split, whatever ``--pre-tokenizer`` says."""
    import gigatoken

    jsonl = os.environ.get("GPUBPE_JSONL")
    src = (gigatoken.ParquetFileSource(_parquet_files(), column="text")
           if os.environ.get("GPUBPE_PARQUET_DIR") else gigatoken.JsonlFileSource([jsonl]))
    t = time.perf_counter()
    _vocab, merges = gigatoken.train_bpe(src, vocab_size, [])
    return {"wall_s": time.perf_counter() - t, "num_merges": len(merges)}


def write_parquet(docs: list[str], folder: Path, files: int = 16) -> None:
    """The documents as ``files`` parquet files (column ``text``), in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(docs) // files)
    for i in range(files):
        part = docs[i * per:(i + 1) * per]
        if part:
            pq.write_table(pa.table({"text": part}), folder / f"part-{i:03d}.parquet")


METHODS = {"gpubpe_cli": run_gpubpe_cli, "gpubpe_api_files": run_gpubpe_api_files,
           "gpubpe_api_reader": run_gpubpe_api_reader, "gigatoken": run_gigatoken, "gpubpe_warmup": run_warmup, "gpubpe": run_gpubpe, "gpubpe_seed": run_gpubpe_seed, "rustbpe": run_rustbpe,
           "hf_tokenizers": run_hf,
           "gpubpe_count_only": run_gpubpe_count, "gpubpe_cpu_count_only": run_cpu_count,
           "rustbpe_count_only": run_rustbpe_count}


FILE_METHODS = ("gpubpe_cli", "gpubpe_api_files", "gpubpe_api_reader", "gigatoken")   # read the files themselves: no documents loaded


def child(args) -> None:
    global PRE_TOKENIZER
    PRE_TOKENIZER = args.pre_tokenizer
    docs = ([] if args.worker in FILE_METHODS
            else load_docs(args.corpus, args.max_bytes, args.jsonl, args.repeat))
    res = METHODS[args.worker](docs, args.vocab_size, args.min_frequency, args.profile)
    res["peak_rss_mb"] = max(peak_rss_mb(), res.pop("child_peak_rss_mb", 0))
    if docs:
        res["corpus_bytes"] = sum(len(d.encode()) for d in docs)
        res["num_documents"] = len(docs)
    print("@@RESULT@@" + json.dumps(res))


def cold_env() -> dict[str, str]:
    """Environment of a process that finds no cache, as on a fresh machine: the driver's shader
    cache (NVIDIA's ``__GL_SHADER_DISK_CACHE_PATH``, Mesa's under ``XDG_CACHE_HOME``), this
    package's disk caches (``XDG_CACHE_HOME``) and its byte code (each ``__pycache__`` of the
    package is removed first); the OS page cache is dropped where this user may
    (``/proc/sys/vm/drop_caches``), else it stays warm (said)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gpubpe-cold-"))
    for d in (REPO / "torch_gpubpe").rglob("__pycache__"):
        shutil.rmtree(d, ignore_errors=True)
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        print("cold caches: page cache dropped", file=sys.stderr)
    except OSError as e:
        print(f"cold caches: page cache kept ({e})", file=sys.stderr)
    return {"XDG_CACHE_HOME": str(root / "xdg"), "__GL_SHADER_DISK_CACHE_PATH": str(root / "nv"),
            "MESA_SHADER_CACHE_DIR": str(root / "mesa")}


def read_inputs() -> None:
    """Read the input files once (the JSON Lines file, the parquet files): back in the OS page
    cache after :func:`cold_env` dropped it."""
    files = [Path(p) for p in (os.environ.get("GPUBPE_JSONL"),) if p]
    if os.environ.get("GPUBPE_PARQUET_DIR"):
        files += map(Path, _parquet_files())
    for f in files:
        with f.open("rb") as fh:
            while fh.read(1 << 24):
                pass


def run_child(method: str, args, env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--vocab-size", str(args.vocab_size),
           "--min-frequency", str(args.min_frequency)]
    for c in args.corpus:
        cmd += ["--corpus", c]
    if args.max_bytes:
        cmd += ["--max-bytes", str(args.max_bytes)]
    if args.jsonl:
        cmd += ["--jsonl", args.jsonl]
    cmd += ["--repeat", str(args.repeat)]
    if args.pre_tokenizer:
        cmd += ["--pre-tokenizer", args.pre_tokenizer]
    if args.profile:
        cmd += ["--profile"]
    print(f"running {method} ...", file=sys.stderr, flush=True)
    from benchmarks._report import GPUMonitor

    t = time.perf_counter()
    with GPUMonitor() as mon:
        p = subprocess.run(cmd, capture_output=True, text=True, env={
            **os.environ, **(env or {}),
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return dict(json.loads(line[len("@@RESULT@@"):]), sm_clock=mon.summary(),
                        process_s=time.perf_counter() - t)
    return {"error": (p.stderr or p.stdout)[-2000:], "sm_clock": mon.summary()}


def _fmt(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "?"


def breakdown(wall: float, st: dict) -> str:
    """Where one training's wall seconds went (trainer stats ``seconds_*``): the main thread's
    phases in order, then what the device-opening thread did meanwhile."""
    g = st.get
    main = [("setup", "seconds_setup"), ("count", "seconds_count"), ("init wait", "seconds_gpu_init_wait"),
            ("compile wait", "seconds_compile_wait"), ("prepare", "seconds_prepare"),
            ("upload", "seconds_upload"), ("merge", "seconds_merge")]
    parts = [(name, float(g(k) or 0.0)) for name, k in main]
    other = wall - sum(v for _, v in parts)
    out = " + ".join(f"{name} {v:.2f}" for name, v in parts) + f" + other {other:.2f}"
    out += (f" = {wall:.2f} s; count: prefetch {float(g('seconds_prefetch') or 0):.2f} "
            f"({(g('prefetch_bytes') or 0) / 1e6:.0f} MB packed while the device opened); "
            f"upload: host arrays {float(g('seconds_upload_host') or 0):.2f}, GPU set-up + "
            f"first count {float(g('seconds_upload_gpu') or 0):.2f}; merge: rebuilds "
            f"{g('rebuilds', 0)} in {float(g('seconds_rebuilds') or 0):.2f}; init thread: "
            f"device open {float(g('seconds_gpu_open') or 0):.2f}, counting pipelines "
            f"{float(g('seconds_compile_count') or 0):.2f}, training pipelines "
            f"{float(g('seconds_compile_train') or 0):.2f}")
    return out


def machine() -> str:
    gpu = "?"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        gpu = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else "?"
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return (f"{platform.node()} | {os.cpu_count()} CPUs | GPU {gpu} | "
            f"Python {platform.python_version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", action="append", help="corpus name (repeatable); default: the "
                    "4 largest (" + ", ".join(DEFAULT_CORPORA) + ")")
    ap.add_argument("--max-bytes", type=int, default=None,
                    help="cut each corpus at this many bytes")
    ap.add_argument("--vocab-size", type=int, default=32768)
    ap.add_argument("--min-frequency", type=int, default=1,
                    help="1 (default) is what rustbpe does, so merges can be compared")
    ap.add_argument("--skip-hf", action="store_true", help="skip Hugging Face tokenizers")
    ap.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                    help="a model's regex split for this product (train(pre_tokenizer=)) and "
                         "rustbpe (its pat_str); default: DESIGN.md §2's")
    ap.add_argument("--skip-rustbpe", action="store_true")
    ap.add_argument("--skip-count", action="store_true", help="skip the counting-only rows")
    ap.add_argument("--skip-seed", action="store_true",
                    help="skip algorithm='seed' (the seed's pipeline, gpubpe_seed row)")
    ap.add_argument("--jsonl", help="read the documents from this JSON Lines file instead")
    ap.add_argument("--repeat", type=int, default=1, help="repeat the documents N times")
    ap.add_argument("--profile", action="store_true",
                    help="also time each GPU kernel (timestamp queries; a second GPU run)")
    ap.add_argument("--json-out", help="write all results as JSON here")
    ap.add_argument("--save-vocab", help="save the GPU-trained vocab here (Vocab.save)")
    ap.add_argument("--no-driver-warmup", action="store_true",
                    help="time the first GPU process too (the driver compiles the pipelines "
                         "into its cache there)")
    ap.add_argument("--cold-caches", action="store_true",
                    help="first, a gpubpe row in a process that finds no cache (driver "
                         "shaders, disk caches, byte code; the page cache where allowed), as "
                         "the first run on a fresh machine")
    ap.add_argument("--parquet", metavar="DIR",
                    help="also run the train CLI and gigatoken's train_bpe on the documents "
                         "as parquet files in DIR (written there first if DIR has none)")
    ap.add_argument("--skip-gigatoken", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.corpus = args.corpus or DEFAULT_CORPORA
    if args.save_vocab:
        os.environ["GPUBPE_SAVE_VOCAB"] = os.path.abspath(args.save_vocab)
    if args.worker:
        child(args)
        return

    if args.parquet:
        os.environ["GPUBPE_PARQUET_DIR"] = os.path.abspath(args.parquet)
        if not list(Path(args.parquet).glob("*.parquet")):
            write_parquet(load_docs(args.corpus, args.max_bytes, args.jsonl, args.repeat),
                          Path(args.parquet))
    if args.jsonl:
        os.environ["GPUBPE_JSONL"] = os.path.abspath(args.jsonl)
    methods = ["gpubpe"] + (["gpubpe_cli", "gpubpe_api_files", "gpubpe_api_reader"] if args.parquet else []) + (
        [] if args.skip_seed else ["gpubpe_seed"])
    if not args.skip_gigatoken and (args.parquet or args.jsonl):
        methods.append("gigatoken")
    if not args.skip_rustbpe:
        methods.append("rustbpe")
    if not args.skip_hf:
        methods.append("hf_tokenizers")
    if not args.skip_count:
        methods += ["gpubpe_count_only", "gpubpe_cpu_count_only"] + (
            [] if args.skip_rustbpe else ["rustbpe_count_only"])
    profile = args.profile
    args.profile = False
    results = {}
    if args.cold_caches:
        results["gpubpe_cold_caches"] = run_child("gpubpe", args, env=cold_env())
        read_inputs()  # the other rows find the input files in the page cache, as without it
    if not args.no_driver_warmup:
        w = run_child("gpubpe_warmup", args)
        print("driver shader cache warm-up (a GPU process's first run on a machine compiles the "
              "pipelines): " + (", ".join(f"{k} {v:.2f} s" for k, v in w["warmup_s"].items())
                                if "warmup_s" in w else "ERROR " + w["error"][-300:]),
              flush=True)
    results.update({m: run_child(m, args) for m in methods})
    if profile:
        args.profile = True
        results["gpubpe_profiled"] = run_child("gpubpe", args)
        if not args.skip_seed:
            results["gpubpe_seed_profiled"] = run_child("gpubpe_seed", args)

    ref = results.get("rustbpe", {}).get("token_bytes")
    rows = []
    expanded = {}
    for m, r in results.items():
        expanded[m] = r
        if isinstance(r.get("warm"), dict):
            expanded[m + " (warm)"] = {**r["warm"], "peak_rss_mb": r.get("peak_rss_mb", 0)}
    for m, r in expanded.items():
        if "error" in r:
            rows.append((m, "ERROR", "", "", "", "", "", "", "",
                         r["error"].splitlines()[-1][:60]))
            continue
        same = ""
        if ref is not None and "token_bytes" in r:
            same = "yes" if r["token_bytes"] == ref else "NO"
        merge_s = r.get("merge_s")
        mps = r["num_merges"] / merge_s if merge_s else (
            r["num_merges"] / r["wall_s"] if r["num_merges"] > 1 else 0)
        gmem = r.get("stats", {}).get("gpu_memory_bytes")
        rows.append((m, f"{r['wall_s']:.2f}", f"{r['count_s']:.2f}" if r.get("count_s") else "",
                     f"{merge_s:.2f}" if merge_s else "",
                     f"{1e6 / mps:.1f}" if mps and merge_s else "", f"{r['peak_rss_mb']:.0f}",
                     f"{gmem / 2**20:.0f}" if gmem else "",
                     str(r["num_merges"]), f"{mps:.0f}" if mps else "", same))
    corpus_bytes = next((r["corpus_bytes"] for r in results.values() if "corpus_bytes" in r), 0)
    print()
    src = args.jsonl or ", ".join(args.corpus)
    print(f"corpora: {src}{' ×' + str(args.repeat) if args.repeat > 1 else ''} "
          f"({corpus_bytes / 1e6:.1f} MB"
          f"{', max ' + str(args.max_bytes) + ' B each' if args.max_bytes else ''}); "
          f"vocab {args.vocab_size}; min_frequency {args.min_frequency}")
    head = ("method", "wall s", "count s", "merge s", "µs/merge", "peak RSS MB", "GPU MB",
            "merges", "merges/s", "= rustbpe")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    g = results.get("gpubpe", {}).get("stats", {})
    if g:
        print(f"\ngpubpe: {g.get('adapter')}; words counted on the {g.get('count_on')}; "
              f"unique words {g.get('unique_words')}, stream "
              f"{g.get('stream_symbols')} symbols, table {g.get('table_slots')} slots, "
              f"{g.get('merges_per_submit')} merges/submit, restarts {g.get('restarts')}, "
              f"rebuilds {g.get('rebuilds')}, walks continued {g.get('walks_paused')} "
              f"({g.get('continuation_dispatches')} dispatches), fallbacks "
              f"{g.get('wgpu_fallbacks') or 'none'}; str packer {g.get('str_packer')} "
              f"(str fallbacks {g.get('str_fallbacks') or 'none'}); "
              f"gpu init wait {_fmt(g.get('seconds_gpu_init_wait'))} s, upload "
              f"{_fmt(g.get('seconds_upload'))} s; counting: GPU memory "
              f"{(g.get('count_gpu_memory_bytes') or 0) / 1e6:,.0f} MB, word-table retries "
              f"{g.get('count_table_retries')}, distinct words gathered in "
              f"{_fmt(g.get('seconds_count_result'))} s")
    for m in ("gpubpe_cold_caches", "gpubpe", "gpubpe_seed"):
        r = results.get(m, {})
        for label, rr in (("fresh", r), ("warm", r.get("warm"))):
            if isinstance(rr, dict) and rr.get("stats"):
                print(f"{m} {label}: {breakdown(rr['wall_s'], rr['stats'])}")
    cli = results.get("gpubpe_cli", {})
    if cli.get("cli_seconds"):
        sec, parts = cli["cli_seconds"], ("read_and_count", "merge", "export", "heldout_encode")
        print(f"gpubpe_cli: {cli['wall_s']:.2f} s from outside = "
              + " + ".join(f"{k} {sec[k]:.2f}" for k in parts if sec.get(k) is not None)
              + " + the rest (interpreter start, imports, training set-up, exit) "
              + f"{cli['wall_s'] - sum(sec.get(k) or 0 for k in parts):.2f}")
    for m, label in (("gpubpe", "the API's train() in a fresh process"),
                     ("gpubpe_api_files", "the API from pq.read_table, whole process"),
                     ("gpubpe_api_reader", "the API from FileReader, whole process")):
        if cli.get("wall_s") and results.get(m, {}).get("wall_s"):
            print(f"gpubpe_cli / {label}: {cli['wall_s'] / results[m]['wall_s']:.2f}x")
    for pm in ("gpubpe_profiled", "gpubpe_seed_profiled"):
        pst = results.get(pm, {}).get("stats", {})
        prof = pst.get("gpu_us_per_merge")
        if prof:
            print(f"\n{pm}: GPU time per merge (µs, timestamp queries, sampled batches):")
            for name, us in prof.items():
                print(f"  {name:<20} {us:9.2f}")
            print(f"  {'total':<20} {sum(prof.values()):9.2f}")
        walk = {k: v for k, v in pst.items() if k.startswith("walk_") and k.endswith("_merge")}
        if walk:
            print("  per merge, mean over the run: " + ", ".join(
                f"{k[5:-10]} {v:,.0f}" for k, v in walk.items()))
    for gm in ("gpubpe", "gpubpe_seed"):
        if "rustbpe" in results and "wall_s" in results[gm if gm in results else "rustbpe"] \
                and gm in results and "wall_s" in results["rustbpe"]:
            sp = results["rustbpe"]["wall_s"] / results[gm]["wall_s"]
            print(f"\n{gm} speed-up vs rustbpe (wall): {sp:.2f}x in a fresh process", end="")
            if "warm" in results[gm]:
                sp = results["rustbpe"]["wall_s"] / results[gm]["warm"]["wall_s"]
                print(f", {sp:.2f}x with the device already open (second training)", end="")
            print()
    print("\nwhole child process (interpreter start, imports, loading the documents, every "
          "run in it): " + ", ".join(f"{m} {r['process_s']:.2f} s" for m, r in results.items()
                                     if "process_s" in r))
    print("\nSM clock while each ran:")
    for m, r in results.items():
        print(f"  {m:<24} {r.get('sm_clock', 'n/a')}")
    print(f"\nmachine: {machine()}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    from benchmarks._report import sm_clock_now

    print(f"SM clock now: {sm_clock_now()}")
    if args.json_out:
        for r in results.values():
            r.pop("token_bytes", None)
            if isinstance(r.get("warm"), dict):
                r["warm"].pop("token_bytes", None)
        Path(args.json_out).write_text(json.dumps({
            "args": vars(args), "machine": machine(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
