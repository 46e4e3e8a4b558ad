"""Kinds of failure seen in other projects (the points outside the kernels).

| case | expected | test |
|---|---|---|
| ``encode(b"")``, ``encode_batch([])``, ``[""] * 2``, ``submit([])`` in a fresh process | ``[]`` and the GPU never opened (forked workers stay usable) | test_empty_input_never_opens_the_gpu |
| collate with ``pad_id`` == EOS id (documents and packed mode) | real EOS keep mask 1 and their label; only padding is masked | test_pad_id_equal_to_eos_keeps_real_eos_in_the_loss |
| ``load_state_dict`` mid-epoch, background thread + 2 batches in flight | the rest exactly once, then whole epochs; none lost or repeated | test_resume_mid_epoch_then_whole_epochs |
| empty / whitespace-only / tiny corpus; vocab size with special tokens | InputError (empty); == reference + a warning naming why it stopped; never above the size asked | test_empty_tiny_and_whitespace_corpora, test_cli_whitespace_and_tiny_corpora |
| merges of spaces, newlines, invalid UTF-8 | load in tokenizers, transformers, tiktoken; every id round-trips | test_exported_odd_merges_load_and_round_trip |
| the exported tokenizer.json's pre-tokenizer vs the trainer's words (every corpus, beyond-BMP, combining marks) | the same words | test_exported_split_equals_the_trainer_words |
| hundreds of Tokenizers (and trainings, datasets) opened and dropped | one device; RSS flat | test_many_tokenizers_keep_memory_flat_and_one_device |
| device lost during ``encode`` CLI / ``train`` CLI | GPUOperationError (exit 2), no output that looks complete; the next run works | test_device_lost_leaves_no_partial_output |
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from collections import Counter

import pytest
import tokenizers
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS_NAMES, corpus_docs, subprocess_env
from torch_gpubpe.core import reference
from torch_gpubpe.integrations.torch_data import IGNORE_INDEX, PadCollator, TokenizedDataset, pad_collate
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.export import bytes_to_unicode, export_all, hf_tokenizer_json, tiktoken_ranks
from torch_gpubpe.core.vocab import SPLIT_PATTERN_PY, Vocab

EOT = "<|endoftext|>"


def run_py(code: str, timeout: float = 300) -> str:
    env = subprocess_env(TORCH_GPUBPE_TIMEOUT="30")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


@pytest.fixture(scope="module")
def vocab():
    docs = [d for name in CORPUS_NAMES for d in corpus_docs(name, 2_000)]
    return Vocab.from_merges(reference.train(docs, vocab_size=500), (EOT,))


@pytest.fixture(scope="module")
def tok(vocab):
    return Tokenizer(vocab)


# ------------------------------------------------------------------------------------------------
# §3 An empty document does not open the GPU
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_empty_input_never_opens_the_gpu():
    """Before: encode(b"") created the adapter, device and pipelines; a fork-started DataLoader
    worker then refused to run."""
    out = run_py("""
        from torch_gpubpe import Vocab
        from torch_gpubpe.gpu import device as gpu
        from torch_gpubpe.integrations.torch_data import gpu_touched
        from torch_gpubpe.encoding.tokenizer import Tokenizer
        tok = Tokenizer(Vocab(((97, 98),), ("<|endoftext|>",)))
        assert tok.encode(b"") == [] and tok.encode("") == [] and tok.encode_ordinary("") == []
        assert tok.encode("", allowed_special="all") == []
        assert len(tok.encode_batch([])) == 0 and tok.encode_batch([]).offsets.tolist() == [0]
        assert tok.encode_batch(["", ""]).tolist() == [[], []]
        assert tok.encode_batch([b"", ""], allowed_special="all").tolist() == [[], []]
        assert tok.submit([]).result().tolist() == [] and tok.encode_to_numpy(b"").size == 0
        assert tok.decode([]) == "" and tok.decode_batch([[], []]) == ["", ""]
        assert gpu._gpu is None and not gpu_touched(), "the GPU was opened"
        assert tok.encode("ab") == [256] and gpu_touched()  # and it opens when there is work
        print("untouched")
    """)
    assert out.strip() == "untouched"


# ------------------------------------------------------------------------------------------------
# §4 Padding: pad_id == EOS id
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_pad_id_equal_to_eos_keeps_real_eos_in_the_loss(tok, vocab):
    eos = vocab.token_to_id(EOT)
    docs = ["yakınlık ve", "a", f"x {EOT}", "2026 yılı ve daha fazlası", ""]
    want = [reference.encode(d, vocab.merges) + [eos] for d in docs]
    ds = TokenizedDataset(docs, tok, add_eos=True, pad_id=eos)
    items = list(ds)
    assert [t.tolist() for t in items] == want
    for side in ("right", "left"):
        for coll in (PadCollator(pad_id=eos, padding_side=side, labels=True),
                     lambda b, side=side: pad_collate(b, pad_id=eos, padding_side=side,
                                                      labels=True)):
            out = coll(items)
            mask, ids, labels = out["attention_mask"], out["input_ids"], out["labels"]
            assert mask.sum(1).tolist() == [len(w) for w in want]  # every real EOS counted
            for j, w in enumerate(want):
                real = ids[j][mask[j].bool()].tolist()
                assert real == w and labels[j][mask[j].bool()].tolist() == w
                assert (labels[j][~mask[j].bool()] == IGNORE_INDEX).all()
                assert (ids[j][~mask[j].bool()] == eos).all()
            assert int((labels == eos).sum()) == len(docs)  # each document's EOS is a target
    # Packed mode: the last, padded block (drop_last=False) with pad_id == EOS.
    seq_len = 7
    ds = TokenizedDataset(docs, tok, mode="packed", seq_len=seq_len, drop_last=False, pad_id=eos)
    blocks = list(ds)
    stream = [t for w in want for t in w]
    n = len(stream)
    inputs = torch.stack([b["input_ids"] for b in blocks]).flatten().tolist()
    labels = torch.stack([b["labels"] for b in blocks]).flatten().tolist()
    assert inputs[:n] == stream and set(inputs[n:]) <= {eos}
    assert labels[: n - 1] == stream[1:]  # the real EOS are targets, padding is not
    assert labels[n - 1 :] == [IGNORE_INDEX] * (len(labels) - n + 1)


# ------------------------------------------------------------------------------------------------
# §4 Resume
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["documents", "packed"])
def test_resume_mid_epoch_then_whole_epochs(tok, mode):
    """Background thread on, 2 GPU batches in flight, tiny batches: when the consumer stops,
    several batches are read and encoded ahead; none may be lost or repeated."""
    docs = [d for name in CORPUS_NAMES[:4] for d in corpus_docs(name, 6_000, 400)]
    kw = dict(mode=mode, batch_bytes=300, pipeline_depth=2, background=True)
    if mode == "packed":
        kw["seq_len"] = 16
    key = (lambda b: b["input_ids"].tolist()) if mode == "packed" else (lambda t: t.tolist())
    full = [key(x) for x in TokenizedDataset(docs, tok, **kw)]
    assert len(full) > 40
    for stop in (1, 7, len(full) // 2, len(full) - 1):
        ds = TokenizedDataset(docs, tok, **kw)
        it = iter(ds)
        head = [key(next(it)) for _ in range(stop)]
        state = ds.state_dict()
        it.close()  # prefetched batches are dropped here
        for target in (ds, TokenizedDataset(docs, tok, **kw)):  # same object or a new one
            target.load_state_dict(json.loads(json.dumps(state)))  # state survives JSON
            rest = [key(x) for x in target]
            assert head + rest == full, (mode, stop)
            # the next epochs are whole again, not the leftover part
            assert [key(x) for x in target] == full
            assert [key(x) for x in target] == full
    # an iteration abandoned mid-way does not shorten the next one
    ds = TokenizedDataset(docs, tok, **kw)
    it = iter(ds)
    next(it), next(it)
    assert [key(x) for x in ds] == full


# ------------------------------------------------------------------------------------------------
# §4 Empty, tiny and whitespace-only corpora; the vocab size asked is a maximum
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_empty_tiny_and_whitespace_corpora():
    from torch_gpubpe.training.trainer import train

    for docs in ([], [""], ["", ""], iter([])):  # before: an empty Vocab, no message
        with pytest.raises(InputError, match="empty corpus: .*0 bytes"):
            train(docs, 300)
    cases = [
        ([" "], 300, 1, ()), (["\n"], 300, 1, (EOT,)), (["a"], 300, 2, ()),
        (["ab"], 300, 2, (EOT, "<|pad|>")),  # tiny: nothing occurs twice
        (["   \n\n\t \r\n  "], 300, 1, ()), ([" " * 50, "\t\t\t\n\n\n\n"], 300, 1, (EOT,)),
        (["\r\n" * 40] * 3, 266, 2, (EOT,)),  # whitespace only, enough to fill the vocab
    ]
    for docs, vs, mf, specials in cases:
        want = reference.train(docs, vs, mf, num_special_tokens=len(specials))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats: dict = {}
            v = train(docs, vs, min_frequency=mf, special_tokens=specials, stats=stats)
        assert list(v.merges) == want and len(v) <= vs, (docs, vs)
        assert v.special_tokens == tuple(specials)
        stopped = [w for w in caught if "training stopped after" in str(w.message)]
        if len(v) < vs:
            assert len(stopped) == 1 and f"min_frequency={mf}" in stats["stopped_early"]
            assert f"has {len(v)} ids, not {vs}" in stats["stopped_early"]
        else:
            assert not stopped and "stopped_early" not in stats
    # never above the size asked, at the smallest sizes too
    docs = corpus_docs("tr_ud_boun", 20_000)
    for specials in ((), (EOT,), (EOT, "<|pad|>", "<|bos|>")):
        for vs in (256 + len(specials), 257 + len(specials), 300):
            v = train(docs, vs, special_tokens=specials)
            assert len(v) == vs and Tokenizer(v).n_vocab == vs
            assert tokenizers.Tokenizer.from_str(hf_tokenizer_json(v)).get_vocab_size() == vs


@pytest.mark.gpu
def test_cli_whitespace_and_tiny_corpora(tmp_path, capsys):
    from torch_gpubpe.cli import main as cli

    for name, lines, vs in (("ws", [" " * 30, "\t\n\n", "    "], 300), ("tiny", ["a"], 280),
                            ("empty", [""], 280)):
        f = tmp_path / f"{name}.jsonl"
        f.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines))
        code = cli.main(["train", "--data-files", str(f), "--vocab-size", str(vs),
                         "--holdout-every", "0", "--min-frequency", "1", "--out",
                         str(tmp_path / name), "--no-progress"])
        out, err = capsys.readouterr()
        if name == "empty":
            assert code == 2 and "empty corpus" in err and not (tmp_path / name / "vocab.json"
                                                                 ).exists()
            continue
        assert code == 0, err
        v = Vocab.load(tmp_path / name)
        want = reference.train(lines, vs, 1, num_special_tokens=1)
        assert len(v) <= vs and list(v.merges) == want


# ------------------------------------------------------------------------------------------------
# §4 Exported merges with spaces, newlines, invalid UTF-8
# ------------------------------------------------------------------------------------------------
ODD_DOCS = ["a  b\n\n\n c", "\r\n\r\n\r\n", "    x", " \t\t y", "€€€ ş ş", "😀😀 👍🏽 ok",
            b"\xff\xfe\xff\xfe \xc3\xc3 \xe2\x82 \x80\x80", "tab\ttab\t\t\n \n  \n"] * 4


def _inverse_byte_level() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def test_exported_odd_merges_load_and_round_trip(tmp_path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from transformers import AutoTokenizer

    merges = reference.train(ODD_DOCS, vocab_size=420, min_frequency=1)
    # plus merges across word classes (never matched inside a word, but must load)
    merges = merges + [(32, 10), (10, 32), (0xFF, 0x20), (0x0A, 0x0D)]
    vocab = Vocab.from_merges(merges, (EOT,))
    tb = vocab.token_bytes
    odd = {"space": [i for i in range(256, len(tb)) if b" " in tb[i]],
           "newline": [i for i in range(256, len(tb)) if b"\n" in tb[i]]}
    bad = []
    for i in range(256, len(tb)):
        try:
            tb[i].decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    odd["invalid utf-8"] = bad
    assert all(len(v) >= 3 for v in odd.values()), {k: len(v) for k, v in odd.items()}
    paths = export_all(vocab, tmp_path)
    texts = [d if isinstance(d, str) else d.decode("utf-8", "replace") for d in ODD_DOCS[:8]]
    texts += ["€ş😀 \n\n  \t€€", "  \n", "\xff", "a" + EOT]
    want = [reference.encode(t, merges) for t in texts]
    inv = _inverse_byte_level()
    smallest = {}
    for i, b in enumerate(tb):
        smallest.setdefault(b, i)
    # tokenizers: every id's token is the id's bytes; ids equal ours; decode round-trips
    hf = tokenizers.Tokenizer.from_file(str(paths["hf"]))
    for i, b in enumerate(tb):
        name = hf.id_to_token(i)
        if smallest[b] == i:
            assert bytes(inv[c] for c in name) == b and hf.token_to_id(name) == i
    hf.encode_special_tokens = True
    assert [e.ids for e in hf.encode_batch(texts)] == want
    assert [hf.decode(w) for w in want] == texts
    # transformers
    auto = AutoTokenizer.from_pretrained(str(tmp_path))  # (a special spelling is its token)
    assert [auto(t)["input_ids"] for t in texts] == [
        Tokenizer(vocab).encode(t, allowed_special="all") for t in texts]
    assert [auto.decode(w) for w in want] == texts
    # tiktoken: the file loads to our ranks, every rank decodes to its bytes, text round-trips
    ranks = load_tiktoken_bpe(str(paths["tiktoken"]))
    assert ranks == tiktoken_ranks(vocab)
    enc = tiktoken.Encoding("odd", pat_str=SPLIT_PATTERN_PY, mergeable_ranks=ranks,
                            special_tokens=vocab.special_token_ids)
    for b, r in ranks.items():
        assert enc.decode_single_token_bytes(r) == b == tb[r]
    for t in texts:
        assert enc.decode(enc.encode_ordinary(t)) == t
    # and this project's own file
    assert Vocab.load(paths["vocab"]) == vocab


# ------------------------------------------------------------------------------------------------
# §4 The exported pre-tokenizer splits as the trainer does
# ------------------------------------------------------------------------------------------------
BEYOND_BMP_AND_MARKS = [
    "e\u0301 n\u0303 a\u0308\u0304 Z\u0351\u0352\u0353", "👨‍👩‍👧‍👦 👍🏽 🇹🇷 🏳️‍🌈",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁 \U0010FFFF\U00010000 x𐍈y", "क्षत्रिय ज्ञान", "한국어 각",
    "\u200b\u200c\u200d\ufeff \u00a0\u2028\u2029\u0085", "ﷺ ﷽ اللّٰه", " \u0301 \u0301\u0301a",
    "1\u20e3 #\ufe0f\u20e3 9\u0301", "Ǆ ǅ ǆ ß ẞ ﬁ", "a\u0000b\u0007\x7f c",
]


def _hf_words(pre, text: str) -> list[bytes]:
    inv = _inverse_byte_level()
    return [bytes(inv[c] for c in piece) for piece, _ in pre.pre_tokenize_str(text)]


def _trainer_words(docs) -> Counter:
    from torch_gpubpe.training.wordcount import count_words

    return Counter(count_words(docs))


@pytest.fixture(scope="module")
def pre():
    return tokenizers.Tokenizer.from_str(hf_tokenizer_json(Vocab(()))).pre_tokenizer


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_exported_split_equals_the_trainer_words(pre, name):
    docs = corpus_docs(name, 40_000, 8_000) + BEYOND_BMP_AND_MARKS
    hf = Counter()
    for d in docs:
        words = _hf_words(pre, d)
        assert words == reference.split_words(d.encode()), d[:80]
        hf.update(words)
    assert hf == _trainer_words(docs)  # the counts the trainer trains on (count_on="cpu")


@pytest.mark.gpu
def test_exported_split_equals_the_gpu_word_counts(pre):
    from torch_gpubpe.training.wordcount import count_words_gpu

    docs = [d for name in CORPUS_NAMES for d in corpus_docs(name, 5_000)] + BEYOND_BMP_AND_MARKS
    hf = Counter(w for d in docs for w in _hf_words(pre, d))
    assert hf == Counter(count_words_gpu(docs).to_dict())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.one_of(
    st.sampled_from(list(" \t\n\r\x0b\x0caZ09.,;-_'\"()")),
    st.characters(min_codepoint=0x300, max_codepoint=0x36F),  # combining marks
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF,
                  blacklist_categories=("Cs",)),  # beyond the BMP
    st.characters(blacklist_categories=("Cs",))), max_size=60))
def test_exported_split_random_text(pre, text):
    assert _hf_words(pre, text) == reference.split_words(text.encode())


# ------------------------------------------------------------------------------------------------
# §4 Many Tokenizers: one device, flat memory
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_many_tokenizers_keep_memory_flat_and_one_device():
    out = run_py("""
        import gc, os
        from torch_gpubpe import Vocab
        from torch_gpubpe.gpu import device as gpu
        from torch_gpubpe.core import reference
        from torch_gpubpe.integrations.torch_data import TokenizedDataset
        from torch_gpubpe.encoding.tokenizer import Tokenizer
        from torch_gpubpe.training.trainer import train

        def rss_mb():
            return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

        docs = ["ab ab abc abcd yakınlık ve 2026 yılı"] * 3
        merges = reference.train(docs, vocab_size=290, min_frequency=1)
        text = "ab abc yakınlık ve " * 20
        want = reference.encode(text, merges)
        devices = set()

        def round_(k):
            for i in range(k):
                t = Tokenizer(Vocab.from_merges(merges, ["<|endoftext|>"]))
                assert t.encode(text) == want
                devices.add(id(t._sess.gpu.device))
                if i % 2:  # half closed explicitly, half just dropped
                    with t:
                        assert t.encode_batch([text, ""]).tolist() == [want, []]
                    assert t._sess is None and t.encode(text) == want
            assert list(train(docs, 270, min_frequency=1).merges) == merges[:14]
            ds = TokenizedDataset([text, text], Vocab.from_merges(merges))
            assert [x.tolist() for x in ds] == [want, want]
            devices.add(id(ds.tokenizer._sess.gpu.device))
            gc.collect()

        for _ in range(3):
            round_(30)  # warm up: allocator pools, pipeline caches
        base = rss_mb()
        for _ in range(12):
            round_(30)  # 360 more Tokenizers, 12 trainings, 12 datasets
        grown = rss_mb() - base
        print(f"devices={len(devices)} grown_mb={grown:.1f}")
        assert len(devices) == 1, devices
        assert grown < 60, grown
    """)
    assert "devices=1" in out, out


# ------------------------------------------------------------------------------------------------
# §4 Device lost: a named error, no output that looks complete, then a fresh device
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_device_lost_leaves_no_partial_output(tmp_path):
    """Before (main at d0f746f): the encode CLI left a partial ids.bin; training raised a raw
    wgpu GPUValidationError instead of GPUOperationError. (The CLI's encode output is now
    written by torch_gpubpe.io.shards: temporary names, renamed when complete.)"""
    docs = [d for name in CORPUS_NAMES[:3] for d in corpus_docs(name, 20_000, 1_000)]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out = run_py(f"""
        import os, sys
        import numpy as np
        from torch_gpubpe import Vocab
        from torch_gpubpe.cli import main as cli
        from torch_gpubpe.gpu import device as gpu
        from torch_gpubpe.core import reference
        from torch_gpubpe.training import trainer
        from torch_gpubpe.encoding.tokenizer import Tokenizer
        from torch_gpubpe.errors import GPUOperationError
        import json
        docs = [json.loads(l)["text"] for l in open({str(src)!r})]
        merges = reference.train(docs[:20], vocab_size=300, min_frequency=1)
        Vocab.from_merges(merges, ["<|endoftext|>"]).save({str(tmp_path / "vocab.json")!r})
        enc_args = ["encode", "--vocab", {str(tmp_path / "vocab.json")!r}, "--data-files",
                    {str(src)!r}, "--out", {str(tmp_path / "ids")!r}, "--batch-bytes", "3000",
                    "--no-progress"]

        def lose_device_at(n, fn):
            calls = [0]
            def wrapped(*a, **k):
                calls[0] += 1
                if calls[0] == n:
                    gpu.get_gpu().device.destroy()
                return fn(*a, **k)
            return wrapped

        COMPLETE = {{"ids.bin", "offsets.npy", "meta.json"}}
        def complete_files(d):
            return COMPLETE & set(os.listdir(d))

        orig = Tokenizer.submit_packed
        # 1. flat output: the device lost at the 3rd batch -> exit 2, nothing that looks done
        Tokenizer.submit_packed = lose_device_at(3, orig)
        assert cli.main(enc_args) == 2
        Tokenizer.submit_packed = orig
        assert not complete_files({str(tmp_path / "ids")!r}), os.listdir({str(tmp_path / "ids")!r})
        # 2. the next run works on a fresh device, output == reference
        assert cli.main(enc_args) == 0
        ids = np.fromfile({str(tmp_path / "ids" / "ids.bin")!r}, np.uint16)
        offs = np.load({str(tmp_path / "ids" / "offsets.npy")!r})
        assert [ids[offs[k]:offs[k + 1]].tolist() for k in range(len(docs))] == (
            reference.encode_batch(docs, merges))
        good = {{f: open(os.path.join({str(tmp_path / "ids")!r}, f), "rb").read()
                 for f in COMPLETE}}
        # --overwrite of a complete output, device lost: never a mix of old and new files
        Tokenizer.submit_packed = lose_device_at(2, orig)
        assert cli.main(enc_args + ["--overwrite"]) == 2
        Tokenizer.submit_packed = orig
        left = complete_files({str(tmp_path / "ids")!r})
        assert not left or {{f: open(os.path.join({str(tmp_path / "ids")!r}, f), "rb").read()
                             for f in COMPLETE}} == good, left
        # llm.c shards: only complete shards stay; the resumed run equals an uninterrupted one
        llmc = enc_args[:-4] + [{str(tmp_path / "l1")!r}] + enc_args[-3:] + [
            "--output-format", "llmc", "--shard-tokens", "5000"]
        assert cli.main(llmc) == 0
        whole = {{f: open(os.path.join({str(tmp_path / "l1")!r}, f), "rb").read()
                  for f in os.listdir({str(tmp_path / "l1")!r}) if f.endswith(".bin")}}
        llmc2 = [x if x != {str(tmp_path / "l1")!r} else {str(tmp_path / "l2")!r} for x in llmc]
        Tokenizer.submit_packed = lose_device_at(6, orig)
        assert cli.main(llmc2) == 2
        Tokenizer.submit_packed = orig
        assert "meta.json" not in os.listdir({str(tmp_path / "l2")!r})
        for f in os.listdir({str(tmp_path / "l2")!r}):
            if f.endswith(".bin"):  # a shard that exists is complete
                assert open(os.path.join({str(tmp_path / "l2")!r}, f), "rb").read() == whole[f], f
        assert cli.main(llmc2) == 0
        assert {{f: open(os.path.join({str(tmp_path / "l2")!r}, f), "rb").read()
                 for f in os.listdir({str(tmp_path / "l2")!r}) if f.endswith(".bin")}} == whole

        # 3. training: the device lost after the first batch of merges
        orig_train = trainer.train
        def train_losing(docs_, vs, progress=None, **kw):
            return orig_train(docs_, vs, progress=lose_device_at(2, progress), **kw)
        try:
            orig_train(docs, 1000, min_frequency=1, batch=16,
                       progress=lose_device_at(2, lambda p: None))
        except GPUOperationError as e:
            assert "training" in str(e) and "device is lost" in str(e), e
        else:
            raise AssertionError("training on a lost device did not fail")
        trainer.train = train_losing
        train_args = ["train", "--data-files", {str(src)!r}, "--vocab-size", "1000",
                      "--out", {str(tmp_path / "v")!r}, "--no-progress"]
        assert cli.main(train_args) == 2
        assert os.listdir({str(tmp_path / "v")!r}) == []  # no vocab written
        trainer.train = orig_train
        assert cli.main(train_args) == 0
        print("OK")
    """)
    assert out.strip().endswith("OK"), out
