"""Work counters of the GPU merge-order walk (a hardware-independent cost measure), shared by
benchmarks/bpe_work.py (``--gpu``) and the tests that check them.

The PROFILE build of ``wgsl/encode_bpe.wgsl`` counts its work into binding 18; this module
makes that build through the encoder's extension hooks (:class:`WorkSession`: the session's
``walk_flags`` and ``walk_bindings``; :class:`WorkTokenizer`: ``Tokenizer.session_class``), so
that the product itself carries no counters.
"""

from __future__ import annotations

import numpy as np

from torch_gpubpe.encoding.session import Session
from torch_gpubpe.encoding.tokenizer import Tokenizer
from torch_gpubpe.gpu.shaders import shader_info

# The walk's work counters, read from the WGSL: name -> index in binding 18.
_WGSL = shader_info("encode_bpe", frozenset({"PROFILE"}))
W_COUNT = _WGSL.consts["W_COUNT"]
WORK_COUNTERS = {k[2:].lower(): v for k, v in _WGSL.consts.items()
                 if k.startswith("W_") and k != "W_COUNT"}


class WorkSession(Session):
    """The encoder's session with the PROFILE build of the merge-order walk; its counters
    accumulate in ``bpe_work`` (``W_COUNT`` u32, zeroed at the opening)."""

    walk_flags = frozenset({"PROFILE"})

    def walk_bindings(self, g) -> dict:
        U = g.wgpu.BufferUsage
        self.bpe_work = g.buffer(4 * W_COUNT, U.STORAGE | U.COPY_SRC | U.COPY_DST,
                                 "encode_bpe.work")
        g.device.queue.write_buffer(self.bpe_work, 0, np.zeros(W_COUNT, np.uint32))
        return {18: self.bpe_work}


class WorkTokenizer(Tokenizer):
    """A :class:`~torch_gpubpe.Tokenizer` whose session is a :class:`WorkSession`."""

    session_class = WorkSession


def walk_work(tokenizer: Tokenizer, documents, ids_out: list | None = None) -> dict[str, int]:
    """Work counts of the merge-order walk over ``documents``: encodes them once with the
    PROFILE build in a fresh :class:`WorkTokenizer` copy of ``tokenizer`` (mode ``"bpe"``; its
    pickled state, so ``tokenizer``'s own session is left alone).

    Returns the totals of :data:`WORK_COUNTERS` (``iters``: walk-loop iterations summed over
    threads; ``steps``: trie steps; ``tries``: candidates tried; ``checks``: pair checks;
    ``check_loop``: those not decided in their first step (one round of loads each); ``unwind``:
    their further steps; ``probes``: hash probes; ``shorter``: candidates rejected for a shorter
    one; ``pops``: backtracks; ``scan``: steps of the scan back for the previous token;
    ``tokens``: tokens accepted, pops not subtracted; ``lockstep``: the sum over subgroups of
    their longest lane's iterations, 0 without subgroups), plus ``bytes``, ``output_tokens``,
    ``subgroup_size`` (0: none) and ``dispatches`` (walk dispatches, continuations included).
    ``ids_out``: a list that receives the ids of each document (those of the PROFILE build).

    Raises:
        ValueError: ``tokenizer`` is not in merge-order mode.
    """
    if tokenizer.mode != "bpe":
        raise ValueError("walk_work needs a Tokenizer with mode='bpe'")
    docs = list(documents)
    counted = WorkTokenizer.__new__(WorkTokenizer)
    counted.__setstate__(tokenizer.__getstate__())
    sess = counted._session()
    ids = counted.encode_batch(docs)
    g = sess.gpu
    raw = np.frombuffer(g.device.queue.read_buffer(sess.bpe_work), np.uint32)
    out = {k: int(raw[i]) for k, i in WORK_COUNTERS.items()}
    out["bytes"] = sum(len(d.encode() if isinstance(d, str) else d) for d in docs)
    out["output_tokens"] = sum(len(x) for x in ids)
    out["subgroup_size"] = int(g.subgroup_size or 0) if "SUBGROUPS" in g.flags else 0
    out["dispatches"] = sess.slices + sess.continuation_dispatches
    if ids_out is not None:
        ids_out.extend(ids)
    return out
