"""The stand-alone ``secagg`` protocol's bookkeeping, checked against what the simulator knows: whose streams
the inputs, keys, graph and crash stages come from, the metrics and their per-round means, the privacy
block, and a masks-cancel monitor that does catch a sum that is off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import SecAggParams, Stage, crypto, graph, roles
from fedrecsim.protocols.secagg.messages import Advertise, Masked, Reveal, Setup, Shares
from fedrecsim.protocols.secagg.parameters import GraphSecurity
from fedrecsim.protocols.secagg.real import RealServer
from fedrecsim.scenario import apply_overrides, parse_scenario, read_tables
from fedrecsim.seeding import Stream, generator

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "secagg_small.toml"
SEED, USERS, LENGTH = 5, 20, 64


def _scenario(*overrides: str):  # type: ignore[no-untyped-def]
    return parse_scenario(apply_overrides(read_tables(SCENARIO), [f"protocol.length={LENGTH}", *overrides]))


def _values(index: int) -> np.ndarray:
    """User ``index``'s vector: uniform in [-1, 1] from its own stream (``Stream.PROTOCOL``, 0, index)."""
    return generator(SEED, Stream.PROTOCOL, 0, index).uniform(-1.0, 1.0, LENGTH)


def privacy_bound() -> str:
    """The bound's description, as `GraphSecurity.report` gives it."""
    return GraphSecurity(3, 2, 1, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0).report()["bound"]


def test_without_dropout_the_sum_is_the_sum_of_each_users_own_stream() -> None:
    result = fedrecsim.run(_scenario("availability.dropout=0.0", "run.rounds=1"))
    [row] = result.rounds
    exact = sum(_values(index) for index in range(USERS))
    decoded = Ring(32, 16).decode(result.outcome.state["sum"])
    assert np.max(np.abs(decoded - exact)) <= USERS * 2.0**-17  # each input rounds by at most 2^-17
    assert row["max_abs_error"] == pytest.approx(float(np.max(np.abs(decoded - exact))), abs=1e-12)
    assert np.max(np.abs(exact)) > 2.0  # values beyond [-1, 1] summed: the range is the documented one
    assert all(np.all(np.abs(_values(index)) <= 1.0) for index in range(USERS))


def test_keys_graph_and_crash_stages_come_from_each_partys_own_stream() -> None:
    scenario = _scenario('protocol.graph="sparse"', "protocol.neighbours=4", "protocol.threshold=0.2",
                         "availability.dropout=0.3")
    result = fedrecsim.run(scenario, record_views=[SERVER, Party(Role.USER, 0)])
    users = [Party(Role.USER, index) for index in range(USERS)]
    # The sparse graph is drawn by the server from its actor stream: user 0's first neighbours say so.
    setups = [envelope.body for envelope in result.views[Party(Role.USER, 0)] if isinstance(envelope.body, Setup)]
    expected = graph.harary(users, 4, generator(SEED, Stream.ACTOR, Role.SERVER.code, 0))[Party(Role.USER, 0)]
    assert setups[0].session == 1 and setups[0].neighbours.tolist() == [party.index for party in expected]
    # Each user's first key pairs come from its own actor stream, so no two users share a key.
    first = {envelope.src: envelope.body for envelope in result.views[SERVER]
             if isinstance(envelope.body, Advertise) and envelope.body.session == 1}
    assert len(first) > 10
    for party, body in first.items():
        rng = generator(SEED, Stream.ACTOR, Role.USER.code, party.index)
        c, s = crypto.KeyPair.generate(rng), crypto.KeyPair.generate(rng)
        assert (body.c_public, body.s_public) == (c.public, s.public), party
    assert len({body.s_public for body in first.values()}) == len(first)
    # A user that dropped out of session 1 stopped at the stage drawn first from (Stream.PROTOCOL, 1, index).
    sent = {kind: {envelope.src for envelope in result.views[SERVER]
                   if isinstance(envelope.body, kind) and envelope.body.session == 1}
            for kind in (Advertise, Shares, Masked, Reveal)}
    stopped = {}
    for party in users:
        for stage, kind in zip(Stage, (Advertise, Shares, Masked, Reveal)):
            if party not in sent[kind]:
                stopped[party] = stage
                break
    assert len(stopped) >= 5 and len(set(stopped.values())) >= 3
    for party, stage in stopped.items():
        drawn = tuple(Stage)[int(generator(SEED, Stream.PROTOCOL, 1, party.index).integers(4))]
        assert stage is drawn, party


