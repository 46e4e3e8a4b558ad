"""Documents packed for upload (:func:`pack_batch`): one UTF-8 byte array and int64 offsets,
or, for large documents, the unjoined UTF-8 parts that a batch slot copies straight into its
mapped upload buffer (one pass over the batch fewer on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_gpubpe.core import cpython_str as _cs
from torch_gpubpe.core import str_pack as _sp
from torch_gpubpe.core.cpython_str import join_parts
from torch_gpubpe.errors import InputError

PARTS_MIN_AVG_BYTES = 4096


DEFER_STR = False
"""Whether ``pack_batch(keep_parts=True)`` defers the transcoding of non-ASCII ``str`` to the copy
into the upload buffer (written once, exact). Off: measured, it moved the same CPU work from one
pass to the other without saving any (docs/PERFORMANCE.md)."""


def pack_batch(texts: Sequence[str | bytes], *, keep_parts: bool = False, defer: bool | None = None
          ) -> tuple[np.ndarray | list[str | bytes | _cs.Span | _cs.Deferred], np.ndarray]:
    """``pack_documents`` of a sequence: the UTF-8 of non-ASCII ``str`` made by several
    threads without the GIL (:func:`torch_gpubpe.core.cpython_str.utf8_parts`).

    With ``keep_parts`` and documents of at least 4 KiB on average, the UTF-8 parts are returned
    unjoined: a list of ASCII ``str`` (their characters are their UTF-8, so they are not
    encoded at all), ``bytes`` and spans of transcoded UTF-8; the session copies them straight
    into its mapped upload buffer with several threads (:func:`copy_parts`), which saves one
    pass over the batch on the host. With ``defer`` (default :data:`DEFER_STR`) the non-ASCII
    ``str`` are only measured here (:class:`torch_gpubpe.core.cpython_str.Deferred`) and
    transcoded by ``copy_parts`` straight into the upload buffer: their UTF-8 is written once
    (``encode_batches`` packs on a thread ahead, without ``defer``: the transcoding stays
    there, off the main thread). Where the compiled packer is available
    (:mod:`torch_gpubpe.core.str_pack`), ``keep_parts`` gives one part, a
    :class:`~torch_gpubpe.core.str_pack.Packed` (measured here, transcoded by ``copy_parts``
    straight into the upload buffer) unless ``defer`` is False, and otherwise one array.
    """
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise InputError("encode_batch expects a sequence of documents, not one str/bytes; "
                         "use encode() for one document")
    if _sp.available():   # (the compiled packer: one task per thread, no Python per document)
        if keep_parts and defer is not False:
            packed = _sp.Packed(texts)   # (measured; transcoded by copy_parts into the upload)
            return [packed], packed.offsets
        return _sp.pack(texts)
    parts = _cs.utf8_parts(texts, defer=keep_parts and (DEFER_STR if defer is None else defer))
    # (InputError naming a bad item's index)
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if (keep_parts and _cs.str_address is not None and len(parts)
            and offsets[-1] >= PARTS_MIN_AVG_BYTES * len(parts)):
        return parts, offsets
    return join_parts(parts), offsets
