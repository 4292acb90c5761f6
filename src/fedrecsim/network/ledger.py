"""Byte and message accounting, and the transcript hash.

Every message the network accepts is counted exactly once as sent (by its sender) and, later, exactly
once as either received (by its destination) or dropped (on its sender's account: lost on the link, sent
on a link a partition took down, addressed to an offline party, or still in flight when the run ended).
A link that duplicates a message makes one more delivery, counted once as duplicated (on the sender's
account) and then like any message as received or dropped. So at every quiescent point::

    sum(sent_msgs) + duplicated == sum(recv_msgs) + sum(dropped_msgs)

and byte counts are the lengths of the encoded messages, nothing estimated.

Rounds. A message's *round* is the round the run was in when it was sent: the last round begun
(`begin_round`, called by `Population.begin_round` or a protocol's own round loop) before the send, and
round 0 -- the *set-up* -- before the first round begins (the initial joins, a protocol's set-up such as
dpmf's noise pre-sharing). Messages sent after round r's work, between rounds (churn's joins and
leaves, crash recoveries), belong to round r. The message is counted in its round on every account it
touches: sent by its sender, and received or dropped later -- even after a later round began -- in the
round it was sent in. So the per-round, per-role counters (`rounds_by_role`) add up, round by round, to
the totals::

    sum over rounds r of rounds_by_role[r][role][counter] == roles[role][counter]

for every role and counter, and ``rounds_by_role[0]`` is the set-up apart from the rounds. A ledger
combined from the processes of a TCP run (`combined`) cannot tell the rounds of a receipt (a process
only knows its own rounds), so it keeps no per-round counters (`rounds_attributed` is False).

The *closing* phase is the mirror of the set-up: what a protocol sends after its last round's work is
done -- a final broadcast of what the rounds computed, such as PriviRec's filters -- once it says so
(`begin_closing`, after round R). The phase has the round index R + 1 (the rounds' tables, the messages'
rounds, transcript.csv's round column) and is marked ``"phase": "closing"`` in `rounds_by_role` and
``per_round``; no round begins after it. So the invariant above reads set-up + rounds 1..R + closing ==
the totals, and a mean over rounds 1..R is the same for a run of one round and of ten. Each party's
closing counters (`closing_parties`) are counted as the set-up's are, from the other end: everything the
party counts from `begin_closing` on, less the late receipts and drops of earlier rounds.

A received message may still be *rejected* by its receiver -- bytes that do not decode, a kind its role
never receives, a second message for the same (sender, round, kind), a value its checks refuse. A
rejection does not change the counters above (the bytes did arrive); it is counted by reason and the
first `MAX_REJECTIONS` are kept with the `ProtocolViolation` text that says what was wrong.

The transcript hash is XXH3-128 over ``(deliver time, length, bytes)`` of every delivered message in
delivery order, where the bytes are the encoded envelope and so name src, dst and kind. Delivery order
is itself deterministic (delay-line ties break by sender, then receiver, then the message's sequence
number on its link; `fedrecsim.network.network`), so the hash identifies a run bit for bit. A broadcast
copy with a shared body (`wire.Broadcast`) enters as its own envelope head and the body's XXH3-128
digest, computed once for all its copies: hashing each copy's bytes again would cost a PriviRec run at
Gowalla's size terabytes of hashing.

The rows of both fingerprints are held as parts (`_held`, `_structure_held`) and fed to their hashers
joined, at most `_HELD_PARTS` parts at a time, and always before anything reads or folds a hash: XXH3
streams, so the digests are those of the rows fed one by one, and a message costs its parts rather than
two hasher calls. A message larger than `_JOINED_MESSAGE_BYTES` goes to the hasher after its prefix,
never copied into a join.

A protocol that can resume from checkpoints (`fedrecsim.checkpoint`) folds the hash at the end of every
round (`fold`): the hasher starts again from the digest so far, so the fingerprint is
``XXH3(digest_before || rows since)``, round by round. Folding is part of the definition -- it happens
whether or not a checkpoint is saved -- and it makes the hash's state at a round's end 16 bytes a
checkpoint can hold (a running XXH3 state cannot be saved).

The *structure* fingerprint (`structure_xxh3_128`) is XXH3-128 over ``(deliver time, src, dst, kind,
length)`` of the same deliveries in the same order -- who sent what kind of message of what size to whom,
arriving when -- without the bytes. The content hash moves with the last bit of any float a message
carries, and those bits depend on the machine (numpy's BLAS kernel and SIMD paths: README, "Determinism");
the structure does not where the protocol's messages have sizes and times that no float decides
(docs/architecture.md, "Determinism", says where that holds). It folds with the content hash.

Why XXH3-128 and not SHA-256: the hash is a fingerprint for reproducibility, never a security
primitive, and it covers every delivered byte -- each copy of a broadcast, every gradient. XXH3 is a
non-cryptographic 128-bit hash that passes SMHasher; on the benchmark machine it hashes ~40 GB/s against
SHA-256's ~0.4-2 GB/s, which made SHA-256 about a third of a FedAvg-shaped run. Its name is part of the
result key (`HASH_NAME`, ``transcript_xxh3_128``), so a fingerprint is never compared with one of another
hash.
"""

