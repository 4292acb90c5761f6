"""The actor base: a party with private state, its own random generator, and a mailbox.

``send``, ``recv``, ``gather`` and ``drain`` are the whole vocabulary an actor has for talking to others.
Every wait takes a virtual deadline, so no party can hang a run by leaving: a missing reply shows up as
`PartyTimeout` from ``recv`` or in the ``missing`` list of ``gather``.

Actors never share objects: what a receiver gets is a copy decoded from the bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import trio

from ..errors import PartyTimeout, ProtocolViolation
from ..network.network import Mailbox, Network
from ..network.party import Party, Role
from ..network.wire import Envelope

M = TypeVar("M")


class Replies(Generic[M]):
    """What ``gather`` collected: the reply of each sender that answered in time, and who did not.

    Iterating yields ``(party, message)`` in sorted party order, the order every aggregation must use.
    """

    __slots__ = ("by_party", "missing")

    def __init__(self, by_party: dict[Party, M], missing: list[Party]) -> None:
        self.by_party = dict(sorted(by_party.items()))
        self.missing = missing

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.by_party.items())

    def __len__(self) -> int:
        return len(self.by_party)


class Actor:
    """One party of a protocol.

    Subclasses set ``role`` and implement their behaviour in ``run`` (or in methods a protocol's driver
    calls). ``rng`` is this party's own generator, spawned from the run seed by party id.
    """

    role: ClassVar[Role]

    def __init__(self, party: Party, network: Network, rng: np.random.Generator) -> None:
        if party.role is not self.role:
            raise ValueError(f"{type(self).__name__} plays {self.role.value}, not {party}")
        self.party = party
        self.network = network
        self.rng = rng
        self._mailbox: Mailbox | None = None

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
        return trio.current_time()

    @property
    def online(self) -> bool:
        return self.network.is_attached(self.party)

    def send(self, dst: Party, message: Any) -> int:
        """Put ``message`` on the wire to ``dst``; returns the encoded size in bytes."""
        return self.network.send(self.party, dst, message)

    def send_many(self, dsts: Iterable[Party], message: Any) -> int:
        """Send the same ``message`` to each of ``dsts`` (encoded once); returns the total bytes."""
        return self.network.send_many(self.party, dsts, message)

    def drain(self, kind: type[M]) -> list[Envelope]:
        """Take every already-delivered message of ``kind`` without waiting, oldest first."""
        return self.mailbox.take_all(kind.KIND)  # type: ignore[attr-defined]

    async def recv(self, kind: type[M], *, deadline: float, sender: Party | None = None) -> Envelope:
        """Wait for one message of ``kind`` (from ``sender`` if given) until the virtual ``deadline``.

        Raises:
            PartyTimeout: nothing matching arrived by ``deadline``.
        """
        mailbox = self.mailbox
        tag = kind.KIND  # type: ignore[attr-defined]
        while True:
            envelope = mailbox.take(tag, sender)
            if envelope is not None:
                return envelope
            if not await mailbox.wait(deadline):
                source = f" from {sender}" if sender is not None else ""
                raise PartyTimeout(f"{self.party} waited for {tag}{source} until t={deadline:.3f}s; none came")

    async def gather(
        self,
        kind: type[M],
        senders: Iterable[Party],
        *,
        deadline: float,
        accept: Callable[[M], bool] | None = None,
    ) -> Replies[M]:
        """Collect one message of ``kind`` from each of ``senders`` until all answered or ``deadline``.

        Messages of ``kind`` that ``accept`` rejects (e.g. late replies to an earlier round) are discarded.

        Raises:
            ProtocolViolation: an accepted message came from a party not in ``senders``, or twice from one.
        """
        expected = set(senders)
        mailbox = self.mailbox
        tag = kind.KIND  # type: ignore[attr-defined]
        replies: dict[Party, M] = {}
        while True:
            for envelope in mailbox.take_all(tag):
                if accept is not None and not accept(envelope.body):
                    continue
                if envelope.src not in expected:
                    raise ProtocolViolation(
                        f"{self.party} expected {tag} from one of {len(expected)} selected parties, "
                        f"received it from {envelope.src}"
                    )
                if envelope.src in replies:
                    raise ProtocolViolation(f"{self.party} received {tag} twice from {envelope.src}")
                replies[envelope.src] = envelope.body
            if len(replies) == len(expected) or not await mailbox.wait(deadline):
                break
        missing = sorted(expected.difference(replies))
        return Replies(replies, missing)


__all__ = ["Actor", "Replies"]
