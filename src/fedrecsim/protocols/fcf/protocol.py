"""Non-private federated matrix factorization (FCF): the baseline every private protocol is compared to.

Each round the server selects online users (all, or at most ``max_users`` at random), sends each the
item factors it needs, and updates V from the gradients of the users that answered before the round's
deadline. Users keep their profiles; the server sees per-user gradients and rated-item sets (this is the
non-private baseline).

Step normalization (a documented choice). Hua et al. eqs. (2)-(5) sum each gradient over all of a
user's (resp. an item's) ratings. Taken as one full-batch step with gamma = 2^-5 that sum diverges on
MovieLens-shaped data, where popular items have hundreds of raters. By default (``normalize = true``)
each user's gradient is divided by its number of ratings and each item's summed gradient by the number
of users that contributed to it this round, which converges; ``normalize = false`` keeps the paper's raw
sums. With ``AlwaysOnline``, zero latency and every user selected, a run equals the vectorized
centralized reference `fedrecsim.models.mf.CentralizedMF` round for round.

Metrics per round: ``train_rmse``, ``train_mae``, ``test_rmse``, ``test_mae`` (explicit) or ``hr@10``,
``hr@5``, ``hr@2`` on the held-out interactions (implicit), plus ``participants``, ``missing`` and
``rejected`` (replies the server refused: `roles`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import trio

from ...config import param
from ...errors import ConfigError
from ...data.metrics import hit_rate_at_k, mae, rmse
from ...data.ratings import Ratings
from ...models.implicit_mf import ImplicitHyper
from ...models.mf import MFHyper, predict
from ...network.party import SERVER, Party, Role
from ...seeding import Stream
from ..runtime import Outcome, ProtocolSpec, RunContext
from .traffic import plan as traffic_plan
from .roles import MAX_ABS_GRADIENT, ExplicitServer, ExplicitUser, ImplicitServer, ImplicitUser, RoundReport


_NEGATIVES = 99


@dataclass(frozen=True)
class FCFConfig:
    feedback: Literal["explicit", "implicit"] = param(
        "explicit",
        doc="explicit: MF on the rating values (rmse, mae) | implicit: confidence-weighted MF on interactions (hr@k)",
    )
    d: int = param(50, ge=1, doc="latent dimension")
    gamma: float = param(2.0**-5, gt=0, doc="learning rate")
    lam: float = param(0.001, ge=0, doc="user regularization (lambda)")
    mu: float = param(0.001, ge=0, doc="item regularization (mu)")
    normalize: bool = param(True, doc="divide gradients by their number of terms (see module docstring)")
    max_users: int = param(0, ge=0, doc="users selected per round; 0 = every online user")
    alpha: float = param(1.0, ge=0, doc="implicit: confidence c = 1 + alpha r")
    eval_every: int = param(1, ge=1, doc="measure metrics every this many rounds (and after the last)")
    max_abs_gradient: float = param(
        MAX_ABS_GRADIENT, gt=0, doc="a user's gradient with a larger or non-finite entry is rejected (a byzantine bound)"
    )


def _parties(ctx: RunContext, config: FCFConfig) -> tuple[dict[Party, Any], Any]:
    """One user actor per user of the training data (with its own ratings), and the server."""
    if config.feedback == "explicit":
        hyper: Any = MFHyper(d=config.d, gamma=config.gamma, lam=config.lam, mu=config.mu, normalize=config.normalize)
        user_cls, server_cls = ExplicitUser, ExplicitServer
    else:
        hyper = ImplicitHyper(d=config.d, gamma=config.gamma, lam=config.lam, alpha=config.alpha, normalize=config.normalize)
        user_cls, server_cls = ImplicitUser, ImplicitServer
    index = ctx.train.by_user()
    users = {}
    for user_index in range(ctx.train.n_users):
        party = Party(Role.USER, user_index)
        start, stop = index.indptr[user_index], index.indptr[user_index + 1]
        users[party] = user_cls(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, user_index),
            index.items[start:stop], index.values[start:stop], hyper,
        )
    server = server_cls(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), ctx.train.n_items, hyper, config.max_users,
        config.max_abs_gradient,
    )
    return users, server


def _explicit_metrics(users: dict[Party, ExplicitUser], item_factors: np.ndarray, train: Ratings, test: Ratings) -> dict[str, float]:
    user_factors = np.stack([user.u for user in users.values()])
    metrics = {}
    for name, ratings in (("train", train), ("test", test)):
        if len(ratings):
            predicted = predict(user_factors, item_factors, ratings.users, ratings.items)
            metrics[f"{name}_rmse"] = rmse(predicted, ratings.values)
            metrics[f"{name}_mae"] = mae(predicted, ratings.values)
    return metrics


def _implicit_metrics(ctx: RunContext, users: dict[Party, ImplicitUser], item_factors: np.ndarray) -> dict[str, float]:
    if not len(ctx.test):
        return {}
    scores = np.stack([user.x for user in users.values()]) @ item_factors.T
    return hit_rate_at_k(scores, ctx.test, ctx.train, (2, 5, 10), n_negatives=_NEGATIVES, rng=ctx.rng(Stream.EVALUATION))


def _check_evaluable(ctx: RunContext) -> None:
    """Leave-one-out HR@K samples 99 non-interacted items per user: refuse data too small for that."""
    interacted = ctx.train.user_counts() + np.bincount(ctx.test.users, minlength=ctx.train.n_users)
    if len(ctx.test) and ctx.train.n_items - interacted.max() < _NEGATIVES:
        raise ConfigError(
            "data.items",
            f"implicit evaluation ranks each held-out item among {_NEGATIVES} items the user never touched; "
            f"a user here touched {interacted.max()} of {ctx.train.n_items} items",
        )


async def run(ctx: RunContext) -> Outcome:
    config: FCFConfig = ctx.config
    if config.feedback == "implicit":
        _check_evaluable(ctx)
    users, server = _parties(ctx, config)
    initial_item_factors = server.item_factors.copy()
    initial_user_factors = np.stack([user.u for user in users.values()]) if config.feedback == "explicit" else None
    ctx.network.attach(SERVER)
    population = ctx.population(users)
    timing = ctx.scenario.run
    rounds: list[dict[str, float]] = []
    async with population.open():
        await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(1, ctx.rounds + 1):
            population.begin_round(round_index)
            report: RoundReport = await server.round(round_index, trio.current_time() + timing.round_timeout_s)
            row: dict[str, float] = {
                "round": round_index, "participants": report.replied, "missing": report.missing, "rejected": report.rejected
            }
            if round_index % config.eval_every == 0 or round_index == ctx.rounds:
                if config.feedback == "explicit":
                    row.update(_explicit_metrics(users, server.item_factors, ctx.train, ctx.test))
                else:
                    row.update(_implicit_metrics(ctx, users, server.item_factors))
            rounds.append(row)
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
    final = {name: value for name, value in rounds[-1].items() if name != "round"} if rounds else {}
    state = {"item_factors": server.item_factors, "initial_item_factors": initial_item_factors}
    if config.feedback == "explicit":
        state["user_factors"] = np.stack([user.u for user in users.values()])
        state["initial_user_factors"] = initial_user_factors
    state["population"] = {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes}
    return Outcome(rounds_completed=len(rounds), rounds=rounds, final=final, state=state)


PROTOCOL = ProtocolSpec(
    "fcf", FCFConfig, run, "non-private federated matrix factorization (baseline)", plan=traffic_plan
)
