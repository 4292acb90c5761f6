"""PriviRec's traffic plan (`fedrecsim.protocols.privirec.traffic`) kind by kind: against the ledger of a run
with everyone online, and the expectation it gives under dropout."""

from __future__ import annotations

import dataclasses

import pytest

import fedrecsim
from fedrecsim.data.prepare import prepare_data
from fedrecsim.inspect import expected_availability
from fedrecsim.network.party import Role
from fedrecsim.protocols.privirec.traffic import plan, session_flows
from fedrecsim.protocols.runtime import PlanContext
from fedrecsim.scenario import parse_scenario
from privirec_harness import table as _table

#: Who sends each kind (the message sets of `fedrecsim.protocols.secagg.messages` and `privirec.messages`).
DIRECTION = {
    "core.join": (Role.USER, Role.SERVER),
    "core.leave": (Role.USER, Role.SERVER),
    "secagg.setup": (Role.SERVER, Role.USER),
    "secagg.advertise": (Role.USER, Role.SERVER),
    "secagg.keys": (Role.SERVER, Role.USER),
    "secagg.shares": (Role.USER, Role.SERVER),
    "secagg.ciphertexts": (Role.SERVER, Role.USER),
    "secagg.masked": (Role.USER, Role.SERVER),
    "secagg.unmask": (Role.SERVER, Role.USER),
    "secagg.reveal": (Role.USER, Role.SERVER),
    "privirec.degrees": (Role.SERVER, Role.USER),
    "privirec.item_item": (Role.SERVER, Role.USER),
    "privirec.basis": (Role.SERVER, Role.USER),
    "privirec.filters": (Role.SERVER, Role.USER),
}
#: The share of the users still sending at each secure-aggregation stage when d of them crash at a stage
#: drawn uniformly from the four: those crashing at stage s stop before its message.
SENDING_AT_STAGE = {"secagg.advertise": 1, "secagg.keys": 1, "secagg.shares": 2, "secagg.ciphertexts": 2,
                    "secagg.masked": 3, "secagg.unmask": 3, "secagg.reveal": 4}


def _context(table: dict, **expected: float) -> PlanContext:
    """The plan's context as ``fedrecsim inspect`` builds it (the availability it expects), then ``expected``."""
    scenario = parse_scenario(table)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    availability = expected_availability(scenario, train.n_users)
    context = PlanContext(scenario, train, test, availability.initial, availability.online, availability.joins,
                          availability.leaves, scenario.availability.dropout)
    return dataclasses.replace(context, **expected)


def _totals(flows, times: float = 1.0) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    totals: dict[str, list[float]] = {}
    for flow in flows:
        if flow.messages:
            entry = totals.setdefault(flow.kind, [0.0, 0.0])
            entry[0] += times * flow.messages
            entry[1] += times * flow.bytes
    return totals


