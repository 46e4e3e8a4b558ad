"""Ray Data's word counter (:class:`CountBatches`: Arrow batches → one counts file each) and
:func:`count_dataset`, which merges the files into the counts of the whole corpus
(:mod:`torch_gpubpe.training.counts_file`). The overview of the Ray recipes is
:mod:`torch_gpubpe.integrations.ray`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from torch_gpubpe.integrations.ray_arrow import packed, table_with
from torch_gpubpe.integrations.ray_gpu import pin_assigned_gpu


class CountBatches:
    """Ray Data callable class: Arrow batches of documents → one counts file each.

    Args:
        out_dir: folder for the counts files (shared by every node: a network file system);
            each batch writes ``<out_dir>/<random>.parquet`` (:mod:`torch_gpubpe.training.counts_file`).
        text_column: the column with the documents (string or binary; no nulls).
        count_on: "gpu" (default) or "cpu": the word counter; same counts.
        pre_tokenizer: the word split, as :func:`~torch_gpubpe.training.api.train`'s; each
            file records it (merging files of different splits is refused by name).

    ``__call__(batch) -> pyarrow.Table`` with one row: ``counts_file`` (str), ``num_words``,
    ``num_documents``, ``corpus_bytes`` (int64). Merge the files with
    :func:`torch_gpubpe.training.counts_file.merge_counts`, or run :func:`count_dataset`.
    """

    def __init__(self, out_dir, *, text_column: str = "text", count_on: str = "gpu",
                 pre_tokenizer: str | None = None) -> None:
        from torch_gpubpe.training.counting import training_split

        if count_on not in ("gpu", "cpu"):
            raise ValueError(f"count_on must be 'gpu' or 'cpu', got {count_on!r}")
        self.out_dir = Path(out_dir)
        self.text_column, self.count_on = text_column, count_on
        self.family = training_split(pre_tokenizer)   # (a bad name fails here, not per block)

    def __call__(self, batch):
        import pyarrow as pa

        from torch_gpubpe.training.counts_file import count_packed, write_counts

        batch = table_with(batch, self.text_column, "text_column")
        data, offsets = packed(batch.column(self.text_column))
        if self.count_on == "gpu":
            pin_assigned_gpu()
        from torch_gpubpe.core.vocab import PRE_TOKENIZER

        wc = count_packed([(data, offsets)], count_on=self.count_on, pre_tokenizer=self.family)
        path = self.out_dir / f"{uuid.uuid4().hex}.parquet"
        write_counts(wc, path, num_documents=len(offsets) - 1, corpus_bytes=len(data),
                     pre_tokenizer=PRE_TOKENIZER if self.family == "bytes-classes"
                     else self.family)
        return pa.table({"counts_file": [str(path)], "num_words": [len(wc)],
                         "num_documents": [len(offsets) - 1], "corpus_bytes": [len(data)]})


def count_dataset(ds, out, *, text_column: str = "text", count_on: str = "gpu",
                  batch_size: int = 65_536, concurrency: int = 1, num_gpus: float | None = None,
                  work_dir=None, stats: dict | None = None,
                  pre_tokenizer: str | None = None) -> Path:
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
        pre_tokenizer: the word split (as :func:`~torch_gpubpe.training.api.train`'s),
            recorded in ``out``; training from it uses that split.
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
            "out_dir": str(tmp), "text_column": text_column, "count_on": count_on,
            "pre_tokenizer": pre_tokenizer},
            batch_format="pyarrow", batch_size=batch_size, concurrency=concurrency,
            **({"num_gpus": gpus} if gpus else {}))
        files = [r["counts_file"] for r in res.take_all()]
        st = {} if stats is None else stats
        merge_counts(sorted(files), out, stats=st)
        st["num_batches"] = len(files)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
