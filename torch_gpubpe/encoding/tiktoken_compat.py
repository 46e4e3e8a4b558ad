"""``tok.as_tiktoken()``: an object with ``tiktoken.Encoding``'s methods and defaults (a text
that spells a special token raises unless allowed, ``encode_batch`` gives lists of lists), over
the GPU tokenizer: code written for tiktoken runs on it unchanged.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

import numpy as np

AllOr = Literal["all"] | Collection[str]


class TiktokenEncoding:
    """``tiktoken.Encoding``'s interface on a :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer`
    (ids are the tokenizer's: tiktoken's own for a merge-order vocab with its split).

    Attributes:
        name, n_vocab, max_token_value, eot_token, special_tokens_set: as tiktoken's.
    """

    def __init__(self, tok, name: str = "torch_gpubpe") -> None:
        self._tok = tok
        self.name = name
        self.n_vocab = tok.n_vocab
        self.max_token_value = tok.n_vocab - 1
        self.special_tokens_set = set(tok.vocab.special_tokens)

    @property
    def eot_token(self) -> int:
        """Id of ``<|endoftext|>``; ``KeyError`` where the vocab has none (read when asked
        for, as tiktoken's: a vocab without it is still an encoding)."""
        return self._tok.eot_token

    def __repr__(self) -> str:
        return f"<TiktokenEncoding {self.name!r} over {self._tok!r}>"

    def encode(self, text: str, *, allowed_special: AllOr = frozenset(),
               disallowed_special: AllOr = "all") -> list[int]:
        """tiktoken's ``encode``: a spelling of a special token not allowed raises
        ``ValueError`` (the default: all of them)."""
        return self._tok.encode(text, allowed_special=_arg(allowed_special),
                                disallowed_special=_arg(disallowed_special))

    def encode_ordinary(self, text: str) -> list[int]:
        return self._tok.encode_ordinary(text)

    def encode_to_numpy(self, text: str, *, allowed_special: AllOr = frozenset(),
                        disallowed_special: AllOr = "all") -> np.ndarray:
        return self._tok.encode_to_numpy(text, allowed_special=_arg(allowed_special),
                                         disallowed_special=_arg(disallowed_special))

    def encode_batch(self, text: Sequence[str], *, num_threads: int = 8,
                     allowed_special: AllOr = frozenset(),
                     disallowed_special: AllOr = "all") -> list[list[int]]:
        """tiktoken's ``encode_batch`` (``num_threads`` is accepted and unused: the GPU)."""
        return self._tok.encode_batch(list(text), allowed_special=_arg(allowed_special),
                                      disallowed_special=_arg(disallowed_special)).tolist()

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8
                              ) -> list[list[int]]:
        return self._tok.encode_ordinary_batch(list(text)).tolist()

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of one token's spelling (a special token's, or an ordinary token's bytes);
        ``KeyError`` if none, as tiktoken."""
        return self._tok.vocab.token_to_id(text_or_bytes)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self._tok.decode_single_token_bytes(int(t)) for t in tokens)

    def decode_batch(self, batch: Sequence[Sequence[int]], *, errors: str = "replace",
                     num_threads: int = 8) -> list[str]:
        return [self.decode(t, errors=errors) for t in batch]

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8
                           ) -> list[bytes]:
        return [self.decode_bytes(t) for t in batch]

    def decode_single_token_bytes(self, token: int) -> bytes:
        return self._tok.decode_single_token_bytes(int(token))

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        return [self.decode_single_token_bytes(t) for t in tokens]

    def token_byte_values(self) -> list[bytes]:
        """The ordinary tokens' bytes, sorted (tiktoken's)."""
        return sorted(set(self._tok.vocab.token_bytes[: self._tok.vocab.num_tokens]))


def _arg(x: AllOr):
    """tiktoken's ``"all"`` or a collection → this tokenizer's argument."""
    return "all" if x == "all" else tuple(x)
