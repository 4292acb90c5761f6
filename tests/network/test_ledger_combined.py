"""Ledgers of several processes combined: the counters add up, the hash covers every part's digest."""

from __future__ import annotations

import pickle

import xxhash

from fedrecsim.network.ledger import MAX_REJECTIONS, DropReason, Ledger, RejectReason
from fedrecsim.network.party import SERVER, Party, Role

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


def _server_side() -> Ledger:
    ledger = Ledger()
    ledger.begin_round(1, online=2)
    ledger.record_sent(SERVER, "k.down", 30)
    ledger.record_delivered(0.5, ALICE, SERVER, "k.up", b"u" * 12)
    ledger.record_rejected(0.6, BOB, SERVER, "k.up", RejectReason.INVALID, "server:0 expected a valid k.up from user:1")
    ledger.record_withheld(SERVER, "reports", "held", 2)
    return ledger


def _user_side() -> Ledger:
    ledger = Ledger()
    ledger.begin_round(0, online=2)
    ledger.record_sent(ALICE, "k.up", 12)
    ledger.record_sent(BOB, "k.up", 9)
    ledger.record_delivered(0.4, SERVER, ALICE, "k.down", b"d" * 30)
    ledger.record_dropped(0.7, SERVER, BOB, "k.down", 30, DropReason.OFFLINE)
    ledger.record_withheld(SERVER, "reports", "held", 1)
    return ledger


def test_the_combined_counters_are_the_sums_of_the_parts() -> None:
    server_side, user_side = _server_side(), _user_side()
    exports = [pickle.loads(pickle.dumps(ledger.export())) for ledger in (server_side, user_side)]
    combined = Ledger.combined(exports)
    # A drop counts on the sender's account, whichever process saw it.
    assert combined.party(SERVER) == {"sent_bytes": 30, "recv_bytes": 12, "sent_msgs": 1, "recv_msgs": 1, "dropped_msgs": 1}
    assert combined.party(ALICE) == {"sent_bytes": 12, "recv_bytes": 30, "sent_msgs": 1, "recv_msgs": 1, "dropped_msgs": 0}
    assert combined.party(BOB) == {"sent_bytes": 9, "recv_bytes": 0, "sent_msgs": 1, "recv_msgs": 0, "dropped_msgs": 0}
    summary = combined.summary()
    assert summary["kinds"] == {"k.down": {"msgs": 1, "bytes": 30}, "k.up": {"msgs": 2, "bytes": 21}}
    assert summary["per_round"] == [
        {"round": 0, "bytes": 21, "msgs": 2, "online": 2},
        {"round": 1, "bytes": 30, "msgs": 1, "online": 2},
    ]
    assert summary["withheld"] == {"server:0": {"reports held": 3}}
    assert summary["faults"]["dropped"]["offline"] == 1
    assert summary["faults"]["rejected"]["invalid"] == 1
    assert [row["problem"] for row in summary["faults"]["rejections"]] == ["server:0 expected a valid k.up from user:1"]
    assert combined.round == 1


def test_the_combined_hash_is_over_the_digests_in_process_order() -> None:
    server_side, user_side = _server_side(), _user_side()
    expected = xxhash.xxh3_128()
    for ledger in (server_side, user_side):
        expected.update(bytes.fromhex(ledger.transcript_xxh3_128))
    assert Ledger.combined([server_side.export(), user_side.export()]).transcript_xxh3_128 == expected.hexdigest()
    assert Ledger.combined([user_side.export(), server_side.export()]).transcript_xxh3_128 != expected.hexdigest()


def test_the_combined_rejections_keep_the_first_hundred() -> None:
    parts = []
    for _ in range(3):
        ledger = Ledger()
        for _ in range(60):
            ledger.record_rejected(0.0, BOB, SERVER, "k.up", RejectReason.DUPLICATE, "twice")
        parts.append(ledger.export())
    combined = Ledger.combined(parts)
    assert len(combined.rejections) == MAX_REJECTIONS
    assert combined.rejected_by_reason["duplicate"] == 180


def test_what_two_processes_both_counted_adds_up() -> None:
    parts = []
    for online in (2, 3):
        ledger = Ledger()
        ledger.begin_round(1, online=online)
        ledger.record_dropped(0.1, SERVER, ALICE, "k.down", 10, DropReason.OFFLINE)
        ledger.record_duplicated(0.2, SERVER, ALICE, "k.down", 10)
        ledger.record_duplicated(0.3, SERVER, BOB, "k.down", 10)
        parts.append(ledger.export())
    combined = Ledger.combined(parts)
    assert combined.summary()["per_round"][-1]["online"] == 5
    assert combined.dropped_by_reason["offline"] == 2
    assert combined.duplicated == 4
