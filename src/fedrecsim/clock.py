"""Virtual time for runs: a trio clock that jumps to the next deadline whenever every task is blocked.

This is discrete-event time, as `trio.testing.MockClock(autojump_threshold=0)` provides it, but without
the mock clock's helper machinery: trio asks its clock how long it may sleep until the next deadline
only when no task is runnable, and at that moment `VirtualClock` simply advances to that deadline and
answers "not at all". One pass of trio's loop per jump instead of two, and no extra task: a simulation
wakes in virtual time for a third of the cost (the delay line of a busy run jumps hundreds of times per
round).

Wake sources: an object with ``next_wake()`` and ``wake()`` (the network's delay line) can wait without
a trio deadline at all. When nothing can run, the clock compares the earliest trio deadline with every
source's ``next_wake()``; if a source's comes first (or at the same instant), time jumps to it and the
source's ``wake()`` is called there, inside the clock's call and outside any task, instead of a cancel scope
expiring. A source does its work there or makes a waiting task runnable (the network serves the instant's
deliveries itself: the receivers they wake run in trio's next batch); it must not block.

Invariants: time starts at ``start`` (0, or the instant a resumed run's checkpoint was taken:
`fedrecsim.checkpoint`) and never goes backwards; it moves only when nothing can run, and then
exactly to the earliest pending deadline or wake. A task waiting in `trio.testing.wait_all_tasks_blocked`
runs first, at the current instant, as under `MockClock`: while one waits, the clock does not jump (it
answers "a long sleep", so trio wakes the waiter after its cushion) and jumps only at the next call. A run
in which every task waits without a deadline would block for ever, as it would under any clock --
fedrecsim's waits all carry virtual deadlines.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

import trio

from .trio_internals import GLOBAL_RUN_CONTEXT

# What to answer when nothing has a deadline: trio caps any sleep at a day anyway.
_NO_DEADLINE_SLEEP_S = 86_400.0


class WakeSource(Protocol):
    def next_wake(self) -> float:
        """The virtual time at which this source must be woken (inf: not waiting)."""

    def wake(self) -> None:
        """Do what is due at `next_wake` or make a task runnable that does; called with the clock at `next_wake`
        (or later), in the clock's call, outside any task: it must not block, and an error it cannot hand to
        a task ends the run as a `trio.TrioInternalError`."""


class VirtualClock(trio.abc.Clock):
    """A trio clock for `trio.run(..., clock=VirtualClock())` whose time only moves when all are blocked."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._sources: list[WakeSource] = []

    def add_source(self, source: WakeSource) -> None:
        self._sources.append(source)

    def remove_source(self, source: WakeSource) -> None:
        self._sources.remove(source)

    def start_clock(self) -> None:
        """Nothing to start: virtual time does not follow the wall clock."""

    def current_time(self) -> float:
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # trio calls this only when no task is runnable: jump straight to the deadline and sleep zero.
        woken, alarm = None, math.inf
        for source in self._sources:
            when = source.next_wake()
            if when < alarm:
                woken, alarm = source, when
        # Whether a task waits in `trio.testing.wait_all_tasks_blocked`: trio keeps no public record of it;
        # `MockClock` reads the same runner state.
        if min(alarm, deadline) > self._now and GLOBAL_RUN_CONTEXT.runner.waiting_for_idle:
            # Running a wait_all_tasks_blocked waiter is not a jump: it happens now, the jump afterwards.
            return _NO_DEADLINE_SLEEP_S
        if woken is not None and alarm <= deadline:
            if alarm > self._now:
                self._now = alarm
            woken.wake()
            return 0.0
        if not math.isfinite(deadline):
            return _NO_DEADLINE_SLEEP_S
        if deadline > self._now:
            self._now = deadline
        return 0.0


class SharedClock(trio.abc.Clock):
    """The real clock, read as seconds since a shared ``epoch`` of `time.monotonic` (`run_tcp`).

    Every process of a run over TCP runs on this clock with the same epoch: the system's monotonic clock
    is one for all processes of the machine, so a deadline one party computes and sends (a roster's
    ``collect_until``) means the same instant to the party that receives it -- trio's own clock starts each
    process at a random offset. Time follows the wall clock; sleeps are real.
    """

    def __init__(self, epoch: float) -> None:
        self.epoch = epoch

    def start_clock(self) -> None:
        """Nothing to start: the monotonic clock runs anyway."""

    def current_time(self) -> float:
        return time.monotonic() - self.epoch

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return max(0.0, deadline - self.current_time())


__all__ = ["SharedClock", "VirtualClock", "WakeSource"]
