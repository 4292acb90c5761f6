"""The ledger's closing phase (`Ledger.begin_closing`): what a protocol sends after its last round --
privirec's broadcast of the filters -- is counted apart from the rounds, as the set-up is, so that the
set-up, the rounds 1..R and the closing phase add up to the whole run and a round's traffic does not
depend on whether it was the last. Checked end to end through the command (result.json, metrics.csv and
transcript.csv, message by message), on the ledger by hand (late receipts, checkpoints, processes
combined), and in `fedrecsim inspect`'s estimate."""

from __future__ import annotations

import csv
import json
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fedrecsim.cli import main
from fedrecsim.inspect import inspect_scenario, inspection_text
from fedrecsim.network.ledger import COUNTER_NAMES, DropReason, Ledger
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.runner import _where
from fedrecsim.scenario import parse_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
ALICE, BOB = Party(Role.USER, 0), Party(Role.USER, 1)
#: privirec (the filters' broadcast after the last round) and fcf (nothing after it), three rounds each.
RUNS = {
    "privirec": ("privirec_small.toml", ["data.users=20", "data.items=80", "data.ratings=400", "run.rounds=3"]),
    "fcf": ("fcf_static.toml", ["data.users=30", "data.items=40", "data.ratings=400", "run.rounds=3"]),
}


def _run(tmp_path: Path, protocol: str) -> tuple[dict[str, Any], Path]:
    scenario, overrides = RUNS[protocol]
    out = tmp_path / protocol
    sets = [argument for override in overrides for argument in ("--set", override)]
    assert main(["run", str(SCENARIOS / scenario), *sets, "--quiet", "--transcript", "--out", str(out)]) == 0
    return json.loads((out / "result.json").read_text()), out


def _role_sums(parties: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    sums: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTER_NAMES, 0))
    for party, counters in parties.items():
        for counter in COUNTER_NAMES:
            sums[party.split(":")[0]][counter] += counters[counter]
    return {role: counters for role, counters in sums.items() if any(counters.values())}


