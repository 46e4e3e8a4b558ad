"""Disk cache of numpy arrays built from a vocab: merge-order tables, the trie.

:func:`torch_gpubpe.core.bpe_tables.bpe_tables` (seconds for GPT-2 / Qwen2) and
:func:`torch_gpubpe.core.trie.cached_trie` (a fraction of a second for 65k tokens) build arrays
in Python that depend only on the vocab; the first process keeps them on disk, later ones load
them in milliseconds. One :class:`ArrayCache` per kind of result:

* file: ``$XDG_CACHE_HOME/torch_gpubpe/<folder>/<prefix>-<key>.npz`` (default ``~/.cache``), one
  uncompressed ``.npz`` per key;
* key: :meth:`ArrayCache.key`, a SHA-256 of the cache's format number, the source of the module
  that builds the result (a change of the algorithm is a new key) and what the caller passes
  (everything the build reads);
* written to a temporary name (per process and thread) and renamed (atomic: processes that
  build the same file at once never read half of it);
* a damaged file (truncated, a missing array, wrong dtype or shape: ``from_arrays`` raises) is
  built again and rewritten; an error reading or writing the folder is warned once per cache
  (``GPUBPEWarning``) and kept in ``stats["errors"]``, and the result is built (exact, slower);
* ``TORCH_GPUBPE_NO_CACHE=1`` (:data:`ENV_OFF`) turns every disk cache of the package off (these
  and wgpu-py's parsed header, :mod:`torch_gpubpe.gpu.wgpu_internals`); the names it replaces,
  ``TORCH_GPUBPE_NO_TABLE_CACHE`` and ``TORCH_GPUBPE_NO_CFFI_CACHE``, still work for one release.

Example::

    >>> import numpy as np
    >>> from torch_gpubpe.core.disk_cache import ArrayCache
    >>> squares = ArrayCache("squares", "sq", "the squares", __file__, version=1)
    >>> out = squares.get(None, lambda: np.arange(4) ** 2, lambda a: {"a": a},
    ...                   lambda z: z["a"])   # key None: built, not cached
    >>> out.tolist(), squares.stats["built"]
    ([0, 1, 4, 9], 1)
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np

from torch_gpubpe import notices

T = TypeVar("T")

ENV_OFF = "TORCH_GPUBPE_NO_CACHE"
ENV_OFF_OLD = ("TORCH_GPUBPE_NO_TABLE_CACHE", "TORCH_GPUBPE_NO_CFFI_CACHE")


def caches_off() -> bool:
    """Whether the user turned the package's disk caches off (:data:`ENV_OFF`, or an old name)."""
    return any(os.environ.get(v) for v in (ENV_OFF, *ENV_OFF_OLD))
"""Set (non-empty) to turn off every vocab array cache: results are built in every process."""
MIN_TOKENS = 8192
"""Vocabs below this many tokens build in well under 0.1 s: their callers do not cache them."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/torch_gpubpe`` (default ``~/.cache/torch_gpubpe``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_gpubpe"


def check_array(arrays: Mapping[str, np.ndarray], name: str, dtype: type,
                shape: tuple[int, ...]) -> np.ndarray:
    """``arrays[name]`` if it is ``dtype`` of ``shape``, for a ``from_arrays`` of
    :meth:`ArrayCache.get`.

    Raises:
        KeyError: no such array. ValueError: another dtype or shape (names both).
    """
    a = arrays[name]
    if a.dtype != dtype or a.shape != shape:
        raise ValueError(f"{name} is {a.dtype}{a.shape}, not {np.dtype(dtype)}{shape}")
    return a


class ArrayCache:
    """One kind of cached result (see the module docstring).

    Args:
        folder: sub-folder of :func:`cache_root`.
        prefix: file names are ``<prefix>-<key>.npz``.
        what: what is cached, for the warning ("merge-order tables").
        source: the file of the module that builds the result; its bytes are in every key.
        version: format number, in every key; bump it when the arrays or their meaning change.

    Attributes:
        stats: what :meth:`get` did in this process: ``loaded`` (from a file), ``built``,
            ``saved`` (written to a file) counts, and ``errors`` (``"Type: message"`` strings
            of the errors met; the result was built then).
    """

    def __init__(self, folder: str, prefix: str, what: str, source: str | os.PathLike,
                 version: int) -> None:
        self.folder, self.prefix, self.what = folder, prefix, what
        self.source, self.version = Path(source), version
        self.stats: dict = {"loaded": 0, "built": 0, "saved": 0, "errors": []}

    def directory(self) -> Path:
        """Where the files are: ``cache_root() / folder`` (read from the environment each
        call)."""
        return cache_root() / self.folder

    def key(self, *parts: bytes | np.ndarray) -> str:
        """32 hex digits of SHA-256 over the format number, the builder's source and ``parts``
        (bytes-like, each C-contiguous; each is prefixed with its length in bytes, so that
        parts cannot run into each other)."""
        h = hashlib.sha256(f"{self.prefix} {self.version}\0".encode())
        h.update(self.source.read_bytes())
        for p in parts:
            m = memoryview(p)
            h.update(m.nbytes.to_bytes(8, "little"))
            h.update(m)
        return h.hexdigest()[:32]

    def get(self, key: Callable[[], str] | None, build: Callable[[], T],
            to_arrays: Callable[[T], Mapping[str, np.ndarray]],
            from_arrays: Callable[[Mapping[str, np.ndarray]], T]) -> T:
        """The result for ``key()``: loaded from its file, else ``build()`` and saved.

        Args:
            key: computes the key (called only when the cache is on), or ``None``: build, do
                not cache (a small vocab).
            build: computes the result.
            to_arrays: the result as named arrays (what is saved).
            from_arrays: the result from the loaded arrays; raises (any exception) when they
                are not what ``to_arrays`` gives: the file is then taken as damaged.
        Returns:
            ``build()``'s result, or one equal to it (every array) from the file.
        """
        path = None
        if key is not None and not caches_off():
            try:
                path = self.directory() / f"{self.prefix}-{key()}.npz"
                with np.load(path, allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
                out = from_arrays(arrays)
                self.stats["loaded"] += 1
                return out
            except (FileNotFoundError, NotADirectoryError):
                pass  # not built yet (or no folder: the save below says why)
            except Exception as e:  # noqa: BLE001 - a damaged file: built again, rewritten
                self._error(e, "no key; built" if path is None else
                            f"{path} is damaged or unreadable; built again and rewritten")
        out = build()
        self.stats["built"] += 1
        if path is not None:
            try:
                self._save(path, to_arrays(out))
                self.stats["saved"] += 1
            except Exception as e:  # noqa: BLE001 - unwritable: built in every process
                self._error(e, "built in every process (slower start); set XDG_CACHE_HOME to a "
                            f"writable folder, or {ENV_OFF}=1 to stop trying")
        return out

    def _save(self, path: Path, arrays: Mapping[str, np.ndarray]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
        try:
            np.savez(tmp, **arrays)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def _error(self, e: Exception, then: str) -> None:
        why = f"{type(e).__name__}: {e}"
        self.stats["errors"].append(why)
        notices.warn_once(f"disk cache {self.folder}",
                          f"torch_gpubpe: {self.what} not cached ({why}): {then}", stacklevel=2)
