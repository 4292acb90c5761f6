"""A synthetic data set that cannot be drawn is refused when the scenario is read, naming the key, before a
run or a sweep writes anything (its result folder, a failed run in ``runs/``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "fcf_static.toml"


def _parse(*overrides: str):  # type: ignore[no-untyped-def]
    return parse_scenario(apply_overrides(read_tables(SCENARIO), list(overrides)))


def test_more_ratings_than_cells_is_refused_naming_data_ratings() -> None:
    with pytest.raises(ConfigError, match=r"^data\.ratings: 101 exceeds data\.users \* data\.items = 100$"):
        _parse("data.users=10", "data.items=10", "data.ratings=101")
    assert _parse("data.users=10", "data.items=10", "data.ratings=100").data.ratings == 100


@pytest.mark.parametrize(("minimum", "items"), [(21, 30), (5, 4)])
def test_a_minimum_per_user_the_ratings_or_items_cannot_give_is_refused(minimum: int, items: int) -> None:
    with pytest.raises(ConfigError, match=r"^data\.min_per_user: "):
        _parse("data.users=10", f"data.items={items}", "data.ratings=40", f"data.min_per_user={minimum}")


def test_a_loaded_data_set_is_not_held_to_the_synthetic_sizes() -> None:
    scenario = _parse('data.source="movielens-100k"', 'data.path="u.data"', "data.users=1", "data.items=1")
    assert scenario.data.ratings > scenario.data.users * scenario.data.items


def test_a_sweep_with_an_impossible_point_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "fedrecsim.cli", "sweep", str(SCENARIO), "--set", "data.users=10",
               "--set", "data.items=10", "--grid", "data.ratings=50,1000", "--out", str(out)]
    finished = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert finished.returncode == 2
    assert "data.ratings: 1000 exceeds data.users * data.items = 100" in finished.stderr
    assert "Traceback" not in finished.stderr and not out.exists()
