"""The per-round, per-role counters a send or a delivery adds to are held per role (`Ledger._slot`) and
added to the round's table at the round's end and before every read, save or export (issue 32). Every
count must land once, in the round the message was sent in: checked against counts made by hand over a
seeded mix of sends, deliveries (some in a later round than their send), drops, set-up traffic, reads
mid-round, round boundaries, and checkpoints restored into a fresh ledger."""

from __future__ import annotations

import random

from fedrecsim.network.ledger import COUNTER_NAMES, DropReason, Ledger
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role

PARTIES = [SERVER, THIRD_PARTY, *(Party(Role.USER, index) for index in range(6))]
SENT_BYTES, RECV_BYTES, SENT_MSGS, RECV_MSGS, DROPPED_MSGS = range(5)


class _ByHand:
    """The rounds-by-role table, counted one message at a time."""

    def __init__(self) -> None:
        self.rounds: dict[int, dict[str, list[int]]] = {0: {}}
        self.round = 0

    def add(self, round_index: int, party: Party, counter: int, amount: int) -> None:
        roles = self.rounds.setdefault(round_index, {})
        roles.setdefault(party.role.value, [0, 0, 0, 0, 0])[counter] += amount

    def table(self) -> list[dict[str, object]]:
        return [
            {"round": index, "roles": {role: dict(zip(COUNTER_NAMES, counts)) for role, counts in sorted(roles.items())}}
            for index, roles in sorted(self.rounds.items())
        ]


def _replay(seed: int, reads: bool, checkpoints: bool) -> tuple[Ledger, _ByHand]:
    """600 events of a seeded run on a ledger (read and restored from checkpoints as asked) and by hand."""
    draw = random.Random(seed)
    ledger, hand = Ledger(), _ByHand()
    ledger.begin_round(0, len(PARTIES))  # the set-up, begun as `Population` begins it
    in_flight: list[tuple[Party, Party, int, int]] = []
    time = 0.0
    for step in range(600):
        time += 0.001
        event = draw.random()
        if event < 0.4:
            src, dst = draw.sample(PARTIES, 2)
            nbytes = draw.randrange(1, 500)
            ledger.record_sent(src, "k", nbytes)
            hand.add(hand.round, src, SENT_BYTES, nbytes)
            hand.add(hand.round, src, SENT_MSGS, 1)
            in_flight.append((src, dst, nbytes, hand.round))
        elif event < 0.8 and in_flight:
            src, dst, nbytes, sent_round = in_flight.pop(draw.randrange(len(in_flight)))
            ledger.record_delivered(time, src, dst, "k", bytes(nbytes), 0, sent_round)
            hand.add(sent_round, dst, RECV_BYTES, nbytes)
            hand.add(sent_round, dst, RECV_MSGS, 1)
        elif event < 0.85 and in_flight:
            src, dst, nbytes, sent_round = in_flight.pop(draw.randrange(len(in_flight)))
            ledger.record_dropped(time, src, dst, "k", nbytes, DropReason.LOST, sent_round)
            hand.add(sent_round, src, DROPPED_MSGS, 1)
        elif event < 0.9:
            hand.round += 1
            hand.rounds.setdefault(hand.round, {})
            ledger.begin_round(hand.round, len(PARTIES))
            if checkpoints:
                ledger.fold()
                restored = Ledger()
                restored.restore_state(ledger.checkpoint_state())
                ledger = restored
        elif reads:
            assert ledger.rounds_by_role() == hand.table(), f"step {step}"
    return ledger, hand


def test_every_count_lands_once_in_its_round_read_only_at_the_end() -> None:
    for seed in range(3):
        ledger, hand = _replay(seed, reads=False, checkpoints=False)
        assert ledger.rounds_by_role() == hand.table()


def test_reads_mid_round_neither_lose_nor_repeat_a_count() -> None:
    for seed in range(3):
        ledger, hand = _replay(seed, reads=True, checkpoints=False)
        assert ledger.rounds_by_role() == hand.table()
        assert ledger.rounds_by_role() == hand.table()  # a second read adds nothing


