"""The few exception types callers of torch_gpubpe catch.

All derive from :class:`GPUBPEError`; where a Python built-in fits, the error also derives from it
(``VocabFormatError`` is a ``ValueError``), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class GPUBPEError(Exception):
    """Base class of every error raised by torch_gpubpe."""


class VocabFormatError(GPUBPEError, ValueError):
    """A vocab file is damaged, foreign, or of an unsupported format version."""


class NoAdapterError(GPUBPEError, RuntimeError):
    """No WebGPU adapter (GPU or software Vulkan device) could be found or opened."""


class GPUForkError(GPUBPEError, RuntimeError):
    """The GPU was touched in a parent process and this process is a fork of it.

    wgpu cannot be used across ``fork()`` (DESIGN.md §8): the child hangs or the parent does.
    Use the ``spawn`` or ``forkserver`` multiprocessing start method, or keep GPU work in the
    main process.
    """


class GPUOperationError(GPUBPEError, RuntimeError):
    """A GPU operation failed or did not complete in time; the message names the operation."""


class UnsupportedVocabError(GPUBPEError, ValueError):
    """A vocab the GPU encoder cannot encode exactly in the mode asked (or on this adapter); the
    message names the limit. Its files and the other mode may still take it."""


class InputError(GPUBPEError, ValueError):
    """A document or argument cannot be processed; the message names which and where."""


class VocabNotFoundError(InputError, FileNotFoundError):
    """No vocab file at the path given (``Vocab.load``, ``Tokenizer(path)``, ``--vocab``); the
    message says what is expected there. Also a ``FileNotFoundError``, for code that catches
    ``OSError``."""


class NotTextError(InputError):
    """A file read as text looks like binary data (:func:`torch_gpubpe.io.readers.looks_binary`);
    the message names the file, what was found, and the opt-out (``format="binary"``)."""
