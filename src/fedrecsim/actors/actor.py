"""The actor base: a party with private state, its own random generator, and a mailbox.

``send``, ``recv``, ``gather`` and ``drain`` are the whole vocabulary an actor has for talking to others.
Every wait takes a virtual deadline, so no party can hang a run by leaving: a missing reply shows up as
`PartyTimeout` from ``recv`` or in the ``missing`` list of ``gather``. And no party can stop a run by what
it sends: what a receiver refuses is recorded in the ledger (``reject``), not raised.

Actors never share mutable objects: what a receiver gets is decoded from the bytes on the wire, its arrays
read-only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ..errors import PartyTimeout
from ..network.ledger import RejectReason
from ..network.network import Mailbox, Network
from ..network.party import Party, Role
from ..network.wire import Envelope

M = TypeVar("M")
_new = object.__new__


class Replies(Generic[M]):
    """What ``gather`` collected: the reply of each sender that answered in time, who did not, and whose
    reply was rejected (``validate`` or ``settle`` refused it; sorted).

    ``accepted`` lists the senders whose reply passed (sorted); ``by_party`` holds their replies -- empty
    when the gather kept none (``keep=False``). Iterating yields ``(party, message)`` of ``by_party`` in
    sorted party order, the order every aggregation must use; ``len`` counts the accepted replies.
    """

    __slots__ = ("accepted", "by_party", "missing", "rejected")

    def __init__(
        self,
        by_party: dict[Party, M],
        missing: list[Party],
        rejected: list[Party] | None = None,
        accepted: Iterable[Party] | None = None,
    ) -> None:
        self.by_party = dict(sorted(by_party.items()))
        self.accepted = sorted(accepted) if accepted is not None else list(self.by_party)
        self.missing = missing
        self.rejected = rejected if rejected is not None else []

    @classmethod
    def _in_order(cls, by_party: dict[Party, M], missing: list[Party], rejected: list[Party], accepted: list[Party]) -> Replies[M]:
        """Replies from parts already in sorted party order (``by_party``'s keys too), sorted no more."""
        replies = _new(cls)
        replies.by_party = by_party
        replies.accepted = accepted
        replies.missing = missing
        replies.rejected = rejected
        return replies

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_party.items())

    def __len__(self) -> int:
        return len(self.accepted)


