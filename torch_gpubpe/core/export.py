"""Export a :class:`~torch_gpubpe.core.vocab.Vocab` to Hugging Face ``tokenizer.json`` and tiktoken.

Hugging Face (``tokenizers`` / ``transformers``) — exact
    This project encodes by greedy longest match within words (DESIGN.md §4). In ``tokenizers``
    that is the ``WordPiece`` model with an empty continuing-subword prefix: per word it takes
    the longest vocab entry that is a prefix of the rest of the word, then continues after it.
    The pipeline written to ``tokenizer.json``:

    * no normalizer;
    * pre-tokenizer ``Sequence[Split(SPLIT_PATTERN, "isolated"), ByteLevel(add_prefix_space=False,
      use_regex=False)]``: the DESIGN.md §2 words, then each byte as its GPT-2
      ``bytes_to_unicode`` character, so vocab entries are byte strings in that alphabet;
    * model ``WordPiece(continuing_subword_prefix="", max_input_chars_per_word=10**15)`` (the
      default limit of 100 characters would turn longer words into the unknown token);
    * decoder ``ByteLevel``; no post-processor (no BOS/EOS is added);
    * special tokens as ``added_tokens`` with the vocab's ids (``special=True``).

    ``tokenizers.Tokenizer.from_file(path).encode(text).ids`` then equals this project's ids for
    every text that does not contain a special token's spelling. Special spellings in text:
    this project encodes them as text (DESIGN.md §1), Hugging Face by default as the special
    id. ``tokenizer_config.json`` therefore sets ``"split_special_tokens": true``, so that
    ``transformers.AutoTokenizer.from_pretrained(folder)`` (and
    ``PreTrainedTokenizerFast.from_pretrained(folder)``) give this project's ids on every text
    out of the box. ``tokenizer.json`` has no such field: with ``tokenizers`` alone set
    ``tok.encode_special_tokens = True``; with ``PreTrainedTokenizerFast(tokenizer_file=...)``
    pass ``split_special_tokens=True``. When two ids spell
    the same bytes, the smallest id is the one encoded (as in ``reference.encode``); the others
    are kept in the file under a placeholder name that can never match text (``"\\u2400dup…"``),
    so the id space stays dense. ``tokenizers``' WordPiece rescans a word for every token it
    emits: words of many thousand characters (long runs of spaces) are slow there, not wrong.
    A ``str`` with lone surrogates is refused by ``tokenizers`` (``TypeError``), while this
    project encodes them as U+FFFD (DESIGN.md §1); ``reference.to_bytes(text).decode()`` gives
    ``tokenizers`` the same text.

    Merge-order vocabs (``vocab.mode == "bpe"``) get a real ``BPE`` model instead:
    ``vocab`` (byte-level string → id) and ``merges`` — for every token that BPE can produce,
    in rank order, the pair that merge-order BPE of its bytes merges last
    (:func:`torch_gpubpe.core.bpe_tables.bpe_tables`' ``split``); ``ignore_merges=True`` (a whole word that
    is a token is taken at once, as tiktoken does); no unknown token, no dropout. Then
    ``tokenizers`` gives exactly the GPU's ``mode="bpe"`` ids (tested on corpora and random
    text), with the same special-token caveat as above.

tiktoken
    :func:`save_tiktoken` writes the ``.tiktoken`` format (``base64(token bytes) rank`` per
    line) and :func:`tiktoken_encoding` builds a ``tiktoken.Encoding`` with the §2 pattern.
    tiktoken applies merge-order BPE (lowest rank first): exact for ``mode="bpe"`` vocabs
    (ids identical to the GPU's), not for greedy longest match, whose ids can differ on some
    words; ``decode`` gives the same text back either way.

Example::

    >>> from torch_gpubpe import Vocab
    >>> from torch_gpubpe.core.export import hf_tokenizer_json
    >>> import tokenizers
    >>> v = Vocab(merges=((104, 105),), special_tokens=("<|endoftext|>",))
    >>> tok = tokenizers.Tokenizer.from_str(hf_tokenizer_json(v))
    >>> tok.encode("hi hii").ids
    [256, 32, 256, 105]
"""

from __future__ import annotations

import json
import os
from binascii import b2a_base64
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate, chain
from pathlib import Path

from torch_gpubpe.core.vocab import SPLIT_PATTERN, SPLIT_PATTERN_PY, Vocab

VOCAB_FILE = "vocab.json"
HF_TOKENIZER_FILE = "tokenizer.json"
HF_CONFIG_FILE = "tokenizer_config.json"
TIKTOKEN_FILE = "tokenizer.tiktoken"

