"""Shared by the benchmark scripts: the GPU's SM clock and duty cycle while a job runs, and the
machine/date/command footer every table ends with."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time


def gpu_sample() -> tuple[int, int] | None:
    """``(SM clock MHz, utilization %)`` of GPU 0 from ``nvidia-smi``; None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,utilization.gpu", "--format=csv,noheader,nounits",
             "-i", "0"], capture_output=True, text=True, timeout=5).stdout
        clock, util = (int(x) for x in out.strip().split(",")[:2])
        return clock, util
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class GPUMonitor:
    """Samples the SM clock and utilization every ``period`` s in a thread while a job runs::

        with GPUMonitor() as mon:
            run_job()
        print(mon.summary())     # "SM clock 1,980 MHz (min 1,410), GPU busy 87%"
    """

    def __init__(self, period: float = 0.1) -> None:
        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            s = gpu_sample()
            if s is None:
                return
            self.samples.append(s)
            self._stop.wait(self.period)

    def __enter__(self) -> GPUMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        if not self.samples:
            return "SM clock: n/a (no nvidia-smi)"
        clocks = [c for c, _ in self.samples]
        busy = sum(u for _, u in self.samples) / len(self.samples)
        return (f"SM clock {max(clocks):,} MHz (min {min(clocks):,}, mean "
                f"{sum(clocks) / len(clocks):,.0f}), GPU busy {busy:.0f}% "
                f"({len(self.samples)} samples)")


def sm_clock_now() -> str:
    """The SM clock right now, for a header line."""
    s = gpu_sample()
    return f"{s[0]:,} MHz" if s else "n/a (no nvidia-smi)"


def print_footer() -> None:
    """Print the machine, the UTC date and the exact command line (the README's tables cite them)."""
    print(f"\nmachine: {platform.node()} | {os.cpu_count()} CPUs | Python "
          f"{platform.python_version()} | SM clock now {sm_clock_now()}")
    print(f"date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    # Whole-command timings include imports: without cached bytecode every process compiles
    # its modules again (seen on the lent H200, whose image does not write .pyc files).
    prefix = sys.pycache_prefix or "beside the sources"
    print("python bytecode cache: " + ("not written (PYTHONDONTWRITEBYTECODE)"
                                       if sys.dont_write_bytecode else f"written ({prefix})"))


def timed(fn, *args, **kwargs):
    """``(result, seconds)`` of one call."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def peak_rss_bytes() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` of /proc/self/status (its own
    memory map's high-water mark). Not ``ru_maxrss``: in a child process Linux keeps the larger of
    the forking parent's peak and its own across execve, so a child of a big parent reports the
    parent's RSS. Falls back to ``ru_maxrss`` where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
