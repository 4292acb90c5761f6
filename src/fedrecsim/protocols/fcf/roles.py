"""FCF role behaviours: users that keep their profile and compute gradients, a server that aggregates.

Explicit feedback (Hua et al. eqs. (2)-(5)): a selected user receives the rows of V for its rated items,
updates its own profile u_i and returns the item-gradient rows it computed with its *previous* profile;
the server sums each item's rows over the users that answered -- in sorted party order -- and updates
that item (the maths of `fedrecsim.models.mf`).

Implicit feedback (Ammad-ud-din et al. FCF): a selected user receives the whole of V, solves its profile
in closed form (confidence 1 + alpha r) and returns its full gradient with respect to V; the server
averages the gradients of the users that answered (`fedrecsim.models.implicit_mf`).

What the server refuses (recorded in the ledger as rejected; the round goes on without it, so no single
user can stop a run or move V by more than an honest user could): a registration of items the model does
not have, a gradient of the wrong shape, and a gradient with an entry that is not finite or larger in
magnitude than ``max_abs`` (a byzantine bound far above any honest entry). A user answers each round once:
a request for a round it already answered (a copy the network duplicated, or one overtaken by a newer
round) is ignored, so its profile takes one step per round.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...actors.membership import Join, Leave
from ...actors.server import Server
from ...actors.user import User
from ...errors import ProtocolViolation
from ...models.implicit_mf import ImplicitHyper, item_gradient, server_step, user_factors
from ...models.mf import MFHyper, item_step, unit_rows, user_step
from ...network.ledger import RejectReason
from ...network.party import Party
from .messages import ItemGradients, ItemVectors, Model, ModelGradient, Register

#: The default byzantine bound on a gradient entry (`FCFServer`'s ``max_abs``).
MAX_ABS_GRADIENT = 1e6


@dataclass(frozen=True)
class RoundReport:
    """What the server saw of one round: whom it selected, who replied, who did not, and whose reply it
    rejected."""

    selected: int
    replied: int
    missing: int
    rejected: int = 0


def gradient_problem(gradient: np.ndarray, shape: tuple[int, ...], max_abs: float) -> str | None:
    """Why the server refuses a user's ``gradient`` (None: it does not): the wrong shape, or an entry
    that is not finite or exceeds ``max_abs`` in magnitude."""
    if gradient.shape != shape:
        return f"gradients of shape {shape}, received {gradient.shape}"
    if gradient.size and not np.abs(gradient).max() <= max_abs:
        return f"entries finite and at most {max_abs:g} in magnitude, received {np.abs(gradient).max():g}"
    return None


class ExplicitUser(User):
    """Holds its ratings and its profile ``u``; never sends either."""

    def __init__(self, party, network, rng, items: np.ndarray, ratings: np.ndarray, hyper: MFHyper) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int32)
        self.ratings = np.asarray(ratings, dtype=np.float64)
        self.hyper = hyper
        self.u = unit_rows(rng, 1, hyper.d)[0]
        self.answered = 0
        self.reply: tuple[int, np.ndarray, np.ndarray] | None = None

    async def run(self) -> None:
        self.send(self.server, Register(self.items))
        await self.resume()

    async def resume(self) -> None:
        if await self.compute_rest():
            self._send_reply()
        while True:
            request = (await self.recv(ItemVectors, deadline=self.horizon_s)).body
            if request.round <= self.answered:
                continue
            if self.crashes_in(request.round):
                return
            if request.vectors.shape != (self.items.size, self.hyper.d):
                raise ProtocolViolation(
                    f"{self.party} expected item vectors of shape {(self.items.size, self.hyper.d)}, "
                    f"received {request.vectors.shape} in round {request.round}"
                )
            new_u, gradients = user_step(self.u, request.vectors, self.ratings, self.hyper)
            self.reply = (request.round, new_u, gradients)
            await self.compute()
            self._send_reply()

    def _send_reply(self) -> None:
        """Take the step computed for ``reply``'s round and send its gradients."""
        round_index, new_u, gradients = self.reply  # type: ignore[misc]
        self.reply = None
        self.u = new_u
        self.answered = round_index
        self.send(self.server, ItemGradients(round_index, gradients))


class ImplicitUser(User):
    """Holds its interactions; its profile ``x`` is solved fresh every round and never leaves it."""

    def __init__(self, party, network, rng, items: np.ndarray, values: np.ndarray, hyper: ImplicitHyper) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int64)
        self.confidence = 1.0 + hyper.alpha * np.asarray(values, dtype=np.float64)
        self.hyper = hyper
        self.x = np.zeros(hyper.d)
        self.reply: ModelGradient | None = None

    async def run(self) -> None:
        await self.resume()

    async def resume(self) -> None:
        if await self.compute_rest():
            self._send_reply()
        while True:
            request = (await self.recv(Model, deadline=self.horizon_s)).body
            if self.crashes_in(request.round):
                return
            item_factors = request.item_factors
            if item_factors.shape[1] != self.hyper.d or (self.items.size and self.items.max() >= item_factors.shape[0]):
                raise ProtocolViolation(f"{self.party} received a model of shape {item_factors.shape} in round {request.round}")
            self.x = user_factors(item_factors, self.items, self.confidence, self.hyper.lam)
            self.reply = ModelGradient(request.round, item_gradient(item_factors, self.x, self.items, self.confidence))
            await self.compute()
            self._send_reply()

    def _send_reply(self) -> None:
        reply, self.reply = self.reply, None
        self.send(self.server, reply)


