"""Token ids back to bytes and text: the decoding half of
:class:`~torch_gpubpe.encoding.tokenizer.Tokenizer` (:class:`TokenDecoding`, tiktoken's method
names), on the host; ids may be lists, numpy arrays or torch tensors (duck-typed: torch is not
imported here).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.errors import InputError


class TokenDecoding:
    """Decoding of a :class:`~torch_gpubpe.core.vocab.Vocab`'s ids (a base of ``Tokenizer``);
    :meth:`_init_decoding` sets it up."""

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
        """:meth:`decode_bytes` as text (invalid UTF-8 → U+FFFD unless ``errors`` says else).
        ``ids`` as in :meth:`decode_bytes` (list, numpy array or torch tensor)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_batch(self, batch, errors: str = "replace") -> list[str]:
        """:meth:`decode` of each sequence of ``batch`` (tiktoken's ``decode_batch``): a
        :class:`BatchEncoding`, a list of id lists, or a 2-D array/tensor (one row per text;
        padding ids are decoded too: slice them off first)."""
        return [b.decode("utf-8", errors=errors) for b in self.decode_bytes_batch(batch)]

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
