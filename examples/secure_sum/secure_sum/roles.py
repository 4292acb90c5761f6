"""The two roles: users that mask their counts pairwise, a server that adds what it receives.

User ``i`` adds the mask it shares with each peer ``j > i`` and subtracts the one it shares with each
``j < i``, so over a whole cohort every mask is added once and subtracted once: the server's sum of the
masked vectors is the sum of the counts, while each single vector looks uniformly random to it.
"""

from __future__ import annotations

import numpy as np

from fedrecsim.sim import Network, Party, Replies, Server, Stream, User, generator

from .messages import MaskedCounts, SumRequest


def pair_mask(pair_seed: int, round_index: int, a: int, b: int, n_items: int) -> np.ndarray:
    """The mask users ``a`` and ``b`` share in ``round_index``: the same for both, unknown to the server.

    A stand-in for key agreement: a real pair derives it from a Diffie-Hellman shared secret, which the
    server cannot compute; here the simulator derives it from the run's seed, keyed by round and pair,
    and the server's code never calls this function.
    """
    rng = generator(pair_seed, Stream.PROTOCOL, round_index, min(a, b), max(a, b))
    return rng.integers(0, 2**64, size=n_items, dtype=np.uint64)


class CountingUser(User):
    """Holds its item counts (1 per item it interacted with); sends only their masked version."""

    def __init__(
        self, party: Party, network: Network, rng: np.random.Generator, counts: np.ndarray, pair_seed: int
    ) -> None:
        super().__init__(party, network, rng)
        self.counts = np.asarray(counts, dtype=np.uint64)
        self.pair_seed = pair_seed

    def masked(self, round_index: int, cohort: np.ndarray) -> np.ndarray:
        values = self.counts.copy()
        me = self.party.index
        for peer in cohort.tolist():
            if peer != me:
                mask = pair_mask(self.pair_seed, round_index, me, peer, values.size)
                values = values + mask if peer > me else values - mask
        return values

    async def run(self) -> None:
        while True:
            request = (await self.recv(SumRequest, sender=self.server, deadline=self.horizon_s)).body
            if self.crashes_in(request.round):
                return  # silent until the population brings it back
            values = self.masked(request.round, request.cohort)
            await self.compute()
            self.send(self.server, MaskedCounts(request.round, values))


class SummingServer(Server):
    """Asks every member for its masked counts and adds the replies that arrive before the deadline."""

    def __init__(self, party: Party, network: Network, rng: np.random.Generator, n_items: int) -> None:
        super().__init__(party, network, rng)
        self.n_items = n_items

    async def round(self, round_index: int, deadline: float) -> tuple[np.ndarray, Replies[MaskedCounts]]:
        self.update_membership()
        cohort = sorted(self.members)
        self.send_many(cohort, SumRequest(round_index, np.array([p.index for p in cohort], dtype=np.int64)))
        replies = await self.gather(
            MaskedCounts, cohort, deadline=deadline, accept=lambda reply: reply.round == round_index
        )
        total = np.zeros(self.n_items, dtype=np.uint64)
        for _, reply in replies:  # sorted party order (addition mod 2**64 commutes anyway)
            total += reply.values
        return total, replies
