"""The ledger at a round's end (issue 18, checkpoints): the folded transcript hash, recomputed by hand, and
a ledger saved there and restored carrying on as if never saved."""

from __future__ import annotations

import pickle
import struct

import pytest
import xxhash

from fedrecsim.network.ledger import Ledger
from fedrecsim.network.party import SERVER, Party, Role

ALICE = Party(Role.USER, 0)


def _row(time: float, data: bytes) -> bytes:
    return struct.pack("<dQ", time, len(data)) + data


def test_a_fold_restarts_the_hash_from_its_digest() -> None:
    ledger = Ledger()
    ledger.record_delivered(0.5, ALICE, SERVER, "k", b"first")
    ledger.record_delivered(1.0, ALICE, SERVER, "k", b"second")
    ledger.fold()
    ledger.record_delivered(2.0, ALICE, SERVER, "k", b"third")
    before = xxhash.xxh3_128(_row(0.5, b"first") + _row(1.0, b"second")).digest()
    assert ledger.transcript_xxh3_128 == xxhash.xxh3_128(before + _row(2.0, b"third")).hexdigest()
    ledger.fold()
    ledger.fold()
    twice = xxhash.xxh3_128(xxhash.xxh3_128(before + _row(2.0, b"third")).digest()).digest()
    assert ledger.transcript_xxh3_128 == xxhash.xxh3_128(twice).hexdigest()


def test_a_ledger_saved_at_a_fold_and_restored_carries_on_as_if_never_saved() -> None:
    kept, saved = Ledger(record_transcript=True), Ledger(record_transcript=True)
    for ledger in (kept, saved):
        ledger.begin_round(1, 2)
        ledger.record_sent(ALICE, "k", 5)
        ledger.record_delivered(0.5, ALICE, SERVER, "k", b"hello")
        ledger.fold()
    restored = Ledger()
    restored.restore_state(pickle.loads(pickle.dumps(saved.checkpoint_state())))
    for ledger in (kept, restored):
        ledger.record_sent(ALICE, "k", 3)
        ledger.record_delivered(1.5, ALICE, SERVER, "k", b"bye")
    assert restored.transcript_xxh3_128 == kept.transcript_xxh3_128
    assert restored.summary() == kept.summary()
    assert restored.transcript == kept.transcript
    assert restored.export()["rounds"] == kept.export()["rounds"]  # round 1's counters carried on


def test_a_ledger_is_saved_only_right_after_a_fold() -> None:
    ledger = Ledger()
    ledger.checkpoint_state()  # nothing hashed yet
    ledger.record_delivered(0.5, ALICE, SERVER, "k", b"x")
    with pytest.raises(RuntimeError, match=r"^a ledger is saved only right after fold\(\): messages were hashed since$"):
        ledger.checkpoint_state()
    ledger.fold()
    ledger.checkpoint_state()
