"""GPU regex pre-tokenizers (torch_gpubpe.encoding.regex_pretok) == regex.finditer, per byte."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPORA, CORPUS_NAMES, corpus_docs
from torch_gpubpe import InputError
from torch_gpubpe.core.patterns import (FAMILIES, O200K_PATTERN, reference_word_starts, resolve,
                                   split, table)
from torch_gpubpe.encoding.regex_pretok import BLOCK, CHUNK, HALO, word_starts

pytestmark = pytest.mark.gpu


def assert_same(docs, family, refs=None, **kw):
    got = word_starts(docs, family, **kw)
    assert len(got) == len(docs)
    for k, (doc, g) in enumerate(zip(docs, got)):
        ref = reference_word_starts(doc, family) if refs is None else refs[k]
        if not np.array_equal(g, ref):
            bad = int(np.flatnonzero(g != ref)[0])
            data = doc.encode("utf-8", "surrogatepass") if isinstance(doc, str) else bytes(doc)
            pytest.fail(f"{family}: document {k}, byte {bad} (gpu {bool(g[bad])}); context "
                        f"{data[max(0, bad - 24) : bad + 24]!r}; regex split "
                        f"{split(data[max(0, bad - 24) : bad + 24], family)}")


def _table_bytes() -> np.ndarray:
    stage1, stage2, _ = table()
    cps = np.arange(0x110000)
    return stage2[stage1[cps >> 8], cps & 255]


def test_table_is_what_regex_says(tmp_path_factory):
    """The checked-in table == a fresh run of the generator under the ``regex`` release it
    names (the Unicode version of tiktoken's and tokenizers' engines). Where the installed
    ``regex`` knows another Unicode, that release is installed apart (pip --target) and the
    generator's check runs in a subprocess over it."""
    import subprocess
    import sys

    from torch_gpubpe.core.unicode_gen import (REGEX_VERSION, UNICODE_VERSION, class_bytes,
                                           regex_unicode_version, two_level)

    stage1, stage2, meta = table()
    assert meta["unicode_version"] == UNICODE_VERSION and meta["regex_version"] == REGEX_VERSION
    if regex_unicode_version() == UNICODE_VERSION:
        fresh = class_bytes()
        assert np.array_equal(_table_bytes(), fresh)
        s1, s2 = two_level(fresh)
        assert np.array_equal(s1, stage1) and np.array_equal(s2, stage2)
        return
    where = tmp_path_factory.mktemp("regex_for_table")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--disable-pip-version-check", "--target", str(where),
                          f"regex=={REGEX_VERSION}"], capture_output=True, text=True,
                         cwd=where)  # (an earlier test may have left this process in a gone folder)
    assert pip.returncode == 0, f"installing regex=={REGEX_VERSION} apart: {pip.stderr}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), *sys.path])}
    check = subprocess.run([sys.executable, "-m", "torch_gpubpe.core.unicode_gen", "--check"],
                           capture_output=True, text=True, env=env, cwd=where)
    assert check.returncode == 0, check.stdout + check.stderr


def test_table_is_what_tiktoken_and_hf_tokenizers_say():
    """Every code point's class in the table == what the installed tiktoken's and Hugging Face
    tokenizers' regex engines match with the same class patterns (surrogates aside: neither
    takes them)."""
    from tokenizers import Regex, pre_tokenizers

    from torch_gpubpe.core.unicode_gen import (CLASS_PATTERNS, NUM_CP, changed_classes, class_bytes,
                                           tiktoken_members)

    cps = np.r_[0:0xD800, 0xE000:NUM_CP]
    text = "".join(map(chr, cps))

    def hf_members(pattern: str) -> np.ndarray:
        hit = np.zeros(NUM_CP, bool)
        hit[cps] = True  # "removed" leaves the pieces that do not match
        for piece, _ in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text):
            hit[np.frombuffer(piece.encode("utf-32-le"), np.uint32)] = False
        return hit

    ours = _table_bytes()
    ours[0xD800:0xE000] = 0  # no peer classifies surrogates
    for name, members in (("tiktoken", tiktoken_members), ("tokenizers", hf_members)):
        theirs = class_bytes(members)
        theirs[0xD800:0xE000] = 0
        changed = changed_classes(ours, theirs)
        assert not changed, {k: [f"U+{c:04X}" for c in v[:10]] for k, v in changed.items()}
    assert set(CLASS_PATTERNS) >= {"L", "N", "S", "upper", "lower"}


