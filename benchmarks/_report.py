"""Shared by the benchmark scripts: the machine/date/command footer every table ends with, and
wgpu-native's raw recording calls (as the trainer records its merges)."""

from __future__ import annotations

import datetime
import os
import platform
import sys


def print_footer() -> None:
    """Print the machine, the UTC date and the exact command line (the README's tables cite them)."""
    print(f"\nmachine: {platform.node()} | {os.cpu_count()} CPUs | Python "
          f"{platform.python_version()}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")


def raw_recording_calls():
    """``(set_pipeline, set_bind_group, dispatch, _, null)`` from ``trainer._raw_api``.

    Raises:
        SystemExit: wgpu-native's raw calls are not available in this wgpu build.
    """
    from torch_gpubpe.trainer import _raw_api

    raw = _raw_api()
    if raw is None:
        raise SystemExit("wgpu-native's raw calls are not available")
    return raw
