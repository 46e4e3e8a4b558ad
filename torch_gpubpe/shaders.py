"""Where the WGSL sources live, and the tiny preprocessor that specialises them.

The ``.wgsl`` files are kept in the top-level ``wgsl/`` folder of the source tree and copied into
the wheel as ``torch_gpubpe/wgsl/`` (``pyproject.toml`` force-includes them). This module alone
knows both places.

Preprocessor: a line ``//#if NAME`` … ``//#else`` … ``//#endif`` keeps one branch, by whether
``NAME`` is in the set of flags (no nesting needed so far; nesting is supported anyway). Used for
code that must not even be compiled on adapters without a feature (subgroup builtins fail
``create_shader_module`` there, WGPU_NOTES.md §3).
"""

from __future__ import annotations

import functools
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@functools.cache
def wgsl_dir() -> Path:
    """The folder holding the ``.wgsl`` files: inside the installed package, else the checkout."""
    for cand in (_PKG / "wgsl", _PKG.parent / "wgsl"):
        if (cand / "common.wgsl").is_file():
            return cand
    raise FileNotFoundError(
        f"WGSL shaders not found in {_PKG / 'wgsl'} nor {_PKG.parent / 'wgsl'}: "
        "the installation is incomplete; reinstall torch_gpubpe"
    )


@functools.cache
def read_wgsl(name: str) -> str:
    """Text of ``wgsl/<name>.wgsl``."""
    return (wgsl_dir() / f"{name}.wgsl").read_text(encoding="utf-8")


def preprocess(source: str, flags: frozenset[str]) -> str:
    """Keep the ``//#if`` branches selected by ``flags`` (see module docstring)."""
    out, stack = [], []  # stack of (keep_this_branch, parent_keeps)
    for lineno, line in enumerate(source.splitlines(), 1):
        s = line.strip()
        if s.startswith("//#if "):
            parent = all(k for k, _ in stack) if stack else True
            stack.append((s[6:].strip() in flags, parent))
            out.append("")
        elif s == "//#else":
            if not stack:
                raise ValueError(f"line {lineno}: //#else without //#if")
            keep, parent = stack.pop()
            stack.append((not keep, parent))
            out.append("")
        elif s == "//#endif":
            if not stack:
                raise ValueError(f"line {lineno}: //#endif without //#if")
            stack.pop()
            out.append("")
        else:
            keep = all(k for k, _ in stack) if stack else True
            out.append(line if keep else "")
    if stack:
        raise ValueError("unterminated //#if")
    return "\n".join(out)


def shader_source(name: str, flags: frozenset[str] = frozenset()) -> str:
    """``common.wgsl`` + ``<name>.wgsl``, preprocessed with ``flags``."""
    return preprocess(read_wgsl("common") + "\n" + read_wgsl(name), flags)
