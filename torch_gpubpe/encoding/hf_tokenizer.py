"""``Tokenizer.as_hf()``: a ``transformers.PreTrainedTokenizerFast`` whose text → ids step runs
on the GPU, for code that expects Hugging Face's tokenizer (``Trainer``,
``DataCollatorWithPadding``, ``datasets.map(tok, batched=True)``).

Its Hugging Face backend is the same vocabulary (the model's own ``tokenizer.json`` when the
tokenizer was loaded from one, else this vocab exported with its split), so everything but
the encoding — ``decode``, ``batch_decode``, ``pad``, ``convert_*``, special-token attributes,
``save_pretrained`` — is transformers' own. A call transformers answers with features the GPU
path does not compute (text pairs, pre-split words, overflowing tokens or a stride, offsets,
special-token masks, token type ids) is encoded by that backend, with the same ids: counted in
``stats["hf_backend_calls"]`` and said once.
"""

from __future__ import annotations

import functools

from torch_gpubpe.errors import InputError
from torch_gpubpe.notices import warn_once


def backend_json(tok) -> str:
    """The ``tokenizer.json`` text of the Hugging Face backend of ``tok``.

    Raises:
        InputError: a split no ``tokenizer.json`` expresses here (named).
    """
    from torch_gpubpe.core.export import hf_tokenizer_json

    if tok.hf_source is not None:
        with open(tok.hf_source, encoding="utf-8") as f:
            return f.read()
    return hf_tokenizer_json(tok.saved_vocab())


def as_hf(tok):
    """``tok`` as a ``transformers.PreTrainedTokenizerFast`` (module docs).

    Raises:
        InputError: transformers 5 or later is not installed, or the split has no
            ``tokenizer.json``.
    """
    try:
        import transformers
    except ImportError as e:
        raise InputError("as_hf() needs transformers (pip install 'transformers>=5')") from e
    if int(transformers.__version__.split(".")[0]) < 5:  # (4.x encodes batches elsewhere)
        raise InputError(f"as_hf() needs transformers 5 or later (installed: "
                         f"{transformers.__version__}); pip install -U transformers")
    return _fast_class()(tok)


