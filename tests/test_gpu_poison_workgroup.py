"""Poisoned workgroup memory for every shader but encode.wgsl (which has its own
hand-written test build, tests/test_encode_long_words.py::test_poisoned_workgroup_memory).

Workgroup memory is not zeroed (WGPU_NOTES.md §0.3); a kernel that reads it before writing it
gets what an earlier workgroup left, which on lavapipe is mostly zeros, so such a bug can pass
every other test. Here the GPU's shader flags gain ``POISON_WORKGROUP``: every entry point then
first fills each workgroup variable it reaches with 0xDEADBEEF
(:func:`wgsl_poison.poison_workgroup`, registered by conftest), and each pipeline's results must still equal
its oracle exactly:

| shader | oracle | test |
|---|---|---|
| the transform itself: every reached variable filled, a read-before-write kernel sees it | 0xDEADBEEF read back | test_transform_fills_every_variable, test_poison_is_seen |
| encode_bpe.wgsl (merge-order mode), with and without the regex word mask | tiktoken | test_encode_bpe |
| pretokenize_unicode.wgsl (gpt2, cl100k, qwen2 families) | ``regex`` word starts | test_pretokenize_unicode |
| wordcount.wgsl (small tables: rehash, store growth) | reference.count_words | test_wordcount |
| train_table + train_wordlist / train_seed, continuations | reference.train | test_trainer_both_algorithms |

Each runs with subgroups (lavapipe: 8 lanes) and on the portable path without them.
"""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
import tiktoken

from conftest import CORPUS_NAMES, TEST_VOCABS, corpus_docs
from torch_gpubpe.gpu import device as gpumod
from torch_gpubpe.core import reference
from torch_gpubpe.encoding import regex_pretok as unicode_pretok
from torch_gpubpe.gpu.shaders import parse_wgsl, shader_source, wgsl_dir
from wgsl_poison import POISON_FLAG, POISON_VALUE, poison_workgroup

pytestmark = pytest.mark.gpu

SHADERS = sorted(p.stem for p in wgsl_dir().glob("*.wgsl") if p.stem != "common")  # every one


@pytest.fixture(params=["subgroups", "portable"])
def poisoned(request, monkeypatch):
    """The process GPU with POISON_WORKGROUP in its shader flags and empty pipeline caches
    (restored afterwards); ``portable``: a fresh GPU without subgroups."""
    if request.param == "portable":
        monkeypatch.setenv(gpumod.ENV_NO_SUBGROUPS, "1")
        gpumod.reset_gpu()
        request.addfinalizer(gpumod.reset_gpu)  # runs after monkeypatch's undo (LIFO)
    g = gpumod.get_gpu()
    assert g.has_subgroups == (request.param == "subgroups")
    base = g.flags
    monkeypatch.setattr(type(g), "flags", property(lambda self: base | {POISON_FLAG}))
    monkeypatch.setattr(g, "_modules", {})
    monkeypatch.setattr(g, "_pipelines", {})
    monkeypatch.setattr(unicode_pretok, "_CACHE", {})  # pre-tokenizers built before the patch
    return g


# -- the transform ---------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [frozenset(), frozenset({"SUBGROUPS"})])
@pytest.mark.parametrize("name", SHADERS)
def test_transform_fills_every_variable(name, flags):
    src = shader_source(name, flags | {POISON_FLAG})
    if name != "encode":  # encode.wgsl adds its own //#if POISON_WORKGROUP fills first
        assert src == poison_workgroup(shader_source(name, flags))
    info = parse_wgsl(src)
    for e in info.entry_points:
        reached = [v for v in info.workgroup_vars if v in info.reachable(e)]
        start = src.index("{", src.index(f"fn {e}("))
        head = src[start:src.index("workgroupBarrier();", start)] if reached else ""
        for var in reached:  # the fill before the first barrier stores to each of them
            assert re.search(rf"(\b{var}(\[poison_i\])? = |&{var}(\[poison_i\])?, )"
                             rf"((bitcast|vec[234])<\w+>\()?0xdeadbeefu", head), (name, e, var)


