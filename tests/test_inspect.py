"""fedrecsim inspect: a scenario validated and estimated without running it, checked against real ledgers."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.errors import ConfigError, WireError
from fedrecsim.inspect import (
    Availability,
    Calibration,
    Estimate,
    Inspection,
    Traffic,
    expected_availability,
    inspect_scenario,
    inspection_text,
)
from fedrecsim.actors.membership import Join, Leave
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import encode
from fedrecsim.protocols import Flow, PlanContext
from fedrecsim.protocols.dpmf.messages import ItemRequest
from fedrecsim.protocols.dpmf.traffic import _distinct_items
from fedrecsim.scenario import parse_scenario

LATENCY = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
COUNTERS = ("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs")

DPMF_S3_CHURN = {
    "run": {"protocol": "dpmf", "seed": 3, "rounds": 4},
    "data": {"source": "synthetic", "users": 60, "items": 80, "ratings": 1500},
    "network": {"latency": LATENCY},
    "availability": {"model": "bernoulli", "p_join": 0.05, "p_leave": 0.05, "initial_online": 0.5},
    "protocol": {"scenario": "S3", "d": 4, "max_users": 10, "k_presharing": 3, "replay": False},
}
DPMF_S2 = {
    "run": {"protocol": "dpmf", "seed": 3, "rounds": 3},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1000},
    "network": {"latency": LATENCY},
    "protocol": {"scenario": "S2", "d": 4, "replay": False},
}
LDP_TWO_PROXIES = {
    "run": {"protocol": "ldp_implicit", "seed": 3, "rounds": 3, "round_timeout_s": 30.0},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 60, "items": 150, "ratings": 1500, "split": "leave_one_out"},
    "network": {"latency": LATENCY},
    "protocol": {"d": 4, "k": 20, "proxies": 2, "min_users": 10, "batch_size": 64, "steps_per_epoch": 2},
}
FCF = {
    "run": {"protocol": "fcf", "seed": 3, "rounds": 4},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1200},
    "network": {"latency": LATENCY},
    "protocol": {"d": 4},
}
FCF_CHURN_SELECTED = {
    **FCF,
    "availability": {"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1, "initial_online": 0.5},
    "protocol": {"d": 4, "max_users": 10},
}
FCF_IMPLICIT = {
    **FCF,
    "data": {"source": "synthetic", "feedback": "implicit", "users": 40, "items": 200, "ratings": 1200, "split": "leave_one_out"},
    "protocol": {"d": 4, "feedback": "implicit"},
}
PROTOTYPES = {  # a protocol that declares no traffic plan
    "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "counts", "users": 60, "items": 40, "ratings": 1200, "split": "users", "silos": 3},
    "protocol": {"k": 2, "rank": 2, "support": 5, "baselines": False},
}


def _ledger(table: dict) -> dict:
    return fedrecsim.run(parse_scenario(table)).result["ledger"]


@pytest.mark.parametrize(
    ("table", "calibration_rounds", "source"),
    [
        (DPMF_S3_CHURN, 0, "plan"), (LDP_TWO_PROXIES, 0, "plan"), (FCF_CHURN_SELECTED, 0, "plan"),
        (FCF_IMPLICIT, 0, "plan"), (PROTOTYPES, 2, "calibration"),
    ],
    ids=["dpmf-s3-churn", "ldp-implicit-two-proxies", "fcf-churn-max-users", "fcf-implicit", "prototypes-measured"],
)
def test_the_estimate_is_within_ten_percent_of_a_real_runs_ledger(table: dict, calibration_rounds: int, source: str) -> None:
    scenario = parse_scenario(table)
    estimate = inspect_scenario(scenario, calibration_rounds=calibration_rounds).estimate
    assert estimate.source == source
    ledger = _ledger(table)
    rounds = [row for row in ledger["per_round"] if row["round"] >= 1]
    assert len(rounds) == scenario.run.rounds
    for counter, key in (("sent_bytes", "bytes"), ("sent_msgs", "msgs")):
        measured = sum(row[key] for row in rounds) / len(rounds)
        assert estimate.per_round.total(counter) == pytest.approx(measured, rel=0.10), counter
    total = estimate.run_total().roles
    assert sorted(total) == sorted(ledger["roles"])
    for role, counters in ledger["roles"].items():
        for counter in COUNTERS:
            assert total[role][counter] == pytest.approx(counters[counter], rel=0.10), (role, counter)


def test_fcf_with_everyone_online_and_selected_is_byte_exact() -> None:
    """Explicit FCF, nobody offline: every size is computed user by user, so the plan is the ledger."""
    estimate = inspect_scenario(parse_scenario(FCF), calibration_rounds=0).estimate
    assert estimate.exact
    ledger = _ledger(FCF)
    for row in ledger["per_round"]:
        traffic = estimate.setup if row["round"] == 0 else estimate.per_round
        assert (traffic.total("sent_bytes"), traffic.total("sent_msgs")) == (row["bytes"], row["msgs"])


def test_a_plan_of_fixed_size_messages_is_byte_exact() -> None:
    """S2 with everyone online: every user is served each round, so every size and count is exact."""
    inspection = inspect_scenario(parse_scenario(DPMF_S2), calibration_rounds=0)
    estimate = inspection.estimate
    assert estimate.exact and inspection.parties == {"user": 40, "server": 1, "third_party": 1}
    ledger = _ledger(DPMF_S2)
    total = estimate.run_total().roles
    assert {role: {c: total[role][c] for c in COUNTERS} for role in total} == {
        role: {c: counters[c] for c in COUNTERS} for role, counters in ledger["roles"].items()
    }
    setup = next(row for row in ledger["per_round"] if row["round"] == 0)
    assert (estimate.setup.total("sent_msgs"), estimate.setup.total("sent_bytes")) == (setup["msgs"], setup["bytes"])
    kinds = {flow.kind: flow for flow in estimate.flows}
    for kind in ("dpmf.item_vectors", "dpmf.contribution", "dpmf.aggregate", "dpmf.roster"):
        assert kinds[kind].bytes * 3 == ledger["kinds"][kind]["bytes"], kind


def test_crashed_users_contributions_are_missing_and_their_joins_counted() -> None:
    table = {**LDP_TWO_PROXIES, "availability": {"dropout": 0.1}, "protocol": {**LDP_TWO_PROXIES["protocol"], "proxies": 1}}
    estimate = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate
    kinds = {(flow.kind, flow.src, flow.dst): flow for flow in estimate.flows}
    assert kinds["ldp.reports", Role.USER, Role.PROXY].messages == pytest.approx(54.0)
    assert kinds["core.join", Role.USER, Role.PROXY].messages == pytest.approx(6.0)
    ledger = _ledger(table)
    for role, counters in ledger["roles"].items():
        for counter in COUNTERS:
            assert estimate.run_total().roles[role][counter] == pytest.approx(counters[counter], rel=0.05), (role, counter)


def test_user_bytes_is_the_codecs_length_for_every_user_index() -> None:
    scenario = parse_scenario({**DPMF_S2, "data": {"source": "synthetic", "users": 300, "items": 60, "ratings": 3000}})
    train, test = fedrecsim.data.prepare_data(scenario.data, scenario.run.seed)
    context = PlanContext(scenario, train, test, 300.0, 300.0, 0.0, 0.0)
    sizes = context.user_bytes(lambda n: ItemRequest(np.arange(n, dtype=np.int32)), SERVER, to_user=False)
    counts = train.user_counts()
    for user in (0, 127, 128, 255, 256, 299):
        body = ItemRequest(np.arange(counts[user], dtype=np.int32))
        assert sizes[user] == len(encode(Party(Role.USER, user), SERVER, 0.0, body))
        assert context.user_bytes(lambda n: body, SERVER, to_user=True)[user] == len(encode(SERVER, Party(Role.USER, user), 1.5, body))


def test_membership_sizes_each_join_as_one_of_the_users_it_concerns() -> None:
    """300 users: indices up to 127, 255 and 299 take 1, 2 and 3 bytes on the wire. Everyone joining at
    the set-up is their sum, exactly; a few joining per round is the mean, an expectation, unless the
    users concerned all have one index length."""
    scenario = parse_scenario({**DPMF_S2, "data": {"source": "synthetic", "users": 300, "items": 60, "ratings": 3000}})
    train, test = fedrecsim.data.prepare_data(scenario.data, scenario.run.seed)
    join = [len(encode(Party(Role.USER, user), SERVER, 0.0, Join())) for user in range(300)]
    leave = len(encode(Party(Role.USER, 200), SERVER, 0.0, Leave()))
    context = PlanContext(scenario, train, test, 300.0, 280.0, 2.0, 1.0)
    (setup,) = context.membership(initial=True)
    assert (setup.kind, setup.src, setup.dst, setup.messages, setup.bytes, setup.exact) == (
        "core.join", Role.USER, Role.SERVER, 300, sum(join), True)
    joins, leaves = context.membership()
    assert (joins.messages, joins.bytes, joins.exact) == (2.0, pytest.approx(2 * np.mean(join)), False)
    assert (leaves.kind, leaves.messages, leaves.bytes, leaves.exact) == ("core.leave", 1.0, pytest.approx(leave - 2 + (128 + 2 * 128 + 3 * 44) / 300), False)
    few = np.array([130, 140, 250])  # a tenth of the users, two-byte indices all
    (setup,) = context.membership(initial=True, users=few)
    assert (setup.messages, setup.bytes, setup.exact) == (3.0, pytest.approx(3 * join[130]), True)
    joins, _ = context.membership(users=few)
    assert (joins.messages, joins.bytes, joins.exact) == (0.02, pytest.approx(0.02 * join[130]), True)
    to_proxy = context.users_flow(Join(), Party(Role.PROXY, 0), 0.0)
    assert (to_proxy.dst, to_proxy.messages, to_proxy.bytes, to_proxy.exact) == (Role.PROXY, 0.0, 0.0, True)


def test_distinct_items_is_the_exact_expectation_over_every_choice_of_users() -> None:
    rated = [[0, 1], [1, 2], [2], [0, 3], [4]]
    item_counts = np.bincount(np.concatenate(rated), minlength=6)
    for chosen in (1, 2, 3, 5):
        subsets = list(itertools.combinations(range(5), chosen))
        brute = sum(len(set().union(*(rated[user] for user in subset))) for subset in subsets) / len(subsets)
        assert _distinct_items(item_counts, 5, chosen) == pytest.approx(brute)


def _scenario(availability: dict, rounds: int = 10) -> fedrecsim.scenario.Scenario:
    return parse_scenario({"run": {"protocol": "fcf", "rounds": rounds}, "availability": availability})


def test_expected_availability_follows_each_model() -> None:
    always = expected_availability(_scenario({}), 200)
    assert (always.initial, always.online, always.joins, always.leaves) == (200, 200, 0, 0)
    # The exact initial draw (about half) tends to the stationary share p_join / (p_join + p_leave) = 1/2.
    steady = expected_availability(_scenario({"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1, "initial_online": 0.5}), 4000)
    assert steady.online == pytest.approx(2000 + (steady.initial - 2000) * sum(0.8**t for t in range(10)) / 10)
    assert steady.joins == pytest.approx(0.1 * (4000 - steady.online)) and steady.leaves == pytest.approx(0.1 * steady.online)
    # Everyone online at the start, half of them online for good: E[share] = 1/2 + 1/2 * mean of 0.8^(t-1).
    drift = expected_availability(_scenario({"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1}, rounds=3), 100)
    assert drift.initial == 100 and drift.online == pytest.approx(100 * (0.5 + 0.5 * (1 + 0.8 + 0.64) / 3))
    markov = expected_availability(_scenario({"model": "markov", "mean_on_s": 300.0, "mean_off_s": 100.0}), 100, round_s=30.0)
    assert markov.online == pytest.approx(75.0) and markov.leaves == pytest.approx(7.5) and markov.joins == markov.leaves


def test_expected_availability_of_a_trace_is_its_initial_set(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("party,online_from_s,online_until_s\nuser:0,0,100\nuser:1,0,5\nuser:2,50,100\n")
    found = expected_availability(_scenario({"model": "trace", "trace": str(trace)}), 3)
    assert (found.initial, found.online, found.joins, found.leaves) == (2, 2, 0, 0) and "not estimated" in found.note


def test_traffic_adds_each_flow_to_its_sender_and_its_receiver() -> None:
    flows = [Flow("a.x", Role.SERVER, Role.USER, 3, 300), Flow("a.y", Role.USER, Role.SERVER, 2, 50, exact=False)]
    traffic = Traffic.of(flows)
    assert traffic.roles == {
        "server": {"sent_msgs": 3, "sent_bytes": 300, "recv_msgs": 2, "recv_bytes": 50},
        "user": {"sent_msgs": 2, "sent_bytes": 50, "recv_msgs": 3, "recv_bytes": 300},
    }
    both = Traffic.of([Flow("a.z", Role.SERVER, Role.PROXY, 1, 10)]).plus(traffic, 10)
    assert both.roles["proxy"]["recv_bytes"] == 10 and both.roles["user"]["sent_bytes"] == 500
    assert both.total("sent_msgs") == 1 + 50


def _calibration(**changes: float) -> Calibration:
    values = dict(rounds=3, first_s=2.0, round_s=0.5, evaluation_s=0.25, tail_s=1.0, virtual_round_s=4.0,
                  setup=Traffic({}), per_round=Traffic({}), online=10.0)
    return Calibration(**{**values, **changes})


def test_the_projected_time_counts_each_round_and_each_evaluation_once() -> None:
    assert _calibration().projected_s(10, 3) == pytest.approx(2.0 + 9 * 0.5 + 3 * 0.25 + 1.0)
    table = {**FCF, "run": {**FCF["run"], "rounds": 10}, "protocol": {"d": 4, "eval_every": 4}}
    scenario = parse_scenario(table)
    inspection = Inspection(scenario, {}, {}, Availability(1, 1, 0, 0, ""), Estimate("none", Traffic({}), Traffic({}), 10), _calibration())
    # Rounds 2..10 that measure metrics: 4, 8 and the last.
    assert inspection.projected_s == pytest.approx(2.0 + 9 * 0.5 + 3 * 0.25 + 1.0)
    assert Inspection(scenario, {}, {}, Availability(1, 1, 0, 0, ""), inspection.estimate, None).projected_s is None


def test_a_calibration_times_its_rounds_and_measures_their_traffic() -> None:
    inspection = inspect_scenario(parse_scenario({**FCF, "protocol": {"d": 4, "eval_every": 2}}), calibration_rounds=3)
    calibration = inspection.calibration
    assert calibration is not None and calibration.rounds == 3
    assert calibration.first_s > 0 and calibration.round_s > 0 and calibration.tail_s >= 0
    assert calibration.virtual_round_s == pytest.approx(1.0, abs=0.5)
    assert calibration.per_round.roles["user"]["sent_msgs"] == 40 and calibration.setup.roles["user"]["sent_msgs"] == 80
    assert calibration.online == 40
    # More calibration rounds than the run has: the run's own rounds; fewer than two: two (one to time);
    # a one-round run: that round, untimed.
    assert inspect_scenario(parse_scenario({**FCF, "run": {**FCF["run"], "rounds": 2}}), calibration_rounds=5).calibration.rounds == 2
    assert inspect_scenario(parse_scenario(FCF), calibration_rounds=1).calibration.rounds == 2
    single = inspect_scenario(parse_scenario({**FCF, "run": {**FCF["run"], "rounds": 1}}), calibration_rounds=3).calibration
    assert single.rounds == 1 and single.round_s == 0
    # Even a one-round calibration tells its set-up (round 0) from its round.
    assert single.per_round.roles["user"]["sent_msgs"] == 40 and single.setup.roles["user"]["sent_msgs"] == 80


def test_a_calibration_times_rounds_that_measure_metrics_apart() -> None:
    """eval_every = 3: of the calibration's rounds 2 and 3, round 3 (and the last) measures metrics."""
    calibration = inspect_scenario(parse_scenario({**FCF, "protocol": {"d": 4, "eval_every": 3}}), calibration_rounds=3).calibration
    assert calibration.round_s > 0 and 0 <= calibration.evaluation_s < 1.0
    assert calibration.virtual_round_s == pytest.approx(1.0, abs=0.5) and calibration.first_s < 30


