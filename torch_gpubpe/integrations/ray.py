"""Ray Data recipes: tokenize and count a corpus of many files across machines, one GPU
session per actor.

Ray Data runs the batch job (reading, scheduling, retries, spilling); this module gives it the
stateful callables, for ``Dataset.map_batches`` with ``batch_format="pyarrow"``:

* :class:`TokenizeFiles` (:func:`tokenize_files`, :func:`write_shards_from_files`): a dataset
  of file paths (``ray.data.from_items``) → the files' token ids, each actor reading its files
  itself with the ``encode`` CLI's reader and loop (no text through Ray's object store): token
  tables with ``path`` and ``row``, or shard parts written by the actor (one per file) merged
  into one shard list: for files on disk (``benchmarks/ray_encode.py`` compares it with
  ``read_parquet`` + :class:`TokenizeBatches` and with the CLI);
* :class:`TokenizeBatches`: Arrow batches of documents → the same rows with a token column
  (``list<uint16>``, ``list<uint32>`` above 65,536 tokens), equal to
  :meth:`torch_gpubpe.encoding.tokenizer.Tokenizer.encode_batch` of the same documents. The text column is
  read zero copy (its UTF-8 buffer and offsets go to the encoder as they are), the batch is cut
  into sub-batches of ``sub_batch_bytes`` of which two are in flight on the GPU, and the token
  column is one list array per sub-batch over the GPU's id array (no copy, no per-row Python
  objects); a batch Ray joined from several blocks is encoded chunk by chunk (no
  concatenation). The GPU session opens from ``__init__`` (Ray's actor start) on a thread, so
  the first batch travels meanwhile; :func:`tokenize_dataset` applies it with the settings
  below. For a dataset from another Ray Data step (``read_parquet``, filters, joins);
* :class:`WriteShards`: Arrow batches → token shards that training code reads (llm.c,
  Megatron-LM or flat, :mod:`torch_gpubpe.io.shards`), one set per batch; then
  :func:`merge_shard_lists` makes one shard list (the llm.c validation shard first, Megatron's
  ``--data-path`` prefixes);
* :class:`CountBatches`: Arrow batches → one counts file per batch
  (:mod:`torch_gpubpe.training.counts_file`, GPU or CPU counter); :func:`count_dataset` runs it and merges the
  files (streaming k-way merge): the vocabulary of a corpus spread over machines, trained
  from the result with :func:`torch_gpubpe.training.counts_file.train_from_counts_file`.

Ray's rules that apply (Ray Data docs, "Transforming data" / "Stateful transforms"): a callable
class is constructed once per actor (``concurrency`` actors), so the GPU session lives as long
as the actor; with ``num_gpus`` set, ``batch_size`` must be set too. An actor given a GPU
(``num_gpus=1``) opens the Vulkan adapter of the CUDA device Ray assigned to it
(``CUDA_VISIBLE_DEVICES``), matched by device UUID (:mod:`torch_gpubpe.gpu.adapters`): NVML's when
the machine has one NVIDIA GPU or ``CUDA_VISIBLE_DEVICES`` names it by UUID (no torch import),
else torch.cuda's; on a machine without CUDA it opens the default adapter.

Throughput (:func:`tokenize_dataset`; ``benchmarks/ray_encode.py`` measures it, with 1 and 2
calls at once): Ray Data hands an actor one task per input block and runs the task's batches
one after another, so with one task at a time the GPU idles while Ray slices the next block
and puts the last output block in the object store. ``ActorPoolStrategy(
max_concurrent_calls_per_actor=2, enable_true_multi_threading=True)`` runs two tasks at once
(the Tokenizer is thread-safe and has two GPU slots): one block's upload overlaps the other's
readback and Ray's per-block work. Ray 2.60's ``read_parquet`` starts 32 footer-reading actors
per read (``RAY_DATA_PARQUET_FOOTER_NUM_ACTORS``), 32 processes that compete with the GPU
actor's start on a small machine; set that variable (e.g. to 2) in the environment of the
workers (the job's ``runtime_env``, or the driver's before ``ray.init`` starts a local
cluster) when the files are few and local. An actor's start (before ``__init__`` runs)
includes its worker importing ``ray.data`` and this package; Ray's system config
``preload_python_modules`` (``RAY_preload_python_modules=ray.data,torch_gpubpe.integrations.ray,
torch_gpubpe.encoding.tokenizer,torch_gpubpe.io.readers`` in the environment of ``ray start``, or of the
driver that starts a local cluster) makes the workers Ray starts ahead import them before
taking work (``benchmarks/ray_encode.py --preload-runs`` measures it). ``ray`` is an optional
dependency (``pip install torch_gpubpe[ray]``); this module imports it only inside functions.

A Ray worker is not the CLI's process: Ray sets ``OMP_NUM_THREADS`` to the actor's ``num_cpus``
(1 without it), which sizes Arrow's CPU pool (``pyarrow.cpu_count()``), and runs its workers at
niceness 15. :class:`TokenizeFiles` reads as the CLI does anyway: FileReader decodes parquet
and JSON Lines on its own threads (sized by ``os.cpu_count()``), not on Arrow's pool (with it,
an actor decoded every row group on one thread: the H200 run of 17:49 UTC had the actor at
~1.5 cores and 20% of the CLI's rate); CSV and
Arrow IPC files still use Arrow's pool (recorded in ``stats``, warned once: pass
``ray_remote_args={"num_cpus": N}``).

Examples (one GPU, parquet files with a ``text`` column)::

    from torch_gpubpe import Vocab
    from torch_gpubpe.integrations.ray import tokenize_files, write_shards_from_files

    vocab = Vocab.load("v.json")
    # llm.c shards of every file, each actor writing its files' parts; one shard list after
    info = write_shards_from_files("corpus/*.parquet", vocab, "tokens/", fmt="llmc",
                                   num_gpus=1, actors=1)
    # or token tables (path, row, input_ids) for more Ray Data steps
    ds = tokenize_files("corpus/*.parquet", vocab, num_gpus=1, actors=1)

    import ray
    from torch_gpubpe.integrations.ray import tokenize_dataset

    ds = ray.data.read_parquet("corpus/")
    ds = tokenize_dataset(ds, vocab, num_gpus=1, actors=1)
    # = ds.map_batches(TokenizeBatches, fn_constructor_kwargs={"vocab": ...},
    #                  batch_format="pyarrow", batch_size=32_768, num_gpus=1,
    #                  compute=ActorPoolStrategy(size=1, max_concurrent_calls_per_actor=2,
    #                                            enable_true_multi_threading=True))
    ds.write_parquet("tokens/")        # columns: the input's, plus input_ids
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_gpubpe import notices
from torch_gpubpe.errors import InputError
from torch_gpubpe.core.vocab import Vocab

DEFAULT_SUB_BATCH_BYTES = 16 << 20
DEFAULT_BATCH_ROWS = 32_768


def _vocab(vocab) -> Vocab:
    if isinstance(vocab, Vocab):
        return vocab
    if isinstance(vocab, (str, os.PathLike)):
        p = Path(vocab)
        return Vocab.load(p / "vocab.json" if p.is_dir() else p)
    raise TypeError(f"vocab must be a Vocab or the path of a vocab.json, got {type(vocab).__name__}")


def _nvml_uuids() -> list[str] | None:
    """The UUIDs of the machine's NVIDIA GPUs in NVML's order (``libnvidia-ml.so.1`` by ctypes:
    no torch import, no CUDA context), None when NVML is missing or fails."""
    from torch_gpubpe.gpu.adapters import norm_uuid

    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nv.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        n = ctypes.c_uint(0)
        if nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0:
            return None
        out = []
        for i in range(n.value):
            h, buf = ctypes.c_void_p(), ctypes.create_string_buffer(96)
            if nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0 or \
                    nv.nvmlDeviceGetUUID(h, buf, 96) != 0:
                return None
            out.append(norm_uuid(buf.value.decode("ascii", "replace")))
        return out if all(out) else None
    finally:
        nv.nvmlShutdown()


def _assigned_uuid_without_torch(visible: str) -> str | None:
    """The UUID of CUDA device 0 under ``CUDA_VISIBLE_DEVICES=visible`` where that needs no
    CUDA runtime: the variable names it (``GPU-…``), or NVML sees one GPU only (CUDA's order
    cannot differ then); None otherwise (torch.cuda decides)."""
    from torch_gpubpe.gpu.adapters import norm_uuid

    first = visible.split(",")[0].strip()
    if first.upper().startswith("GPU-"):
        return norm_uuid(first)
    uuids = _nvml_uuids()
    if uuids is not None and len(uuids) == 1 and first in ("0", ""):
        return uuids[0]
    return None


def _pin_assigned_gpu() -> None:
    """In a Ray actor given a GPU: open the Vulkan adapter of that GPU (CUDA device 0 under the
    ``CUDA_VISIBLE_DEVICES`` Ray set), by UUID, unless ``TORCH_GPUBPE_ADAPTER`` says otherwise.
    The UUID comes from :func:`_assigned_uuid_without_torch` where it can (importing torch and
    starting CUDA take seconds), else from ``torch.cuda``.
    """
    from torch_gpubpe.gpu.adapters import ENV_ADAPTER, cuda_devices

    if os.environ.get(ENV_ADAPTER, "").strip():
        return
    try:
        import ray

        assigned = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # noqa: BLE001 - not in a Ray worker
        assigned = []
    if not assigned:
        return
    fast = _assigned_uuid_without_torch(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if fast:
        os.environ[ENV_ADAPTER] = f"uuid:{fast}"
        return
    devs = cuda_devices()
    if devs and devs[0].uuid:
        os.environ[ENV_ADAPTER] = f"uuid:{devs[0].uuid}"
        return
    notices.warn(f"torch_gpubpe: Ray assigned GPU {assigned} to this actor but torch.cuda "
                 "cannot tell its UUID, so wgpu's default adapter opens (on a machine with "
                 f"several GPUs maybe not the assigned one); set {ENV_ADAPTER}=uuid:... per "
                 "actor (runtime_env)", stacklevel=2)


def _packed(column) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow string/binary column → ``(uint8 data, int64 offsets from 0)``, zero copy
    (:func:`torch_gpubpe.io.readers.arrow_to_packed`).

    Raises:
        InputError: a null document (names its row in the batch) or a non-text column.
    """
    from torch_gpubpe.io.readers import arrow_to_packed

    return arrow_to_packed(column, nulls="error")


