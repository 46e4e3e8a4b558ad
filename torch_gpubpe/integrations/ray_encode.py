"""Ray Data's encoder of Arrow batches (:class:`TokenizeBatches`, applied by
:func:`tokenize_dataset`), and how the Ray actors are mapped over a dataset on GPUs. The
overview of the Ray recipes is :mod:`torch_gpubpe.integrations.ray`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from torch_gpubpe.core.vocab import Vocab
from torch_gpubpe.errors import InputError
from torch_gpubpe.integrations.ray_arrow import (ids_and_offsets, packed_chunks, table_with,
                                                 token_column)
from torch_gpubpe.integrations.ray_gpu import pin_assigned_gpu

DEFAULT_SUB_BATCH_BYTES = 16 << 20
DEFAULT_BATCH_ROWS = 32_768


def _vocab(vocab) -> Vocab:
    if isinstance(vocab, Vocab):
        return vocab
    if isinstance(vocab, (str, os.PathLike)):
        p = Path(vocab)
        return Vocab.load(p / "vocab.json" if p.is_dir() else p)
    raise TypeError(f"vocab must be a Vocab or the path of a vocab.json, got {type(vocab).__name__}")


class TokenizeBatches:
    """Ray Data callable class: Arrow batches of documents → the same rows plus token ids.

    Args:
        vocab: a :class:`~torch_gpubpe.core.vocab.Vocab`, the path of a ``vocab.json``, or a
            :class:`~torch_gpubpe.encoding.tokenizer.Tokenizer` (with its options, e.g. its pre-tokenizer).
        text_column: the column with the documents (string or binary; no nulls).
        output_column: the token column added (``list<uint16>``, or ``list<uint32>`` for a
            vocab of more than 65,536 tokens).
        append_eos: append this special token (e.g. ``"<|endoftext|>"``) to every document
            (put in by the GPU at readback, ``Tokenizer.submit_packed(eos_id=...)``).
        keep_columns: input columns kept in the output (default: all; ``()`` keeps only the
            token column).
        sub_batch_bytes: text per GPU submit; two are in flight, so the host packs one while the
            GPU encodes the other.
        pre_tokenizer: the word split (``Tokenizer(vocab, pre_tokenizer=...)``; default the
            vocab's, DESIGN.md §2).
        open_gpu: open the GPU session in ``__init__`` (default; in a Ray actor that is the
            actor's start, which overlaps the first read instead of delaying the first batch),
            with a warm-up encode that builds every pipeline a batch uses; ``False``: on the
            first batch.

    ``__call__(batch: pyarrow.Table) -> pyarrow.Table``; the tokens equal
    ``Tokenizer(vocab).encode_batch`` of the column's documents (DESIGN.md §4), whatever the
    batch size. Thread-safe: two calls may run at once (:func:`tokenize_dataset`), their
    sub-batches sharing the Tokenizer's two GPU slots.

    Attributes:
        timings: seconds of the start-up steps (``"pin_gpu"``, ``"open_gpu"``, ``"warm_up"``).

    Raises (from ``__call__``):
        InputError: the column is missing, not text, or holds a null (names the row).
    """

    def __init__(self, vocab, *, text_column: str = "text", output_column: str = "input_ids",
                 append_eos: str | None = None, keep_columns: Sequence[str] | None = None,
                 sub_batch_bytes: int = DEFAULT_SUB_BATCH_BYTES,
                 pre_tokenizer: str | None = None, open_gpu: bool = True) -> None:
        from torch_gpubpe.encoding.tokenizer import Tokenizer

        self._tok = vocab if isinstance(vocab, Tokenizer) else None   # pickled without a session
        if self._tok is not None and pre_tokenizer is not None:
            raise ValueError("pass pre_tokenizer with a Vocab, not with a Tokenizer (it has one)")
        self.vocab = self._tok.vocab if self._tok is not None else _vocab(vocab)
        self.pre_tokenizer = pre_tokenizer
        self.text_column, self.output_column = text_column, output_column
        self.keep_columns = None if keep_columns is None else list(keep_columns)
        self.sub_batch_bytes = int(sub_batch_bytes)
        self.eos = None if append_eos is None else self.vocab.token_to_id(append_eos)
        self.timings: dict[str, float] = {}
        self._pinned = False
        self._opening = None
        if open_gpu:
            import threading

            self.make_tokenizer()
            # On a thread: Ray sends the first batch once __init__ returns, so the device opens
            # while that batch travels (or, in TokenizeFiles, while its first file is read).
            self._opening = threading.Thread(target=self._open, name="torch_gpubpe ray open",
                                             daemon=True)
            self._open_error: BaseException | None = None
            self._opening.start()

    def _open(self) -> None:
        try:
            tok = self._tok
            t = time.perf_counter()
            tok.open()
            t1 = time.perf_counter()
            tok.submit_packed(np.frombuffer(b"warm up", np.uint8), np.array([0, 4, 7]),
                              eos_id=self.eos).result()
            self.timings.update(open_gpu=t1 - t, warm_up=time.perf_counter() - t1)
        except BaseException as e:  # noqa: BLE001 - re-raised by the first call (ready())
            self._open_error = e

    def ready(self):
        """Wait until the GPU session that ``__init__`` opens on a thread is open (and its
        warm-up encode done); returns ``self``. Raises what opening raised (e.g.
        :class:`~torch_gpubpe.errors.NoAdapterError`)."""
        opening = self._opening            # two calls at once may both wait here
        if opening is not None:
            opening.join()
            if self._open_error is not None:
                raise self._open_error
            self._opening = None
        return self

    def make_tokenizer(self):
        """The Tokenizer of this actor, created (and the assigned GPU pinned) on first use; its
        GPU session may still be opening (:meth:`tokenizer` waits for it)."""
        if not self._pinned:
            t = time.perf_counter()
            pin_assigned_gpu()          # before the session opens the device
            self.timings["pin_gpu"] = time.perf_counter() - t
            self._pinned = True
        if self._tok is None:
            from torch_gpubpe.encoding.tokenizer import Tokenizer

            kw = {} if self.pre_tokenizer is None else {"pre_tokenizer": self.pre_tokenizer}
            self._tok = Tokenizer(self.vocab, **kw)
        return self._tok

    def tokenizer(self):
        """The Tokenizer of this actor with its GPU session open (:meth:`ready`)."""
        tok = self.make_tokenizer()
        self.ready()
        return tok

    def __getstate__(self) -> dict:
        self.ready()
        return dict(self.__dict__, _opening=None)

    def encode_parts(self, data: np.ndarray, offsets: np.ndarray
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Packed documents (uint8 ``data``, int64 ``offsets`` from 0) → per sub-batch of about
        ``sub_batch_bytes``: (token ids, int64 token offsets from 0), two sub-batches on the
        GPU at once."""
        return self.encode_chunks([(data, offsets)])

    def encode_chunks(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]]
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`encode_parts` of several packed chunks back to back (an Arrow column's
        chunks, each zero copy: no concatenation), two sub-batches on the GPU at once across
        the chunks' ends (``Tokenizer.stream``)."""
        return [ids_and_offsets(enc)
                for _, enc in self.tokenizer().stream(self._sub_batches(chunks), eos_id=self.eos)]

    def _sub_batches(self, chunks: Sequence[tuple[np.ndarray, np.ndarray]]):
        """Each chunk cut at document ends into views of about ``sub_batch_bytes`` (packed:
        ``data`` and ``offsets`` from 0)."""
        for data, offsets in chunks:
            n = len(offsets) - 1
            cuts = [0]
            while cuts[-1] < n:
                target = offsets[cuts[-1]] + self.sub_batch_bytes
                cuts.append(max(cuts[-1] + 1,
                                min(n, int(np.searchsorted(offsets, target, "right")) - 1)))
            for a, b in zip(cuts[:-1], cuts[1:]):
                o = offsets[a:b + 1]
                yield SimpleNamespace(data=data[o[0]:o[-1]], offsets=o - o[0])

    def encode_packed(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and int64 token offsets of packed documents (:meth:`encode_parts` joined)."""
        parts = self.encode_parts(data, offsets)
        if not parts:
            return np.zeros(0, self.tokenizer().id_dtype), np.zeros(1, np.int64)
        ids = np.concatenate([i for i, _ in parts])
        base = np.cumsum([0] + [len(i) for i, _ in parts[:-1]])
        offs = np.concatenate([np.zeros(1, np.int64)] + [o[1:] + b for (_, o), b in zip(parts, base)])
        return ids, offs

    def __call__(self, batch):
        batch = table_with(batch, self.text_column, "text_column")
        parts = self.encode_chunks(packed_chunks(batch.column(self.text_column)))
        keep = batch.column_names if self.keep_columns is None else self.keep_columns
        out = batch.select([c for c in keep if c != self.output_column])
        return out.append_column(self.output_column,
                                 token_column(parts, self.tokenizer().id_dtype))


def tokenize_dataset(ds, vocab, *, num_gpus: float | None = 1, actors: int = 1,
                     batch_size: int = DEFAULT_BATCH_ROWS, calls_per_actor: int = 2,
                     ray_remote_args: dict | None = None, cls: type | None = None,
                     check_gpus: bool = True, **kwargs):
    """``ds.map_batches(TokenizeBatches, ...)`` with the settings that keep the GPU busy.

    Args:
        ds: a ``ray.data.Dataset`` with a text column.
        vocab: as :class:`TokenizeBatches`; ``kwargs`` go to it too (``text_column``,
            ``append_eos``, ``keep_columns``, ...).
        num_gpus: GPUs per actor (Ray assigns them; ``None`` or 0: none, e.g. lavapipe).
        actors: the fixed actor pool size (one GPU session each).
        batch_size: rows per call (Ray's docs: required with GPUs).
        calls_per_actor: Ray tasks (input blocks) running at once in an actor
            (``max_concurrent_calls_per_actor`` with ``enable_true_multi_threading``, Ray >=
            2.51; before, the actor's ``max_concurrency``): 2 overlaps one block's upload with
            the other's readback and with Ray's slicing and output puts.
        ray_remote_args: more actor options (``num_cpus``, ``runtime_env``, ...).
        cls: :class:`TokenizeBatches` (default) or a subclass of it.
        check_gpus: refuse ``num_gpus`` > 0 on a running Ray cluster that has fewer GPUs than
            one actor needs (Ray would wait for them forever); ``False`` for a cluster whose
            autoscaler adds GPU nodes later.
    Returns:
        the mapped ``Dataset`` (lazy), the input's columns plus the token column.
    Raises:
        InputError: ``num_gpus`` asks for more GPUs than the running cluster has.
    """
    check_gpus_available(num_gpus, check_gpus)
    return map_on_gpus(ds, cls or TokenizeBatches, {"vocab": vocab, **kwargs}, batch_size,
                        num_gpus, actors, calls_per_actor, ray_remote_args)


def map_on_gpus(ds, cls, ctor_kwargs: dict, batch_size: int, num_gpus, actors: int,
                 calls_per_actor: int, ray_remote_args: dict | None):
    """``ds.map_batches(cls, ...)`` on a fixed pool of ``actors`` actors, ``calls_per_actor``
    Ray tasks at once in each (true multi-threading where Ray has it)."""
    from ray.data import ActorPoolStrategy

    remote = dict(ray_remote_args or {})
    try:
        compute = ActorPoolStrategy(size=actors, max_concurrent_calls_per_actor=calls_per_actor,
                                    enable_true_multi_threading=calls_per_actor > 1)
    except TypeError:   # Ray < 2.51: calls run at once by the actor's thread count
        compute = ActorPoolStrategy(size=actors)
        remote.setdefault("max_concurrency", calls_per_actor)
    return ds.map_batches(cls, fn_constructor_kwargs=ctor_kwargs, batch_format="pyarrow",
                          batch_size=batch_size, compute=compute,
                          **({"num_gpus": num_gpus} if num_gpus else {}), **remote)


def check_gpus_available(num_gpus, check_gpus: bool) -> None:
    """Refuse ``num_gpus`` per actor on a running Ray cluster with fewer GPUs (with
    ``check_gpus``): Ray would wait for them forever."""
    import ray

    if check_gpus and num_gpus and ray.is_initialized():
        have = ray.cluster_resources().get("GPU", 0)
        if have < num_gpus:
            raise InputError(
                f"num_gpus={num_gpus} per actor, but the Ray cluster has {have:g} GPU(s), so "
                "Ray would wait for one forever; pass num_gpus=0 to use a CPU adapter "
                "(lavapipe), start Ray with GPUs, or check_gpus=False if an autoscaler adds "
                "GPU nodes")