_READ_BEFORE_WRITE = """
var<workgroup> a: array<u32, 300>;
var<workgroup> c: atomic<u32>;
var<workgroup> s: u32;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {
    // lane 0 of workgroup w reads before any write: what the poison left
    let w = wid.x;
    out[3u * w] = a[(w * 37u) % 300u];
    out[3u * w + 1u] = atomicLoad(&c);
    out[3u * w + 2u] = s;
}
"""


def test_poison_is_seen():
    """The fill reaches the memory a buggy kernel reads (with or without its own
    local_invocation_index), so the tests below can fail."""
    g = gpumod.get_gpu()
    src = poison_workgroup(_READ_BEFORE_WRITE)
    assert "poison_lid" in src
    pipe = g.pipeline("poison_probe", "main", source=src)
    n = 8
    out = g.buffer(12 * n, g.wgpu.BufferUsage.STORAGE | g.wgpu.BufferUsage.COPY_SRC, "probe")
    enc = g.device.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, g.bind_group(pipe, [out]))
    cp.dispatch_workgroups(n)
    cp.end()
    g.device.queue.submit([enc.finish()])
    got = np.frombuffer(g.device.queue.read_buffer(out, 0, 12 * n), np.uint32)
    assert (got == POISON_VALUE).all(), got


def test_unsupported_types_are_named():
    with pytest.raises(ValueError, match="mat2x2"):
        poison_workgroup("var<workgroup> v: mat2x2<f32>;\n@compute @workgroup_size(1)\n"
                         "fn main() { v = mat2x2<f32>(); }\n")
    filled = poison_workgroup("var<workgroup> v: array<vec4<u32>, 8>;\n"
                              "@compute @workgroup_size(1)\n"
                              "fn main(@builtin(local_invocation_index) lid: u32) "
                              "{ v[0] = vec4<u32>(0u); }\n")
    assert "v[poison_i] = vec4<u32>(0xdeadbeefu);" in filled


# -- every pipeline under poison -----------------------------------------------------------------
PATHOLOGICAL = ["a" * 3_000, " " * 900 + "x", "1" * 700, "🙂" * 300, "=" * 500 + "ab" * 90,
                base64.b64encode(bytes(range(256)) * 8).decode(), "ğ" * 400, "\n" * 300,
                "", "x", "I'm  ok 12345 don't 'S 'll", "a\u0301b \u3000\u3000x ١٢٣"]


def _docs(per_corpus: int) -> list[str]:
    docs = []
    for name in CORPUS_NAMES:
        docs += corpus_docs(name, per_corpus, max_doc_bytes=1_500)
    return docs + PATHOLOGICAL


def check_encode_bpe(docs, small=True):
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.patterns import PATTERN_OF
    from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY
    from torch_gpubpe.core.vocab_files import load_tiktoken

    gpt2 = load_tiktoken(TEST_VOCABS / "gpt2.tiktoken")
    tt = tiktoken.Encoding("t", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=gpt2.bpe_ranks,
                           special_tokens={})
    for kw in ({}, {"max_slice_bytes": 300, "thread_budget": 1, "chunk_bytes": 4})[:1 + small]:
        tok = Tokenizer(gpt2, **kw)
        assert tok.mode == "bpe"
        assert tok.encode_batch(docs).tolist() == [tt.encode_ordinary(d) for d in docs]
    # with a regex pre-tokenizer: its word mask (WORD_MASK build, pretokenize_unicode.wgsl)
    tok = Tokenizer(gpt2, pre_tokenizer="gpt2")
    gpt2_tt = tiktoken.Encoding("g", pat_str=PATTERN_OF["gpt2"], mergeable_ranks=gpt2.bpe_ranks,
                                special_tokens={})
    assert tok.encode_batch(docs).tolist() == [gpt2_tt.encode_ordinary(d) for d in docs]