def test_report_names_the_code_points_a_newer_unicode_moves():
    """``_unicode_gen --report``'s comparison: a table where Unicode 17's U+088F (an Arabic
    letter) and U+11DE0 (a digit) were still unassigned is reported class by class."""
    from torch_gpubpe.core.unicode_gen import changed_classes

    ours = _table_bytes()
    newer = ours.copy()
    newer[0x088F], newer[0x11DE0] = 12, 1  # a letter of both case classes; a digit
    changed = changed_classes(ours, newer)
    assert changed == {"L": [0x088F], "N": [0x11DE0], "upper": [0x088F], "lower": [0x088F]}
    assert changed_classes(ours, ours) == {}


# Code points whose class changed in Unicode 17 or 18 (letters of each case class, a mark, a
# digit, an Ll that became Lo), emoji of Unicode 15 and 17, around letters, digits, contractions
# and spaces: tiktoken's engine (Unicode 16) treats the new ones as unassigned ("other").
NEW_CODE_POINTS = ("\u088f\u0c5c\ua7ce\ua7cf\u1acf\U00011de0\u0295"   # Unicode 17
                   "\u0558\u058b\u05c8\ua7dd\U0001246f\U0001d6a6"      # Unicode 18
                   "\U0001fae8\U0001fac8")                                # emoji
NEW_CODE_POINT_TEXTS = (
    ["a \U0001fae8", "a\U0001fae8b", "I'm \U0001fae8's 12\U00011de0\U00011de134 x"]
    + [f"{pre}{c}{post}" for c in NEW_CODE_POINTS
       for pre, post in (("a", "b"), (" ", "'s"), ("A", "B"), ("1", "2"), (".", "\n"), ("", " "))]
    + [" ".join(NEW_CODE_POINTS), NEW_CODE_POINTS * 3 + "'LL 99"])


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_on_new_unicode_code_points_equal_tiktoken(family):
    """GPU merge-order ids on code points assigned in Unicode 17 and 18 == the installed
    tiktoken's, with GPT-2's ranks under each family's pattern."""
    import base64

    import tiktoken

    from conftest import shared_vocab
    from torch_gpubpe.encoding.tokenizer import Tokenizer
    from torch_gpubpe.core.patterns import PATTERN_OF

    path = shared_vocab("gpt2.tiktoken")
    ranks = {base64.b64decode(t): int(r) for t, r in (ln.split() for ln in open(path))}
    got = Tokenizer.from_tiktoken(path, pattern=family).encode_batch(NEW_CODE_POINT_TEXTS)
    if family in PATTERN_OF:
        enc = tiktoken.Encoding(family, pat_str=PATTERN_OF[family], mergeable_ranks=ranks,
                                special_tokens={})
        want = [enc.encode_ordinary(text) for text in NEW_CODE_POINT_TEXTS]
    else:  # Hugging Face's steps (no pat_str): tiktoken's BPE of each piece of the oracle
        enc = tiktoken.Encoding(family, pat_str=r"(?s:.+)", mergeable_ranks=ranks,
                                special_tokens={})
        want = [[i for p in split(text, family) for i in enc.encode_ordinary(p.decode())]
                for text in NEW_CODE_POINT_TEXTS]
    for text, ids, w in zip(NEW_CODE_POINT_TEXTS, got.tolist(), want):
        assert ids == w, f"{family}: {text!r}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_corpora(name, family):
    assert_same(corpus_docs(name, max_bytes=60_000), family)


