"""Krum's wall time: ``timing.krum_filter_s`` in result.json, and the summary's line when it dominates the run.

The clock SecureFilter reads is replaced by a fake one, so no assertion depends on how fast this machine is.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.protocols.fedvae import aggregation

SCENARIO = """
[run]
name = "fedvae-timing"
protocol = "fedvae"
seed = 5
rounds = 3

[data]
source = "synthetic"
feedback = "implicit"
users = 50
items = 40
ratings = 900
split = "heldout_users"
test_fraction = 0.2

[protocol]
users_per_round = 12
hidden = 16
latent = 4
baseline = false
"""


def fake_clock(step_s: float):  # type: ignore[no-untyped-def]
    """A perf_counter that advances ``step_s`` at every reading: each filtered round then lasts exactly ``step_s``."""
    ticks = itertools.count()
    return lambda: next(ticks) * step_s


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *overrides: str) -> tuple[dict, str]:
    path = tmp_path / "fedvae.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    sets = [argument for override in overrides for argument in ("--set", override)]
    assert main(["run", str(path), "--out", str(out), *sets]) == 0
    return json.loads((out / "result.json").read_text()), capsys.readouterr().out


def test_a_run_whose_krum_filter_takes_most_of_its_time_says_so_in_its_summary(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(aggregation, "perf_counter", fake_clock(1000.0))
    document, printed = run_cli(tmp_path, capsys)
    assert document["timing"] == {"krum_filter_s": 3000.0}  # three rounds filtered, 1,000 s each
    assert "krum_filter_s" not in document["metrics"]["final"]
    assert "most of the wall time went to krum_filter_s: 3,000.00 s of " in printed


def test_a_run_whose_filter_is_a_small_part_of_it_reports_the_time_without_the_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(aggregation, "perf_counter", fake_clock(0.0))
    document, printed = run_cli(tmp_path, capsys)
    assert document["timing"] == {"krum_filter_s": 0.0}
    assert "most of the wall time" not in printed


def test_without_krum_nothing_is_filtered_and_krum_filter_s_is_zero(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(aggregation, "perf_counter", fake_clock(1000.0))
    document, printed = run_cli(tmp_path, capsys, 'protocol.secure_filter="none"')
    assert document["timing"] == {"krum_filter_s": 0.0} and "most of the wall time" not in printed


def test_krum_filter_s_is_the_real_clocks_time_and_leaves_the_deterministic_results_alone() -> None:
    """Two runs of one scenario: the same transcript and metrics, whatever the filter's wall time was."""
    table = fedrecsim.parse_scenario(tomllib.loads(SCENARIO))
    first, second = fedrecsim.run(table), fedrecsim.run(table)
    assert first.transcript_xxh3_128 == second.transcript_xxh3_128 and first.rounds == second.rounds
    for result in (first, second):
        assert 0.0 < result.result["timing"]["krum_filter_s"] < result.result["wall_time_s"]
