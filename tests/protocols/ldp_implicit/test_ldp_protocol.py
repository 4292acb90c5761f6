"""ldp_implicit end to end: epochs, bytes, the server's update, estimate error, the eps -> inf limit."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import scipy.sparse

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.models.implicit_mf import item_gradient, user_factors
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.ldp_implicit.training import apply_steps

TINY: dict[str, Any] = {
    "run": {"protocol": "ldp_implicit", "name": "tiny-ldp", "seed": 5, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 40, "items": 150, "ratings": 400,
             "split": "leave_one_out"},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "availability": {"model": "always"},
    # One pool of all 40 users per epoch; tests with fewer users per proxy lower it.
    "protocol": {"k": 20, "min_users": 40},
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    return copy.deepcopy(TINY)


def _raises_config_error(tables: dict[str, Any], fragment: str) -> None:
    """The run fails with a ConfigError naming ``fragment``.

    Errors raised inside a protocol's run currently reach the caller wrapped in a one-member
    ExceptionGroup by the runner's nursery; unwrap it so the test asserts the error itself.
    """
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as caught:
        fedrecsim.run(tables)
    error: BaseException = caught.value
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, fedrecsim.ConfigError), repr(error)
    assert fragment in str(error)


def _train(tables: dict[str, Any]):  # type: ignore[no-untyped-def]
    scenario = fedrecsim.parse_scenario(tables)
    return prepare_data(scenario.data, scenario.run.seed)[0]


def test_every_user_reports_k_times_per_epoch_and_nothing_is_altered(tiny) -> None:
    result = fedrecsim.run(tiny)
    for row in result.rounds:
        assert (row["participants"], row["reports"], row["reports_missing"], row["reports_late"]) == (40, 800, 0, 0)
        assert row["anonymity_set"] == 40
    assert [(i["name"], i["checked"], i["violations"]) for i in result.result["invariants"]] == [
        ("server_hears_only_proxies", 2, 0), ("reports_unaltered", 2, 0),
    ]
    kinds = result.result["ledger"]["kinds"]
    assert kinds["ldp.reports"]["msgs"] == 2 * 40 and kinds["ldp.relayed"]["msgs"] == 2
    # V goes once to the proxy and once from the proxy to each user, every epoch.
    assert kinds["ldp.model"]["msgs"] == 2 * (1 + 40)
    assert "core.join" in kinds and result.result["ledger"]["roles"]["server"]["recv_msgs"] == 2 * 2


def test_a_users_bytes_per_epoch_are_the_model_down_and_k_reports_up(tiny) -> None:
    result = fedrecsim.run(tiny)
    user = result.result["ledger"]["parties"]["user:0"]
    model_bytes = 150 * 5 * 8
    assert model_bytes < user["recv_bytes"] / 2 < model_bytes + 64
    reports_bytes = (user["sent_bytes"] - result.result["ledger"]["kinds"]["core.join"]["bytes"] / 40) / 2
    assert 4 * 20 + 3 < reports_bytes < 4 * 20 + 3 + 64


@pytest.mark.parametrize("steps", [1, 20])
def test_the_server_applies_steps_per_epoch_updates_of_its_estimate(tiny, steps: int) -> None:
    tiny["protocol"]["steps_per_epoch"] = steps
    state = fedrecsim.run(tiny).outcome.state
    hyper = fedrecsim.parse_scenario(tiny).protocol.hyper()
    V = state["initial_item_factors"]
    for estimate, after in zip(state["estimates"], state["trajectory"]):
        V = apply_steps(V, estimate, hyper, steps)
        np.testing.assert_array_equal(after, V)


def test_more_steps_move_v_further_along_the_same_estimate(tiny) -> None:
    tiny["run"]["rounds"] = 1
    moves = {}
    for steps in (1, 20):
        tiny["protocol"]["steps_per_epoch"] = steps
        state = fedrecsim.run(tiny).outcome.state
        moves[steps] = state["trajectory"][0] - state["initial_item_factors"]
    # The reports do not depend on the step count (same seed), so 20 steps move 20x as far (to 1e-6).
    np.testing.assert_allclose(moves[20], 20 * moves[1], rtol=1e-6, atol=1e-12)


def _estimate_error(tables: dict[str, Any]) -> tuple[float, float]:
    """(measured, predicted) squared error of epoch 1's estimate of the mean clipped gradient."""
    result = fedrecsim.run(tables)
    state, config = result.outcome.state, fedrecsim.parse_scenario(tables).protocol
    train = _train(tables)
    V0, index = state["initial_item_factors"], train.by_user()
    clipped = np.zeros((train.n_users, *V0.shape))
    for user in range(train.n_users):
        items = index.items[index.indptr[user] : index.indptr[user + 1]]
        conf = 1.0 + config.alpha * index.values[index.indptr[user] : index.indptr[user + 1]]
        x = user_factors(V0, items, conf, config.lam)
        np.testing.assert_allclose(state["user_factors"][user], x)
        clipped[user] = np.clip(item_gradient(V0, x, items, conf), -1.0, 1.0)
    measured = float(np.sum((state["estimates"][0] - clipped.mean(axis=0)) ** 2))
    # Each report is B*sign at one of M*F entries: E|report|^2 = B^2; N*k independent reports.
    B = V0.size / np.tanh(config.epsilon / 2)
    predicted = (B**2 - float(np.mean(np.sum(clipped**2, axis=(1, 2))))) / (train.n_users * config.k)
    return measured, predicted


