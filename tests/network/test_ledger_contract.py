"""The ledger against its documented rules (issue 13): every counter, the hash recomputed by hand, CSVs."""

from __future__ import annotations

import csv
import struct

import pytest
import xxhash

from fedrecsim.network.ledger import HASH_NAME, DropReason, Ledger, TranscriptRow
from fedrecsim.network.party import SERVER, Party, Role

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)
SILO = Party(Role.SILO, 2)


def _reference_hash(deliveries: list[tuple[float, bytes]]) -> str:
    """The module docstring's rule: XXH3-128 over (deliver time as <d, length as <Q, bytes), in order."""
    digest = xxhash.xxh3_128()
    for time, data in deliveries:
        digest.update(struct.pack("<dQ", time, len(data)) + data)
    return digest.hexdigest()


def test_a_fresh_ledger_is_empty_and_hashes_nothing() -> None:
    ledger = Ledger()
    assert ledger.transcript is None
    assert ledger.round == 0
    assert ledger.transcript_xxh3_128 == xxhash.xxh3_128(b"").hexdigest()
    assert ledger.parties() == []
    assert ledger.totals() == {"sent_bytes": 0, "recv_bytes": 0, "sent_msgs": 0, "recv_msgs": 0, "dropped_msgs": 0}
    assert ledger.dropped_by_reason == {"lost": 0, "offline": 0, "unfinished": 0, "partitioned": 0}
    assert ledger.party(ALICE) == {"sent_bytes": 0, "recv_bytes": 0, "sent_msgs": 0, "recv_msgs": 0, "dropped_msgs": 0}
    no_faults = {
        "dropped": {"lost": 0, "offline": 0, "unfinished": 0, "partitioned": 0},
        "duplicated": 0,
        "rejected": {"malformed": 0, "unexpected": 0, "duplicate": 0, "invalid": 0},
        "rejections": [],
    }
    assert ledger.summary() == {
        "parties": {}, "roles": {}, "kinds": {}, "per_round": [], "rounds_by_role": [], "setup_parties": {},
        "closing_parties": {}, "withheld": {}, "faults": no_faults,
    }
    assert HASH_NAME == "xxh3_128"
    assert Ledger(record_transcript=True).transcript == []


def test_the_transcript_hash_is_the_documented_xxh3_of_time_length_and_bytes() -> None:
    deliveries = [(0.5, b"first"), (0.5, b""), (2.25, b"\x00" * 300)]
    ledger = Ledger()
    for time, data in deliveries:
        ledger.record_delivered(time, ALICE, SERVER, "k", data)
    assert ledger.transcript_xxh3_128 == _reference_hash(deliveries)
    assert len(ledger.transcript_xxh3_128) == 32
    # Neither sends nor drops touch the hash.
    ledger.record_sent(ALICE, "k", 9)
    ledger.record_dropped(3.0, ALICE, SERVER, "k", 9, DropReason.LOST)
    assert ledger.transcript_xxh3_128 == _reference_hash(deliveries)


def test_every_counter_of_every_party_is_counted_from_its_own_events() -> None:
    ledger = Ledger()
    ledger.record_sent(ALICE, "k.a", 10)
    ledger.record_sent(ALICE, "k.a", 5)
    ledger.record_sent(BOB, "k.b", 7)
    ledger.record_delivered(1.0, ALICE, SERVER, "k.a", b"x" * 10)
    ledger.record_delivered(1.0, BOB, SERVER, "k.b", b"y" * 7)
    ledger.record_delivered(1.5, SERVER, ALICE, "k.c", b"z" * 3)
    ledger.record_dropped(2.0, ALICE, SERVER, "k.a", 5, DropReason.OFFLINE)
    ledger.record_dropped(2.0, ALICE, BOB, "k.a", 5, DropReason.UNFINISHED)
    ledger.record_dropped(2.0, BOB, SERVER, "k.b", 5, DropReason.UNFINISHED)
    assert ledger.party(ALICE) == {"sent_bytes": 15, "recv_bytes": 3, "sent_msgs": 2, "recv_msgs": 1, "dropped_msgs": 2}
    assert ledger.party(BOB) == {"sent_bytes": 7, "recv_bytes": 0, "sent_msgs": 1, "recv_msgs": 0, "dropped_msgs": 1}
    assert ledger.party(SERVER) == {"sent_bytes": 0, "recv_bytes": 17, "sent_msgs": 0, "recv_msgs": 2, "dropped_msgs": 0}
    assert ledger.totals() == {"sent_bytes": 22, "recv_bytes": 20, "sent_msgs": 3, "recv_msgs": 3, "dropped_msgs": 3}
    assert ledger.dropped_by_reason == {"lost": 0, "offline": 1, "unfinished": 2, "partitioned": 0}
    assert ledger.parties() == [SERVER, ALICE, BOB]  # sorted: role name, then index
    # The two byte counters alone, (received, sent); a party with no traffic has zeros.
    assert [ledger.bytes_of(party) for party in (ALICE, BOB, SERVER, SILO)] == [(3, 15), (0, 7), (17, 0), (0, 0)]


def test_bytes_of_reads_the_byte_counters_as_they_are_at_each_instant() -> None:
    """Read between events, across a round's start and a padded delivery sent in an earlier round: always
    the (recv_bytes, sent_bytes) of `party`, which a protocol differences per iteration."""
    ledger = Ledger()
    ledger.record_sent(ALICE, "k.a", 4)
    assert ledger.bytes_of(ALICE) == (0, 4) and ledger.bytes_of(SERVER) == (0, 0)
    ledger.begin_round(1, 2)
    ledger.record_delivered(0.5, ALICE, SERVER, "k.a", b"abcd", sent_round=0)
    ledger.record_sent(SERVER, "k.b", 9)
    ledger.record_delivered(0.7, SERVER, ALICE, "k.b", b"x" * 6, padding=3)
    for party in (ALICE, SERVER, BOB):
        counters = ledger.party(party)
        assert ledger.bytes_of(party) == (counters["recv_bytes"], counters["sent_bytes"])
    assert ledger.bytes_of(ALICE) == (9, 4) and ledger.bytes_of(SERVER) == (4, 9)