class Actor:
    """One party of a protocol.

    Subclasses set ``role`` and implement their behaviour in ``run`` (or in methods a protocol's driver
    calls). ``rng`` is this party's own generator, spawned from the run seed by party id.

    A subclass may declare ``receives``, the message types its role ever receives: any other kind that
    arrives is rejected by the network (recorded in the ledger as a `ProtocolViolation`, never seen by the
    actor). Empty: any kind is delivered.
    """

    role: ClassVar[Role]
    receives: ClassVar[tuple[type, ...]] = ()
    #: The virtual time after which the actor waits no longer (its waits' deadline when it has no other).
    horizon_s: float = math.inf

    def __init__(self, party: Party, network: Network, rng: np.random.Generator) -> None:
        if party.role is not self.role:
            raise ValueError(f"{type(self).__name__} plays {self.role.value}, not {party}")
        self.party = party
        self.network = network
        self.rng = rng
        self._mailbox: Mailbox | None = None
        if self.receives:
            network.expect(party, (kind.KIND for kind in self.receives))  # type: ignore[attr-defined]

    @property
    def mailbox(self) -> Mailbox:
        """This party's mailbox (it exists once the party has been attached)."""
        mailbox = self._mailbox
        if mailbox is None:
            mailbox = self._mailbox = self.network.mailbox(self.party)
        return mailbox

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.party}>"

    @property
    def now(self) -> float:
        """The run's time (`Network.now`): compute deadlines from it, never from the loop's clock."""
        return self.network.now

    @property
    def online(self) -> bool:
        return self.network.is_attached(self.party)

    def at_rest(self) -> bool:
        """Whether this actor's task is at a resume point now (`fedrecsim.checkpoint`): a point its ``run``
        -- for a user, its ``resume`` -- reaches again from its state alone, without sending anything.

        By default: waiting for a delivery until `horizon_s`. An actor whose ``run`` is a loop that only
        ever waits at its top (for a delivery until a deadline it computes from its state) may say so for
        any wait.
        """
        return self.mailbox.waits_until == self.horizon_s

    def send(self, dst: Party, message: Any, *, padding: int = 0) -> int:
        """Put ``message`` on the wire to ``dst``; returns the encoded size in bytes (with ``padding``, the
        bytes it stands for beyond its encoding: `Network.send`)."""
        if padding:
            return self.network.send(self.party, dst, message, padding=padding)
        return self.network.send(self.party, dst, message)

    def send_many(self, dsts: Iterable[Party], message: Any) -> int:
        """Send the same ``message`` to each of ``dsts`` (encoded once); returns the total bytes."""
        return self.network.send_many(self.party, dsts, message)

    def reject(self, envelope: Envelope, reason: RejectReason, problem: str) -> None:
        """Refuse a message that arrived: recorded in the ledger with ``problem`` (what was expected and
        what came), never used. The protocol's policy decides whether the run goes on (module docstring
        of `fedrecsim.network.ledger`)."""
        self.network.ledger.record_rejected(self.now, envelope.src, self.party, envelope.kind, reason, problem)

    def drain(self, kind: type[M]) -> list[Envelope]:
        """Take every already-delivered message of ``kind`` without waiting, oldest first."""
        return self.mailbox.take_all(kind.KIND)  # type: ignore[attr-defined]

    async def recv(self, kind: type[M], *, deadline: float, sender: Party | None = None) -> Envelope:
        """Wait for one message of ``kind`` (from ``sender`` if given) until the virtual ``deadline``.

        Raises:
            PartyTimeout: nothing matching arrived by ``deadline``.
        """
        mailbox = self._mailbox or self.mailbox
        tag = kind.KIND  # type: ignore[attr-defined]
        queue = mailbox.queue(tag)
        while True:
            if queue:
                envelope = queue.popleft() if sender is None else mailbox.take(tag, sender)
                if envelope is not None:
                    return envelope
            if not await mailbox.wait(deadline):
                source = f" from {sender}" if sender is not None else ""
                raise PartyTimeout(f"{self.party} waited for {tag}{source} until t={deadline:.3f}s; none came")

    async def wait_until(self, condition: Callable[[], bool], *, deadline: float, what: str) -> None:
        """Wait until ``condition()`` holds -- checked now and after each delivery to this party -- or until
        the virtual ``deadline``. ``condition`` reads what was delivered (e.g. applies joins) itself.

        Raises:
            PartyTimeout: ``condition()`` still did not hold at ``deadline``; the message names ``what``.
        """
        mailbox = self.mailbox
        while not condition():
            if not await mailbox.wait(deadline) and not condition():
                raise PartyTimeout(f"{self.party} waited for {what} until t={deadline:.3f}s; it did not come")

    async def gather(
        self,
        kind: type[M],
        senders: Iterable[Party],
        *,
        deadline: float,
        accept: Callable[[M], bool] | None = None,
        validate: Callable[[Party, M], str | Pending | None] | None = None,
        settle: Callable[[bool], Iterable[tuple[Party, str | None]]] | None = None,
        keep: bool = True,
    ) -> Replies[M]:
        """Collect one message of ``kind`` from each of ``senders`` until all answered or ``deadline``.

        Messages of ``kind`` that ``accept`` rejects (e.g. late replies to an earlier round) are discarded.
        The rest are checked, and every refusal is recorded in the ledger as a rejection naming this party,
        what it expected and what it received; the run goes on:

        - one message counts per sender: the first; a later one (a copy the network duplicated, a second
          reply) is a duplicate, so a gather is idempotent per (sender, round, kind) when ``accept``
          selects the round;
        - a message from a party not in ``senders`` is unexpected;
        - ``validate(sender, body)`` returns None for a valid reply, or what is wrong with it: the reply is
          invalid, and its sender's one reply is spent (it is in ``rejected``, not ``missing``).

        ``validate`` may also return `PENDING`: its verdict on that reply comes later, from ``settle`` (a
        check it makes on several replies at once, e.g. while adding them to a sum). The sender's one reply
        is spent at once. ``settle(final)`` is called after each batch of messages the gather took at one
        instant, before it waits again (``final`` False), and once as it ends (``final`` True: no reply will
        come any more); it returns ``(sender, problem or None)`` for exactly the replies deferred since its
        last call. So the gather never waits with a verdict open: a reply refused late is recorded at the
        instant it was taken, and this gather's rejections in the order their messages were taken, as if
        ``validate`` had refused it at once. ``settle`` is called at the end even when nothing was deferred.

        With ``keep=False`` no reply is kept: ``validate`` is where the caller uses each one, as it arrives
        (e.g. adds it to a running sum), and the gather lets it go at once -- it holds one message at a
        time, never the round's, and the result's ``by_party`` is empty (``accepted`` names the senders).
        Messages are taken from the mailbox one at a time, oldest first.
        """
        listed = list(senders)
        expected = set(listed)
        # The expected senders whose one reply has not been taken yet.
        waiting = set(expected)
        mailbox = self.mailbox
        tag = kind.KIND  # type: ignore[attr-defined]
        queue = mailbox.queue(tag)
        replies: dict[Party, M] = {}
        accepted: set[Party] = set()
        rejected: set[Party] = set()
        # Replies whose verdict ``settle`` owes, and this batch's rejections from the first of them on, in
        # the order taken (a deferred reply's problem is None until settled).
        deferred: dict[Party, tuple[Envelope, M]] = {}
        held: list[tuple[Envelope, RejectReason, str | None]] = []

        def refuse(envelope: Envelope, reason: RejectReason, problem: str) -> None:
            if deferred:
                held.append((envelope, reason, problem))
            else:
                self.reject(envelope, reason, problem)

        def settled(final: bool) -> None:
            verdicts = dict(settle(final)) if settle is not None else {}
            if verdicts.keys() != deferred.keys():
                raise RuntimeError(
                    f"{self.party}'s settle owed verdicts on {sorted(deferred)}'s {tag}, gave them on {sorted(verdicts)}"
                )
            for envelope, reason, problem in held:
                if problem is None:
                    src = envelope.src
                    problem = verdicts[src]
                    if problem is None:
                        accepted.add(src)
                        if keep:
                            replies[src] = deferred[src][1]
                        continue
                    rejected.add(src)
                    problem = f"{self.party} expected a valid {tag} from {src}: {problem}"
                self.reject(envelope, reason, problem)
            deferred.clear()
            held.clear()

        while True:
            while queue:
                envelope = queue.popleft()
                body = envelope.body
                if accept is not None and not accept(body):
                    continue  # not for this gather (e.g. a late reply to an earlier round): discarded
                src = envelope.src
                if src not in waiting:
                    if src in expected:
                        refuse(envelope, RejectReason.DUPLICATE, f"{self.party} received {tag} twice from {src}; the first counts")
                    else:
                        problem = f"{self.party} expected {tag} from one of {len(expected)} selected parties, received it from {src}"
                        refuse(envelope, RejectReason.UNEXPECTED, problem)
                else:
                    waiting.remove(src)
                    problem = validate(src, body) if validate is not None else None
                    if problem is None:
                        accepted.add(src)
                        if keep:
                            replies[src] = body
                    elif problem is PENDING:
                        deferred[src] = (envelope, body)
                        held.append((envelope, RejectReason.INVALID, None))
                    else:
                        rejected.add(src)
                        refuse(envelope, RejectReason.INVALID, f"{self.party} expected a valid {tag} from {src}: {problem}")
            if not waiting:
                break
            if deferred:
                settled(False)
            if not await mailbox.wait(deadline):
                break
        settled(True)
        # Sorted party order from the order of ``senders``: linear when they came sorted, as a round's
        # parties do (a sender listed twice: sorted from scratch).
        order = [party for party in listed if party in accepted]
        if len(order) == len(accepted):
            order.sort()
        else:
            order = sorted(accepted)
        by_party = {party: replies[party] for party in order} if keep else {}
        return Replies._in_order(by_party, sorted(waiting), sorted(rejected), order)


class Pending:
    """The type of `PENDING`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


#: What a gather's ``validate`` returns for a reply whose verdict its ``settle`` gives later (`Actor.gather`).
PENDING = Pending()


__all__ = ["PENDING", "Actor", "Pending", "Replies"]
