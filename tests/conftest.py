"""Shared test helpers: real corpora (shipped in tests/data/corpora; the extended set when present)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import wgsl_poison

# Builds with the POISON_WORKGROUP flag are poisoned ones (tests/wgsl_poison.py): the shader
# filter lives here, in the tests, and reaches the product through its public hook.
wgsl_poison.install()

# The corpora the tests read. Shipped: tests/data/corpora (the beginning of each corpus, so a plain
# clone runs the suite). Extended (whole corpora, same names), used when present:
# TORCH_GPUBPE_CORPORA, else ../shared/corpora beside the checkout (the project's workspace and CI).
SHIPPED_CORPORA = Path(__file__).resolve().parent / "data" / "corpora"


def _extended_corpora() -> Path | None:
    env = os.environ.get("TORCH_GPUBPE_CORPORA")
    if env:
        if not any(Path(env).glob("*.jsonl.gz")):
            raise RuntimeError(f"TORCH_GPUBPE_CORPORA={env!r} holds no *.jsonl.gz files")
        return Path(env)
    beside = Path(__file__).resolve().parents[2] / "shared" / "corpora"
    return beside if any(beside.glob("*.jsonl.gz")) else None


CORPORA = _extended_corpora() or SHIPPED_CORPORA
CORPUS_NAMES = sorted(p.name[: -len(".jsonl.gz")] for p in SHIPPED_CORPORA.glob("*.jsonl.gz"))
_missing = [n for n in CORPUS_NAMES if not (CORPORA / f"{n}.jsonl.gz").exists()]
if _missing:
    raise RuntimeError(f"the corpora in {CORPORA} lack {_missing} (the shipped set's names)")


def benchmark_module(name: str):
    """``benchmarks/<name>.py`` (e.g. ``_kernel_clock``, ``_walk_work``: the instrumented
    builds that the benchmarks and these tests share), imported by path once: the benchmarks
    folder stays off ``sys.path``, where its script names would shadow other modules."""
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def corpus_docs(name: str, max_bytes: int = 100_000, max_doc_bytes: int | None = None) -> list[str]:
    """Documents of corpus ``name`` in file order until ``max_bytes`` UTF-8 bytes; each document
    cut to ``max_doc_bytes`` characters (default ``max_bytes // 4``) so one novel cannot fill it."""
    cap = max_doc_bytes or max(1, max_bytes // 4)
    out, total = [], 0
    with gzip.open(CORPORA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"][:cap]
            out.append(text)
            total += len(text.encode())
            if total >= max_bytes:
                break
    return out



def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python: this checkout first on PYTHONPATH, the rest kept."""
    repo = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


# Real BPE vocabularies: GPT-2 ships in tests/data/vocabs; the larger ones (Qwen2) are read from
# $TORCH_GPUBPE_VOCABS or ../shared/vocabs beside the checkout. A missing file is an error, not a
# skip (CI must not pass by skipping).
TEST_VOCABS = Path(__file__).resolve().parent / "data" / "vocabs"
SHARED_VOCABS = Path(
    os.environ.get("TORCH_GPUBPE_VOCABS")
    or Path(__file__).resolve().parents[2] / "shared" / "vocabs"
)


def shared_vocab(name: str) -> Path:
    """Path of ``name`` (e.g. ``"qwen2.tiktoken"``) in tests/data/vocabs or the shared folder;
    raises ``FileNotFoundError`` naming both places when absent."""
    for d in (TEST_VOCABS, SHARED_VOCABS):
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(
        f"{name} is neither in {TEST_VOCABS} nor in {SHARED_VOCABS}: set TORCH_GPUBPE_VOCABS to "
        "a folder holding it (see tests/data/vocabs/README.md)")


def assert_same_fields(a, b, *, same_types: bool = False) -> None:
    """Two dataclass instances (a disk cache's result and the freshly built one) are equal
    field by field: arrays in dtype, shape and every value; other fields by ``==`` (and by type
    too with ``same_types``)."""
    import numpy as np
    from dataclasses import fields

    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f.name
        else:
            assert (not same_types or type(x) is type(y)) and x == y, f.name


def fresh_disk_cache(monkeypatch, tmp_path: Path, module, min_tokens_attr: str,
                     stats: dict) -> None:
    """Give one test an empty disk cache (torch_gpubpe.core.disk_cache, XDG_CACHE_HOME under
    ``tmp_path``), turned on (TORCH_GPUBPE_NO_CACHE and its old names unset) for vocabs of every size
    (``module.<min_tokens_attr>`` = 0), with the counters of ``stats`` (the module's cache stats
    dict: loaded, built, saved = 0, errors = []) and the warn-once sets reset; all undone after."""
    from torch_gpubpe import notices
    from torch_gpubpe.core import disk_cache as _disk_cache
    from torch_gpubpe.gpu import device as gpu

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for v in (_disk_cache.ENV_OFF, *_disk_cache.ENV_OFF_OLD):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(module, min_tokens_attr, 0)
    for k in ("loaded", "built", "saved"):
        monkeypatch.setitem(stats, k, 0)
    monkeypatch.setitem(stats, "errors", [])
    monkeypatch.setattr(gpu, "_warned", set())
    monkeypatch.setattr(notices, "said", set())


def pytest_terminal_summary(terminalreporter):
    """Says, without failing the run, when the installed ``regex`` knows a newer Unicode than the
    pre-tokenizers' table (the version of tiktoken's and tokenizers' engines), and which code points
    the split oracle therefore keeps on the table's classes (patterns.oracle_substitutes)."""
    import sys

    if "torch_gpubpe.core.patterns" not in sys.modules:  # no split test ran: nothing to say
        return
    from torch_gpubpe.core.unicode_gen import regex_unicode_version, regex_version
    from torch_gpubpe.core.patterns import oracle_substitutes, table

    subs = oracle_substitutes()
    if subs:
        shown = " ".join(f"U+{c:04X}" for c in sorted(subs)[:8])
        terminalreporter.write_line(
            f"unicode: regex {regex_version()} knows Unicode {regex_unicode_version()}; the "
            f"pre-tokenizer table follows Unicode {table()[2]['unicode_version']} (tiktoken's and "
            f"tokenizers' engines): {len(subs)} code points change class ({shown} ...); the split "
            "oracle keeps the table's classes for them (python -m torch_gpubpe.core.unicode_gen "
            "--report lists them by class)")