def test_summary_sums_roles_kinds_and_rounds_over_several_parties() -> None:
    ledger = Ledger()
    ledger.record_sent(ALICE, "k.b", 4)  # round 0: before any begin_round
    ledger.begin_round(3, online=7)
    assert ledger.round == 3
    ledger.record_sent(ALICE, "k.b", 10)
    ledger.record_sent(BOB, "k.a", 20)
    ledger.record_sent(SILO, "k.a", 1)
    ledger.record_delivered(1.0, ALICE, BOB, "k.b", b"q" * 10)
    ledger.begin_round(5, online=2)
    ledger.begin_round(3, online=6)  # a round again: its counters continue, its online count is replaced
    ledger.record_sent(BOB, "k.a", 2)
    summary = ledger.summary()
    assert list(summary) == [
        "parties", "roles", "kinds", "per_round", "rounds_by_role", "setup_parties", "closing_parties", "withheld", "faults",
    ]
    assert list(summary["parties"]) == ["silo:2", "user:0", "user:1"]
    assert summary["roles"] == {
        "silo": {"sent_bytes": 1, "recv_bytes": 0, "sent_msgs": 1, "recv_msgs": 0, "dropped_msgs": 0, "parties": 1},
        "user": {"sent_bytes": 36, "recv_bytes": 10, "sent_msgs": 4, "recv_msgs": 1, "dropped_msgs": 0, "parties": 2},
    }
    assert list(summary["roles"]) == ["silo", "user"]
    assert summary["kinds"] == {"k.a": {"msgs": 3, "bytes": 23}, "k.b": {"msgs": 2, "bytes": 14}}
    assert list(summary["kinds"]) == ["k.a", "k.b"]
    assert summary["per_round"] == [
        {"round": 0, "bytes": 4, "msgs": 1, "online": 0},
        {"round": 3, "bytes": 33, "msgs": 4, "online": 6},
        {"round": 5, "bytes": 0, "msgs": 0, "online": 2},
    ]


def test_an_unbegun_round_without_traffic_is_left_out_of_per_round() -> None:
    ledger = Ledger()
    ledger.begin_round(1, online=4)
    ledger.record_sent(ALICE, "k", 3)
    # Round 0 was never begun and carried nothing: it is not listed.
    assert [entry["round"] for entry in ledger.summary()["per_round"]] == [1]


def test_withheld_items_accumulate_per_party_and_fate_in_sorted_order() -> None:
    ledger = Ledger()
    ledger.record_withheld(SERVER, "reports", "held", 3)
    ledger.record_withheld(SERVER, "reports", "held", 4)
    ledger.record_withheld(SERVER, "reports", "dropped", 1)
    ledger.record_withheld(ALICE, "grads", "dropped", 2)
    withheld = ledger.summary()["withheld"]
    assert withheld == {"server:0": {"reports dropped": 1, "reports held": 7}, "user:0": {"grads dropped": 2}}
    assert list(withheld) == ["server:0", "user:0"]
    assert list(withheld["server:0"]) == ["reports dropped", "reports held"]


def test_transcript_rows_record_each_fate() -> None:
    ledger = Ledger(record_transcript=True)
    ledger.record_delivered(0.25, ALICE, SERVER, "k.a", b"abc")
    ledger.record_dropped(0.5, BOB, SERVER, "k.b", 11, DropReason.LOST)
    ledger.record_dropped(0.75, SERVER, BOB, "k.c", 12, DropReason.OFFLINE)
    assert ledger.transcript == [
        TranscriptRow(0.25, ALICE, SERVER, "k.a", 3, "delivered"),
        TranscriptRow(0.5, BOB, SERVER, "k.b", 11, "dropped:lost"),
        TranscriptRow(0.75, SERVER, BOB, "k.c", 12, "dropped:offline"),
    ]


def test_csv_files_hold_exactly_the_documented_columns_and_values(tmp_path) -> None:
    ledger = Ledger(record_transcript=True)
    ledger.record_sent(ALICE, "k.a", 10)
    ledger.record_delivered(1.0 / 3.0, ALICE, SERVER, "k.a", b"x" * 10)
    ledger.record_dropped(2.0, ALICE, SERVER, "k.a", 6, DropReason.UNFINISHED)
    ledger.write_csv(tmp_path / "ledger.csv")
    with open(tmp_path / "ledger.csv", newline="") as handle:
        assert list(csv.reader(handle)) == [
            ["party", "role", "sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"],
            ["server:0", "server", "0", "10", "0", "1", "0"],
            ["user:0", "user", "10", "0", "1", "0", "1"],
        ]
    ledger.write_transcript_csv(tmp_path / "transcript.csv")
    with open(tmp_path / "transcript.csv", newline="") as handle:
        assert list(csv.reader(handle)) == [
            ["time_s", "src", "dst", "kind", "bytes", "status", "round"],
            ["0.333333333", "user:0", "server:0", "k.a", "10", "delivered", "0"],
            ["2.000000000", "user:0", "server:0", "k.a", "6", "dropped:unfinished", "0"],
        ]


def test_a_transcript_csv_needs_a_recorded_transcript(tmp_path) -> None:
    with pytest.raises(ValueError, match="^this ledger did not record a transcript$"):
        Ledger().write_transcript_csv(tmp_path / "transcript.csv")
    assert not (tmp_path / "transcript.csv").exists()