MAX_INPUT_CHARS_PER_WORD = 10**15
UNK_TOKEN = "<|gpubpe-unk|>"
"""Name of WordPiece's unknown token. It is never produced: all 256 bytes are in the vocab and
words have no length limit; it is not in the vocab."""
_DUP_PREFIX = "\u2400dup"  # U+2400 is not in the byte-level alphabet: never matches text


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character map (``tokenizers``' ``ByteLevel`` alphabet).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100, U+0101, ... in
    byte order. Returns a dict of 256 entries.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def _byte_level_translation() -> dict[int, str]:
    return {b: c for b, c in bytes_to_unicode().items() if chr(b) != c}


def byte_level_string(token: bytes) -> str:
    """A token's bytes written in the byte-level alphabet (``b" the"`` → ``"Ġthe"``)."""
    return token.decode("latin-1").translate(_byte_level_translation())


def byte_level_strings(tokens: Sequence[bytes]) -> list[str]:
    """:func:`byte_level_string` of every token: one translation of all of them joined (a
    per-token join over its bytes took most of an export's time for a 65k vocab)."""
    text = b"".join(tokens).decode("latin-1").translate(_byte_level_translation())
    ends = list(accumulate(map(len, tokens)))
    return [text[a:b] for a, b in zip(chain((0,), ends), ends)]


def hf_vocab(vocab: Vocab) -> dict[str, int]:
    """WordPiece vocab: byte-level string → id for the ``vocab.num_tokens`` ordinary tokens.

    A spelling shared by several ids maps to the smallest; the larger ids get a placeholder
    name that cannot match text (module docstring).
    """
    out: dict[str, int] = {}
    for i, s in enumerate(byte_level_strings(vocab.token_bytes)):
        if s in out:
            s = f"{_DUP_PREFIX}{i}of{out[s]}"
        out[s] = i
    return out


def hf_tokenizer_dict(vocab: Vocab) -> dict:
    """The ``tokenizer.json`` content (see the module docstring) as a JSON-ready dict.

    Raises:
        ValueError: a special token is spelled like an ordinary token of the vocab (e.g. a
            special ``"hi"`` and a merged ``"hi"``): ``tokenizers`` would give both the same id.
    """
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    model_vocab = hf_vocab(vocab)
    if vocab.mode == "bpe":
        model = hf_bpe_model(vocab, model_vocab)
    else:
        model = {
            "type": "WordPiece",
            "unk_token": UNK_TOKEN,
            "continuing_subword_prefix": "",
            "max_input_chars_per_word": MAX_INPUT_CHARS_PER_WORD,
            "vocab": model_vocab,
        }
    for s, tid in vocab.special_token_ids.items():
        if tid >= vocab.num_tokens and (byte_level_string(s.encode()) in model_vocab
                                        or s in model_vocab):
            raise ValueError(
                f"special token {s!r} (id {tid}) is spelled like an ordinary token of the vocab; "
                f"a Hugging Face tokenizer.json cannot hold both: rename the special token"
            )
    added = [
        {"id": tid, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for s, tid in vocab.special_token_ids.items()
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split_pattern(vocab, hf=True)},
                 "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": None,
        "decoder": dict(byte_level),
        "model": model,
    }


def hf_bpe_model(vocab: Vocab, model_vocab: dict[str, int] | None = None) -> dict:
    """The ``BPE`` model of a merge-order vocab: vocab + merges in rank order (module
    docstring). Raises ``ValueError`` if merge-order mode does not support the vocab."""
    from torch_gpubpe.core.bpe_tables import bpe_tables

    t = bpe_tables(vocab)
    if model_vocab is None:
        model_vocab = hf_vocab(vocab)
    names = {i: s for s, i in model_vocab.items()}
    toks = vocab.token_bytes
    order = sorted(range(len(toks)), key=lambda i: int(t.rank[i]))
    skip = set(t.unreachable)
    merges = [[names[int(t.split[i, 0])], names[int(t.split[i, 1])]] for i in order
              if len(toks[i]) > 1 and i not in skip]
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": True, "vocab": model_vocab, "merges": merges}


def hf_tokenizer_json(vocab: Vocab) -> str:
    """``tokenizer.json`` as a string, for ``tokenizers.Tokenizer.from_str``."""
    return json.dumps(hf_tokenizer_dict(vocab), ensure_ascii=False)


def save_hf_tokenizer(vocab: Vocab, path: str | os.PathLike) -> Path:
    """Write ``tokenizer.json`` (load it with ``tokenizers.Tokenizer.from_file(path)`` or
    ``transformers.PreTrainedTokenizerFast(tokenizer_file=path)``). ``path`` may be an existing
    folder: the file is then ``path/tokenizer.json``. Returns the path written.

    Raises:
        ValueError: the vocab cannot be expressed (a special token spelled like a token).
        OSError: the file cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        path = path / HF_TOKENIZER_FILE
    path.write_text(hf_tokenizer_json(vocab) + "\n", encoding="utf-8")
    return path


def hf_tokenizer_config(vocab: Vocab) -> dict:
    """``tokenizer_config.json`` for ``transformers.AutoTokenizer.from_pretrained(dir)``.

    ``<|endoftext|>``, when among the special tokens, is declared as ``eos_token``, and a
    padding token (``<|pad|>``, ``<pad>``, ``[PAD]``) as ``pad_token``;
    ``clean_up_tokenization_spaces`` is off (it would change decoded text such as ``" ."``).
    Text that spells a special token gives its id, as GPT-2's Hugging Face tokenizer does (and
    ``Tokenizer.encode(..., allowed_special="all")`` and ``tok(...)`` here).
    """
    cfg: dict = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    if "<|endoftext|>" in vocab.special_tokens:
        cfg["eos_token"] = "<|endoftext|>"
    pads = [s for s in ("<|pad|>", "<pad>", "[PAD]") if s in vocab.special_tokens]
    if pads:
        cfg["pad_token"] = pads[0]
    return cfg


def split_pattern(vocab: Vocab, hf: bool = False) -> str:
    """The ``pat_str`` of the vocab's split: its recorded family's
    (:data:`torch_gpubpe.core.patterns.PATTERN_OF`), else DESIGN.md §2's (spelled for Hugging
    Face's engine with ``hf``, else for ``regex`` / tiktoken)."""
    from torch_gpubpe.core.patterns import HF_PATTERN_OF, PATTERN_OF

    if vocab.pre_tokenizer:
        return (HF_PATTERN_OF if hf else PATTERN_OF)[vocab.pre_tokenizer]
    return SPLIT_PATTERN if hf else SPLIT_PATTERN_PY


