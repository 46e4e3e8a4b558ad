"""The public GPU encoder: :class:`Tokenizer` (greedy longest match, DESIGN.md §4, or exact
merge order), its flat batch result :class:`BatchEncoding` and :class:`PendingEncoding` (a batch
in flight). Encoding runs in a persistent GPU session opened on the first non-empty encode
(:mod:`torch_gpubpe.encoding.session`; its batch slots and the pipeline per slice:
:mod:`torch_gpubpe.encoding.slot`); batches above a slice are cut at word starts
(:mod:`torch_gpubpe.encoding.slicing`); special tokens are handled on the host
(:mod:`torch_gpubpe.encoding.specials`) or by ``wgsl/specials.wgsl`` while the ids are read back.


Example::

    >>> from torch_gpubpe import Vocab
    >>> from torch_gpubpe.core import reference
    >>> from torch_gpubpe.encoding.tokenizer import Tokenizer
    >>> merges = reference.train(["yakınlık ve yakınlık"], vocab_size=270, min_frequency=1)
    >>> tok = Tokenizer(Vocab.from_merges(merges))
    >>> ids = tok.encode("yakınlık ve")
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from torch_gpubpe.core.copy_pool import PARALLEL_COPY_MIN, parallel_copy
from torch_gpubpe.core.copy_pool import copy_parts, join_parts
from torch_gpubpe.core.trie import Trie, cached_trie
from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.encoding.batch import BatchEncoding
from torch_gpubpe.encoding import loaders
from torch_gpubpe.encoding.batch_pack import pack_batch
from torch_gpubpe.encoding.hf_call import HFCompat
from torch_gpubpe.encoding.normalizers import normalize_packed
from torch_gpubpe.encoding.walk_table import walk_table
from torch_gpubpe.encoding.decoding import TokenDecoding
from torch_gpubpe.encoding.layout import (DEFAULT_BUDGET, DEFAULT_CHUNK, DEFAULT_LONG_WORD,
                                          HOST_STEPS, MAX_CONTINUATIONS_PER_SUBMIT,
                                          GROUP_BYTES, MAX_LONG_TILE, MAX_SLICE_POSITIONS, NO_TOKEN,
                                          WG)
from torch_gpubpe.encoding.slicing import (concat_encodings, encode_in_groups, encode_sliced,
                                           group_bounds, text_groups)
from torch_gpubpe.encoding.slot import Slot, doc_offsets
from torch_gpubpe.encoding.specials import (EOT, SpecialSet, encode_with_specials,
                                            insert_special_tokens,
                                            special_sets)
from torch_gpubpe.encoding.stream import encode_groups, encode_stream
from torch_gpubpe.errors import GPUOperationError, InputError, UnsupportedVocabError
from torch_gpubpe.gpu.device import current_gpu
from torch_gpubpe.notices import warn_once

if TYPE_CHECKING:  # (annotations only; imported when a session opens)
    from torch_gpubpe.encoding.session import Session

# Names that tests, benchmarks and other packages import from this module (they moved to the
# modules above): kept importable from here.
__all__ = ["BatchEncoding", "DEFAULT_BUDGET", "DEFAULT_CHUNK", "DEFAULT_LONG_WORD",
           "EOT", "HOST_STEPS", "MAX_CONTINUATIONS_PER_SUBMIT", "MAX_LONG_TILE",
           "MAX_SLICE_POSITIONS", "PARALLEL_COPY_MIN", "PendingEncoding", "SpecialSet",
           "Tokenizer", "WG", "copy_parts", "insert_special_tokens", "join_parts",
           "parallel_copy"]
_pack = pack_batch   # (the old private name: tests and benchmarks import it from here)
_Slot = Slot


class PendingEncoding:
    """A batch submitted with :meth:`Tokenizer.submit`; :meth:`result` waits and reads back."""

    def __init__(self, tok: Tokenizer, specials: tuple[int, int] | None = None) -> None:
        self._tok = tok
        self._result: BatchEncoding | None = None
        self._slot: _Slot | None = None
        self._specials = specials
        self._readback_queued = False  # the slot's submit_readback ran (see Tokenizer)
        self._error: Exception | None = None  # raised by result(): its readback failed early

    def done(self) -> bool:
        """Whether the result has been read back already."""
        return self._result is not None

    def result(self) -> BatchEncoding:
        """Wait (bounded by ``TORCH_GPUBPE_TIMEOUT``) and return the :class:`BatchEncoding`.

        Raises:
            GPUOperationError: the GPU did not answer in time or a readback failed.
        """
        return self._result if self._result is not None else self._tok._complete(self)


class Tokenizer(TokenDecoding, HFCompat):
    """Greedy longest-match BPE encoder on the GPU, exact w.r.t. ``reference.encode``
    (DESIGN.md §4), with a persistent GPU session opened on the first encode.

    Args:
        vocab: the :class:`~torch_gpubpe.core.vocab.Vocab`, or the path of a ``vocab.json`` (or of
            the folder ``python -m torch_gpubpe train --out`` wrote). Special tokens are emitted
            only where :meth:`encode`'s ``allowed_special`` asks.
        chunk_bytes: bytes each GPU thread starts words in (multiple of 4, 4..1024).
        max_slice_bytes: cap on bytes per GPU pass (default: what the storage-binding limit
            allows, 1/4 of it); a batch above it is sliced at word starts.
        thread_budget: walk steps per GPU thread per dispatch (default 32,768; raised to the
            longest token + 2; merge-order mode counts a quarter of it, and by default 65,536
            steps on a GPU that is not a CPU adapter); a word that needs more continues in
            further dispatches with the same result. For tests.
        long_word_bytes: a word whose walk gets this many bytes past the walking thread's
            chunk (default 2,048; at least ``chunk_bytes``) is finished by the parallel
            long-word path (every byte's longest match at once, the token chain marked by
            pointer jumping: same ids). ``None`` walks every word with one thread (slow for
            MB-long words; for tests and comparisons).
        profile: record per-pass GPU times (µs) in :attr:`last_pass_us` (timestamp queries).
        pre_tokenizer: how text is split into words: ``"bytes-classes"`` (DESIGN.md §2) or a
            regex family of :mod:`torch_gpubpe.core.patterns` (``"gpt2"``, ``"cl100k"``, ...
            or their ``pat_str``), split exactly on the GPU; default: the vocab's
            (:attr:`Vocab.pre_tokenizer`, another is refused) or ``"bytes-classes"``.
        mode: ``"greedy"`` (longest match, DESIGN.md §4) or ``"bpe"`` (exact merge-order BPE,
            ids identical to tiktoken's ``encode_ordinary`` over the same words; the
            backtracking walk of ``wgsl/encode_bpe.wgsl``, tables in :mod:`torch_gpubpe.core.bpe_tables`);
            default: the vocab's ``mode`` (``"bpe"`` for tiktoken / Hugging Face vocabularies).
    Attributes:
        n_vocab: number of ids, special tokens included (tiktoken's ``n_vocab``; = ``len(vocab)``).
    Raises:
        ValueError: bad ``chunk_bytes``, ``thread_budget``, ``long_word_bytes`` or ``mode``,
            or a vocab that merge-order mode does not support
            (:func:`torch_gpubpe.core.bpe_tables.bpe_tables`).
        UnsupportedVocabError: in merge-order mode, a token longer than the GPU walk takes
            (:data:`~torch_gpubpe.core.bpe_tables.MAX_WALK_TOKEN_BYTES`).
        InputError: a ``pre_tokenizer`` the GPU cannot split exactly (named).
        VocabFormatError, OSError: ``vocab`` is a path that does not hold a vocab file.
    """

    # Extension hook: the GPU session class opened (None: encoding.session.Session); tests and
    # benchmarks name a subclass whose hooks build instrumented shaders.
    session_class: type | None = None

    def __init__(self, vocab: Vocab | str | os.PathLike, *, chunk_bytes: int = DEFAULT_CHUNK,
                 max_slice_bytes: int | None = None, thread_budget: int | None = None,
                 profile: bool = False, pre_tokenizer: str | None = None,
                 long_word_bytes: int | None = DEFAULT_LONG_WORD,
                 mode: str | None = None) -> None:

        if isinstance(vocab, (str, os.PathLike)):  # (a model's file: its own split)
            vocab, pre_tokenizer = Vocab.load(vocab), pre_tokenizer or loaders.implied_split(vocab)
        if not isinstance(vocab, Vocab):
            raise TypeError(f"vocab must be a torch_gpubpe.Vocab or the path of a vocab file, "
                            f"got {type(vocab).__name__}")
        if chunk_bytes % 4 or not 4 <= chunk_bytes <= 1024:
            raise ValueError(f"chunk_bytes must be a multiple of 4 in 4..1024, got {chunk_bytes}")
        budget = DEFAULT_BUDGET if thread_budget is None else int(thread_budget)
        if not 1 <= budget <= 65535 - chunk_bytes - 64:
            raise ValueError(f"thread_budget must be in 1..{65535 - chunk_bytes - 64} "
                             f"(lavapipe stops loops at 65,535 iterations), got {budget}")
        self.mode = vocab.mode if mode is None else mode
        if self.mode not in ("greedy", "bpe"):
            raise ValueError(f"mode must be 'greedy' or 'bpe', got {mode!r}")
        self.normalizer = vocab.normalizer
        walk_vocab, self._units = walk_table(vocab, self.mode)
        self._walk_vocab = walk_vocab
        self._bpe = None
        if self.mode == "bpe":
            from torch_gpubpe.core.bpe_tables import MAX_WALK_TOKEN_BYTES, bpe_tables

            longest = max(map(len, walk_vocab.token_bytes))
            if longest > MAX_WALK_TOKEN_BYTES:
                raise UnsupportedVocabError(
                    f"merge-order mode on the GPU takes tokens of at most "
                    f"{MAX_WALK_TOKEN_BYTES:,} bytes; this vocab has one of {longest:,} (greedy "
                    "mode and the exported tokenizer.json / tokenizer.tiktoken take it)")
            self._bpe = bpe_tables(walk_vocab)
        self.vocab = vocab
        self.n_vocab = len(vocab)
        # __call__: the ids put around each text (a tokenizer.json's post-processor; None: one
        # not read), and the id padding writes (None: padding refused, as in transformers)
        self.template: tuple | None = ((), ())
        self.pad_token_id: int | None = None
        self.hf_source: str | None = None  # a model's tokenizer.json read with its own split
        self.trim_offsets = self.prefix_space = False   # (its post-processor's offset rule)
        self.id_dtype = np.uint16 if len(walk_vocab) <= 1 << 16 else np.uint32
        self._chunk, self._max_slice, self._budget = chunk_bytes, max_slice_bytes, budget
        self._profile = profile
        self.pre_tokenizer = loaders.split_of(vocab, pre_tokenizer)
        # (the GPU's own split: the same ids, shorter words where the vocab allows it)
        self.gpu_split, note = loaders.gpu_split(vocab, self.pre_tokenizer)
        if note:
            warn_once(note)
        if long_word_bytes is not None and (not isinstance(long_word_bytes, int)
                                            or isinstance(long_word_bytes, bool)
                                            or long_word_bytes < 1):
            raise ValueError(f"long_word_bytes must be a positive int or None, got "
                             f"{long_word_bytes!r}")
        self._long_word = long_word_bytes
        self._trie: Trie | None = None
        self._sess: Session | None = None
        self._sess_pid: int | None = None
        self._inflight: deque[PendingEncoding] = deque()
        self._lock = threading.RLock()  # one GPU session; callers may share it across threads
        self._init_decoding(vocab)

    def __getstate__(self) -> dict:
        """Pickles without the GPU session (e.g. to a spawned DataLoader worker), which opens
        its own on first use (DESIGN.md §6, §8)."""
        state = self.__dict__.copy()
        state.update(_sess=None, _sess_pid=None, _inflight=deque(), _lock=None, _trie=None)
        return state

    def __setstate__(self, state: dict) -> None:
        # (pickles of earlier releases: the fields added since)
        defaults = {"_long_word": DEFAULT_LONG_WORD, "normalizer": None, "_units": None,
                    "_walk_vocab": state.get("vocab"), "gpu_split": state.get("pre_tokenizer"),
                    "hf_source": None, "trim_offsets": False, "prefix_space": False}
        state = {**defaults, **state}
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def open(self) -> Tokenizer:
        """Open the GPU session now (adapter, device, pipelines, trie upload) instead of on the
        first non-empty encode — e.g. on another thread while the first batch is being read.
        Thread-safe; returns ``self``.

        Raises:
            NoAdapterError: no GPU adapter; GPUOperationError: the device failed.
        """
        with self._lock:
            self._session()
        return self

    def close(self) -> None:
        """Finish the batches in flight and drop this Tokenizer's GPU buffers now (not when it
        is garbage-collected). The process's device stays open, shared by every Tokenizer and
        the trainer; a later encode opens a new session. Also ``with Tokenizer(v) as tok:``."""
        with self._lock:
            try:
                while self._inflight:
                    self._inflight[0].result()
            finally:
                self._inflight.clear()
                self._sess = None
                self._sess_pid = None

    def __enter__(self) -> Tokenizer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs) -> Tokenizer:
        """``Tokenizer(Vocab.load(path), **kwargs)``; raises ``VocabFormatError``/``OSError``."""
        return cls(Vocab.load(path), **kwargs)

    @classmethod
    def from_tiktoken(cls, path: str | os.PathLike, *, pattern: str | None = None,
                      **kwargs) -> Tokenizer:
        """A model's tokenizer from its tiktoken file, split by ``pattern`` or else the
        sidecar's (:func:`~torch_gpubpe.encoding.loaders.tiktoken_file`); e.g.
        ``Tokenizer.from_tiktoken("gpt2.tiktoken", pattern="gpt2")`` gives tiktoken's
        ``encode_ordinary`` ids for GPT-2."""
        vocab, pattern = loaders.tiktoken_file(path, pattern)
        return cls(vocab, pre_tokenizer=pattern, **kwargs)

    @classmethod
    def from_hf(cls, path: str | os.PathLike, *, pattern: str | None = None,
                **kwargs) -> Tokenizer:
        """A model's tokenizer from its Hugging Face ``tokenizer.json`` (or a folder holding
        one) with the split its pre-tokenizer implies, or ``pattern``
        (:func:`~torch_gpubpe.encoding.loaders.hf_file`)."""
        own = pattern is None
        vocab, pattern, template, pad_id, trim, sides, plain = loaders.hf_file(path, pattern)
        tok = cls(vocab, pre_tokenizer=pattern, **kwargs)
        tok.template, tok.pad_token_id, (tok.trim_offsets, tok.prefix_space) = template, pad_id, trim
        tok.padding_side, tok.truncation_side = sides
        tok.plain_added_ids = plain
        if own:
            tok.hf_source = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else str(path)
        return tok

    @classmethod
    def from_sentencepiece(cls, path: str | os.PathLike, **kwargs) -> Tokenizer:
        """A model's tokenizer from its SentencePiece BPE ``tokenizer.model`` (Llama 2, Mistral:
        byte fallback), SentencePiece's ids (:func:`~torch_gpubpe.encoding.loaders.spm_file`)."""
        vocab, pattern = loaders.spm_file(path)
        return cls(vocab, pre_tokenizer=pattern, **kwargs)

    @property
    def trie(self) -> Trie:
        """The compiled trie (DESIGN.md §5), built on first use (or loaded from the disk cache
        of :func:`~torch_gpubpe.core.trie.cached_trie`)."""
        if self._trie is None:
            v = self._walk_vocab
            self._trie = cached_trie(v.token_bytes, v.shadowed_ids)
        return self._trie

    @property
    def host_seconds(self) -> dict[str, float]:
        """Host seconds spent per step of the batches so far (:data:`HOST_STEPS`): waiting for
        the upload staging buffer, copying the text into it, writing the document starts,
        recording the passes, queueing the readback of the batch in flight before the next
        batch's submit, submitting, waiting for the ids, copying them out; and
        ``wait_token_count``, waiting for a batch's token count (the GPU finishing its passes):
        inside ``previous_readback_submit`` when the next batch's submit queues the readback,
        else inside ``result()`` (the last batch). Empty before the first batch."""
        return dict(self._sess.host_seconds) if self._sess else {}

    @property
    def open_seconds(self) -> dict[str, float]:
        """Host seconds the GPU session's opening took, per step: ``gpu`` (waiting for the
        process's device), ``trie_upload``, ``pre_tokenizer`` (a regex split's tables and
        pipeline), ``bpe_tables`` (merge-order mode's tables and walk pipeline), ``pipelines``
        (the walk, prefix-sum, compaction and long-word pipelines), ``slots`` (the two batch
        slots). Empty before the session opens."""
        return dict(self._sess.open_seconds) if self._sess else {}

    @property
    def last_pass_us(self) -> dict[str, float]:
        """GPU time per pass (µs) of the last slice, when ``profile=True`` and supported."""
        return dict(self._sess.last_pass_us) if self._sess else {}

    def _session(self) -> Session:
        if self._sess is None or self._sess_pid != os.getpid() or self._sess.gpu.lost:
            self._inflight.clear()
            self._sess = None
            args = (self.trie, np.dtype(self.id_dtype).itemsize, self._chunk, self._max_slice,
                    self._budget, self._profile, self.gpu_split)
            kw = {"long_word_bytes": self._long_word, "bpe": self._bpe,
                  "num_tokens": self._walk_vocab.num_tokens,
                  "whole_words": self.vocab.ignore_merges,
                  "missing_bytes": self.vocab.missing_bytes}
            # (imported here: the session module loads the shaders' metadata, kept off the
            # import of this module)
            from torch_gpubpe.encoding.session import Session

            cls = self.session_class or Session
            try:
                sess = cls(*args, **kw)
            except GPUOperationError:
                g = current_gpu()
                if g is None or not g.lost:
                    raise
                # The device was lost before this call (nothing of ours in flight): open a
                # fresh one once rather than fail this call too.
                sess = cls(*args, **kw)
            self._sess = sess
            self._sess_pid = os.getpid()
        return self._sess

    # -- encoding ------------------------------------------------------------------------
    def encode(self, text: str | bytes, *, allowed_special: SpecialSet = (),
               disallowed_special: SpecialSet = ()) -> list[int]:
        """Token ids of one document (DESIGN.md §4); ``str`` is UTF-8 encoded first (lone
        surrogates replaced), ``bytes`` may be any bytes.

        Special tokens, with tiktoken's argument names (``tiktoken.Encoding.encode``):

        * default (``allowed_special=()``, ``disallowed_special=()``): a special token's
          spelling in ``text`` is ordinary text and never gives a special id (DESIGN.md §1).
          **This default differs from tiktoken's**, whose ``disallowed_special="all"`` raises
          when the text spells a special token; pass ``disallowed_special="all"`` to get that.
        * ``allowed_special``: a set of special-token spellings, or ``"all"``: those spellings
          in ``text`` become their special ids; the text between them is encoded as separate
          pieces (as tiktoken does: a word never spans a special token).
        * ``disallowed_special``: a set, or ``"all"`` (every special token not allowed): a
          spelling of one of them in ``text`` raises :class:`InputError`.

        Returns:
            ``list[int]``.
        Raises:
            InputError: ``text`` is neither ``str`` nor bytes-like; a name in the two sets is
                not a special token of the vocab; ``text`` spells a disallowed special token
                (names it and its position).
        """
        return self.encode_to_numpy(text, allowed_special=allowed_special,
                                    disallowed_special=disallowed_special).tolist()

    def encode_ordinary(self, text: str | bytes) -> list[int]:
        """Token ids of ``text`` with special spellings taken as text (tiktoken's
        ``encode_ordinary``; here the same as :meth:`encode` with its defaults)."""
        return self.encode_to_numpy(text).tolist()

    def encode_to_numpy(self, text: str | bytes, *, allowed_special: SpecialSet = (),
                        disallowed_special: SpecialSet = ()) -> np.ndarray:
        """:meth:`encode` as a 1-D array of :attr:`id_dtype`."""
        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            raise InputError(f"text must be str or bytes, got {type(text).__name__}")
        return self.encode_batch([text], allowed_special=allowed_special,
                                 disallowed_special=disallowed_special).ids

    def encode_batch(self, texts: Sequence[str | bytes], *, allowed_special: SpecialSet = (),
                     disallowed_special: SpecialSet = ()) -> BatchEncoding:
        """Encode many documents with one GPU round trip per slice (not per document).

        Args:
            texts: ``str`` or bytes-like documents; empty documents are allowed (an empty
                batch or one of empty documents never opens the GPU).
            allowed_special, disallowed_special: as in :meth:`encode`, for every document.
        Returns:
            :class:`BatchEncoding` (flat ids + int64 token offsets). Unlike tiktoken's
            ``encode_batch`` (a list of lists) it is a sequence of 1-D arrays; ``.tolist()``
            gives tiktoken's form.
        Raises:
            InputError: an item is neither ``str`` nor bytes-like (names its index), or as in
                :meth:`encode`.
            GPUOperationError: the GPU did not answer in time.
        """
        allowed, disallowed = special_sets(frozenset(self.vocab.special_tokens),
                                           allowed_special, disallowed_special)
        if not allowed and not disallowed:
            return self.submit(texts).result()
        return encode_with_specials(lambda pieces: self.submit(pieces).result(),
                                    texts, self.vocab.special_token_ids, allowed, disallowed,
                                    self.id_dtype)

    def encode_ordinary_batch(self, texts: Sequence[str | bytes]) -> BatchEncoding:
        """:meth:`encode_batch` with special spellings taken as text (tiktoken's name)."""
        return self.submit(texts).result()

    # -- special tokens (tiktoken's names) ---------------------------------------------------
    @property
    def special_tokens_set(self) -> set[str]:
        """The spellings of the vocab's special tokens (tiktoken's ``special_tokens_set``)."""
        return set(self.vocab.special_tokens)

    @property
    def eot_token(self) -> int:
        """Id of ``<|endoftext|>`` (tiktoken's ``eot_token``).

        Raises:
            KeyError: the vocab has no ``<|endoftext|>`` special token.
        """
        return self.vocab.token_to_id(EOT)

    @property
    def max_token_value(self) -> int:
        """The largest id (``n_vocab - 1``; tiktoken's ``max_token_value``)."""
        return self.n_vocab - 1

    def submit(self, texts: Sequence[str | bytes], *, bos_id: int | None = None,
               eos_id: int | None = None) -> PendingEncoding:
        """Pack, upload and submit a batch; return at once (at most 2 batches in flight).

        Calling it with two batches pending first completes the oldest (its ``result()`` still
        works). A batch larger than one slice is encoded at once (one submit per slice).

        ``bos_id`` / ``eos_id``: a token id put before / after every document (e.g. llm.c's
        ``<|endoftext|>`` before each document, Megatron's end-of-document after it), by the
        GPU while the ids are read back; the result's offsets then include them.

        Raises:
            InputError: a bad document, or a ``bos_id``/``eos_id`` outside the id range.
        """
        if not isinstance(texts, (list, tuple)):
            texts = list(texts) if not isinstance(texts, (str, bytes, bytearray)) else texts
        specials = self._specials_arg(bos_id, eos_id)
        if (groups := text_groups(texts, GROUP_BYTES)) is not None:  # (packed on a thread)
            with self._lock:
                p = PendingEncoding(self, specials)
                p._result = concat_encodings(encode_groups(
                    lambda data, offsets: self._submit_packed(data, offsets, specials), groups))
                return p
        data, offsets = pack_batch(texts, keep_parts=True)
        with self._lock:
            return self._submit_packed(data, offsets, specials)

    def encode_batches(self, batches: Iterable[Sequence[str | bytes]], *,
                       bos_id: int | None = None, eos_id: int | None = None
                       ) -> Iterator[BatchEncoding]:
        """One :class:`BatchEncoding` per batch of documents, in order: :meth:`stream` without
        the batches. Raises as :meth:`stream`."""
        return (enc for _, enc in self.stream(batches, bos_id=bos_id, eos_id=eos_id))

    def stream(self, batches: Iterable, *, bos_id: int | None = None, eos_id: int | None = None,
               stages: dict | None = None, t0: float | None = None,
               before_first: Callable[[], object] | None = None, ahead: int = 2,
               on_error: Callable | None = None) -> Iterator[tuple[object, BatchEncoding]]:
        """Encode a stream of batches: ``(batch, BatchEncoding)`` per batch, in order, two
        batches in flight on the GPU while the caller handles a third, the next batch of
        documents packed on a thread meanwhile. ``batches``: sequences of documents (as
        :meth:`submit`) or packed batches (``data`` + ``offsets``, as :meth:`submit_packed`).
        The arguments, results and errors: :func:`torch_gpubpe.encoding.stream.encode_stream`.
        """
        specials = self._specials_arg(bos_id, eos_id)

        def submit_parts(data, offsets) -> PendingEncoding:
            with self._lock:
                return self._submit_packed(data, offsets, specials)

        return encode_stream(self, batches, submit_parts, bos_id=bos_id, eos_id=eos_id,
                             stages=stages, t0=t0, before_first=before_first, ahead=ahead,
                             on_error=on_error)

    def _specials_arg(self, bos_id, eos_id) -> tuple[int, int] | None:
        if bos_id is None and eos_id is None:
            return None
        top = self.n_vocab - 1   # ≤ the output dtype's maximum
        for name, v in (("bos_id", bos_id), ("eos_id", eos_id)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                  or not 0 <= int(v) <= top):
                raise InputError(f"{name} must be a token id of this vocab, 0..{top} "
                                 f"(n_vocab {self.n_vocab}), got {v!r}")
        return (NO_TOKEN if bos_id is None else int(bos_id),
                NO_TOKEN if eos_id is None else int(eos_id))

    def submit_packed(self, data: np.ndarray, offsets: np.ndarray, *, bos_id: int | None = None,
                      eos_id: int | None = None) -> PendingEncoding:
        """:meth:`submit` for documents already packed: ``data`` (1-D ``np.uint8``, any bytes)
        and ``offsets`` (``np.int64``, shape ``(num_docs + 1,)``, from 0 to ``len(data)``,
        non-decreasing; document k is ``data[offsets[k]:offsets[k+1]]``). No per-document
        Python objects; the bytes are copied once, into the mapped upload buffer.
        ``bos_id`` / ``eos_id`` as in :meth:`submit`.

        Raises:
            InputError: bad dtypes, shapes or offsets, or a bad ``bos_id``/``eos_id``.
        """
        data = np.asarray(data)
        offsets = np.asarray(offsets)
        if data.dtype != np.uint8 or data.ndim != 1 or offsets.ndim != 1 or len(offsets) < 1 \
                or offsets.dtype.kind not in "iu":
            raise InputError("submit_packed expects 1-D uint8 data and 1-D integer offsets, got "
                             f"{data.dtype}{data.shape} and {offsets.dtype}{offsets.shape}")
        offsets = offsets.astype(np.int64, copy=False)
        if offsets[0] != 0 or offsets[-1] != len(data) or (np.diff(offsets) < 0).any():
            raise InputError(f"offsets must go from 0 to len(data)={len(data)} without "
                             f"decreasing (got {offsets[0]}..{offsets[-1]})")
        specials = self._specials_arg(bos_id, eos_id)
        with self._lock:
            return self._submit_packed(data, offsets, specials)

    def submit_arrow(self, values, *, bos_id: int | None = None,
                     eos_id: int | None = None) -> PendingEncoding:
        """:meth:`submit` for a ``pyarrow`` string/binary array (or chunked array) of
        documents, read zero copy (:func:`torch_gpubpe.io.readers.arrow_to_packed`).

        Raises:
            InputError: a null document (names its index) or a non-text array type.
        """
        from torch_gpubpe.io.readers import arrow_to_packed

        return self.submit_packed(*arrow_to_packed(values), bos_id=bos_id, eos_id=eos_id)

    def encode_arrow(self, values, *, bos_id: int | None = None,
                     eos_id: int | None = None) -> BatchEncoding:
        """:meth:`encode_batch` for a ``pyarrow`` string/binary array (:meth:`submit_arrow`)."""
        return self.submit_arrow(values, bos_id=bos_id, eos_id=eos_id).result()

    def _submit_packed(self, data: np.ndarray | list[bytes], offsets: np.ndarray,
                       specials: tuple[int, int] | None = None, normalized: bool = False
                       ) -> PendingEncoding:
        p = PendingEncoding(self, specials)
        if self.normalizer is not None and not normalized:  # (before the split)
            data, offsets = normalize_packed(data, offsets, self.normalizer)
        total = int(offsets[-1])
        if total == 0:  # before the session: empty input never opens the GPU
            p._result = _add_specials(BatchEncoding(np.zeros(0, self.id_dtype),
                                                    np.zeros(len(offsets), np.int64)), specials)
            return p
        sess = self._session()
        ndocs = len(offsets) - 1
        if ndocs > 1 and (ndocs > sess.max_docs or total > sess.limit):
            p._result = self._encode_in_groups(data, offsets, sess, specials)
            return p
        staged = None
        if len(self._inflight) >= 2 and ndocs <= sess.max_docs and total <= sess.limit \
                and self._inflight[0]._slot.can_stage(total, ndocs):
            # Both slots are in flight: this batch is written into the oldest one's upload
            # buffer first, while the GPU still runs the newest, and the oldest is read back
            # after that. Read back first, the host would wait for the newest batch's passes
            # there (the map of the oldest's ids resolves only in a device poll that waits for
            # every submit, WGPU_NOTES.md §1) with nothing to do.
            staged = self._inflight[0]._slot
            with sess.gpu.operation(f"encoding a batch of {ndocs} documents ({total} bytes): "
                                    "upload"):
                staged.stage(data, 0, total, offsets[:-1].astype(np.uint32), True)
            sess.staged_ahead += 1
        while len(self._inflight) >= 2:
            old = self._inflight[0]
            old.result()  # removes itself from _inflight
        # Any wgpu error (validation, lost device) becomes a GPUOperationError naming the step
        # and marks a lost device, so that the next call opens a fresh session.
        if total <= sess.limit:
            busy = {q._slot for q in self._inflight}
            p._slot = next(s for s in sess.slots if s not in busy)
            with sess.gpu.operation(f"encoding a batch of {ndocs} documents "
                                    f"({total} bytes): upload and submit"):
                if staged is p._slot:
                    p._slot.launch(before_submit=self._queue_readbacks)
                else:
                    p._slot.start(data, 0, total, offsets[:-1].astype(np.uint32), True,
                                  before_submit=self._queue_readbacks)
            self._inflight.append(p)
        else:
            if isinstance(data, list):
                data = join_parts(data)
            with sess.gpu.operation(f"encoding a batch of {len(offsets) - 1} documents "
                                    f"({total} bytes) in slices of {sess.limit} bytes"):
                p._result = _add_specials(self._expanded(self._encode_sliced(data, offsets)),
                                          specials)
        return p

    def _encode_in_groups(self, data: np.ndarray | list[bytes], offsets: np.ndarray,
                          sess: Session, specials: tuple[int, int] | None) -> BatchEncoding:
        """A batch above one slice or its document limit: consecutive groups of whole
        documents (about ``GROUP_BYTES``, at most ``sess.max_docs`` documents; a document
        above the slice limit alone, encoded in slices), two in flight as in :meth:`stream`."""
        if isinstance(data, list):
            data = join_parts(data)
        bounds = group_bounds(offsets, min(GROUP_BYTES, sess.limit), sess.max_docs)
        return encode_in_groups(lambda ab: self._submit_packed(
            data[offsets[ab[0]]:offsets[ab[1]]], offsets[ab[0]:ab[1] + 1] - offsets[ab[0]],
            specials, normalized=True), zip(bounds, bounds[1:]))

    def _queue_readbacks(self) -> None:
        """Queue the id readback of each batch in flight before the next batch's passes are
        submitted: queued after them (by ``result()``), it would wait for all of them, and the
        GPU would idle while the host copies ids out and stages uploads. An error is kept for
        that batch's ``result()``."""
        for q in self._inflight:
            if q._readback_queued or q._error is not None:
                continue
            try:
                with q._slot.sess.gpu.operation(f"encoding a batch ({q._slot.n} bytes): "
                                                "readback"):
                    q._slot.submit_readback(q._specials)
                q._readback_queued = True
            except Exception as e:  # noqa: BLE001 (re-raised by q.result())
                q._error = e

    def _complete(self, p: PendingEncoding) -> BatchEncoding:
        with self._lock:
            if p._result is not None:  # completed meanwhile by submit() in another thread
                return p._result
            try:
                if p._error is not None:
                    raise p._error
                with p._slot.sess.gpu.operation(f"encoding a batch ({p._slot.n} bytes): "
                                                "readback"):
                    if not p._readback_queued:
                        p._slot.submit_readback(p._specials)
                    p._readback_queued = True
                    ids, doc_tok, seg = p._slot.read_ids()
            except BaseException as e:
                if not isinstance(e, Exception) and p._readback_queued \
                        and p._slot.readback is not None:
                    # Interrupted (KeyboardInterrupt) while waiting for or copying the ids: the
                    # batch keeps its slot, and result() again goes on from there.
                    raise
                if not isinstance(e, Exception):  # interrupted inside its passes' readback
                    err = GPUOperationError(
                        f"the readback of a batch ({p._slot.n} bytes) was interrupted "
                        f"({type(e).__name__}) before its ids were read; submit it again")
                    err.__cause__ = e
                    e = err
                p._error = e  # result() again raises the same error
                if p in self._inflight:
                    self._inflight.remove(p)
                raise
            if p in self._inflight:
                self._inflight.remove(p)
            if seg is None:
                seg = doc_offsets(doc_tok.astype(np.int64) - 1, len(ids))
            p._result = self._expanded(BatchEncoding(ids, seg))
            return p._result

    def _expanded(self, be: BatchEncoding) -> BatchEncoding:
        """SentencePiece BPE: prefix tokens left in ``be`` become their byte tokens (byte
        fallback, :meth:`torch_gpubpe.core.sentencepiece.ByteUnits.expand`)."""
        if self._units is None:
            return be
        ids, offsets = self._units.expand(be.ids, be.offsets)
        return be if ids is be.ids else BatchEncoding(ids.astype(self.id_dtype), offsets)

    def _encode_sliced(self, data: np.ndarray, offsets: np.ndarray) -> BatchEncoding:
        """Multi-pass encoding of a batch above the slice limit (cut at word starts)."""
        sess = self._session()
        slot = next(s for s in sess.slots if s not in {q._slot for q in self._inflight})
        tok_len = self._tok_len if self._units is None else np.fromiter(
            map(len, self._walk_vocab.token_bytes), np.int64)
        return BatchEncoding(*encode_sliced(sess, slot, data, offsets, tok_len,
                                            self.id_dtype))


def _add_specials(be: BatchEncoding, specials: tuple[int, int] | None) -> BatchEncoding:
    """``be`` with ``specials = (bos, eos)`` (``NO_TOKEN``: none) put in on the host (batches
    encoded in several slices or sub-batches)."""
    if specials is None:
        return be
    bos, eos = (None if x == NO_TOKEN else x for x in specials)
    return BatchEncoding(*insert_special_tokens(be.ids, be.offsets, bos, eos))
