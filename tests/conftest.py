"""Shared test helpers: real corpora from ../shared/corpora (beside the checkout)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

# ../shared/corpora beside the checkout; TORCH_GPUBPE_CORPORA points elsewhere (e.g. on the lent GPU).
CORPORA = Path(
    os.environ.get("TORCH_GPUBPE_CORPORA")
    or Path(__file__).resolve().parents[2] / "shared" / "corpora"
)
CORPUS_NAMES = sorted(p.name[: -len(".jsonl.gz")] for p in CORPORA.glob("*.jsonl.gz"))
if not CORPUS_NAMES:
    raise RuntimeError(
        f"no corpora in {CORPORA}: the tests need ../shared/corpora beside the checkout "
        "(or TORCH_GPUBPE_CORPORA=<folder of *.jsonl.gz>)"
    )


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
