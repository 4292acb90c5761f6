"""DP-MF's traffic plan: the messages of S1, S2 and S3 per round and role, for ``fedrecsim inspect``.

Every size is the real wire codec's length of a message of the shape the protocol sends (`messages`):
exact per user where a message's size depends on the user's rated items (item requests, item vectors,
contributions, noise setups, rating uploads), an expectation where it depends on a random choice (which
K users S3 serves, how many distinct items their contributions cover). Counts follow the availability
the scenario expects (`PlanContext`): S3 serves ``min(K, online users with ratings)`` per iteration, S2
every online user with ratings, and a crashed user's contribution is missing while its join and item
request are not. A message between the server and one user, or one that lists users (rosters, an
aggregate's contributors), is sized over the users it may concern -- a party index over 127 takes msgpack
a byte more -- and is exact only when which users they are cannot change its size.

Assumptions, stated in the plan: one pre-sharing attempt brings all k pieces (S3), and every served
user's request is pending again by the next iteration (users ask right after contributing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...actors.membership import Join
from ...memory import MemoryContext, MemoryItem
from ...network.party import SERVER, THIRD_PARTY, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan, index_length
from .config import DPMFConfig
from .messages import (
    Aggregate,
    Contribution,
    ItemRequest,
    ItemVectors,
    NaiveContribution,
    NoiseSetup,
    PresharingAggregate,
    PresharingRequest,
    PresharingShare,
    RatingsUpload,
    Roster,
)

_USER = Party(Role.USER, 0)


def _items(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int32)


def _words(n: int, config: DPMFConfig) -> np.ndarray:
    return np.zeros((n, config.d * config.ring_bits // 32), dtype=np.uint32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.int32)


def _listed(count: int, candidates: np.ndarray, certain: bool) -> tuple[tuple[Party, ...], bool]:
    """A list of ``count`` of the ``candidates`` (user indices, ascending) spread evenly over them -- a
    roster's or contributor list's typical members -- and whether its size is certain: the count is
    (``certain``), and it lists every candidate or all the candidates' indices have one length on the wire."""
    listed = min(count, candidates.size)
    if listed <= 0:
        return (), certain
    picks = np.unique(np.linspace(0, candidates.size - 1, listed).astype(int))
    lengths = index_length(candidates)
    return (
        tuple(Party(Role.USER, int(candidates[pick])) for pick in picks),
        certain and (listed == candidates.size or bool(lengths.min() == lengths.max())),
    )


def _distinct_items(item_counts: np.ndarray, raters: int, chosen: int) -> float:
    """Expected distinct items among ``chosen`` of the ``raters`` users with ratings, drawn without
    replacement: the sum over items of 1 - C(raters - c_j, chosen) / C(raters, chosen)."""
    if chosen >= raters:
        return float(np.count_nonzero(item_counts))
    rest = raters - item_counts.astype(np.float64)
    lgamma = np.vectorize(math.lgamma)
    untouched = np.where(
        rest >= chosen,
        np.exp(lgamma(rest + 1) - lgamma(np.maximum(rest - chosen, 0) + 1) - math.lgamma(raters + 1) + math.lgamma(raters - chosen + 1)),
        0.0,
    )
    return float(np.sum(1.0 - untouched))


class _Users:
    """Per-user exact sizes of the user-shaped messages, and the share of users that have ratings."""

    def __init__(self, ctx: PlanContext) -> None:
        self.ctx = ctx
        counts = ctx.train.user_counts()
        self.rated = counts > 0
        self.share = float(self.rated.mean()) if counts.size else 0.0

    def mean(self, make: Callable[[int], Any], other: Party, *, to_user: bool) -> float:
        """Mean exact size over the users with ratings (the only ones a recommender serves)."""
        if not self.rated.any():
            return 0.0
        return float(self.ctx.user_bytes(make, other, to_user=to_user)[self.rated].mean())

    def flow(self, make: Callable[[int], Any], other: Party, messages: float, *, to_user: bool, exact: bool) -> Flow:
        body = make(1)
        src, dst = (other, _USER) if to_user else (_USER, other)
        size = self.mean(make, other, to_user=to_user)
        # An exact flow's bytes are a sum of whole message sizes: the mean's rounding error is not in them.
        total = float(round(messages * size)) if exact else messages * size
        return Flow(type(body).KIND, src.role, dst.role, messages, total, exact)


