"""The semi-honest third party of DP-MF: sums masked values per item and forwards the sums.

For every roster the recommender sends, it collects what the listed users send it -- until all answered
or the roster's deadline -- adds them per item mod P in sorted party order, and forwards the sums with
the list of users whose values are in them:

- round 0 (S3 pre-sharing attempt a): tau~_j = alpha_j + sum tau_j over the shares of attempt a (late
  shares of an earlier attempt are discarded), with its own secret alpha_j uniform in the ring, drawn
  afresh for the items of every attempt: an item pre-shared again (its first attempt came out short of
  k pieces) gets a new alpha_j, so the recommender's two sums for it are independently masked and the
  short one is never unmasked. The alpha_j it keeps -- and subtracts in every iteration -- is that of the
  last attempt that covered item j, which is the attempt the recommender accepted if it accepted any
  (it re-asks only for items it did not accept);
- round t >= 1: sum phi_j, minus alpha_j in S3 (the third exception of "Further Practical
  Consideration"), so that the recommender's tau^_j - alpha_j leaves exactly eta_j.

Everything it receives is masked by psi, beta or tau^-pieces that are uniform over the ring, so its view
is uniform whatever the gradients; it never sees a mask.
"""

from __future__ import annotations

import math

import numpy as np

from ...actors.third_party import ThirdParty
from ...errors import ProtocolViolation
from ...network.party import SERVER, Party
from .messages import Aggregate, Contribution, PresharingAggregate, PresharingShare, Roster
from .public import PublicParameters
from .ringops import from_words, sum_by_item, to_words


class Aggregator(ThirdParty):
    """The third party (module docstring). ``alpha`` is its secret (S3); None in S2.

    ``alpha_attempt[j]`` (the pre-sharing attempt the current alpha_j belongs to; 0: none) and
    ``presharers[a]`` (whose shares are in attempt a's sums) are its own records; it never sends them, and
    the simulator's monitors read them.
    """

    horizon_s: float = math.inf

    def __init__(self, party, network, rng, public: PublicParameters) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.public = public
        self.alpha = public.ring.uniform(rng, (public.n_items, public.d)) if public.scenario == "S3" else None
        self.alpha_attempt = np.zeros(public.n_items, dtype=np.int64)
        self.presharers: dict[int, tuple[Party, ...]] = {}

    async def run(self) -> None:
        while True:
            roster: Roster = (await self.recv(Roster, deadline=self.horizon_s)).body
            if roster.round == 0:
                await self._preshare(roster)
            else:
                await self._aggregate(roster)

    async def _preshare(self, roster: Roster) -> None:
        if self.alpha is None:
            raise ProtocolViolation(f"{self.party} received a pre-sharing roster in {self.public.scenario}; only S3 pre-shares")
        replies = await self.gather(
            PresharingShare, roster.parties, deadline=roster.collect_until, accept=lambda share: share.attempt == roster.attempt
        )
        ring = self.public.ring
        items, sums = self._sum([(party, share.items, share.tau) for party, share in replies])
        self.alpha[items] = ring.uniform(self.rng, (items.size, self.public.d))
        self.alpha_attempt[items] = roster.attempt
        contributors = tuple(party for party, _ in replies)
        self.presharers[roster.attempt] = contributors
        sums = ring.add(sums, self.alpha[items])
        self.send(SERVER, PresharingAggregate(roster.attempt, items.astype(np.int32), to_words(ring, sums), contributors))

    async def _aggregate(self, roster: Roster) -> None:
        replies = await self.gather(
            Contribution, roster.parties, deadline=roster.collect_until, accept=lambda reply: reply.round == roster.round
        )
        items, sums = self._sum([(party, reply.items, reply.phi) for party, reply in replies])
        if self.alpha is not None:
            sums = self.public.ring.sub(sums, self.alpha[items])
        self.send(SERVER, Aggregate(roster.round, items.astype(np.int32), to_words(self.public.ring, sums), tuple(party for party, _ in replies)))

    def _sum(self, received: list[tuple]) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        ring, d, n_items = self.public.ring, self.public.d, self.public.n_items
        for party, items, _ in received:
            if items.size and items[-1] >= n_items:
                raise ProtocolViolation(f"{self.party} received values for unknown items from {party}")
        if not received:
            return np.empty(0, dtype=np.int64), np.empty((0, d), dtype=ring.dtype)
        # Each message's rows match its items (checked when it was decoded).
        items = np.concatenate([items for _, items, _ in received])
        rows = np.concatenate([from_words(ring, words, d, f"{self.party} values from {party}") for party, _, words in received])
        return sum_by_item(ring, items, rows, n_items)


__all__ = ["Aggregator"]