def test_a_ledger_restored_at_every_round_boundary_counts_as_one_never_saved() -> None:
    for seed in range(3):
        restored, hand = _replay(seed, reads=True, checkpoints=True)
        kept, _ = _replay(seed, reads=False, checkpoints=False)
        assert restored.rounds_by_role() == hand.table()
        assert restored.summary() == kept.summary()


def test_the_per_round_totals_and_the_export_are_the_roles_sums() -> None:
    ledger, hand = _replay(7, reads=False, checkpoints=False)
    exported = ledger.export()["rounds"]
    for index, roles in hand.rounds.items():
        sent = [sum(counts[SENT_BYTES] for counts in roles.values()), sum(counts[SENT_MSGS] for counts in roles.values())]
        assert exported[index] == sent


def test_a_checkpoint_taken_mid_round_keeps_the_rounds_counts_so_far() -> None:
    ledger = Ledger()
    ledger.begin_round(1, 2)
    ledger.record_sent(Party(Role.USER, 0), "k", 11)
    ledger.record_delivered(0.1, Party(Role.USER, 0), SERVER, "k", bytes(11))
    ledger.fold()
    restored = Ledger()
    restored.restore_state(ledger.checkpoint_state())
    restored.record_sent(Party(Role.USER, 0), "k", 5)
    assert restored.rounds_by_role() == [{"round": 1, "roles": {
        "server": dict(zip(COUNTER_NAMES, (0, 11, 0, 1, 0))), "user": dict(zip(COUNTER_NAMES, (16, 0, 2, 0, 0))),
    }}]
    assert restored.party(Party(Role.USER, 0)) == dict(zip(COUNTER_NAMES, (16, 0, 2, 0, 0)))


def test_a_ledger_that_counted_before_it_is_restored_counts_into_the_restored_counters() -> None:
    """The run that resumes has counted its own set-up before it restores: nothing it counts after the
    restore may go to the counters it had before."""
    user = Party(Role.USER, 0)
    saved = Ledger()
    saved.begin_round(1, 2)
    saved.record_sent(user, "k", 11)
    saved.fold()
    resuming = Ledger()
    resuming.record_sent(user, "k", 99)
    resuming.begin_round(1, 2)
    resuming.record_sent(user, "k", 99)
    resuming.restore_state(saved.checkpoint_state())
    resuming.record_sent(user, "k", 5)
    resuming.record_delivered(0.2, user, SERVER, "k", bytes(5))
    assert resuming.party(user) == dict(zip(COUNTER_NAMES, (16, 0, 2, 0, 0)))
    assert resuming.party(SERVER) == dict(zip(COUNTER_NAMES, (0, 5, 0, 1, 0)))
    assert resuming.rounds_by_role() == [{"round": 1, "roles": {
        "server": dict(zip(COUNTER_NAMES, (0, 5, 0, 1, 0))), "user": dict(zip(COUNTER_NAMES, (16, 0, 2, 0, 0))),
    }}]


def test_the_kinds_counters_read_mid_round_hold_every_send_so_far() -> None:
    """What a role sent of a kind is pending too (`Ledger._sent_slot`): the kinds' counters, read by the
    summary and the export before the round ends, already hold every send, and a second read adds nothing."""
    draw = random.Random(11)
    ledger = Ledger()
    ledger.begin_round(1, len(PARTIES))
    by_hand: dict[str, list[int]] = {}
    for _ in range(300):
        src, kind, nbytes = draw.choice(PARTIES), draw.choice(("a", "b", "c")), draw.randrange(1, 500)
        ledger.record_sent(src, kind, nbytes)
        counts = by_hand.setdefault(kind, [0, 0])
        counts[0] += 1
        counts[1] += nbytes
        if draw.random() < 0.05:
            assert ledger.export()["kinds"] == {kind: counts for kind, counts in by_hand.items()}
            ledger.record_sent(src, kind, nbytes)
            counts[0] += 1
            counts[1] += nbytes
            assert ledger.summary()["kinds"] == expected_after(by_hand)
            assert ledger.summary()["kinds"] == expected_after(by_hand)


def expected_after(by_hand: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    return {kind: {"msgs": msgs, "bytes": nbytes} for kind, (msgs, nbytes) in sorted(by_hand.items())}
