"""The poisoned-workgroup test build of the WGSL shaders (flag ``POISON_WORKGROUP``).

Workgroup memory is not zeroed, and what a workgroup finds there is whatever the last one left
(WGPU_NOTES.md §0.3), which on lavapipe is mostly zeros. A kernel that reads a variable before
it writes it can therefore pass every test and fail on another driver. The POISON_WORKGROUP
build makes such a read visible everywhere: every entry point first fills each workgroup
variable it reaches with 0xDEADBEEF (then a barrier), so its results are right only if it
initialises what it reads. (A separate pipeline that fills the memory is not seen by the next
one on lavapipe, docs/WGPU_NOTES.md §0.3, hence the fill inside the shader under test.)

:func:`install` registers :func:`poison_workgroup` as the shader filter of the flag
(:func:`torch_gpubpe.gpu.shaders.register_source_filter`); ``tests/conftest.py`` calls it, so a
GPU whose flags include ``POISON_FLAG`` compiles every shader poisoned.
"""

from __future__ import annotations

import re as _re

from torch_gpubpe.gpu.shaders import parse_wgsl, register_source_filter, split_args

_COMMENT = _re.compile(r"//[^\n]*")
POISON_FLAG = "POISON_WORKGROUP"
POISON_VALUE = 0xDEADBEEF
_ENTRY = _re.compile(r"@compute\s*@workgroup_size\(([^)]*)\)\s*fn\s+(\w+)\s*\(")
_LID = _re.compile(r"@builtin\(\s*local_invocation_index\s*\)\s*(\w+)\s*:")
_STRUCT = _re.compile(r"\bstruct\s+(\w+)\s*\{([^}]*)\}")
_PARAM = _re.compile(r"(\w+)\s*:\s*(\w+)\s*(?:,|$)")


def _poison_stores(name: str, ty: str, lid: str, threads: str) -> list[str]:
    """WGSL statements filling workgroup variable ``name`` of type ``ty`` with the poison."""
    poison = f"{POISON_VALUE:#x}u"

    def store(ref: str, elem: str) -> str:
        elem = elem.strip()
        if _re.fullmatch(r"atomic<\s*u32\s*>", elem):
            return f"atomicStore(&{ref}, {poison});"
        if _re.fullmatch(r"atomic<\s*i32\s*>", elem):
            return f"atomicStore(&{ref}, bitcast<i32>({poison}));"
        if elem == "u32":
            return f"{ref} = {poison};"
        if elem in ("i32", "f32"):
            return f"{ref} = bitcast<{elem}>({poison});"
        v = _re.fullmatch(r"(vec[234])<\s*(u32|i32|f32)\s*>", elem)
        if v:
            one = poison if v.group(2) == "u32" else f"bitcast<{v.group(2)}>({poison})"
            return f"{ref} = {v.group(1)}<{v.group(2)}>({one});"
        raise ValueError(f"poison_workgroup: unsupported workgroup type {elem!r} of {name}")

    m = _re.fullmatch(r"array<(.+)>", ty.strip())
    if m:
        elem, size = split_args(m.group(1))
        if elem.startswith("array"):
            raise ValueError(f"poison_workgroup: nested array {ty!r} of {name}")
        return [f"for (var poison_i = {lid}; poison_i < u32({size}); poison_i += {threads}) "
                f"{{ {store(name + '[poison_i]', elem)} }}"]
    return [f"if ({lid} == 0u) {{ {store(name, ty)} }}"]


def poison_workgroup(source: str) -> str:
    """Test build of a preprocessed WGSL ``source``: each ``@compute`` entry point begins by
    filling every ``var<workgroup>`` it reaches (directly or through the functions it calls)
    with 0xDEADBEEF, strided over its invocations, followed by ``workgroupBarrier()``.
    Comments are dropped. Entry points that reach no workgroup memory are unchanged; one
    without a ``local_invocation_index`` parameter, nor a struct parameter with such a member
    (common.wgsl's ``Lanes``), gets one (``poison_lid``).

    Raises:
        ValueError: a workgroup variable of a type it cannot fill (nested arrays, vectors).
    """
    src = _COMMENT.sub("", source)
    info = parse_wgsl(src)
    struct_lid = {m.group(1): lm.group(1) for m in _STRUCT.finditer(src)
                  if (lm := _LID.search(m.group(2)))}
    out, pos = [], 0
    for m in _ENTRY.finditer(src):
        used = info.reachable(m.group(2))
        wg_vars = [(n, t) for n, t in info.workgroup_vars.items() if n in used]
        if not wg_vars:
            continue
        open_paren = m.end() - 1
        close_paren, depth = open_paren, 0
        for close_paren in range(open_paren, len(src)):
            depth += {"(": 1, ")": -1}.get(src[close_paren], 0)
            if depth == 0:
                break
        params = src[open_paren + 1:close_paren]
        lid_m = _LID.search(params)
        in_struct = [f"{p.group(1)}.{struct_lid[p.group(2)]}" for p in _PARAM.finditer(params)
                     if p.group(2) in struct_lid]
        threads = "(" + ") * (".join(d.strip() for d in m.group(1).split(",") if d.strip()) + ")"
        if lid_m:
            lid = lid_m.group(1)
            new_params = params
        elif in_struct:
            lid = in_struct[0]
            new_params = params
        else:
            lid = "poison_lid"
            sep = ", " if params.strip() else ""
            new_params = f"@builtin(local_invocation_index) poison_lid: u32{sep}{params}"
        brace = src.index("{", close_paren)
        fill = [s for n, t in wg_vars for s in _poison_stores(n, t, lid, threads)]
        out += [src[pos:open_paren + 1], new_params, src[close_paren:brace + 1], "\n    ",
                "\n    ".join(fill), "\n    workgroupBarrier();"]
        pos = brace + 1
    out.append(src[pos:])
    return "".join(out)


def install() -> None:
    """Make every build with :data:`POISON_FLAG` among its flags a poisoned one."""
    register_source_filter(POISON_FLAG, poison_workgroup)
