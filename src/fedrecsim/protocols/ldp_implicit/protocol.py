"""Minto et al. (RecSys 2021): federated implicit MF under user-level local DP, through a shuffling proxy.

One round of the run is one federated epoch (``run.rounds`` = epochs; the paper trains 20). In epoch
``e`` the server sends V to every proxy, each proxy relays it to its online users, each user answers
with k eps-LDP reports of its item gradient (Algorithm 1) through a proxy of its choice, the proxies
shuffle and forward the reports in batches, and the server estimates the mean gradient (eq. (9)) and
updates V (Algorithm 2). Who does what is in `roles`, what travels in `messages`.

Decisions where the paper is silent or ambiguous:

* Steps per epoch: ``steps_per_epoch`` (default 20, the paper's Sec. 4.2) updates of V with the
  epoch's single estimate; see `training` for why this equals the mini-batch reading up to
  O(gamma * lambda) and what ``steps_per_epoch = 1`` (Algorithm 2 verbatim) means.
* The estimator divides by the number of reports received, N*k, not by N as eq. (9) is printed: with
  k reports per user this is the unbiased mean (`estimate_mean_gradient`).
* Initialization: the paper does not say how V starts. V starts with independent N(0, s^2) entries,
  ``s = init_scale`` (default 0.07). The scale matters with the paper's gamma = 1e-3, because the
  per-user gradients grow like 1/s while Algorithm 1 clips them to [-1, 1]. Measured on synthetic data
  (1,000 items, 20 epochs): with unit-norm rows V barely moves; at s = 0.1 training is stable but slow;
  at s <= 0.04 most gradient entries hit the clip bound and HR@10 oscillates between epochs; s = 0.07
  is stable and learns within the 20 epochs.
* The proxy network also carries V and membership, so the server never exchanges a message with a
  user (Sec. 3.1.2: "the proxy network sits between the server and the client"). A user's joins go
  to a home proxy drawn once from its generator; its reports go to a proxy drawn every epoch.
* Pools (the paper names no threshold): a proxy releases a pool the moment it holds reports of
  ``min_users`` distinct users, and never releases a smaller one. A pool still short of them
  ``proxy_wait_s`` after its first report is, per ``underfull``, held (default: the stragglers that
  missed the previous pool wait for later reports of their epoch and leave with them once the pool
  reaches ``min_users``) or dropped. A held pool ends with its epoch: it is dropped when its proxy
  relays the next epoch's model, and whatever a proxy holds when the run ends is dropped too -- held
  reports are never released late or small. Dropped reports are missing at the server (its epoch then
  runs to its deadline). With ``min_users`` equal to the users per proxy every epoch is one pool per
  proxy; with ``min_users`` above the users a proxy can ever see, no pool is released and the run
  trains nothing (``reports`` 0, ``reports_dropped`` all of them). ``proxy_wait_s`` must be shorter
  than ``run.round_timeout_s``, the server's deadline for an epoch's reports.

Evaluation (Sec. 4.2): leave-one-out (``data.split = "leave_one_out"``); each held-out item is ranked
against ``negatives`` (99) sampled items the user never interacted with, the same sample for every
epoch and every model (`Stream.EVALUATION`); ``hr@2``, ``hr@5``, ``hr@10``. Each user's profile is
the one it solves on-device from the V being evaluated (eq. (4)). If the data leaves some test user
fewer than ``negatives`` untouched items (tiny data sets), every user is ranked against as many as
the data allows for all, reported as ``eval_negatives``. The final metrics add the baselines of the
paper's Fig. 5: ``hr@K_mf_np`` (MF-NP: the same model, initial V and schedule without LDP, see
`training`) and ``hr@K_random`` (the exact expectation of a random ranking, ``K / (negatives + 1)``).

Per-epoch metrics: ``participants`` (users V was relayed to), ``reports`` (aggregated),
``reports_missing`` (awaited but not in by the deadline), ``reports_late`` (of an earlier epoch,
discarded), ``silent_proxies`` (proxies whose relayed count was lost: the epoch then runs to its
deadline and ``reports_missing`` counts only what the other proxies announced), ``anonymity_set``
(fewest distinct users in a pool released for the epoch, absent if none was), ``reports_held``
(reports in pools that passed their deadline short of ``min_users`` and were held; they end up
released or dropped), ``reports_dropped`` (reports a proxy received for the epoch and never released:
dropped at the deadline, at the epoch's end or at the run's end), and the hit rates every
``eval_every`` epochs and after the last. The pool figures are the proxies' records, read when the
run is over, so they include what happened to an epoch's reports after the server closed it. Privacy
accounting, with the anonymity set of every release, is in `accounting`.

Data: users hold whatever ``[data]`` yields: every entry is a preference p = 1 with confidence
``1 + alpha r`` (``r`` the entry's value), so ratings are used as interaction strengths unless
``data.binarize = true`` makes every entry 1 (the paper's eq. (10)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import trio

from ...config import param
from ...data.metrics import hit_rate_at_k
from ...errors import ConfigError
from ...invariants import InvariantMonitor
from ...metric_declarations import MetricInfo, common, count, fraction
from ...models.implicit_mf import ImplicitHyper, all_user_factors
from ...network.party import SERVER, Party, Role
from ...seeding import Stream
from ..runtime import Outcome, ProtocolSpec, RunContext
from .accounting import privacy_report
from .audit import AUDIT
from .pool import ClosedPool, Fate, Underfull
from .roles import EpochReport, LDPServer, LDPUser, ShuffleProxy
from .traffic import memory as memory_estimate
from .traffic import plan as traffic_plan
from .training import mf_np_trajectory

_CUTOFFS = (2, 5, 10)
_INT32_INDICES = 2**31


@dataclass(frozen=True)
class LDPImplicitConfig:
    """The ``[protocol]`` table of ldp_implicit; defaults are the paper's (Sec. 4.2) where it gives them."""

    d: int = param(5, ge=1, doc="latent factors F")
    gamma: float = param(1e-3, gt=0, doc="server learning rate")
    lam: float = param(1e-6, ge=0, doc="joint regularization lambda")
    alpha: float = param(1.0, ge=0, doc="confidence c = 1 + alpha r")
    steps_per_epoch: int = param(20, ge=1, doc="server updates per epoch with the epoch's gradient estimate")
    init_scale: float = param(0.07, gt=0, doc="V starts with independent N(0, init_scale^2) entries")
    epsilon: float = param(2.5, gt=0, doc="LDP budget of one report")
    k: int = param(100, ge=1, doc="reports per user per epoch")
    proxies: int = param(1, ge=1, doc="proxies in the proxy network")
    min_users: int = param(1000, ge=1, doc="a proxy releases a pool at this many distinct users, never fewer")
    underfull: Literal["hold", "drop"] = param(
        "hold", doc="a pool short of min_users at its deadline waits for later reports of its epoch, or is dropped"
    )
    batch_size: int = param(10_000, ge=1, doc="reports per proxy -> server batch")
    proxy_wait_s: float = param(5.0, gt=0, doc="a pool short of min_users this long after its first report: underfull")
    delta: float = param(1e-6, gt=0, lt=1, doc="the run's total delta for the shuffled central guarantee")
    negatives: int = param(
        99, ge=max(_CUTOFFS) - 1, doc="sampled untouched items each held-out item is ranked against (HR@10 needs 9)"
    )
    eval_every: int = param(1, ge=1, doc="measure hit rates every this many epochs (and after the last)")

    def hyper(self) -> ImplicitHyper:
        return ImplicitHyper(d=self.d, gamma=self.gamma, lam=self.lam, alpha=self.alpha)