class FCFServer(Server):
    """Selects users, ships item factors, aggregates gradients in sorted party order, updates V.

    Args:
        max_users: select at most this many online users per round (0 = all), uniformly at random.
        max_abs: a gradient with a larger (or non-finite) entry is rejected (`gradient_problem`).
    """

    def __init__(self, party, network, rng, n_items: int, d: int, max_users: int, max_abs: float = MAX_ABS_GRADIENT) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.item_factors = unit_rows(rng, n_items, d)
        self.max_users = max_users
        self.max_abs = max_abs

    def select(self, candidates: list[Party]) -> list[Party]:
        if self.max_users and len(candidates) > self.max_users:
            chosen = self.rng.choice(len(candidates), size=self.max_users, replace=False)
            return sorted(candidates[position] for position in chosen)
        return candidates


class ExplicitServer(FCFServer):
    receives = (Register, ItemGradients, Join, Leave)

    def __init__(self, party, network, rng, n_items: int, hyper: MFHyper, max_users: int, max_abs: float = MAX_ABS_GRADIENT) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng, n_items, hyper.d, max_users, max_abs)
        self.hyper = hyper
        self.registered: dict[Party, np.ndarray] = {}

    def knows(self, users: Iterable[Party]) -> bool:
        """Whether every one of ``users`` has joined and registered, by the messages delivered so far."""
        self.update_membership()
        self._update_registrations()
        return all(party in self.members and party in self.registered for party in users)

    def _update_registrations(self) -> None:
        n_items = self.item_factors.shape[0]
        for envelope in self.drain(Register):
            items = envelope.body.items
            if items.size and items[-1] >= n_items:
                problem = f"{self.party} expected items below {n_items} from {envelope.src}; received item {items[-1]}"
                self.reject(envelope, RejectReason.INVALID, problem)
                continue
            self.registered[envelope.src] = items.astype(np.int64)

    async def round(self, round_index: int, deadline: float) -> RoundReport:
        self.update_membership()
        self._update_registrations()
        candidates = sorted(party for party in self.members if self.registered.get(party, np.empty(0)).size)
        selected = self.select(candidates)
        for party in selected:
            self.send(party, ItemVectors(round_index, self.item_factors[self.registered[party]]))
        # The rows each user was sent: a registration that arrives meanwhile must not change the shape due.
        sent = {party: self.registered[party] for party in selected}

        def invalid(party: Party, reply: ItemGradients) -> str | None:
            return gradient_problem(reply.gradients, (sent[party].size, self.hyper.d), self.max_abs)

        replies = await self.gather(
            ItemGradients, selected, deadline=deadline, accept=lambda reply: reply.round == round_index, validate=invalid
        )
        sums = np.zeros_like(self.item_factors)
        counts = np.zeros(self.item_factors.shape[0], dtype=np.int64)
        for party, reply in replies:
            items = sent[party]
            # A user's items are unique, so fancy-index accumulation is exact here.
            sums[items] += reply.gradients
            counts[items] += 1
        touched = counts > 0
        self.item_factors[touched] = item_step(self.item_factors[touched], sums[touched], counts[touched], self.hyper)
        return RoundReport(len(selected), len(replies), len(replies.missing), len(replies.rejected))


class ImplicitServer(FCFServer):
    receives = (ModelGradient, Join, Leave)

    def __init__(self, party, network, rng, n_items: int, hyper: ImplicitHyper, max_users: int, max_abs: float = MAX_ABS_GRADIENT) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng, n_items, hyper.d, max_users, max_abs)
        self.hyper = hyper

    def knows(self, users: Iterable[Party]) -> bool:
        """Whether every one of ``users`` has joined, by the messages delivered so far."""
        self.update_membership()
        return self.members.issuperset(users)

    async def round(self, round_index: int, deadline: float) -> RoundReport:
        self.update_membership()
        selected = self.select(sorted(self.members))
        self.send_many(selected, Model(round_index, self.item_factors))
        shape = self.item_factors.shape

        def invalid(party: Party, reply: ModelGradient) -> str | None:
            return gradient_problem(reply.gradient, shape, self.max_abs)

        replies = await self.gather(
            ModelGradient, selected, deadline=deadline, accept=lambda reply: reply.round == round_index, validate=invalid
        )
        total = np.zeros_like(self.item_factors)
        for _, reply in replies:
            total += reply.gradient
        if len(replies):
            self.item_factors = server_step(self.item_factors, total, len(replies), self.hyper)
        return RoundReport(len(selected), len(replies), len(replies.missing), len(replies.rejected))
