"""Equal batch counts on every DDP rank (``make_dataloader(..., even_batches=True)``, the default
under ``torch.distributed`` with more than one rank).

Documents are sharded by rank, so the ranks' shards differ in size and a rank that runs out
first would leave the others waiting in their next collective: a hang at the end of the epoch.
The rule here: **every rank yields as many batches as the rank with the most**; a rank whose
shard ends first starts its shard again and repeats its first batches, as PyTorch's
``DistributedSampler`` pads a short rank with repeated samples and ``accelerate``'s
``even_batches`` does. Each step costs one ``all_reduce`` of two integers in the process
group (gloo on CPU works). A rank with no batch at all cannot repeat one: every rank raises the
same named error instead of hanging. The repeats are counted in the loader's
``even_stats["repeated_batches"]`` and said once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

from torch_gpubpe.errors import InputError
from torch_gpubpe.notices import warn_once

_END = object()


def distributed_ranks() -> int:
    """The number of ranks of the initialised default process group (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def even_iter(start: Callable[[], Iterator], stats: dict) -> Iterator:
    """The batches of ``start()`` (called again when they run out before another rank's),
    as many as the rank with the most (module docs). Every rank learns of a failure to read a
    batch before any rank yields one more, so all stop together with the error."""
    import torch
    import torch.distributed as dist

    # (NCCL reduces CUDA tensors only; gloo and the others take CPU ones)
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))

    def agree(*flags: int):
        t = torch.tensor(flags, dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def fail(err):
        raise err if err is not None else InputError(
            "even_batches: another rank failed to read its next batch; every rank stops with it")

    err = None
    it = start()
    try:
        nxt = next(it, _END)
    except Exception as e:  # noqa: BLE001 - said to every rank, then raised here
        err, nxt = e, _END
    empty = nxt is _END and err is None
    own = True   # still in this rank's own pass (not repeating)
    stats["repeated_batches"] = 0
    while True:
        own = own and nxt is not _END
        more, any_empty, repeating, failed = agree(int(own), int(empty), int(not own),
                                                   int(err is not None))
        if failed:
            fail(err)
        if not more:   # every rank's own pass is done
            return
        if any_empty:
            raise InputError(
                "even_batches: a rank has no batch in this epoch (fewer documents than ranks × "
                "workers, or a batch larger than its shard), so it cannot repeat one to match "
                "the others; give more documents, or pass even_batches=False and stop every "
                "rank at the same step yourself")
        if repeating:   # read only now, once every rank goes on (no batch read and not used)
            if not own:
                try:
                    nxt = next(it, _END)
                    if nxt is _END:   # its shard again
                        it = start()
                        nxt = next(it, _END)
                    if nxt is _END:
                        raise InputError("even_batches: this rank's shard gave no batch when "
                                         "read again (a source that can be read only once?)")
                except Exception as e:  # noqa: BLE001 - said to every rank, then raised here
                    err = e
            if agree(int(err is not None))[0]:
                fail(err)
        if not own:
            stats["repeated_batches"] += 1
            warn_once("even_batches repeats", "torch_gpubpe: a DDP rank ran out of batches "
                      "before another and repeats its first ones so that every rank takes the "
                      "same number of steps (counted in loader.even_stats)")
        yield nxt
        if own:
            try:
                nxt = next(it, _END)
            except Exception as e:  # noqa: BLE001 - said to every rank at the next step
                err, nxt = e, _END


@functools.cache
def even_loader_class(base: type) -> type:
    """``base`` (a DataLoader class) whose iteration gives every rank the same batch count."""

    class EvenBatchesDataLoader(base):
        even_stats: dict

        def __iter__(self):
            self.even_stats = {}
            if distributed_ranks() <= 1:
                return super().__iter__()
            return even_iter(lambda: base.__iter__(self), self.even_stats)

    EvenBatchesDataLoader.__name__ = f"EvenBatches{base.__name__}"
    return EvenBatchesDataLoader
