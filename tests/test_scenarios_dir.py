"""Every scenario file in scenarios/ runs, at a tiny size, as a test."""

from __future__ import annotations

from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml"))
TINY = ["run.rounds=2", "data.users=30", "data.items=120", "data.ratings=900"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_scenario_runs_at_tiny_size(path: Path) -> None:
    tables = read_tables(path)
    overrides = list(TINY) if tables.get("data", {}).get("source", "synthetic") == "synthetic" else ["run.rounds=2"]
    if tables["run"]["protocol"] == "ldp_implicit":
        # A pool is released only at min_users distinct users: at 30 users the files' own thresholds never fill.
        overrides.append("protocol.min_users=10")
    scenario = parse_scenario(apply_overrides(tables, overrides))
    result = fedrecsim.run(scenario)
    assert result.result["rounds_completed"] == 2
    assert result.metrics
    assert all(invariant["violations"] == 0 for invariant in result.result["invariants"])
    assert result.result["warnings"] == []


def test_the_scenarios_folder_is_not_empty() -> None:
    assert {path.name for path in SCENARIOS} >= {"fcf_churn.toml", "fcf_static.toml"}