def plan(ctx: PlanContext) -> TrafficPlan:
    """DP-MF's `TrafficPlan` (module docstring)."""
    config: DPMFConfig = ctx.config
    users = _Users(ctx)
    parties = {Role.USER: ctx.train.n_users, Role.SERVER: 1}
    if config.scenario != "S1" and config.variant == "protected":
        parties[Role.THIRD_PARTY] = 1
    if config.scenario == "S1":
        return _trusted(ctx, users, parties)
    return _private(ctx, config, users, parties)


def _trusted(ctx: PlanContext, users: _Users, parties: dict[Role, int]) -> TrafficPlan:
    def upload(n: int) -> RatingsUpload:
        return RatingsUpload(_items(n), np.zeros(n))

    setup = (*ctx.membership(initial=True), users.flow(upload, SERVER, ctx.initial_online * users.share, to_user=False, exact=False))
    per_round = (*ctx.membership(), users.flow(upload, SERVER, ctx.joins * users.share, to_user=False, exact=False))
    return TrafficPlan(parties, setup, per_round, ("S1: users upload their ratings on every (re)join, nothing else travels",))


def _private(ctx: PlanContext, config: DPMFConfig, users: _Users, parties: dict[Role, int]) -> TrafficPlan:
    n_users = ctx.train.n_users
    rnd = max(1, ctx.rounds // 2)
    s3 = config.scenario == "S3"
    protected = config.variant == "protected"
    online_rated = ctx.online * users.share
    served = min(float(config.max_users), online_rated) if s3 else online_rated
    replying = served * (1.0 - ctx.dropout)
    # Sizes are exact when every user with ratings is served: nobody offline, nobody left out by K.
    everyone = ctx.online >= n_users and not ctx.joins and not ctx.dropout and (not s3 or config.max_users >= online_rated)

    def request(n: int) -> ItemRequest:
        return ItemRequest(_items(n))

    def vectors(n: int) -> ItemVectors:
        explicit = protected and config.mask_transport == "explicit"
        return ItemVectors.of(
            rnd, _words(n, config), _ones(n),
            masks=_words(n, config) if explicit else None,
            mask_seed=bytes(16) if protected and not explicit else None,
            eta_pieces=_words(n, config) if s3 else None,
            known_raters=_ones(n) if s3 and config.normalize else None,
        )

    def contribution(n: int) -> Contribution | NaiveContribution:
        if protected:
            return Contribution(rnd, _items(n), _words(n, config))
        return NaiveContribution(rnd, _words(n, config))

    answer_to = THIRD_PARTY if protected else SERVER
    per_round = [
        *ctx.membership(),
        users.flow(request, SERVER, ctx.joins * users.share + served, to_user=False, exact=everyone),
        users.flow(vectors, SERVER, served, to_user=True, exact=everyone),
        users.flow(contribution, answer_to, replying, to_user=False, exact=everyone),
    ]
    rated = np.flatnonzero(users.rated)
    if ctx.dropout:
        # A crashed user announces a join again at the round's end (its item request is counted above).
        per_round.append(ctx.users_flow(Join(), SERVER, served * ctx.dropout, rated))
    if protected:
        item_counts = ctx.train.item_counts()
        distinct = _distinct_items(item_counts, int(rated.size), int(round(replying)))
        # How many the roster lists is certain when who is online is (K of them, or all in S2).
        certain = ctx.online >= n_users and not ctx.joins and not ctx.leaves
        listed, roster_exact = _listed(int(round(served)), rated, certain)
        contributors, _ = _listed(int(round(replying)), rated, everyone)
        roster = Roster(rnd, listed, 0.0)
        aggregate = Aggregate(rnd, _items(int(round(distinct))), _words(int(round(distinct)), config), contributors)
        per_round += [
            _expected(ctx.flow(roster, SERVER, THIRD_PARTY), roster_exact),
            _expected(ctx.flow(aggregate, THIRD_PARTY, SERVER), everyone),
        ]
    setup = [*ctx.membership(initial=True), users.flow(request, SERVER, ctx.initial_online * users.share, to_user=False, exact=False)]
    assumptions = ["every served user asks to be served again right after it contributed"]
    if s3:
        setup += _presharing(ctx, config)
        assumptions.append("S3: one pre-sharing attempt brings all k pieces of every item (no sharer leaves or answers late)")
    elif config.scenario == "S2":
        def noise_setup(n: int) -> NoiseSetup:
            return NoiseSetup(np.zeros((n, config.d)), _ones(n))

        setup.append(users.flow(noise_setup, SERVER, ctx.initial_online * users.share, to_user=True, exact=False))
    return TrafficPlan(parties, tuple(setup), tuple(per_round), tuple(assumptions))


def _expected(flow: Flow, exact: bool) -> Flow:
    """``flow``, exact only if ``exact`` holds too."""
    return dataclasses.replace(flow, exact=flow.exact and exact)


def _presharing(ctx: PlanContext, config: DPMFConfig) -> list[Flow]:
    """S3's first pre-sharing attempt, for every item: k sharers, one roster, one aggregate.

    The sharers are k of the users online at the set-up (``common``), or k per item (``per_item``), so who
    they are -- and, per item, how many they are and how many rows each gets -- is luck, unless every
    online user shares every item."""
    n_users, n_items, d = ctx.train.n_users, ctx.train.n_items, config.d
    online = int(round(ctx.initial_online))
    k = min(config.k_presharing, online)
    if k == 0:
        return []
    every_online_user_shares = k == online
    if config.sharers == "common":
        sharers, rows = float(k), n_items
    else:
        # k of the online users per item: a user is a sharer unless it was passed over for every item.
        sharers = online * (1.0 - (1.0 - k / online) ** n_items)
        rows = max(1, int(round(n_items * k / sharers)))
    rows_certain = config.sharers == "common" or every_online_user_shares
    count_certain = (config.sharers == "common" and config.k_presharing <= online) or (
        every_online_user_shares and ctx.initial_online >= n_users
    )
    listed, list_exact = _listed(int(round(sharers)), np.arange(n_users), count_certain)
    request = PresharingRequest(1, _items(rows), np.zeros((rows, d)), _ones(rows), _words(rows, config))
    share = PresharingShare(1, _items(rows), _words(rows, config))
    aggregate = PresharingAggregate(1, _items(n_items), _words(n_items, config), listed)
    return [
        _expected(ctx.flow(Roster(0, listed, 0.0, 1), SERVER, THIRD_PARTY), list_exact),
        _expected(ctx.users_flow(request, SERVER, sharers, to_user=True), rows_certain),
        _expected(ctx.users_flow(share, THIRD_PARTY, sharers), rows_certain),
        _expected(ctx.flow(aggregate, THIRD_PARTY, SERVER), list_exact),
    ]


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """DP-MF's arrays (`fedrecsim.memory`): the recommender's item profiles with their ring images, the third
    party's and the pre-sharers' noise eta (k shares of every item's d values), the users' profiles and
    rated items' vectors, the unprotected baseline, and the messages of an iteration -- each served user's
    item vectors out and contributions back, in floats and in the ring, encoded and decoded."""
    config = ctx.config
    d, items, users = config.d, ctx.items, ctx.users
    served = min(config.max_users, users) if config.scenario == "S3" else users
    return (
        MemoryItem("recommender and noise", (6.0 + config.k_presharing) * items * d * 8, ("protocol.d", "data.items", "protocol.k_presharing")),
        MemoryItem("user profiles", (users + 2.0 * ctx.train_entries) * d * 8, ("protocol.d", "data.ratings")),
        MemoryItem("baseline", 2.0 * (users + items) * d * 8, ("protocol.d", "data.users", "data.items")),
        MemoryItem("messages of a round", 8.0 * served * ctx.entries_per_user * d * 8, ("protocol.d", "protocol.max_users", "data.ratings")),
    )


__all__ = ["memory", "plan"]
