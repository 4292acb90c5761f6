"""The virtual clock: time jumps exactly to the next deadline when every task is blocked."""

from __future__ import annotations

import time

import trio
import trio.testing

from fedrecsim.clock import VirtualClock


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
