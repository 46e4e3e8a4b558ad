"""Documents packed for upload (:func:`pack_batch`): one UTF-8 byte array and int64 offsets,
or parts that a batch slot copies straight into its mapped upload buffer (one pass over the
batch fewer on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torch_gpubpe.core import str_pack
from torch_gpubpe.core.copy_pool import join_parts
from torch_gpubpe.core.cpython_layout import str_address
from torch_gpubpe.errors import InputError

PARTS_MIN_AVG_BYTES = 4096


def pack_batch(texts: Sequence[str | bytes], *, keep_parts: bool = False, defer: bool | None = None,
               first: int = 0) -> tuple[np.ndarray | list[str | bytes | str_pack.Packed], np.ndarray]:
    """``pack_documents`` of a sequence: the UTF-8 of ``str`` made by several threads without
    the GIL (:mod:`torch_gpubpe.core.str_pack`).

    With ``keep_parts`` the result may be a list of parts for
    :func:`torch_gpubpe.core.copy_pool.copy_parts`, which the session copies straight into its
    mapped upload buffer, saving one pass over the batch on the host: one
    :class:`~torch_gpubpe.core.str_pack.Packed` (measured here, transcoded straight into the
    upload buffer) unless ``defer`` is False (``encode_batches`` packs on a thread ahead, so the
    transcoding stays there, off the main thread), which gives one array. Where the compiled
    packer is not available, each document is encoded on this thread
    (:func:`~torch_gpubpe.core.str_pack.encode_each`), and with ``keep_parts`` and documents of
    at least 4 KiB on average the parts are returned unjoined (ASCII ``str`` and ``bytes`` read
    in place by the copy).

    ``first``: the index of ``texts[0]`` in the caller's list (errors name the item by it).

    Raises:
        InputError: ``texts`` is one document, or an item is neither ``str`` nor bytes-like
            (naming its index).
    """
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise InputError("encode_batch expects a sequence of documents, not one str/bytes; "
                         "use encode() for one document")
    if str_pack.available():   # (the compiled packer: one task per thread, no Python per document)
        if keep_parts and defer is not False:
            packed = str_pack.Packed(texts, first)   # (transcoded by copy_parts into the upload)
            return [packed], packed.offsets
        return str_pack.pack(texts, first)
    parts, offsets = str_pack.encode_each(texts, first)
    if (keep_parts and str_address is not None and len(parts)
            and offsets[-1] >= PARTS_MIN_AVG_BYTES * len(parts)):
        return parts, offsets
    return join_parts(parts), offsets