def _check(ctx: RunContext, config: LDPImplicitConfig) -> None:
    if ctx.train.n_items * config.d >= _INT32_INDICES:
        raise ConfigError(
            "protocol.d",
            f"reports index the {ctx.train.n_items} x {config.d} gradient entries with int32; that is too many",
        )
    if config.proxy_wait_s >= ctx.scenario.run.round_timeout_s:
        raise ConfigError(
            "protocol.proxy_wait_s",
            f"must be shorter than run.round_timeout_s = {ctx.scenario.run.round_timeout_s} (the server's deadline "
            f"for an epoch's reports), got {config.proxy_wait_s}",
        )


def _negatives(ctx: RunContext, config: LDPImplicitConfig) -> int:
    """``config.negatives``, or the most every test user still has untouched items for (see the docstring)."""
    interacted = ctx.train.user_counts() + np.bincount(ctx.test.users, minlength=ctx.train.n_users)
    available = int(ctx.train.n_items - interacted[ctx.test.users].max())
    negatives = min(config.negatives, available)
    if negatives < max(_CUTOFFS) - 1:
        raise ConfigError(
            "data.items",
            f"HR@{max(_CUTOFFS)} ranks each held-out item among at least {max(_CUTOFFS) - 1} items the user never "
            f"touched; a test user here touched all but {available} of {ctx.train.n_items} items",
        )
    return negatives


