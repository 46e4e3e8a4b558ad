"""torch_gpubpe.gpu.shaders.parse_wgsl: Python reads bindings, constants and workgroup-memory sizes
from the WGSL (no hand copies). Sizes are checked against the WGSL memory-layout rules on a
synthetic shader, and against the real shaders' declarations and their compiled pipelines."""

from __future__ import annotations

import pytest

from torch_gpubpe.gpu.shaders import parse_wgsl, shader_info

SRC = """
const WG: u32 = 64u;
const S_A: u32 = 3u;       // a state index
const S_B: u32 = S_A + 2u;
override N: u32 = 16u;
@group(0) @binding(0) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> P: vec4<u32>;
@group(0) @binding(7) var<storage, read> unused_here: array<u32>;
var<workgroup> a: array<u32, WG>;            // 256 B
var<workgroup> b: atomic<u32>;               // 4 B
var<workgroup> v: array<vec3<u32>, 2u * N>;  // stride 16: 512 B (align 16)
var<workgroup> lone: u32;

fn helper(i: u32) -> u32 { return a[i] + atomicLoad(&state[S_A]); }
fn deeper() { atomicAdd(&b, 1u); _ = helper(0u); }

@compute @workgroup_size(64)
fn first(@builtin(local_invocation_index) lid: u32) {
    deeper();
    v[lid].x = P.x;
}

@compute @workgroup_size(64)
fn second() { lone = 1u; }
"""


def test_constants_bindings_overrides():
    info = parse_wgsl(SRC)
    assert info.consts["S_A"] == 3 and info.consts["S_B"] == 5 and info.consts["WG"] == 64
    assert info.overrides == {"N": 16}
    assert info.bindings["P"] == (0, 5, "uniform")
    assert info.entry_points == ("first", "second")
    assert info.entry_bindings("first") == {"state": 0, "P": 5}
    assert info.entry_bindings("second") == {}


def test_workgroup_bytes_follow_the_call_graph_and_overrides():
    info = parse_wgsl(SRC)
    # a (256) + b (4) → 260, aligned to 16 for v → 272 + 32 × 16
    assert info.workgroup_bytes("first") == 272 + 32 * 16
    assert info.workgroup_bytes("first", {"N": 40}) == 272 + 80 * 16
    assert info.workgroup_bytes("second") == 4
    grown = SRC.replace("fn second() { lone = 1u; }",
                        "var<workgroup> extra: array<u32, 100>;\n"
                        "fn second() { lone = 1u; extra[0] = 2u; }")
    assert parse_wgsl(grown).workgroup_bytes("second") == 4 + 400
    with pytest.raises(KeyError):
        info.workgroup_bytes("nope")


TRAIN_SHADERS = ["train_seed", "train_wordlist"]


@pytest.mark.parametrize("name", TRAIN_SHADERS)
def test_real_shader_sizes_follow_their_declarations(name):
    """pair_count's workgroup hash table is declared as LSLOTS keys (u32) and 2·LSLOTS count
    words: its parsed size moves by 12 B per slot of the override; the encoder's chunked walk
    declares 4 arrays of 256 u32 and two counters; nothing exceeds the H200's 48 KiB."""
    for flags in (frozenset(), frozenset({"SUBGROUPS"})):
        info = shader_info(name, flags)
        small = info.workgroup_bytes("pair_count", {"LSLOTS": 1024})
        assert info.workgroup_bytes("pair_count", {"LSLOTS": 2048}) - small == 12 * 1024
        for e in info.entry_points:
            assert info.workgroup_bytes(e) <= 48 * 1024, e
    enc = shader_info("encode")
    assert enc.workgroup_bytes("trie_tokenizer_chunked") == 4 * 256 * 4 + 8  # + 2 counters


@pytest.mark.gpu
@pytest.mark.parametrize("name", TRAIN_SHADERS + ["wordcount", "encode"])
def test_parsed_bindings_make_valid_bind_groups(name):
    """The bindings parse_wgsl says an entry point uses are exactly those of its
    layout="auto" bind group: creating the bind group with them (no more, no less) succeeds."""
    from torch_gpubpe.gpu.device import get_gpu

    g = get_gpu()
    info = shader_info(name, g.flags)
    U = g.wgpu.BufferUsage
    storage = g.buffer(1 << 12, U.STORAGE, "test.storage")
    uniform = g.buffer(256, U.UNIFORM, "test.uniform")
    consts = {"WG": 256} if "WG" in info.overrides else {}
    for e in info.entry_points:
        pipe = g.pipeline(name, e, constants=consts)
        binds = {b: uniform if info.bindings[v][2] == "uniform" else storage
                 for v, b in info.entry_bindings(e).items()}
        g.bind_group(pipe, binds, label=f"test.{name}.{e}")


@pytest.mark.gpu
def test_workgroup_limit_checked_from_the_parse():
    from torch_gpubpe.gpu.device import get_gpu

    g = get_gpu()
    src = f"var<workgroup> big: array<u32, {g.max_workgroup_storage // 4 + 1}>;\n" \
          "@compute @workgroup_size(1) fn main() { big[0] = 1u; }\n"
    with pytest.raises(ValueError, match=r"main needs \d+ B of workgroup memory"):
        g.pipeline("too_big", "main", source=src)


def test_constants_shared_with_python_agree():
    """Each constant that both Python and the WGSL know is defined once per language, and the
    two agree: the Python side is the one the host uses, the WGSL one is parsed here."""
    from torch_gpubpe.core import bpe_tables, reference, trie
    from torch_gpubpe.encoding import layout, pretokenize, regex_pretok

    common = shader_info("encode").consts  # (common.wgsl is part of every shader)
    assert common["NO_TOKEN"] == trie.NO_TOKEN == bpe_tables.NO_TOKEN == layout.NO_TOKEN
    assert shader_info("encode_bpe").consts["RANK_BITS"] == bpe_tables.RANK_BITS
    assert shader_info("encode_bpe").consts["RANK_MASK"] == (1 << bpe_tables.RANK_BITS) - 1
    for k in ("TOKENS", "UNFINISHED", "CONT_LO", "CONT_HI", "REGIONS", "LONG_ERRORS",
              "BAD_TOKENS", "HEAD"):
        assert common[f"INFO_{k}"] == getattr(layout, f"INFO_{k}"), k
    assert layout.META_HEAD == 4 * common["INFO_HEAD"]
    assert common["WORD_START_BIT"] == reference.WORD_START_BIT
    for k in ("LETTER", "DIGIT", "SPACE", "PUNCT", "NEWLINE"):
        assert common[f"CLS_{k}"] == getattr(reference, k), k
    assert regex_pretok.WG == pretokenize.WG == layout.WG
    for name in ("encode", "encode_bpe", "pretokenize", "pretokenize_unicode", "specials"):
        assert shader_info(name).overrides["WG"] == layout.WG, name
