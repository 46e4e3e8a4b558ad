"""``tok(text, padding=..., truncation=..., return_tensors=...)``: the call Hugging Face users
type, with ``transformers``' results (``input_ids``, ``attention_mask``), padded and truncated
in one vectorised step over the flat ids of a batch (no Python loop per row).

The special tokens ``add_special_tokens`` puts around each text are the model's: the
``post_processor`` of its ``tokenizer.json`` (:func:`template_of`).
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.errors import InputError, VocabFormatError

PADDING = (False, True, "longest", "max_length", "do_not_pad")


def template_of(post_processor: object, token_id) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(prefix ids, suffix ids)`` a ``tokenizer.json`` post-processor puts around one text
    (``TemplateProcessing``'s ``single``, ``RobertaProcessing``, ``BertProcessing``,
    ``ByteLevel`` (none), a ``Sequence`` of them), or None for one this module does not read.
    ``token_id``: spelling → id."""
    if post_processor is None:
        return (), ()
    if not isinstance(post_processor, dict):
        return None
    kind = post_processor.get("type")
    if kind == "ByteLevel":
        return (), ()
    if kind in ("RobertaProcessing", "BertProcessing"):
        cls, sep = post_processor.get("cls"), post_processor.get("sep")
        try:
            return (int(cls[1]),), (int(sep[1]),)
        except (TypeError, IndexError, ValueError):
            return None
    if kind == "Sequence":
        pre, post = [], []
        for p in post_processor.get("processors") or []:
            t = template_of(p, token_id)
            if t is None:
                return None
            pre += t[0]
            post = list(t[1]) + post
        return tuple(pre), tuple(post)
    if kind == "TemplateProcessing":
        pre, post, seen = [], [], False
        table = post_processor.get("special_tokens") or {}
        for item in post_processor.get("single") or []:
            if "Sequence" in item:
                seen = True
            elif "SpecialToken" in item:
                key = item["SpecialToken"].get("id")
                # the ids its table gives the key (what tokenizers puts in), else its spelling's
                listed = table.get(key, {}).get("ids") if isinstance(table, dict) else None
                if isinstance(listed, list) and listed and all(
                        isinstance(i, int) for i in listed):
                    tids = listed
                elif (tid := token_id(key)) is not None:
                    tids = [tid]
                else:
                    return None
                (post if seen else pre).extend(tids)
            else:
                return None
        return (tuple(pre), tuple(post)) if seen else None
    return None


