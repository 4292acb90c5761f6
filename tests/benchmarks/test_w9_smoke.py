"""W9 at a tiny size: our side runs the FedAvg shape to the end and the line says when Flower is absent.

Nothing here looks at wall-clock times, and Flower itself is not started (Ray takes tens of seconds).
"""

from __future__ import annotations

import importlib.util
import re

import fedrecsim
from benchmarks import w9_fedavg
from benchmarks.common import Options


def test_the_scenario_is_implicit_fcf_with_everyone_selected_and_zero_latency() -> None:
    result = fedrecsim.run(w9_fedavg.scenario(rounds=2, users=6, items=160))
    kinds = result.result["ledger"]["kinds"]
    # Every user receives the whole model every round and answers with a gradient of the same shape.
    assert kinds["fcf.model"]["msgs"] == kinds["fcf.model_gradient"]["msgs"] == 2 * 6
    assert kinds["fcf.model"]["bytes"] > 2 * 6 * 160 * w9_fedavg.D * 8


def test_ours_reports_seconds_per_round() -> None:
    measured = w9_fedavg.ours(rounds=3, users=5, items=160)
    assert measured["s_per_round"] > 0 and measured["cpu_s_per_round"] > 0


def _in_process(calls: list[tuple[str, dict]], peak_rss: list[float]):  # type: ignore[no-untyped-def]
    """A stand-in for `run_isolated` that records its calls and answers at once, each run with its own peak."""

    def isolated(module: str, function: str, **kwargs):  # type: ignore[no-untyped-def]
        assert module == w9_fedavg.__name__
        calls.append((function, kwargs))
        if function == "ours":
            result = {"s_per_round": 0.5 + len(calls) / 10, "cpu_s_per_round": 0.4 - len(calls) / 10}
        else:
            result = {"s_per_round": 6.0, "startup_s": 20.0}
        return {**result, "peak_rss_mb": peak_rss[len(calls) - 1]}

    return isolated


def test_without_flower_the_line_says_so(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "flwr" else real(name, *args))
    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(w9_fedavg, "run_isolated", _in_process(calls, [300.0]))
    (line,) = list(w9_fedavg.run(Options(quick=True)))
    assert re.fullmatch(
        r"W9 fedavg ours_s_per_round=0\.600 ours_cpu_s_per_round=0\.300 "
        r"flower=not-installed \(pip install -e \.\[peers\]\) peak_rss_mb=300 users=100 rounds=3",
        line,
    ), line
    assert calls == [("ours", {"rounds": w9_fedavg.QUICK_ROUNDS})]


def test_with_flower_both_sides_run_apart_and_the_ratio_is_theirs_over_ours(monkeypatch) -> None:
    real = importlib.util.find_spec
    installed = object()  # find_spec's answer for an installed Flower; the test never imports it
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: installed if name == "flwr" else real(name, *args)
    )
    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(w9_fedavg, "run_isolated", _in_process(calls, [250.0, 310.0, 900.0, 900.0]))
    (line,) = list(w9_fedavg.run(Options(quick=False, repeats=2)))
    # Ours: best of 2 by each clock (0.6 s, 0.2 s), peak the larger of our two runs; Flower's 6.0 s a round,
    # 20 s to start; the ratio is over our wall time.
    assert line == (
        "W9 fedavg ours_s_per_round=0.600 ours_cpu_s_per_round=0.200 flower_s_per_round=6.000 ratio=10.0 "
        "ratio_target_min=10 "
        "flower_startup_s=20.0 peak_rss_mb=310 users=100 rounds=10"
    )
    assert [function for function, _ in calls] == ["ours", "ours", "flower", "flower"]
