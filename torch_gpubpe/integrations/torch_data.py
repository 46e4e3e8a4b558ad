"""PyTorch data path (DESIGN.md §6): raw text → persistent GPU encoder → ``torch`` tensors.

The only module of torch_gpubpe that imports ``torch``.

Pipeline, per process that iterates (the main process with ``num_workers=0``, else each
DataLoader worker)::

    source (list of str | datasets.Dataset / IterableDataset | TextFiles)
      → this shard's documents (document k goes to shard k mod (world_size × num_workers))
      → batches of about ``batch_bytes`` UTF-8 bytes
      → Tokenizer.stream(batches)          # GPU; 2 batches in flight, BOS/EOS put in by the GPU
      → BatchEncoding                      # while the GPU already encodes the next batches
      → tensors: one per document (``mode="documents"``) or packed ``seq_len`` blocks
        (``mode="packed"``: documents joined with EOS, ``input_ids`` + ``labels`` shifted by one)

Reading, batching, submitting and readback run in a background thread, so reading text, GPU
encoding and tensor building overlap (``background=True``). The GPU session is created lazily in
the process that iterates; a dataset pickles without GPU state (DESIGN.md §8, WGPU_NOTES.md §8).

Example::

    >>> from torch_gpubpe.integrations.torch_data import TokenizedDataset, make_dataloader
    >>> ds = TokenizedDataset(texts, vocab, mode="packed", seq_len=1024)      # doctest: +SKIP
    >>> for batch in make_dataloader(ds, batch_size=8, num_workers=2):       # doctest: +SKIP
    ...     loss = model(batch["input_ids"], labels=batch["labels"])

Resume: :meth:`TokenizedDataset.state_dict` / :meth:`~TokenizedDataset.load_state_dict` describe
the position of ONE shard (one worker of one rank) after the last item it yielded. With
``num_workers=0`` use them directly (or through ``torchdata``'s ``StatefulDataLoader``); with
workers use ``make_dataloader(..., stateful=True)`` (``torchdata.stateful_dataloader``), which
keeps one state per worker and restores each in its worker.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import pyarrow as pa

from torch_gpubpe._util import prefetch
from torch_gpubpe.encoding.stream import in_flight
from torch_gpubpe.errors import GPUForkError, InputError
from torch_gpubpe.gpu.device import check_fork, touched_pid
from torch_gpubpe.integrations.even_batches import distributed_ranks, even_loader_class
from torch_gpubpe.integrations.collate import (IGNORE_INDEX, PadCollator, accelerator_available,
                                               packed_collate, pad_collate, warn_once)
from torch_gpubpe.integrations.dataset_source import (ShardInfo, distributed_rank, load_vocab_path,
                                                      normalize_source)
from torch_gpubpe.integrations.workers import choose_context, gpu_touched
from torch_gpubpe.io.readers import (DocBatch, PyReader, TextFiles, arrow_to_packed,
                                    valid_mask as _valid_mask)
from torch_gpubpe.core.vocab import Vocab

STATE_FORMAT = "torch_gpubpe.integrations.torch_data.TokenizedDataset/1"
DEFAULT_BATCH_BYTES = 4 << 20


# ================================================================================================
# Packing helpers (numpy, vectorised)
# ================================================================================================
def add_special_tokens(
    ids: np.ndarray, offsets: np.ndarray, bos_id: int | None, eos_id: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Insert ``bos_id`` before and/or ``eos_id`` after every document of a flat batch.

    Args:
        ids: token ids of all documents back to back (any integer dtype), shape ``(n_tokens,)``.
        offsets: int64, shape ``(num_docs + 1,)``; document k is ``ids[offsets[k]:offsets[k+1]]``.
    Returns:
        ``(ids, offsets)`` in the same layout, ids as int64.
    """
    from torch_gpubpe.encoding.tokenizer import insert_special_tokens

    return insert_special_tokens(np.asarray(ids), offsets, bos_id, eos_id, np.int64)



