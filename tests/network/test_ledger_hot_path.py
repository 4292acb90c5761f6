"""The ledger's per-message path (issue 32): a small delivery's rows are held as parts and hashed in
batches, a large one after the rows held before it, a shared-body copy as its head and the body's digest,
the structure row from cached per-link and per-kind parts -- and the two fingerprints are still the
documented XXH3-128 of every delivery's row in delivery order, recomputed here from the definition,
wherever the reads of the digests fall. The counters
the inlined path keeps (per party, per round and role, the set-up's per party) are checked against counts
made by hand."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import xxhash

from fedrecsim.network.ledger import Ledger
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.wire import SHARED_BODY_BYTES, Array, Broadcast, encode_many, message

USERS = [Party(Role.USER, index) for index in range(3)]
ROLE_CODES = {role: code for code, role in enumerate(Role)}


@message("test.hash_queue")
@dataclass(frozen=True)
class Weights:
    values: Array("float64", ndim=1)


def _deliveries() -> list[tuple[float, Party, Party, str, bytes | Broadcast]]:
    """3,000 deliveries: mostly small, every 97th of 5,000 bytes, every 250th a shared-body copy."""
    shared = encode_many(SERVER, USERS, 0.0, Weights(np.arange(SHARED_BODY_BYTES // 8 + 1, dtype=np.float64)))
    assert type(shared[0]) is Broadcast
    rows = []
    for number in range(3000):
        src, dst = USERS[number % 3], (SERVER if number % 2 else THIRD_PARTY)
        if number % 250 == 0:
            src, dst, data = SERVER, USERS[number % 3], shared[number % 3]
        elif number % 97 == 0:
            data = bytes([number % 251]) * 5000
        else:
            data = number.to_bytes(4, "little") * (1 + number % 7)
        rows.append((0.001 * (number // 4), src, dst, "weights" if number % 5 else "k", data))
    return rows


def _content_row(time: float, data: bytes | Broadcast) -> bytes:
    prefix = struct.pack("<dQ", time, len(data))
    if type(data) is Broadcast:
        return prefix + data.head + xxhash.xxh3_128(data.shared.data).digest()
    return prefix + data


def _structure_row(time: float, src: Party, dst: Party, kind: str, nbytes: int) -> bytes:
    name = kind.encode()
    return struct.pack(
        "<dBQBQQH", time, ROLE_CODES[src.role], src.index, ROLE_CODES[dst.role], dst.index, nbytes, len(name)
    ) + name


def test_both_fingerprints_are_the_documented_hashes_of_every_row_whenever_they_are_read() -> None:
    deliveries = _deliveries()
    ledger = Ledger()
    content, structure = xxhash.xxh3_128(), xxhash.xxh3_128()
    for number, (time, src, dst, kind, data) in enumerate(deliveries):
        ledger.record_delivered(time, src, dst, kind, data)
        content.update(_content_row(time, data))
        structure.update(_structure_row(time, src, dst, kind, len(data)))
        if number % 1013 == 0:
            assert ledger.transcript_xxh3_128 == content.hexdigest()
            assert ledger.structure_xxh3_128 == structure.hexdigest()
    assert ledger.transcript_xxh3_128 == content.hexdigest()
    assert ledger.structure_xxh3_128 == structure.hexdigest()


def test_a_ledger_read_only_at_the_end_gives_the_hashes_of_one_read_at_every_delivery() -> None:
    read_once, read_always = Ledger(), Ledger()
    for time, src, dst, kind, data in _deliveries():
        read_once.record_delivered(time, src, dst, kind, data)
        read_always.record_delivered(time, src, dst, kind, data)
        read_always.export()
    assert read_once.export()["digest"] == read_always.export()["digest"]
    assert read_once.export()["structure_digest"] == read_always.export()["structure_digest"]


def test_a_fold_restarts_from_the_digest_of_every_row_before_it() -> None:
    ledger = Ledger()
    deliveries = _deliveries()[:10]
    for time, src, dst, kind, data in deliveries:
        ledger.record_delivered(time, src, dst, kind, data)
    ledger.fold()
    digest = xxhash.xxh3_128(b"".join(_content_row(time, data) for time, _, _, _, data in deliveries)).digest()
    assert ledger.transcript_xxh3_128 == xxhash.xxh3_128(digest).hexdigest()
    restored = Ledger()
    restored.restore_state(ledger.checkpoint_state())
    assert restored.transcript_xxh3_128 == ledger.transcript_xxh3_128
    assert restored.structure_xxh3_128 == ledger.structure_xxh3_128


def test_the_inlined_counters_count_the_set_up_and_a_round_by_role_and_party() -> None:
    ledger = Ledger()
    ledger.record_sent(SERVER, "k", 10)
    ledger.record_delivered(0.1, SERVER, USERS[0], "k", bytes(10))
    ledger.record_sent(USERS[1], "k", 7)  # a set-up message still in flight when round 1 begins
    ledger.begin_round(1, 3)
    ledger.record_delivered(0.2, USERS[1], SERVER, "k", bytes(7), sent_round=0)
    ledger.record_sent(USERS[2], "k", 5)
    ledger.record_delivered(0.3, USERS[2], SERVER, "k", bytes(5))
    # sent_bytes, recv_bytes, sent_msgs, recv_msgs, dropped_msgs
    assert ledger.rounds_by_role() == [
        {"round": 0, "roles": {
            "server": dict(zip(("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"), (10, 7, 1, 1, 0))),
            "user": dict(zip(("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"), (7, 10, 1, 1, 0))),
        }},
        {"round": 1, "roles": {
            "server": dict(zip(("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"), (0, 5, 0, 1, 0))),
            "user": dict(zip(("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs"), (5, 0, 1, 0, 0))),
        }},
    ]
    assert ledger.setup_party(SERVER) == {"sent_bytes": 10, "recv_bytes": 7, "sent_msgs": 1, "recv_msgs": 1, "dropped_msgs": 0}
    assert ledger.setup_party(USERS[1]) == {"sent_bytes": 7, "recv_bytes": 0, "sent_msgs": 1, "recv_msgs": 0, "dropped_msgs": 0}
    assert ledger.setup_party(USERS[2]) == {"sent_bytes": 0, "recv_bytes": 0, "sent_msgs": 0, "recv_msgs": 0, "dropped_msgs": 0}
    assert ledger.party(SERVER) == {"sent_bytes": 10, "recv_bytes": 12, "sent_msgs": 1, "recv_msgs": 2, "dropped_msgs": 0}


def test_each_fingerprint_read_on_its_own_covers_every_row_held_before_it() -> None:
    """The rows are held and hashed in batches: reading one fingerprint alone must still see them all."""
    deliveries = _deliveries()
    content_only, structure_only = Ledger(), Ledger()
    content, structure = xxhash.xxh3_128(), xxhash.xxh3_128()
    for number, (time, src, dst, kind, data) in enumerate(deliveries):
        content_only.record_delivered(time, src, dst, kind, data)
        structure_only.record_delivered(time, src, dst, kind, data)
        content.update(_content_row(time, data))
        structure.update(_structure_row(time, src, dst, kind, len(data)))
        if number % 7 == 0:
            assert structure_only.structure_xxh3_128 == structure.hexdigest()
            assert content_only.transcript_xxh3_128 == content.hexdigest()
