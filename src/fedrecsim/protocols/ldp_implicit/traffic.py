"""ldp_implicit's traffic plan: the messages of an epoch per role, for ``fedrecsim inspect``.

Each epoch the server sends V to every proxy, the proxies relay it to their online members and tell the
server how many they relayed it to, every user that does not crash sends its k reports to a proxy, and
each proxy releases its pools of ``min_users`` users' reports to the server in batches of
``batch_size``. Every size is the wire codec's length of the message the protocol sends; V, the
reports and the counts are fixed-size, so those sizes are exact. Expectations: each user reports to a
proxy drawn uniformly, and a proxy releases ``floor(users / min_users)`` full pools per epoch (the rest of
its reports are held and dropped when the epoch ends, `pool`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

from ...actors.membership import Join
from ...memory import MemoryContext, MemoryItem
from ...network.party import SERVER, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan
from .messages import Model, Relayed, ReportBatch, Reports

_PROXY = Party(Role.PROXY, 0)


def _reports(message: type, epoch: int, count: int) -> Reports | ReportBatch:
    return message(epoch, np.zeros(count, dtype=np.int32), np.zeros((count + 7) // 8, dtype=np.uint8))


def plan(ctx: PlanContext) -> TrafficPlan:
    """ldp_implicit's `TrafficPlan` (module docstring)."""
    config = ctx.config
    epoch = max(1, ctx.rounds // 2)
    proxies = config.proxies
    model = Model(epoch, np.zeros((ctx.train.n_items, config.d)))
    everyone_online = ctx.online >= ctx.train.n_users
    relayed_bytes = float(ctx.user_bytes(lambda n: model, _PROXY, to_user=True).mean()) if ctx.train.n_users else 0.0
    report_bytes = float(ctx.user_bytes(lambda n: _reports(Reports, epoch, config.k), _PROXY, to_user=False).mean()) if ctx.train.n_users else 0.0
    replying = ctx.online * (1.0 - ctx.dropout)
    per_round = [
        *ctx.membership(Role.PROXY),
        ctx.flow(model, SERVER, _PROXY, proxies),
        Flow(Model.KIND, Role.PROXY, Role.USER, ctx.online, ctx.online * relayed_bytes, everyone_online),
        ctx.flow(Relayed(epoch, int(round(ctx.online / proxies))), _PROXY, SERVER, proxies),
        Flow(Reports.KIND, Role.USER, Role.PROXY, replying, replying * report_bytes, everyone_online),
        *_batches(ctx, epoch, replying, proxies),
    ]
    if ctx.dropout:
        per_round.append(ctx.users_flow(Join(), _PROXY, ctx.online * ctx.dropout))
    parties = {Role.USER: ctx.train.n_users, Role.SERVER: 1, Role.PROXY: proxies}
    assumptions = (
        f"each user reports to one of {proxies} prox{'y' if proxies == 1 else 'ies'} drawn uniformly; a proxy releases "
        f"floor(its users / min_users = {config.min_users}) full pools per epoch and drops the rest",
    )
    return TrafficPlan(parties, tuple(ctx.membership(Role.PROXY, initial=True)), tuple(per_round), assumptions)


def _pools(users: float, proxies: int, min_users: int) -> float:
    """Expected full pools over all proxies when ``users`` users each report to a proxy drawn uniformly:
    ``proxies * E[floor(X / min_users)]`` with X ~ Binomial(users, 1 / proxies)."""
    if proxies == 1:
        return float(math.floor(users / min_users + 1e-9))
    counts = np.arange(int(round(users)) + 1)
    return proxies * float(np.sum(scipy.stats.binom.pmf(counts, int(round(users)), 1.0 / proxies) * (counts // min_users)))


def _batches(ctx: PlanContext, epoch: int, users: float, proxies: int) -> list[Flow]:
    """The report batches of every proxy's released pools: full batches, then one with the remainder."""
    config = ctx.config
    pools = _pools(users, proxies, config.min_users)
    reports = config.min_users * config.k
    full, rest = divmod(reports, config.batch_size)
    flows = []
    if pools and full:
        flows.append(ctx.flow(_reports(ReportBatch, epoch, config.batch_size), _PROXY, SERVER, pools * full))
    if pools and rest:
        flows.append(ctx.flow(_reports(ReportBatch, epoch, rest), _PROXY, SERVER, pools))
    return flows


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """The LDP protocol's arrays (`fedrecsim.memory`): the item factors with the server's gradient estimate,
    the users' factors, the model every user receives each epoch (each decodes its own copy), and an
    epoch's reports -- k per user, each an item and d gradient values -- held by the proxies' pools, in the
    batches to the server, encoded and decoded."""
    config = ctx.config
    d = config.d
    return (
        MemoryItem("item model", 3.0 * ctx.items * d * 8, ("protocol.d", "data.items")),
        MemoryItem("user profiles", 2.0 * ctx.users * d * 8, ("protocol.d", "data.users")),
        MemoryItem("model sent to the users", 1.5 * ctx.users * ctx.items * d * 8, ("data.users", "data.items", "protocol.d")),
        MemoryItem("reports of an epoch", 4.0 * ctx.users * config.k * (d * 8 + 64), ("protocol.k", "data.users", "protocol.d")),
    )


__all__ = ["memory", "plan"]