def test_the_estimate_error_shrinks_like_one_over_sqrt_users_times_k(tiny) -> None:
    """Squared error over 100 x 4 entries, against its expectation (B^2 - E|g|^2) / (N k): each measured
    value within 25% of it (the sum of 400 entry errors has a relative sd of about 7%), so the error
    falls 16-fold from (N, k) = (40, 10) to (160, 40)."""
    tiny["run"]["rounds"] = 1
    tiny["protocol"].update({"d": 4, "epsilon": 1.0})
    errors = {}
    for users, k in ((40, 10), (160, 10), (40, 40), (160, 40)):
        tiny["data"].update({"users": users, "items": 100, "ratings": 8 * users})
        tiny["protocol"].update({"k": k, "min_users": users})
        errors[users, k] = _estimate_error(tiny)
    for measured, predicted in errors.values():
        assert measured == pytest.approx(predicted, rel=0.25)
    assert 10 < errors[40, 10][0] / errors[160, 40][0] < 25


def test_with_eps_to_infinity_and_k_mf_the_trajectory_approaches_non_private_fcf(tmp_path) -> None:
    """eps = 50 (tanh(25) = 1 - 4e-22) and k = M*F. Every user likes items 0-2 of 20 (alpha = 0,
    V ~ N(0, 0.3^2)), so no gradient entry reaches Algorithm 1's clip bound and the LDP estimate is
    unbiased for FCF's exact mean gradient: the distance to MF-NP's trajectory, relative to how far
    MF-NP moved, falls like 1/sqrt(N) -- 4-fold from 100 to 1,600 users."""
    n_items, d = 20, 2
    relative = {}
    for users in (100, 1600):
        path = tmp_path / f"same_taste_{users}.npz"
        rows, cols = np.repeat(np.arange(users), 3), np.tile([0, 1, 2], users)
        scipy.sparse.save_npz(path, scipy.sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(users, n_items)))
        tables = {
            "run": {"protocol": "ldp_implicit", "seed": 5, "rounds": 4},
            "data": {"source": "npz", "path": str(path), "split": "random"},
            "protocol": {"d": d, "k": n_items * d, "epsilon": 50.0, "init_scale": 0.3, "alpha": 0.0, "eval_every": 100,
                         "min_users": users},
        }
        state = fedrecsim.run(tables).outcome.state
        V0, reference = state["initial_item_factors"], state["mf_np_trajectory"]
        train = _train(tables)
        for V in (V0, *reference):
            for user in (0, users - 1):
                items = train.by_user().items[train.by_user().indptr[user] : train.by_user().indptr[user + 1]]
                conf = np.ones(items.size)
                assert np.abs(item_gradient(V, user_factors(V, items, conf, 1e-6), items, conf)).max() < 1.0
        relative[users] = np.linalg.norm(state["trajectory"][-1] - reference[-1]) / np.linalg.norm(reference[-1] - V0)
    assert relative[1600] < 0.15
    assert 2.5 < relative[100] / relative[1600] < 6.5


def test_pools_are_released_at_min_users_and_the_accounting_counts_the_smallest(tiny) -> None:
    tiny["protocol"].update({"min_users": 10, "batch_size": 64})
    result = fedrecsim.run(tiny)
    pools = result.outcome.state["released_pools"][0]
    assert [users for _, users in pools] == [10] * 8
    assert all(row["anonymity_set"] == 10 for row in result.rounds)
    assert result.result["privacy"]["shuffle"]["anonymity_set"] == 10
    # 800 reports per epoch in pools of 200: batches of 64 -> 4 per pool (3 full, 1 of 8).
    assert result.result["ledger"]["kinds"]["ldp.report_batch"]["msgs"] == 2 * 4 * 4


def test_several_proxies_share_the_users_and_their_reports(tiny) -> None:
    tiny["protocol"].update({"proxies": 3, "min_users": 5})
    result = fedrecsim.run(tiny)
    parties = result.result["ledger"]["parties"]
    assert all(parties[f"proxy:{index}"]["recv_msgs"] > 0 for index in range(3))
    # Each proxy gets about 13 users an epoch: a remainder short of 5 is held, then dropped at the epoch's end.
    assert all(row["reports"] + row["reports_dropped"] == 800 for row in result.rounds)
    assert all(row["reports_missing"] == row["reports_dropped"] for row in result.rounds)
    assert all(row["anonymity_set"] >= 5 for row in result.rounds)
    assert result.result["ledger"]["kinds"]["ldp.relayed"]["msgs"] == 2 * 3
    assert all(i["violations"] == 0 for i in result.result["invariants"])


