"""DP-MF's traffic plan: the messages of S1, S2 and S3 per round and role, for ``fedrecsim inspect``.

Every size is the real wire codec's length of a message of the shape the protocol sends (`messages`):
exact per user where a message's size depends on the user's rated items (item requests, item vectors,
contributions, noise setups, rating uploads), an expectation where it depends on a random choice (which
K users S3 serves, how many distinct items their contributions cover). Counts follow the availability
the scenario expects (`PlanContext`): S3 serves ``min(K, online users with ratings)`` per iteration, S2
every online user with ratings, and a crashed user's contribution is missing while its join and item
request are not.

Assumptions, stated in the plan: one pre-sharing attempt brings all k pieces (S3), and every served
user's request is pending again by the next iteration (users ask right after contributing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...actors.membership import Join
from ...network.party import SERVER, THIRD_PARTY, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan
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


def _parties(count: int, n_users: int) -> tuple[Party, ...]:
    """``count`` users spread evenly over the indices: a roster's or contributor list's typical size."""
    if count <= 0 or n_users <= 0:
        return ()
    return tuple(Party(Role.USER, int(index)) for index in np.unique(np.linspace(0, n_users - 1, min(count, n_users)).astype(int)))


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
        return Flow(type(body).KIND, src.role, dst.role, messages, messages * size, exact)


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
    n_users, n_items = ctx.train.n_users, ctx.train.n_items
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
        return ItemVectors(
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
    if ctx.dropout:
        # A crashed user announces a join again at the round's end (its item request is counted above).
        per_round.append(ctx.flow(Join(), _USER, SERVER, served * ctx.dropout))
    if protected:
        item_counts = ctx.train.item_counts()
        distinct = _distinct_items(item_counts, int(users.rated.sum()), int(round(replying)))
        roster = Roster(rnd, _parties(int(round(served)), n_users), 0.0)
        aggregate = Aggregate(rnd, _items(int(round(distinct))), _words(int(round(distinct)), config), _parties(int(round(replying)), n_users))
        per_round += [ctx.flow(roster, SERVER, THIRD_PARTY), _expected(ctx.flow(aggregate, THIRD_PARTY, SERVER), everyone)]
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
    return flow if exact else Flow(flow.kind, flow.src, flow.dst, flow.messages, flow.bytes, False)


def _presharing(ctx: PlanContext, config: DPMFConfig) -> list[Flow]:
    """S3's first pre-sharing attempt, for every item: k sharers, one roster, one aggregate."""
    n_items, d = ctx.train.n_items, config.d
    online = int(round(ctx.initial_online))
    k = min(config.k_presharing, online)
    if k == 0:
        return []
    if config.sharers == "common":
        sharers, rows = float(k), n_items
    else:
        # k of the online users per item: a user is a sharer unless it was passed over for every item.
        sharers = online * (1.0 - (1.0 - k / online) ** n_items)
        rows = max(1, int(round(n_items * k / sharers)))
    request = PresharingRequest(1, _items(rows), np.zeros((rows, d)), _ones(rows), _words(rows, config))
    share = PresharingShare(1, _items(rows), _words(rows, config))
    aggregate = PresharingAggregate(1, _items(n_items), _words(n_items, config), _parties(int(round(sharers)), ctx.train.n_users))
    exact = config.sharers == "common"
    return [
        ctx.flow(Roster(0, _parties(int(round(sharers)), ctx.train.n_users), 0.0, 1), SERVER, THIRD_PARTY),
        _expected(ctx.flow(request, SERVER, _USER, sharers), exact),
        _expected(ctx.flow(share, _USER, THIRD_PARTY, sharers), exact),
        ctx.flow(aggregate, THIRD_PARTY, SERVER),
    ]


__all__ = ["plan"]
