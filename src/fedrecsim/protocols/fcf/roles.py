"""FCF role behaviours: users that keep their profile and compute gradients, a server that aggregates.

Explicit feedback (Hua et al. eqs. (2)-(5)): a selected user receives the rows of V for its rated items,
updates its own profile u_i and returns the item-gradient rows it computed with its *previous* profile;
the server sums each item's rows over the users that answered -- in sorted party order -- and updates
that item (the maths of `fedrecsim.models.mf`).

Implicit feedback (Ammad-ud-din et al. FCF): a selected user receives the whole of V, solves its profile
in closed form (confidence 1 + alpha r) and returns its full gradient with respect to V; the server
averages the gradients of the users that answered (`fedrecsim.models.implicit_mf`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...actors.server import Server
from ...actors.user import User
from ...errors import ProtocolViolation
from ...models.implicit_mf import ImplicitHyper, item_gradient, server_step, user_factors
from ...models.mf import MFHyper, item_step, unit_rows, user_step
from ...network.party import Party
from .messages import ItemGradients, ItemVectors, Model, ModelGradient, Register


@dataclass(frozen=True)
class RoundReport:
    """What the server saw of one round."""

    selected: int
    replied: int
    missing: int


class ExplicitUser(User):
    """Holds its ratings and its profile ``u``; never sends either."""

    def __init__(self, party, network, rng, items: np.ndarray, ratings: np.ndarray, hyper: MFHyper) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int32)
        self.ratings = np.asarray(ratings, dtype=np.float64)
        self.hyper = hyper
        self.u = unit_rows(rng, 1, hyper.d)[0]

    async def run(self) -> None:
        self.send(self.server, Register(self.items))
        while True:
            request = (await self.recv(ItemVectors, deadline=self.horizon_s)).body
            if self.crashes_in(request.round):
                return
            if request.vectors.shape != (self.items.size, self.hyper.d):
                raise ProtocolViolation(
                    f"{self.party} expected item vectors of shape {(self.items.size, self.hyper.d)}, "
                    f"received {request.vectors.shape} in round {request.round}"
                )
            new_u, gradients = user_step(self.u, request.vectors, self.ratings, self.hyper)
            await self.compute()
            self.u = new_u
            self.send(self.server, ItemGradients(request.round, gradients))


class ImplicitUser(User):
    """Holds its interactions; its profile ``x`` is solved fresh every round and never leaves it."""

    def __init__(self, party, network, rng, items: np.ndarray, values: np.ndarray, hyper: ImplicitHyper) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int64)
        self.confidence = 1.0 + hyper.alpha * np.asarray(values, dtype=np.float64)
        self.hyper = hyper
        self.x = np.zeros(hyper.d)

    async def run(self) -> None:
        while True:
            request = (await self.recv(Model, deadline=self.horizon_s)).body
            if self.crashes_in(request.round):
                return
            item_factors = request.item_factors
            if item_factors.shape[1] != self.hyper.d or (self.items.size and self.items.max() >= item_factors.shape[0]):
                raise ProtocolViolation(f"{self.party} received a model of shape {item_factors.shape} in round {request.round}")
            self.x = user_factors(item_factors, self.items, self.confidence, self.hyper.lam)
            gradient = item_gradient(item_factors, self.x, self.items, self.confidence)
            await self.compute()
            self.send(self.server, ModelGradient(request.round, gradient))


class FCFServer(Server):
    """Selects users, ships item factors, aggregates gradients in sorted party order, updates V.

    Args:
        max_users: select at most this many online users per round (0 = all), uniformly at random.
    """

    def __init__(self, party, network, rng, n_items: int, d: int, max_users: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.item_factors = unit_rows(rng, n_items, d)
        self.max_users = max_users

    def select(self, candidates: list[Party]) -> list[Party]:
        if self.max_users and len(candidates) > self.max_users:
            chosen = self.rng.choice(len(candidates), size=self.max_users, replace=False)
            return sorted(candidates[position] for position in chosen)
        return candidates


class ExplicitServer(FCFServer):
    def __init__(self, party, network, rng, n_items: int, hyper: MFHyper, max_users: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng, n_items, hyper.d, max_users)
        self.hyper = hyper
        self.registered: dict[Party, np.ndarray] = {}

    def _update_registrations(self) -> None:
        for envelope in self.drain(Register):
            self.registered[envelope.src] = envelope.body.items.astype(np.int64)

    async def round(self, round_index: int, deadline: float) -> RoundReport:
        self.update_membership()
        self._update_registrations()
        candidates = sorted(party for party in self.members if self.registered.get(party, np.empty(0)).size)
        selected = self.select(candidates)
        for party in selected:
            self.send(party, ItemVectors(round_index, self.item_factors[self.registered[party]]))
        replies = await self.gather(
            ItemGradients, selected, deadline=deadline, accept=lambda reply: reply.round == round_index
        )
        sums = np.zeros_like(self.item_factors)
        counts = np.zeros(self.item_factors.shape[0], dtype=np.int64)
        for party, reply in replies:
            items = self.registered[party]
            if reply.gradients.shape != (items.size, self.hyper.d):
                raise ProtocolViolation(
                    f"{self.party} expected gradients of shape {(items.size, self.hyper.d)} from {party}, "
                    f"received {reply.gradients.shape}"
                )
            # A user's items are unique, so fancy-index accumulation is exact here.
            sums[items] += reply.gradients
            counts[items] += 1
        touched = counts > 0
        self.item_factors[touched] = item_step(self.item_factors[touched], sums[touched], counts[touched], self.hyper)
        return RoundReport(len(selected), len(replies), len(replies.missing))


class ImplicitServer(FCFServer):
    def __init__(self, party, network, rng, n_items: int, hyper: ImplicitHyper, max_users: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng, n_items, hyper.d, max_users)
        self.hyper = hyper

    async def round(self, round_index: int, deadline: float) -> RoundReport:
        self.update_membership()
        selected = self.select(sorted(self.members))
        self.send_many(selected, Model(round_index, self.item_factors))
        replies = await self.gather(
            ModelGradient, selected, deadline=deadline, accept=lambda reply: reply.round == round_index
        )
        total = np.zeros_like(self.item_factors)
        for party, reply in replies:
            if reply.gradient.shape != self.item_factors.shape:
                raise ProtocolViolation(
                    f"{self.party} expected a gradient of shape {self.item_factors.shape} from {party}, "
                    f"received {reply.gradient.shape}"
                )
            total += reply.gradient
        if len(replies):
            self.item_factors = server_step(self.item_factors, total, len(replies), self.hyper)
        return RoundReport(len(selected), len(replies), len(replies.missing))
