"""`run_async` runs a scenario inside a trio loop that is already running, as a pytest-trio test does."""

from __future__ import annotations

import json
import time
import warnings

import pytest
import trio
import trio.testing

import fedrecsim
from fedrecsim.runner import SlowClockWarning, slow_clock_warning


async def test_run_async_on_the_autojump_clock_matches_run(tiny_fcf, autojump_clock) -> None:
    tiny_fcf["network"] = {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}}
    tiny_fcf["availability"] = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2, "dropout": 0.1}
    started = trio.current_time()
    inside = await fedrecsim.run_async(tiny_fcf)
    assert trio.current_time() - started == pytest.approx(inside.result["virtual_time_s"])
    outside = await trio.to_thread.run_sync(fedrecsim.run, tiny_fcf)
    assert inside.transcript_xxh3_128 == outside.transcript_xxh3_128
    assert inside.metrics == outside.metrics


async def test_run_async_writes_the_folder_and_a_cancelled_run_writes_nothing(tiny_fcf, autojump_clock, tmp_path) -> None:
    result = await fedrecsim.run_async(tiny_fcf, out=tmp_path / "done")
    assert json.loads((tmp_path / "done" / "result.json").read_text())["rounds_completed"] == result.result["rounds_completed"]
    tiny_fcf["run"]["rounds"] = 1000
    with trio.move_on_after(30):
        await fedrecsim.run_async(tiny_fcf, out=tmp_path / "cancelled")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["done"]


def _zero_latency(tiny_fcf: dict) -> dict:
    """The tiny scenario with zero latency and short gaps: a few tenths of a virtual second in all."""
    tiny_fcf["run"].update(rounds=2, round_gap_s=0.05)
    tiny_fcf["network"] = {"latency": {"model": "constant", "seconds": 0.0}}
    return tiny_fcf


def test_run_async_on_trios_default_clock_matches_run(tiny_fcf) -> None:
    """Issue 28: inside a plain ``trio.run`` (real time, the clock far from 0) the run completes -- the
    parties' horizons are counted from the run's start -- with `run`'s transcript and metrics."""
    scenario = _zero_latency(tiny_fcf)

    async def main() -> tuple[fedrecsim.RunResult, float]:
        started = trio.current_time()
        result = await fedrecsim.run_async(scenario)
        return result, trio.current_time() - started

    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowClockWarning)  # a quick run warns nothing
        inside, elapsed = trio.run(main)
    outside = fedrecsim.run(scenario)
    assert inside.transcript_xxh3_128 == outside.transcript_xxh3_128
    assert inside.metrics == outside.metrics
    assert inside.result["virtual_time_s"] == outside.result["virtual_time_s"]
    assert elapsed >= inside.result["virtual_time_s"]  # real time paced the run: it never ran ahead


def test_run_async_on_a_mock_clock_far_from_zero_matches_run(tiny_fcf) -> None:
    """Issue 28: on an autojumping MockClock started at 10^6 s the run's times are still counted from its
    start, bit for bit: the same transcript hash (which covers every delivery time and every ``sent_at``)."""
    tiny_fcf["network"] = {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}, "resolution_s": 0.0}
    tiny_fcf["availability"] = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2, "dropout": 0.1}
    clock = trio.testing.MockClock(rate=0, autojump_threshold=0)
    clock.jump(1e6 + 0.1234567)

    async def main() -> tuple[fedrecsim.RunResult, float]:
        started = trio.current_time()
        result = await fedrecsim.run_async(tiny_fcf, transcript=True)
        return result, trio.current_time() - started

    inside, elapsed = trio.run(main, clock=clock)
    outside = fedrecsim.run(tiny_fcf, transcript=True)
    assert inside.transcript_xxh3_128 == outside.transcript_xxh3_128
    assert inside.metrics == outside.metrics
    assert [row.time for row in inside.ledger.transcript] == [row.time for row in outside.ledger.transcript]
    assert elapsed == pytest.approx(inside.result["virtual_time_s"])


def test_run_async_warns_of_the_wall_time_a_real_time_run_takes(tiny_fcf) -> None:
    """Issue 28: before a run that real time would make slow, `run_async` says how long it will take (here
    100 rounds 30 s apart: at least 50 min), and the result keeps the warning; the run itself is then
    cancelled, having started in real time."""
    tiny_fcf["run"].update(rounds=100, round_gap_s=30.0)

    async def main() -> None:
        with trio.move_on_after(0.2):
            await fedrecsim.run_async(tiny_fcf)

    with pytest.warns(SlowClockWarning, match=r"at least 50 min of wall time") as caught:
        trio.run(main)
    assert "run.round_gap_s = 30 s" in str(caught[0].message)
    assert "MockClock(autojump_threshold=0)" in str(caught[0].message)


def test_run_async_warns_on_a_mock_clock_that_never_moves(tiny_fcf) -> None:
    """A MockClock without rate or autojump would leave the run at its first instant for ever: said first."""

    async def main() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            await fedrecsim.run_async(tiny_fcf)

    with pytest.warns(SlowClockWarning, match="neither runs"):
        trio.run(main, clock=trio.testing.MockClock())


def test_the_warning_follows_the_pace_of_the_clock(tiny_fcf) -> None:
    """An autojumping clock takes no wall time waiting, nor does a clock a thousand times faster than real
    time here; a clock at real pace does."""
    tiny_fcf["run"].update(rounds=100, round_gap_s=30.0)
    assert slow_clock_warning(fedrecsim.parse_scenario(tiny_fcf), trio.testing.MockClock(autojump_threshold=0)) is None
    assert slow_clock_warning(fedrecsim.parse_scenario(tiny_fcf), trio.testing.MockClock(rate=1000.0)) is None
    assert "at least 50 min" in slow_clock_warning(fedrecsim.parse_scenario(tiny_fcf), trio.testing.MockClock(rate=1.0))


def test_real_time_waits_for_every_party_of_an_instant_before_the_next(tiny_fcf, monkeypatch) -> None:
    """On a clock that does not jump, wall time passes while parties compute: here each user spends 2 ms
    of wall time on its step and yields to the loop before replying, so the next instant (1 ms later in
    the run's time) is due on the loop's clock before every user has replied. The delay line serves it
    only once every task is blocked, so the replies are still sent at their instant: `run`'s transcript."""
    from fedrecsim.protocols.fcf import roles

    scenario = _zero_latency(tiny_fcf)
    expected = fedrecsim.run(scenario)

    async def slow_compute(self) -> None:
        time.sleep(0.002)
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(roles.ExplicitUser, "compute", slow_compute)

    async def main() -> fedrecsim.RunResult:
        return await fedrecsim.run_async(scenario)

    inside = trio.run(main)
    assert inside.transcript_xxh3_128 == expected.transcript_xxh3_128
    assert inside.metrics == expected.metrics