def test_dropout_and_churn_cost_reports_not_correctness(tiny) -> None:
    tiny["run"].update({"rounds": 4, "round_timeout_s": 20.0})
    tiny["availability"] = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.1, "dropout": 0.2}
    tiny["protocol"]["min_users"] = 5
    result = fedrecsim.run(tiny)
    assert result.result["rounds_completed"] == 4
    assert sum(row["reports_missing"] for row in result.rounds) > 0
    assert all(row["reports"] > 0 for row in result.rounds)
    assert all(row["reports"] == 20 * row["participants"] - row["reports_missing"] for row in result.rounds)
    assert all(i["violations"] == 0 for i in result.result["invariants"])
    again = fedrecsim.run(tiny)
    assert again.transcript_xxh3_128 == result.transcript_xxh3_128 and again.result["metrics"] == result.result["metrics"]


def test_lost_messages_cost_reports_and_raise_no_false_alarm(tiny) -> None:
    """5% loss on every link: reports, relayed counts and models are lost (with seed 4, a proxy's count
    in epoch 3); the server then collects until the deadline, and the invariants judge only what
    arrived. ``min_users = 1``: every message is released as it comes, so only the network loses reports."""
    tiny["run"].update({"rounds": 4, "round_timeout_s": 20.0, "seed": 4})
    tiny["network"]["loss"] = 0.05
    tiny["protocol"].update({"proxies": 2, "min_users": 1})
    result = fedrecsim.run(tiny)
    assert result.result["rounds_completed"] == 4
    assert result.result["ledger"]["kinds"]["ldp.reports"]["msgs"] < 4 * 40
    assert sum(row["reports"] for row in result.rounds) < 4 * 40 * 20
    silent = [row for row in result.rounds if row["silent_proxies"]]
    assert silent and all(row["reports"] > 0 for row in silent)
    assert all(i["violations"] == 0 for i in result.result["invariants"])


def test_binarized_explicit_data_with_an_interaction_filter_runs_end_to_end(tiny) -> None:
    tiny["data"].update({"feedback": "explicit", "ratings": 1200, "binarize": True, "min_user_interactions": 5})
    result = fedrecsim.run(tiny)
    assert result.result["rounds_completed"] == 2 and "hr@10" in result.metrics
    assert all(i["violations"] == 0 for i in result.result["invariants"])


def test_final_metrics_carry_the_baselines_and_the_privacy_spent(tiny) -> None:
    result = fedrecsim.run(tiny)
    final = result.metrics
    assert final["eval_negatives"] == 99
    assert final["hr@10_random"] == pytest.approx(0.1) and final["hr@2_random"] == pytest.approx(0.02)
    assert {"hr@2", "hr@5", "hr@10", "hr@2_mf_np", "hr@5_mf_np", "hr@10_mf_np"} <= set(final)
    privacy = result.result["privacy"]
    assert privacy["epsilon_per_user_epoch"] == pytest.approx(2.5 * 20)
    assert privacy["epsilon_per_user_total"] == pytest.approx(2.5 * 20 * 2)


def test_small_item_sets_rank_against_fewer_negatives_and_say_so(tiny) -> None:
    tiny["data"].update({"items": 60, "ratings": 800})
    result = fedrecsim.run(tiny)
    negatives = result.metrics["eval_negatives"]
    assert 9 <= negatives < 99
    assert result.metrics["hr@10_random"] == pytest.approx(10 / (negatives + 1))


@pytest.mark.parametrize("key, value, fragment", [
    ("proxy_wait_s", 60.0, "protocol.proxy_wait_s"), ("epsilon", 0.0, "protocol.epsilon"),
    ("k", 0, "protocol.k"), ("delta", 1.0, "protocol.delta"), ("nonsense", 1, "protocol.nonsense"),
])
def test_bad_protocol_keys_name_their_path(tiny, key: str, value: Any, fragment: str) -> None:
    tiny["protocol"][key] = value
    _raises_config_error(tiny, fragment)


def test_too_few_untouched_items_for_hr_at_10_is_a_config_error(tiny) -> None:
    tiny["data"].update({"users": 10, "items": 12, "ratings": 100})
    _raises_config_error(tiny, "data.items")


def test_users_talk_only_to_proxies(tiny) -> None:
    result = fedrecsim.run(tiny, record_views=[Party(Role.USER, 0), Party(Role.USER, 7)])
    for view in result.views.values():
        assert view and {(envelope.kind, envelope.src.role) for envelope in view} == {("ldp.model", Role.PROXY)}
