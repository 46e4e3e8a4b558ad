"""Merge-order long words cut into pieces walked side by side (torch_gpubpe.encoding.long_bpe):
the ids equal tiktoken's (or the Python walk's) whether the cuts' pairs pass at once, after a
move, or only after a removal; one word, many, beside short ones, across slices, with the
byte-class split, a regex split and SentencePiece."""

from __future__ import annotations

import base64
import json
import random

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llamacpp_vocabs
from conftest import corpus_docs
from test_encode_merge_order import GPT2, tiktoken_of
from torch_gpubpe.core.patterns import PATTERN_OF
from torch_gpubpe.core.vocab_files import load_tiktoken
from torch_gpubpe.encoding.long_bpe import PIECE_UNIT, cut_gap, piece_bytes
from torch_gpubpe.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.gpu
rng = random.Random(7)


def rand(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


# Each is one word of the byte-class split and of GPT-2's (a letter run, a digit run, ...).
WORDS = {
    "digits": rand("0123456789", 30_000),
    "letters": rand("abcdefghijklmnopqrstuvwxyz", 25_000),
    "dna": rand("acgt", 30_000),
    "one letter": "a" * 40_000,
    "equals": "=" * 30_000,       # GPT-2 has runs of '=' up to 64 bytes
    "two letters": "ab" * 15_000,
    "five letters": "abcde" * 6_000,  # its period does not divide the cut spacing
    "emoji": "🙂" * 8_000,
    "cjk": "的" * 10_000,
    "accented": "ğ" * 12_000,
}


@pytest.fixture(scope="module")
def gpt2():
    return load_tiktoken(GPT2)


def oracle(v, split: str) -> tiktoken.Encoding:
    if split == "bytes-classes":
        return tiktoken_of(v)
    return tiktoken.Encoding("t", pat_str=PATTERN_OF[split], mergeable_ranks=v.bpe_ranks,
                             special_tokens={})


def test_cut_spacing():
    """Cuts are a multiple of 768 bytes apart and leave more than a token, a chunk and 64
    bytes on each side of a cut moved into the middle of a piece."""
    for md, ch in ((4, 4), (128, 32), (256, 1024), (1000, 64)):
        k = piece_bytes(md, ch)
        assert k % PIECE_UNIT == 0 and k >= 4 * cut_gap(md, ch) > 4 * max(md, ch, 64)


@pytest.mark.parametrize("split", ["bytes-classes", "gpt2"])
def test_long_words_equal_tiktoken(gpt2, split):
    tok = Tokenizer(gpt2, pre_tokenizer=split, thread_budget=8_000)
    tt = oracle(gpt2, split)
    short = corpus_docs("multi_udhr", 6_000, max_doc_bytes=2_000)
    docs = list(WORDS.values()) + short + ["x " + WORDS["digits"] + " y" + WORDS["dna"]]
    got = tok.encode_batch(docs).tolist()
    for d, g in zip(docs, got):
        assert g == tt.encode_ordinary(d), repr(d[:40])
    s = tok._session()
    assert s.long_bpe_words >= len(WORDS)
    assert s.long_bpe_moved > 0
    assert s.long_bpe_checks > s.long_bpe_pieces - s.long_bpe_words


def test_each_kind_alone_and_its_repairs(gpt2):
    """One word per call: a run of one unit whose period divides 768 passes every cut at once;
    random digits need moves. The ids are tiktoken's."""
    tok = Tokenizer(gpt2, thread_budget=8_000)
    tt = tiktoken_of(gpt2)
    seen = {}
    for name, d in WORDS.items():
        s = tok._session()
        before = (s.long_bpe_words, s.long_bpe_failed, s.long_bpe_moved, s.long_bpe_removed)
        assert tok.encode_batch([d]).tolist()[0] == tt.encode_ordinary(d), name
        seen[name] = tuple(a - b for a, b in zip(
            (s.long_bpe_words, s.long_bpe_failed, s.long_bpe_moved, s.long_bpe_removed), before))
    for name in ("one letter", "equals", "emoji", "cjk"):
        assert seen[name][0] == 1 and seen[name][1] == 0, (name, seen[name])
    assert seen["digits"][2] > 0


def test_cuts_removed_when_they_cannot_move(gpt2, monkeypatch):
    """A failing cut that finds no token start to move to is removed and the pieces around it
    are walked as one: still tiktoken's ids (the boundary pass made to find none)."""
    from torch_gpubpe.encoding import long_bpe

    real = long_bpe.LongBpeWords.aux

    def no_boundary(self, mode, items, reach):
        out = real(self, mode, items, reach)
        if mode == long_bpe.AUX_BOUNDARY:
            out[:] = long_bpe.NO_TOKEN
        return out

    monkeypatch.setattr(long_bpe.LongBpeWords, "aux", no_boundary)
    tok = Tokenizer(gpt2, thread_budget=8_000)
    tt = tiktoken_of(gpt2)
    docs = [WORDS["digits"], WORDS["dna"], WORDS["one letter"]]
    assert tok.encode_batch(docs).tolist() == [tt.encode_ordinary(d) for d in docs]
    s = tok._session()
    assert s.long_bpe_removed > 0 and s.long_bpe_moved == 0


def test_a_long_word_across_slices(gpt2):
    """A word longer than a slice: each slice cuts its part; the slices' join is checked as
    before."""
    tok = Tokenizer(gpt2, thread_budget=8_000, max_slice_bytes=20_000)
    tt = tiktoken_of(gpt2)
    docs = [WORDS["digits"] + WORDS["letters"][:9_000], "q" + WORDS["dna"]]
    assert tok.encode_batch(docs).tolist() == [tt.encode_ordinary(d) for d in docs]
    assert tok._session().long_bpe_words > 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["01", "0123456789", "ab", "abc", "abcdefg", "a ", "aé🙂", "xyz="]),
       st.integers(8_000, 24_000), st.integers(0, 2**32 - 1))
