"""The ledger: summaries per party, role, kind and round; the transcript hash; CSV export."""

from __future__ import annotations

import csv

from fedrecsim.network.ledger import DropReason, Ledger
from fedrecsim.network.party import SERVER, Party, Role

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


def _scripted() -> Ledger:
    ledger = Ledger(record_transcript=True)
    ledger.begin_round(1, online=2)
    ledger.record_sent(ALICE, "k.a", 100)
    ledger.record_delivered(0.5, ALICE, SERVER, "k.a", b"x" * 100)
    ledger.record_sent(BOB, "k.a", 40)
    ledger.record_dropped(0.6, BOB, SERVER, "k.a", 40, DropReason.LOST)
    ledger.begin_round(2, online=1)
    ledger.record_sent(SERVER, "k.b", 7)
    ledger.record_delivered(1.5, SERVER, ALICE, "k.b", b"y" * 7)
    return ledger


def test_summary_follows_the_result_json_contract() -> None:
    summary = _scripted().summary()
    assert summary["parties"]["user:0"] == {
        "sent_bytes": 100, "recv_bytes": 7, "sent_msgs": 1, "recv_msgs": 1, "dropped_msgs": 0,
    }
    assert summary["parties"]["user:1"]["dropped_msgs"] == 1
    assert summary["roles"]["user"] == {
        "sent_bytes": 140, "recv_bytes": 7, "sent_msgs": 2, "recv_msgs": 1, "dropped_msgs": 1, "parties": 2,
    }
    assert summary["kinds"] == {"k.a": {"msgs": 2, "bytes": 140}, "k.b": {"msgs": 1, "bytes": 7}}
    assert summary["per_round"] == [
        {"round": 1, "bytes": 140, "msgs": 2, "online": 2},
        {"round": 2, "bytes": 7, "msgs": 1, "online": 1},
    ]


def test_hash_depends_on_content_and_order() -> None:
    first, second = _scripted(), _scripted()
    assert first.transcript_xxh3_128 == second.transcript_xxh3_128
    other = Ledger()
    other.record_delivered(1.5, SERVER, ALICE, "k.b", b"y" * 7)
    other.record_delivered(0.5, ALICE, SERVER, "k.a", b"x" * 100)
    assert other.transcript_xxh3_128 != first.transcript_xxh3_128


def test_csv_exports(tmp_path) -> None:
    ledger = _scripted()
    ledger.write_csv(tmp_path / "ledger.csv")
    ledger.write_transcript_csv(tmp_path / "transcript.csv")
    rows = list(csv.DictReader(open(tmp_path / "ledger.csv")))
    assert [row["party"] for row in rows] == ["server:0", "user:0", "user:1"]
    assert rows[1]["sent_bytes"] == "100"
    transcript = list(csv.DictReader(open(tmp_path / "transcript.csv")))
    assert [row["status"] for row in transcript] == ["delivered", "dropped:lost", "delivered"]


def test_the_same_bytes_delivered_at_different_times_give_different_hashes() -> None:
    early, late, again = Ledger(), Ledger(), Ledger()
    early.record_delivered(1.0, ALICE, SERVER, "k.a", b"x" * 10)
    late.record_delivered(1.5, ALICE, SERVER, "k.a", b"x" * 10)
    again.record_delivered(1.0, ALICE, SERVER, "k.a", b"x" * 10)
    assert early.transcript_xxh3_128 != late.transcript_xxh3_128
    assert early.transcript_xxh3_128 == again.transcript_xxh3_128


def test_a_round_without_traffic_stays_in_per_round() -> None:
    ledger = Ledger()
    ledger.begin_round(1, online=3)
    ledger.record_sent(ALICE, "k.a", 10)
    ledger.begin_round(2, online=3)  # nobody sends in round 2 (e.g. everyone crashed)
    ledger.begin_round(3, online=2)
    ledger.record_sent(BOB, "k.a", 5)
    assert ledger.summary()["per_round"] == [
        {"round": 1, "bytes": 10, "msgs": 1, "online": 3},
        {"round": 2, "bytes": 0, "msgs": 0, "online": 3},
        {"round": 3, "bytes": 5, "msgs": 1, "online": 2},
    ]
