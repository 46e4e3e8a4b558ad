"""The old home of the str → UTF-8 packer's helpers, kept so that its surviving names still
import from here (and from ``torch_gpubpe._cpython_str``): the CPython layout and object
addresses are :mod:`torch_gpubpe.core.cpython_layout`, the copies
:mod:`torch_gpubpe.core.copy_pool`, the packer and its fallbacks
:mod:`torch_gpubpe.core.str_pack`. Nothing in the package imports this module.
"""

from __future__ import annotations

from torch_gpubpe.core.copy_pool import (PARALLEL_COPY_MIN, THREADS, copy_parts, copy_pool,
                                         join_parts)
from torch_gpubpe.core.cpython_layout import WRITTEN_FOR, bytes_address, str_address
from torch_gpubpe.core.str_pack import available, fallbacks, reset

__all__ = ["PARALLEL_COPY_MIN", "THREADS", "WRITTEN_FOR", "available", "bytes_address",
           "copy_parts", "copy_pool", "fallbacks", "join_parts", "reset", "str_address"]