def test_random_long_words(gpt2, alphabet, n, seed):
    r = random.Random(seed)
    word = "".join(r.choice(alphabet) for _ in range(n))
    tok = Tokenizer(gpt2, thread_budget=4_000)
    tt = tiktoken_of(gpt2)
    assert tok.encode_batch([word, "a" + word]).tolist() == [tt.encode_ordinary(word),
                                                             tt.encode_ordinary("a" + word)]


def test_sentencepiece_documents_are_words(tmp_path, monkeypatch):
    """A SentencePiece model trained across whitespace encodes each document as one word:
    long documents are cut into pieces too, with SentencePiece's ids."""
    from test_encode_sentencepiece_model import train
    from torch_gpubpe import notices
    from torch_gpubpe.core.reference import to_bytes

    monkeypatch.setattr(notices, "said", set())  # (its notice stays unsaid for other tests)

    path, sp = train(tmp_path, "joined", split_by_whitespace=False)
    tok = Tokenizer.from_sentencepiece(path, thread_budget=8_000)
    assert tok.gpu_split == "whole"
    text = " ".join(corpus_docs("multi_udhr", 200_000))
    docs = [text[:60_000], text[60_000:140_000], base64.b64encode(text[:20_000].encode()).decode()]
    got = tok.encode_batch(docs).tolist()
    for d, g in zip(docs, got):
        assert g == sp.encode(to_bytes(d).decode()), repr(d[:40])
    assert tok._session().long_bpe_words >= 2


def test_cuts_failing_round_after_round_end_in_one_walk(gpt2, monkeypatch):
    """If cuts' pairs kept failing (every cut in the first round, every other one in the
    second, every one left in the third), the rounds stay bounded (move, remove, then the rest
    of the word walked on from its last good cut, said once) and the ids are still
    tiktoken's."""
    from torch_gpubpe.encoding import long_bpe

    real = long_bpe.LongBpeWords.aux
    rounds = []

    def failing(self, mode, items, reach):
        out = real(self, mode, items, reach)
        if mode == long_bpe.AUX_PAIR:
            rounds.append(len(items))
            out[:] = 0
            if len(rounds) == 2:
                out[::2] = 1
        return out

    monkeypatch.setattr(long_bpe.LongBpeWords, "aux", failing)
    from torch_gpubpe import notices

    monkeypatch.setattr(notices, "said", set())
    tok = Tokenizer(gpt2, thread_budget=8_000)
    tt = tiktoken_of(gpt2)
    docs = [WORDS["digits"], WORDS["two letters"]]
    with pytest.warns(notices.GPUBPEWarning, match="walked by one GPU thread"):
        got = tok.encode_batch(docs).tolist()
    assert got == [tt.encode_ordinary(d) for d in docs]
    s = tok._session()
    assert s.long_bpe_moved > 0 and s.long_bpe_removed > 0 and s.long_bpe_walked_on == 2
    assert len(rounds) <= 3 * len(docs)


@pytest.mark.skipif(llamacpp_vocabs.models_dir() is None,
                    reason=f"${llamacpp_vocabs.ENV} is not set (.ci/run sets it)")
@pytest.mark.parametrize("name", ["llama-bpe", "qwen2", "deepseek-llm"])
def test_models_vocabularies(tmp_path, name):
    """Llama 3 (tokens BPE never builds, taken whole only as whole words), Qwen2 and DeepSeek
    LLM with their own splits: long words cut into pieces give Hugging Face's ids."""
    from tokenizers import Tokenizer as HFTokenizer

    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(llamacpp_vocabs.tokenizer_json(name), ensure_ascii=False),
                    encoding="utf-8")
    hf = HFTokenizer.from_file(str(path))
    tok = Tokenizer.from_hf(str(path), thread_budget=8_000)
    docs = [WORDS["letters"], "Привет" * 5_000, "x" * 40_000, " " + WORDS["two letters"],
            WORDS["cjk"]]
    got = tok.encode_batch(docs).tolist()
    for d, g in zip(docs, got):
        assert g == hf.encode(d, add_special_tokens=False).ids, repr(d[:40])
    assert tok._session().long_bpe_words >= len(docs)