def test_the_text_shows_the_resolved_scenario_parties_traffic_and_time() -> None:
    text = inspection_text(inspect_scenario(parse_scenario(DPMF_S3_CHURN), calibration_rounds=2))
    assert text.startswith("# resolved scenario (defaults filled in)\n[run]\nprotocol = \"dpmf\"")
    assert "mask_transport = \"explicit\"" in text and "# unset: frac_bits, noise" in text
    assert "parties: user 60, server 1, third_party 1" in text
    assert "traffic per round (from the protocol's traffic plan: sizes from the wire codec, some expected)" in text
    assert "dpmf.roster" in text and "exact)" in text and "expected)" in text
    assert "assumes: S3: one pre-sharing attempt" in text
    assert "calibration: 2 rounds at full size (nothing scaled)" in text and "time: about" in text


def test_without_a_plan_or_a_calibration_nothing_is_made_up() -> None:
    text = inspection_text(inspect_scenario(parse_scenario(PROTOTYPES), calibration_rounds=0))
    assert "declares no traffic plan" in text
    assert "traffic: not estimated (no traffic plan and no calibration)" in text
    assert "time: not estimated (calibration skipped)" in text


def test_the_command_prints_the_inspection_and_refuses_a_bad_key_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[run]\nprotocol = "fcf"\nrounds = 3\n[data]\nusers = 30\nitems = 40\nratings = 600\n')
    assert main(["inspect", str(scenario), "--set", "protocol.d=3", "--calibrate", "0"]) == 0
    out = capsys.readouterr().out
    assert "d = 3" in out and "parties: user 30" in out and "time: not estimated" in out
    assert main(["inspect", str(scenario), "--set", "protocol.dd=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "protocol.dd" in err


def test_byte_and_duration_units() -> None:
    from fedrecsim.inspect import _bytes, _duration

    assert [_bytes(value) for value in (0, 1023, 1024, 1536, 2**20, 5 * 2**30)] == [
        "0 B", "1,023 B", "1.0 KiB", "1.5 KiB", "1.0 MiB", "5.0 GiB"
    ]
    assert [_duration(value) for value in (59.94, 60, 3599, 3600, 5400)] == ["59.9 s", "1.0 min", "60.0 min", "1.0 h", "1.5 h"]


def test_the_traffic_and_time_text_in_full() -> None:
    """Every figure of a byte-exact plan (S2, everyone online) as printed, and a calibration's lines."""
    import dataclasses

    inspection = inspect_scenario(parse_scenario(DPMF_S2), calibration_rounds=0)
    text = inspection_text(inspection)
    assert text[text.index("data:"):] == """\
data: 40 users, 60 items, 900 training and 100 test entries
parties: user 40, server 1, third_party 1
online: 40 at the start, 40.0 per round on average; 0.00 joins and 0.00 leaves per round (always: every user online)

traffic per round (from the protocol's traffic plan: sizes from the wire codec, exact):
  role               sent msgs      sent bytes       recv msgs      recv bytes
  server                  41.0        62.5 KiB            41.0         7.4 KiB
  third_party              1.0         2.2 KiB            41.0        34.0 KiB
  user                    80.0        38.9 KiB            40.0        62.3 KiB
  all                    122.0       103.7 KiB                                
  per kind (per round):
    dpmf.item_vectors                 server -> user             40.00 msgs     62.3 KiB (1.6 KiB each, exact)
    dpmf.contribution                   user -> third_party      40.00 msgs     33.8 KiB (866 B each, exact)
    dpmf.item_request                   user -> server           40.00 msgs      5.1 KiB (131 B each, exact)
    dpmf.aggregate               third_party -> server            1.00 msgs      2.2 KiB (2.2 KiB each, exact)
    dpmf.roster                       server -> third_party       1.00 msgs        160 B (160 B each, exact)
set-up (round 0): 120.0 msgs, 39.8 KiB
whole run (3 rounds):
  server                 163.0       221.1 KiB           203.0        28.1 KiB
  third_party              3.0         6.7 KiB           123.0       102.0 KiB
  user                   320.0       122.9 KiB           160.0       220.7 KiB
  assumes: every served user asks to be served again right after it contributed

time: not estimated (calibration skipped)"""
    measured = Traffic({"user": {"sent_msgs": 12.5, "sent_bytes": 3 * 2**20, "recv_msgs": 1.0, "recv_bytes": 5.0}})
    timed = dataclasses.replace(inspection, calibration=_calibration(online=39.5, per_round=measured))
    text = inspection_text(timed)
    assert text[text.index("calibration:"):] == (
        "calibration: 3 rounds at full size (nothing scaled): first round (with data and set-up) 2.00 s, then 0.500 s "
        "per round (+0.250 s when metrics are measured), 1.00 s after the last; 4.00 virtual s per round\n"
        "  measured per round: 12.5 msgs, 3.0 MiB, 39.5 online\n"
        "time: about 4.5 s for 3 rounds (extrapolated from the calibration; about 12.0 s of virtual time)"
    )
    text = inspection_text(dataclasses.replace(inspection, calibration=_calibration(evaluation_s=0.0, first_s=100.0)))
    assert "then 0.500 s per round, 1.00 s after the last" in text and "time: about 1.7 min for 3 rounds" in text


def test_one_round_is_said_in_the_singular() -> None:
    import dataclasses

    table = {**DPMF_S2, "run": {**DPMF_S2["run"], "rounds": 1}}
    inspection = inspect_scenario(parse_scenario(table), calibration_rounds=0)
    text = inspection_text(dataclasses.replace(inspection, calibration=_calibration(rounds=1)))
    assert "whole run (1 round):" in text and "calibration: 1 round at full size" in text and " for 1 round (" in text
    assert "1 rounds" not in text


def test_a_measured_estimate_lists_no_kinds_and_a_plan_skips_empty_flows() -> None:
    text = inspection_text(inspect_scenario(parse_scenario(PROTOTYPES), calibration_rounds=2))
    assert "traffic per round (as measured in the calibration run):" in text and "per kind" not in text
    # Two unlike rounds (silos send, then the server): no set-up told apart, traffic spread over both.
    assert "\n  silo                     1.5" in text and "\n  all                      3.0" in text
    assert "set-up (round 0): 0.0 msgs, 0 B" in text
    assert "core.join" not in inspection_text(inspect_scenario(parse_scenario(DPMF_S2), calibration_rounds=0))


def test_the_resolved_scenario_is_toml() -> None:
    import tomllib

    from fedrecsim.config import toml_literal
    from fedrecsim.inspect import _toml_lines

    assert [toml_literal(value) for value in (True, False, "é\"x", [1, "a"], (), {}, {"a": 1, "b": [2.5]}, 3, 0.5)] == [
        "true", "false", '"é\\"x"', '[1, "a"]', "[]", "{}", "{ a = 1, b = [2.5] }", "3", "0.5"
    ]
    table = parse_scenario(DPMF_S3_CHURN).to_table()
    lines = _toml_lines(table)
    parsed = tomllib.loads("\n".join(line for line in lines if not line.startswith("#")))
    unset = {key for section in table.values() for key, value in section.items() if value is None}
    assert parsed == {name: {k: v for k, v in section.items() if v is not None} for name, section in table.items()}
    assert unset and all(line.startswith("# unset: ") for line in lines if line.startswith("#"))


def test_the_resolved_scenario_with_fault_tables_is_toml_that_parses_back() -> None:
    import tomllib

    from fedrecsim.config import toml_literal
    from fedrecsim.inspect import _toml_lines

    assert toml_literal({"a": None, "b": 1}) == "{ b = 1 }" and toml_literal({"a": None}) == "{}"
    faults = {"crash": [{"party": "user:1", "kind": "fcf.item_gradients"}]}  # round, restart_after_s unset
    scenario = parse_scenario({**FCF, "faults": faults})
    text = "\n".join(line for line in _toml_lines(scenario.to_table()) if not line.startswith("#"))
    assert "None" not in text
    assert parse_scenario(tomllib.loads(text)) == scenario


def test_a_calibration_splits_set_up_rounds_evaluations_and_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake timer read at the start, after each of 3 rounds and at the end: 0, 5, 7, 10, 11.5 s."""
    import types

    from fedrecsim.inspect import calibrate

    readings = iter([0.0, 5.0, 7.0, 10.0, 11.5])
    monkeypatch.setattr("fedrecsim.inspect.time", types.SimpleNamespace(perf_counter=lambda: next(readings)))
    # eval_every = 3: round 2 does not measure metrics (2 s), round 3 does (3 s).
    calibration = calibrate(parse_scenario({**FCF, "run": {**FCF["run"], "rounds": 9}, "protocol": {"d": 4, "eval_every": 3}}), 3)
    assert (calibration.rounds, calibration.first_s, calibration.round_s, calibration.evaluation_s, calibration.tail_s) == (
        3, 5.0, 2.0, 1.0, 1.5
    )
    assert 1.0 < calibration.virtual_round_s < 1.5 and calibration.online == 40  # 1 s between rounds, plus latency
    assert calibration.setup.roles == {
        "server": {"sent_msgs": 0.0, "sent_bytes": 0.0, "recv_msgs": 80.0, "recv_bytes": calibration.setup.roles["server"]["recv_bytes"]},
        "user": {"sent_msgs": 80.0, "sent_bytes": calibration.setup.roles["user"]["sent_bytes"], "recv_msgs": 0.0, "recv_bytes": 0.0},
    }
    assert calibration.per_round.roles["server"]["sent_msgs"] == 40 and calibration.per_round.roles["server"]["recv_msgs"] == 40
    ledger = _ledger({**FCF, "run": {**FCF["run"], "rounds": 3}})
    assert calibration.per_round.roles["user"]["sent_bytes"] * 3 + calibration.setup.roles["user"]["sent_bytes"] == ledger["roles"]["user"]["sent_bytes"]
    # Every round measuring metrics (eval_every = 1): no split, the rounds' mean; 9 rounds projected.
    readings = iter([0.0, 5.0, 7.0, 10.0, 11.5])
    every = calibrate(parse_scenario({**FCF, "run": {**FCF["run"], "rounds": 9}}), 3)
    assert (every.round_s, every.evaluation_s) == (2.5, 0.0) and every.projected_s(9, 8) == pytest.approx(5 + 8 * 2.5 + 1.5)


def test_availability_notes_edge_cases_and_the_calibrated_round_length() -> None:
    bernoulli = expected_availability(_scenario({"model": "bernoulli", "p_join": 0.1, "p_leave": 0.1, "initial_online": 0.5}), 4000)
    assert bernoulli.note == f"bernoulli: {bernoulli.initial:.0f} online at the start, tending to 50.0% of 4000"
    # No churn at all: whoever starts online stays.
    frozen = expected_availability(_scenario({"model": "bernoulli", "p_join": 0.0, "p_leave": 0.0, "initial_online": 0.5}), 400)
    assert frozen.online == frozen.initial and (frozen.joins, frozen.leaves) == (0, 0)
    nobody = expected_availability(_scenario({"model": "bernoulli", "p_join": 0.1, "p_leave": 0.3}), 0)
    assert (nobody.initial, nobody.online, nobody.joins, nobody.leaves) == (0, 0, 0, 0)
    markov = _scenario({"model": "markov", "mean_on_s": 300.0, "mean_off_s": 100.0})
    default = expected_availability(markov, 100)  # a round of round_gap_s + round_timeout_s = 61 s
    assert default.leaves == pytest.approx(75.0 * 61 / 300) and default.note.endswith("transitions over 61 virtual s per round")
    assert default.note == "markov: stationary 75.0% online; transitions over 61 virtual s per round"
    assert default.initial == len(markov.availability.churn().initial_online(0, [Party(Role.USER, i) for i in range(100)]))
    # A round longer than a mean online period: every online user leaves once, no more.
    assert expected_availability(markov, 100, round_s=900.0).leaves == pytest.approx(75.0)


def test_inspect_passes_the_calibrated_round_length_to_the_availability_model() -> None:
    table = {**FCF, "availability": {"model": "markov", "mean_on_s": 3600.0, "mean_off_s": 3600.0}}
    inspection = inspect_scenario(parse_scenario(table), calibration_rounds=2)
    length = inspection.calibration.virtual_round_s
    assert inspection.availability.note.endswith(f"transitions over {length:g} virtual s per round")
    assert inspection.parties == {"user": 40, "server": 1}
    assert inspection.calibration.online == pytest.approx(
        sum(row["online"] for row in fedrecsim.run(parse_scenario({**table, "run": {**FCF["run"], "rounds": 2}})).result["ledger"]["per_round"][1:]) / 2
    )
    skipped = inspect_scenario(parse_scenario(PROTOTYPES), calibration_rounds=0)
    assert skipped.estimate.source == "none" and skipped.estimate.run_total().roles == {}
    assert skipped.estimate.per_round.roles == {} and skipped.estimate.rounds == 2


def test_a_protocol_without_eval_every_measures_metrics_every_round() -> None:
    import types

    from fedrecsim.inspect import _evaluates, evaluation_period

    bare = types.SimpleNamespace(protocol=object())
    assert [_evaluates(evaluation_period(bare, None, None), index, 5) for index in range(1, 6)] == [True] * 5  # type: ignore[arg-type]
    every_two = types.SimpleNamespace(protocol=types.SimpleNamespace(eval_every=2))
    assert [_evaluates(evaluation_period(every_two, None, None), index, 5) for index in range(1, 6)] == [False, True, False, True, True]  # type: ignore[arg-type]


def test_a_plan_keeps_its_set_up_flows_and_sees_the_test_split(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import fedrecsim.protocols.dpmf.protocol as dpmf
    from fedrecsim.inspect import plan_estimate
    from fedrecsim.protocols import TrafficPlan

    flows = (Flow("a.x", Role.USER, Role.SERVER, 2, 20),)
    estimate = plan_estimate(TrafficPlan({Role.USER: 2}, flows, (), ("none",)), 3)
    assert estimate.setup_flows == flows and estimate.flows == () and estimate.exact and estimate.assumptions == ("none",)
    seen = []

    def spying(context: PlanContext) -> TrafficPlan:
        seen.append(len(context.test))
        return dpmf.PROTOCOL.plan(context)

    spec = dataclasses.replace(dpmf.PROTOCOL, plan=spying)
    monkeypatch.setattr("fedrecsim.inspect.protocol_spec", lambda name: spec)
    inspect_scenario(parse_scenario(DPMF_S2), calibration_rounds=0)
    assert seen == [100]


PRIVIREC_120_ITEMS = {
    "run": {"protocol": "privirec", "seed": 3, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 30, "items": 120, "ratings": 900},
    "network": {"latency": LATENCY},
    "protocol": {"variant": "privirec", "k": 12, "secagg": "ideal"},
}


def test_inspect_plans_under_the_scenarios_message_limit_not_the_default() -> None:
    """PriviRec's P' sum and P~ broadcast carry 120 x 121 / 2 words (58,080 bytes and more): under a limit of
    0.05 MiB (52,428 bytes) the run would refuse them and so does inspect, naming the key; raised to 1 MiB,
    inspect plans them (it planned under the wire's 256 MiB default whatever the scenario said)."""
    table = {**PRIVIREC_120_ITEMS, "network": {"latency": LATENCY, "max_message_mb": 0.05}}
    with pytest.raises(ConfigError, match=r"network\.max_message_mb.*exceeds the limit of 52428 .*refuse"):
        inspect_scenario(parse_scenario(table), calibration_rounds=0)
    table["network"]["max_message_mb"] = 1.0
    setup = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate.setup_flows
    sizes = {flow.kind: flow.bytes / flow.messages for flow in setup if flow.messages}
    assert 120 * 121 // 2 * 8 < sizes["privirec.item_item"] <= 2**20
    with pytest.raises(WireError, match="exceeds the limit"):
        fedrecsim.run({**table, "network": {"latency": LATENCY, "max_message_mb": 0.05}})


def test_each_kind_is_one_line_of_the_per_kind_table_with_the_plans_whole_count() -> None:
    """dpmf plans ``core.join`` twice under churn and dropout (users joining; crashed users announcing
    themselves again): the table listed two ``core.join user -> server`` lines with nothing between them."""
    tables = {**DPMF_S3_CHURN, "availability": {**DPMF_S3_CHURN["availability"], "dropout": 0.1}}
    inspection = inspect_scenario(parse_scenario(tables), calibration_rounds=0)
    joins = [flow for flow in inspection.estimate.flows if flow.kind == "core.join"]
    assert len(joins) == 2  # the plan's own two flows, which the table must add up
    text = inspection_text(inspection)
    lines = [line.split() for line in text.splitlines() if line.startswith("    core.join ")]
    assert len(lines) == 1, lines
    assert float(lines[0][4]) == pytest.approx(round(sum(flow.messages for flow in joins), 2))
    table = text[text.index("  per kind (per round):"):text.index("set-up (round 0)")].splitlines()[1:]
    routes = [tuple(line.split()[:4]) for line in table]
    assert len(routes) == len(set(routes)), routes


def test_a_negative_calibration_is_refused_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--calibrate -1`` (a typo) was taken as 0: no time estimate, and no word about it."""
    scenario = tmp_path / "s.toml"
    scenario.write_text('[run]\nprotocol = "fcf"\nrounds = 2\n[data]\nusers = 20\nitems = 30\nratings = 300\n')
    assert main(["inspect", str(scenario), "--calibrate", "-1"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("fedrecsim: error: --calibrate: expected a number of rounds >= 0") and captured.out == ""