def test_final_metrics_are_the_last_round_and_per_round_means_of_the_ledger() -> None:
    progress: list[tuple[int, int]] = []
    result = fedrecsim.run(_scenario("availability.dropout=0.2"), progress=lambda done, total: progress.append((done, total)))
    rounds = result.rounds
    assert [row["round"] for row in rounds] == [1, 2, 3] and progress == [(1, 3), (2, 3), (3, 3)]
    assert result.result["rounds_completed"] == 3
    assert len({row["participants"] for row in rounds}) > 1  # the last round is not like the others
    final = result.result["metrics"]["final"]
    assert {name: final[name] for name in rounds[-1] if name != "round"} == {
        name: value for name, value in rounds[-1].items() if name != "round"
    }
    assert "round" not in final and final["rounds_aborted"] == 0
    ledger = result.result["ledger"]
    parties, setup = ledger["parties"], ledger["setup_parties"]
    users = [f"user:{index}" for index in range(USERS)]
    assert sum(setup[user]["sent_bytes"] for user in users) > 0  # the joins: round 0, left out of the means

    def rounds_only(names: list[str], counter: str) -> int:
        return sum(parties[name][counter] - setup.get(name, {}).get(counter, 0) for name in names)

    assert final["user_sent_bytes"] == pytest.approx(rounds_only(users, "sent_bytes") / USERS / 3)
    assert final["user_recv_bytes"] == pytest.approx(rounds_only(users, "recv_bytes") / USERS / 3)
    assert final["server_sent_bytes"] == pytest.approx(rounds_only(["server:0"], "sent_bytes") / 3)
    assert final["server_recv_bytes"] == pytest.approx(rounds_only(["server:0"], "recv_bytes") / 3)
    by_round = ledger["rounds_by_role"][1:]
    assert final["user_sent_bytes"] == pytest.approx(sum(row["roles"]["user"]["sent_bytes"] for row in by_round) / USERS / 3)
    assert final["user_sent_bytes"] * USERS == pytest.approx(final["server_recv_bytes"])
    privacy = result.result["privacy"]
    # The complete graph of the last session: 1 of its users corrupted (< t = 11) and 1 dropped (19 - 1 >= t):
    # neither failure can happen at the assumed 5 % and 5 %.
    members = int(rounds[-1]["u0"])
    assert members * 0.05 < 2 and privacy.pop("graph_failure") == {
        "users": members, "degree": members - 1, "threshold": 11, "corrupt_fraction": 0.05, "dropout_fraction": 0.05,
        "corrupted_users": members // 20, "dropped_users": members // 20, "security_failure_log2": None,
        "correctness_failure_log2": None, "bound": privacy_bound(), "security_bits": 40.0, "correctness_bits": 20.0,
        "sizing": "log2", "meets_targets": True,
    }
    assert privacy == {
        "mechanism": "secure aggregation (Bonawitz et al. 2017)",
        "mode": "real",
        "server_learns": "each round, the sum of the inputs of the users in U3 and which users completed each stage; "
        "nothing about a single input, if the server follows the protocol and fewer than t users collude with it",
        "threshold": 11,
        "degree": 19,
        "adversary": "honest-but-curious server (ConsistencyCheck of the active variant omitted)",
    }
    [monitor] = result.result["invariants"]
    assert monitor == {"name": "masks_cancel", "checked": 3, "violations": 0,
                       "detail": "the unmasked sum equals the encoded inputs of U3 summed in the ring"}
    state = result.outcome.state
    assert state["params"] == SecAggParams(ring=Ring(32, 16), graph="complete", threshold=0.5, population=20)
    assert state["sum"].dtype == np.uint32 and state["sum"].size == LENGTH


