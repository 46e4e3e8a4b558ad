"""``tok(text, padding=..., truncation=..., return_tensors=...)`` gives what ``transformers``'
``PreTrainedTokenizerFast`` gives on the same ``tokenizer.json``."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from conftest import corpus_docs, shared_vocab
from torch_gpubpe import InputError
from torch_gpubpe.core.export import hf_tokenizer_json
from torch_gpubpe.core.vocab_files import load_tiktoken
from torch_gpubpe.encoding.tokenizer import Tokenizer

pytestmark = pytest.mark.gpu
EOT = "<|endoftext|>"


def gpt2_json(tmp_path, post_processor) -> str:
    """GPT-2's ranks as a tokenizer.json with its own split and ``post_processor``."""
    v = load_tiktoken(shared_vocab("gpt2.tiktoken"), special_tokens={EOT: 50256})
    d = json.loads(hf_tokenizer_json(v))
    d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True}
    d["post_processor"] = post_processor
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    return str(p)


def template(single):
    return {"type": "TemplateProcessing", "single": single, "pair": single + single,
            "special_tokens": {EOT: {"id": EOT, "ids": [50256], "tokens": [EOT]}}}


BOS = [{"SpecialToken": {"id": EOT, "type_id": 0}}]
SEQ = [{"Sequence": {"id": "A", "type_id": 0}}]
POSTS = {"none": None, "bos": template(BOS + SEQ), "bos_eos": template(BOS + SEQ + BOS),
         "byte_level": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": True},
         # a key whose table lists two ids: tokenizers puts in the ids, not the key's spelling
         "listed_ids": {**template(BOS + SEQ), "special_tokens": {
             EOT: {"id": EOT, "ids": [50256, 50256], "tokens": [EOT, EOT]}}}}