# ================================================================================================
# The dataset
# ================================================================================================
@dataclass
class _Batch:
    """One encoded batch handed from the producer to the consumer."""

    positions: list[int]  # shard positions of the documents (bad ones skipped)
    indices: list[int]  # their global indices
    end_position: int  # shard position after the batch (skipped documents included)
    skipped: list[int]  # shard positions of documents skipped (on_bad_document="skip")
    values: Any  # the documents: one Arrow array, or None when the batch has none
    data: np.ndarray  # ... packed (zero copy): uint8 text
    offsets: np.ndarray  # int64 document offsets into data, from 0
    encoding: Any = None  # BatchEncoding (None: not encoded, the batch had no document)
    specials_in: bool = False  # BOS/EOS already in the encoding (put in by the GPU)



class TokenizedDataset(IterableDataset):
    """Streams raw text, encodes it on the GPU, yields ``torch`` tensors (DESIGN.md §6).

    Args:
        source: the documents, read as Arrow batches by :mod:`torch_gpubpe.io.readers` (one
            data buffer + offsets per batch, no Python object per document). One of: a
            Hugging Face ``datasets.Dataset`` (its Arrow table, zero copy; a shard reads only
            its rows) or ``datasets.IterableDataset`` (Arrow-formatted streaming) with a
            ``text_column``; files: a path (``str`` of an existing file or ``os.PathLike``), a
            list of ``os.PathLike``, :class:`~torch_gpubpe.io.readers.FileReader` /
            :class:`TextFiles` (parquet, Arrow IPC/feather, JSON Lines plain or compressed,
            CSV, plain text split by ``sample_by="line"|"paragraph"|"document"``, the CLI's
            ``--sample-by``) or a :class:`torch_gpubpe.io.sources.TextSource` (its own
            ``text_column``); a ``pyarrow`` array or table; a sequence or iterable of ``str``
            (or ``bytes``, or row dicts), packed once per batch; a zero-argument callable
            returning such an iterable (re-called each epoch, and works in workers when it
            pickles). One-shot iterators (generators) work with ``num_workers=0`` for one epoch
            only.
        tokenizer_or_vocab: a :class:`torch_gpubpe.core.vocab.Vocab` (a ``Tokenizer`` is built lazily
            in the iterating process), the path (``str`` or ``os.PathLike``) of a ``vocab.json``
            or of the folder ``python -m torch_gpubpe train --out`` wrote (as the CLI's
            ``--vocab``), or a ``torch_gpubpe.encoding.tokenizer.Tokenizer``. A ``Tokenizer`` is
            sent to workers as its vocab and re-created there; any other object with
            ``submit(texts).result()`` → BatchEncoding and a ``vocab`` is used as is.
        text_column: column / JSON field holding the text.
        sample_by: plain-text files given as paths: ``"line"`` (default; each line with its
            ``\n``), ``"paragraph"`` (pieces between blank lines) or ``"document"`` (a file) —
            the CLI's ``--sample-by``.
        mode: ``"documents"`` yields one 1-D tensor per document (pad them with
            :class:`PadCollator`); ``"packed"`` yields ``{"input_ids", "labels"}`` blocks of
            ``seq_len`` tokens each.
        seq_len: block length in tokens (``mode="packed"`` only).
        add_bos: put the BOS token before every document.
        add_eos: put the EOS token after every document; default True in packed mode (documents
            are joined with EOS), False in documents mode.
        eos_token, bos_token: special-token spellings (``vocab.special_tokens``); ``bos_token``
            None means the EOS token also serves as BOS (GPT-2 style).
        drop_last: packed mode: drop the tokens at the end of a shard that do not fill a block
            (default; each worker of each rank packs its own shard, so up to ``seq_len`` tokens
            per shard). False emits a last block padded with ``pad_id`` and labels ``-100``;
            then the tokens of all shards together are exactly those of ``num_workers=0``.
        pad_id: the padding id of that last block.
        batch_bytes: documents are sent to the GPU in batches of about this many bytes (a
            document larger than that is a batch of its own).
        max_batch_documents: at most this many documents per GPU batch.
        rank, world_size: distributed rank; default from ``torch.distributed`` when initialised
            (read when the dataset is created and again by :func:`make_dataloader`), else 0 / 1.
        dtype: tensor dtype, ``torch.long`` (default) or ``torch.int32``.
        pin_memory: pin the yielded tensors (main process only; :func:`make_dataloader` asks the
            DataLoader to pin when workers are used). Ignored with a warning when no accelerator.
        on_bad_document: ``"raise"`` (default) raises :class:`InputError` naming the document
            when a text is None or not a str/bytes; ``"skip"`` skips it and counts it in
            :attr:`skipped_documents`.
        with_index: documents mode: yield ``{"input_ids": tensor, "doc_index": int}`` instead of
            a bare tensor (the global document index in the source).
        pipeline_depth: GPU batches in flight (2 = double-buffered readback; 1 = none).
        background: run reading + submitting + readback in a background thread.
        pre_tokenizer: the word split for a ``Vocab`` (``Tokenizer(vocab, pre_tokenizer=...)``:
            ``"bytes-classes"``, ``"gpt2"``, ``"cl100k"``, ``"qwen2"``, ``"o200k"``); default: the given
            ``Tokenizer``'s, else ``"bytes-classes"``. Kept when sent to workers.

    Yields:
        documents mode: a 1-D tensor of ``dtype``, the document's token ids (plus BOS/EOS if
        asked), in source order within the shard. Packed mode: ``{"input_ids": (seq_len,),
        "labels": (seq_len,)}``: the token stream of the shard (``[BOS] doc EOS [BOS] doc EOS
        …``) cut into consecutive blocks; ``labels`` of a block are its ``input_ids`` shifted by
        one, so the last label of a block is the first input of the next. Every token is the
        input of exactly one block; none is lost or repeated at block edges.

    Raises:
        InputError: ``tokenizer_or_vocab`` is a path that holds no vocab file.
        VocabFormatError: that file is not a valid vocab file.

    Raises (when iterated):
        InputError: a bad document (names its index, where it is, and the shard) or source.
        GPUForkError: this process is a fork of one that had opened the GPU (use ``spawn`` or
            ``forkserver``: :func:`make_dataloader` does).
    """

    def __init__(
        self,
        source: object,
        tokenizer_or_vocab: Any,
        *,
        text_column: str = "text",
        sample_by: str = "line",
        mode: str = "documents",
        seq_len: int | None = None,
        add_bos: bool = False,
        add_eos: bool | None = None,
        eos_token: str = "<|endoftext|>",
        bos_token: str | None = None,
        drop_last: bool = True,
        pad_id: int = 0,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        max_batch_documents: int = 65536,
        rank: int | None = None,
        world_size: int | None = None,
        dtype: torch.dtype = torch.long,
        pin_memory: bool = False,
        on_bad_document: str = "raise",
        with_index: bool = False,
        pipeline_depth: int = 2,
        background: bool = True,
        pre_tokenizer: str | None = None,
    ) -> None:
        super().__init__()
        if mode not in ("documents", "packed"):
            raise ValueError(f"mode must be 'documents' or 'packed', got {mode!r}")
        if mode == "packed" and (not isinstance(seq_len, int) or seq_len < 1):
            raise ValueError(f"mode='packed' needs seq_len= a positive int, got {seq_len!r}")
        if mode == "documents" and seq_len is not None:
            raise ValueError("seq_len= is for mode='packed'; pad documents with PadCollator")
        if dtype not in (torch.long, torch.int32):
            raise ValueError(f"dtype must be torch.long or torch.int32, got {dtype}")
        if on_bad_document not in ("raise", "skip"):
            raise ValueError(f"on_bad_document must be 'raise' or 'skip', got {on_bad_document!r}")
        if batch_bytes < 1 or max_batch_documents < 1:
            raise ValueError("batch_bytes and max_batch_documents must be positive")
        if pipeline_depth not in (1, 2):
            raise ValueError(f"pipeline_depth must be 1 or 2, got {pipeline_depth}")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank= and world_size=, or neither")
        if world_size is not None and not (0 <= rank < world_size):
            raise ValueError(f"rank={rank} is not in [0, world_size={world_size})")
        self.source = normalize_source(source, text_column, sample_by)
        if isinstance(tokenizer_or_vocab, (str, os.PathLike)):  # as the CLI's --vocab
            tokenizer_or_vocab = load_vocab_path(tokenizer_or_vocab)
        self._tokenizer_arg = tokenizer_or_vocab
        if pre_tokenizer is not None:
            from torch_gpubpe.core.patterns import resolve

            pre_tokenizer = resolve(pre_tokenizer)
            given = getattr(tokenizer_or_vocab, "pre_tokenizer", pre_tokenizer)
            if not isinstance(tokenizer_or_vocab, Vocab) and given != pre_tokenizer:
                raise ValueError(f"pre_tokenizer={pre_tokenizer!r} but the given tokenizer "
                                 f"splits with {given!r}")
        else:
            pre_tokenizer = getattr(tokenizer_or_vocab, "pre_tokenizer", None)
        self._pre_tokenizer = pre_tokenizer
        vocab = self.vocab
        self.text_column = text_column
        self.mode = mode
        self.seq_len = seq_len
        self.add_eos = (mode == "packed") if add_eos is None else bool(add_eos)
        self.add_bos = bool(add_bos)
        bos = bos_token if bos_token is not None else eos_token
        for needed, name in ((self.add_eos, eos_token), (self.add_bos, bos)):
            if needed and name not in vocab.special_token_ids:
                raise InputError(
                    f"the vocab has no special token {name!r} (its special tokens: "
                    f"{list(vocab.special_tokens)}); train it with special_tokens=[{name!r}] "
                    "(the CLI's default), or pass eos_token=/bos_token=, or add_eos=False"
                )
        self.eos_id = vocab.token_to_id(eos_token) if self.add_eos else None
        self.bos_id = vocab.token_to_id(bos) if self.add_bos else None
        self.drop_last = drop_last
        self.pad_id = int(pad_id)
        self.batch_bytes = int(batch_bytes)
        self.max_batch_documents = int(max_batch_documents)
        self._given_rank = (rank, world_size) if rank is not None else None
        self._dist_rank = distributed_rank()
        self.dtype = dtype
        self.pin_memory = bool(pin_memory)
        self.on_bad_document = on_bad_document
        self.with_index = with_index
        self.pipeline_depth = pipeline_depth
        self.background = background
        self.skipped_documents = 0
        self._state: dict | None = None
        self._resume: dict | None = None
        self._tok = None

    # -- tokenizer (lazy, per process) -----------------------------------------------------------
    @property
    def vocab(self) -> Vocab:
        t = self._tokenizer_arg
        return t if isinstance(t, Vocab) else t.vocab

    @property
    def tokenizer(self):
        """The encoder of this process, created on first use (opens the GPU on first encode)."""
        if self._tok is None:
            if isinstance(self._tokenizer_arg, Vocab):
                from torch_gpubpe.encoding.tokenizer import Tokenizer

                self._tok = Tokenizer(self._tokenizer_arg,
                                      pre_tokenizer=self._pre_tokenizer)
            else:
                self._tok = self._tokenizer_arg
        return self._tok

    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["_tok"] = None  # never send a GPU session to another process
        t = d["_tokenizer_arg"]
        if type(t).__module__ == "torch_gpubpe.encoding.tokenizer":
            d["_tokenizer_arg"] = t.vocab
        src = d["source"].obj if isinstance(d["source"], PyReader) else d["source"]
        if isinstance(src, (types.GeneratorType, Iterator)):
            raise InputError(
                "TokenizedDataset: a one-shot iterator (generator) as source cannot be sent to "
                "DataLoader workers; pass a list, a callable returning an iterable, a datasets "
                "object or files, or use num_workers=0"
            )
        return d

    # -- sharding ----------------------------------------------------------------------------------
    def resolve_distributed(self) -> None:
        """Re-read rank/world size from ``torch.distributed`` (when initialised and not given).
        Called by :func:`make_dataloader` in the main process, before workers start."""
        self._dist_rank = distributed_rank() or self._dist_rank

    def shard_info(self) -> ShardInfo:
        """The shard this process reads: worker info from ``torch.utils.data``, rank as given,
        else from ``torch.distributed``, else 0 of 1."""
        if self._given_rank is not None:
            rank, world = self._given_rank
        else:
            rank, world = distributed_rank() or self._dist_rank or (0, 1)
        w = get_worker_info()
        return ShardInfo(rank, world, w.id if w else 0, w.num_workers if w else 1)

    # -- resume ------------------------------------------------------------------------------------
    def _fresh_state(self, info: ShardInfo) -> dict:
        return {
            "format": STATE_FORMAT,
            "shard": info.shard,
            "num_shards": info.num_shards,
            "mode": self.mode,
            "seq_len": self.seq_len,
            "position": 0,
            "carry": [],
            "skip_blocks": 0,
            "skipped_documents": 0,
        }

    def state_dict(self) -> dict:
        """Position of this shard after the last item yielded (a small dict of ints and a list
        of at most ``seq_len`` token ids). Before iteration: the state a new iteration starts
        from. See the module docstring for workers."""
        if self._resume is not None:
            return dict(self._resume)
        if self._state is None:
            return self._fresh_state(self.shard_info())
        return dict(self._state, carry=list(self._state["carry"]))

    def load_state_dict(self, state: Mapping) -> None:
        """Make the next iteration continue after the item at which ``state`` was taken.

        Raises:
            ValueError: ``state`` is not a state of this kind of dataset (format, mode,
                ``seq_len``); checked against the shard when iteration starts.
        """
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a TokenizedDataset state (format {STATE_FORMAT!r} expected)")
        if state["mode"] != self.mode or state["seq_len"] != self.seq_len:
            raise ValueError(
                f"state is of mode={state['mode']!r}, seq_len={state['seq_len']}; this dataset "
                f"has mode={self.mode!r}, seq_len={self.seq_len}"
            )
        self._resume = dict(state, carry=list(state["carry"]))

    # -- iteration ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        pid = touched_pid()
        if pid is not None and pid != os.getpid():
            check_fork()  # raises GPUForkError with the fix, before anything hangs
        info = self.shard_info()
        start = self._resume if self._resume is not None else self._fresh_state(info)
        self._resume = None
        if (start["shard"], start["num_shards"]) != (info.shard, info.num_shards):
            raise ValueError(
                f"the state was saved by shard {start['shard']} of {start['num_shards']}, but this "
                f"iterator reads {info.describe()}; resume with the same world size and workers"
            )
        self._state = dict(start, carry=list(start["carry"]))
        self.skipped_documents = start["skipped_documents"]
        batches = self._encoded_batches(info, start["position"])
        bg = None
        if self.background:
            # The reader thread starts on the first next() (prefetch makes its Pump then); it
            # reads, submits and reads back while this thread builds tensors. Closed from this
            # thread it is joined; collected elsewhere (a cycle) it is only told to stop, since
            # the collecting thread may hold the tokenizer's lock that it needs to finish its
            # batches in flight.
            batches = bg = prefetch(batches, 2, f"torch_gpubpe reader ({info.describe()})",
                                    join_s=60)
        if self.mode == "documents":
            out = self._documents(batches)
        else:
            out = self._blocks(batches, start)
        return out if bg is None else _closing(out, bg)

    def _bad_document(self, b: DocBatch, j: int, info: ShardInfo) -> InputError:
        kind, detail = b.problem(j)
        k = int(b.indices[j])
        if kind == "type" and (why := b.missing_field(j)) is not None:
            kind, detail = "missing", why   # (named as the file readers name it)
        if kind == "missing":
            return InputError(f"{b.where(j)}: {detail}; pass text_column= to name the field "
                              f"holding the text (document {k}; {info.describe()})")
        what = "None" if kind == "null" else detail
        return InputError(
            f"document {k} ({b.where(j)}; {info.describe()}): text is {what}, not str; pass "
            "on_bad_document='skip' to skip such documents")

    def _document_batches(self, info: ShardInfo, start: int) -> Iterator[_Batch]:
        """GPU batches of about ``batch_bytes`` bytes and at most ``max_batch_documents``
        documents, in shard order; their documents are one Arrow array and its packed bytes
        (no per-document Python objects)."""
        n_sh = info.num_shards
        docs = self.source.batches(info.shard, n_sh, start)
        parts: list[tuple[pa.Array, np.ndarray]] = []
        nbytes = ndocs = 0
        skipped: list[int] = []
        pos = start - 1

        def emit():
            nonlocal parts, nbytes, ndocs, skipped
            if len(parts) == 1:
                vals, idx = parts[0]
            elif parts:
                vs = [v for v, _ in parts]
                if len({v.type for v in vs}) > 1:
                    vs = [v.cast(pa.large_binary()) for v in vs]
                vals = pa.concat_arrays(vs)
                idx = np.concatenate([i for _, i in parts])
            else:
                vals, idx = None, np.zeros(0, np.int64)
            if vals is None:
                data, offs = np.zeros(0, np.uint8), np.zeros(1, np.int64)
            else:
                data, offs = arrow_to_packed(vals)   # (zero copy)
            out = _Batch((idx // n_sh).tolist(), idx.tolist(), pos + 1, skipped, vals, data,
                         offs)
            parts, nbytes, ndocs, skipped = [], 0, 0, []
            return out

        for b in _noted(docs, info):
            bad_pos: list[int] = []
            kept = b
            if b.values.null_count:
                valid = _valid_mask(b.values)
                if self.on_bad_document == "raise":
                    raise self._bad_document(b, int(np.flatnonzero(~valid)[0]), info)
                bad_pos = (b.indices[~valid] // n_sh).tolist()
                kept = b.take(np.flatnonzero(valid))
            nb = 0  # bad positions handed out so far
            if len(kept):
                _, offs = arrow_to_packed(kept.values)
                idx = kept.indices
                a, n = 0, len(kept)
                while a < n:
                    target = offs[a] + max(self.batch_bytes - nbytes, 1)
                    c = int(np.searchsorted(offs, target, side="left"))
                    c = max(a + 1, min(c, n, a + self.max_batch_documents - ndocs))
                    parts.append((kept.values.slice(a, c - a), idx[a:c]))
                    nbytes += int(offs[c] - offs[a])
                    ndocs += c - a
                    pos = int(idx[c - 1]) // n_sh
                    while nb < len(bad_pos) and bad_pos[nb] < pos:
                        skipped.append(bad_pos[nb])
                        nb += 1
                    a = c
                    if nbytes >= self.batch_bytes or ndocs >= self.max_batch_documents:
                        yield emit()
            skipped += bad_pos[nb:]
            pos = max(pos, int(b.indices[-1]) // n_sh)
        if parts or skipped:
            yield emit()

    def _encoded_batches(self, info: ShardInfo, start: int) -> Iterator[_Batch]:
        """The shard's batches encoded, in order: ``Tokenizer.stream`` (two in flight with
        ``pipeline_depth=2``; with 1 each is read back before the next is submitted), BOS/EOS
        put in by the GPU as the ids are read back (the ``encode`` CLI's way)."""
        tok = self.tokenizer
        ahead = 2 if self.pipeline_depth == 2 else 0

        def note(b: _Batch, step: str, e: BaseException) -> None:
            if not isinstance(e, GPUForkError):   # (its message says what to do already)
                _add_note(e, f"while {step} documents {b.indices[0]}..{b.indices[-1]} "
                             f"({info.describe()})")

        batches = self._document_batches(info, start)
        if hasattr(tok, "stream"):
            encoded = tok.stream(batches, bos_id=self.bos_id, eos_id=self.eos_id, ahead=ahead,
                                 on_error=note)
            specials_in = True
        else:
            # An encoder with only submit(texts) (any object with submit().result() and a
            # vocab): its documents as Python objects, and BOS/EOS put in on the host, since
            # its submit takes no bos_id/eos_id.
            def submit(b: _Batch):
                return tok.submit(b.values.to_pylist()) if b.indices else None

            encoded = in_flight(submit, batches, ahead=ahead, on_error=note)
            specials_in = False
        for b, enc in encoded:
            b.encoding, b.specials_in = enc, specials_in
            yield b

    def _to_tensor(self, a: np.ndarray) -> torch.Tensor:
        np_dtype = np.int64 if self.dtype == torch.long else np.int32
        t = torch.from_numpy(np.ascontiguousarray(a, np_dtype))
        if self.pin_memory and get_worker_info() is None:
            if accelerator_available():
                t = t.pin_memory()
            else:
                warn_once("pin_memory=True ignored: no accelerator is available")
        return t

    def _documents(self, batches: Iterator[_Batch]) -> Iterator:
        state = self._state
        for b in batches:
            skipped_before = state["skipped_documents"]
            if b.encoding is not None:
                ids, offsets = b.encoding.ids, np.asarray(b.encoding.offsets, np.int64)
                if (self.add_bos or self.add_eos) and not b.specials_in:
                    ids, offsets = add_special_tokens(ids, offsets, self.bos_id, self.eos_id)
                flat = self._to_tensor(ids)
                for j, (pos, k) in enumerate(zip(b.positions, b.indices)):
                    t = flat[offsets[j] : offsets[j + 1]]
                    state["position"] = pos + 1
                    state["skipped_documents"] = skipped_before + sum(p < pos for p in b.skipped)
                    self.skipped_documents = state["skipped_documents"]
                    yield {"input_ids": t, "doc_index": k} if self.with_index else t
            state["position"] = b.end_position
            state["skipped_documents"] = self.skipped_documents = skipped_before + len(b.skipped)

    def _blocks(self, batches: Iterator[_Batch], start: dict) -> Iterator[dict]:
        state, L = self._state, self.seq_len
        carry = np.asarray(start["carry"], np.int64)
        skip = int(start["skip_blocks"])
        batch_start = start["position"]
        for b in batches:
            if b.encoding is not None:
                ids = b.encoding.ids
                if not b.specials_in:
                    ids, _ = add_special_tokens(ids, b.encoding.offsets, self.bos_id, self.eos_id)
                stream = np.concatenate([carry, ids])   # (int64: carry's dtype)
            else:
                stream = carry
            m = (len(stream) - 1) // L if len(stream) > L else 0
            if m > skip:
                flat = self._to_tensor(stream[: m * L + 1])
                inputs, labels = flat[: m * L].view(m, L), flat[1:].view(m, L)
                carry_before = carry.tolist()
                for i in range(skip, m):
                    # Resume point: re-read this batch's documents after the same carry and
                    # skip the blocks already yielded (the stream does not depend on batching).
                    state.update(position=batch_start, carry=carry_before, skip_blocks=i + 1)
                    yield {"input_ids": inputs[i], "labels": labels[i]}
            skip = max(0, skip - m)
            carry = stream[m * L :]
            batch_start = b.end_position
            state["skipped_documents"] += len(b.skipped)
            self.skipped_documents = state["skipped_documents"]
            state.update(position=batch_start, carry=carry.tolist(), skip_blocks=skip)
        if not self.drop_last and len(carry) and skip == 0:
            inp = np.full(L, self.pad_id, np.int64)
            lab = np.full(L, IGNORE_INDEX, np.int64)
            inp[: len(carry)] = carry
            lab[: len(carry) - 1] = carry[1:]
            state.update(carry=[], skip_blocks=0)
            yield {"input_ids": self._to_tensor(inp), "labels": self._to_tensor(lab)}


def _noted(docs: Iterator[DocBatch], info: ShardInfo) -> Iterator[DocBatch]:
    """``docs``, with a note on any exception raised while reading the source: the shard and
    the last document read before it (the failing one is the next of this shard)."""
    last = None
    while True:
        try:
            item = next(docs)
        except StopIteration:
            return
        except Exception as e:
            after = "before its first document" if last is None else f"after document {last}"
            _add_note(e, f"while reading the source ({info.describe()}), {after}")
            raise
        last = int(item.indices[-1])
        yield item


def _add_note(e: BaseException, note: str) -> None:
    if hasattr(e, "add_note"):
        e.add_note(note)


def _closing(gen: Iterator, inner: Iterator) -> Iterator:
    """``gen``, then ``inner.close()`` however ``gen`` ends (exhausted, closed, raised): the
    reader thread is joined when its consumer stops, not when the garbage collector runs."""
    try:
        yield from gen
    finally:
        inner.close()



# ================================================================================================
# DataLoader
# ================================================================================================
def make_dataloader(
    dataset: TokenizedDataset,
    batch_size: int | None = None,
    num_workers: int = 0,
    *,
    collate_fn: Callable | None = None,
    multiprocessing_context: Any = None,
    pin_memory: bool | None = None,
    stateful: bool = False,
    even_batches: bool | None = None,
    **kwargs: Any,
) -> DataLoader:
    """A DataLoader over ``dataset`` with a safe worker start method.

    Args:
        batch_size: items per batch; None yields the dataset's items one by one.
        num_workers: 0 runs the GPU session in this process (with a background thread);
            more gives each worker its own shard and its own GPU session.
        collate_fn: default :class:`PadCollator` (documents mode) or :func:`packed_collate`.
        multiprocessing_context: see :func:`choose_context` (None → spawn/forkserver).
        pin_memory: default ``dataset.pin_memory`` (honoured only with an accelerator).
        stateful: build ``torchdata.stateful_dataloader.StatefulDataLoader`` (resumable with
            workers: ``state_dict()`` / ``load_state_dict()``).
        even_batches: every DDP rank yields as many batches as the rank with the most (a
            shorter shard repeats its first batches: :mod:`torch_gpubpe.integrations.even_batches`);
            default: on when ``torch.distributed`` runs more than one rank.
        kwargs: passed to the DataLoader (``prefetch_factor``, ``persistent_workers``, ...).
    Raises:
        GPUForkError: ``multiprocessing_context="fork"`` after this process opened the GPU.
        ImportError: ``stateful=True`` without ``torchdata``.
    """
    if isinstance(dataset, TokenizedDataset):
        dataset.resolve_distributed()
        if collate_fn is None and batch_size is not None:
            collate_fn = PadCollator(pad_id=dataset.pad_id) if dataset.mode == "documents" \
                else packed_collate
        if pin_memory is None:
            pin_memory = dataset.pin_memory
    pin_memory = bool(pin_memory) and accelerator_available()
    ctx = choose_context(num_workers, multiprocessing_context)
    cls = DataLoader
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader as cls  # noqa: N813
    if even_batches or (even_batches is None and distributed_ranks() > 1):
        cls = even_loader_class(cls)
    return cls(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate_fn,
        multiprocessing_context=ctx,
        pin_memory=pin_memory,
        **kwargs,
    )


__all__ = [
    "IGNORE_INDEX",
    "PadCollator",
    "ShardInfo",
    "TextFiles",
    "TokenizedDataset",
    "add_special_tokens",
    "choose_context",
    "gpu_touched",
    "make_dataloader",
    "pad_collate",
    "packed_collate",
]