def test_a_call_interrupted_after_cutting_leaves_the_tokenizer_working(gpt2, monkeypatch):
    """An exception while the pieces walk (Ctrl-C, a GPU timeout) leaves their walk states in
    the slot's buffer; a later, smaller slice with a long word in its last block must not take
    the states past its end for walks (it raised IndexError)."""
    from torch_gpubpe.encoding import long_bpe

    r = random.Random(121)
    real = long_bpe.LongBpeWords.write_cuts
    armed = [True]

    def interrupted(self, *a, **k):
        real(self, *a, **k)
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt("while the pieces walk")

    tok = Tokenizer(gpt2, thread_budget=4_000)
    tt = tiktoken_of(gpt2)
    monkeypatch.setattr(long_bpe.LongBpeWords, "write_cuts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tok.encode_batch(["".join(r.choice("0123456789") for _ in range(100_000))])
    doc = "ab " * (49_300 // 3) + "".join(r.choice("0123456789") for _ in range(7_201))
    for _ in range(2):
        assert tok.encode_batch([doc]).tolist()[0] == tt.encode_ordinary(doc)
    assert not armed[0] and tok._session().long_bpe_words >= 2


@pytest.mark.parametrize("chunk", [4, 64, 1024])
def test_chunk_sizes_and_words_before_a_long_word_in_its_chunk(gpt2, chunk):
    """A long word whose chunk (the thread that starts it) begins with other words, at chunk
    sizes from 4 to 1,024 bytes: its start is found among them; the ids are tiktoken's."""
    tok = Tokenizer(gpt2, thread_budget=4_000, chunk_bytes=chunk)
    tt = tiktoken_of(gpt2)
    docs = [f"{'x ' * k}{WORDS['digits'][:20_000 + 97 * k]} {WORDS['dna'][:9_000]}"
            for k in (0, 1, 7, 40, 300)]
    assert tok.encode_batch(docs).tolist() == [tt.encode_ordinary(d) for d in docs]
    assert tok._session().long_bpe_words >= len(docs)


def test_many_long_words_in_one_slice(gpt2, monkeypatch):
    """More long words than are looked at right after the first walk (FEW_WALKS), and more
    than are cut in one slice (MAX_WORDS, made small): the others go on walking; the ids are
    tiktoken's."""
    from torch_gpubpe.encoding import long_bpe

    from torch_gpubpe import notices

    monkeypatch.setattr(long_bpe, "MAX_WORDS", 24)
    monkeypatch.setattr(notices, "said", set())
    r = random.Random(5)
    docs = ["".join(r.choice("0123456789") for _ in range(r.randrange(6_000, 9_000)))
            for _ in range(long_bpe.FEW_WALKS + 6)]
    tok = Tokenizer(gpt2, thread_budget=4_000)
    tt = tiktoken_of(gpt2)
    with pytest.warns(notices.GPUBPEWarning, match="more than 24 long words"):
        got = tok.encode_batch(docs).tolist()
    assert got == [tt.encode_ordinary(d) for d in docs]
    s = tok._session()
    assert s.long_bpe_words == 24 and s.long_bpe_uncut == len(docs) - 24


@pytest.mark.parametrize("split", ["bytes-classes", "gpt2"])
def test_real_text_as_long_words_and_sizes_at_the_cut_thresholds(gpt2, split):
    """Long words made of the corpora's own letters (English, and dozens of scripts: each a
    single word of these splits), and random digit words at sizes around the cut spacing and
    the pieces needed for cutting; tiktoken's ids."""
    import regex

    from torch_gpubpe.encoding.long_bpe import MIN_PIECES

    def letters(name: str, n: int) -> str:
        text = "".join(regex.findall(r"\p{L}+", " ".join(corpus_docs(name, 4 * n))))
        return text[:n]

    k = piece_bytes(max(len(b) for b in gpt2.bpe_ranks), 32)
    sizes = [m * k + d for m in (MIN_PIECES, MIN_PIECES + 1, 2 * MIN_PIECES) for d in (-1, 0, 1)]
    r = random.Random(11)
    docs = [letters("en_novels", 30_000), letters("multi_udhr", 30_000),
            letters("tr_manpages", 12_000)]
    docs += ["".join(r.choice("0123456789") for _ in range(n)) for n in sizes]
    tok = Tokenizer(gpt2, pre_tokenizer=split, thread_budget=4_000)
    tt = oracle(gpt2, split)
    got = tok.encode_batch(docs).tolist()
    for d, g in zip(docs, got):
        assert g == tt.encode_ordinary(d), (len(d), repr(d[:40]))
    assert tok._session().long_bpe_words >= 3
