"""The clocks: virtual time jumps to the next deadline when every task is blocked; SharedClock is real time."""

from __future__ import annotations

import time

import trio
import trio.testing

from fedrecsim.clock import SharedClock, VirtualClock


async def _sleepers(log: list[tuple[str, float]]) -> None:
    async def sleeper(name: str, delays: list[float]) -> None:
        for delay in delays:
            await trio.sleep(delay)
            log.append((name, trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper, "a", [0.5, 0.25, 3600.0])
        nursery.start_soon(sleeper, "b", [0.75, 0.001])
        with trio.move_on_after(2.0):
            await trio.sleep_forever()
        log.append(("timeout", trio.current_time()))


def test_time_starts_at_zero_and_jumps_to_each_deadline_exactly() -> None:
    log: list[tuple[str, float]] = []
    wall = time.perf_counter()
    trio.run(_sleepers, log, clock=VirtualClock())
    assert time.perf_counter() - wall < 1.0
    assert sorted(log, key=lambda entry: (entry[1], entry[0])) == [
        ("a", 0.5), ("a", 0.75), ("b", 0.75), ("b", 0.751), ("timeout", 2.0), ("a", 3600.75),
    ]


def test_it_agrees_with_trios_autojumping_mock_clock() -> None:
    virtual: list[tuple[str, float]] = []
    mock: list[tuple[str, float]] = []
    trio.run(_sleepers, virtual, clock=VirtualClock())
    trio.run(_sleepers, mock, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sorted(virtual) == sorted(mock)


class _Alarm:
    """A wake source: one parked task, woken at ``at`` (what the network's delay line does)."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.task: trio.lowlevel.Task | None = None
        self.woken_at: float | None = None

    def next_wake(self) -> float:
        return self.at if self.task is not None else float("inf")

    def wake(self) -> None:
        task, self.task = self.task, None
        self.woken_at = trio.current_time()
        trio.lowlevel.reschedule(task)

    async def park(self) -> None:
        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)


def test_a_wake_source_is_woken_at_its_time_before_later_deadlines() -> None:
    log: list[tuple[str, float]] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        alarm = _Alarm(1.5)
        clock.add_source(alarm)

        async def sleeper() -> None:
            await trio.sleep(2.0)
            log.append(("sleeper", trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await alarm.park()
            log.append(("alarm", trio.current_time()))
        clock.remove_source(alarm)

    trio.run(main, clock=VirtualClock())
    assert log == [("alarm", 1.5), ("sleeper", 2.0)]


def test_a_wake_source_due_at_the_same_instant_as_a_trio_deadline_is_woken_first() -> None:
    """The delay line (a wake source) delivers what is due at t before a task sleeping until t runs."""
    seen: list[tuple[float, float | None]] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        alarm = _Alarm(1.0)
        clock.add_source(alarm)

        async def sleeper() -> None:
            await trio.sleep_until(1.0)
            seen.append((trio.current_time(), alarm.woken_at))

        with trio.move_on_after(10.0):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper)
                await alarm.park()
        clock.remove_source(alarm)

    trio.run(main, clock=VirtualClock())
    # When the sleeper runs, the source has already been woken, at the same instant.
    assert seen == [(1.0, 1.0)]


def test_a_wake_time_in_the_past_never_moves_time_back() -> None:
    log: list[float] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        await trio.sleep(2.0)
        late = _Alarm(0.5)  # due before now
        clock.add_source(late)
        with trio.move_on_after(10.0):
            await late.park()
        log.append(trio.current_time())
        await trio.sleep(1.0)
        log.append(trio.current_time())
        clock.remove_source(late)

    trio.run(main, clock=VirtualClock())
    assert log == [2.0, 3.0]


def test_of_two_wake_sources_the_earliest_is_woken_first_at_its_own_time() -> None:
    log: list[tuple[str, float]] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        later, earlier = _Alarm(2.0), _Alarm(1.0)
        clock.add_source(later)  # registered first, due last
        clock.add_source(earlier)

        async def wait(name: str, alarm: _Alarm) -> None:
            await alarm.park()
            log.append((name, trio.current_time()))

        with trio.move_on_after(10.0):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait, "later", later)
                nursery.start_soon(wait, "earlier", earlier)
        clock.remove_source(later)
        clock.remove_source(earlier)

    trio.run(main, clock=VirtualClock())
    assert log == [("earlier", 1.0), ("later", 2.0)]


async def _idle_waiter_and_sleeper(log: list[tuple[str, float]]) -> None:
    async def sleeper() -> None:
        await trio.sleep(5.0)
        log.append(("sleeper", trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        await trio.testing.wait_all_tasks_blocked()
        log.append(("idle", trio.current_time()))
        await trio.testing.wait_all_tasks_blocked()
        log.append(("idle again", trio.current_time()))


def test_wait_all_tasks_blocked_returns_before_time_moves_as_under_the_mock_clock() -> None:
    """A task waiting for everything to block runs at the current instant; only then does time jump.

    (Before the fix the clock jumped on trio's first question, so the waiter saw the sleeper finished.)
    """
    virtual: list[tuple[str, float]] = []
    mock: list[tuple[str, float]] = []
    trio.run(_idle_waiter_and_sleeper, virtual, clock=VirtualClock())
    trio.run(_idle_waiter_and_sleeper, mock, clock=trio.testing.MockClock(autojump_threshold=0))
    assert virtual == [("idle", 0.0), ("idle again", 0.0), ("sleeper", 5.0)]
    assert virtual == mock


def test_wait_all_tasks_blocked_runs_before_a_wake_source_is_woken_later() -> None:
    log: list[tuple[str, float]] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        alarm = _Alarm(1.5)
        clock.add_source(alarm)

        async def idle() -> None:
            await trio.testing.wait_all_tasks_blocked()
            log.append(("idle", trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle)
            await alarm.park()
            log.append(("alarm", trio.current_time()))
        clock.remove_source(alarm)

    trio.run(main, clock=VirtualClock())
    assert log == [("idle", 0.0), ("alarm", 1.5)]


def test_a_wake_source_due_now_is_woken_before_a_task_waiting_for_idle() -> None:
    """Due now is like a deadline that has expired: its task is runnable, so not all tasks are blocked."""
    log: list[tuple[str, float]] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        await trio.sleep(2.0)
        alarm = _Alarm(2.0)
        clock.add_source(alarm)

        async def idle() -> None:
            await trio.testing.wait_all_tasks_blocked()
            log.append(("idle", trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(idle)
            await alarm.park()
            log.append(("alarm", trio.current_time()))
        clock.remove_source(alarm)

    trio.run(main, clock=VirtualClock())
    assert log == [("alarm", 2.0), ("idle", 2.0)]


def test_a_wake_source_that_is_not_waiting_is_never_woken() -> None:
    """With nothing due anywhere (a task waits on a thread, without a deadline), no source is woken."""

    async def main() -> _Alarm:
        idle_source = _Alarm(1.0)  # never parked: next_wake() is inf
        trio.lowlevel.current_clock().add_source(idle_source)
        await trio.to_thread.run_sync(lambda: None)
        return idle_source

    idle_source = trio.run(main, clock=VirtualClock())
    assert idle_source.woken_at is None


class _IoWaits(trio.abc.Instrument):
    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def before_io_wait(self, timeout: float) -> None:
        self.timeouts.append(timeout)


def test_jumps_cost_no_wall_time_trio_is_never_told_to_sleep() -> None:
    """Each jump, to a trio deadline or to a wake source, answers 'sleep zero' (measured by trio, not a timer)."""
    waits = _IoWaits()
    during: list[float] = []

    async def main() -> None:
        clock = trio.lowlevel.current_clock()
        alarm = _Alarm(1.5)
        clock.add_source(alarm)

        async def sleeper() -> None:
            await trio.sleep(2.0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await alarm.park()
        clock.remove_source(alarm)
        during.extend(waits.timeouts)  # not trio's own shutdown, which waits on its wakeup socket

    trio.run(main, clock=VirtualClock(), instruments=[waits])
    assert len(during) >= 2 and set(during) == {0.0}


def test_the_shared_clock_reads_monotonic_seconds_since_its_epoch() -> None:
    epoch = time.monotonic() - 100.0
    clock = SharedClock(epoch)
    before = time.monotonic() - epoch
    now = clock.current_time()
    assert before <= now <= time.monotonic() - epoch
    assert clock.deadline_to_sleep_time(now - 1.0) == 0.0
    assert 0.0 < clock.deadline_to_sleep_time(now + 5.0) <= 5.0


def test_two_processes_on_one_epoch_share_deadlines() -> None:
    epoch = time.monotonic()
    deadline = trio.run(lambda: _now_plus(1.0), clock=SharedClock(epoch))
    assert abs(SharedClock(epoch).deadline_to_sleep_time(deadline) - 1.0) < 0.5


async def _now_plus(seconds: float) -> float:
    return trio.current_time() + seconds


def test_time_starts_where_a_resumed_run_left_off() -> None:
    async def slept() -> float:
        await trio.sleep(2.5)
        return trio.current_time()

    assert trio.run(slept, clock=VirtualClock(100.0)) == 102.5