def tiktoken_ranks(vocab: Vocab) -> dict[bytes, int]:
    """token bytes → id (tiktoken's "mergeable ranks"); for shared spellings the smallest id.

    Raises:
        ValueError: the vocab's merge ranks are not in id order (e.g. a Hugging Face vocab
            whose ids do not follow its merges): tiktoken's ranks are its ids.
    """
    if vocab.ranks is not None and list(vocab.ranks) != sorted(vocab.ranks):
        raise ValueError("this vocab's merge ranks are not in id order; a tiktoken file (rank = "
                         "id) would encode differently")
    ranks: dict[bytes, int] = {}
    for i, tb in enumerate(vocab.token_bytes):
        ranks.setdefault(tb, i)
    return ranks


def save_tiktoken(vocab: Vocab, path: str | os.PathLike) -> Path:
    """Write the tiktoken BPE file: one ``base64(token bytes) id`` line per ordinary token, in id
    order (special tokens are not part of this format; pass them to ``tiktoken.Encoding``, as
    :func:`tiktoken_encoding` does). Readable by ``tiktoken.load.load_tiktoken_bpe``.

    Caveat: tiktoken applies merge-order BPE, not this project's greedy longest match (module
    docstring). ``path`` may be an existing folder (then ``path/tokenizer.tiktoken``)."""
    path = Path(path)
    if path.is_dir():
        path = path / TIKTOKEN_FILE
    ranks = tiktoken_ranks(vocab).items()
    lines = [b"%b %d\n" % (b2a_base64(tb, newline=False), i) for tb, i in ranks]
    path.write_bytes(b"".join(lines))
    # the sidecar Tokenizer.from_tiktoken reads: the split and the special tokens
    Path(str(path) + ".json").write_text(json.dumps(
        {"pattern": split_pattern(vocab), "special_tokens": vocab.special_token_ids},
        ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def tiktoken_encoding(vocab: Vocab, name: str = "torch_gpubpe"):
    """A ``tiktoken.Encoding`` over this vocab: ``pat_str`` = its split (:func:`split_pattern`),
    special tokens with their ids. Needs ``pip install tiktoken``.

    Its ids may differ from this project's (merge-order BPE vs greedy longest match)."""
    import tiktoken

    return tiktoken.Encoding(
        name=name,
        pat_str=split_pattern(vocab),
        mergeable_ranks=tiktoken_ranks(vocab),
        special_tokens=vocab.special_token_ids,
    )


def export_all(vocab: Vocab, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write every format into ``out_dir`` (created if missing).

    Files: ``vocab.json`` (:meth:`Vocab.save`, the project's own format), ``tokenizer.json`` and
    ``tokenizer_config.json`` (Hugging Face), ``tokenizer.tiktoken`` (tiktoken) and its sidecar
    ``tokenizer.tiktoken.json`` (the split's ``pat_str``, the special tokens).

    Returns:
        format name (``"vocab"``, ``"hf"``, ``"hf_config"``, ``"tiktoken"``,
        ``"tiktoken_sidecar"``) → path written.
    Raises:
        OSError: ``out_dir`` cannot be created or written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"vocab": out / VOCAB_FILE, "hf": out / HF_TOKENIZER_FILE,
             "hf_config": out / HF_CONFIG_FILE, "tiktoken": out / TIKTOKEN_FILE}
    vocab.save(paths["vocab"])
    save_hf_tokenizer(vocab, paths["hf"])
    paths["hf_config"].write_text(json.dumps(hf_tokenizer_config(vocab), indent=2) + "\n",
                                  encoding="utf-8")
    save_tiktoken(vocab, paths["tiktoken"])
    paths["tiktoken_sidecar"] = Path(str(paths["tiktoken"]) + ".json")
    return paths
