"""W2's floor is the protocol's maths, and both DP-MF workloads run at a tiny size (no timings asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import w2_dpmf, w3_dpmf_netflix
from benchmarks.common import Options
from fedrecsim.data import prepare_data
from fedrecsim.network.availability import BernoulliChurn
from fedrecsim.protocols.dpmf.central import train_baseline


def test_the_floor_without_noise_is_unprotected_mf() -> None:
    """Every user online and served, eps huge: masks, pieces and the ring cancel to plain MF."""
    scenario = w2_dpmf.scenario(w2_dpmf.W2Size(3, ("data.users=40", "data.items=50", "data.ratings=800",
                                                    "protocol.d=6", "protocol.epsilon=1e9", "protocol.max_users=1000")))
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    U0, V0, U, V = w2_dpmf.floor(train, scenario.protocol, BernoulliChurn(0.0, 0.0, 1.0), 3, seed=1)
    reference_u, reference_v = train_baseline(U0, V0, train, scenario.protocol.hyper, 3)
    np.testing.assert_allclose(V, reference_v, rtol=0, atol=1e-6)
    np.testing.assert_allclose(U, reference_u, rtol=0, atol=1e-6)
    assert not np.allclose(V, V0)


def test_w2_and_w3_run_at_a_tiny_size() -> None:
    size = w2_dpmf.W2Size(2, w2_dpmf.QUICK.overrides)
    for side in (w2_dpmf.simulate(size), w2_dpmf.floor_time(size)):
        assert set(side) == {"cpu_s", "wall_s"} and side["cpu_s"] > 0 and side["wall_s"] > 0
    figures = w3_dpmf_netflix.measure(users=3000, rounds=2)
    assert figures["users"] == 3000 and figures["s_per_iter"] > 0 and figures["cpu_s_per_iter"] > 0
    # Every iteration serves up to K users: item vectors, contributions, requests, plus joins and leaves.
    assert figures["msgs_per_iter"] >= 3 * 100
    assert w3_dpmf_netflix.carry_seconds_per_message(served=20, rounds=2) > 0


def test_w2s_line_prints_both_clocks_and_its_simulations_peak_rss() -> None:
    (line,) = w2_dpmf.run(Options(quick=True))
    figures = dict(part.split("=") for part in line.split()[2:])
    assert set(figures) == {
        "sim_s", "floor_s", "ratio", "sim_wall_s", "floor_wall_s", "wall_ratio", "cpu", "peak_rss_mb"
    } and float(figures["peak_rss_mb"]) > 0
    assert figures["cpu"] == "process_time"


def test_w2s_headline_ratio_is_the_best_cpu_times_the_sides_alternating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted sides: the ratio is best sim CPU over best floor CPU, the wall ratio beside it from the best walls
    (each side's best taken on its own), and the repetitions run simulation, floor, simulation, floor, ..."""
    calls: list[str] = []
    sims = iter([{"cpu_s": 9.0, "wall_s": 30.0}, {"cpu_s": 6.0, "wall_s": 40.0}, {"cpu_s": 7.0, "wall_s": 20.0}])
    floors = iter([{"cpu_s": 3.0, "wall_s": 5.0}, {"cpu_s": 4.0, "wall_s": 4.0}, {"cpu_s": 2.5, "wall_s": 8.0}])

    def isolated(module: str, function: str, **kwargs: object) -> dict[str, float]:
        calls.append("sim")
        return {**next(sims), "peak_rss_mb": 100.0 + len(calls)}

    def floor_time(size: w2_dpmf.W2Size) -> dict[str, float]:
        calls.append("floor")
        return next(floors)

    monkeypatch.setattr(w2_dpmf, "run_isolated", isolated)
    monkeypatch.setattr(w2_dpmf, "floor_time", floor_time)
    (line,) = w2_dpmf.run(Options(quick=True, repeats=3))
    assert calls == ["sim", "floor"] * 3
    assert line == (
        "W2 dpmf_s3 sim_s=6.00 floor_s=2.50 ratio=2.40 sim_wall_s=20.00 floor_wall_s=4.00 wall_ratio=5.00 "
        "cpu=process_time peak_rss_mb=105"
    )
