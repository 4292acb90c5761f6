"""FCF round mechanics: whom the server selects, which replies it counts, what it divides by, when it
measures, and on which ratings."""

from __future__ import annotations

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.metrics import mae, rmse
from fedrecsim.models.implicit_mf import ImplicitHyper, item_gradient, server_step, user_factors
from fedrecsim.models.mf import predict
from fedrecsim.network.party import SERVER


def _implicit(tiny_fcf, **protocol):
    tiny_fcf["data"].update({"feedback": "implicit", "split": "leave_one_out", "items": 300})
    tiny_fcf["protocol"].update({"feedback": "implicit", "d": 4, "gamma": 0.05, **protocol})
    return tiny_fcf


def test_implicit_server_averages_over_the_users_that_replied_not_those_selected(tiny_fcf) -> None:
    scenario = _implicit(tiny_fcf)
    scenario["run"].update({"rounds": 4, "round_timeout_s": 5.0})
    scenario["availability"] = {"model": "always", "dropout": 0.3}
    result = fedrecsim.run(scenario, record_views=[SERVER])
    assert all(row["missing"] > 0 for row in result.rounds)  # dropout makes replied < selected every round

    parsed = fedrecsim.parse_scenario(scenario)
    train, _ = prepare_data(parsed.data, parsed.run.seed)
    index = train.by_user()
    config = parsed.protocol
    hyper = ImplicitHyper(d=config.d, gamma=config.gamma, lam=config.lam, alpha=config.alpha)
    replied = {}
    for envelope in result.views[SERVER]:
        if envelope.kind == "fcf.model_gradient":
            replied.setdefault(envelope.body.round, []).append(envelope.src.index)
    assert [len(replied[r]) for r in range(1, 5)] == [row["participants"] for row in result.rounds]

    V = result.outcome.state["initial_item_factors"]
    for round_index in range(1, 5):
        total = np.zeros_like(V)
        for user in sorted(replied[round_index]):
            items = index.items[index.indptr[user] : index.indptr[user + 1]]
            conf = 1.0 + hyper.alpha * index.values[index.indptr[user] : index.indptr[user + 1]]
            total += item_gradient(V, user_factors(V, items, conf, hyper.lam), items, conf)
        V = server_step(V, total, len(replied[round_index]), hyper)
    np.testing.assert_allclose(result.outcome.state["item_factors"], V, rtol=0, atol=1e-9)


@pytest.mark.parametrize("feedback", ["explicit", "implicit"])
def test_a_reply_from_an_earlier_round_never_counts(tiny_fcf, feedback) -> None:
    scenario = _implicit(tiny_fcf) if feedback == "implicit" else tiny_fcf
    # Stragglers compute ~8 s: their reply misses its round's 5 s deadline and arrives during the next
    # round (which starts 1 s after the deadline), where it must not stand in for the reply of that round.
    scenario["run"].update({"rounds": 5, "round_timeout_s": 5.0, "round_gap_s": 1.0})
    scenario["availability"] = {
        "model": "always", "compute_median_s": 0.1, "compute_sigma": 0.01, "slow_fraction": 0.25, "slow_factor": 80.0,
    }
    result = fedrecsim.run(scenario, record_views=[SERVER])
    late = [
        envelope for envelope in result.views[SERVER]
        if envelope.kind in ("fcf.item_gradients", "fcf.model_gradient") and envelope.sent_at > 5.0 * envelope.body.round
    ]
    assert late  # the scenario does produce replies that arrive a round late
    missing = [row["missing"] for row in result.rounds]
    participants = [row["participants"] for row in result.rounds]
    assert missing[0] > 0 and len(set(missing)) == 1 and len(set(participants)) == 1
    assert participants[0] + missing[0] == 40


@pytest.mark.parametrize("feedback", ["explicit", "implicit"])
def test_with_churn_the_server_selects_only_its_current_members(tiny_fcf, feedback) -> None:
    scenario = _implicit(tiny_fcf) if feedback == "implicit" else tiny_fcf
    scenario["run"]["rounds"] = 8
    scenario["availability"] = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.5}
    result = fedrecsim.run(scenario, transcript=True)
    online_in = {row["round"]: row["online"] for row in result.result["ledger"]["per_round"]}
    online = [online_in[row["round"]] for row in result.rounds]
    participants = [row["participants"] for row in result.rounds]
    assert len(set(participants)) > 1  # churn changes who is there
    assert participants == online
    assert all(row["missing"] == 0 for row in result.rounds)
    requests = [row for row in result.ledger.transcript if row.kind in ("fcf.item_vectors", "fcf.model")]
    assert requests and all(row.status == "delivered" for row in requests)


def test_eval_every_still_measures_the_last_round(tiny_fcf) -> None:
    tiny_fcf["protocol"]["eval_every"] = 2
    result = fedrecsim.run(tiny_fcf)
    assert [row["round"] for row in result.rounds if "test_rmse" in row] == [2, 4, 5]
    assert {"train_rmse", "train_mae", "test_rmse", "test_mae"} <= set(result.metrics)


def test_train_and_test_metrics_are_measured_on_their_own_ratings(tiny_fcf) -> None:
    result = fedrecsim.run(tiny_fcf)
    scenario = fedrecsim.parse_scenario(tiny_fcf)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    state = result.outcome.state
    for name, ratings in (("train", train), ("test", test)):
        predicted = predict(state["user_factors"], state["item_factors"], ratings.users, ratings.items)
        assert result.metrics[f"{name}_rmse"] == pytest.approx(rmse(predicted, ratings.values), rel=1e-12)
        assert result.metrics[f"{name}_mae"] == pytest.approx(mae(predicted, ratings.values), rel=1e-12)
    assert result.metrics["train_rmse"] != pytest.approx(result.metrics["test_rmse"], rel=1e-6)
