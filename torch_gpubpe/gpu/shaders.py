"""Where the WGSL sources live, and the tiny preprocessor that specialises them.

The ``.wgsl`` files are kept in the top-level ``wgsl/`` folder of the source tree and copied into
the wheel as ``torch_gpubpe/wgsl/`` (``pyproject.toml`` force-includes them). This module alone
knows both places.

Preprocessor: a line ``//#include OTHER`` is replaced by ``OTHER.wgsl``; a line ``//#if NAME`` … ``//#else`` … ``//#endif`` keeps one branch, by whether
``NAME`` is in the set of flags (no nesting needed so far; nesting is supported anyway). Used for
code that must not even be compiled on adapters without a feature (subgroup builtins fail
``create_shader_module`` there, WGPU_NOTES.md §3).
"""

from __future__ import annotations

import ast as _ast
import functools
import re as _re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_PKG = Path(__file__).resolve().parents[1]   # the torch_gpubpe package


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


def _with_includes(name: str, seen: set[str]) -> str:
    """``<name>.wgsl`` with each ``//#include OTHER`` line replaced by ``OTHER.wgsl`` (each
    file at most once)."""
    out = []
    for line in read_wgsl(name).splitlines():
        s = line.strip()
        if s.startswith("//#include "):
            other = s[len("//#include "):].strip()
            if other not in seen:
                seen.add(other)
                out.append(_with_includes(other, seen))
            continue
        out.append(line)
    return "\n".join(out)


# Build flag -> function rewriting the preprocessed source of every build with that flag
# (register_source_filter).
_SOURCE_FILTERS: dict[str, Callable[[str], str]] = {}


def register_source_filter(flag: str, rewrite: Callable[[str], str] | None) -> None:
    """Extension hook: every :func:`shader_source` build whose flags include ``flag`` is passed
    through ``rewrite`` (preprocessed WGSL in, WGSL out) after preprocessing; ``None`` removes
    the filter. Instrumented builds (e.g. the test suite's poisoned-workgroup build) use it, so that the
    product shaders need no code for them."""
    if rewrite is None:
        _SOURCE_FILTERS.pop(flag, None)
    else:
        _SOURCE_FILTERS[flag] = rewrite


def shader_source(name: str, flags: frozenset[str] = frozenset()) -> str:
    """``common.wgsl`` + ``<name>.wgsl`` (with its ``//#include`` files), preprocessed with
    ``flags``, then rewritten by the :func:`register_source_filter` filters of those flags."""
    src = preprocess(read_wgsl("common") + "\n" + _with_includes(name, {name}), flags)
    for flag, rewrite in _SOURCE_FILTERS.items():
        if flag in flags:
            src = rewrite(src)
    return src


# -- reading the facts Python needs from the WGSL itself (no hand copies) ------------------------
# Binding numbers, `const` values (state-word indices, sizes), `override` defaults, which globals
# each entry point reaches (its bind-group layout under layout="auto") and the bytes of
# `var<workgroup>` it declares (checked before pipeline creation: wgpu does not check it and a
# device can hang past the limit, DESIGN.md §8). A deliberately small parser for this project's WGSL:
# `//` comments, top-level `const`/`override`/`var`/`fn`/`struct` declarations.
_COMMENT = _re.compile(r"//[^\n]*")
_NUM_SUFFIX = _re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uif]\b")
_IDENT = _re.compile(r"\b[A-Za-z_]\w*\b")
_CALL = _re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_BINDING = _re.compile(r"@group\(\s*(\d+)\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var(?:<([^>]*)>)?\s+"
                       r"(\w+)\s*:")
_CONST = _re.compile(r"^\s*const\s+(\w+)\s*(?::\s*[\w<>]+)?\s*=\s*([^;]+);", _re.M)
_OVERRIDE = _re.compile(r"^\s*(?:@id\(\d+\)\s*)?override\s+(\w+)\s*(?::\s*(\w+))?\s*"
                        r"(?:=\s*([^;]+))?;", _re.M)