def _hit_rates(ctx: RunContext, V: np.ndarray, hyper: ImplicitHyper, negatives: int) -> dict[str, float]:
    X = all_user_factors(V, ctx.train, hyper.alpha, hyper.lam)

    def scores(users: np.ndarray, items: np.ndarray) -> np.ndarray:
        return np.einsum("bf,bcf->bc", X[users], V[items])

    return hit_rate_at_k(scores, ctx.test, ctx.train, _CUTOFFS, n_negatives=negatives, rng=ctx.rng(Stream.EVALUATION))


def _users(ctx: RunContext, config: LDPImplicitConfig, proxies: tuple[Party, ...]) -> dict[Party, LDPUser]:
    index = ctx.train.by_user()
    hyper = config.hyper()
    users = {}
    for user_index in range(ctx.train.n_users):
        party = Party(Role.USER, user_index)
        start, stop = index.indptr[user_index], index.indptr[user_index + 1]
        users[party] = LDPUser(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, user_index),
            index.items[start:stop], index.values[start:stop],
            hyper=hyper, epsilon=config.epsilon, k=config.k, proxies=proxies,
        )
    return users


def _monitors() -> tuple[InvariantMonitor, InvariantMonitor]:
    return (
        InvariantMonitor("server_hears_only_proxies", "every message the server received was sent by a proxy"),
        InvariantMonitor(
            "reports_unaltered",
            "the server aggregated only reports users sent that epoch, each at most once (all of them when none "
            "was missing): the proxies strip, split and shuffle, never alter or invent",
        ),
    )


def _check_invariants(
    monitors: tuple[InvariantMonitor, InvariantMonitor], report: EpochReport, users: dict[Party, LDPUser], size: int
) -> None:
    anonymous, unaltered = monitors
    foreign = sorted(party for party in report.senders if party.role is not Role.PROXY)
    anonymous.check(not foreign, f"epoch {report.epoch}: the server heard from {', '.join(map(str, foreign[:3]))}")
    sent = [user.sent for user in users.values() if user.sent is not None and user.sent.epoch == report.epoch]
    # A report as one key: its index and its sign, so the comparison is of multisets of (index, sign).
    sent_keys = np.concatenate([2 * s.indices + (s.signs > 0) for s in sent]) if sent else np.empty(0, np.int64)
    # A report past V's last entry (a faulty user's; negative ones cannot be encoded) is refused by its proxy.
    sent_counts = np.bincount(sent_keys, minlength=2 * size)[: 2 * size]
    received_counts = np.bincount(2 * report.indices.astype(np.int64) + (report.signs > 0), minlength=2 * size)
    holds = bool(np.all(received_counts <= sent_counts))
    if report.missing == 0 and report.silent_proxies == 0:
        holds = holds and bool(np.array_equal(received_counts, sent_counts))
    unaltered.check(
        holds,
        f"epoch {report.epoch}: {report.received} reports aggregated, {sent_keys.size} sent, "
        f"{int(np.maximum(received_counts - sent_counts, 0).sum())} not among those sent",
    )