EDGE_CASES = [
    "", "a", " ", "\n", "'", "'s", "'S", "'ll", "'LL", "'lL", "'Re", "'ve", "x'd", "'ſ",
    "I'm  ok 12345", "don't 'S 'll 'LL x'Re", "x\t'sa", " 's", "\n's", "''s", "'s's", "'st",
    ".\n\n\tfoo  \n  bar\n", "a\n\n  b.\n\n x  ", "a \n", "a  ", "  a", "\t a", "\t\ta", "\r\n",
    "x.\r\n\r\n  y", "x.\n \n", "١٢٣٤٥ ١٢", "12\u0661\u0662345", "a\u0301b", "e\u0301\u0302",
    "\x00\x00a\x00", "\u3000\u3000x", "\x85x", "\xa0\xa0", "\x1c\x1dx", "😀😀 😀a", "क्षत्रिय",
    "ภาษาไทย ๑๒๓", "İstanbul'da ıışğ", "<a href='x'>\r\n</a>", "a\u2028\u2029b",
    # o200k's letter-case classes, attached contractions, `[\r\n/]*`
    "HelloWORLDFoo", "ǅungla ǅ Ǉ ǈx", "DON'T don'T 'S X'S x'sa", "A中B A中B'S 中A'B", "ABʰC d",
    "\u0301AB cd\u0301E f \u0301'll", ".,\u0301's", " \u0301x", "x \u0903", "HTTPServer",
    "a/b .//\n//x ./\r\n/\n.", "\n/a", " 's ' 'S", "x' s", "ſ'ſ 'ſt", "it's's'll'LL",
    "camelCaseXMLHttp", "ΣΑΣ σας", "İIıi", "x\t\t.", "a .\n\nb", "ǅǅǅa", "ʰʰʰA ",
    # marks where Qwen3.5 reads them as letters: as the optional prefix, after punctuation,
    # before an apostrophe, alone at the end
    "!\u0301a", "!!\u0301", " \u0301", "\u0301!", "x\u0301's", "'\u0301s", "\n\u0301\u0301 1\u0301",
    "a  \n\n\t", "x\n \t",
    # SentencePiece's ▁ (U+2581): runs after other code points, at the start, at the end
    "\u2581a\u2581\u2581b", "a\u2581", "\u2581", "\u2581\u2581 \u2581x\u2581.\u2581\n\u2581",
]
BYTE_CASES = [b"a\xff\xe2\x82b \xed\xa0\x80z", b"\x80\x80\x80", b"\xf0\x9f\x98", b"\xc0\xaf'S",
              b" \xe2\x80\x80\xe2\x80\x80x", b"1\xef\xbc\x912", b"\xf4\x90\x80\x80", b"'\xc5\xbf"]


@pytest.mark.parametrize("family", FAMILIES)
def test_edge_cases(family):
    assert_same(EDGE_CASES + BYTE_CASES, family)
    assert_same(["".join(EDGE_CASES)], family)


def _runs(unit: str, sizes) -> list[str]:
    return ([f"x{unit * m}y" for m in sizes] + [f".{unit * m}" for m in sizes]
            + [unit * m for m in sizes] + [f"中{unit * m}'S" for m in sizes])


BOUNDARY = (CHUNK - 2, CHUNK - 1, CHUNK, CHUNK + 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("unit", [" ", "\n", "7", "\u0663", "a", ".", " \n", "\n ", "\t", "\u3000",
                                  "A", "中", "\u0301", "\n/", "aA", "A\u0301", "\u2581",
                                  "\u2581a"])
def test_long_runs_across_chunks_and_blocks(family, unit):
    """Runs that cross thread chunks and workgroup blocks (the scanned rules)."""
    assert_same(_runs(unit, BOUNDARY), family)


EDGE_TAILS = ["'s", "'ll", "'ve've", "''s", " 's", "中'S", "\u0301's", "é'llx", "'RE", "\n's",
              "é", "中", "😀", "\xa0 x", "  \n", "1'd", ".'t", "x'", "a\r\n\r\n b"]


@pytest.mark.parametrize("family", FAMILIES)
def test_chunk_edges_at_every_offset(family):
    """Contractions, multi-byte code points and runs at every offset across a thread's chunk
    edge (pt_classify's text window and pt_mark's carried history start at each chunk), in
    one document each and packed together (document starts at every offset)."""
    docs = [pre * pad + tail for pad in range(CHUNK - 9, CHUNK + 3) for pre in ("x", "中", " ")
            for tail in EDGE_TAILS]
    assert_same(docs, family)
    assert_same(["".join(docs)], family)
    assert_same([d.encode()[: 2 * CHUNK - 1] + b"\xe4\xb8" for d in docs[::7]], family)


@pytest.mark.parametrize("family", FAMILIES)
def test_slices_inside_documents(family):
    """Small slices: cuts inside documents, with halos and carried automaton states."""
    docs = corpus_docs("code_cpython_stdlib", max_bytes=20_000) + EDGE_CASES
    assert_same(["".join(docs)], family, max_slice_bytes=4 * HALO + 32)
    docs += ["ab" + " " * 100 + "\n" * 5 + "9" * 90 + "x" * 400, "1" * 60 + " " * 60]
    assert_same(docs, family, max_slice_bytes=4 * HALO)


@pytest.mark.parametrize("family, doc", [("cl100k", "1" * 2000), ("o200k", "A" * 2000),
                                         ("o200k", "中" * 700), ("o200k", "12" * 1000)])
def test_uncuttable_run_is_refused(family, doc):
    with pytest.raises(InputError, match=f"no point where the '{family}'"):
        word_starts([doc], family, max_slice_bytes=4 * HALO)


@pytest.mark.parametrize("pattern", [r"\w+|\s+", "bytes-classes", "o200k_x",
                                     O200K_PATTERN.replace("/", "")])
def test_unsupported_patterns_are_refused(pattern):
    with pytest.raises(InputError):
        word_starts(["abc"], pattern)


def test_names_and_pat_strs():
    import json

    import tiktoken_ext.openai_public as op

    assert resolve(op.r50k_pat_str) == resolve("p50k_base") == "gpt2"
    assert resolve("cl100k_base") == "cl100k"
    assert resolve("o200k_base") == resolve("o200k_harmony") == resolve(O200K_PATTERN) == "o200k"
    qwen = json.load(open(CORPORA.parent / "vocabs" / "qwen2.tiktoken.json"))["pattern"]
    gpt2 = json.load(open(CORPORA.parent / "vocabs" / "gpt2.tiktoken.json"))["pattern"]
    assert resolve(qwen) == "qwen2" and resolve(gpt2) == "gpt2"


PIECES = ["'s", "'S", "'ll", "'Ve", "'", " ", "  ", "\t", "\n", "\r\n", "\r", "\u3000", "\x85",
          "\xa0", "7", "12345", "\u0663\u0664", "a", "Zz", "ı", "ſ", "\u0301", "\x00", ".", "..",
          "😀", "ก", "\u200d", "\ufeff", "K",
          "HelloWORLDFoo", "ǅ", "DON'T", "A", "中", "ʰ", "/", "\u0903", "ΣΑΣ", "re", "LL",
          "\u2581", "\u2581\u2581"]
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)  # str: → U+FFFD
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=3) | surrogates,
                 max_size=60).map("".join)