@functools.cache
def _fast_class():
    import tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.tokenization_utils_base import BatchEncoding, TruncationStrategy

    from torch_gpubpe.core.export import hf_tokenizer_config
    from torch_gpubpe.encoding.hf_files import hf_config_beside

    class GPUTokenizerFast(PreTrainedTokenizerFast):
        """A ``PreTrainedTokenizerFast`` encoding on the GPU (``Tokenizer.as_hf()``)."""

        def __init__(self, tok) -> None:
            cfg = hf_tokenizer_config(tok.vocab)
            names = {k: cfg[k] for k in ("eos_token", "pad_token") if k in cfg}
            if tok.pad_token_id is not None and "pad_token" not in names:
                names["pad_token"] = tok.vocab.id_to_bytes(tok.pad_token_id).decode(
                    "utf-8", "replace")
            # the model's own settings (its context length, sides, chat template) as
            # transformers would load them beside its tokenizer.json
            settings = {"clean_up_tokenization_spaces": False, "padding_side": tok.padding_side,
                        "truncation_side": tok.truncation_side, **names,
                        **hf_config_beside(tok.hf_source)}
            super().__init__(tokenizer_object=tokenizers.Tokenizer.from_str(backend_json(tok)),
                             **settings)
            self.gpu_tokenizer = tok
            self.stats = {"gpu_calls": 0, "hf_backend_calls": 0}

        def _encode_plus(self, text, text_pair=None, add_special_tokens=True,
                         padding_strategy=None, truncation_strategy=None, max_length=None,
                         stride=0, is_split_into_words=False, pad_to_multiple_of=None,
                         padding_side=None, return_tensors=None, return_token_type_ids=None,
                         return_attention_mask=None, return_overflowing_tokens=False,
                         return_special_tokens_mask=False, return_offsets_mapping=False,
                         return_length=False, verbose=True, split_special_tokens=None,
                         **kwargs):
            args = dict(text=text, text_pair=text_pair, add_special_tokens=add_special_tokens,
                        padding_strategy=padding_strategy,
                        truncation_strategy=truncation_strategy, max_length=max_length,
                        stride=stride, is_split_into_words=is_split_into_words,
                        pad_to_multiple_of=pad_to_multiple_of, padding_side=padding_side,
                        return_tensors=return_tensors,
                        return_token_type_ids=return_token_type_ids,
                        return_attention_mask=return_attention_mask,
                        return_overflowing_tokens=return_overflowing_tokens,
                        return_special_tokens_mask=return_special_tokens_mask,
                        return_offsets_mapping=return_offsets_mapping,
                        return_length=return_length, verbose=verbose,
                        split_special_tokens=split_special_tokens, **kwargs)
            single = isinstance(text, str)
            texts = [text] if single else text
            why = _backend_reason(args, self.gpu_tokenizer)
            if why is None and not (isinstance(texts, (list, tuple))
                                    and all(isinstance(t, str) for t in texts)):
                why = "input other than str or a list of str"
            if why is not None:
                self.stats["hf_backend_calls"] += 1
                warn_once(f"as_hf: {why}", f"torch_gpubpe as_hf(): {why} is encoded by "
                          "Hugging Face's backend (the same vocab and ids; counted in "
                          "stats['hf_backend_calls'])")
                return super()._encode_plus(**args)
            self.stats["gpu_calls"] += 1
            gpu = self.gpu_tokenizer
            split = self.split_special_tokens if split_special_tokens is None \
                else split_special_tokens
            # split_special_tokens: the special ones are text; added tokens that are not
            # special are still matched (as transformers does)
            allowed = ({t.content for t in self.added_tokens_decoder.values()
                        if not t.special} if split else "all")
            enc = gpu.encode_batch(texts, allowed_special=allowed)
            pre, post = gpu.template if add_special_tokens else ((), ())
            rows = []
            truncate = truncation_strategy not in (None, TruncationStrategy.DO_NOT_TRUNCATE)
            room = None
            if truncate and max_length is not None and max_length >= len(pre) + len(post):
                room = max_length - len(pre) - len(post)   # (else transformers keeps all)
            for ids in enc.tolist():
                if room is not None and len(ids) > room:
                    ids = ids[:room] if self.truncation_side == "right" else ids[len(ids) - room:]
                rows.append([*pre, *ids, *post])
            padded = self.pad({"input_ids": rows}, padding=padding_strategy,
                              max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                              padding_side=padding_side,
                              return_attention_mask=return_attention_mask)
            if return_length:  # (transformers' length counts the padding)
                padded["length"] = [len(r) for r in padded["input_ids"]]
            if return_tensors is not None:
                padded = BatchEncoding(dict(padded), tensor_type=return_tensors)
            elif single:  # (as transformers: rows unwrapped, per-row numbers kept a list)
                for k in list(padded):
                    if padded[k] and isinstance(padded[k][0], list):
                        padded[k] = padded[k][0]
            return padded

    return GPUTokenizerFast


def _backend_reason(args: dict, tok) -> str | None:
    """Why a call goes to Hugging Face's backend (module docs), or None."""
    if args["text_pair"] is not None:
        return "a text pair"
    if args["is_split_into_words"]:
        return "pre-split words (is_split_into_words)"
    if args["return_overflowing_tokens"] or args["stride"]:
        return "overflowing tokens or a stride"
    if args["return_offsets_mapping"]:
        return "return_offsets_mapping"
    if args["return_special_tokens_mask"]:
        return "return_special_tokens_mask"
    if args["return_token_type_ids"]:
        return "return_token_type_ids"
    if str(getattr(args["truncation_strategy"], "value", "")) == "only_second":
        return "truncation='only_second'"
    if args.get("sanitize_control_tokens"):
        return "a chat template's control tokens"
    if args["add_special_tokens"] and tok.template is None:
        return "a post-processor torch_gpubpe does not read"
    return None
