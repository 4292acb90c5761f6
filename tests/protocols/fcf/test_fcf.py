"""FCF: equal to the centralized reference, learning, and robust to churn and dropout."""

from __future__ import annotations

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.models.mf import CentralizedMF, MFHyper


def test_federated_run_equals_the_centralized_reference_after_20_rounds(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 20
    result = fedrecsim.run(tiny_fcf)
    scenario = fedrecsim.parse_scenario(tiny_fcf)
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    state = result.outcome.state
    reference = CentralizedMF(MFHyper(d=8))
    U, V = state["initial_user_factors"], state["initial_item_factors"]
    active = train.user_counts() > 0
    for _ in range(20):
        U, V = reference.round(U, V, train, participating_users_mask=active)
    np.testing.assert_allclose(state["user_factors"], U, rtol=0, atol=1e-9)
    np.testing.assert_allclose(state["item_factors"], V, rtol=0, atol=1e-9)
    assert not np.allclose(state["item_factors"], state["initial_item_factors"])


def test_rmse_decreases_on_synthetic_data(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 40
    tiny_fcf["protocol"]["gamma"] = 0.1
    rounds = fedrecsim.run(tiny_fcf).rounds
    assert rounds[-1]["train_rmse"] < 0.7 * rounds[0]["train_rmse"]
    assert rounds[-1]["test_rmse"] < rounds[0]["test_rmse"]


def test_raw_sums_are_available_and_differ_from_the_normalized_step(tiny_fcf) -> None:
    tiny_fcf["protocol"]["normalize"] = False
    tiny_fcf["protocol"]["gamma"] = 0.001
    raw = fedrecsim.run(tiny_fcf).outcome.state["item_factors"]
    tiny_fcf["protocol"]["normalize"] = True
    normalized = fedrecsim.run(tiny_fcf).outcome.state["item_factors"]
    assert not np.allclose(raw, normalized)


def test_same_seed_same_transcript_and_metrics_other_seed_differs(tiny_fcf) -> None:
    tiny_fcf["network"] = {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}}
    tiny_fcf["availability"] = {"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1, "dropout": 0.1}
    first, second = fedrecsim.run(tiny_fcf), fedrecsim.run(tiny_fcf)
    assert first.transcript_xxh3_128 == second.transcript_xxh3_128
    assert first.result["metrics"] == second.result["metrics"]
    assert first.result["ledger"] == second.result["ledger"]
    tiny_fcf["run"]["seed"] = 4
    assert fedrecsim.run(tiny_fcf).transcript_xxh3_128 != first.transcript_xxh3_128


def test_twenty_percent_dropout_completes_and_counts_the_missing(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 8
    tiny_fcf["run"]["round_timeout_s"] = 5.0
    tiny_fcf["availability"] = {"model": "always", "dropout": 0.2}
    tiny_fcf["network"] = {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}}
    result = fedrecsim.run(tiny_fcf)
    assert result.result["rounds_completed"] == 8
    missing = sum(row["missing"] for row in result.rounds)
    # 8 rounds x 40 users x 0.2 = 64 expected crashes; Binomial sd ~ 8, 4 sd tolerance.
    assert abs(missing - 64) <= 32
    assert result.outcome.state["population"]["crashes"] == missing


def test_max_users_caps_the_participants(tiny_fcf) -> None:
    tiny_fcf["protocol"]["max_users"] = 7
    rounds = fedrecsim.run(tiny_fcf).rounds
    assert all(row["participants"] == 7 for row in rounds)


def test_implicit_feedback_learns_to_rank(tiny_fcf) -> None:
    users = 120
    tiny_fcf["data"].update({"feedback": "implicit", "split": "leave_one_out", "users": users, "items": 300, "ratings": 4500})
    tiny_fcf["protocol"].update({"feedback": "implicit", "gamma": 0.05, "d": 5})
    tiny_fcf["run"]["rounds"] = 30
    result = fedrecsim.run(tiny_fcf)
    kinds = result.result["ledger"]["kinds"]
    assert kinds["fcf.model"]["msgs"] == 30 * users and kinds["fcf.model_gradient"]["msgs"] == 30 * users
    # With 99 sampled negatives a random ranking has HR@10 = 0.1, with a standard deviation of 0.027 over
    # 120 users: 0.2 is 3.7 of them above it (seeds 0-3 give 0.23-0.28; 40 users were too few to tell).
    assert result.metrics["hr@10"] > 0.2


@pytest.mark.parametrize("key, value, fragment", [
    ("d", 0, "protocol.d"), ("feedback", "graph", "protocol.feedback"), ("gamma", -1.0, "protocol.gamma"),
    ("nonsense", 1, "protocol.nonsense"),
])
def test_bad_protocol_keys_name_their_path(tiny_fcf, key, value, fragment) -> None:
    tiny_fcf["protocol"][key] = value
    with pytest.raises(fedrecsim.ConfigError, match=fragment):
        fedrecsim.run(tiny_fcf)


def test_stragglers_slower_than_the_round_deadline_are_missing(tiny_fcf) -> None:
    tiny_fcf["run"].update({"rounds": 4, "round_timeout_s": 5.0})
    tiny_fcf["availability"] = {
        "model": "always", "compute_median_s": 0.5, "compute_sigma": 0.1, "slow_fraction": 0.25, "slow_factor": 100.0,
    }
    result = fedrecsim.run(tiny_fcf)
    missing = [row["missing"] for row in result.rounds]
    # About a quarter of the 40 users compute ~50 s and miss every 5 s deadline; the rest (~0.5 s) make it.
    assert all(3 <= count <= 20 for count in missing)
    assert len(set(missing)) == 1  # the slow set is fixed per party, not redrawn each round
    assert result.result["virtual_time_s"] > 4 * 5.0


def test_the_configured_gradient_bound_rejects_every_reply_beyond_it(tiny_fcf) -> None:
    """A bound far below any honest entry: the server refuses every gradient and V never moves."""
    tiny_fcf["run"]["rounds"] = 2
    tiny_fcf["protocol"]["max_abs_gradient"] = 1e-12
    result = fedrecsim.run(tiny_fcf)
    assert [(row["participants"], row["rejected"]) for row in result.rounds] == [(0, 40), (0, 40)]
    assert result.result["ledger"]["faults"]["rejected"]["invalid"] == 80
    state = result.outcome.state
    np.testing.assert_array_equal(state["item_factors"], state["initial_item_factors"])
