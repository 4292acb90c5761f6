"""FCF's traffic plan: the messages of a round per role, for ``fedrecsim inspect``.

A user sends ``fcf.register`` (its rated items) each time it joins -- the initial online users in the
set-up, every joining user in a round. Each round the server selects ``min(max_users, online)`` online
users (all of them when ``max_users = 0``) uniformly at random; explicit feedback sends each the rows of
V for its rated items and gets as many gradient rows back, implicit feedback sends each the whole V
(``send_many``) and gets a full gradient back. Users that crash mid-round (``dropout``) send nothing
back. Every size is the wire codec's length of the message the protocol sends, computed user by user;
they are exact when every user is online and selected every round, expectations otherwise (which users
are selected, which crash, which join).
"""

from __future__ import annotations

import numpy as np

from ...memory import MemoryContext, MemoryItem
from ...network.party import SERVER, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan
from .messages import ItemGradients, ItemVectors, Model, ModelGradient, Register

_USER = Party(Role.USER, 0)


def plan(ctx: PlanContext) -> TrafficPlan:
    """FCF's `TrafficPlan` (module docstring)."""
    config = ctx.config
    rnd, d, n_items = max(1, ctx.rounds // 2), config.d, ctx.train.n_items
    selected = min(float(config.max_users), ctx.online) if config.max_users else ctx.online
    replying = selected * (1.0 - ctx.dropout)
    exact = ctx.online >= ctx.train.n_users and not ctx.joins and not ctx.dropout and selected >= ctx.online

    def mean_size(make, *, to_user: bool) -> float:  # type: ignore[no-untyped-def]
        return float(ctx.user_bytes(make, SERVER, to_user=to_user).mean()) if ctx.train.n_users else 0.0

    def flow(make, messages: float, *, to_user: bool, exact: bool) -> Flow:  # type: ignore[no-untyped-def]
        src, dst = (Role.SERVER, Role.USER) if to_user else (Role.USER, Role.SERVER)
        return Flow(type(make(1)).KIND, src, dst, messages, messages * mean_size(make, to_user=to_user), exact)

    def register(n: int) -> Register:
        return Register(np.arange(n, dtype=np.int32))

    if config.feedback == "explicit":
        exchange = (
            flow(lambda n: ItemVectors(rnd, np.zeros((n, d))), selected, to_user=True, exact=exact),
            flow(lambda n: ItemGradients(rnd, np.zeros((n, d))), replying, to_user=False, exact=exact),
        )
        joining: tuple[Flow, ...] = (flow(register, ctx.joins, to_user=False, exact=not ctx.joins),)
        setup_register: tuple[Flow, ...] = (flow(register, ctx.initial_online, to_user=False, exact=exact),)
    else:
        exchange = (
            flow(lambda n: Model(rnd, np.zeros((n_items, d))), selected, to_user=True, exact=exact),
            flow(lambda n: ModelGradient(rnd, np.zeros((n_items, d))), replying, to_user=False, exact=exact),
        )
        joining = setup_register = ()
    per_round = (*ctx.membership(), *joining, *exchange)
    setup = (*ctx.membership(initial=True), *setup_register)
    parties = {Role.USER: ctx.train.n_users, Role.SERVER: 1}
    if not config.max_users:
        selection = "every online user"
    else:
        selection = f"at most {config.max_users} online user{'' if config.max_users == 1 else 's'}"
    assumptions = (f"the server selects {selection} per round uniformly at random",)
    return TrafficPlan(parties, setup, per_round, assumptions)


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """FCF's arrays (`fedrecsim.memory`): the server's V with its gradient sums, the users' profiles, and the
    messages of a round -- each selected user's rows of V (explicit) or the whole V (implicit) out and as
    many gradient rows back, each held encoded and decoded."""
    config = ctx.config
    d, items = config.d, ctx.items
    selected = min(config.max_users, ctx.users) if config.max_users else ctx.users
    rows = ctx.entries_per_user if config.feedback == "explicit" else float(items)
    return (
        MemoryItem("server model", 3.0 * items * d * 8, ("protocol.d", "data.items")),
        MemoryItem("user profiles", 2.0 * ctx.users * d * 8, ("protocol.d", "data.users")),
        MemoryItem(
            "messages of a round", 4.0 * selected * rows * d * 8,
            ("protocol.d", "data.items" if config.feedback == "implicit" else "data.ratings", "protocol.max_users"),
        ),
    )