from __future__ import annotations

import csv
import enum
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from .party import Party, Role
from .wire import Broadcast

#: The transcript hash; the result key is ``transcript_<HASH_NAME>``.
HASH_NAME = "xxh3_128"

_SENT_BYTES, _RECV_BYTES, _SENT_MSGS, _RECV_MSGS, _DROPPED_MSGS = range(5)
# A delivery's content row starts with ``struct.pack("<dQ", time, length)``; its row in the structure
# fingerprint is ``struct.pack("<dBQBQQH", time, src role code, src index, dst role code, dst index, length,
# the kind's length)`` then the kind. `record_delivered` holds both as parts: the packed time and length,
# each end's `_party_row` (the link's part: ``<BQBQ`` is ``<BQ`` twice), the kind's `_kind_row`.
_TIME = struct.Struct("<d")
_LENGTH = struct.Struct("<Q")
#: `record_delivered` holds a message of at most this many bytes as a part of the joined rows; a larger
#: one is hashed on its own, after the rows held before it.
_JOINED_MESSAGE_BYTES = 4096
#: How many parts of content rows the ledger holds before it hashes them: 128 messages, whose joined rows
#: (~40 KB for W1's) stay in the cache between the join and the hash -- 1,000 at a time measured slower.
_HELD_PARTS = 384
#: What `Ledger.checkpoint_state` leaves out: the hashers (saved as the digest folded from) and the rows
#: held for them (none right after a fold) with the last delivery time packed, and the roles' pending
#: counters (zero once folded) with the parties' slots to them (`Ledger._slot`: a restored ledger's
#: counters are new lists, so the slots start again).
_NOT_SAVED = frozenset(
    ("_hash", "_structure", "_held", "_structure_held", "_held_time", "_held_at", "_pending", "_slots",
     "_sent_pending", "_sent_slots")
)
_ZEROS = (0, 0, 0, 0, 0)
_COUNTER_NAMES = ("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs", "dropped_msgs")
#: A party's, role's or round's counters, in the order of ledger.csv's columns.
COUNTER_NAMES = _COUNTER_NAMES
#: The ``phase`` of the closing phase's entry in `Ledger.rounds_by_role` and ``per_round`` (module
#: docstring); the set-up's and the rounds' entries have no ``phase``.
CLOSING = "closing"


class DropReason(enum.StrEnum):
    """Why a message that was sent never arrived."""

    LOST = "lost"
    OFFLINE = "offline"
    UNFINISHED = "unfinished"
    PARTITIONED = "partitioned"


class RejectReason(enum.StrEnum):
    """Why a receiver refused a message that arrived."""

    MALFORMED = "malformed"
    """The bytes do not decode to a valid message (`WireError`)."""
    UNEXPECTED = "unexpected"
    """A kind the receiver's role never receives, or a reply from a party that was not asked."""
    DUPLICATE = "duplicate"
    """A second message for the same (sender, round, kind): only the first counts."""
    INVALID = "invalid"
    """Decoded, but the receiver's checks refuse it (a shape, a range)."""


#: How many rejections the ledger keeps in full (each is also counted by reason).
MAX_REJECTIONS = 100


@dataclass(frozen=True, slots=True)
class Rejection:
    """One message a receiver refused: when, who sent it to whom, its kind, why, and the violation's text."""

    time: float
    src: Party
    dst: Party
    kind: str
    reason: RejectReason
    problem: str


@dataclass(frozen=True, slots=True)
class TranscriptRow:
    """One message's fate: delivered at ``time`` or dropped (``status`` names the reason)."""

    time: float
    src: Party
    dst: Party
    kind: str
    nbytes: int
    status: str
    round: int = 0
    """The message's round (module docstring): the round it was sent in. A rejection's row has the round
    the run was in when the receiver refused it."""


