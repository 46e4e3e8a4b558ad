"""Ray Data's shard writer (:class:`WriteShards`: Arrow batches → token shards that training
code reads, one set per batch) and :func:`merge_shard_lists`, which makes one shard list of
the parts (llm.c, Megatron-LM or flat; :mod:`torch_gpubpe.io.shards`). The overview of the Ray
recipes is :mod:`torch_gpubpe.integrations.ray`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torch_gpubpe.errors import InputError
from torch_gpubpe.integrations.ray_arrow import packed
from torch_gpubpe.integrations.ray_encode import DEFAULT_SUB_BATCH_BYTES, TokenizeBatches


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
        data, offsets = packed(batch.column(self.text_column))
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

