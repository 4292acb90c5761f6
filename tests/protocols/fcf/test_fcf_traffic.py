"""FCF's traffic plan (`fedrecsim.protocols.fcf.traffic`) against the ledgers of real runs."""

from __future__ import annotations

import numpy as np
import pytest

import fedrecsim
from fedrecsim.network.party import Role
from fedrecsim.protocols.fcf.traffic import plan
from fedrecsim.protocols.runtime import PlanContext
from fedrecsim.data.ratings import Ratings
from fedrecsim.scenario import parse_scenario
from fedrecsim.testing import plan_context

LATENCY = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
EXPLICIT = {
    "run": {"protocol": "fcf", "seed": 5, "rounds": 3},
    "data": {"source": "synthetic", "users": 30, "items": 50, "ratings": 700},
    "network": {"latency": LATENCY},
    "protocol": {"d": 3},
}
IMPLICIT = {
    **EXPLICIT,
    "data": {"source": "synthetic", "feedback": "implicit", "users": 30, "items": 150, "ratings": 600, "split": "leave_one_out"},
    "protocol": {"d": 3, "feedback": "implicit"},
}


def _by_kind(flows: tuple) -> dict[str, tuple[float, float]]:
    return {flow.kind: (flow.messages, flow.bytes) for flow in flows if flow.messages}


@pytest.mark.parametrize("table", [EXPLICIT, IMPLICIT], ids=["explicit", "implicit"])
def test_with_everyone_online_the_plan_is_each_rounds_ledger_byte_for_byte(table: dict) -> None:
    traffic = plan(plan_context(table))
    assert traffic.parties == {Role.USER: 30, Role.SERVER: 1}
    rows = fedrecsim.run(parse_scenario(table)).result["ledger"]["per_round"]
    for row in rows:
        flows = traffic.setup if row["round"] == 0 else traffic.per_round
        assert (sum(f.messages for f in flows), sum(f.bytes for f in flows)) == (row["msgs"], row["bytes"]), row["round"]
        assert all(flow.exact for flow in flows)


def test_explicit_round_sends_each_selected_user_its_rows_and_gets_as_many_back() -> None:
    """Sizes from the message definitions: float64 rows of d values, one per rated item, both ways."""
    context = plan_context(EXPLICIT)
    kinds = _by_kind(plan(context).per_round)
    assert set(kinds) == {"fcf.item_vectors", "fcf.item_gradients"}
    (sent, sent_bytes), (back, back_bytes) = kinds["fcf.item_vectors"], kinds["fcf.item_gradients"]
    assert sent == back == 30
    # Both carry the same array; they differ only in the kind string each envelope carries.
    assert back_bytes - sent_bytes == 30 * (len("fcf.item_gradients") - len("fcf.item_vectors"))
    payload = 8 * 3 * len(context.train)  # every training rating is one row of d = 3 float64s, once per round
    assert payload < sent_bytes < payload + 30 * 64  # plus framing: envelope, round, array header per message


def test_selection_dropout_and_joins_scale_the_flows() -> None:
    context = plan_context({**EXPLICIT, "protocol": {"d": 3, "max_users": 10}}, online=20.0, joins=2.0, leaves=1.0, dropout=0.25)
    kinds = _by_kind(plan(context).per_round)
    assert kinds["fcf.item_vectors"][0] == 10 and kinds["fcf.item_gradients"][0] == pytest.approx(7.5)
    assert kinds["fcf.register"][0] == 2 and kinds["core.join"][0] == 2 and kinds["core.leave"][0] == 1
    assert not any(flow.exact for flow in plan(context).per_round if flow.kind.startswith("fcf.item"))