class Ledger:
    """Counters per party, per message kind and per round; optionally the full transcript.

    Args:
        record_transcript: keep one `TranscriptRow` per message (memory grows with the run).
    """

    def __init__(self, record_transcript: bool = False) -> None:
        self._parties: dict[Party, list[int]] = {}
        self._kinds: dict[str, list[int]] = {}
        # Per round, bytes and messages sent: kept only by a combined ledger (`combined`); an attributed
        # one derives them from its per-round, per-role counters (`_round_totals`).
        self._rounds: dict[int, list[int]] = {}
        self._online: dict[int, int] = {}
        self._dropped_by_reason: dict[DropReason, int] = dict.fromkeys(DropReason, 0)
        self._rejected_by_reason: dict[RejectReason, int] = dict.fromkeys(RejectReason, 0)
        self.rejections: list[Rejection] = []
        self.duplicated = 0
        self._withheld: dict[Party, dict[str, int]] = {}
        self._hash = xxhash.xxh3_128()
        self._folded_at = b""
        self._structure = xxhash.xxh3_128()
        self._structure_folded_at = b""
        self._start_held()
        self.round = 0
        self.transcript: list[TranscriptRow] | None = [] if record_transcript else None
        self._start_round_roles()

    def _counters(self, party: Party) -> list[int]:
        counters = self._parties.get(party)
        if counters is None:
            counters = self._parties[party] = [0, 0, 0, 0, 0]
        return counters

    def begin_round(self, round_index: int, online: int) -> None:
        """Attribute subsequent sends to ``round_index``, which starts with ``online`` parties online.

        Raises:
            RuntimeError: the closing phase began (`begin_closing`): no round follows it.
        """
        if self._closing is not None:
            raise RuntimeError(f"round {round_index} begins after the closing phase (round {self._closing.round})")
        if round_index and self._setup_parties is None:
            # The set-up ends: its counters part from the parties' (`_start_round_roles`).
            self._setup_parties = {party: list(counters) for party, counters in self._parties.items()}
        self.round = round_index
        self._online[round_index] = online
        self._fold_pending()
        self._round_roles = self._by_round.setdefault(round_index, {})

    def _start_slots(self) -> None:
        """Per role, its counters in the current round not yet added to the round's table, and per role and
        kind, ``[bytes, messages]`` its parties sent in the current round not yet added to the round's table
        nor to the kind's counters, all zero; per party and per party and kind, no slot yet (`_slot`,
        `_sent_slot`)."""
        self._pending: dict[Role, list[int]] = {}
        self._slots: dict[Party, tuple[list[int], list[int]]] = {}
        self._sent_pending: dict[tuple[Role, str], list[int]] = {}
        self._sent_slots: dict[tuple[Party, str], tuple[list[int], list[int]]] = {}

    def _slot(self, party: Party) -> tuple[list[int], list[int]]:
        """``party``'s counters and its role's pending ones (`_start_round_roles`), kept in `_slots`: what a
        send or a delivery in the current round adds to, found with one look-up."""
        pending = self._pending.get(party.role)
        if pending is None:
            pending = self._pending[party.role] = [0, 0, 0, 0, 0]
        slot = self._slots[party] = (self._counters(party), pending)
        return slot

    def _sent_slot(self, party: Party, kind: str) -> tuple[list[int], list[int]]:
        """``party``'s counters and the pending ``[bytes, messages]`` its role sent of ``kind``, kept in
        `_sent_slots`: what a send in the current round adds to, found with one look-up -- the role's and
        the kind's counters are both folded from that pair (`_fold_pending`), so a send adds to four
        counters rather than six."""
        pending = self._sent_pending.get((party.role, kind))
        if pending is None:
            pending = self._sent_pending[(party.role, kind)] = [0, 0]
        slot = self._sent_slots[(party, kind)] = (self._counters(party), pending)
        return slot

    def _fold_pending(self) -> None:
        """Add each role's pending counters to the current round's table, and what each role sent of each
        kind to that table and to the kind's counters, and zero them in place (the slots hold them): before
        the round changes and before anything reads or saves the rounds' tables or the kinds' counters."""
        for role, pending in self._pending.items():
            if any(pending):
                _add(self._round_roles.setdefault(role, [0, 0, 0, 0, 0]), pending)
                pending[:] = _ZEROS
        for (role, kind), pending in self._sent_pending.items():
            nbytes, count = pending
            if count:
                per_role = self._round_roles.setdefault(role, [0, 0, 0, 0, 0])
                per_role[_SENT_BYTES] += nbytes
                per_role[_SENT_MSGS] += count
                per_kind = self._kinds.setdefault(kind, [0, 0])
                per_kind[0] += count
                per_kind[1] += nbytes
                pending[:] = (0, 0)

    def _start_held(self) -> None:
        """No rows held: the parts of content and structure rows not yet hashed, and the time of the last
        delivery with its packed form (the deliveries of one instant share both)."""
        self._held: list[bytes] = []
        self._structure_held: list[bytes] = []
        self._held_time: float | None = None
        self._held_at = b""

    def _hash_held(self) -> None:
        """Feed the rows held so far to the two hashers (module docstring)."""
        held = self._held
        if held:
            self._hash.update(b"".join(held))
            held.clear()
        held = self._structure_held
        if held:
            self._structure.update(b"".join(held))
            held.clear()

    def fold(self) -> None:
        """Restart the transcript hash from its digest so far (a resumable protocol's round end)."""
        self._hash_held()
        digest = self._hash.digest()
        self._hash = xxhash.xxh3_128(digest)
        self._folded_at = digest
        self._fold_structure()

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything this ledger holds, for a checkpoint taken right after `fold` (the hash as the digest
        it was folded from).

        Raises:
            RuntimeError: a message was delivered since the last fold, so the hash's state is not saveable.
        """
        self._hash_held()
        self._fold_pending()
        if self._hash.digest() != xxhash.xxh3_128(self._folded_at).digest():
            raise RuntimeError("a ledger is saved only right after fold(): messages were hashed since")
        return {name: value for name, value in vars(self).items() if name not in _NOT_SAVED}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Become the ledger `checkpoint_state` saved (pickled whole: the current round's counters stay the
        entry of the rounds' table they were)."""
        vars(self).update(state)
        self._hash = xxhash.xxh3_128(self._folded_at)
        self._structure = xxhash.xxh3_128(self._structure_folded_at)
        self._start_held()
        self._start_slots()

    def record_sent(self, src: Party, kind: str, nbytes: int, count: int = 1) -> None:
        """``src`` sent ``count`` messages of ``kind``, ``nbytes`` bytes in all, in the current round: one
        message, or the copies of a broadcast (`Network.send_many`) counted at once -- the same counters as
        one call per copy, since every counter a send touches is its sender's, its kind's or its round's."""
        # The per-message path: `_counters` and `_count_in_round` inlined (a send is in the current round:
        # what its role sent of its kind, pending, `_sent_slot`); the round's totals are its roles'
        # (`_round_totals`).
        counters, pending = self._sent_slots.get((src, kind)) or self._sent_slot(src, kind)
        counters[_SENT_BYTES] += nbytes
        counters[_SENT_MSGS] += count
        pending[0] += nbytes
        pending[1] += count
        if not self.round and self._setup_parties is not None:
            setup = self._setup_parties.get(src)
            if setup is None:
                setup = self._setup_parties[src] = [0, 0, 0, 0, 0]
            setup[_SENT_BYTES] += nbytes
            setup[_SENT_MSGS] += count

    def record_delivered(
        self, time: float, src: Party, dst: Party, kind: str, data: bytes | Broadcast, padding: int = 0,
        sent_round: int | None = None,
    ) -> None:
        """``data`` delivered at ``time``; it counts ``padding`` bytes more than it holds (`Network.send`).
        ``sent_round``: the round it was sent in (default: the current round)."""
        nbytes = len(data) + padding
        round_index = self.round
        if sent_round is None or sent_round == round_index:
            counters, per_role = self._slots.get(dst) or self._slot(dst)
            counters[_RECV_BYTES] += nbytes
            counters[_RECV_MSGS] += 1
            per_role[_RECV_BYTES] += nbytes
            per_role[_RECV_MSGS] += 1
            if not round_index and self._setup_parties is not None:
                setup = self._setup_parties.get(dst)
                if setup is None:
                    setup = self._setup_parties[dst] = [0, 0, 0, 0, 0]
                setup[_RECV_BYTES] += nbytes
                setup[_RECV_MSGS] += 1
        else:
            counters = self._counters(dst)
            counters[_RECV_BYTES] += nbytes
            counters[_RECV_MSGS] += 1
            round_index = sent_round
            self._count_in_round(round_index, dst, _RECV_BYTES, nbytes, _RECV_MSGS)
        # The encoded envelope already names src, dst and kind; the content row's prefix adds time and
        # length. Both rows are held as parts (module docstring); a large message is hashed after the rows
        # held and its prefix rather than copied.
        if time is not self._held_time:
            self._held_time = time
            self._held_at = _TIME.pack(time)
        at = self._held_at
        length = _LENGTH.pack(nbytes)
        held = self._held
        if type(data) is Broadcast:
            held += (at, length, data.head, data.shared.digest())
        elif len(data) <= _JOINED_MESSAGE_BYTES:
            # Appended one by one: a list's append is cheaper than building a tuple to extend it with.
            held.append(at)
            held.append(length)
            held.append(data)
        else:
            held += (at, length)
            self._hash_held()
            self._hash.update(data)
        structure = self._structure_held
        structure.append(at)
        structure.append(_PARTY_ROWS.get(src) or _party_row(src))
        structure.append(_PARTY_ROWS.get(dst) or _party_row(dst))
        structure.append(length)
        structure.append(_KIND_ROWS.get(kind) or _kind_row(kind))
        if len(held) > _HELD_PARTS:
            self._hash_held()
        if self.transcript is not None:
            self.transcript.append(TranscriptRow(time, src, dst, kind, nbytes, "delivered", round_index))

    def record_dropped(
        self, time: float, src: Party, dst: Party, kind: str, nbytes: int, reason: DropReason, sent_round: int | None = None
    ) -> None:
        """A message ``src`` sent in ``sent_round`` (default: the current round) never arrived."""
        self._counters(src)[_DROPPED_MSGS] += 1
        self._dropped_by_reason[reason] += 1
        round_index = self.round if sent_round is None else sent_round
        self._count_in_round(round_index, src, None, 0, _DROPPED_MSGS)
        if self.transcript is not None:
            self.transcript.append(TranscriptRow(time, src, dst, kind, nbytes, f"dropped:{reason.value}", round_index))

    def record_duplicated(self, time: float, src: Party, dst: Party, kind: str, nbytes: int) -> None:
        """The link ``src -> dst`` delivers a message a second time (the copy is then received or dropped)."""
        self.duplicated += 1
        if self.transcript is not None:
            self.transcript.append(TranscriptRow(time, src, dst, kind, nbytes, "duplicated", self.round))

    def record_rejected(self, time: float, src: Party, dst: Party, kind: str, reason: RejectReason, problem: str) -> None:
        """``dst`` refused a message of ``kind`` from ``src`` that arrived; ``problem`` says what was wrong
        (the text of the `ProtocolViolation`: the party, what it expected and what it received)."""
        self._rejected_by_reason[reason] += 1
        if len(self.rejections) < MAX_REJECTIONS:
            self.rejections.append(Rejection(time, src, dst, kind, reason, problem))
        if self.transcript is not None:
            self.transcript.append(TranscriptRow(time, src, dst, kind, 0, f"rejected:{reason.value}", self.round))

    def record_withheld(self, party: Party, items: str, fate: str, count: int) -> None:
        """Count ``count`` ``items`` (e.g. reports) that ``party`` received and did not pass on at once:
        ``fate`` says what became of them (e.g. ``held`` for later, ``dropped``). Messages the network
        carried are counted above; this is what a relaying party did with their contents."""
        per_party = self._withheld.setdefault(party, {})
        key = f"{items} {fate}"
        per_party[key] = per_party.get(key, 0) + count

    # ------------------------------------------------------------------ rounds per role

    def _start_round_roles(self) -> None:
        """The per-round, per-role counters (module docstring, "Rounds") and each party's set-up counters.

        A send or a delivery in the current round adds to its role's *pending* counters (`_slot`), which
        `_fold_pending` adds to the round's table before the round changes and before any read or save of
        the tables: the same sums, with one look-up per message for the party and its role.

        Until the first round other than 0 begins, every message counted is a set-up message, so each
        party's set-up counters are its counters: ``_setup_parties`` is None and nothing counts them twice.
        `begin_round` copies them then; from there on the set-up's late receipts and drops count apart.
        """
        self._by_round: dict[int, dict[Role, list[int]]] = {0: {}}
        self._round_roles = self._by_round[0]
        self._start_slots()
        self._setup_parties: dict[Party, list[int]] | None = None
        self._closing: _ClosingPhase | None = None
        self.rounds_attributed = True

    def begin_closing(self, online: int) -> None:
        """Attribute subsequent sends to the closing phase (module docstring), which starts with ``online``
        parties online: the round index after every round's (the last round's + 1), marked as the closing
        phase, after which no round begins.

        Raises:
            RuntimeError: the closing phase already began.
        """
        if self._closing is not None:
            raise RuntimeError(f"the closing phase (round {self._closing.round}) began already")
        index = max(self._by_round) + 1
        self.begin_round(index, online)
        self._closing = _ClosingPhase(index, {party: list(counters) for party, counters in self._parties.items()})

    @property
    def closing_round(self) -> int | None:
        """The closing phase's round index (`begin_closing`), None before it begins."""
        return None if self._closing is None else self._closing.round

    def _count_in_round(self, round_index: int, party: Party, bytes_at: int | None, nbytes: int, msgs_at: int) -> None:
        """Add one message (and ``nbytes`` at counter ``bytes_at``) to ``party``'s role in ``round_index``,
        to ``party``'s set-up counters if that is round 0, and to its late counters if the closing phase
        began and that is an earlier round (`closing_parties` leaves them out)."""
        roles = self._round_roles if round_index == self.round else self._by_round.setdefault(round_index, {})
        counters = roles.get(party.role)
        if counters is None:
            counters = roles[party.role] = [0, 0, 0, 0, 0]
        counters[msgs_at] += 1
        if bytes_at is not None:
            counters[bytes_at] += nbytes
        if round_index == 0 and self._setup_parties is not None:
            _count_one(self._setup_parties, party, bytes_at, nbytes, msgs_at)
        closing = self._closing
        if closing is not None and round_index != closing.round:
            _count_one(closing.late, party, bytes_at, nbytes, msgs_at)

    def _round_totals(self) -> dict[int, list[int]]:
        """Per round, ``[bytes, messages]`` sent in it: the sums of its roles' sent counters (a message is
        sent by one party of one role, in the round current then), or a combined ledger's sums."""
        if not self.rounds_attributed:
            return self._rounds
        self._fold_pending()
        return {
            index: [sum(counters[_SENT_BYTES] for counters in roles.values()),
                    sum(counters[_SENT_MSGS] for counters in roles.values())]
            for index, roles in self._by_round.items()
        }

    def rounds_by_role(self) -> list[dict[str, Any]]:
        """``[{"round": r, "roles": {role: {counter: int}}}, ...]`` for every round with traffic or begun,
        round 0 (the set-up) first, the closing phase last with ``"phase": "closing"`` after its round
        (`begin_closing`); empty when the rounds are not attributed (`rounds_attributed`)."""
        if not self.rounds_attributed:
            return []
        self._fold_pending()
        begun = set(self._online)
        return [
            {
                **self._phase(index),
                "roles": {
                    role.value: dict(zip(_COUNTER_NAMES, counters))
                    for role, counters in sorted(roles.items(), key=lambda item: item[0].value)
                },
            }
            for index, roles in sorted(self._by_round.items())
            if roles or index in begun
        ]

    def _phase(self, index: int) -> dict[str, Any]:
        """How an entry of `rounds_by_role` or ``per_round`` starts: its round, and the closing phase's mark."""
        return {"round": index, "phase": CLOSING} if index == self.closing_round else {"round": index}

    def setup_party(self, party: Party) -> dict[str, int]:
        """The five counters of ``party`` in the set-up, round 0 (zeros if it had no set-up traffic)."""
        setup = self._parties if self._setup_parties is None else self._setup_parties
        return dict(zip(_COUNTER_NAMES, setup.get(party, [0, 0, 0, 0, 0])))

    def setup_parties(self) -> dict[str, dict[str, int]]:
        """Each party with set-up traffic (round 0) and its five counters there, in party order."""
        if not self.rounds_attributed:
            return {}
        setup = self._parties if self._setup_parties is None else self._setup_parties
        return {str(party): self.setup_party(party) for party in sorted(setup)}

    def closing_parties(self) -> dict[str, dict[str, int]]:
        """Each party with traffic in the closing phase and its five counters there, in party order: what it
        counted since `begin_closing`, less the late receipts and drops of earlier rounds (module docstring);
        empty before the phase begins and when the rounds are not attributed."""
        if self._closing is None or not self.rounds_attributed:
            return {}
        before, late = self._closing.before, self._closing.late
        closing = {}
        for party in sorted(self._parties):
            counters = [
                now - earlier - later
                for now, earlier, later in zip(self._parties[party], before.get(party, _ZEROS), late.get(party, _ZEROS))
            ]
            if any(counters):
                closing[str(party)] = dict(zip(_COUNTER_NAMES, counters))
        return closing

    # ------------------------------------------------------------------ across processes

    def export(self) -> dict[str, Any]:
        """The counters as plain, picklable values, and the transcript's digest so far (`combined`)."""
        self._fold_pending()
        return {
            "parties": {party: list(counters) for party, counters in self._parties.items()},
            "kinds": {kind: list(counts) for kind, counts in self._kinds.items()},
            "rounds": {index: list(counts) for index, counts in self._round_totals().items()},
            "online": dict(self._online),
            "closing": self.closing_round,
            "dropped": dict(self._dropped_by_reason),
            "rejected": dict(self._rejected_by_reason),
            "rejections": list(self.rejections),
            "duplicated": self.duplicated,
            "withheld": {party: dict(counts) for party, counts in self._withheld.items()},
            "digest": self._hash_after_held().digest(),
            "structure_digest": self._structure.digest(),
        }

    @classmethod
    def combined(cls, exports: list[dict[str, Any]]) -> Ledger:
        """One ledger whose counters are the sums of those of ``exports`` (`export`): the ledgers of the
        processes of a run over TCP, each counting its own parties (`fedrecsim.launcher`). Its transcript
        hash is XXH3-128 over their digests in the order given: a fingerprint of that run, not a
        reproducible one -- delivery times on the real clock differ from run to run."""
        ledger = cls()
        for part in exports:
            for party, counters in part["parties"].items():
                _add(ledger._counters(party), counters)
            for kind, counts in part["kinds"].items():
                _add(ledger._kinds.setdefault(kind, [0, 0]), counts)
            for index, counts in part["rounds"].items():
                _add(ledger._rounds.setdefault(index, [0, 0]), counts)
            for index, online in part["online"].items():
                ledger._online[index] = ledger._online.get(index, 0) + online
            if part["closing"] is not None:
                ledger._closing = _ClosingPhase(part["closing"], {})
            for reason, count in part["dropped"].items():
                ledger._dropped_by_reason[reason] += count
            for reason, count in part["rejected"].items():
                ledger._rejected_by_reason[reason] += count
            ledger.rejections.extend(part["rejections"][:MAX_REJECTIONS - len(ledger.rejections)])
            ledger.duplicated += part["duplicated"]
            for party, counts in part["withheld"].items():
                for key, count in counts.items():
                    per_party = ledger._withheld.setdefault(party, {})
                    per_party[key] = per_party.get(key, 0) + count
            ledger._hash.update(part["digest"])
            ledger._structure.update(part["structure_digest"])
        ledger.round = max(ledger._rounds, default=0)
        ledger.rounds_attributed = False
        return ledger

    # ------------------------------------------------------------------ read-outs

    def _hash_after_held(self) -> xxhash.xxh3_128:
        """The transcript's hasher, every row held fed to it."""
        self._hash_held()
        return self._hash

    @property
    def transcript_xxh3_128(self) -> str:
        """The transcript hash so far, as 32 hex digits."""
        return self._hash_after_held().hexdigest()

    # ------------------------------------------------------------------ the structure fingerprint

    def _fold_structure(self) -> None:
        digest = self._structure.digest()
        self._structure = xxhash.xxh3_128(digest)
        self._structure_folded_at = digest

    @property
    def structure_xxh3_128(self) -> str:
        """The structure fingerprint so far, as 32 hex digits (module docstring)."""
        self._hash_held()
        return self._structure.hexdigest()

    def party(self, party: Party) -> dict[str, int]:
        """The five counters of one party (zeros for a party that never sent nor received)."""
        return dict(zip(_COUNTER_NAMES, self._parties.get(party, [0, 0, 0, 0, 0])))

    def bytes_of(self, party: Party) -> tuple[int, int]:
        """``(recv_bytes, sent_bytes)`` of one party, as `party` counts them (zeros for a party that never sent
        nor received), without building its dict: for a protocol that reads them for every served user."""
        counters = self._parties.get(party)
        return (0, 0) if counters is None else (counters[_RECV_BYTES], counters[_SENT_BYTES])

    def parties(self) -> list[Party]:
        return sorted(self._parties)

    @property
    def dropped_by_reason(self) -> dict[str, int]:
        return {reason.value: count for reason, count in self._dropped_by_reason.items()}

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        return {reason.value: count for reason, count in self._rejected_by_reason.items()}

    def faults(self) -> dict[str, Any]:
        """The ``faults`` part of the summary: messages dropped by reason, duplicated, and rejected by
        reason, with the first `MAX_REJECTIONS` rejections in full."""
        return {
            "dropped": self.dropped_by_reason,
            "duplicated": self.duplicated,
            "rejected": self.rejected_by_reason,
            "rejections": [
                {"time_s": row.time, "src": str(row.src), "dst": str(row.dst), "kind": row.kind,
                 "reason": row.reason.value, "problem": row.problem}
                for row in self.rejections
            ],
        }

    def totals(self) -> dict[str, int]:
        totals = [0, 0, 0, 0, 0]
        for counters in self._parties.values():
            for position, value in enumerate(counters):
                totals[position] += value
        return dict(zip(_COUNTER_NAMES, totals))

    def summary(self) -> dict[str, Any]:
        """The ``ledger`` section of result.json (see docs/architecture.md, "Results"), keys in a stable order."""
        self._fold_pending()
        parties = {str(party): self.party(party) for party in self.parties()}
        roles: dict[str, dict[str, int]] = {}
        for party in self.parties():
            role = roles.setdefault(party.role.value, {name: 0 for name in (*_COUNTER_NAMES, "parties")})
            for name, value in zip(_COUNTER_NAMES, self._parties[party]):
                role[name] += value
            role["parties"] += 1
        kinds = {kind: {"msgs": counts[0], "bytes": counts[1]} for kind, counts in sorted(self._kinds.items())}
        per_round = [
            {**self._phase(index), "bytes": counts[0], "msgs": counts[1], "online": self._online.get(index, 0)}
            for index, counts in sorted(self._round_totals().items())
            if counts[1] or index in self._online
        ]
        withheld = {str(party): dict(sorted(counts.items())) for party, counts in sorted(self._withheld.items())}
        return {
            "parties": parties,
            "roles": dict(sorted(roles.items())),
            "kinds": kinds,
            "per_round": per_round,
            "rounds_by_role": self.rounds_by_role(),
            "setup_parties": self.setup_parties(),
            "closing_parties": self.closing_parties(),
            "withheld": withheld,
            "faults": self.faults(),
        }

    def write_csv(self, path: Path) -> None:
        """Per-party counters as CSV: ``party, role, sent_bytes, recv_bytes, sent_msgs, recv_msgs, dropped_msgs``."""
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("party", "role", *_COUNTER_NAMES))
            for party in self.parties():
                writer.writerow((str(party), party.role.value, *self._parties[party]))

    def write_transcript_csv(self, path: Path) -> None:
        """The transcript as CSV (requires ``record_transcript=True``), in time order; the rows of one
        instant by sender, then receiver, each link's in the order they happened. Columns: ``time_s, src,
        dst, kind, bytes, status, round`` (`TranscriptRow`; ``round`` the round the message was sent in).

        The order within an instant is fixed here because the ledger records a message lost, dropped or
        rejected when the task that sends or takes it runs, and tasks runnable at one instant run in any
        order: sorting by link makes the file a function of the seed, as the transcript hash is."""
        if self.transcript is None:
            raise ValueError("this ledger did not record a transcript")
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("time_s", "src", "dst", "kind", "bytes", "status", "round"))
            for row in sorted(self.transcript, key=_time_and_link):
                writer.writerow((f"{row.time:.9f}", str(row.src), str(row.dst), row.kind, row.nbytes, row.status, row.round))


