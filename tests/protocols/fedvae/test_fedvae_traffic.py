"""FedVAE's traffic plan against the ledger of the run it plans, in the cases where the plan is exact, and
against the expectation computed here where it is not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.actors.membership import Join, Leave
from fedrecsim.inspect import inspect_scenario
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.fedvae.traffic import plan as fedvae_plan
from fedrecsim.scenario import parse_scenario
from fedrecsim.testing import plan_context, wire_size


def tables(users: int = 50, **protocol: Any) -> dict[str, Any]:
    """``users`` users (20 % held out) over 30 items, a tiny Mult-VAE, R above every training user, 2 rounds."""
    return {
        "run": {"name": "fedvae-plan", "protocol": "fedvae", "rounds": 2, "seed": 5},
        "data": {"source": "synthetic", "feedback": "implicit", "users": users, "items": 30, "ratings": users * 12,
                 "split": "heldout_users", "test_fraction": 0.2},
        "availability": {"model": "always"},
        "protocol": {"users_per_round": 1000, "hidden": 6, "latent": 2, "baseline": False, "secure_filter": "none",
                     **protocol},
    }


def planned(table: dict[str, Any]) -> dict[str, tuple[float, float, bool]]:
    """The plan's (messages, bytes, exact) of each kind in a round."""
    estimate = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate
    return {flow.kind: (flow.messages, flow.bytes, flow.exact) for flow in estimate.flows}


def measured(table: dict[str, Any]) -> tuple[dict[str, tuple[float, float]], Any]:
    """The ledger's (messages, bytes) of each kind per round, and the run."""
    result = fedrecsim.run(table)
    rounds = table["run"]["rounds"]
    kinds = result.result["ledger"]["kinds"]
    return {kind: (row["msgs"] / rounds, row["bytes"] / rounds) for kind, row in kinds.items()}, result


@pytest.mark.parametrize("users", [50, 400])
def test_the_dense_plan_is_the_ledger_whatever_the_length_of_the_users_indices(users: int) -> None:
    """400 users: indices below 128, below 256 and above encode in 1, 2 and 3 bytes; the plan sizes each."""
    table = tables(users)
    plan, (ledger, result) = planned(table), measured(table)
    training = result.result["ledger"]["roles"]["user"]["parties"]
    assert training == round(0.8 * users)
    for kind in ("fedvae.model", "fedvae.gradient"):
        messages, size, exact = plan[kind]
        assert exact and messages == training and ledger[kind] == (training, size)


@pytest.mark.parametrize("users", [50, 400])
def test_the_training_users_joins_are_the_set_up_byte_for_byte(users: int) -> None:
    """Only training users are parties and join; with 400 users their indices take 1, 2 or 3 bytes."""
    table = tables(users)
    (join,) = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate.setup_flows
    _, result = measured(table)
    (opening,) = [row for row in result.result["ledger"]["per_round"] if row["round"] == 0]
    assert (join.kind, join.messages, join.bytes, join.exact) == ("core.join", opening["msgs"], opening["bytes"], True)
    assert opening["msgs"] == round(0.8 * users)


def test_joins_leaves_and_crashed_users_joins_are_those_of_training_users() -> None:
    """400 users, 320 of them training: the availability's 10 joins and 5 leaves per round over all users
    are 8 and 4 of training users, and the users crashing (dropout 0.25 of the R = 1000 > 320 selected) send
    joins sized as theirs: the mean over the training users' indices (1, 2 or 3 bytes on the wire)."""
    table = tables(400)
    context = plan_context(table, joins=10.0, leaves=5.0, dropout=0.25)
    training = np.flatnonzero((context.train.user_counts() > 0) & (context.test.user_counts() == 0))
    assert training.size == 320
    join = np.mean([wire_size(Party(Role.USER, int(user)), SERVER, Join()) for user in training])
    leave = np.mean([wire_size(Party(Role.USER, int(user)), SERVER, Leave()) for user in training])
    joins = [flow for flow in fedvae_plan(context).per_round if flow.kind in ("core.join", "core.leave")]
    assert [(flow.kind, flow.messages) for flow in joins] == [("core.join", 8.0), ("core.leave", 4.0), ("core.join", 80.0)]
    assert [flow.bytes for flow in joins] == pytest.approx([8.0 * join, 4.0 * leave, 80.0 * join])
    assert not any(flow.exact for flow in joins)


