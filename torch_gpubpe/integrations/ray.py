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
an actor would decode every row group on one thread, far below the CLI's rate); CSV and
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

This module gathers the recipes, one module each: :mod:`~torch_gpubpe.integrations.ray_encode`
(:class:`TokenizeBatches`, :func:`tokenize_dataset`), :mod:`~torch_gpubpe.integrations.ray_files`
(:class:`TokenizeFiles`, :func:`tokenize_files`, :func:`write_shards_from_files`),
:mod:`~torch_gpubpe.integrations.ray_shards` (:class:`WriteShards`, :func:`merge_shard_lists`),
:mod:`~torch_gpubpe.integrations.ray_counts` (:class:`CountBatches`, :func:`count_dataset`); and
what they share: :mod:`~torch_gpubpe.integrations.ray_gpu` (the actor's GPU),
:mod:`~torch_gpubpe.integrations.ray_arrow` (Arrow columns in and out).
"""

from __future__ import annotations

from torch_gpubpe.integrations.ray_counts import CountBatches, count_dataset
from torch_gpubpe.integrations.ray_encode import (DEFAULT_BATCH_ROWS, DEFAULT_SUB_BATCH_BYTES,
                                                  TokenizeBatches, tokenize_dataset)
from torch_gpubpe.integrations.ray_files import (TokenizeFiles, tokenize_files,
                                                 write_shards_from_files)
from torch_gpubpe.integrations.ray_shards import WriteShards, merge_shard_lists

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_SUB_BATCH_BYTES",
    "CountBatches",
    "TokenizeBatches",
    "TokenizeFiles",
    "WriteShards",
    "count_dataset",
    "merge_shard_lists",
    "tokenize_dataset",
    "tokenize_files",
    "write_shards_from_files",
]
