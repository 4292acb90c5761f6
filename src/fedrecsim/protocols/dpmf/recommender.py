"""The DP-MF recommenders: trusted (S1), and untrusted (S2, S3) -- the server of the run.

`TrustedRecommender` (S1) holds the ratings users upload, runs the MF of eqs. (1)-(5) centrally one
iteration per round, and at the end re-optimizes V with U fixed on the perturbed objective (6) with its
own eta (`central.refit_items`).

`Recommender` (S2, S3) never sees a rating or a per-user value. Each iteration it serves the users whose
item requests are pending (S2: every user of the noise setup; S3: at most K online users chosen at
random) with v_j(t), masks psi and, in S3, pieces of tau^_j; it then receives from the third party the
per-item sums of what the contributors sent and

    A_j = aggregate_j - sum of psi_j of the contributors + sum of tau^-pieces_j of the served users that
          did not contribute (S3)
        = sum over contributors of (grad_j + rho~_j) + eta_j        (mod P)

because the third party already subtracted alpha_j and tau^_j - alpha_j = eta_j. It decodes A_j and takes
the normalized step of eq. (9): ``v_j -= gamma (A_j / c_j + 2 mu v_j)`` (`fedrecsim.models.mf.item_step`)
with c_j = n_j, the contributors of item j -- in S3 c_j = k_j n_j / k'_j, because there the users weighted
their gradients and rho~ by k_j / k'_j (`protocol` explains why): k'_j the served raters of the item, k_j
the raters it has seen so far (``known_raters``: every user's first item request counts once). Dropout
recovery is exactly the two sums above: only the masks of
users that contributed are removed, and the tau^ pieces of those that did not are added back, so the noise
left is eta_j in every iteration. The rho~ pieces of the missing users are missing; that shortfall is
reported by the simulator, not hidden.

**S3 pre-sharing, and what to do with a short item -- a documented choice.** The paper's initialization
assumes all k chosen users answer. A sharer that leaves, or whose share reaches the third party after its
deadline, leaves tau^_j with fewer than k pieces, each drawn as N(0, 1/k) sqrt(2H) b: eta_j would then have
scale b sqrt(k''/k) and still be used as Laplace(b). The recommender keeps tau^_j only from an attempt that
brought all k pieces of item j (the third party reports who shared); every other item is pre-shared again
*from scratch* in the next attempt -- fresh H_j, fresh sharers among the users online then, fresh beta, and
at the third party a fresh alpha_j, so the short sum is never unmasked and no two attempts' sums share a
mask. (Topping up only the missing pieces with the same H_j would waste less, but a late or lost
aggregate would leave the recommender and the third party disagreeing on which pieces and which alpha_j
are in tau^_j.) Up to ``presharing_attempts`` attempts run before iteration 1, and one more before every
iteration while items are short; an item whose eta_j is not whole is served (its users cannot tell) but
not updated, and each such skipped update is counted (``eta_skipped``). Late messages of an earlier
attempt carry its number and are discarded.

**Sharers.** The paper's step (1) picks one set UO of k online users that pre-shares every item
(``sharers = "common"``, the default): k users each draw a piece for all m items, and one sharer lost
makes every item of the attempt short. ``"per_item"`` draws k users per item (our earlier behaviour): the
work and the trust spread over many users, and a lost sharer shortens only its items, but far more users
take part in the phase (and learn that they were asked about those items, which are not their ratings).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ...actors.membership import Join, Leave
from ...actors.server import Server
from ...data.ratings import Ratings
from ...errors import PartyTimeout, ProtocolViolation
from ...mechanisms.laplace import exponential_h
from ...models.mf import CentralizedMF, item_step, unit_rows
from ...network.ledger import RejectReason
from ...network.party import THIRD_PARTY, Party
from .central import project_unit_ball, refit_items
from .messages import (
    Aggregate,
    ItemRequest,
    ItemVectors,
    NaiveContribution,
    NoiseSetup,
    PresharingAggregate,
    PresharingRequest,
    RatingsUpload,
    Roster,
)
from .noise import central_noise
from .public import PublicParameters
from .ringops import expand_masks, from_words, split_by_item, sum_by_item, to_words, words_per_element

_EMPTY = np.empty(0, dtype=np.int64)


def _user_blocks(planes: list[np.ndarray], offsets: np.ndarray) -> np.ndarray:
    """``planes`` (arrays of one shape and dtype whose rows are the served users' rows, user after user,
    user u's from ``offsets[u]`` to ``offsets[u + 1]``) regrouped user by user: rows ``P offsets[u]`` to
    ``P offsets[u + 1]`` of the result are user u's rows of plane 0, then of plane 1, ... (P planes), so
    that each user's block is one contiguous slice, ``block.reshape(P, n_u, ...)`` its planes."""
    count, rows = len(planes), planes[0].shape[0]
    if count == 1:
        return planes[0]
    lengths = np.diff(offsets)
    # Row r of user u (its rows from s_u, n_u of them) goes to P s_u + p n_u + (r - s_u) in plane p.
    first = (count - 1) * np.repeat(offsets[:-1], lengths) + np.arange(rows)
    step = np.repeat(lengths, lengths)
    blocks = np.empty((count * rows, *planes[0].shape[1:]), dtype=planes[0].dtype)
    for plane_index, plane in enumerate(planes):
        blocks[first + plane_index * step] = plane
    return blocks


@dataclass
class Served:
    """Who the recommender served in one iteration, and what it handed out (its own records).

    Rows are the served users' items, user after user in sorted party order.
    """

    round: int
    parties: list[Party]
    offsets: np.ndarray
    row_items: np.ndarray
    raters: np.ndarray
    known_raters: np.ndarray | None = None
    masks: np.ndarray | None = None
    keys: list[bytes] = field(default_factory=list)
    eta_pieces: np.ndarray | None = None

    @cached_property
    def positions(self) -> dict[Party, int]:
        """Each served party's position in ``parties``."""
        return {party: position for position, party in enumerate(self.parties)}

    def row_count(self, party: Party) -> int:
        position = self.positions[party]
        return int(self.offsets[position + 1] - self.offsets[position])

    def rows_of(self, chosen: list[Party]) -> np.ndarray:
        """The row positions of the ``chosen`` served parties (in their order)."""
        index = self.positions
        positions = np.fromiter((index[party] for party in chosen), dtype=np.int64, count=len(chosen))
        starts = self.offsets[positions]
        lengths = self.offsets[positions + 1] - starts
        # Each party's run of rows: its start plus 0, 1, ... (the concatenated ranges in one pass).
        before = np.cumsum(lengths) - lengths
        return np.repeat(starts - before, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


@dataclass
class Update:
    """What the recommender computed in one iteration (read by the invariant monitors).

    Attributes:
        contributors: the users whose contribution is in the aggregate (the third party's report).
        items: the items in the aggregate, ascending.
        unmasked: ring, A_j of the module docstring.
        before_addback: ring, the aggregate minus the contributors' masks (before the tau^ pieces of the
            missing users are added back).
        counts: n_j, contributors per item.
        divisors: c_j, what the step divides A_j by (module docstring): n_j, or k_j n_j / k'_j in S3.
        updated: the items whose profile was stepped (S3: those with pre-shared noise).
    """

    round: int
    contributors: list[Party]
    items: np.ndarray
    unmasked: np.ndarray
    before_addback: np.ndarray
    counts: np.ndarray
    divisors: np.ndarray
    updated: np.ndarray


class TrustedRecommender(Server):
    """S1: the recommender that may see the ratings; it publishes a V that is eps-DP by Theorem 1.

    It keeps each user's latest valid upload; an upload of items the model does not have, or of values
    outside the public rating range, is rejected (recorded in the ledger) and changes nothing.
    """

    receives = (RatingsUpload, Join, Leave)

    def __init__(self, party, network, rng, public: PublicParameters, n_users: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.public = public
        self.item_factors = unit_rows(rng, public.n_items, public.d)
        self.user_factors = unit_rows(rng, n_users, public.d)
        self.uploads: dict[Party, RatingsUpload] = {}
        self.eta: np.ndarray | None = None
        self._ratings: Ratings | None = None
        self._model = CentralizedMF(public.hyper)

    def collect(self) -> int:
        """Take the uploads delivered so far; returns how many users' ratings the recommender holds."""
        self.update_membership()
        low, high = self.public.rating_range
        for envelope in self.drain(RatingsUpload):
            upload: RatingsUpload = envelope.body
            if upload.items.size and upload.items[-1] >= self.public.n_items:
                problem = f"items below {self.public.n_items}, received item {upload.items[-1]}"
            elif upload.values.size and not (low <= upload.values.min() and upload.values.max() <= high):
                problem = f"ratings in [{low:g}, {high:g}], received {upload.values.min():g} .. {upload.values.max():g}"
            else:
                self.uploads[envelope.src] = upload
                self._ratings = None
                continue
            self.reject(envelope, RejectReason.INVALID, f"{self.party} expected valid dpmf.ratings from {envelope.src}: {problem}")
        return len(self.uploads)

    def ratings(self) -> Ratings:
        """The ratings held, as one data set over all users and items."""
        if self._ratings is None:
            parties = sorted(self.uploads)
            users = np.concatenate([np.full(self.uploads[p].items.size, p.index) for p in parties]) if parties else _EMPTY
            items = np.concatenate([self.uploads[p].items for p in parties]) if parties else _EMPTY
            values = np.concatenate([self.uploads[p].values for p in parties]) if parties else np.empty(0)
            self._ratings = Ratings(users, items, values, self.user_factors.shape[0], self.public.n_items, self.public.rating_range)
        return self._ratings

    def iterate(self) -> np.ndarray:
        """One iteration of unprotected MF over the users whose ratings it holds; returns their indices."""
        ratings = self.ratings()
        held = np.zeros(ratings.n_users, dtype=bool)
        held[np.unique(ratings.users)] = True
        self.user_factors, self.item_factors = self._model.round(
            self.user_factors, self.item_factors, ratings, participating_users_mask=held
        )
        project_unit_ball(self.user_factors)
        return np.flatnonzero(held)

    def publish(self, mechanism: str, epsilon: float, delta: float) -> np.ndarray:
        """The eps-DP item profiles: V minimizing objective (6) with U fixed and a fresh eta (kept in ``eta``)."""
        self.eta = central_noise(self.rng, mechanism, self.public.n_items, self.public.d, epsilon, delta)
        return refit_items(self.user_factors, self.item_factors, self.ratings(), self.eta, self.public.hyper)


class Recommender(Server):
    """S2 / S3: serves item vectors with masks, unmasks per-item aggregates, updates V (module docstring).

    Args:
        max_users: S3: K, users served per iteration at most (S2 serves every set-up user).
        k_presharing: S3: k, the users that pre-share each item's noise.
        sharers: S3: ``common`` (one set of k users for every item, the paper) or ``per_item``.
        collect_share: the fraction of the round's time the third party waits for contributions.

    A user's item request for items the model does not have is rejected (recorded in the ledger); so is a
    naive contribution of the wrong number of rows, whose sender is then left out of the iteration.
    """

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, public: PublicParameters, max_users: int, k_presharing: int,
        sharers: str = "common", collect_share: float = 0.5,
    ) -> None:
        super().__init__(party, network, rng)
        # What it receives: the third party's sums when protected (pre-sharing ones in S3), else the naive
        # contributions; the users' item requests, joins and leaves.
        kinds: tuple[type, ...] = (Aggregate,) if public.protected else (NaiveContribution,)
        if public.scenario == "S3":
            kinds += (PresharingAggregate,)
        network.expect(party, (kind.KIND for kind in (ItemRequest, Join, Leave, *kinds)))
        self.public = public
        self.item_factors = unit_rows(rng, public.n_items, public.d)
        self.max_users = max_users
        self.k_presharing = k_presharing
        self.sharers_mode = sharers
        self.collect_share = collect_share
        self.requests: dict[Party, np.ndarray] = {}
        self._unconfirmed: dict[Party, np.ndarray] = {}
        self.rated_items: dict[Party, np.ndarray] = {}
        self.known_raters = np.zeros(public.n_items, dtype=np.int64)
        self.set_up: frozenset[Party] | None = None
        ring, shape = public.ring, (public.n_items, public.d)
        self.tau_hat = np.zeros(shape, dtype=ring.dtype)
        self.eta_pieces = np.zeros(public.n_items, dtype=np.int64)
        self.eta_whole = np.zeros(public.n_items, dtype=bool)
        self.attempt = 0
        self.presharing: list[dict[str, int]] = []
        self.eta_skipped = 0
        self.vector_values = 0
        self.vector_overflow = 0
        self.served: Served | None = None
        self.last: Update | None = None
        # The unmasked aggregates of the last two iterations: all the difference attack (eq. (11)) needs.
        self.recent: deque[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = deque(maxlen=2)

    # ------------------------------------------------------------------ requests

    def _unknown_items(self, party: Party, request: ItemRequest) -> str | None:
        items = request.items
        if items.size and items[-1] >= self.public.n_items:
            return f"items below {self.public.n_items}, received item {items[-1]}"
        return None

    def _register(self, party: Party, request: ItemRequest) -> None:
        items = request.items.astype(np.int64)
        if party not in self.rated_items:
            self.known_raters[items] += 1
        self.rated_items[party] = items
        if items.size:
            (self.requests if party in self.members else self._unconfirmed)[party] = items

    def refresh(self) -> None:
        """Apply joins, leaves and item requests delivered so far; a user that left has no pending request.

        Invariant: every key of ``requests`` is a member with a non-empty request, in arrival order. A
        request that arrives before its sender's join (links do not keep order) waits in
        ``_unconfirmed`` until the join is applied.
        """
        for party in self.update_membership():
            self.requests.pop(party, None)
            self._unconfirmed.pop(party, None)
        for party in [party for party in self._unconfirmed if party in self.members]:
            self.requests[party] = self._unconfirmed.pop(party)
        for envelope in self.drain(ItemRequest):
            problem = self._unknown_items(envelope.src, envelope.body)
            if problem is None:
                self._register(envelope.src, envelope.body)
            else:
                self.reject(envelope, RejectReason.INVALID, f"{self.party} expected a valid dpmf.item_request from {envelope.src}: {problem}")

    # ------------------------------------------------------------------ S2 setup

    async def set_up_noise(self, deadline: float) -> int:
        """S2, before iteration 1: H_j and k_j to every rater; returns how many users were set up.

        The recommender waits (until ``deadline``) for the item request of every online user, counts the
        raters k_j of every item among them, and sends each its H_j and k_j (eq. (12)).
        """
        self.refresh()
        replies = await self.gather(
            ItemRequest, sorted(self.members.difference(self.requests)), deadline=deadline, validate=self._unknown_items
        )
        for party, request in replies:
            self._register(party, request)
        self.refresh()
        parties = sorted(party for party in self.requests if party in self.members)
        raters = np.zeros(self.public.n_items, dtype=np.int64)
        for party in parties:
            raters[self.requests[party]] += 1
        h = exponential_h(self.rng, (self.public.n_items, self.public.d))
        for party in parties:
            items = self.requests[party]
            self.send(party, NoiseSetup(h[items], raters[items].astype(np.int32)))
        self.set_up = frozenset(parties)
        self.eta_pieces = raters
        self.eta_whole = raters > 0
        return len(parties)

    # ------------------------------------------------------------------ S3 initialization

    async def preshare(self, round_timeout_s: float) -> np.ndarray:
        """One attempt of S3's pre-sharing (steps (1)-(4)) for every item whose eta_j is not whole yet.

        It keeps tau^_j = alpha_j + eta_j of the items for which all k pieces came back, and returns those
        items. An item that came back short keeps no tau^ from this attempt: the next attempt pre-shares it
        from scratch (fresh H_j, sharers, beta and, at the third party, alpha_j), so no tau^ ever holds fewer
        than k pieces. With nobody online the attempt asks nobody and accepts nothing.
        """
        self.refresh()
        short = np.flatnonzero(~self.eta_whole)
        online = sorted(self.members)
        if not short.size or not online:
            return _EMPTY
        self.attempt += 1
        attempt = self.attempt
        ring, n_items, d = self.public.ring, self.public.n_items, self.public.d
        k = min(self.k_presharing, len(online))
        # Row r pre-shares item row_items[r] by user row_users[r]: k distinct online users per item, the
        # same k for every item (the paper's UO) or k drawn per item.
        if self.sharers_mode == "common":
            row_users = np.repeat(self.rng.choice(len(online), size=k, replace=False), short.size)
            row_items = np.tile(short, k)
        else:
            row_users = np.concatenate([self.rng.choice(len(online), size=k, replace=False) for _ in range(short.size)])
            row_items = np.repeat(short, k)
        h = np.zeros((n_items, d))
        h[short] = exponential_h(self.rng, (short.size, d))
        beta = ring.uniform(self.rng, (row_items.size, d))
        order = np.lexsort((row_items, row_users))
        bounds = np.searchsorted(row_users[order], np.arange(len(online) + 1))
        sharers = [online[position] for position in range(len(online)) if bounds[position + 1] > bounds[position]]
        now = self.now
        self.send(THIRD_PARTY, Roster(0, tuple(sharers), now + self.collect_share * round_timeout_s, attempt))
        rows_of: dict[Party, np.ndarray] = {}
        for position, party in enumerate(online):
            rows = order[bounds[position]:bounds[position + 1]]
            if not rows.size:
                continue
            rows_of[party] = rows
            items = row_items[rows]
            self.send(party, PresharingRequest(
                attempt, items.astype(np.int32), h[items], np.full(items.size, k, dtype=np.int32), to_words(ring, beta[rows]),
            ))
        record = {"attempt": attempt, "items": int(short.size), "sharers": len(sharers), "whole": 0, "pieces_min": 0}
        self.presharing.append(record)
        aggregate = await self._await(PresharingAggregate, now + round_timeout_s, lambda body: body.attempt == attempt)
        if aggregate is None:
            return _EMPTY
        contributed = [party for party in aggregate.contributors if party in rows_of]
        if len(contributed) != len(aggregate.contributors):
            raise ProtocolViolation(f"{self.party}: the third party reported pre-sharers it was not asked about")
        rows = np.concatenate([rows_of[party] for party in contributed]) if contributed else _EMPTY
        present, beta_sums = sum_by_item(ring, row_items[rows], beta[rows], n_items)
        items = aggregate.items.astype(np.int64)
        if not np.array_equal(present, items):
            raise ProtocolViolation(f"{self.party}: the pre-sharing aggregate's items do not match its sharers'")
        pieces = np.bincount(row_items[rows], minlength=n_items)[items]
        whole = pieces == k
        accepted = items[whole]
        tau_tilde = from_words(ring, aggregate.tau_tilde, d, f"{self.party} tau~")
        self.tau_hat[accepted] = ring.sub(tau_tilde[whole], beta_sums[whole])
        self.eta_pieces[accepted] = k
        self.eta_whole[accepted] = True
        record["whole"] = int(accepted.size)
        record["pieces_min"] = int(pieces.min()) if pieces.size else 0
        return accepted

    # ------------------------------------------------------------------ iterations

    def serve(self, round_index: int, round_timeout_s: float) -> Served:
        """Step (1): choose the users of this iteration and send each its vectors, masks and noise pieces."""
        self.refresh()
        public, ring, d = self.public, self.public.ring, self.public.d
        # Pending requests in arrival order (a function of the seed, like every delivery order); only the
        # chosen ones are sorted, which keeps selection O(pending) at Netflix scale.
        pending = list(self.requests)
        if public.scenario == "S2":
            candidates = sorted(party for party in pending if self.set_up is not None and party in self.set_up)
        elif len(pending) > self.max_users:
            chosen = self.rng.choice(len(pending), size=self.max_users, replace=False)
            candidates = sorted(pending[position] for position in chosen)
        else:
            candidates = sorted(pending)
        items_of = [self.requests.pop(party) for party in candidates]
        lengths = np.array([items.size for items in items_of], dtype=np.int64)
        offsets = np.r_[0, np.cumsum(lengths)]
        row_items = np.concatenate(items_of) if items_of else _EMPTY
        raters = np.bincount(row_items, minlength=public.n_items)
        served = Served(round_index, candidates, offsets, row_items, raters)
        if public.scenario == "S3" and public.hyper.normalize:
            served.known_raters = self.known_raters.copy()
        encoded, overflow = ring.encode(self.item_factors)
        self.vector_values += encoded.size
        self.vector_overflow += overflow
        vectors = encoded[row_items]
        if public.protected:
            if public.mask_transport == "explicit":
                served.masks = ring.uniform(self.rng, (row_items.size, d))
            else:
                served.keys = [self.rng.bytes(16) for _ in candidates]
            if public.scenario == "S3":
                served.eta_pieces = split_by_item(ring, row_items, self.tau_hat, self.rng)
            self.send(THIRD_PARTY, Roster(round_index, tuple(candidates), self.now + self.collect_share * round_timeout_s))
        # Every served user's rows at once, regrouped user by user (`_user_blocks`): each message carries its
        # user's block of words and of counts, plane after plane.
        planes = [to_words(ring, vectors)]
        if served.masks is not None:
            planes.append(to_words(ring, served.masks))
        if served.eta_pieces is not None:
            planes.append(to_words(ring, served.eta_pieces))
        counts = [raters[row_items].astype(np.int32)]
        if served.known_raters is not None:
            counts.append(served.known_raters[row_items].astype(np.int32))
        words, counted = _user_blocks(planes, offsets), _user_blocks(counts, offsets)
        n_planes, n_counts, width = len(planes), len(counts), planes[0].shape[1]
        bounds = offsets.tolist()
        for position, party in enumerate(candidates):
            start, stop = bounds[position], bounds[position + 1]
            self.send(party, ItemVectors(
                round_index,
                words[n_planes * start:n_planes * stop].reshape(n_planes, stop - start, width),
                counted[n_counts * start:n_counts * stop].reshape(n_counts, stop - start),
                served.keys[position] if served.keys else None,
            ))
        self.served = served
        return served

    async def collect(self, deadline: float) -> Update | None:
        """Steps (3)-(4): unmask the per-item aggregate and update V; None if no aggregate came in time."""
        served = self.served
        if served is None:
            raise ProtocolViolation(f"{self.party} was asked to collect before it served an iteration")
        if self.public.protected:
            aggregate = await self._await(Aggregate, deadline, lambda body: body.round == served.round)
            if aggregate is None:
                return None
            update = self._unmask(served, aggregate)
        else:
            update = await self._collect_naive(served, deadline)
        self._step(update)
        return update

    def _unmask(self, served: Served, aggregate: Aggregate) -> Update:
        ring, d, n_items = self.public.ring, self.public.d, self.public.n_items
        contributors = list(aggregate.contributors)
        contributed = set(contributors)
        unknown = contributed.difference(served.parties)
        if unknown:
            raise ProtocolViolation(f"{self.party}: the third party reported contributors it did not serve: {sorted(unknown)[:3]}")
        # Contributors are sorted and unique (`Aggregate.validate`) and all served: as many as served are all of
        # them, in the served order, so their rows are every row (no gather).
        everyone = len(contributors) == len(served.parties)
        rows = served.rows_of(contributors)
        if served.masks is None:
            masks = self._expanded_masks(served, contributors)
        else:
            masks = served.masks if everyone else served.masks[rows]
        present, mask_sums = sum_by_item(ring, served.row_items[rows], masks, n_items)
        items = aggregate.items.astype(np.int64)
        if not np.array_equal(present, items):
            raise ProtocolViolation(f"{self.party}: the aggregate of round {served.round} covers other items than its contributors rated")
        before = ring.sub(from_words(ring, aggregate.sums, d, f"{self.party} aggregate"), mask_sums)
        unmasked = before
        if served.eta_pieces is not None:
            missing = [party for party in served.parties if party not in contributed]
            missing_rows = served.rows_of(missing)
            held, held_sums = sum_by_item(ring, served.row_items[missing_rows], served.eta_pieces[missing_rows], n_items)
            # Pieces of items nobody contributed to are not needed: those items are not updated.
            found = np.isin(held, items, kind="table")
            back = np.zeros((items.size, d), dtype=ring.dtype)
            back[np.searchsorted(items, held[found])] = held_sums[found]
            unmasked = ring.add(before, back)
        counts = np.bincount(served.row_items[rows], minlength=n_items)[items]
        divisors = counts.astype(np.float64)
        if served.known_raters is not None:
            divisors *= served.known_raters[items] / served.raters[items]
        # S3: an item whose eta_j is not whole is not updated (its tau^ is being pre-shared again).
        updated = items[self.eta_whole[items]] if self.public.scenario == "S3" else items
        self.eta_skipped += items.size - updated.size
        return Update(served.round, contributors, items, unmasked, before, counts, divisors, updated)

    def _expanded_masks(self, served: Served, contributors: list[Party]) -> np.ndarray:
        index = served.positions
        blocks = []
        for party in contributors:
            position = index[party]
            rows = int(served.offsets[position + 1] - served.offsets[position])
            blocks.append(expand_masks(self.public.ring, served.keys[position], rows, self.public.d))
        return np.concatenate(blocks) if blocks else np.empty((0, self.public.d), dtype=self.public.ring.dtype)

    async def _collect_naive(self, served: Served, deadline: float) -> Update:
        ring, d, n_items = self.public.ring, self.public.d, self.public.n_items
        words = d * words_per_element(ring)

        def invalid(party: Party, reply: NaiveContribution) -> str | None:
            expected = (served.row_count(party), words)
            return None if reply.values.shape == expected else f"words of shape {expected}, received {reply.values.shape}"

        replies = await self.gather(
            NaiveContribution, served.parties, deadline=deadline, accept=lambda reply: reply.round == served.round,
            validate=invalid,
        )
        contributors = [party for party, _ in replies]
        rows = served.rows_of(contributors)
        blocks = [from_words(ring, reply.values, d, f"{self.party} naive contribution of {party}") for party, reply in replies]
        values = np.concatenate(blocks) if blocks else np.empty((0, d), dtype=ring.dtype)
        items, sums = sum_by_item(ring, served.row_items[rows], values, n_items)
        counts = np.bincount(served.row_items[rows], minlength=n_items)[items]
        return Update(served.round, contributors, items, sums, sums, counts, counts.astype(np.float64), items)

    def _step(self, update: Update) -> None:
        """Eq. (9), normalized: v_j -= gamma (A_j / c_j + 2 mu v_j) for every updated item."""
        keep: np.ndarray | slice = np.isin(update.items, update.updated, kind="table")
        if keep.all():
            keep = slice(None)  # every aggregated item is updated (the usual case): no masked copies
        sums = self.public.ring.decode(update.unmasked[keep])
        divisors = update.divisors[keep]
        items = update.items[keep]
        self.item_factors[items] = item_step(self.item_factors[items], sums, divisors, self.public.hyper)
        self.recent.append((update.round, items, sums, divisors))
        self.last = update

    async def _await(self, kind: type, deadline: float, current: Callable[[Any], bool]):  # type: ignore[no-untyped-def]
        """The third party's ``current`` message of ``kind`` (older rounds' or attempts' are stale and dropped)."""
        while True:
            try:
                body = (await self.recv(kind, deadline=deadline, sender=THIRD_PARTY)).body
            except PartyTimeout:
                return None
            if current(body):
                return body


__all__ = ["Recommender", "Served", "TrustedRecommender", "Update"]
