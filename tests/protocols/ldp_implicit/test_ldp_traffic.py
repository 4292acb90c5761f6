"""ldp_implicit's traffic plan (`fedrecsim.protocols.ldp_implicit.traffic`) against the ledgers of real runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.ratings import Ratings
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.ldp_implicit.messages import Relayed, ReportBatch
from fedrecsim.protocols.ldp_implicit.traffic import plan
from fedrecsim.protocols.runtime import PlanContext
from fedrecsim.scenario import parse_scenario
from fedrecsim.testing import plan_context

PROTOCOL = {"d": 3, "k": 5, "proxies": 1, "min_users": 10, "batch_size": 7, "negatives": 20}
RUN = {
    "run": {"protocol": "ldp_implicit", "seed": 5, "rounds": 3},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "protocol": PROTOCOL,
}


def _table(rounds: int = 3, **protocol: object) -> dict:
    return {**RUN, "run": {**RUN["run"], "rounds": rounds}, "protocol": {**PROTOCOL, **protocol}}


def _flows(flows: tuple, kind: str) -> list[tuple[float, float]]:
    return [(flow.messages, flow.bytes) for flow in flows if flow.kind == kind]


def _totals(flows: tuple) -> tuple[float, float]:
    return sum(flow.messages for flow in flows), sum(flow.bytes for flow in flows)


@pytest.mark.parametrize("rounds, protocol", [
    (3, {}),  # 3 pools of 50 reports a round, each in 7 full batches of 7 and one of 1
    (3, {"min_users": 7, "batch_size": 100}),  # 4 pools in one short batch each; 2 users' reports dropped
    (3, {"k": 8, "batch_size": 16}),  # pools of 80 reports split into full batches only
    (1, {}),  # a single epoch
], ids=["full-and-rest", "rest-only", "full-only", "one-epoch"])
def test_with_everyone_online_and_one_proxy_the_plan_is_each_rounds_ledger_byte_for_byte(rounds: int, protocol: dict) -> None:
    table = _table(rounds, **protocol)
    traffic = plan(plan_context(table))
    assert traffic.parties == {Role.USER: 30, Role.SERVER: 1, Role.PROXY: 1}
    rows = fedrecsim.run(table).result["ledger"]["per_round"]
    assert [row["round"] for row in rows] == list(range(rounds + 1))
    for row in rows:
        flows = traffic.setup if row["round"] == 0 else traffic.per_round
        assert _totals(flows) == (row["msgs"], row["bytes"]), row["round"]
        assert all(flow.exact for flow in flows)


def test_a_pool_goes_out_in_full_batches_then_one_with_the_remainder() -> None:
    """30 users, pools of 10 users' 5 reports: 3 pools of 50 reports, 7 batches of 7 and one of 1 each."""
    context = plan_context(RUN)
    proxy = Party(Role.PROXY, 0)
    full, rest = (context.message_bytes(ReportBatch.pack(1, np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int8)), proxy, SERVER)
                  for size in (7, 1))
    assert _flows(plan(context).per_round, "ldp.report_batch") == [(21, 21 * full), (3, 3 * rest)]