def _epoch_row(report: EpochReport) -> dict[str, float]:
    return {
        "round": report.epoch,
        "participants": report.relayed,
        "reports": report.received,
        "reports_missing": report.missing,
        "reports_late": report.late,
        "silent_proxies": report.silent_proxies,
    }


def _add_pool_figures(row: dict[str, float], pools: list[ClosedPool]) -> None:
    """The fates of the epoch's pools (``pools``: every closed pool of the run) into its metrics row."""
    mine = [pool for pool in pools if pool.epoch == row["round"]]
    released = [pool.users for pool in mine if pool.fate is Fate.RELEASED]
    if released:
        row["anonymity_set"] = min(released)
    row["reports_held"] = sum(pool.reports for pool in mine if pool.held)
    row["reports_dropped"] = sum(pool.reports for pool in mine if pool.fate is Fate.DROPPED)


async def run(ctx: RunContext) -> Outcome:
    config: LDPImplicitConfig = ctx.config
    _check(ctx, config)
    hyper = config.hyper()
    negatives = _negatives(ctx, config) if len(ctx.test) else None
    proxy_parties = tuple(Party(Role.PROXY, index) for index in range(config.proxies))
    users = _users(ctx, config, proxy_parties)
    server = LDPServer(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), n_items=ctx.train.n_items, hyper=hyper,
        steps=config.steps_per_epoch, epsilon=config.epsilon, k=config.k, init_scale=config.init_scale,
        proxies=proxy_parties,
    )
    proxies = [
        ShuffleProxy(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.PROXY.code, party.index), server=SERVER,
            min_users=config.min_users, underfull=Underfull(config.underfull), batch_size=config.batch_size,
            wait_s=config.proxy_wait_s, horizon_s=ctx.horizon_s, reports_per_user=config.k,
            entries=ctx.train.n_items * config.d,
        )
        for party in proxy_parties
    ]
    # The proxies must be online before the users' joins (sent as the population opens) reach them.
    for party in (SERVER, *proxy_parties):
        ctx.network.attach(party)
    population = ctx.population(users)
    size = ctx.train.n_items * config.d
    timing = ctx.scenario.run
    objects = {"server": server, **{str(proxy.party): proxy for proxy in proxies}}
    values = ctx.resumed(population, objects) or {
        "rounds": [], "trajectory": [], "estimates": [], "monitors": _monitors(), "initial": server.item_factors.copy(),
    }
    rounds: list[dict[str, float]] = values["rounds"]
    trajectory: list[np.ndarray] = values["trajectory"]
    estimates: list[np.ndarray | None] = values["estimates"]
    monitors, initial = values["monitors"], values["initial"]
    async with trio.open_nursery() as nursery:
        for proxy in proxies:
            nursery.start_soon(proxy.run)
        async with population.open():
            if not rounds:
                await ctx.network.sleep(timing.round_gap_s)
            for epoch in range(len(rounds) + 1, ctx.rounds + 1):
                population.begin_round(epoch)
                report = await server.epoch(epoch, ctx.network.now + timing.round_timeout_s)
                _check_invariants(monitors, report, users, size)
                row = _epoch_row(report)
                if negatives is not None and (epoch % config.eval_every == 0 or epoch == ctx.rounds):
                    row.update(_hit_rates(ctx, server.item_factors, hyper, negatives))
                rounds.append(row)
                trajectory.append(server.item_factors.copy())
                estimates.append(report.estimate)
                population.end_round(epoch)
                ctx.progress(epoch)
                await ctx.network.sleep(timing.round_gap_s)
                await ctx.end_round(epoch, population, objects, values, tuple(proxies))
        nursery.cancel_scope.cancel()
    for proxy in proxies:
        proxy.finish()
    closed = [pool for proxy in proxies for pool in proxy.closed]
    for row in rounds:
        _add_pool_figures(row, closed)
    mf_np = mf_np_trajectory(initial, ctx.train, hyper, config.steps_per_epoch, len(rounds))
    final = {name: value for name, value in rounds[-1].items() if name != "round"} if rounds else {}
    if negatives is not None and mf_np:
        baseline = _hit_rates(ctx, mf_np[-1], hyper, negatives)
        final.update({f"{name}_mf_np": value for name, value in baseline.items()})
        final.update({f"hr@{cutoff}_random": cutoff / (negatives + 1) for cutoff in _CUTOFFS})
        final["eval_negatives"] = negatives
    privacy = privacy_report(
        config.epsilon, config.k, len(rounds), closed, config.min_users, config.underfull, config.delta
    )
    state: dict[str, Any] = {
        "item_factors": server.item_factors,
        "initial_item_factors": initial,
        "trajectory": trajectory,
        "estimates": estimates,
        "mf_np_trajectory": mf_np,
        "user_factors": np.stack([user.x for user in users.values()]) if users else np.empty((0, config.d)),
        "released_pools": [proxy.released for proxy in proxies],
        "closed_pools": [list(proxy.closed) for proxy in proxies],
        "population": {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes},
    }
    warnings = []
    if rounds and privacy["pools"]["releases"] == 0:
        warnings.append(
            f"no proxy released a pool: protocol.min_users = {config.min_users} distinct users never reported to "
            f"one proxy within an epoch ({ctx.train.n_users} users in the data), so no report reached the server"
        )
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, privacy=privacy,
        baselines={f"hr@{cutoff}": f"hr@{cutoff}_mf_np" for cutoff in _CUTOFFS}, invariants=list(monitors),
        warnings=warnings, state=state,
        trivial={f"hr@{cutoff}": f"hr@{cutoff}_random" for cutoff in _CUTOFFS if f"hr@{cutoff}_random" in final},
        trivial_reason=(
            f"each report is a randomized response at eps0 = {config.epsilon:g} per report ({config.k} reports per user), "
            "so the estimated gradient carries noise that shrinks only with the number of reports: at small eps0 or "
            "few users the item factors follow the noise (see hr@K_mf_np, the same training without LDP)"
        ),
    )


