"""Reaching the Hugging Face Hub: fail fast without network, and say the right thing.

Without network, ``datasets.load_dataset("user/name")`` retries for 30 s (connection refused)
to minutes (packets dropped) before it fails, and the message it leads to cannot tell "no
network" from "``HF_HUB_OFFLINE=1`` is set and the dataset is not cached". Here:

* :func:`prepare_hub_access` is called once before a Hub dataset is opened. Unless offline mode
  is already on, it checks in at most :data:`CHECK_TIMEOUT_S` seconds whether the Hub endpoint
  (``HF_ENDPOINT``, default ``https://huggingface.co``) answers at all. If it does not, offline
  mode is switched on for this process (``HF_HUB_OFFLINE=1``, with a ``RuntimeWarning``), so a
  dataset already in the local cache still loads, and nothing waits on retries.
* :func:`explain_hub_failure` turns the failure of a Hub dataset into one line that fits the
  case: the Hub could not be reached (and the dataset is not cached), or ``HF_HUB_OFFLINE`` was
  set by the user (and the dataset is not cached).

``HF_HUB_OFFLINE=1`` (the Hub's own switch) skips the check. Used by :mod:`torch_gpubpe.io.sources` (the CLI's
``--dataset``); any other reader of Hub datasets calls the same two functions.

Example::

    >>> from torch_gpubpe.io import hub
    >>> state = hub.prepare_hub_access("allenai/c4")      # doctest: +SKIP
    >>> datasets.load_dataset("allenai/c4", "en")         # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from torch_gpubpe import notices

CHECK_TIMEOUT_S = 3.0
"""Seconds the reachability check waits for the Hub's first answer."""
_TRUE = ("1", "ON", "YES", "TRUE")


@dataclass
class HubAccess:
    """What :func:`prepare_hub_access` found.

    Attributes:
        endpoint: the Hub URL used (``HF_ENDPOINT``).
        user_offline: offline mode was on before (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``).
        unreachable: why the Hub could not be reached (``None``: reachable, or not checked).
        seconds: time the check took.
    """

    endpoint: str
    user_offline: bool
    unreachable: str | None = None
    seconds: float = 0.0

    @property
    def offline(self) -> bool:
        return self.user_offline or self.unreachable is not None


_last: HubAccess | None = None


def endpoint() -> str:
    """The Hub URL (``HF_ENDPOINT`` or ``https://huggingface.co``)."""
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT).rstrip("/")
    except Exception:  # noqa: BLE001 - huggingface_hub missing or changed: the env decides
        return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def offline_mode() -> bool:
    """Whether Hugging Face offline mode is on in this process."""
    try:
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            return True
    except Exception:  # noqa: BLE001
        pass
    return any(os.environ.get(v, "").upper() in _TRUE
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_reachable(url: str | None = None, timeout: float = CHECK_TIMEOUT_S) -> str | None:
    """``None`` when ``url`` (default: the Hub endpoint) gives any HTTP answer within
    ``timeout`` seconds (an error status counts as an answer), else why not (one line).

    The request runs on a daemon thread, so that a name lookup that hangs cannot hold the
    caller longer than ``timeout``.
    """
    url = url or endpoint()
    result: list[str | None] = []

    def probe() -> None:
        try:
            req = urllib.request.Request(url + "/api/datasets?limit=1", method="HEAD")
            with urllib.request.urlopen(req, timeout=timeout):
                pass
            result.append(None)
        except urllib.error.HTTPError:
            result.append(None)  # the server answered
        except Exception as e:  # noqa: BLE001 - URLError, timeout, OSError, ...
            reason = getattr(e, "reason", None) or e
            result.append(f"{type(reason).__name__}: {reason}".rstrip(": "))

    t = threading.Thread(target=probe, name="torch_gpubpe hub check", daemon=True)
    t.start()
    t.join(timeout + 0.5)
    if not result:
        return f"no answer within {timeout:g} s"
    return result[0]


def _set_offline() -> None:
    """Switch Hugging Face offline mode on in this process (and for its children)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True
    except Exception:  # noqa: BLE001
        pass
    try:
        import datasets.config as dconfig

        dconfig.HF_HUB_OFFLINE = True
        if hasattr(dconfig, "HF_DATASETS_OFFLINE"):
            dconfig.HF_DATASETS_OFFLINE = True
    except Exception:  # noqa: BLE001
        pass


def prepare_hub_access(dataset: str | None = None, timeout: float = CHECK_TIMEOUT_S
                       ) -> HubAccess:
    """Before opening a Hub dataset: when offline mode is off, check once (at most ``timeout``
    seconds) that the Hub answers, and switch offline mode on when it does not (a cached
    dataset still loads; an uncached one fails at once instead of after retries).

    Args:
        dataset: the dataset name; a local folder skips the check.
    Returns:
        a :class:`HubAccess` (also kept for :func:`explain_hub_failure`).
    """
    global _last
    state = HubAccess(endpoint(), offline_mode())
    skip = state.user_offline or (dataset is not None and os.path.isdir(dataset))
    if not skip:
        t0 = time.perf_counter()
        state.unreachable = check_reachable(state.endpoint, timeout)
        state.seconds = time.perf_counter() - t0
        if state.unreachable is not None:
            _set_offline()
            notices.warn(  # not silent: a cached copy may be older than the Hub's
                f"the Hugging Face Hub at {state.endpoint} cannot be reached "
                f"({state.unreachable}): reading {dataset or 'datasets'} from the local cache "
                "only (offline mode, HF_HUB_OFFLINE=1)", stacklevel=2)
    _last = state
    return state


def explain_hub_failure(what: str, detail: str, state: HubAccess | None = None) -> str | None:
    """One line for a Hub dataset that could not be opened while offline (``None`` when the
    process was not offline: then the failure is something else, e.g. a wrong name).

    Args:
        what: the source, as the user named it (``"dataset allenai/c4/en split 'train'"``).
        detail: the original error's first line (kept for callers; the message replaces it).
        state: from :func:`prepare_hub_access` (default: the last one).
    """
    state = state or _last or HubAccess(endpoint(), offline_mode())
    cache = _cache_dir()
    if state.unreachable is not None:
        return (
            f"cannot load {what}: the Hugging Face Hub at {state.endpoint} cannot be reached "
            f"({state.unreachable}; checked in {state.seconds:.1f} s) and the dataset is not in "
            f"the local cache ({cache}). Check the network, proxy or HF_ENDPOINT, or download "
            f"the dataset where there is network and pass its files with --data-files"
        )
    if state.user_offline:
        return (
            f"cannot load {what}: offline mode is on (HF_HUB_OFFLINE is set) and the dataset is "
            f"not in the local cache ({cache}). Unset HF_HUB_OFFLINE to download it, or pass "
            f"local files with --data-files"
        )
    return None


def _cache_dir() -> str:
    try:
        import datasets.config as dconfig

        return str(dconfig.HF_DATASETS_CACHE)
    except Exception:  # noqa: BLE001
        return os.path.expanduser("~/.cache/huggingface/datasets")
