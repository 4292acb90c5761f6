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
    assert w9_fedavg.ours(rounds=3, users=5, items=160) > 0


def test_without_flower_the_line_says_so(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "flwr" else real(name, *args))
    monkeypatch.setattr(w9_fedavg, "USERS", 5)
    monkeypatch.setattr(w9_fedavg, "ITEMS", 30)
    monkeypatch.setattr(w9_fedavg, "ours", lambda rounds: 0.5)
    (line,) = list(w9_fedavg.run(Options(quick=True)))
    assert re.fullmatch(r"W9 fedavg ours_s_per_round=0\.500 flower=not-installed \(pip install -e \.\[peers\]\)", line)