def test_with_churn_and_selection_the_plan_is_within_ten_percent_of_the_ledger() -> None:
    """The expectation over which users are selected and join; the tolerance covers four rounds' luck."""
    from fedrecsim.inspect import inspect_scenario

    table = {
        **EXPLICIT,
        "run": {"protocol": "fcf", "seed": 5, "rounds": 4},
        "availability": {"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1, "initial_online": 0.5},
        "protocol": {"d": 3, "max_users": 8},
    }
    estimate = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate
    rows = [row for row in fedrecsim.run(parse_scenario(table)).result["ledger"]["per_round"] if row["round"] >= 1]
    for counter, key in (("sent_bytes", "bytes"), ("sent_msgs", "msgs")):
        assert estimate.per_round.total(counter) == pytest.approx(sum(row[key] for row in rows) / len(rows), rel=0.10)


@pytest.mark.parametrize("table, exchanged", [
    (EXPLICIT, ("fcf.item_vectors", "fcf.item_gradients")), (IMPLICIT, ("fcf.model", "fcf.model_gradient")),
], ids=["explicit", "implicit"])
def test_each_flow_goes_the_way_the_protocol_sends_it(table: dict, exchanged: tuple[str, str]) -> None:
    traffic = plan(plan_context(table, joins=1.0, leaves=1.0))
    down, up = (Role.SERVER, Role.USER), (Role.USER, Role.SERVER)
    directions = {(flow.kind, flow.src, flow.dst) for flow in traffic.setup + traffic.per_round}
    expected = {("core.join", *up), ("core.leave", *up), (exchanged[0], *down), (exchanged[1], *up)}
    if table is EXPLICIT:
        expected.add(("fcf.register", *up))
    assert directions == expected


@pytest.mark.parametrize("online, joins, dropout, max_users, exact", [
    (30.0, 0.0, 0.0, 0, True),
    (30.0, 0.0, 0.0, 30, True),
    (30.0, 0.0, 0.1, 0, False),  # who crashes is luck
    (20.0, 0.0, 0.0, 0, False),  # who is online is luck
    (30.0, 1.0, 0.0, 0, False),  # who joins is luck
    (30.0, 0.0, 0.0, 10, False),  # who is selected is luck
])
def test_the_exchange_is_exact_only_when_everyone_is_online_and_selected_every_round(
    online: float, joins: float, dropout: float, max_users: int, exact: bool
) -> None:
    context = plan_context({**EXPLICIT, "protocol": {"d": 3, "max_users": max_users}}, online=online, joins=joins, dropout=dropout)
    traffic = plan(context)
    assert {flow.exact for flow in traffic.per_round if flow.kind.startswith("fcf.item")} == {exact}
    assert {flow.exact for flow in traffic.setup if flow.kind == "fcf.register"} == {exact}


def test_the_plan_states_how_the_server_selects() -> None:
    assert plan(plan_context(EXPLICIT)).assumptions == ("the server selects every online user per round uniformly at random",)
    selective = plan_context({**EXPLICIT, "protocol": {"d": 3, "max_users": 10}}, online=20.0)
    assert plan(selective).assumptions == ("the server selects at most 10 online users per round uniformly at random",)
    single = plan_context({**EXPLICIT, "protocol": {"d": 3, "max_users": 1}}, online=20.0)
    assert plan(single).assumptions == ("the server selects at most 1 online user per round uniformly at random",)


def test_sizes_are_those_of_a_round_in_the_middle_of_the_run() -> None:
    """Round numbers travel in every message: 300 (the middle of 600 rounds) takes msgpack two bytes more
    than 1 does (uint16 against a positive fixint), in each of the 30 messages each way."""
    short, long = (_by_kind(plan(plan_context({**EXPLICIT, "run": {**EXPLICIT["run"], "rounds": rounds}})).per_round) for rounds in (3, 600))
    for kind in ("fcf.item_vectors", "fcf.item_gradients"):
        assert long[kind][1] - short[kind][1] == 30 * 2


def test_a_plan_without_users_sends_nothing() -> None:
    scenario = parse_scenario(EXPLICIT)
    empty = Ratings(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), 0, 50, (1.0, 5.0))
    traffic = plan(PlanContext(scenario, empty, empty, initial_online=0.0, online=0.0, joins=0.0, leaves=0.0, dropout=0.0))
    assert all(flow.bytes == 0 and flow.messages == 0 for flow in traffic.setup + traffic.per_round)