def _nonzero(roles: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {role: counters for role, counters in roles.items() if any(counters.values())}


@pytest.mark.parametrize("protocol", RUNS)
def test_set_up_rounds_and_closing_add_up_to_the_totals_each_message_in_its_phase(tmp_path: Path, protocol: str) -> None:
    """Per role and counter, set-up + rounds 1..R + closing == the whole run; transcript.csv, summed by
    round and role, gives every entry of ``rounds_by_role``; privirec's closing phase holds the filters'
    broadcast and nothing else, after round R; fcf has none. The parties' set-up and closing counters sum
    to their phases'; ``per_round`` and metrics.csv mark the same phase."""
    document, out = _run(tmp_path, protocol)
    ledger, rounds = document["ledger"], document["rounds_completed"]
    by_round = ledger["rounds_by_role"]
    closing = rounds + 1 if protocol == "privirec" else None
    expected_phases = [(index, None) for index in range(rounds + 1)] + ([(closing, "closing")] if closing else [])
    assert rounds == 3 and [(entry["round"], entry.get("phase")) for entry in by_round] == expected_phases
    for role, totals in ledger["roles"].items():
        for counter in COUNTER_NAMES:
            parts = sum(entry["roles"].get(role, {}).get(counter, 0) for entry in by_round)
            assert parts == totals[counter], (role, counter)

    counted: dict[int, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: dict.fromkeys(COUNTER_NAMES, 0)))
    kinds_by_round: dict[int, set[str]] = defaultdict(set)
    with open(out / "transcript.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            index, size, status = int(row["round"]), int(row["bytes"]), row["status"]
            sender, receiver = counted[index][row["src"].split(":")[0]], counted[index][row["dst"].split(":")[0]]
            if status == "delivered" or status.startswith("dropped:"):
                sender["sent_msgs"] += 1
                sender["sent_bytes"] += size
                kinds_by_round[index].add(row["kind"])
            if status == "delivered":
                receiver["recv_msgs"] += 1
                receiver["recv_bytes"] += size
            elif status.startswith("dropped:"):
                sender["dropped_msgs"] += 1
    assert {index: _nonzero(roles) for index, roles in counted.items()} == {
        entry["round"]: _nonzero(entry["roles"]) for entry in by_round
    }
    if closing is not None:
        assert kinds_by_round[closing] == {"privirec.filters"}
        assert all("privirec.filters" not in kinds for index, kinds in kinds_by_round.items() if index != closing)
        assert counted[closing]["server"]["sent_msgs"] == document["data"]["users"]

    assert _role_sums(ledger["setup_parties"]) == _nonzero(by_round[0]["roles"])
    assert _role_sums(ledger["closing_parties"]) == (_nonzero(by_round[-1]["roles"]) if closing else {})
    assert [(row["round"], row.get("phase")) for row in ledger["per_round"]] == expected_phases
    for entry, row in zip(by_round, ledger["per_round"]):
        assert row["bytes"] == sum(counters["sent_bytes"] for counters in entry["roles"].values())

    with open(out / "metrics.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    columns = reader.fieldnames or []
    assert [int(row["round"]) for row in rows] == [index for index, _ in expected_phases]
    if closing is None:
        assert "phase" not in columns
        return
    assert columns[:2] == ["round", "phase"]
    assert [row["phase"] for row in rows] == [""] * (rounds + 1) + ["closing"]
    assert rows[-1]["participants"] == ""  # the closing phase reports traffic, no metrics
    for role, counters in by_round[-1]["roles"].items():
        for counter in COUNTER_NAMES:
            assert int(rows[-1][f"{role}.{counter}"]) == counters[counter], (role, counter)


def _setup_and_round_one(ledger: Ledger) -> None:
    """Set-up: ALICE joins (4 bytes). Round 1: the server sends 7 bytes to ALICE, ALICE 10 to the server
    (still in flight when the round ends)."""
    ledger.begin_round(0, online=2)
    ledger.record_sent(ALICE, "join", 4)
    ledger.record_delivered(0.1, ALICE, SERVER, "join", b"j" * 4, 0, 0)
    ledger.begin_round(1, online=2)
    ledger.record_sent(SERVER, "ask", 7)
    ledger.record_delivered(1.1, SERVER, ALICE, "ask", b"a" * 7, 0, 1)
    ledger.record_sent(ALICE, "up", 10)


def _closing(ledger: Ledger) -> None:
    """The closing phase: ALICE's round-1 message arrives late, the server broadcasts 30 bytes to ALICE
    (delivered) and BOB (offline: dropped)."""
    ledger.begin_closing(online=2)
    ledger.record_delivered(2.0, ALICE, SERVER, "up", b"u" * 10, 0, 1)
    ledger.record_sent(SERVER, "final", 60, 2)
    ledger.record_delivered(2.1, SERVER, ALICE, "final", b"f" * 30, 0, 2)
    ledger.record_dropped(2.1, SERVER, BOB, "final", 30, DropReason.OFFLINE, 2)


def _counters(sent_bytes: int = 0, recv_bytes: int = 0, sent_msgs: int = 0, recv_msgs: int = 0, dropped_msgs: int = 0) -> dict[str, int]:
    return dict(zip(COUNTER_NAMES, (sent_bytes, recv_bytes, sent_msgs, recv_msgs, dropped_msgs)))


def test_a_late_receipt_in_the_closing_phase_counts_in_its_round_and_no_round_follows_the_phase() -> None:
    ledger = Ledger()
    _setup_and_round_one(ledger)
    assert ledger.closing_round is None and ledger.closing_parties() == {}
    _closing(ledger)
    assert ledger.round == ledger.closing_round == 2
    assert ledger.rounds_by_role() == [
        {"round": 0, "roles": {"server": _counters(recv_bytes=4, recv_msgs=1), "user": _counters(sent_bytes=4, sent_msgs=1)}},
        {"round": 1, "roles": {"server": _counters(sent_bytes=7, recv_bytes=10, sent_msgs=1, recv_msgs=1),
                               "user": _counters(sent_bytes=10, recv_bytes=7, sent_msgs=1, recv_msgs=1)}},
        {"round": 2, "phase": "closing", "roles": {"server": _counters(sent_bytes=60, sent_msgs=2, dropped_msgs=1),
                                                   "user": _counters(recv_bytes=30, recv_msgs=1)}},
    ]
    # ALICE's late round-1 message is not the closing phase's, on either account.
    assert ledger.closing_parties() == {
        "server:0": _counters(sent_bytes=60, sent_msgs=2, dropped_msgs=1), "user:0": _counters(recv_bytes=30, recv_msgs=1),
    }
    assert [(row["round"], row.get("phase"), row["bytes"]) for row in ledger.summary()["per_round"]] == [
        (0, None, 4), (1, None, 17), (2, "closing", 60),
    ]
    with pytest.raises(RuntimeError, match="after the closing phase"):
        ledger.begin_round(3, online=2)
    with pytest.raises(RuntimeError, match="began already"):
        ledger.begin_closing(online=2)


def test_a_ledger_saved_before_or_in_the_closing_phase_carries_on_as_one_never_saved() -> None:
    whole = Ledger()
    _setup_and_round_one(whole)
    _closing(whole)
    for save_in_closing in (False, True):
        saved = Ledger()
        _setup_and_round_one(saved)
        if save_in_closing:
            saved.begin_closing(online=2)
        saved.fold()
        resumed = Ledger()
        resumed.restore_state(pickle.loads(pickle.dumps(saved.checkpoint_state())))
        if save_in_closing:
            resumed.record_delivered(2.0, ALICE, SERVER, "up", b"u" * 10, 0, 1)
            resumed.record_sent(SERVER, "final", 60, 2)
            resumed.record_delivered(2.1, SERVER, ALICE, "final", b"f" * 30, 0, 2)
            resumed.record_dropped(2.1, SERVER, BOB, "final", 30, DropReason.OFFLINE, 2)
        else:
            _closing(resumed)
        assert resumed.summary() == whole.summary(), save_in_closing
        assert resumed.closing_round == 2


def test_ledgers_combined_from_processes_mark_the_closing_phase_of_the_one_that_began_it() -> None:
    server_side, user_side = Ledger(), Ledger()
    _setup_and_round_one(server_side)
    server_side.begin_closing(online=2)
    server_side.record_sent(SERVER, "final", 60, 2)
    user_side.record_delivered(2.1, SERVER, ALICE, "final", b"f" * 30)
    combined = Ledger.combined([pickle.loads(pickle.dumps(ledger.export())) for ledger in (user_side, server_side)])
    assert [(row["round"], row.get("phase"), row["bytes"]) for row in combined.summary()["per_round"]] == [
        (0, None, 4), (1, None, 17), (2, "closing", 60),
    ]
    assert combined.summary()["rounds_by_role"] == [] and combined.summary()["closing_parties"] == {}


def test_a_run_stopped_in_its_closing_phase_says_so_not_a_round_past_the_last() -> None:
    ledger = Ledger()
    _setup_and_round_one(ledger)
    assert _where(ledger) == "in round 1"
    ledger.begin_closing(online=2)
    assert _where(ledger) == "in the closing phase after round 1"


PRIVIREC = {
    "run": {"protocol": "privirec", "seed": 3, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 24, "items": 60, "ratings": 500},
    "protocol": {"variant": "privirec_k", "k": 6, "secagg": "ideal"},
}


def test_inspect_plans_and_measures_the_closing_phase_apart_from_the_rounds() -> None:
    """privirec's plan has the filters' broadcast in its closing phase: with everyone online the plan is
    byte for byte the calibration run's ledger -- set-up, each round and the closing phase -- and the whole
    run is their sum; the text names the closing phase."""
    inspection = inspect_scenario(parse_scenario(PRIVIREC), calibration_rounds=2)
    estimate, calibration = inspection.estimate, inspection.calibration
    assert estimate.source == "plan" and calibration is not None
    users = PRIVIREC["data"]["users"]
    assert estimate.closing.roles["server"]["sent_msgs"] == users and estimate.closing.roles["user"]["recv_msgs"] == users
    for planned, measured in ((estimate.setup, calibration.setup), (estimate.per_round, calibration.per_round),
                              (estimate.closing, calibration.closing)):
        assert planned.roles == {role: pytest.approx(counters) for role, counters in measured.roles.items()}
    whole = calibration.setup.plus(calibration.per_round, 2).plus(calibration.closing)
    assert estimate.run_total().roles == {role: pytest.approx(counters) for role, counters in whole.roles.items()}
    assert f"closing (after the last round): {users:,}.0 msgs" in inspection_text(inspection)