@pytest.fixture(scope="module", params=sorted(POSTS))
def pair(request, tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    path = gpt2_json(tmp_path_factory.mktemp(request.param), POSTS[request.param])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = PreTrainedTokenizerFast(tokenizer_file=path, pad_token=EOT)
    tok = Tokenizer.from_hf(path)
    tok.pad_token_id = 50256
    return tok, hf


TEXTS = corpus_docs("code_cpython_stdlib", max_bytes=6_000)[:6] + [
    "Hello world", "", "a<|endoftext|>b", "short", "x " * 40]
CALLS = [
    {}, {"add_special_tokens": False}, {"padding": True}, {"padding": "longest"},
    {"padding": "max_length", "max_length": 64, "truncation": True},
    {"padding": True, "truncation": True, "max_length": 12},
    {"truncation": True, "max_length": 5}, {"padding": True, "pad_to_multiple_of": 8},
    {"padding": True, "return_tensors": "np"}, {"padding": True, "return_tensors": "pt"},
    {"padding": True, "padding_side": "left"}, {"padding": True, "return_attention_mask": False},
    {"return_offsets_mapping": True},
    {"padding": True, "padding_side": "left", "return_offsets_mapping": True},
    {"truncation": True, "max_length": 5, "return_offsets_mapping": True},
    {"padding": True, "return_tensors": "pt", "return_offsets_mapping": True},
    # transformers' defaults and per-row padding
    {"padding": "max_length", "max_length": 3}, {"max_length": 4},
    {"padding": True, "return_length": True}, {"return_length": True},
    {"padding": True, "pad_to_multiple_of": 8, "return_length": True, "return_tensors": "np"},
    {"return_attention_mask": None}, {"padding": True, "padding_side": None},
    {"truncation": None, "max_length": 4}, {"padding": True, "truncation": None, "max_length": 4},
]


@pytest.mark.parametrize("kw", CALLS, ids=[json.dumps(c) for c in CALLS])
def test_call_equals_transformers(pair, kw):
    tok, hf = pair
    for text in (TEXTS, TEXTS[7]):
        if "return_tensors" in kw and isinstance(text, str):
            continue
        want = hf(text, **kw)
        got = tok(text, **kw)
        assert set(got) == set(want.keys()), (set(got), set(want.keys()))
        for key in got:
            g, w = got[key], want[key]
            if kw.get("return_tensors") == "pt":
                assert g.dtype == w.dtype and g.tolist() == w.tolist(), key
            elif kw.get("return_tensors") == "np":
                assert np.array_equal(g, w), key
            else:
                assert g == w, key


def test_padding_needs_a_pad_token(pair):
    tok, _ = pair
    was, tok.pad_token_id = tok.pad_token_id, None
    try:
        with pytest.raises(InputError, match="pad token"):
            tok(["a", "bb"], padding=True)
    finally:
        tok.pad_token_id = was


@pytest.mark.parametrize("kw, match", [
    ({"padding": "sideways"}, "padding"), ({"padding": "max_length"}, "max_length"),
    ({"truncation": True}, "max_length"), ({"return_tensors": "tf"}, "return_tensors"),
    ({"return_tensors": "np"}, "padding=True"), ({"padding_side": "up"}, "padding_side"),
    ({"padding": "max_length", "max_length": 1, "return_tensors": "np"}, "truncation=True"),
    ({"padding": True, "truncation": True, "max_length": 5, "pad_to_multiple_of": 3},
     r"truncation length \(5\) is not a multiple of pad_to_multiple_of \(3\)"),
])
def test_bad_arguments_are_named(pair, kw, match):
    tok, _ = pair
    with pytest.raises(InputError, match=match):
        tok(["a", "bb b"], **kw)


@pytest.mark.parametrize("text", [{"text": ["a"], "label": [1]}, {"a", "b"}, None, 5,
                                  (t for t in ["a"])])
def test_a_batch_is_a_list_or_tuple_as_transformers_takes(pair, text):
    tok, hf = pair
    with pytest.raises(ValueError):
        hf(text)
    with pytest.raises(InputError, match="str or a list/tuple of str"):
        tok(text)


def test_sides_set_on_the_tokenizer_or_in_its_file(pair, tmp_path):
    tok, hf = pair
    texts = ["a b c d e f", "a"]
    try:
        tok.padding_side = hf.padding_side = "left"
        tok.truncation_side = hf.truncation_side = "left"
        kw = {"padding": True, "truncation": True, "max_length": 4}
        assert tok(texts, **kw) == dict(hf(texts, **kw))
    finally:
        tok.padding_side = hf.padding_side = tok.truncation_side = hf.truncation_side = "right"
    from transformers import PreTrainedTokenizerFast

    d = json.loads(open(gpt2_json(tmp_path, None), encoding="utf-8").read())
    d["padding"] = {"direction": "Left", "pad_id": 50256, "pad_token": EOT, "pad_type_id": 0,
                    "strategy": "BatchLongest", "pad_to_multiple_of": None}
    d["truncation"] = {"direction": "Left", "max_length": 512, "strategy": "LongestFirst",
                       "stride": 0}
    (tmp_path / "sides.json").write_text(json.dumps(d), encoding="utf-8")
    mine = Tokenizer.from_hf(tmp_path / "sides.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "sides.json"))
    assert (mine.padding_side, mine.truncation_side) == ("left", "left")
    kw = {"padding": True, "truncation": True, "max_length": 3}
    assert mine(texts, **kw) == dict(theirs(texts, **kw))


def test_the_result_answers_as_a_batch_encoding(pair):
    tok, hf = pair
    got, want = tok(["a b", "c"], padding=True, return_tensors="pt"), hf(["a b", "c"],
                                                                          padding=True,
                                                                          return_tensors="pt")
    assert got.input_ids.tolist() == want.input_ids.tolist()
    assert got.to("cpu") is got and got.attention_mask.device.type == "cpu"
    assert got.data.keys() == got.keys()
    with pytest.raises(AttributeError):
        got.no_such_key


def test_batch_encoding_answers_transformers_keys(pair):
    tok, hf = pair
    enc = tok.encode_batch(["a b", "", "hello"])
    want = hf(["a b", "", "hello"], add_special_tokens=False)
    assert dict(zip(enc.keys(), (enc[k] for k in enc.keys()))) == dict(want)
    assert enc[0].tolist() == want["input_ids"][0]
    with pytest.raises(KeyError, match="input_ids"):
        enc["token_type_ids"]


def test_len_and_repr(pair):
    tok, hf = pair
    assert len(tok) == len(hf) == 50257 and tok.vocab_size == hf.vocab_size
    assert "n_vocab=50,257" in repr(tok) and "gpt2" in repr(tok)


def test_save_pretrained_and_from_pretrained(tmp_path, monkeypatch):
    """A trained vocab round-trips through save_pretrained / from_pretrained (its folder, its
    files), its split kept; a folder with only a tokenizer.json loads it with its
    post-processor; a Hub name that cannot be reached is named."""
    import os

    from torch_gpubpe import train

    docs = corpus_docs("code_cpython_stdlib", max_bytes=20_000)
    tok = Tokenizer(train(docs, 600, pre_tokenizer="gpt2", special_tokens=[EOT]))
    written = tok.save_pretrained(tmp_path / "saved")
    assert {os.path.basename(p) for p in written} >= {"vocab.json", "tokenizer.json"}
    want = tok.encode_batch(docs).tolist()
    for src in (tmp_path / "saved", tmp_path / "saved" / "vocab.json"):
        back = Tokenizer.from_pretrained(src)
        assert back.pre_tokenizer == "gpt2" and back.encode_batch(docs).tolist() == want
    only = tmp_path / "only"
    only.mkdir()
    path = gpt2_json(only, template(BOS + SEQ))
    assert Tokenizer.from_pretrained(only)("hi")["input_ids"][0] == 50256
    assert Tokenizer.from_pretrained(path).template == ((50256,), ())
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no vocab.json"):
        Tokenizer.from_pretrained(tmp_path / "empty")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # (no network here: the Hub's error is named)
    with pytest.raises(InputError, match="no-such-org/no-such-model"):
        Tokenizer.from_pretrained("no-such-org/no-such-model")


def test_save_pretrained_keeps_a_model_tokenizers_ids(tmp_path):
    """A model's tokenizer loaded from its tiktoken file or its tokenizer.json (neither records
    the split in the vocab) saves files that give its ids back: here, in HF tokenizers and in
    tiktoken; a tokenizer.json read with its own split is written as it was read."""
    import filecmp
    import os

    import tiktoken
    import tokenizers
    from tiktoken.load import load_tiktoken_bpe

    docs = TEXTS + corpus_docs("multi_udhr", max_bytes=8_000)
    from_file = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="gpt2")
    want = from_file.encode_batch(docs).tolist()
    assert from_file.vocab.pre_tokenizer is None  # (what the files must make up for)
    saved = tmp_path / "tiktoken"
    from_file.save_pretrained(saved)
    back = Tokenizer.from_pretrained(saved)
    assert back.pre_tokenizer == "gpt2" and back.encode_batch(docs).tolist() == want
    hf = tokenizers.Tokenizer.from_file(str(saved / "tokenizer.json"))
    plain = [k for k, d in enumerate(docs) if EOT not in d]  # (HF matches added tokens in text)
    got = hf.encode_batch([docs[k] for k in plain], add_special_tokens=False)
    assert [e.ids for e in got] == [want[k] for k in plain]
    side = json.loads((saved / "tokenizer.tiktoken.json").read_text())
    enc = tiktoken.Encoding("saved", pat_str=side["pattern"], special_tokens={},
                            mergeable_ranks=load_tiktoken_bpe(str(saved / "tokenizer.tiktoken")))
    assert [enc.encode_ordinary(d) for d in docs] == want

    source = gpt2_json(tmp_path, template(BOS + SEQ))
    model = Tokenizer.from_hf(source)
    written = model.save_pretrained(tmp_path / "hf")
    assert {os.path.basename(p) for p in written} == {"tokenizer.json", "tokenizer_config.json"}
    assert filecmp.cmp(source, tmp_path / "hf" / "tokenizer.json", shallow=False)
    back = Tokenizer.from_pretrained(tmp_path / "hf")
    assert back.encode_batch(docs).tolist() == want and back.template == model.template
    # the model's own tokenizer_config.json goes with it; saving into its own folder keeps both
    config = '{"chat_template": "{{ messages }}", "model_max_length": 8192}'
    (tmp_path / "tokenizer_config.json").write_text(config, encoding="utf-8")
    Tokenizer.from_hf(source).save_pretrained(tmp_path / "hf2")
    assert (tmp_path / "hf2" / "tokenizer_config.json").read_text(encoding="utf-8") == config
    Tokenizer.from_hf(source).save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer_config.json").read_text(encoding="utf-8") == config
    assert filecmp.cmp(tmp_path / "hf" / "tokenizer.json", source, shallow=False)


def test_save_pretrained_refuses_a_split_its_files_cannot_record(tmp_path):
    tok = Tokenizer.from_tiktoken(shared_vocab("gpt2.tiktoken"), pattern="deepseek-llm")
    with pytest.raises(InputError, match="'deepseek-llm', which the exported files cannot"):
        tok.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_offsets_keep_an_added_prefix_space_as_transformers(tmp_path):
    """A ``ByteLevel`` post-processor with ``trim_offsets`` and ``add_prefix_space``: the first
    token keeps its one leading space (RoBERTa's rule), others are trimmed."""
    from transformers import PreTrainedTokenizerFast

    path = gpt2_json(tmp_path, {"type": "ByteLevel", "add_prefix_space": True,
                                "trim_offsets": True, "use_regex": True})
    hf = PreTrainedTokenizerFast(tokenizer_file=path)
    tok = Tokenizer.from_hf(path)
    texts = [" hello world", "  two  spaces ", "x  y", " ", ""]
    want = hf(texts, return_offsets_mapping=True)["offset_mapping"]
    assert tok(texts, return_offsets_mapping=True)["offset_mapping"] == want


def test_model_files_by_any_name_and_hub_snapshots(tmp_path):
    """A ``tokenizer.json`` by another name loads (from_pretrained) and saves (save_pretrained)
    as the model's own; a Hub snapshot's ``vocab.json`` (the model's, not this project's)
    leaves the folder to its ``tokenizer.json``; the model's config and chat template go with
    it, and ``as_hf`` applies them as transformers does."""
    import shutil

    from transformers import AutoTokenizer

    named = tmp_path / "bos.json"
    shutil.copyfile(gpt2_json(tmp_path, template(BOS + SEQ)), named)
    tok = Tokenizer.from_pretrained(named)
    assert tok.template == ((50256,), ()) and tok("hi")["input_ids"][0] == 50256
    tok.save_pretrained(tmp_path / "saved")
    assert Tokenizer.from_pretrained(tmp_path / "saved")("hi") == tok("hi")
    snap = tmp_path / "snapshot"
    snap.mkdir()
    shutil.copyfile(named, snap / "tokenizer.json")
    (snap / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}), encoding="utf-8")
    (snap / "tokenizer_config.json").write_text(json.dumps(
        {"model_max_length": 16, "padding_side": "left", "pad_token": EOT}), encoding="utf-8")
    (snap / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    tok = Tokenizer.from_pretrained(snap)
    assert tok.template == ((50256,), ())
    mine, theirs = tok.as_hf(), AutoTokenizer.from_pretrained(snap)
    long = "a " * 100
    assert mine(long, truncation=True)["input_ids"] == theirs(long, truncation=True)["input_ids"]
    assert len(mine(long, truncation=True)["input_ids"]) == 16
    assert (mine.padding_side, mine.chat_template) == ("left", theirs.chat_template)
    written = {p.split("/")[-1] for p in tok.save_pretrained(tmp_path / "again")}
    assert written == {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}


def test_decode_stream_skips_only_the_special_added_tokens(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.decoders import DecodeStream as HFDecodeStream

    d = json.loads(open(gpt2_json(tmp_path, None), encoding="utf-8").read())
    d["added_tokens"].append({"id": 50257, "content": "<think>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": False})
    (tmp_path / "think.json").write_text(json.dumps(d), encoding="utf-8")
    hf, tok = HFTokenizer.from_file(str(tmp_path / "think.json")), Tokenizer.from_hf(
        tmp_path / "think.json")
    ids = hf.encode("<think>hi<|endoftext|>").ids
    assert tok("<think>hi<|endoftext|>")["input_ids"] == ids
    stream, theirs = tok.decode_stream(skip_special_tokens=True), HFDecodeStream(skip_special_tokens=True)
    got = "".join(stream.step(i) or "" for i in ids) + stream.finish()
    assert got == "".join(theirs.step(hf, i) or "" for i in ids) == "<think>hi"