#: Every metric ldp_implicit reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    count("participants", "users the model V was relayed to in the epoch", "users"),
    count("reports", "reports the server aggregated in the epoch", "reports"),
    count("reports_missing", "reports awaited but not in by the epoch's deadline", "reports"),
    count("reports_late", "reports of an earlier epoch that arrived and were discarded", "reports"),
    count("silent_proxies", "proxies whose relayed count was lost in the epoch", "proxies"),
    count("anonymity_set", "fewest distinct users in a pool released for the epoch (absent if none was)", "users"),
    count("reports_held", "reports in pools that passed their deadline short of protocol.min_users and were held", "reports"),
    count("reports_dropped", "reports a proxy received for the epoch and never released", "reports"),
    *common("hr@K", "hr@K_random"),
    fraction("hr@K_mf_np", "hr@K of MF-NP: the same model, initial V and schedule without LDP (Minto et al. Fig. 5)", "higher"),
    count("eval_negatives", "sampled negatives each held-out item is ranked against (99 unless the data has fewer)", "items"),
)

PROTOCOL = ProtocolSpec(
    "ldp_implicit", LDPImplicitConfig, run, "Minto et al.: local-DP implicit federated MF through a shuffling proxy",
    plan=traffic_plan, memory=memory_estimate, resumable=True, metrics=METRICS, audit=AUDIT,
)
