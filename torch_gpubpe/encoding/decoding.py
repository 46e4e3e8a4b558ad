"""Token ids back to bytes and text: the decoding half of
:class:`~torch_gpubpe.encoding.tokenizer.Tokenizer` (:class:`TokenDecoding`, tiktoken's method
names), on the host; ids may be lists, numpy arrays or torch tensors (duck-typed: torch is not
imported here). :class:`DecodeStream` decodes ids as they come (generation), one character at a
time once its UTF-8 is complete.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable

import numpy as np

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.errors import InputError


class TokenDecoding:
    """Decoding of a :class:`~torch_gpubpe.core.vocab.Vocab`'s ids (a base of ``Tokenizer``);
    :meth:`_init_decoding` sets it up."""

    # ids of special tokens that are text to Hugging Face (added tokens not marked special)
    plain_added_ids: frozenset[int] = frozenset()

    vocab: Vocab

    def _init_decoding(self, vocab: Vocab) -> None:
        tb = vocab.token_bytes
        self._tok_len = np.fromiter(map(len, tb), np.int64, len(tb))  # bytes of each token id
        self._flat_bytes: np.ndarray | None = None

    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """Bytes spelled by ``ids`` (special ids give their spelling).

        Args:
            ids: a list (or any iterable) of ints, a 1-D integer ``numpy`` array, or a 1-D
                integer ``torch`` tensor (on any device; copied to the host).
        Raises:
            ValueError: an id outside ``[0, n_vocab)``, naming the id and its position.
            TypeError: an id that is not an integer (float, bool, str), naming its position.
            InputError: an array or tensor that is not 1-D (use :meth:`decode_batch`).
        """
        ids = as_id_array(ids)
        if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
            if len(ids) == 0:
                return b""
            a = ids.astype(np.int64)
            if a.min() >= 0 and a.max() < self.vocab.num_ordinary_tokens:
                if self._flat_bytes is None:
                    self._flat_bytes = np.frombuffer(b"".join(self.vocab.token_bytes), np.uint8)
                    self._tok_start = np.cumsum(self._tok_len) - self._tok_len
                lens = self._tok_len[a]
                ends = np.cumsum(lens)
                idx = np.arange(ends[-1]) - np.repeat(ends - lens - self._tok_start[a], lens)
                return self._flat_bytes[idx].tobytes()
        return self.vocab.decode_bytes(ids)

    def decode(self, ids: Iterable[int] | np.ndarray, errors: str = "replace") -> str:
        """:meth:`decode_bytes` as text (invalid UTF-8 → U+FFFD unless ``errors`` says else;
        SentencePiece's ``▁`` as spaces, :meth:`Vocab.undo_normalizer`). ``ids`` as in
        :meth:`decode_bytes` (list, numpy array or torch tensor)."""
        return self.vocab.undo_normalizer(self.decode_bytes(ids).decode("utf-8", errors=errors))

    def decode_batch(self, batch, errors: str = "replace") -> list[str]:
        """:meth:`decode` of each sequence of ``batch`` (tiktoken's ``decode_batch``): a
        :class:`BatchEncoding`, a list of id lists, or a 2-D array/tensor (one row per text;
        padding ids are decoded too: slice them off first)."""
        return [self.vocab.undo_normalizer(b.decode("utf-8", errors=errors))
                for b in self.decode_bytes_batch(batch)]

    def decode_bytes_batch(self, batch) -> list[bytes]:
        """:meth:`decode_bytes` of each sequence of ``batch`` (as in :meth:`decode_batch`)."""
        if not isinstance(batch, BatchEncoding):
            batch = as_id_array(batch, ndim=2)
        return [self.decode_bytes(row) for row in batch]

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one id (a special id gives its spelling; tiktoken's name).

        Raises:
            ValueError: ``token`` is outside ``[0, n_vocab)`` (tiktoken raises KeyError).
            TypeError: ``token`` is not an integer.
        """
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"a token id must be an integer, got {type(token).__name__}")
        return self.vocab.id_to_bytes(int(token))

    def decode_tokens_bytes(self, tokens: Iterable[int]) -> list[bytes]:
        """The bytes of each id (tiktoken's ``decode_tokens_bytes``)."""
        return [self.decode_single_token_bytes(t) for t in as_id_array(tokens)]

    def decode_stream(self, *, skip_special_tokens: bool = False) -> DecodeStream:
        """A :class:`DecodeStream` of this tokenizer's vocab (ids fed one or a few at a time)."""
        return DecodeStream(self.vocab, skip_special_tokens=skip_special_tokens,
                            not_special=self.plain_added_ids)


class DecodeStream:
    """Token ids → text as they arrive, each piece whole characters (Hugging Face's
    ``tokenizers.decoders.DecodeStream``).

    A byte-level token can hold part of a character's UTF-8 (``🙂`` is 2 GPT-2 tokens), so
    ``decode([i])`` per id gives U+FFFD; this keeps the incomplete tail of the bytes until the
    ids that complete it come. The pieces ``step`` returns, joined with :meth:`finish`, are
    exactly ``vocab.decode(ids)``: invalid UTF-8 becomes U+FFFD as with ``errors="replace"``
    (at once where no later byte can make it valid; an incomplete tail at :meth:`finish`).
    For a lossless stream use bytes instead: ``vocab.id_to_bytes(i)`` (the Tokenizer's
    ``decode_single_token_bytes``) per id, which concatenate to ``decode_bytes(ids)``.

    >>> from torch_gpubpe import Vocab
    >>> stream = DecodeStream(Vocab.from_merges([]))
    >>> [stream.step(b) for b in "é!".encode()], stream.finish()
    ([None, 'é', '!'], '')

    Args:
        vocab: the :class:`~torch_gpubpe.core.vocab.Vocab` the ids belong to.
        skip_special_tokens: drop special ids (else they give their spelling).
        not_special: ids of the vocab's special tokens kept all the same (a ``tokenizer.json``'s
            added tokens marked ``"special": false``, which Hugging Face never skips).
    """

    def __init__(self, vocab: Vocab, *, skip_special_tokens: bool = False,
                 not_special: Iterable[int] = ()) -> None:
        self.vocab = vocab
        self.skip_special_tokens = skip_special_tokens
        self._special = frozenset(vocab.special_token_ids.values()) - frozenset(not_special)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._at_start = True  # a "metaspace-prepend" vocab drops the text's first space

    def step(self, ids: int | Iterable[int] | np.ndarray) -> str | None:
        """Feed one id (an int, or a 0-D array or tensor) or several (a list, 1-D array or
        tensor); returns the text they complete, or ``None`` while there is none yet.

        Raises:
            ValueError: an id outside ``[0, n_vocab)`` (naming it); the stream is unchanged.
            TypeError: an id that is not an integer, naming its position.
        """
        if getattr(ids, "ndim", None) == 0:  # a numpy or torch scalar, as argmax gives
            ids = ids.item()
        if not isinstance(ids, Iterable) or isinstance(ids, (str, bytes)):
            ids = (ids,)
        parts = []
        for pos, i in enumerate(as_id_array(ids)):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"token ids must be integers; got {type(i).__name__} {i!r} at "
                                f"position {pos}")
            if not (self.skip_special_tokens and int(i) in self._special):
                parts.append(self.vocab.id_to_bytes(int(i)))
        return self._text(self._utf8.decode(b"".join(parts))) or None

    def finish(self) -> str:
        """The text still held (an incomplete character at the end as U+FFFD, as ``decode``);
        the stream then starts a new sequence."""
        text = self._text(self._utf8.decode(b"", final=True))
        self._at_start = True
        return text

    def _text(self, text: str) -> str:
        if not text:
            return text
        # The vocab's own rule (SentencePiece's ▁ as spaces), applied to the whole text's start
        # only: later pieces get a character before them, which the rule then leaves alone.
        if self._at_start:
            self._at_start = False
            return self.vocab.undo_normalizer(text)
        return self.vocab.undo_normalizer("x" + text)[1:]


def as_id_array(ids, ndim: int = 1):
    """``ids`` as a numpy array when it is an array or a tensor (duck-typed: torch is not
    imported here), else unchanged (an iterable of ints, checked by the caller).

    Raises:
        InputError: an array or tensor with other than ``ndim`` dimensions.
    """
    if not isinstance(ids, np.ndarray):
        if hasattr(ids, "detach") and hasattr(ids, "numpy"):  # a torch.Tensor, on any device
            ids = ids.detach().cpu().numpy()
        elif hasattr(ids, "__array__") and not isinstance(ids, (list, tuple)):
            ids = np.asarray(ids)
        else:
            return ids
    if ids.ndim != ndim:
        hint = "; use decode_batch for a batch" if ids.ndim == 2 and ndim == 1 else ""
        raise InputError(f"expected a {ndim}-D sequence of token ids, got an array of shape "
                         f"{tuple(ids.shape)}{hint}")
    return ids