class CallEncoding(dict):
    """What :func:`encode_call` returns: a ``dict`` with ``transformers``' ``BatchEncoding``
    access, the keys as attributes (``enc.input_ids``) and :meth:`to` (tensors to a device)."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def data(self) -> dict:
        return dict(self)

    def to(self, device) -> CallEncoding:
        """Each tensor moved to ``device`` (``return_tensors="pt"``); returns ``self``."""
        for key, v in self.items():
            if hasattr(v, "to"):
                self[key] = v.to(device)
        return self


def encode_call(tok, text, *, add_special_tokens: bool = True, padding=False,
                truncation=None, max_length: int | None = None,
                pad_to_multiple_of: int | None = None, padding_side: str | None = None,
                return_tensors: str | None = None, return_attention_mask: bool | None = None,
                return_length: bool = False, return_offsets_mapping: bool = False
                ) -> CallEncoding:
    """:meth:`Tokenizer.__call__` (arguments, defaults and results as ``transformers``'
    ``PreTrainedTokenizerFast.__call__`` for one text or a list of texts): ``truncation=None``
    truncates to ``max_length`` when not padding; ``padding="max_length"`` pads shorter rows
    and leaves longer ones (rows of different lengths: lists, no tensor); ``padding_side=None``
    and truncation take ``tok.padding_side`` / ``tok.truncation_side`` (a ``tokenizer.json``'s
    directions); ``length`` counts the padding.

    ``return_offsets_mapping``: each token's span (characters of a ``str``, bytes of a
    ``bytes`` text; ``(0, 0)`` for the template's ids and the padding) from the GPU's token
    boundaries (:func:`torch_gpubpe.encoding.offsets.offsets_mapping`).

    Raises:
        InputError: ``text`` neither a text nor a list/tuple of texts, an argument out of range,
            padding asked for without a pad token (``tok.pad_token_id``), ``add_special_tokens``
            with a post-processor not read, or offsets of a vocab with a normalizer.
    """
    single = isinstance(text, (str, bytes))
    if not single and not isinstance(text, (list, tuple)):
        raise InputError(f"text must be a str or a list/tuple of str (as transformers takes), "
                         f"got {type(text).__name__}")
    texts = [text] if single else list(text)
    if padding not in PADDING:
        raise InputError(f"padding must be one of {PADDING}, got {padding!r}")
    if padding == "max_length" and max_length is None:
        raise InputError("padding='max_length' needs max_length")
    pad = padding not in (False, "do_not_pad")
    if truncation is None:   # (transformers: max_length alone truncates unless padding)
        truncation = max_length is not None and not pad
    if truncation not in (False, True, "longest_first", "only_first", "do_not_truncate"):
        raise InputError(f"truncation={truncation!r} is not supported (one text per row)")
    truncate = truncation not in (False, "do_not_truncate")
    if truncate and max_length is None:
        raise InputError("truncation needs max_length (this tokenizer has no model maximum)")
    padding_side = tok.padding_side if padding_side is None else padding_side
    for name, side in (("padding_side", padding_side), ("truncation_side", tok.truncation_side)):
        if side not in ("right", "left"):
            raise InputError(f"{name} must be 'right' or 'left', got {side!r}")
    if return_tensors not in (None, "np", "pt"):
        raise InputError(f"return_tensors must be None, 'np' or 'pt', got {return_tensors!r}")
    if truncate and pad and pad_to_multiple_of and max_length % pad_to_multiple_of:
        raise InputError(f"truncation length ({max_length}) is not a multiple of "
                         f"pad_to_multiple_of ({pad_to_multiple_of})")
    if pad and tok.pad_token_id is None:
        raise InputError("padding needs a pad token: set tok.pad_token_id (e.g. the EOS id, "
                         "as GPT-2 users do) or pass padding=False")
    pre, post = (), ()
    if add_special_tokens:
        if tok.template is None:
            raise InputError("add_special_tokens=True: this tokenizer's post-processor is not "
                             "one torch_gpubpe reads; pass add_special_tokens=False")
        pre, post = tok.template
    enc = tok.encode_batch(texts, allowed_special="all")   # (HF matches added tokens)
    ids, offsets = enc.ids.astype(np.int64), enc.offsets
    body = np.diff(offsets)
    extra = len(pre) + len(post)
    keep, skip = body, np.zeros_like(body)   # tokens kept of each text, dropped at its head
    if truncate:
        if max_length < extra:
            raise InputError(f"max_length={max_length} leaves no room beside the "
                             f"{extra} special tokens")
        keep = np.minimum(body, max_length - extra)
        if tok.truncation_side == "left":
            skip = body - keep
    lengths = keep + extra
    rows = len(texts)
    target = lengths   # each row's length after padding (transformers pads row by row)
    if pad and rows:
        width = int(max_length) if padding == "max_length" else int(lengths.max())
        if pad_to_multiple_of:
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        target = np.maximum(lengths, width)
    ragged = rows > 1 and int(target.min()) != int(target.max())
    if return_tensors is not None and ragged:
        raise InputError("rows of different lengths cannot be one tensor: pass padding=True"
                         + (" or truncation=True" if pad else ""))
    width = int(target.max()) if rows else 0
    out = np.full((rows, width), tok.pad_token_id if pad else 0, np.int64)
    mask = np.zeros((rows, width), np.int64)
    # every kept token's (row, column) at once
    start = target - lengths if padding_side == "left" else np.zeros(rows, np.int64)
    r = np.repeat(np.arange(rows), keep)
    k = np.arange(int(keep.sum())) - np.repeat(np.cumsum(keep) - keep, keep)
    src = np.repeat(offsets[:-1] + skip, keep) + k
    out[r, start[r] + len(pre) + k] = ids[src]
    for j, t in enumerate(pre):
        out[np.arange(rows), start + j] = t
    for j, t in enumerate(post):
        out[np.arange(rows), start + len(pre) + keep + j] = t
    cols = np.arange(width)
    mask[(cols >= start[:, None]) & (cols < (start + lengths)[:, None])] = 1
    result = {"input_ids": out}
    if return_attention_mask is not False:
        result["attention_mask"] = mask
    if return_offsets_mapping:
        from torch_gpubpe.encoding.offsets import offsets_mapping

        spans = np.concatenate([np.zeros((0, 2), np.int64), *offsets_mapping(
            tok, texts, enc, trim_offsets=tok.trim_offsets, prefix_space=tok.prefix_space)])
        om = np.zeros((rows, width, 2), np.int64)
        om[r, start[r] + len(pre) + k] = spans[src]
        result["offset_mapping"] = om
    if return_tensors == "np":
        if return_length:
            result["length"] = target
        return CallEncoding(result)
    if return_tensors == "pt":
        import torch

        if return_length:
            result["length"] = target
        return CallEncoding({key: torch.from_numpy(v) for key, v in result.items()})
    listed = {key: [[tuple(x) for x in row[:n]] if key == "offset_mapping" else row[:n]
                    for row, n in zip(v.tolist(), target.tolist())]
              for key, v in result.items()}
    if single:
        listed = {key: v[0] for key, v in listed.items()}
    if return_length:   # (a list for one text too, as transformers returns it)
        listed["length"] = target.tolist()
    return CallEncoding(listed)


def token_lookup(vocab):
    """Spelling → id for :func:`template_of` (a special token's, or an ordinary token's
    text), None where no token is spelled so."""
    def find(s: object):
        try:
            return vocab.token_to_id(s) if isinstance(s, str) else None
        except KeyError:
            return None
    return find


class HFCompat:
    """What users of ``transformers`` and tiktoken reach for on a tokenizer (a mixin of
    :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer`): the call, ``len``, ``repr``,
    ``save_pretrained`` / ``from_pretrained``, :meth:`as_hf` and :meth:`as_tiktoken`."""

    padding_side = truncation_side = "right"   # (transformers' defaults; a file's own)

    def __call__(self, text, **kwargs) -> CallEncoding:
        """``transformers``' call: ``tok(texts, padding=, truncation=, max_length=,
        return_tensors=, add_special_tokens=, ...)`` → ``{"input_ids", "attention_mask"}``
        (:func:`encode_call`)."""
        return encode_call(self, text, **kwargs)

    def as_hf(self):
        """This tokenizer as a ``transformers.PreTrainedTokenizerFast`` encoding on the GPU
        (:func:`torch_gpubpe.encoding.hf_tokenizer.as_hf`)."""
        from torch_gpubpe.encoding.hf_tokenizer import as_hf

        return as_hf(self)

    def as_tiktoken(self, name: str = "torch_gpubpe"):
        """``tiktoken.Encoding``'s methods and defaults on this tokenizer
        (:class:`~torch_gpubpe.encoding.tiktoken_compat.TiktokenEncoding`)."""
        from torch_gpubpe.encoding.tiktoken_compat import TiktokenEncoding

        return TiktokenEncoding(self, name)

    def __len__(self) -> int:  # (every id, added tokens included, as transformers' len())
        return self.n_vocab

    @property
    def vocab_size(self) -> int:
        """The ordinary tokens, added ones not counted (``transformers``' ``vocab_size``)."""
        return self.vocab.num_ordinary_tokens

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n_vocab={self.n_vocab:,}, mode={self.mode!r}, "
                f"pre_tokenizer={self.pre_tokenizer!r}, special_tokens="
                f"{len(self.vocab.special_tokens)})")

    def save_pretrained(self, save_directory) -> tuple[str, ...]:
        """Write this tokenizer into ``save_directory`` so that :meth:`from_pretrained` (and
        ``transformers.AutoTokenizer``) of it gives the same ids; the paths written, as
        ``transformers`` returns.

        A model's ``tokenizer.json`` read with its own split (:meth:`from_hf`) is written as it
        was read (its normalizer, post-processor and added tokens kept), with the
        ``tokenizer_config.json`` beside it (or one made from the vocab), as ``transformers``
        does. Any other tokenizer is exported in every format
        (:func:`torch_gpubpe.core.export.export_all`: ``vocab.json``, ``tokenizer.json`` +
        ``tokenizer_config.json``, ``tokenizer.tiktoken`` + sidecar) with the split it encodes
        with recorded (:meth:`saved_vocab`).

        Raises:
            InputError: a split or normalizer those formats cannot record (named).
        """
        import json
        import os
        import shutil
        from pathlib import Path

        from torch_gpubpe.core.export import (HF_CONFIG_FILE, HF_TOKENIZER_FILE, export_all,
                                              hf_tokenizer_config)

        if self.hf_source is not None:
            out = Path(save_directory)
            out.mkdir(parents=True, exist_ok=True)
            source = Path(self.hf_source)
            # the model's tokenizer_config.json and chat template go with its tokenizer.json
            # where they lie beside one so named (another name's folder may hold another
            # model's); else a config made from the vocab
            beside = source.name == HF_TOKENIZER_FILE
            written = []
            for name in (HF_TOKENIZER_FILE, HF_CONFIG_FILE, "chat_template.jinja"):
                src = source if name == HF_TOKENIZER_FILE else source.with_name(name)
                dst = out / name
                if name != HF_TOKENIZER_FILE and not (beside and src.is_file()):
                    if name == HF_CONFIG_FILE:
                        dst.write_text(json.dumps(hf_tokenizer_config(self.vocab), indent=2)
                                       + "\n", encoding="utf-8")
                        written.append(str(dst))
                    continue
                if not (dst.exists() and os.path.samefile(src, dst)):
                    shutil.copyfile(src, dst)
                written.append(str(dst))
            return tuple(written)
        return tuple(str(p) for p in export_all(self.saved_vocab(), save_directory).values())

    def saved_vocab(self):
        """:attr:`vocab` with the split this tokenizer encodes with recorded
        (:attr:`~torch_gpubpe.core.vocab.Vocab.pre_tokenizer`), as its exports need it: a model's
        vocab loaded from a tiktoken file or a ``tokenizer.json`` does not record its split.

        Raises:
            InputError: a split or normalizer the exported formats cannot record.
        """
        import dataclasses

        from torch_gpubpe.core.vocab import TRAINED_SPLITS

        vocab, split = self.vocab, self.pre_tokenizer
        if vocab.normalizer is not None:
            raise InputError(f"this tokenizer normalizes text ({vocab.normalizer}) before its "
                             "split, which the exported files cannot record; load the model's "
                             "own tokenizer.json (Tokenizer.from_hf) instead")
        if split == (vocab.pre_tokenizer or "bytes-classes"):
            return vocab
        if split not in TRAINED_SPLITS:
            raise InputError(f"this tokenizer splits with {split!r}, which the exported files "
                             f"cannot record (they name one of {', '.join(TRAINED_SPLITS)}, or "
                             "this project's byte classes); load the model's own tokenizer.json "
                             "(Tokenizer.from_hf) instead")
        return dataclasses.replace(vocab, pre_tokenizer=split)

    @classmethod
    def from_pretrained(cls, name_or_path, **kwargs):
        """A tokenizer from a folder (its ``vocab.json`` if this project's, else
        ``tokenizer.json``, else ``tokenizer.model``, else one ``*.tiktoken``), a file (a
        ``tokenizer.json`` by any name read as :meth:`from_hf`), or a Hugging Face Hub model name
        (its ``tokenizer.json``, else ``tokenizer.model``, through ``huggingface_hub``).
        ``kwargs`` go to the constructor.

        Raises:
            InputError: nothing loadable there (names what was looked for), or the Hub did not
                answer (names the model and the reason).
        """
        import glob
        import os

        from torch_gpubpe.encoding.hf_files import is_hf_tokenizer_json

        def load(path: str):   # (a tokenizer.json: its post-processor and padding too)
            if os.path.basename(path) == "tokenizer.json" or is_hf_tokenizer_json(path):
                return cls.from_hf(path, **kwargs)
            return cls(path, **kwargs)

        p = str(name_or_path)
        if os.path.isfile(p):
            return load(p)
        if os.path.isdir(p):
            for name in ("vocab.json", "tokenizer.json", "tokenizer.model"):
                path = os.path.join(p, name)
                if not os.path.isfile(path):
                    continue
                if name == "vocab.json" and os.path.isfile(os.path.join(p, "tokenizer.json")):
                    try:   # (a Hub snapshot's vocab.json is the model's, beside its
                        return load(path)   # tokenizer.json: that one is read then)
                    except VocabFormatError:
                        continue
                return load(path)
            found = sorted(glob.glob(os.path.join(p, "*.tiktoken")))
            if len(found) == 1:
                return load(found[0])
            raise InputError(f"{p}: no vocab.json, tokenizer.json, tokenizer.model or one "
                             "*.tiktoken file in this folder")
        try:
            from huggingface_hub import hf_hub_download
        except ImportError as e:
            raise InputError(f"{p!r} is no file or folder here, and reading it from the Hub "
                             "needs huggingface_hub (pip install huggingface_hub)") from e
        errors = []
        for name in ("tokenizer.json", "tokenizer.model"):
            try:
                return load(hf_hub_download(p, name))
            except InputError:
                raise
            except Exception as e:  # noqa: BLE001 - the Hub's errors, named below
                errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        raise InputError(f"{p!r} is no file or folder here, and the Hugging Face Hub gave "
                         f"neither file ({'; '.join(errors)})")