def _packed_chunks(column) -> list[tuple[np.ndarray, np.ndarray]]:
    """An Arrow string/binary column → its chunks as :func:`_packed` pairs, each zero copy
    (a batch Ray joined from several blocks stays in pieces; empty chunks dropped).

    Raises:
        InputError: as :func:`_packed` (a null's row counted over the whole column).
    """
    import pyarrow as pa

    if not isinstance(column, pa.ChunkedArray) or column.num_chunks <= 1 or column.null_count:
        return [_packed(column)]       # one piece, or the null's row named over the column
    return [_packed(c) for c in column.chunks if len(c)]


def _table_with(batch, column: str, option: str):
    """A Ray batch (``pyarrow.Table`` or ``RecordBatch``) as a ``pyarrow.Table``, checked to hold
    ``column``.

    Raises:
        InputError: the batch has no ``column`` (names the batch's columns and ``option=``, the
            argument to pass).
    """
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if column not in batch.column_names:
        raise InputError(f"the batch has no column {column!r} (columns: "
                         f"{batch.column_names}); pass {option}=")
    return batch


def _token_column(parts: Sequence[tuple[np.ndarray, np.ndarray]], id_dtype):
    """Sub-batches' (flat ids, int64 token offsets from 0) → one ``list<id dtype>`` chunked
    array, a chunk per sub-batch over its ids without a copy (``large_list`` when a sub-batch
    passes 2^31 tokens)."""
    import pyarrow as pa

    large = any(int(o[-1]) >= 1 << 31 for _, o in parts)
    make = pa.LargeListArray if large else pa.ListArray
    chunks = [make.from_arrays(pa.array(o if large else o.astype(np.int32)), pa.array(i))
              for i, o in parts]
    typ = (pa.large_list if large else pa.list_)(pa.from_numpy_dtype(np.dtype(id_dtype)))
    return pa.chunked_array(chunks, typ)


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

            self._make_tokenizer()
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

    def _make_tokenizer(self):
        if not self._pinned:
            t = time.perf_counter()
            _pin_assigned_gpu()          # before the session opens the device
            self.timings["pin_gpu"] = time.perf_counter() - t
            self._pinned = True
        if self._tok is None:
            from torch_gpubpe.encoding.tokenizer import Tokenizer

            kw = {} if self.pre_tokenizer is None else {"pre_tokenizer": self.pre_tokenizer}
            self._tok = Tokenizer(self.vocab, **kw)
        return self._tok

    def _tokenizer(self):
        tok = self._make_tokenizer()
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
        the chunks' ends."""
        tok = self._tokenizer()
        pending, parts = [], []
        for data, offsets in chunks:
            n = len(offsets) - 1
            cuts = [0]
            while cuts[-1] < n:
                target = offsets[cuts[-1]] + self.sub_batch_bytes
                cuts.append(max(cuts[-1] + 1,
                                min(n, int(np.searchsorted(offsets, target, "right")) - 1)))
            for a, b in zip(cuts[:-1], cuts[1:]):
                o = offsets[a:b + 1]
                pending.append(tok.submit_packed(data[o[0]:o[-1]], o - o[0], eos_id=self.eos))
                if len(pending) == 2:
                    parts.append(self._result(pending.pop(0)))
        parts += [self._result(p) for p in pending]
        return parts

    @staticmethod
    def _result(p) -> tuple[np.ndarray, np.ndarray]:
        return TokenizeBatches._result_of(p.result())

    @staticmethod
    def _result_of(enc) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(enc.ids), np.asarray(enc.offsets, np.int64)

    def encode_packed(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and int64 token offsets of packed documents (:meth:`encode_parts` joined)."""
        parts = self.encode_parts(data, offsets)
        if not parts:
            return np.zeros(0, self._tokenizer().id_dtype), np.zeros(1, np.int64)
        ids = np.concatenate([i for i, _ in parts])
        base = np.cumsum([0] + [len(i) for i, _ in parts[:-1]])
        offs = np.concatenate([np.zeros(1, np.int64)] + [o[1:] + b for (_, o), b in zip(parts, base)])
        return ids, offs

    def __call__(self, batch):
        batch = _table_with(batch, self.text_column, "text_column")
        parts = self.encode_chunks(_packed_chunks(batch.column(self.text_column)))
        keep = batch.column_names if self.keep_columns is None else self.keep_columns
        out = batch.select([c for c in keep if c != self.output_column])
        return out.append_column(self.output_column,
                                 _token_column(parts, self._tokenizer().id_dtype))


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
    _check_gpus(num_gpus, check_gpus)
    return _map_on_gpus(ds, cls or TokenizeBatches, {"vocab": vocab, **kwargs}, batch_size,
                        num_gpus, actors, calls_per_actor, ray_remote_args)


def _map_on_gpus(ds, cls, ctor_kwargs: dict, batch_size: int, num_gpus, actors: int,
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


def _check_gpus(num_gpus, check_gpus: bool) -> None:
    import ray

    if check_gpus and num_gpus and ray.is_initialized():
        have = ray.cluster_resources().get("GPU", 0)
        if have < num_gpus:
            raise InputError(
                f"num_gpus={num_gpus} per actor, but the Ray cluster has {have:g} GPU(s), so "
                "Ray would wait for one forever; pass num_gpus=0 to use a CPU adapter "
                "(lavapipe), start Ray with GPUs, or check_gpus=False if an autoscaler adds "
                "GPU nodes")


class TokenizeFiles:
    """Ray Data callable class: rows naming files → the token ids of the files' documents,
    the files read by the actor itself with the ``encode`` CLI's reader.

    The rows carry paths only, so the text never passes through Ray's object store: each call
    runs the ``encode`` CLI's pipeline (:mod:`torch_gpubpe.encoding.stream`, the same code) over its
    files: one :class:`torch_gpubpe.io.readers.FileReader` over all of them (parquet row groups /
    JSON Lines chunks read ahead on its threads, across the files' ends; parquet decoded on
    those threads, not on Arrow's CPU pool, which Ray's ``OMP_NUM_THREADS=1`` sizes to one
    thread), the pack thread, two GPU batches in flight, on a thread of its own, so Ray's puts
    of the token blocks (or the shard writes) overlap the GPU's work. With
    ``ray.data.read_parquet`` + :class:`TokenizeBatches` instead, Ray tasks read every byte,
    put it in the object store and the actor takes it from there.

    Args:
        vocab, output_column, append_eos, pre_tokenizer, open_gpu: as
            :class:`TokenizeBatches`.
        path_column: the input column with the file paths (on a file system every node
            mounts, for a cluster).
        index_column: an input column of int file numbers naming the shard parts (what
            :func:`tokenize_files` gives: the file's position), so :func:`merge_shard_lists`
            puts them in file order; default (or absent): a hash of the path.
        text_column: the column / JSON field holding the documents.
        format: one of :data:`torch_gpubpe.io.readers.FORMATS` for every file (default: from each
            file's extension).
        batch_bytes: text per GPU submit (the CLI's ``--batch-bytes``).
        read_threads: FileReader threads per call (default: the CPU count, at most 16).
        read_nice: the reading threads' added niceness (FileReader's ``nice``; default the
            ``encode`` CLI's ``--read-nice`` default, ``cli.ENCODE_READ_NICE``; Ray's workers
            already run at niceness 15, Linux caps it at 19).
        out_dir: write shards instead of returning tokens: one part per file,
            ``out_dir/part-<index>`` (:class:`torch_gpubpe.io.shards.ShardWriter`, as the
            ``encode`` CLI writes them; a folder every node can write to); then
            :func:`merge_shard_lists` makes one shard list.
        fmt, name, eot, shard_tokens: with ``out_dir``: the shard format (``"llmc"``,
            ``"megatron"``, ``"flat"``), file prefix, end-of-text token (llm.c: before each
            document, required; the others: after it, or ``None`` for none; put in by the GPU),
            tokens per shard.

    ``__call__(batch: pyarrow.Table) -> Iterator[pyarrow.Table]`` (a generator: Ray makes
    blocks of what it yields as it goes). Without ``out_dir``: one table per GPU batch, in file
    and row order: ``path`` (string), ``row`` (int64: the document's row in its file; rows whose
    text is None are skipped, as the ``encode`` CLI skips them) and ``output_column``
    (``list<uint16>``, or ``list<uint32>`` above 65,536 tokens). With ``out_dir``: one row per
    file: ``path``, ``part``, ``key`` (str), ``num_documents``, ``num_tokens`` (int64). The
    tokens equal ``Tokenizer(vocab).encode_batch`` of the documents (DESIGN.md §4).

    Attributes:
        stats: ``skipped_none`` (rows whose text is None), ``calls`` (finished), ``seconds``:
            the pipeline's stages summed over the calls (``encode --debug``'s names:
            ``wait_reader``, ``upload_and_submit``, ``wait_gpu_and_readback``, ...);
            ``arrow_cpu_count`` when CSV / Arrow IPC files were decoded on an Arrow CPU pool
            smaller than the reader's thread count (warned once).

    Raises (from ``__call__``):
        InputError: the path column is missing; a file cannot be read or a value is not text
            (FileReader's messages name the file and row).
    """

    def __init__(self, vocab, *, path_column: str = "path", index_column: str = "index",
                 text_column: str = "text", format: str | None = None,
                 output_column: str = "input_ids", append_eos: str | None = None,
                 batch_bytes: int = DEFAULT_SUB_BATCH_BYTES, read_threads: int | None = None,
                 read_nice: int | None = None,
                 pre_tokenizer: str | None = None, open_gpu: bool = True, out_dir=None,
                 fmt: str = "llmc", name: str = "data", eot: str | None = "<|endoftext|>",
                 shard_tokens: int | None = None) -> None:
        from torch_gpubpe.io.shards import DEFAULT_SHARD_TOKENS, OUTPUT_FORMATS

        if out_dir is not None and fmt not in OUTPUT_FORMATS:
            raise ValueError(f"fmt must be one of {OUTPUT_FORMATS}, got {fmt!r}")
        if out_dir is not None and append_eos is not None:
            raise ValueError("with out_dir, the shards' end-of-text token is eot=, not "
                             "append_eos=")
        self.enc = TokenizeBatches(vocab, text_column=text_column, output_column=output_column,
                                   append_eos=append_eos, sub_batch_bytes=batch_bytes,
                                   pre_tokenizer=pre_tokenizer, open_gpu=open_gpu)
        self.vocab, self.timings = self.enc.vocab, self.enc.timings
        self.path_column, self.index_column = path_column, index_column
        self.text_column, self.format = text_column, format
        self.output_column, self.batch_bytes = output_column, int(batch_bytes)
        self.read_threads = read_threads
        if read_nice is None:
            from torch_gpubpe.cli.main import ENCODE_READ_NICE as read_nice   # the CLI's default
        self.read_nice = read_nice
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.fmt, self.name = fmt, name
        self.shard_tokens = DEFAULT_SHARD_TOKENS if shard_tokens is None else int(shard_tokens)
        self.eot_id = None
        if self.out_dir is not None:
            self.eot_id = None if eot is None else self.vocab.token_to_id(eot)
            if fmt == "llmc" and self.eot_id is None:
                raise ValueError("fmt='llmc' puts eot before every document: pass eot=")
            self._specials = ({} if self.eot_id is None else
                              {"bos_id" if fmt == "llmc" else "eos_id": self.eot_id})
        else:
            self._specials = {} if self.enc.eos is None else {"eos_id": self.enc.eos}
        self.stats: dict = {"skipped_none": 0, "calls": 0, "seconds": {}}
        self._lock = threading.Lock()

    def ready(self):
        """:meth:`TokenizeBatches.ready`: wait for the GPU session; returns ``self``."""
        self.enc.ready()
        return self

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, batch):
        import pyarrow as pa

        from torch_gpubpe.io.readers import prefetch

        batch = _table_with(batch, self.path_column, "path_column")
        paths = [os.fspath(p) for p in batch.column(self.path_column).to_pylist()]
        keys = None
        if self.index_column in batch.column_names:
            keys = [f"{int(k):012d}" for k in batch.column(self.index_column).to_pylist()]
        encoded = prefetch(self._encoded(paths), 2, "torch_gpubpe ray encode")
        if self.out_dir is None:
            id_dtype = self.enc._tokenizer().id_dtype
            names = pa.array(paths, pa.string())
            for file, row, ids, offsets in encoded:
                yield pa.table({"path": names.take(pa.array(file)),
                                "row": pa.array(row),
                                self.output_column: _token_column([(ids, offsets)], id_dtype)})
            return
        yield from self._write(paths, keys, encoded)

    def _write(self, paths: list[str], keys: list[str] | None, encoded):
        """Shards mode: one ShardWriter per file (the part), written on the calling thread
        while the prefetch thread keeps the GPU busy (a GPU batch across a file's end is cut
        there); a row per file, in order (empty files too)."""
        import hashlib

        import pyarrow as pa

        from torch_gpubpe.io.shards import ShardWriter

        if keys is None:
            keys = [hashlib.blake2b(os.path.abspath(p).encode(), digest_size=12).hexdigest()
                    for p in paths]
        state = {"file": -1, "writer": None, "docs": 0}

        def open_next():
            state["file"] += 1
            state["docs"] = 0
            state["writer"] = ShardWriter(
                self.out_dir / f"part-{keys[state['file']]}", self.fmt, len(self.vocab),
                name=self.name, eot_id=self.eot_id, shard_tokens=self.shard_tokens,
                overwrite=True)

        def close_current():
            f, w = state["file"], state["writer"]
            info = w.close({"num_documents": state["docs"], "source": paths[f]})
            state["writer"] = None
            return pa.table({"path": [paths[f]], "part": [str(w.out)], "key": [keys[f]],
                             "num_documents": [state["docs"]],
                             "num_tokens": [int(info["num_tokens"])]})

        open_next()
        for file, _rows, ids, offsets in encoded:
            cuts = np.flatnonzero(np.diff(file)) + 1          # the batch's documents by file
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(file)]):
                while state["file"] < file[a]:                # files before it are complete
                    yield close_current()
                    open_next()
                o = offsets[a:b + 1]
                state["writer"].add(ids[o[0]:o[-1]], o - o[0],
                                    eot_included=self.eot_id is not None)
                state["docs"] += int(b - a)
        yield close_current()
        while state["file"] < len(paths) - 1:                 # empty files at the end
            open_next()
            yield close_current()

    _warned_pool = False

    def _check_arrow_pool(self, reader) -> None:
        """CSV and Arrow IPC files are parsed / decompressed on Arrow's CPU pool, sized by
        ``OMP_NUM_THREADS`` (Ray: 1 in an actor without ``num_cpus``): say so (stats, once)."""
        import pyarrow as pa

        slow = sorted({f for f in reader.formats if f in ("csv", "arrow")})
        if slow and pa.cpu_count() < reader.threads:
            self.stats["arrow_cpu_count"] = pa.cpu_count()
            if not TokenizeFiles._warned_pool:
                TokenizeFiles._warned_pool = True
                notices.warn(f"torch_gpubpe.integrations.ray: {'/'.join(slow)} files are decoded on Arrow's "
                             f"CPU pool, here {pa.cpu_count()} thread(s) (OMP_NUM_THREADS="
                             f"{os.environ.get('OMP_NUM_THREADS')}; Ray sets it to the actor's "
                             f"num_cpus, 1 without): pass ray_remote_args={{'num_cpus': "
                             f"{reader.threads}}} or set OMP_NUM_THREADS in its runtime_env "
                             "(parquet and JSON Lines are decoded on the reader's own threads)",
                             stacklevel=3)

    def _encoded(self, paths: list[str]):
        """On the prefetch thread: the ``encode`` CLI's pipeline (:mod:`torch_gpubpe.encoding.stream`:
        one FileReader over the call's files, its read-ahead threads and pack thread, two GPU
        batches in flight) → per GPU batch ``(file position, row in the file, ids, offsets)``
        (int64 arrays per document; the file from ``FileReader.file_starts``)."""
        from torch_gpubpe.encoding.stream import encode_in_flight, read_ahead
        from torch_gpubpe.io.readers import FileReader

        stages: dict = {}
        st: dict = {}
        reader = FileReader(paths, text_column=self.text_column, format=self.format,
                            threads=self.read_threads, nice=self.read_nice)
        self._check_arrow_pool(reader)
        pump = read_ahead(reader, batch_bytes=self.batch_bytes, stats=st,
                          name="torch_gpubpe ray read")
        tok = self.enc._make_tokenizer()
        try:
            for p, enc in encode_in_flight(tok, iter(pump), stages, specials=self._specials,
                                           before_first=self.enc.ready):
                starts = np.array(reader.file_starts, np.int64).reshape(-1, 2)
                k = np.searchsorted(starts[:, 0], p.indices, "right") - 1
                ids, offsets = TokenizeBatches._result_of(enc)
                yield starts[k, 1], p.indices - starts[k, 0], ids, offsets
        finally:
            pump.close()
            with self._lock:
                self.stats["skipped_none"] += st.get("skipped_none", 0)
                for key, v in stages.items():
                    self.stats["seconds"][key] = self.stats["seconds"].get(key, 0.0) + v
                self.stats["calls"] += 1


def tokenize_files(paths, vocab, *, num_gpus: float | None = 1, actors: int = 1,
                   files_per_call: int = 4, calls_per_actor: int = 2,
                   ray_remote_args: dict | None = None, cls: type | None = None,
                   check_gpus: bool = True, **kwargs):
    """The token ids of files' documents as a Ray ``Dataset``: a dataset of the paths
    (``ray.data.from_items``, one block per file) mapped by :class:`TokenizeFiles`, which
    reads the files in the actor itself (the ``encode`` CLI's reader and loop).

    Args:
        paths: files or glob patterns (:func:`torch_gpubpe.io.readers.expand_paths`; each must
            exist where the driver runs, and on every node at the same path).
        vocab: as :class:`TokenizeBatches`; ``kwargs`` go to :class:`TokenizeFiles`
            (``text_column``, ``format``, ``append_eos``, ``batch_bytes``, ...).
        num_gpus, actors, calls_per_actor, ray_remote_args, check_gpus: as
            :func:`tokenize_dataset` (two calls at once: one file's start and end overlap the
            other's GPU work).
        files_per_call: files per :class:`TokenizeFiles` call (Ray's ``batch_size``; the unit
            of scheduling and of retry); a call reads its next file while it encodes one.
        cls: :class:`TokenizeFiles` (default) or a subclass of it.
    Returns:
        the ``Dataset`` (lazy) of ``path``, ``row`` and the token column; with ``out_dir=``
        (shards written by the actor), of one row per file for :func:`merge_shard_lists`
        (:func:`write_shards_from_files` runs both).
    Raises:
        InputError: no such file, or ``num_gpus`` more than the running cluster has.

    Why a dataset of paths instead of ``ray.data.read_parquet`` (which spreads the reading
    over Ray tasks, the usual way): there every byte of text goes from a read task through
    Ray's object store into the actor, which then waits for Ray's reads and slicing; here each
    file's bytes stay in one process from disk to GPU, as in the CLI
    (``benchmarks/ray_encode.py`` measures both on the same files). Use ``read_parquet`` +
    :func:`tokenize_dataset` when the dataset comes from another Ray Data step (filters,
    joins) or when the readers need more CPUs than a GPU node has.
    """
    import ray

    from torch_gpubpe.io.readers import expand_paths

    _check_gpus(num_gpus, check_gpus)
    files = expand_paths(paths)
    if not files:
        raise InputError(f"tokenize_files: no files in {paths!r}")
    ds = ray.data.from_items([{"path": f, "index": k} for k, f in enumerate(files)],
                             override_num_blocks=len(files))
    return _map_on_gpus(ds, cls or TokenizeFiles, {"vocab": vocab, **kwargs}, files_per_call,
                        num_gpus, actors, calls_per_actor, ray_remote_args)


def write_shards_from_files(paths, vocab, out, *, fmt: str = "llmc", name: str = "data",
                            eot: str | None = "<|endoftext|>", **kwargs) -> dict:
    """Tokenize files on a Ray cluster into one shard list, the ``encode`` CLI's output
    formats: :func:`tokenize_files` with ``out_dir`` (each actor writes one part per file,
    ``out/.parts/part-<file number>``), then :func:`merge_shard_lists` (file order; llm.c's
    validation shard first).

    Args:
        paths, vocab, kwargs: as :func:`tokenize_files` (``num_gpus``, ``actors``, ...).
        out: the output folder (every node writes into it: a shared file system on a cluster).
        fmt, name, eot: as :class:`TokenizeFiles`.
    Returns:
        the merged ``meta.json`` (format, shards or prefixes, token and document counts).
    """
    import shutil

    out = Path(out)
    parts = out / ".parts"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    ds = tokenize_files(paths, vocab, out_dir=str(parts), fmt=fmt, name=name, eot=eot,
                        **kwargs)
    info = merge_shard_lists(ds.take_all(), out, fmt=fmt, name=name)
    shutil.rmtree(parts, ignore_errors=True)
    return info


class WriteShards:
    """Ray Data callable class: Arrow batches → token shards that training code reads
    (:mod:`torch_gpubpe.io.shards`: llm.c, Megatron-LM or flat), one shard set per batch under
    ``out_dir/part-<key>``; :func:`merge_shard_lists` then makes one shard list of them.

    Args:
        vocab, text_column, pre_tokenizer, sub_batch_bytes: as :class:`TokenizeBatches`.
        out_dir: folder of the per-batch parts (shared by every node).
        fmt: ``"llmc"`` (EOT before each document), ``"megatron"`` or ``"flat"`` (EOT after
            each document when ``eot`` is given).
        name: shard file prefix.
        eot: the end-of-text special token (required for llm.c).
        order_column: a column whose first value in a batch names its part (e.g. a document
            id), so the merged list follows it; default: a content hash of the batch's text
            (deterministic names, arbitrary order). For shards in source order, also set
            ``DataContext.get_current().execution_options.preserve_order = True``: without it
            a Ray batch may join the ends of blocks read out of order.

    ``__call__(batch) -> pyarrow.Table`` with one row: ``part`` (str), ``key``,
    ``num_documents``, ``num_tokens`` (int64).
    """

    def __init__(self, vocab, out_dir, *, fmt: str = "llmc", name: str = "data",
                 eot: str | None = "<|endoftext|>", text_column: str = "text",
                 order_column: str | None = None, pre_tokenizer: str | None = None,
                 sub_batch_bytes: int = DEFAULT_SUB_BATCH_BYTES) -> None:
        from torch_gpubpe.io.shards import OUTPUT_FORMATS

        if fmt not in OUTPUT_FORMATS:
            raise ValueError(f"fmt must be one of {OUTPUT_FORMATS}, got {fmt!r}")
        self.enc = TokenizeBatches(vocab, text_column=text_column, pre_tokenizer=pre_tokenizer,
                                   sub_batch_bytes=sub_batch_bytes)
        self.out_dir, self.fmt, self.name = Path(out_dir), fmt, name
        self.eot_id = None if eot is None else self.enc.vocab.token_to_id(eot)
        self.text_column, self.order_column = text_column, order_column

    def _key(self, batch, data: np.ndarray) -> str:
        if self.order_column is None:
            import hashlib

            return hashlib.blake2b(data.tobytes(), digest_size=12).hexdigest()
        v = batch.column(self.order_column)[0].as_py()
        return f"{v:020d}" if isinstance(v, int) and v >= 0 else str(v)

    def __call__(self, batch):
        import pyarrow as pa

        from torch_gpubpe.io.shards import ShardWriter

        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        for c in (self.text_column, self.order_column):
            if c is not None and c not in batch.column_names:
                raise InputError(f"the batch has no column {c!r} (columns: {batch.column_names})")
        data, offsets = _packed(batch.column(self.text_column))
        ids, tok_offsets = self.enc.encode_packed(data, offsets)
        key = self._key(batch, data)
        part = self.out_dir / f"part-{key}"
        w = ShardWriter(part, self.fmt, len(self.enc.vocab), name=self.name, eot_id=self.eot_id,
                        shard_tokens=2**31 - 1, overwrite=True)   # one shard per batch
        w.add(ids, tok_offsets)
        info = w.close({"num_documents": len(offsets) - 1})
        return pa.table({"part": [str(part)], "key": [key], "num_documents": [len(offsets) - 1],
                         "num_tokens": [int(info["num_tokens"])]})


def merge_shard_lists(parts: Sequence, out, *, fmt: str = "llmc", name: str = "data") -> dict:
    """Make one shard list of :class:`WriteShards`' parts, in the order of their keys.

    * llm.c: the parts' shards become ``out/<name>_val_000000.bin`` (the first: llm.c's
      validation split), ``<name>_train_000001.bin``, … (moved, not copied);
    * Megatron-LM: ``out/<name>_NNNNNN.bin/.idx``, and ``out/data_paths.txt`` with the prefixes
      for ``--data-path``;
    * flat: one ``ids.bin`` + ``offsets.npy`` (the parts' documents back to back).

    Writes ``out/meta.json`` (format, shards or prefixes, token and document counts) and removes
    the parts. Args: ``parts`` the ``part`` paths (or the rows :class:`WriteShards` returned).
    Returns: the metadata. Raises: InputError: a part is missing or of another format.
    """
    import json
    import shutil

    from torch_gpubpe.io.shards import META_JSON, llmc_shard_name

    dirs = sorted(Path(p["part"] if isinstance(p, dict) else p) for p in parts)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metas = []
    for d in dirs:
        try:
            metas.append(json.loads((d / META_JSON).read_text()))
        except OSError as e:
            raise InputError(f"{d}: not a WriteShards part ({e})") from e
        if metas[-1].get("format") != f"torch_gpubpe.{fmt}":
            raise InputError(f"{d}: a {metas[-1].get('format')} part, not {fmt}")
    info: dict = {"format": f"torch_gpubpe.{fmt}", "version": 1, "parts": len(dirs),
                  "num_tokens": sum(int(m["num_tokens"]) for m in metas),
                  "num_documents": sum(int(m.get("num_documents", 0)) for m in metas)}
    if fmt == "llmc":
        names = []
        for i, (d, m) in enumerate(zip(dirs, metas)):
            for s in m["shards"]:
                names.append(llmc_shard_name(name, len(names)))
                os.replace(d / s, out / names[-1])
        info.update(shards=names, validation_shard=names[0] if names else None,
                    token_dtype=metas[0]["token_dtype"] if metas else None)
    elif fmt == "megatron":
        prefixes = []
        for d, m in zip(dirs, metas):
            for p in m["prefixes"]:
                new = f"{name}_{len(prefixes):06d}"
                for ext in (".bin", ".idx"):
                    os.replace(d / (p + ext), out / (new + ext))
                prefixes.append(new)
        (out / "data_paths.txt").write_text(" ".join(str(out / p) for p in prefixes) + "\n")
        info.update(prefixes=prefixes, token_dtype=metas[0]["token_dtype"] if metas else None)
    else:
        offs, base = [np.zeros(1, np.int64)], 0
        with open(out / "ids.bin.tmp", "wb") as f:
            for d, m in zip(dirs, metas):
                with open(d / m["ids_file"], "rb") as src:
                    if m["ids_file"].endswith(".npy"):
                        np.lib.format.read_magic(src)
                        np.lib.format.read_array_header_1_0(src)
                    shutil.copyfileobj(src, f)
                o = np.load(d / m["offsets_file"])
                offs.append(o[1:] + base)
                base += int(o[-1])
        os.replace(out / "ids.bin.tmp", out / "ids.bin")
        np.save(out / "offsets.npy", np.concatenate(offs))
        info.update(ids_file="ids.bin", offsets_file="offsets.npy",
                    ids_dtype=metas[0]["ids_dtype"] if metas else None)
    (out / META_JSON).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return info


class CountBatches:
    """Ray Data callable class: Arrow batches of documents → one counts file each.

    Args:
        out_dir: folder for the counts files (shared by every node: a network file system);
            each batch writes ``<out_dir>/<random>.parquet`` (:mod:`torch_gpubpe.training.counts_file`).
        text_column: the column with the documents (string or binary; no nulls).
        count_on: "gpu" (default) or "cpu": the word counter; same counts.

    ``__call__(batch) -> pyarrow.Table`` with one row: ``counts_file`` (str), ``num_words``,
    ``num_documents``, ``corpus_bytes`` (int64). Merge the files with
    :func:`torch_gpubpe.training.counts_file.merge_counts`, or run :func:`count_dataset`.
    """

    def __init__(self, out_dir, *, text_column: str = "text", count_on: str = "gpu") -> None:
        if count_on not in ("gpu", "cpu"):
            raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
        self.out_dir = Path(out_dir)
        self.text_column, self.count_on = text_column, count_on

    def __call__(self, batch):
        import pyarrow as pa

        from torch_gpubpe.training.counts_file import count_packed, write_counts

        batch = _table_with(batch, self.text_column, "text_column")
        data, offsets = _packed(batch.column(self.text_column))
        if self.count_on == "gpu":
            _pin_assigned_gpu()
        wc = count_packed([(data, offsets)], count_on=self.count_on)
        path = self.out_dir / f"{uuid.uuid4().hex}.parquet"
        write_counts(wc, path, num_documents=len(offsets) - 1, corpus_bytes=len(data))
        return pa.table({"counts_file": [str(path)], "num_words": [len(wc)],
                         "num_documents": [len(offsets) - 1], "corpus_bytes": [len(data)]})


def count_dataset(ds, out, *, text_column: str = "text", count_on: str = "gpu",
                  batch_size: int = 65_536, concurrency: int = 1, num_gpus: float | None = None,
                  work_dir=None, stats: dict | None = None) -> Path:
    """Count the words of a Ray ``Dataset`` into one counts file: :class:`CountBatches` per
    block on ``concurrency`` actors, then one streaming merge (:func:`~torch_gpubpe.training.counts_file.
    merge_counts`) on the driver. Train with :func:`~torch_gpubpe.training.counts_file.train_from_counts_file`.

    Args:
        ds: a ``ray.data.Dataset`` with a ``text_column``.
        out: the merged counts file.
        batch_size: rows per counted batch (one counts file each).
        num_gpus: GPUs per actor (default: 1 with ``count_on="gpu"``, else 0).
        work_dir: folder for the per-batch files (default: beside ``out``; on several nodes,
            a shared file system); removed afterwards.
        stats: if a dict, filled with ``num_batches`` and the merge's stats.
    Returns:
        ``out`` as a :class:`~pathlib.Path`.
    """
    import shutil
    import tempfile

    from torch_gpubpe.training.counts_file import merge_counts

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=work_dir or out.parent, prefix=f".{out.name}.blocks-"))
    try:
        gpus = (1 if count_on == "gpu" else 0) if num_gpus is None else num_gpus
        res = ds.map_batches(CountBatches, fn_constructor_kwargs={
            "out_dir": str(tmp), "text_column": text_column, "count_on": count_on},
            batch_format="pyarrow", batch_size=batch_size, concurrency=concurrency,
            **({"num_gpus": gpus} if gpus else {}))
        files = [r["counts_file"] for r in res.take_all()]
        st = {} if stats is None else stats
        merge_counts(sorted(files), out, stats=st)
        st["num_batches"] = len(files)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
