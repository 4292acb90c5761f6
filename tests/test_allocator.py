"""`fedrecsim.allocator`: a process that runs simulations keeps the memory it frees mapped (glibc)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from fedrecsim import allocator, cli, sweep

_GLIBC = hasattr(ctypes.CDLL(None), "mallopt")

# 50 blocks of 8 MB allocated, touched and freed; resident MB at the peak and after the frees.
_FREE_AFTER_PEAK = textwrap.dedent("""
    import sys
    import numpy as np
    from fedrecsim.allocator import keep_freed_memory

    def resident_mb():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096 / 2**20

    took = keep_freed_memory() if sys.argv[1] == "keep" else None
    blocks = [np.ones(1_000_000) for _ in range(50)]
    peak = resident_mb()
    del blocks
    print(took, peak, resident_mb())
""")


def _resident_after_frees(mode: str) -> tuple[str, float, float]:
    """Run `_FREE_AFTER_PEAK` in a child that imports the fedrecsim this process imported."""
    path = os.pathsep.join(entry for entry in sys.path if entry)
    out = subprocess.run([sys.executable, "-c", _FREE_AFTER_PEAK, mode], capture_output=True, text=True, check=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=path))
    took, peak, after = out.stdout.split()
    return took, float(peak), float(after)


@pytest.mark.skipif(not _GLIBC or sys.platform != "linux", reason="glibc's mallopt and /proc are Linux's")
def test_freed_blocks_stay_mapped_where_glibc_would_give_them_back() -> None:
    took, peak, after = _resident_after_frees("keep")
    assert took == "True" and peak > 400 and after > 0.95 * peak
    _, peak, after = _resident_after_frees("default")
    assert after < 0.5 * peak  # what the setting prevents: glibc trims and unmaps what was freed


def test_without_mallopt_it_does_nothing_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: object())
    assert allocator.keep_freed_memory() is False


def test_the_command_and_the_sweeps_workers_keep_freed_memory(tmp_path, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append("run"))
    monkeypatch.setattr(cli, "run", lambda *args, **kwargs: (_ for _ in ()).throw(cli.OutputError("here", "stop")))
    (tmp_path / "s.toml").write_text('[run]\nprotocol = "fcf"\n')
    assert cli.main(["run", str(tmp_path / "s.toml"), "--quiet", "--out", str(tmp_path / "out")]) == 2
    assert calls == ["run"]
    pools: list[tuple[object, tuple[object, ...]]] = []

    class Pool:
        def __init__(self, **options: object) -> None:
            pools.append((options["initializer"], options["initargs"]))

        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    class Thread:
        """The worker's lifeline watcher, not started here: the test process is no pool worker."""

        def __init__(self, **options: object) -> None:
            pass

        def start(self) -> None:
            calls.append("lifeline")

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", Pool)
    with sweep.local_pool(1):
        pass
    (initializer, initargs), = pools
    monkeypatch.setattr(sweep, "keep_freed_memory", lambda: calls.append("worker"))
    monkeypatch.setattr(sweep.threading, "Thread", Thread)
    monkeypatch.setattr(sweep.signal, "signal", lambda *args: None)
    initializer(*initargs)
    assert calls == ["run", "lifeline", "worker"]


class _FakeLibc:
    """A C library whose ``mallopt`` records its calls and answers from a list (1: taken, 0: refused)."""

    def __init__(self, answers: list[int]) -> None:
        self.calls: list[tuple[int, int]] = []
        answers = list(answers)

        def mallopt(parameter: int, value: int) -> int:
            self.calls.append((parameter, value))
            return answers.pop(0)

        self.mallopt = mallopt


@pytest.mark.parametrize("answers, took", [([1, 1], True), ([1, 0], False), ([0, 1], False)])
def test_it_sets_the_mmap_threshold_to_its_maximum_and_turns_trimming_off(monkeypatch, answers, took) -> None:
    libc = _FakeLibc(answers)
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: libc)
    assert allocator.keep_freed_memory() is took
    # M_MMAP_THRESHOLD (-3) to 32 MiB, then M_TRIM_THRESHOLD (-1) to -1, which glibc reads as SIZE_MAX.
    assert libc.calls == [(-3, 32 * 1024 * 1024), (-1, -1)]
    assert libc.mallopt.argtypes == (ctypes.c_int, ctypes.c_int) and libc.mallopt.restype is ctypes.c_int