@pytest.mark.parametrize("policy", ["scaled_negative", "wrong_shape", "gaussian"])
def test_with_attackers_the_dense_plan_sizes_their_forgeries(policy: str) -> None:
    """40 training users, 8 of them attackers: a wrong_shape forgery is one float (4 bytes) short."""
    table = tables(byzantine_fraction=0.2, byzantine_policy=policy)
    plan, (ledger, result) = planned(table), measured(table)
    assert len(result.outcome.state["attackers"]) == 8
    messages, size, exact = plan["fedvae.gradient"]
    assert messages == 40 and size == pytest.approx(ledger["fedvae.gradient"][1], rel=0, abs=1e-6)
    assert exact is (policy != "wrong_shape")
    clean = planned(tables())["fedvae.gradient"][1]
    assert size == (clean - 8 * 4 if policy == "wrong_shape" else clean)


@pytest.mark.parametrize("policy", [None, "gaussian", "same_value", "scaled_negative", "wrong_shape"])
def test_without_dropout_the_sparse_plan_is_the_ledger(policy: str | None) -> None:
    """Input dropout 0: every user keeps all its items, so the sparse sizes are known (attackers whose
    forgery fills every W1 row send all 30 rows)."""
    attack = {"byzantine_fraction": 0.2, "byzantine_policy": policy} if policy else {}
    table = tables(sparse=True, dropout=0.0, **attack)
    plan, (ledger, _) = planned(table), measured(table)
    messages, size, exact = plan["fedvae.sparse_gradient"]
    assert not exact and messages == 40
    assert size == pytest.approx(ledger["fedvae.sparse_gradient"][1], rel=1e-12)


def test_with_input_dropout_a_sparse_gradient_is_expected_at_the_mean_of_the_kept_rows() -> None:
    """Dropout 0.5: the plan takes each user's kept rows at their mean n_u / 2 (between whole counts)."""
    table = tables(users=200, sparse=True)
    table["run"]["rounds"] = 6
    plan, (ledger, _) = planned(table), measured(table)
    assert plan["fedvae.sparse_gradient"][1] == pytest.approx(ledger["fedvae.sparse_gradient"][1], rel=0.01)
    dense = planned(tables(users=200))["fedvae.gradient"][1]
    assert plan["fedvae.sparse_gradient"][1] < dense


def test_a_mid_round_crash_costs_a_gradient_and_adds_a_join_and_fewer_users_are_sampled_than_online() -> None:
    table = tables(users_per_round=10)
    table["availability"]["dropout"] = 0.25
    plan = planned(table)
    model, gradient = plan["fedvae.model"], plan["fedvae.gradient"]
    assert model[0] == 10 and gradient[0] == pytest.approx(10 * 0.75) and plan["core.join"][0] == pytest.approx(10 * 0.25)
    assert not model[2] and not gradient[2]
    per_model, per_gradient = model[1] / model[0], gradient[1] / gradient[0]
    full = planned(tables())
    assert per_model == pytest.approx(full["fedvae.model"][1] / 40) and per_gradient == pytest.approx(full["fedvae.gradient"][1] / 40)
    plan_all = inspect_scenario(parse_scenario(tables()), calibration_rounds=0).estimate
    assert plan_all.exact