CASES = {
    # SecAgg+ with a set degree and threshold, the mode chosen by item count, two rounds.
    "privirec-sparse": {"variant": "privirec", "graph": "sparse", "neighbours": 6, "threshold": 0.3, "secagg": "auto"},
    # Bonawitz's complete graph, oversampled iterations, one round.
    "privirec_k-complete": {"variant": "privirec_k", "graph": "complete", "oversample": 3, "k": 8},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_with_everyone_online_each_kind_is_the_ledgers_kind_in_both_directions(case: str) -> None:
    table = _table(**CASES[case])
    if case.endswith("complete"):
        table["run"]["rounds"] = 1
    context = _context(table)
    traffic = plan(context)
    rounds = context.rounds
    planned = _totals(traffic.setup)
    for kind, (messages, size) in [*_totals(traffic.per_round, rounds).items(), *_totals(traffic.closing).items()]:
        entry = planned.setdefault(kind, [0.0, 0.0])
        entry[0] += messages
        entry[1] += size
    result = fedrecsim.run(table).result
    ledger = result["ledger"]
    assert {kind: (entry["msgs"], entry["bytes"]) for kind, entry in ledger["kinds"].items()} == {
        kind: (pytest.approx(messages), pytest.approx(size)) for kind, (messages, size) in planned.items()
    }
    for flow in (*traffic.setup, *traffic.per_round, *traffic.closing):
        assert (flow.src, flow.dst) == DIRECTION[flow.kind], flow.kind
        assert flow.exact, flow.kind
    # The filters' broadcast is the closing phase's, after the last round, and nothing else is.
    assert [flow.kind for flow in traffic.closing] == ["privirec.filters"]
    assert "privirec.filters" not in {flow.kind for flow in (*traffic.setup, *traffic.per_round)}
    # Per role, what the users send is what the server receives.
    sent = sum(flow.bytes for flow in traffic.setup if flow.src is Role.USER) + rounds * sum(
        flow.bytes for flow in traffic.per_round if flow.src is Role.USER
    )
    assert sent == pytest.approx(ledger["roles"]["user"]["sent_bytes"])
    secure = result["privacy"]["secure_aggregation"]
    assert traffic.assumptions == (
        f"every secure sum runs over the 40 users online at the set-up, each with {secure['degree']} neighbours "
        f"(t = {secure['threshold']})",
        f"secure aggregation in {secure['mode']} mode (the bytes are the same in both)",
    )


def test_the_plan_names_the_configured_degree_threshold_and_mode() -> None:
    traffic = plan(_context(_table(graph="sparse", neighbours=6, threshold=0.3, secagg="auto", real_max_items=59)))
    # k = 6 neighbours, t = floor(0.3 * 7) + 1 = 3; 60 items > 59: ideal mode.
    assert traffic.assumptions[0].endswith("each with 6 neighbours (t = 3)")
    assert traffic.assumptions[1].startswith("secure aggregation in ideal mode")
    traffic = plan(_context(_table(graph="complete", threshold=0.75)))
    assert traffic.assumptions[0].endswith("each with 39 neighbours (t = 31)")  # floor(0.75 * 40) + 1


def test_under_dropout_each_stage_loses_the_users_that_crash_at_it_or_before() -> None:
    table = _table(graph="sparse", neighbours=4)
    base = plan(_context(table))
    d = 0.2
    traffic = plan(_context(table, online=36.0, dropout=d))
    for flows, before, sums in ((traffic.setup, base.setup, 2), (traffic.per_round, base.per_round, 1)):
        pairs = [(flow, full) for flow, full in zip(flows, before, strict=True) if flow.kind.startswith("secagg.")]
        stages = ["secagg.setup", "secagg.advertise", "secagg.keys", "secagg.shares", "secagg.ciphertexts", "secagg.masked",
                  "secagg.unmask", "secagg.reveal"]
        assert [flow.kind for flow, _ in pairs] == stages * sums
        for flow, full in pairs:
            share = 1.0 - d * SENDING_AT_STAGE[flow.kind] / 4 if flow.kind != "secagg.setup" else 1.0
            # Every secure sum runs over the 40 users online at the set-up, not the 36 of a round.
            assert full.messages == 40 and flow.messages == pytest.approx(40 * share), flow.kind
            assert flow.bytes == pytest.approx(full.bytes * share), flow.kind
            assert (flow.src, flow.dst) == DIRECTION[flow.kind]
            assert flow.exact is False, flow.kind  # an expectation under dropout
    per_round = {flow.kind: flow for flow in traffic.per_round}
    full = {flow.kind: flow for flow in base.per_round}
    assert per_round["privirec.basis"].messages == 36 and per_round["privirec.basis"].exact is False
    assert per_round["privirec.basis"].bytes == pytest.approx(full["privirec.basis"].bytes * 36 / 40)
    (filters,) = traffic.closing
    assert filters.kind == "privirec.filters" and filters.messages == 36 and filters.exact is False
    assert filters.bytes == pytest.approx(base.closing[0].bytes * 36 / 40)


def test_a_round_is_inexact_when_fewer_users_are_online_even_without_dropout() -> None:
    traffic = plan(_context(_table(), online=39.0))
    assert not any(flow.exact for flow in traffic.per_round if flow.kind.startswith(("secagg.", "privirec.basis")))
    assert all(flow.exact for flow in traffic.setup if flow.kind.startswith("privirec."))


def test_a_session_over_no_users_sends_nothing() -> None:
    flows = session_flows(_context(_table()), 0, 0, 1, 60, 64)
    assert [flow.messages for flow in flows] == [0.0] * 8 and [flow.bytes for flow in flows] == [0.0] * 8
