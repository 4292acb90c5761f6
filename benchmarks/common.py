"""What every workload shares: the run options, best-of timing, and isolated runs for memory figures.

A peak-RSS figure is only meaningful in a process that ran nothing else, so `run_isolated` runs one
function in a fresh interpreter (``python -m benchmarks.common MODULE FUNCTION JSON``) and reads back its
JSON result, to which the child adds its own ``peak_rss_mb``.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """How to run a workload.

    Attributes:
        quick: run the small sizes (seconds, for smoke tests) instead of the standard ones.
        repeats: timed repetitions per side (the best is reported); None means the workload's default.
    """

    quick: bool = False
    repeats: int | None = None

    def __post_init__(self) -> None:
        if self.repeats is not None and (isinstance(self.repeats, bool) or self.repeats < 1):
            raise ValueError(f"repeats must be a positive integer, got {self.repeats!r}")


def timed(function: Callable[[], T]) -> tuple[T, float]:
    """Call ``function`` once after a full garbage collection; return its result and wall seconds.

    Collecting first keeps the previous run's garbage from being charged to this one.
    """
    result, wall, _ = clocked(function)
    return result, wall


def clocked(function: Callable[[], T]) -> tuple[T, float, float]:
    """`timed`, with the CPU seconds this process spent (``time.process_time``): the result, wall seconds
    and CPU seconds.

    On a shared machine the wall time also counts the time other processes held the core; the CPU time
    does not, so a ratio of two single-threaded sides' CPU times survives a loaded machine better.
    """
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _own_peak_kib() -> int | None:
    """This process's own peak resident set size in KiB, from Linux's ``VmHWM`` (None elsewhere).

    ``getrusage``'s ``ru_maxrss`` is no such figure on Linux: a process started by ``fork`` and ``exec``
    keeps the peak of the forked copy of its parent, so a fresh interpreter started by a parent holding
    1 GB reports at least 1 GB. ``VmHWM`` belongs to the address space, which ``exec`` replaces."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mb() -> float:
    """The peak resident set size in MiB of this process or of its largest waited-for child, whichever is
    larger (Linux reports KiB, macOS bytes). This process's own peak is its own on Linux (`_own_peak_kib`),
    not its parent's at the fork that started it."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    own = _own_peak_kib()
    if own is not None:
        return max(own, children) / 1024
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, children)
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run_isolated(module: str, function: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``module.function(**kwargs)`` in a fresh interpreter and return its JSON-able dict result.

    The child inherits this process's import path, so it imports the same ``fedrecsim`` and
    ``benchmarks``, and its environment. Its result gains ``peak_rss_mb``, the child's own peak.

    Raises:
        RuntimeError: the child failed; the message carries its stderr.
    """
    path = os.pathsep.join(entry for entry in sys.path if entry)
    inherited = dict(os.environ, PYTHONPATH=path)
    completed = subprocess.run(
        [sys.executable, "-m", __name__, module, function, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        env=inherited,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"isolated run of {module}.{function} failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _child(module: str, function: str, arguments: str) -> None:
    result = getattr(importlib.import_module(module), function)(**json.loads(arguments))
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    _child(*sys.argv[1:4])
