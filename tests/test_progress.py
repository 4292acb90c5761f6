"""The progress bar ticks within a round -- a long set-up or a big round shows that it moves -- and ticking
changes nothing about the run."""

from __future__ import annotations

import io
import types

import pytest

import fedrecsim
from fedrecsim.progress import ProgressBar
from fedrecsim.runner import RoundStatus

# Hua et al. S3 at a tiny size: the set-up (pre-sharing) and each iteration span many deliveries.
TINY_S3 = {
    "run": {"protocol": "dpmf", "name": "tiny-s3", "seed": 5, "rounds": 3},
    "data": {"source": "synthetic", "users": 40, "items": 50, "ratings": 800},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "protocol": {"scenario": "S3", "d": 4, "max_users": 10, "k_presharing": 3, "replay": False},
}


class Recorder:
    """A progress callback that keeps every round end and every tick."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float]] = []

    def __call__(self, completed: int, total: int) -> None:
        self.events.append(("round", completed, 0.0))

    def tick(self, status: RoundStatus) -> None:
        self.events.append(("tick", status.round, status.virtual_s))


def _fake_timer(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    """Every reading of the bar's timer is ``step_s`` later than the one before (no wall-clock asserts)."""
    readings = iter(range(10**9))
    monkeypatch.setattr("fedrecsim.progress.time", types.SimpleNamespace(perf_counter=lambda: step_s * next(readings)))


def test_the_runner_ticks_within_the_set_up_and_within_each_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    recorder = Recorder()
    fedrecsim.run(TINY_S3, progress=recorder)
    events = recorder.events
    assert [event for event in events if event[0] == "round"] == [("round", 1, 0.0), ("round", 2, 0.0), ("round", 3, 0.0)]
    first_round_end = events.index(("round", 1, 0.0))
    set_up = [virtual for kind, round_index, virtual in events[:first_round_end] if kind == "tick" and round_index == 0]
    within_first = [virtual for kind, round_index, virtual in events[:first_round_end] if kind == "tick" and round_index == 1]
    # The set-up's pre-sharing and round 1 each take many ticks, at a virtual time that moves on.
    assert len(set_up) > 3 and len(within_first) > 3
    assert set_up == sorted(set_up) and set_up[-1] > set_up[0] and within_first[-1] > within_first[0] >= set_up[-1]
    ticks = [virtual for kind, _, virtual in events if kind == "tick"]
    assert ticks == sorted(ticks)


def test_ticks_are_at_most_every_tenth_of_a_second_of_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the runner's timer reading 0.04 s more at each loop pass, at most every third pass ticks."""
    readings = iter(range(10**9))
    monkeypatch.setattr("fedrecsim.runner.time", types.SimpleNamespace(perf_counter=lambda: 0.04 * next(readings)))
    counted = Recorder()
    fedrecsim.run(TINY_S3, progress=counted)
    ticks = sum(1 for kind, _, _ in counted.events if kind == "tick")
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    every = Recorder()
    fedrecsim.run(TINY_S3, progress=every)
    passes = sum(1 for kind, _, _ in every.events if kind == "tick")
    assert 0 < ticks and passes / 3 - 1 <= ticks <= passes / 3 + 1


def test_ticking_changes_neither_the_transcript_nor_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = fedrecsim.run(TINY_S3)
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    ticked = fedrecsim.run(TINY_S3, progress=Recorder())
    assert ticked.transcript_xxh3_128 == plain.transcript_xxh3_128
    assert ticked.result["metrics"] == plain.result["metrics"] and ticked.result["ledger"] == plain.result["ledger"]


def test_the_bar_names_the_round_under_way_and_its_virtual_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    _fake_timer(monkeypatch, 2.0)
    stream = io.StringIO()
    fedrecsim.run(TINY_S3, progress=ProgressBar(stream))
    drawn = stream.getvalue().split("\r")[1:]
    assert any(line.startswith(f"[{'.' * 30}] 0/3 rounds, set-up at ") for line in drawn)
    assert any(line.startswith(f"[{'#' * 10}{'.' * 20}] 1/3 rounds, round 2 at ") for line in drawn)
    assert drawn[-1].startswith(f"[{'#' * 30}] 3/3 rounds ") and drawn[-1].endswith("s\n")
    assert all("\n" not in line for line in drawn[:-1])


