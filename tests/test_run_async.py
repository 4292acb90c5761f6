"""`run_async` runs a scenario inside a trio loop that is already running, as a pytest-trio test does."""

from __future__ import annotations

import json

import pytest
import trio

import fedrecsim


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
