"""The package's shape (docs/ARCHITECTURE.md): layers that import one way, no import cycle, no
private name used across modules, modules of a few hundred lines."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "torch_gpubpe"
MAX_LINES = 700


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def test_layers_contract_holds():
    """``lint-imports`` (import-linter, the contract in pyproject.toml) passes."""
    exe = shutil.which("lint-imports")
    assert exe, "lint-imports not found: pip install -e '.[test]' installs import-linter"
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (at any depth of the file: lazy imports and
    imports for annotations count)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                    + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t != "torch_gpubpe":
                    deps.add(t)
        graph[name] = deps
    return graph


def test_no_import_cycle():
    """No two modules import each other, directly or through others (Tarjan's components)."""
    graph = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_private_name_crosses_modules():
    """No ``from torch_gpubpe.x import _name`` and no ``module._name`` read of another module of
    the package (private submodules such as ``_util`` are modules, not names, and may be)."""
    mods = _modules()
    offenders = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch_gpubpe"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in mods:
                        aliases[a.asname or a.name] = full
                    elif a.name.startswith("_") and not a.name.startswith("__"):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {full}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and f"{aliases[node.value.id]}.{node.attr}" not in mods):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} reads "
                                 f"{aliases[node.value.id]}.{node.attr}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_is_a_few_hundred_lines(name):
    lines = len(_modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines (split it by concept; STYLE.md)"


def test_dir_lists_the_public_api():
    """``dir(torch_gpubpe)`` is what a user may use: the lazily imported API included, the
    module's own helpers (``annotations``, ``importlib``, submodules) not."""
    import torch_gpubpe

    names = set(dir(torch_gpubpe))
    assert {"train", "Tokenizer", "Vocab", "InputError", "TokenizedDataset"} <= names
    assert names - {"__version__"} == set(torch_gpubpe.__all__)
