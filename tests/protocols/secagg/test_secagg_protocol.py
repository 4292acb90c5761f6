"""The stand-alone ``secagg`` protocol end to end: exact sums under dropout, real and ideal mode alike,
SecAgg+, aborts reported as warnings, a crashed user idle until it recovers, and a refused configuration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.errors import ConfigError
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "secagg_small.toml"


def _run(*overrides: str) -> fedrecsim.RunResult:
    tables = apply_overrides(read_tables(SCENARIO), ["protocol.length=64", *overrides])
    return fedrecsim.run(parse_scenario(tables))


def test_the_scenario_sums_exactly_under_dropout_and_reports_stages_and_bytes() -> None:
    result = _run()
    rounds = result.rounds
    assert len(rounds) == 3 and all(row["aborted"] == 0 and row["wrong_words"] == 0 for row in rounds)
    assert any(row["participants"] < 20 for row in rounds), "dropout 0.1 crashes someone in 3 rounds of 20 users"
    for row in rounds:
        assert row["u0"] >= row["u1"] >= row["u2"] >= row["u3"] >= row["u5"]
        assert row["participants"] == row["u3"]
        assert 0 < row["max_abs_error"] <= row["participants"] * 2.0**-17
        assert (row["threshold"], row["degree"]) == (11, 19)
    [monitor] = result.result["invariants"]
    assert (monitor["name"], monitor["checked"], monitor["violations"]) == ("masks_cancel", 3, 0)
    final = result.result["metrics"]["final"]
    assert final["user_sent_bytes"] > 64 * 4 and final["server_recv_bytes"] > 0
    assert result.result["privacy"]["mechanism"] == "secure aggregation (Bonawitz et al. 2017)"
    assert "sum of the inputs of the users in U3" in result.result["privacy"]["server_learns"]
    assert result.result["warnings"] == []


def test_ideal_mode_reports_the_same_metrics_and_ledger() -> None:
    real, ideal = _run(), _run('protocol.mode="ideal"')
    assert real.rounds == ideal.rounds
    assert real.result["ledger"] == ideal.result["ledger"]
    np.testing.assert_array_equal(real.outcome.state["sum"], ideal.outcome.state["sum"])
    assert ideal.result["privacy"]["mode"] == "ideal" and "note" in ideal.result["privacy"]


def test_secagg_plus_runs_on_a_sparse_graph_and_costs_users_less() -> None:
    dense, sparse = _run(), _run('protocol.graph="sparse"', "protocol.neighbours=6")
    assert all(row["degree"] == 6 and row["threshold"] == 4 and row["wrong_words"] == 0 for row in sparse.rounds)
    assert sparse.result["privacy"]["mechanism"] == "SecAgg+ (Bell et al. 2020)"
    assert sparse.result["metrics"]["final"]["user_sent_bytes"] < dense.result["metrics"]["final"]["user_sent_bytes"]


def test_a_round_below_threshold_aborts_and_says_so() -> None:
    result = _run("protocol.threshold=0.99", "availability.dropout=0.3")
    aborted = [row for row in result.rounds if row["aborted"]]
    assert aborted and all(row["participants"] == 0 for row in aborted)
    warnings = result.result["warnings"]
    # Every round aborted, so the run also warns that nobody answered (fedrecsim.runner._unanswered).
    assert len(warnings) == len(aborted) + 1 and warnings[0].startswith("nobody answered in any of the 3 rounds")
    assert all("secure aggregation aborted at" in warning for warning in warnings[1:])
    assert result.result["metrics"]["final"]["rounds_aborted"] == len(aborted)


def test_the_same_seed_gives_the_same_transcript() -> None:
    assert _run().transcript_xxh3_128 == _run().transcript_xxh3_128


def test_frac_bits_must_leave_an_integer_bit() -> None:
    with pytest.raises(ConfigError, match=r"protocol.frac_bits: must be < bits - 1 = 31, got 31"):
        _run("protocol.frac_bits=31")


def test_a_user_that_crashed_spends_no_compute_time() -> None:
    """Every user crashes at its stage of the one session: none computes, so the stragglers were not simulated."""
    result = _run("run.rounds=1", "availability.dropout=1.0", "availability.compute_median_s=1.0")
    [row] = result.rounds
    assert (row["aborted"], row["participants"]) == (1, 0)
    assert (
        "availability.compute_median_s = 1.0 (stragglers) was not simulated: "
        "no user of this protocol spent its compute time (User.compute)"
    ) in result.result["warnings"]
