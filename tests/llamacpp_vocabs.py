"""llama.cpp's tokenizer test set as Hugging Face ``tokenizer.json`` files (test support).

llama.cpp ships, for each of ~15 vocabularies, ``models/ggml-vocab-<name>.gguf`` (the tokens,
merges and pre-tokenizer name) with ``.gguf.inp`` (test strings) and ``.gguf.out`` (Hugging Face
tokenizers' ids of each, no special tokens added). They are inside the ``llama-cpp-python``
source distribution on PyPI (``vendor/llama.cpp/models``); ``.ci/run`` unpacks them and points
``TORCH_GPUBPE_LLAMACPP_MODELS`` at the folder. Their licences are the models' own, so they are
not copied into this repository.

:func:`tokenizer_json` rebuilds the ``tokenizer.json`` of a byte-level BPE vocabulary from its
``.gguf`` with the pre-tokenizer its model ships (``PRE_TOKENIZERS``), and of a SentencePiece
BPE one (Llama 2's form: merges from the pieces' scores, as transformers' converter makes them);
the tests check that Hugging Face tokenizers reproduces every ``.out`` line with it before
anything is compared with it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TORCH_GPUBPE_LLAMACPP_MODELS"
SEP = "\n__ggml_vocab_test__\n"

# The byte-level BPE vocabularies of the set (gguf model "gpt2") and the SentencePiece ones
# (gguf model "llama"), by the name in their file name.
BPE_NAMES = ("gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder", "falcon",
             "starcoder", "refact", "mpt", "command-r")
SPM_NAMES = ("llama-spm", "phi-3", "gemma-4")

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
          r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# (the code points llama.cpp's copy of this class lost to NFC are written as escapes)
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+")
CJK = "[一-龥ࠀ-一가-퟿]+"


def _split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def _byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def _seq(*steps: dict) -> dict:
    return {"type": "Sequence", "pretokenizers": list(steps)}


DIGITS = {"type": "Digits", "individual_digits": True}
PRE_TOKENIZERS = {
    "gpt-2": _byte_level(True),
    "mpt": _byte_level(True),
    "llama-bpe": _seq(_split(LLAMA3), _byte_level(False)),
    "qwen2": _seq(_split(QWEN2), _byte_level(False)),
    "qwen35": _seq(_split(QWEN35), _byte_level(False)),
    "deepseek-llm": _seq(_split("[\r\n]"), _split(DEEPSEEK_LETTERS),
                         _split("\\s?[!-/:-~！-／：-～‘-‟　-。]+"), _split("\\s+$"), _split(CJK),
                         DIGITS, _byte_level(False)),
    "deepseek-coder": _seq(_split("[\r\n]"), _split("\\s?\\p{L}+"), _split("\\s?\\p{P}+"),
                           _split(CJK), DIGITS, _byte_level(False)),
    "falcon": _seq({"type": "Punctuation", "behavior": "Contiguous"}, _byte_level(True),
                   {"type": "Digits", "individual_digits": False},
                   _split("[0-9][0-9][0-9]")),
    "starcoder": _seq(DIGITS, _byte_level(True)),
    "refact": _seq(DIGITS, _byte_level(True)),
    "command-r": _seq(DIGITS, _byte_level(True)),
}
NORMALIZERS = {"command-r": {"type": "NFC"}}
IGNORE_MERGES = {"llama-bpe"}


def models_dir() -> Path | None:
    """The folder of ``ggml-vocab-*.gguf`` files (``$TORCH_GPUBPE_LLAMACPP_MODELS``), or None."""
    env = os.environ.get(ENV)
    if not env:
        return None
    p = Path(env)
    if not any(p.glob("ggml-vocab-*.gguf")):
        raise RuntimeError(f"{ENV}={env!r} holds no ggml-vocab-*.gguf files")
    return p


def cases(name: str) -> list[tuple[str, list[int]]]:
    """The test strings of vocabulary ``name`` and Hugging Face's ids of each."""
    d = models_dir()
    texts = (d / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split(SEP)
    outs = (d / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    pairs = [(t, [int(x) for x in o.split()]) for t, o in zip(texts, outs)]
    return pairs[:-1] if pairs and pairs[-1] == ("", []) else pairs


def _fields(name: str) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(models_dir() / f"ggml-vocab-{name}.gguf"))
    return {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.ggml.")}


def spm_tokenizer_json(name: str) -> dict:
    """The ``tokenizer.json`` object of a SentencePiece BPE vocabulary (gguf model "llama"):
    the legacy form transformers writes for Llama 2 (Prepend + Replace normalizer, no
    pre-tokenizer, byte fallback), merges of every two pieces that make a piece, by score."""
    f = _fields(name)
    toks, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for piece, score in zip(toks, f.get("tokenizer.ggml.scores") or []):
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: m[2], reverse=True)
    merges = [[a, b] for a, b, _ in merges]
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    if "tokenizer.ggml.merges" in f:  # Gemma: its own merges, no ▁ before the text
        merges = [m.split(" ") for m in f["tokenizer.ggml.merges"]]
        normalizer = normalizer["normalizers"][1]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, kind) in enumerate(zip(toks, types)) if kind in (2, 3, 4)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def tokenizer_json(name: str) -> dict:
    """The ``tokenizer.json`` object of vocabulary ``name`` (:data:`BPE_NAMES`,
    :data:`SPM_NAMES`)."""
    f = _fields(name)
    if f["tokenizer.ggml.model"] in ("llama", "gemma4"):
        return spm_tokenizer_json(name)
    if f["tokenizer.ggml.model"] != "gpt2":
        raise ValueError(f"{name} is neither byte-level BPE nor SentencePiece BPE")
    tokens, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    vocab, added = {}, []
    # Control / user-defined tokens are Hugging Face added tokens; as in the models' files,
    # those among the ordinary ids are in model.vocab too, those after them only added.
    tail = max(i for i, kind in enumerate(types) if kind not in (3, 4)) + 1
    for i, (tok, kind) in enumerate(zip(tokens, types)):
        if kind in (3, 4):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": kind == 4, "special": kind == 3})
        if kind not in (3, 4) or i < tail:
            vocab.setdefault(tok, i)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": NORMALIZERS.get(name),
        "pre_tokenizer": PRE_TOKENIZERS[name],
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": name in IGNORE_MERGES, "vocab": vocab,
                  "merges": list(f["tokenizer.ggml.merges"])},
    }