def test_one_round_divides_by_one_and_ideal_mode_says_what_it_is() -> None:
    result = fedrecsim.run(_scenario("run.rounds=1", 'protocol.mode="ideal"'))
    final, [setup, first] = result.result["metrics"]["final"], result.result["ledger"]["rounds_by_role"]
    assert setup["round"] == 0 and first["round"] == 1
    assert final["server_sent_bytes"] == first["roles"]["server"]["sent_bytes"]
    assert final["server_recv_bytes"] == first["roles"]["server"]["recv_bytes"]
    assert result.result["privacy"]["note"] == "ideal mode: bytes as in real mode, the sum computed by the ideal functionality"


def test_the_masks_cancel_monitor_catches_a_sum_that_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    class OffByOne(RealServer):
        def unmask(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            total = super().unmask(*args, **kwargs)
            total[0] += 1
            return total

    monkeypatch.setattr(roles, "RealServer", OffByOne)
    result = fedrecsim.run(_scenario("run.rounds=2"))
    assert [row["wrong_words"] for row in result.rounds] == [1, 1]
    [monitor] = result.result["invariants"]
    assert (monitor["checked"], monitor["violations"]) == (2, 2)
    assert monitor["detail"] == "round 1: 1 words off; round 2: 1 words off"


def test_a_lone_user_is_its_own_mean() -> None:
    result = fedrecsim.run(_scenario("data.users=1", "data.ratings=20", "availability.dropout=0.0", "run.rounds=2"))
    assert [(row["participants"], row["threshold"], row["degree"], row["wrong_words"]) for row in result.rounds] == [(1, 1, 0, 0)] * 2
    final, ledger = result.result["metrics"]["final"], result.result["ledger"]
    user, setup = ledger["parties"]["user:0"], ledger["setup_parties"]["user:0"]
    assert (final["user_sent_bytes"], final["user_recv_bytes"]) == (
        (user["sent_bytes"] - setup["sent_bytes"]) / 2, (user["recv_bytes"] - setup["recv_bytes"]) / 2,
    )


def test_a_one_round_and_a_five_round_run_report_the_same_per_round_bytes() -> None:
    """Without dropout every round carries the same messages, so a per-round mean may not depend on how many
    rounds share the set-up's joins: both equal one round's bytes in the ledger's ``rounds_by_role``."""
    finals, first_rounds = [], []
    for rounds in (1, 5):
        result = fedrecsim.run(_scenario(f"run.rounds={rounds}", "availability.dropout=0.0"))
        finals.append({name: value for name, value in result.result["metrics"]["final"].items() if name.endswith("_bytes")})
        first_rounds.append(result.result["ledger"]["rounds_by_role"][1]["roles"])
    assert finals[0] == finals[1]
    roles = first_rounds[0]
    assert finals[0] == {
        "user_sent_bytes": roles["user"]["sent_bytes"] / USERS, "user_recv_bytes": roles["user"]["recv_bytes"] / USERS,
        "server_sent_bytes": roles["server"]["sent_bytes"], "server_recv_bytes": roles["server"]["recv_bytes"],
    }


def test_a_round_nobody_is_online_for_sums_nothing_exactly() -> None:
    result = fedrecsim.run(_scenario('availability.model="bernoulli"', "availability.initial_online=0.0",
                                     "availability.p_join=0.0", "run.rounds=1"))
    [row] = result.rounds
    assert (row["u0"], row["participants"], row["aborted"]) == (0, 0, 0)
    assert (row["max_abs_error"], row["wrong_words"]) == (0.0, 0)
    assert not result.outcome.state["sum"].any()
