"""The set-up's counters while the ledger is still in its first round 0 (they are the parties' own, not
counted twice) and after the first round begins (copied then, late set-up receipts and drops counted
apart); each round's totals derived from its roles' sent counters. All checked against counts by hand,
and across a checkpoint taken in the set-up."""

from __future__ import annotations

import pickle

from fedrecsim.network.ledger import DropReason, Ledger
from fedrecsim.network.party import SERVER, Party, Role

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


def _counters(sent_bytes: int = 0, recv_bytes: int = 0, sent_msgs: int = 0, recv_msgs: int = 0, dropped_msgs: int = 0) -> dict[str, int]:
    return {"sent_bytes": sent_bytes, "recv_bytes": recv_bytes, "sent_msgs": sent_msgs, "recv_msgs": recv_msgs,
            "dropped_msgs": dropped_msgs}


def _setup(ledger: Ledger) -> None:
    """Round 0: ALICE sends 10 bytes to the server (delivered), BOB 20 (delivered later), BOB 5 (dropped later)."""
    ledger.begin_round(0, online=3)
    ledger.record_sent(ALICE, "k", 10)
    ledger.record_delivered(0.1, ALICE, SERVER, "k", b"a" * 10, 0, 0)
    ledger.record_sent(BOB, "k", 20)
    ledger.record_sent(BOB, "k", 5)


def _rounds(ledger: Ledger) -> None:
    """Round 1: the server sends 7 bytes to ALICE; BOB's set-up messages arrive (20) and are dropped (5)."""
    ledger.begin_round(1, online=3)
    ledger.record_sent(SERVER, "r", 7)
    ledger.record_delivered(1.1, SERVER, ALICE, "r", b"b" * 7, 0, 1)
    ledger.record_delivered(1.2, BOB, SERVER, "k", b"c" * 20, 0, 0)
    ledger.record_dropped(1.3, BOB, SERVER, "k", 5, DropReason.OFFLINE, 0)


def test_the_setup_counters_are_the_parties_until_a_round_begins_then_only_the_setup_messages() -> None:
    ledger = Ledger()
    _setup(ledger)
    assert ledger.setup_parties() == {
        "server:0": _counters(recv_bytes=10, recv_msgs=1),
        "user:0": _counters(sent_bytes=10, sent_msgs=1),
        "user:1": _counters(sent_bytes=25, sent_msgs=2),
    }
    _rounds(ledger)
    assert ledger.setup_parties() == {
        "server:0": _counters(recv_bytes=30, recv_msgs=2),
        "user:0": _counters(sent_bytes=10, sent_msgs=1),
        "user:1": _counters(sent_bytes=25, sent_msgs=2, dropped_msgs=1),
    }
    assert ledger.party(ALICE) == _counters(sent_bytes=10, recv_bytes=7, sent_msgs=1, recv_msgs=1)
    assert ledger.party(SERVER) == _counters(sent_bytes=7, recv_bytes=30, sent_msgs=1, recv_msgs=2)
    assert ledger.summary()["per_round"] == [
        {"round": 0, "bytes": 35, "msgs": 3, "online": 3},
        {"round": 1, "bytes": 7, "msgs": 1, "online": 3},
    ]
    assert ledger.export()["rounds"] == {0: [35, 3], 1: [7, 1]}


def test_a_ledger_saved_in_the_setup_carries_on_as_one_never_saved() -> None:
    whole, saved = Ledger(), Ledger()
    _setup(whole)
    _setup(saved)
    saved.fold()
    whole.fold()
    resumed = Ledger()
    resumed.restore_state(pickle.loads(pickle.dumps(saved.checkpoint_state())))
    _rounds(whole)
    _rounds(resumed)
    assert resumed.summary() == whole.summary()
    assert resumed.transcript_xxh3_128 == whole.transcript_xxh3_128
    assert resumed.structure_xxh3_128 == whole.structure_xxh3_128
