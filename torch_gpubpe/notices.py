"""User-facing warnings of torch_gpubpe, printed as one clean line.

Python's default warning format prints the warning's location and then the source line of the
``warnings.warn`` call (``gpu.py:283: RuntimeWarning: ...`` and the code under it), which is
noise for a notice meant for the user (a slower path taken, documents dropped, a cached copy
used). Every such notice of the package goes through :func:`warn`, with the category
:class:`GPUBPEWarning`, and that category alone is formatted as one line::

    GPUBPEWarning: torch_gpubpe: <what happened, and what to do about it>

Nothing else changes: the warning filters are untouched (``-W``, ``PYTHONWARNINGS``,
``pytest.warns`` and ``warnings.catch_warnings`` see a normal warning; filter it with
``warnings.filterwarnings("ignore", category=torch_gpubpe.GPUBPEWarning)``), and warnings of
other packages keep Python's format. ``GPUBPEWarning`` subclasses ``RuntimeWarning``, so code
that filters ``RuntimeWarning`` keeps working.

Example::

    >>> import warnings
    >>> from torch_gpubpe.notices import GPUBPEWarning, warn
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     warn("torch_gpubpe: an example")
    >>> warnings.formatwarning(w[0].message, w[0].category, w[0].filename, w[0].lineno)
    'GPUBPEWarning: torch_gpubpe: an example\\n'
"""

from __future__ import annotations

import warnings

__all__ = ["GPUBPEWarning", "deprecated", "said", "warn", "warn_once"]


class GPUBPEWarning(RuntimeWarning):
    """A torch_gpubpe notice to the user (printed as one line; see the module docstring)."""


def warn(message: str, *, stacklevel: int = 1) -> None:
    """``warnings.warn(message, GPUBPEWarning)``; ``stacklevel`` counts from the caller of
    this function, as ``warnings.warn`` counts from its own caller."""
    warnings.warn(message, GPUBPEWarning, stacklevel=stacklevel + 1)


def deprecated(message: str, *, stacklevel: int = 1) -> None:
    """A :class:`DeprecationWarning` (an old name that still works for one release)."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


said: set[str] = set()  # keys of the notices given once in this process (tests may clear it)


def warn_once(key: str, message: str | None = None, *, stacklevel: int = 1) -> bool:
    """:func:`warn` ``message`` (default: ``key``) the first time ``key`` is seen in this
    process; the package's one warn-once. Returns whether it warned now."""
    if key in said:
        return False
    said.add(key)
    warn(key if message is None else message, stacklevel=stacklevel + 1)
    return True


def _format(message, category, filename, lineno, line=None, _python=warnings.formatwarning):
    if isinstance(category, type) and issubclass(category, GPUBPEWarning):
        return f"{category.__name__}: {message}\n"
    return _python(message, category, filename, lineno, line)


def _install() -> None:
    """Wrap ``warnings.formatwarning`` once per process (a wrapper installed by someone else
    after us is kept; ours then formats our category only when it is called)."""
    if not getattr(warnings.formatwarning, "_torch_gpubpe", False):
        _format.__defaults__ = (None, warnings.formatwarning)
        _format._torch_gpubpe = True  # type: ignore[attr-defined]
        warnings.formatwarning = _format


_install()