def test_with_two_proxies_the_pools_released_are_an_expectation_over_where_users_report() -> None:
    """Each of 30 users reports to one of 2 proxies at random; a proxy releases floor(its users / 5) pools,
    each one batch of 25 reports: 2 * E[floor(X / 5)] batches, X ~ Binomial(30, 1/2). The rest of the
    epoch is exact, so the plan is within a batch of each round's ledger."""
    table = _table(proxies=2, min_users=5, batch_size=1000)
    traffic = plan(plan_context(table))
    assert traffic.parties == {Role.USER: 30, Role.SERVER: 1, Role.PROXY: 2}
    pools = 2 * sum(math.comb(30, users) * (users // 5) for users in range(31)) / 2**30
    ((batches, batch_bytes),) = _flows(traffic.per_round, "ldp.report_batch")
    assert batches == pytest.approx(pools) and 5 < pools < 6
    rows = fedrecsim.run(table).result["ledger"]["per_round"]
    assert _totals(traffic.setup) == (rows[0]["msgs"], rows[0]["bytes"])
    messages, size = _totals(traffic.per_round)
    for row in rows[1:]:
        assert abs(row["msgs"] - messages) < 1 and abs(row["bytes"] - size) < batch_bytes / batches


def test_each_proxy_announces_its_share_of_the_online_users() -> None:
    """The relayed count is on the wire: 150 each (msgpack uint8) for 300 users online over 2 proxies."""
    context = plan_context(_table(proxies=2), online=300.0)
    size = context.message_bytes(Relayed(1, 150), Party(Role.PROXY, 0), SERVER)
    assert _flows(plan(context).per_round, "ldp.relayed") == [(2, 2 * size)]


def test_each_flow_goes_the_way_the_protocol_sends_it() -> None:
    """V and the reports pass through a proxy both ways; memberships go to the proxies, never the server."""
    traffic = plan(plan_context(_table(proxies=2), joins=1.0, leaves=1.0, dropout=0.1))
    user, proxy, server = Role.USER, Role.PROXY, Role.SERVER
    assert {(flow.kind, flow.src, flow.dst) for flow in traffic.setup} == {("core.join", user, proxy)}
    assert {(flow.kind, flow.src, flow.dst) for flow in traffic.per_round} == {
        ("core.join", user, proxy), ("core.leave", user, proxy),
        ("ldp.model", server, proxy), ("ldp.model", proxy, user), ("ldp.relayed", proxy, server),
        ("ldp.reports", user, proxy), ("ldp.report_batch", proxy, server),
    }


def test_users_that_crash_send_no_reports_and_join_again() -> None:
    context = plan_context(RUN, online=20.0, dropout=0.25)
    traffic = plan(context)
    relayed, reports = _flows(traffic.per_round, "ldp.model")[1], _flows(traffic.per_round, "ldp.reports")[0]
    assert relayed[0] == 20 and reports[0] == 15
    # 15 users' reports make one pool of 10: 7 batches of 7 reports and one of 1.
    assert [messages for messages, _ in _flows(traffic.per_round, "ldp.report_batch")] == [7, 1]
    joins = [messages for messages, _ in _flows(traffic.per_round, "core.join")]
    assert joins == [0, 5]  # nobody joins of their own accord; the 5 crashed users announce a join again


@pytest.mark.parametrize("online, dropout, exact", [
    (30.0, 0.0, True),
    (30.0, 0.2, True),  # who crashes is luck, but every report is the same size
    (29.0, 0.0, False),  # who is online is luck, and so the sizes of their party indices
])
def test_relaying_and_reporting_are_exact_only_when_everyone_is_online(online: float, dropout: float, exact: bool) -> None:
    traffic = plan(plan_context(RUN, online=online, dropout=dropout))
    assert {flow.exact for flow in traffic.per_round if flow.dst is Role.USER or flow.kind == "ldp.reports"} == {exact}
    assert all(flow.exact for flow in traffic.per_round if flow.dst is not Role.USER and flow.kind != "ldp.reports")


def test_the_plan_states_how_users_pick_proxies_and_what_proxies_release() -> None:
    assert plan(plan_context(RUN)).assumptions == (
        "each user reports to one of 1 proxy drawn uniformly; a proxy releases "
        "floor(its users / min_users = 10) full pools per epoch and drops the rest",
    )
    assert plan(plan_context(_table(proxies=3, min_users=4))).assumptions == (
        "each user reports to one of 3 proxies drawn uniformly; a proxy releases "
        "floor(its users / min_users = 4) full pools per epoch and drops the rest",
    )


def test_sizes_are_those_of_an_epoch_in_the_middle_of_the_run() -> None:
    """Every message carries its epoch: 300 (the middle of 600) takes msgpack two bytes more than 1 does."""
    short, long = (plan(plan_context(_table(rounds))).per_round for rounds in (3, 600))
    for kind in ("ldp.model", "ldp.relayed", "ldp.reports", "ldp.report_batch"):
        for (messages, before), (same, after) in zip(_flows(short, kind), _flows(long, kind), strict=True):
            assert messages == same and after - before == 2 * messages, kind


def test_a_plan_without_users_sends_nothing_to_or_from_users() -> None:
    scenario = parse_scenario(RUN)
    empty = Ratings(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), 0, 150, (1.0, 1.0))
    traffic = plan(PlanContext(scenario, empty, empty, initial_online=0.0, online=0.0, joins=0.0, leaves=0.0, dropout=0.0))
    assert traffic.parties[Role.USER] == 0
    for flow in traffic.setup + traffic.per_round:
        if Role.USER in (flow.src, flow.dst) or flow.kind == "ldp.report_batch":
            assert (flow.messages, flow.bytes) == (0, 0), flow.kind


def test_with_few_users_the_expected_pools_count_every_way_they_can_split_over_the_proxies() -> None:
    """4 users reporting over 2 proxies, pools of 2 users: a proxy with X ~ Binomial(4, 1/2) users releases
    floor(X / 2) pools; by hand, X = 0..4 with weights 1, 4, 6, 4, 1 / 16 gives 0, 0, 1, 1, 2 pools, so
    2 * 12/16 = 1.5 pools per epoch -- the splits with 3 and 4 users at one proxy are half of it. Each pool
    holds 2 * 5 = 10 reports: one batch of 7 and one of 3."""
    context = plan_context(_table(proxies=2, min_users=2), online=4.0)
    pools = 2 * sum(math.comb(4, users) / 16 * (users // 2) for users in range(5))
    assert pools == 1.5
    assert [messages for messages, _ in _flows(plan(context).per_round, "ldp.report_batch")] == [pools, pools]