def test_the_mean_over_users_sizes_one_party_of_each_index_length() -> None:
    """Indices below 128, below 256 and above encode in 1, 2 and 3 bytes: one party of each class stands
    for its class (here the size is the party's index, so which one is used shows)."""
    from fedrecsim.protocols.fedvae.traffic import _mean_over_users

    assert _mean_over_users(np.array([3, 5, 130, 300, 400]), lambda party: float(party.index)) == (2 * 3 + 130 + 2 * 300) / 5


def test_the_plan_sizes_a_rounds_messages_at_the_middle_round_of_the_run() -> None:
    """A round number of 128 or more takes one byte more on the wire: 300 rounds are sized at round 150."""
    short, long = tables(), tables()
    long["run"]["rounds"] = 300
    for kind in ("fedvae.model", "fedvae.gradient"):
        assert planned(long)[kind][1] == planned(short)[kind][1] + 40


def test_a_sparse_gradient_is_sized_at_each_users_mean_kept_rows_interpolated_between_whole_counts() -> None:
    """Input dropout 0.3: user u keeps 0.7 n_u rows on average; the plan sizes its gradient between the
    sizes of floor(0.7 n_u) and floor(0.7 n_u) + 1 rows, weighted by the fraction (wire sizes here)."""
    from fedrecsim.data import prepare_data
    from fedrecsim.protocols.fedvae.messages import SparseGradient

    table = tables(sparse=True, dropout=0.3)
    train, test = prepare_data(parse_scenario(table).data, 5)
    training = np.flatnonzero((train.user_counts() > 0) & (test.user_counts() == 0))
    rest = 6 + 6 * 4 + 4 + 2 * 6 + 6 + 6 * 30 + 30  # b1, W2, b2, W3, b3, W4, b4 of a 30 -> 6 -> 2 Mult-VAE

    def size(rows: int) -> int:
        message = SparseGradient(1, np.zeros(rows, np.int32), np.zeros((rows, 6), np.float32), np.zeros(rest, np.float32))
        return wire_size(Party(Role.USER, 1), SERVER, message)

    expected = []
    for count in train.user_counts()[training]:
        mean = 0.7 * count
        low = int(np.floor(mean))
        expected.append(size(low) + (mean - low) * (size(low + 1) - size(low)))
    messages, total, _ = planned(table)["fedvae.sparse_gradient"]
    assert messages == 40 and total / messages == pytest.approx(float(np.mean(expected)), rel=1e-12)


def test_users_without_training_entries_are_not_parties_and_users_with_one_are() -> None:
    """Explicit ratings kept from 4 up: 28 of the 50 users keep no entry (but keep their index) and 16 of the
    21 training users keep exactly one; the plan counts and samples exactly the ledger's training users."""
    table = tables()
    table["data"].update(feedback="explicit", ratings=100, min_rating=4)
    from fedrecsim.data import prepare_data

    train, test = prepare_data(parse_scenario(table).data, 5)
    counts, training = train.user_counts(), test.user_counts() == 0
    assert (train.n_users, int(((counts == 0) & training).sum()), int(((counts == 1) & training).sum())) == (50, 28, 16)
    inspection = inspect_scenario(parse_scenario(table), calibration_rounds=0)
    plan, (ledger, result) = planned(table), measured(table)
    roles = result.result["ledger"]["roles"]
    assert inspection.parties == {"user": roles["user"]["parties"], "server": roles["server"]["parties"]} == {"user": 21, "server": 1}
    assert plan["fedvae.model"][0] == ledger["fedvae.model"][0] == 21
    assert inspection.estimate.assumptions == (
        "the server samples min(R = 1000, online) of the 21 training users per round uniformly at random; "
        "held-out users are not parties",
    )


def test_the_plan_is_not_exact_when_the_server_samples_fewer_than_every_training_user() -> None:
    """Every user online, no dropout, dense gradients, but R = 10 of 40: which users send varies."""
    assert not inspect_scenario(parse_scenario(tables(users_per_round=10)), calibration_rounds=0).estimate.exact
    assert inspect_scenario(parse_scenario(tables(users_per_round=40)), calibration_rounds=0).estimate.exact
