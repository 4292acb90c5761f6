"""A run is a function of its scenario and seed, not of trio's scheduling order.

trio deliberately runs the tasks woken at one instant in a random order (it reverses each batch with
probability 1/2, drawing from a module-level generator seeded from the OS). Each test reseeds that
generator with several values -- different schedules of the same run -- and requires one transcript and
one set of metrics. Zero-latency links and churn in continuous time are where a race would show: a
message sent at an instant must not be delivered at that instant, and a sleep ending at an instant must
see every message due by then.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
import trio

import fedrecsim

SCHEDULES = range(4)

_S3: dict[str, Any] = {
    "run": {"protocol": "dpmf", "name": "schedules-s3", "seed": 5, "rounds": 3, "round_timeout_s": 10.0},
    "data": {"source": "synthetic", "users": 30, "items": 40, "ratings": 600},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"scenario": "S3", "d": 6, "epsilon": 1.0, "max_users": 10, "k_presharing": 4},
}


def _variant(**changes: dict[str, Any]) -> dict[str, Any]:
    scenario = copy.deepcopy(_S3)
    for table, values in changes.items():
        scenario[table] = values
    return scenario


SCENARIOS = {
    "zero latency": _S3,
    "markov churn, stragglers": _variant(
        availability={"model": "markov", "mean_on_s": 2.0, "mean_off_s": 1.0, "compute_median_s": 0.01, "slow_fraction": 0.3},
        network={"latency": {"model": "constant", "seconds": 0.0}, "resolution_s": 0.0},
    ),
    "lognormal, dropout, loss": _variant(
        availability={"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6, "dropout": 0.1},
        network={"latency": {"model": "lognormal", "median_s": 0.001, "sigma": 0.5}, "loss": 0.05},
    ),
}


def _run_under(schedule: int, scenario: dict[str, Any], monkeypatch: pytest.MonkeyPatch, out: Path) -> fedrecsim.RunResult:
    monkeypatch.setattr(trio._core._run, "_r", random.Random(schedule))
    return fedrecsim.run(copy.deepcopy(scenario), transcript=True, out=out)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_schedule_gives_the_same_run(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runs = [_run_under(schedule, SCENARIOS[name], monkeypatch, tmp_path / str(schedule)) for schedule in SCHEDULES]
    assert len({run.transcript_xxh3_128 for run in runs}) == 1
    assert all(run.result["metrics"] == runs[0].result["metrics"] for run in runs)
    # transcript.csv too, though its losses and rejections are recorded as the tasks of an instant run.
    assert len({(tmp_path / str(schedule) / "transcript.csv").read_bytes() for schedule in SCHEDULES}) == 1
    assert runs[0].result["ledger"]["roles"]["user"]["sent_msgs"] > 100