def check_pretokenize_unicode(docs, families=None, joined=False):
    """``joined``: the documents as one of several workgroup blocks (8 KiB each: pt_local's
    halo in workgroup memory is read only across a block edge)."""
    from torch_gpubpe.core.patterns import FAMILIES, reference_word_starts
    from torch_gpubpe.encoding.regex_pretok import word_starts

    if joined:
        text = "".join(docs)
        docs = [text * (30_000 // max(1, len(text)) + 1)]

    for family in families or FAMILIES:
        for kw in ({}, {"max_slice_bytes": 2048}):
            got = word_starts(docs, family, **kw)
            for d, gw in zip(docs, got):
                assert np.array_equal(gw, reference_word_starts(d, family)), (family, d[:60])


def check_wordcount(docs):
    from torch_gpubpe.training.wordcount import GPUWordCounter
    from torch_gpubpe.training.wordcount import document_batches as _batches

    counter = GPUWordCounter(batch_bytes=9_000, min_slots=64, min_store=64)
    for data, offsets in _batches(docs, counter.batch_bytes, {}):
        counter.add_batch(data, offsets)
    assert counter.slots > 64  # rehashed
    assert counter.result().to_dict() == dict(reference.count_words(docs))


def check_trainer(docs, algorithms=None):
    from torch_gpubpe.training.trainer import ALGORITHMS, GPUTrainer

    docs = docs + ["abababab", "ba" * 301, "x" + "ab" * 77 + "a", "a" * 3001]
    counts = reference.count_words(docs)
    words = [w for w in counts if len(w) > 1]
    want = reference.train(docs, 256 + 120, 1)
    for algorithm in algorithms or ALGORITHMS:
        stats: dict = {}
        got = GPUTrainer().run(words, [counts[w] for w in words], 120, 1, stats=stats,
                               algorithm=algorithm, batch=16,
                               budget=61 if algorithm == "wordlist" else None)
        assert got == want, algorithm
        if algorithm == "wordlist":
            assert stats["walks_paused"] >= 1


def test_encode_bpe(poisoned):
    check_encode_bpe(_docs(2_500))


def test_pretokenize_unicode(poisoned):
    check_pretokenize_unicode(_docs(3_000))
    check_pretokenize_unicode(_docs(3_000), ["gpt2"], joined=True)


def test_wordcount(poisoned):
    check_wordcount(_docs(6_000))


def test_trainer_both_algorithms(poisoned):
    check_trainer(_docs(1_500))


# One initialisation per shader, removed: the poisoned build must then go wrong (so the tests
# above can fail). (shader, the first occurrence of this text removed, the check, its options)
MUTATIONS = [
    ("encode_bpe", "if (lane_wg == 0u) { atomicStore(&wg_count, 0u); }", check_encode_bpe,
     {"small": False}),
    ("pretokenize_unicode", "wf[lid] = fa;\n    wb[lid] = ba;", check_pretokenize_unicode, {}),
    ("pretokenize_unicode", "tile[tile_word(j0)] = word;", check_pretokenize_unicode,
     {"families": ["gpt2"], "joined": True}),
    ("wordcount", "if (lid == 0u) { atomicStore(&wg_count, 0u); }", check_wordcount, {}),
    ("train_table", "local_table_clear(lid);", check_trainer, {"algorithms": ["wordlist"]}),
    ("train_table", "sh_sg[0] = t.x;", check_trainer, {"algorithms": ["seed"]}),
]


@pytest.mark.parametrize("shader,old,check,kw", MUTATIONS,
                         ids=[f"{m[0]}-{m[3].get('algorithms', m[3].get('families', ['']))[0]}"
                              for m in MUTATIONS])
def test_a_removed_initialisation_is_caught(shader, old, check, kw, monkeypatch):
    from torch_gpubpe.gpu import shaders
    from torch_gpubpe.errors import GPUBPEError

    text = shaders.read_wgsl(shader)
    assert old in text
    real = shaders.read_wgsl
    monkeypatch.setattr(shaders, "read_wgsl",
                        lambda n: real(n).replace(old, "", 1) if n == shader else real(n))
    g = gpumod.get_gpu()
    base = g.flags
    monkeypatch.setattr(type(g), "flags", property(lambda self: base | {POISON_FLAG}))
    monkeypatch.setattr(g, "_modules", {})
    monkeypatch.setattr(g, "_pipelines", {})
    monkeypatch.setattr(unicode_pretok, "_CACHE", {})
    with pytest.raises((AssertionError, GPUBPEError)):
        check(_docs(1_000), **kw)