def test_a_tick_draws_like_a_round_end_at_most_ten_times_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_timer(monkeypatch, 0.05)  # started at 0; then 0.05, 0.10, ... s
    stream = io.StringIO()
    bar = ProgressBar(stream)
    status = RoundStatus(round=4, completed=3, total=10, virtual_s=1234.5, ledger=None)  # type: ignore[arg-type]
    for _ in range(19):  # readings 0.05 .. 0.95: nothing during the first second
        bar.tick(status)
    assert stream.getvalue() == ""
    bar.tick(status)  # 1.0 s
    bar.tick(status)  # 1.05 s: only 0.05 s after the last drawing
    bar.tick(status)  # 1.1 s
    lines = stream.getvalue().split("\r")[1:]
    line = f"[{'#' * 9}{'.' * 21}] 3/10 rounds, round 4 at 1,234.5 s virtual"
    assert lines == [f"{line}     1.0s", f"{line}     1.1s"]
    assert not bar.tick(RoundStatus(0, 10, 10, 0.0, None)) and len(stream.getvalue().split("\r")) == 3  # type: ignore[arg-type]


def test_a_shorter_line_blanks_the_tail_of_the_longer_one_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_timer(monkeypatch, 2.0)
    stream = io.StringIO()
    bar = ProgressBar(stream)
    bar.tick(RoundStatus(2, 1, 2, 5.0, None))  # type: ignore[arg-type]
    long_line = stream.getvalue()
    bar(2, 2)
    short = stream.getvalue()[len(long_line):]
    # The same width, the padding before the elapsed time (the line still ends with it), and the line's end.
    assert len(short) == len(long_line) + 1 and short.endswith("s\n")
    assert short.startswith(f"\r[{'#' * 30}] 2/2 rounds" + " " * (len(", round 2 at 5.0 s virtual") + 2))


class LedgerReader(Recorder):
    """Keeps the ledger each tick was given."""

    def __init__(self) -> None:
        super().__init__()
        self.ledgers: list[object] = []

    def tick(self, status: RoundStatus) -> None:
        super().tick(status)
        self.ledgers.append(status.ledger)


def test_a_tick_reads_the_runs_own_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    reader = LedgerReader()
    result = fedrecsim.run(TINY_S3, progress=reader)
    assert reader.ledgers and all(ledger is result.ledger for ledger in reader.ledgers)


async def test_run_async_ticks_in_virtual_seconds_since_its_own_start_and_not_after_it_returns(
    monkeypatch: pytest.MonkeyPatch, autojump_clock
) -> None:
    import time

    import trio

    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)
    await trio.sleep(1000.0)  # the loop's clock is far from 0 when the run starts
    recorder = Recorder()
    result = await fedrecsim.run_async(TINY_S3, progress=recorder)
    ticks = [virtual for kind, _, virtual in recorder.events if kind == "tick"]
    assert ticks and 0.0 <= min(ticks) and max(ticks) <= result.result["virtual_time_s"]
    seen = len(recorder.events)
    time.sleep(0.01)
    await trio.sleep(1.0)  # the loop passes again: the run's instrument is gone
    assert len(recorder.events) == seen


def test_a_tick_that_raises_is_dropped_and_the_run_completes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedrecsim.runner.TICK_EVERY_S", 0.0)

    class Failing(Recorder):
        def tick(self, status: RoundStatus) -> None:
            raise RuntimeError("a broken progress display")

    failing = Failing()
    assert fedrecsim.run(TINY_S3, progress=failing).result["rounds_completed"] == 3
    assert [event for event in failing.events if event[0] == "round"] == [("round", 1, 0.0), ("round", 2, 0.0), ("round", 3, 0.0)]


def test_without_a_tick_nothing_is_instrumented(caplog: pytest.LogCaptureFixture) -> None:
    """A run whose progress callback has no ``tick`` adds no instrument that could fail and be logged."""
    with caplog.at_level("ERROR"):
        fedrecsim.run(TINY_S3, progress=lambda completed, total: None)
    assert caplog.records == []