raw = st.lists(st.sampled_from([p.encode() for p in PIECES] + [b"\xed\xa0\x80", b"\xed\xbf\xbf"])
               | st.binary(max_size=4), max_size=40).map(b"".join)


@settings(max_examples=int(os.environ.get("PRETOK_EXAMPLES", 60)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(texts | raw | st.text(), min_size=1, max_size=8))
def test_hypothesis(docs):
    for family in FAMILIES:
        assert_same(docs, family)


def test_docstring_examples():
    import doctest

    import torch_gpubpe.core.patterns as patterns_mod
    import torch_gpubpe.encoding.regex_pretok as pretok_mod

    for mod in (patterns_mod, pretok_mod):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


@pytest.mark.heavy
@pytest.mark.parametrize("family", FAMILIES)
def test_corpora_in_full(family):
    """Every corpus, several MB each, in one batch (the lent GPU: -m heavy); the oracle on
    every core (spawned processes: this one has opened the GPU)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from itertools import repeat

    with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("spawn")) as ex:
        for name in CORPUS_NAMES:
            docs = corpus_docs(name, max_bytes=8_000_000, max_doc_bytes=2_000_000)
            refs = list(ex.map(reference_word_starts, docs, repeat(family)))
            assert_same(docs, family, refs)


def test_hugging_face_pre_tokenizers():
    import json

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    from torch_gpubpe.core.patterns import QWEN2_PATTERN, from_hf_pre_tokenizer

    def entry(pt):
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = pt
        return json.loads(t.to_str())["pre_tokenizer"]

    assert from_hf_pre_tokenizer(entry(pre_tokenizers.ByteLevel(add_prefix_space=False))) == "gpt2"
    qwen = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    assert from_hf_pre_tokenizer(entry(qwen)) == "qwen2"
    o200k = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    assert from_hf_pre_tokenizer(entry(o200k)) == "o200k"
    starcoder = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                         pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert from_hf_pre_tokenizer(entry(starcoder)) == "starcoder"
    for bad in (pre_tokenizers.ByteLevel(add_prefix_space=True), pre_tokenizers.Whitespace(),
                pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False),
                                         pre_tokenizers.ByteLevel(add_prefix_space=False)]),
                pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\w+"), behavior="isolated"),
                                         pre_tokenizers.ByteLevel(use_regex=False)])):
        with pytest.raises(InputError):
            from_hf_pre_tokenizer(entry(bad))


def test_starcoder_pattern_is_digits_then_byte_level():
    """STARCODER_PATTERN splits as Hugging Face's Digits(individual_digits) then ByteLevel's
    regex do, on every string of up to 4 code points over the classes that matter."""
    from tokenizers import pre_tokenizers

    import regex

    from torch_gpubpe.core.patterns import STARCODER_PATTERN

    hf = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                  pre_tokenizers.ByteLevel(add_prefix_space=False)])
    rx = regex.compile(STARCODER_PATTERN)
    texts = _all_strings("a1٣ \t\n'.s中", 4) + ["x  1", "  12 ab's 3'll", "½ Ⅻ 1\u3000 2"]
    for t in texts:
        assert [o for _, o in hf.pre_tokenize_str(t)] == [m.span() for m in rx.finditer(t)], t


# Per DeepSeek family: one code point of each class its steps tell apart, and longer texts.
DEEPSEEK_ALPHABETS = {
    "deepseek-coder": ("a1.中한 \n\u3000、©", ["x\r\n  ab. ., 12 ½ \u0301é 中文abc"]),
    # ASCII letter (both lists), letter of the list, letter of the list in the CJK ranges,
    # letter of neither list, ASCII and fullwidth punctuation, punctuation in the CJK ranges,
    # U+3000 (a space in the punctuation list), other spaces, LF, digit, CJK, other
    "deepseek-llm": ("aé\u10a0\u01bb!！‘ \t\n\u30001中€",
                     ["x\r\n  ab. ., 12 ½ \u0301é 中文abc", "héllo wörld", "a  \n b  ",
                      "!\u3000!", "!\u3000\u3000 x", "€\u3000 \u3000€  \r\n", "ｚ\x85\u2028Ａ"]),
}


@pytest.mark.parametrize("family", sorted(DEEPSEEK_ALPHABETS))
def test_deepseek_steps_split_as_hugging_face(family):
    """The oracle of DeepSeek's steps (STAGES_OF) and the GPU split as Hugging Face's Sequence
    pre-tokenizer does, on every string of up to 4 code points over the classes that matter."""
    import json

    from tokenizers import Tokenizer

    from torch_gpubpe.core.patterns import DSCODER_CJK, STAGES_OF, from_hf_pre_tokenizer

    steps = [{"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
             for p in STAGES_OF[family][:-1]]
    steps += [{"type": "Digits", "individual_digits": True},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": False}]
    pre = {"type": "Sequence", "pretokenizers": steps}
    assert from_hf_pre_tokenizer(pre) == family and "\u0800" in DSCODER_CJK
    hf = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": pre, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": {}, "merges": []}})).pre_tokenizer
    alphabet, extra = DEEPSEEK_ALPHABETS[family]
    texts = _all_strings(alphabet, 4) + extra
    want = []
    for t in texts:
        cuts = np.cumsum([0] + [len(c.encode()) for c in t])
        w = np.zeros(len(t.encode()), bool)
        w[cuts[[o[0] for _, o in hf.pre_tokenize_str(t)]]] = True
        want.append(w)
        assert np.array_equal(reference_word_starts(t, family), w), t
    for t, g, w in zip(texts, word_starts(texts, family), want):
        assert np.array_equal(g, w), t


def test_o200k_pattern_is_tiktokens():
    """O200K_PATTERN is the installed tiktoken's o200k_base pat_str (read from its source,
    which would download the ranks if called)."""
    import ast
    import inspect

    import tiktoken_ext.openai_public as op

    fn = ast.parse(inspect.getsource(op.o200k_base)).body[0]
    pat = next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", None) == "pat_str")
    assert eval(compile(ast.Expression(pat), "pat_str", "eval")) == O200K_PATTERN


# One code point of each class the o200k rule tells apart (u, l as a contraction letter and
# not, b as a letter and a mark, digit, other, apostrophe, slash, U+0020, another space, LF).
O200K_ALPHABET = "Aas中\u0301 1.'/\t\n"


def _all_strings(alphabet: str, max_len: int) -> list[str]:
    import itertools

    return ["".join(t) for n in range(1, max_len + 1)
            for t in itertools.product(alphabet, repeat=n)]


def test_o200k_every_short_string():
    """Every string of up to 4 code points over O200K_ALPHABET (and "S" for the case-folded
    contraction), each its own document, in one batch."""
    assert_same(_all_strings(O200K_ALPHABET, 4) + _all_strings("Ss'\u0301 ", 5), "o200k")


@pytest.mark.heavy
@pytest.mark.parametrize("family", FAMILIES)
def test_every_string_of_five(family):
    assert_same(_all_strings(O200K_ALPHABET + "S\r", 5), family)


ascii_words = st.lists(st.sampled_from(["ab", "Ab", "AB", "x'S", "it's", " ", "  ", "\t", "\n",
                                        "12", "7", ".", "/", " .", "a1", "1a", "z", "Q", "s",
                                        "\u0301", "中", "é"]), max_size=400).map("".join)


@settings(max_examples=int(os.environ.get("PRETOK_EXAMPLES", 60)) // 3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ascii_words, min_size=1, max_size=4))
def test_slices_at_every_kind_of_cut(docs):
    """Small slices over text full of cut points of every kind (each family's own table of
    safe ASCII pairs and the automaton states carried across them)."""
    for family in FAMILIES:
        assert_same(docs, family, max_slice_bytes=4 * HALO)
