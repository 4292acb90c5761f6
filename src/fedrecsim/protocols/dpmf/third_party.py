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

It works each roster once (a copy the network duplicated is ignored: a second pass would find nothing
left to collect and overwrite the record of who shared), and counts each user once per roster (`gather`);
pre-sharing shares still waiting when an iteration starts are refused (no attempt is under way);
a user's values for items the model does not have, or rows of the wrong width, are rejected, and the
user is left out of the sums.
"""

from __future__ import annotations

import math

import numpy as np

from ...actors.third_party import ThirdParty
from ...errors import ProtocolViolation
from ...network.ledger import RejectReason
from ...network.party import SERVER, Party
from .messages import Aggregate, Contribution, PresharingAggregate, PresharingShare, Roster
from .public import PublicParameters
from .ringops import from_words, sum_by_item, to_words, words_per_element


class Aggregator(ThirdParty):
    """The third party (module docstring). ``alpha`` is its secret (S3); None in S2.

    ``alpha_attempt[j]`` (the pre-sharing attempt the current alpha_j belongs to; 0: none) and
    ``presharers[a]`` (whose shares are in attempt a's sums) are its own records; it never sends them, and
    the simulator's monitors read them.
    """

    horizon_s: float = math.inf

    def __init__(self, party, network, rng, public: PublicParameters) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        # What it receives: pre-sharing shares only in S3.
        kinds = (Roster, Contribution, PresharingShare) if public.scenario == "S3" else (Roster, Contribution)
        network.expect(party, (kind.KIND for kind in kinds))
        self.public = public
        self.alpha = public.ring.uniform(rng, (public.n_items, public.d)) if public.scenario == "S3" else None
        self.alpha_attempt = np.zeros(public.n_items, dtype=np.int64)
        self.presharers: dict[int, tuple[Party, ...]] = {}
        self._worked: set[tuple[int, int]] = set()
        # What `_invalid` checks every received row against: the items and the words of a row.
        self._n_items = public.n_items
        self._width = public.d * words_per_element(public.ring)

    async def run(self) -> None:
        while True:
            envelope = await self.recv(Roster, deadline=self.horizon_s, sender=SERVER)
            roster: Roster = envelope.body
            if (roster.round, roster.attempt) in self._worked:
                continue
            self._worked.add((roster.round, roster.attempt))
            if roster.round == 0:
                await self._preshare(roster)
            else:
                self._reject_stale_shares(roster.round)
                await self._aggregate(roster)

    def _reject_stale_shares(self, round_index: int) -> None:
        """Pre-sharing shares still here when an iteration starts belong to no attempt under way: refuse
        them (a late share of a finished attempt, or a message of the wrong kind for the stage)."""
        for envelope in self.drain(PresharingShare):
            problem = (
                f"{self.party} expected dpmf.contribution of iteration {round_index} from {envelope.src}; "
                f"received dpmf.presharing_share of attempt {envelope.body.attempt}, which is not under way"
            )
            self.reject(envelope, RejectReason.UNEXPECTED, problem)

    def _invalid(self, party: Party, body: Contribution | PresharingShare) -> str | None:
        """What is wrong with a user's values (None: nothing): items the ring does not have, or rows that
        are not d ring elements wide."""
        items = body.items
        words = body.phi if isinstance(body, Contribution) else body.tau
        if items.size and items[-1] >= self._n_items:
            return f"items below {self._n_items}, received item {items[-1]}"
        if words.shape[1] != self._width:
            return f"rows of {self._width} words, received {words.shape[1]}"
        return None

    async def _preshare(self, roster: Roster) -> None:
        if self.alpha is None:
            raise ProtocolViolation(f"{self.party} received a pre-sharing roster in {self.public.scenario}; only S3 pre-shares")
        replies = await self.gather(
            PresharingShare, roster.parties, deadline=roster.collect_until, accept=lambda share: share.attempt == roster.attempt,
            validate=self._invalid,
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
            Contribution, roster.parties, deadline=roster.collect_until, accept=lambda reply: reply.round == roster.round,
            validate=self._invalid,
        )
        items, sums = self._sum([(party, reply.items, reply.phi) for party, reply in replies])
        if self.alpha is not None:
            sums = self.public.ring.sub(sums, self.alpha[items])
        self.send(SERVER, Aggregate(roster.round, items.astype(np.int32), to_words(self.public.ring, sums), tuple(party for party, _ in replies)))

    def _sum(self, received: list[tuple]) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        ring, d, n_items = self.public.ring, self.public.d, self.public.n_items
        if not received:
            return np.empty(0, dtype=np.int64), np.empty((0, d), dtype=ring.dtype)
        # Each message's rows match its items (checked when it was decoded) and are d ring elements wide
        # (`_invalid`), so the words of all of them unpack at once.
        items = np.concatenate([items for _, items, _ in received])
        words = np.concatenate([words for _, _, words in received])
        return sum_by_item(ring, items, from_words(ring, words, d, f"{self.party} values received"), n_items)


__all__ = ["Aggregator"]