def _party_row(party: Party) -> bytes:
    """One end's part of a structure row: its role code and index, packed once per party."""
    row = _PARTY_ROWS.get(party)
    if row is None:
        row = _PARTY_ROW.pack(party.role.code, party.index)
        if len(_PARTY_ROWS) < _ROW_CACHE_LIMIT:
            _PARTY_ROWS[party] = row
    return row


def _kind_row(kind: str) -> bytes:
    """A kind's part of a structure row: the name's length, then the name."""
    row = _KIND_ROWS.get(kind)
    if row is None:
        name = kind.encode()
        row = _KIND_ROWS[kind] = _KIND_LENGTH.pack(len(name)) + name
    return row


_PARTY_ROW = struct.Struct("<BQ")
_KIND_LENGTH = struct.Struct("<H")
_PARTY_ROWS: dict[Party, bytes] = {}
_KIND_ROWS: dict[str, bytes] = {}
#: The parties whose rows are kept packed (W1's scale, 100,000 users, and many more).
_ROW_CACHE_LIMIT = 1 << 20


def _time_and_link(row: TranscriptRow) -> tuple[float, Party, Party]:
    return row.time, row.src, row.dst


@dataclass(slots=True)
class _ClosingPhase:
    """The closing phase once begun (`Ledger.begin_closing`): its round index, each party's counters when
    it began, and each party's late receipts and drops of earlier rounds since -- a party's counters in the
    phase are its counters now less the other two (`Ledger.closing_parties`)."""

    round: int
    before: dict[Party, list[int]]
    late: dict[Party, list[int]] = field(default_factory=dict)


def _count_one(parties: dict[Party, list[int]], party: Party, bytes_at: int | None, nbytes: int, msgs_at: int) -> None:
    """Add one message (and ``nbytes`` at counter ``bytes_at``) to ``party``'s counters in ``parties``."""
    counters = parties.get(party)
    if counters is None:
        counters = parties[party] = [0, 0, 0, 0, 0]
    counters[msgs_at] += 1
    if bytes_at is not None:
        counters[bytes_at] += nbytes


def _add(into: list[int], counts: list[int]) -> None:
    for position, count in enumerate(counts):
        into[position] += count


__all__ = ["CLOSING", "COUNTER_NAMES", "DropReason", "HASH_NAME", "Ledger", "MAX_REJECTIONS", "RejectReason", "Rejection", "TranscriptRow"]