_WGVAR = _re.compile(r"^\s*var<workgroup>\s+(\w+)\s*:\s*(.+?);\s*$", _re.M)
_FN = _re.compile(r"(@compute[^\n]*\n\s*)?\bfn\s+(\w+)\s*\(")
_STRUCT = _re.compile(r"\bstruct\s+(\w+)\s*\{([^}]*)\}")


def _eval_int(expr: str, names: dict) -> int:
    """Value of a WGSL integer constant expression over ``names`` (+ - * / % << >> | & ^ and
    parentheses; literal suffixes u/i dropped)."""
    text = _NUM_SUFFIX.sub(r"\1", expr.strip())
    tree = _ast.parse(text, mode="eval")

    def ev(n):
        if isinstance(n, _ast.Expression):
            return ev(n.body)
        if isinstance(n, _ast.Constant) and isinstance(n.value, (int, float, bool)):
            return int(n.value)
        if isinstance(n, _ast.Name):
            if n.id in ("true", "false"):
                return int(n.id == "true")
            if n.id not in names:
                raise KeyError(n.id)
            return int(names[n.id])
        if isinstance(n, _ast.UnaryOp) and isinstance(n.op, (_ast.USub, _ast.Invert)):
            v = ev(n.operand)
            return -v if isinstance(n.op, _ast.USub) else ~v
        if isinstance(n, _ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            ops = {_ast.Add: a + b, _ast.Sub: a - b, _ast.Mult: a * b, _ast.LShift: a << b,
                   _ast.RShift: a >> b, _ast.BitOr: a | b, _ast.BitAnd: a & b,
                   _ast.BitXor: a ^ b}
            if isinstance(n.op, (_ast.Div, _ast.FloorDiv)):
                return a // b
            if isinstance(n.op, _ast.Mod):
                return a % b
            if type(n.op) in ops:
                return ops[type(n.op)]
        raise ValueError(f"unsupported WGSL constant expression {expr!r}")

    return ev(tree)


def split_args(s: str) -> list[str]:
    """The comma-separated arguments of a WGSL type's ``<...>`` (commas inside nested ``<>``
    kept): ``"u32, 4u"`` -> ``["u32", "4u"]``."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _layout(ty: str, names: dict) -> tuple[int, int]:
    """(size, alignment) in bytes of a WGSL type in workgroup memory (WGSL §"Memory layout")."""
    ty = ty.strip()
    if ty in ("u32", "i32", "f32", "bool") or _re.fullmatch(r"atomic<\s*(u32|i32)\s*>", ty):
        return 4, 4
    m = _re.fullmatch(r"vec([234])<\s*(u32|i32|f32)\s*>|vec([234])([uif])", ty)
    if m:
        k = int(m.group(1) or m.group(3))
        return 4 * k, (8 if k == 2 else 16)
    m = _re.fullmatch(r"array<(.+)>", ty)
    if m:
        parts = split_args(m.group(1))
        if len(parts) != 2:
            raise ValueError(f"workgroup array without a size: {ty!r}")
        size, align = _layout(parts[0], names)
        stride = -(-size // align) * align
        return stride * _eval_int(parts[1], names), align
    raise ValueError(f"unsupported workgroup type {ty!r}")


@dataclass
class ShaderInfo:
    """What :func:`parse_wgsl` reads from a shader (see the section comment above).

    Attributes:
        bindings: global name → (group, binding, address space) of every bound resource.
        consts: ``const`` name → int value (only those with integer constant expressions).
        overrides: ``override`` name → default (int), None without a default.
        workgroup_vars: ``var<workgroup>`` name → its type text, in declaration order.
        structs: struct name → its field names, in order.
        functions: function name → (identifiers its body reads, names it calls);
            ``entry_points`` the @compute ones.
    """

    bindings: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    consts: dict[str, int] = field(default_factory=dict)
    overrides: dict[str, int | None] = field(default_factory=dict)
    workgroup_vars: dict[str, str] = field(default_factory=dict)
    structs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    functions: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    entry_points: tuple[str, ...] = ()

    def reachable(self, entry_point: str) -> frozenset[str]:
        """Every identifier used by ``entry_point`` and the functions it calls (transitively)."""
        if entry_point not in self.functions:
            raise KeyError(f"no function {entry_point!r} in the shader")
        seen, todo, used = {entry_point}, [entry_point], set()
        while todo:
            ids, calls = self.functions[todo.pop()]
            used |= ids
            for f in calls:
                if f in self.functions and f not in seen:
                    seen.add(f)
                    todo.append(f)
        return frozenset(used)

    def entry_bindings(self, entry_point: str) -> dict[str, int]:
        """Global name → binding number of the group-0 resources ``entry_point`` uses (what
        ``layout="auto"`` puts in its bind-group layout)."""
        used = self.reachable(entry_point)
        return {n: b for n, (g, b, _) in self.bindings.items() if g == 0 and n in used}

    def workgroup_bytes(self, entry_point: str, constants: dict | None = None) -> int:
        """Bytes of ``var<workgroup>`` that ``entry_point`` reaches, with override values
        ``constants`` (name → value; defaults otherwise), each variable aligned (WGSL layout)."""
        names = {k: v for k, v in self.overrides.items() if v is not None}
        names.update(self.consts)
        names.update({k: int(v) for k, v in (constants or {}).items()})
        used = self.reachable(entry_point)
        total = 0
        for name, ty in self.workgroup_vars.items():
            if name in used:
                size, align = _layout(ty, names)
                total = -(-total // align) * align + size
        return total


def _body_end(src: str, start: int) -> int:
    depth = 0
    for i in range(start, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError("unbalanced braces in WGSL")


@functools.lru_cache(maxsize=64)
def parse_wgsl(source: str) -> ShaderInfo:
    """Read bindings, constants, overrides, workgroup variables and the call graph from a
    (preprocessed) WGSL ``source``."""
    src = _COMMENT.sub("", source)
    info = ShaderInfo()
    for m in _BINDING.finditer(src):
        space = (m.group(3) or "").split(",")[0].strip()
        info.bindings[m.group(4)] = (int(m.group(1)), int(m.group(2)), space)
    # consts in order (later ones use earlier ones); non-integer ones are skipped
    for m in _CONST.finditer(src):
        try:
            info.consts[m.group(1)] = _eval_int(m.group(2), {**info.consts})
        except (ValueError, KeyError, SyntaxError):
            pass
    for m in _OVERRIDE.finditer(src):
        val = None
        if m.group(3) is not None:
            try:
                val = _eval_int(m.group(3), {**info.consts, **{k: v for k, v in
                                                              info.overrides.items()
                                                              if v is not None}})
            except (ValueError, KeyError, SyntaxError):
                val = None
        info.overrides[m.group(1)] = val
    for m in _STRUCT.finditer(src):
        # a member's name is the last word before its ':' (after attributes such as @builtin)
        info.structs[m.group(1)] = tuple(f.split(":")[0].split()[-1]
                                         for f in m.group(2).split(",") if ":" in f)
    for m in _WGVAR.finditer(src):
        info.workgroup_vars[m.group(1)] = m.group(2).strip()
    entries = []
    for m in _FN.finditer(src):
        brace = src.index("{", m.end())
        end = _body_end(src, brace)
        body = src[brace:end]
        info.functions[m.group(2)] = (frozenset(_IDENT.findall(body)),
                                      frozenset(_CALL.findall(body)))
        if m.group(1):
            entries.append(m.group(2))
    info.entry_points = tuple(entries)
    return info


def shader_info(name: str, flags: frozenset[str] = frozenset()) -> ShaderInfo:
    """:func:`parse_wgsl` of :func:`shader_source` ``(name, flags)``."""
    return parse_wgsl(shader_source(name, flags))
