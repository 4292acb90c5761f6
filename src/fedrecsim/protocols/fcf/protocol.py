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

Metrics per round: ``train_rmse``, ``train_mae``, ``test_rmse``, ``test_mae`` and the same of the
predictions clipped to the data's rating scale (``*_clipped``: `Ratings.rating_range`, the scale the data
declares) (explicit) or ``hr@10``, ``hr@5``, ``hr@2`` on the held-out interactions (implicit), plus
``participants``, ``missing`` and ``rejected`` (replies the server refused: `roles`). The final metrics
add the trivial predictors: the training mean rating's errors (``*_mean_predictor``, explicit) or a
random ranking's expected hit rate (``hr@K_random`` = K / (99 + 1), implicit); `METRICS` declares them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...config import param
from ...errors import ConfigError
from ...data.metrics import hit_rate_at_k, mean_predictor_errors, rating_errors
from ...data.ratings import Ratings
from ...metric_declarations import common, count
from ...models.implicit_mf import ImplicitHyper
from ...models.mf import MFHyper, predict
from ...network.party import SERVER, Party, Role
from ...network.tcp import Group
from ...seeding import Stream
from ..runtime import Cue, Distributed, Outcome, ProtocolSpec, RunContext
from .audit import AUDIT
from .traffic import memory as memory_estimate
from .traffic import plan as traffic_plan
from .roles import MAX_ABS_GRADIENT, ExplicitServer, ExplicitUser, ImplicitServer, ImplicitUser, RoundReport


_NEGATIVES = 99
_CUTOFFS = (2, 5, 10)


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


def _roles(config: FCFConfig) -> tuple[Any, type, type]:
    """The hyperparameters, user class and server class of ``config.feedback``."""
    if config.feedback == "explicit":
        hyper: Any = MFHyper(d=config.d, gamma=config.gamma, lam=config.lam, mu=config.mu, normalize=config.normalize)
        return hyper, ExplicitUser, ExplicitServer
    hyper = ImplicitHyper(d=config.d, gamma=config.gamma, lam=config.lam, alpha=config.alpha, normalize=config.normalize)
    return hyper, ImplicitUser, ImplicitServer


def _users(ctx: RunContext, config: FCFConfig, indices: range) -> dict[Party, Any]:
    """One user actor per user of ``indices`` (with its own ratings)."""
    hyper, user_cls, _ = _roles(config)
    index = ctx.train.by_user()
    users = {}
    for user_index in indices:
        party = Party(Role.USER, user_index)
        start, stop = index.indptr[user_index], index.indptr[user_index + 1]
        users[party] = user_cls(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, user_index),
            index.items[start:stop], index.values[start:stop], hyper,
        )
    return users


def _server(ctx: RunContext, config: FCFConfig) -> Any:
    hyper, _, server_cls = _roles(config)
    return server_cls(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), ctx.train.n_items, hyper, config.max_users,
        config.max_abs_gradient,
    )


def _profiles(config: FCFConfig, users: Iterable[Any]) -> np.ndarray:
    """The users' profiles, one row each: u (explicit) or x (implicit)."""
    return np.stack([user.u if config.feedback == "explicit" else user.x for user in users])


def _explicit_metrics(user_factors: np.ndarray, item_factors: np.ndarray, train: Ratings, test: Ratings) -> dict[str, float]:
    metrics = {}
    for name, ratings in (("train", train), ("test", test)):
        if len(ratings):
            predicted = predict(user_factors, item_factors, ratings.users, ratings.items)
            metrics.update(rating_errors(predicted, ratings.values, train.rating_range, name))
    return metrics


def _implicit_metrics(ctx: RunContext, user_factors: np.ndarray, item_factors: np.ndarray) -> dict[str, float]:
    if not len(ctx.test):
        return {}
    scores = user_factors @ item_factors.T
    return hit_rate_at_k(scores, ctx.test, ctx.train, _CUTOFFS, n_negatives=_NEGATIVES, rng=ctx.rng(Stream.EVALUATION))


def _trivial(ctx: RunContext, config: FCFConfig, final: dict[str, float]) -> dict[str, str]:
    """Add the trivial predictors' metrics to ``final``; returns each metric's trivial reference.

    Explicit: the training mean rating's errors. Implicit: a random ranking's exact expected hit rate, K
    over the candidates (the held-out item and its 99 sampled negatives)."""
    if not len(ctx.test) or not final:
        return {}
    if config.feedback == "explicit":
        final.update(mean_predictor_errors(ctx.train, ctx.test))
        return {
            f"{split}_{what}{clipped}": f"{split}_{what}_mean_predictor"
            for split in ("train", "test") for what in ("rmse", "mae") for clipped in ("", "_clipped")
        }
    final.update({f"hr@{k}_random": k / (_NEGATIVES + 1) for k in _CUTOFFS})
    return {f"hr@{k}": f"hr@{k}_random" for k in _CUTOFFS}


def _reason(config: FCFConfig, rounds: list[dict[str, float]], final: dict[str, float]) -> str:
    """Why this non-private model can do worse than its trivial predictor, read from its own trajectory:
    the test metric still improving at the last round (it has not converged: too few rounds, too small a
    step, too few users answering), or best at an earlier round (it overfits)."""
    name, lower = ("test_rmse", True) if config.feedback == "explicit" else ("hr@10", False)
    measured = [(row["round"], row[name]) for row in rounds if name in row]
    if not measured:
        return "fcf adds no noise: no round was evaluated"
    (first_round, first), (last_round, last) = measured[0], measured[-1]
    best_round, best = (min if lower else max)(measured, key=lambda pair: pair[1])
    if best_round == last_round:
        return (
            f"fcf adds no noise: the model has not converged -- {name} went from {first:.4g} after round {first_round} "
            f"to {last:.4g} after round {last_round} and is still improving; it needs more rounds, a larger "
            f"protocol.gamma (now {config.gamma:g}) or more of the users answering"
        )
    return (
        f"fcf adds no noise: the model overfits -- {name} was best ({best:.4g}) after round {best_round} and is "
        f"{last:.4g} after round {last_round} (MF without biases, d = {config.d}, lam = {config.lam:g}, mu = {config.mu:g})"
    )


def _metrics(ctx: RunContext, config: FCFConfig, user_factors: np.ndarray, item_factors: np.ndarray) -> dict[str, float]:
    if config.feedback == "explicit":
        return _explicit_metrics(user_factors, item_factors, ctx.train, ctx.test)
    return _implicit_metrics(ctx, user_factors, item_factors)


def _check_evaluable(ctx: RunContext) -> None:
    """Leave-one-out HR@K samples 99 non-interacted items per user: refuse data too small for that."""
    interacted = ctx.train.user_counts() + np.bincount(ctx.test.users, minlength=ctx.train.n_users)
    if len(ctx.test) and ctx.train.n_items - interacted.max() < _NEGATIVES:
        raise ConfigError(
            "data.items",
            f"implicit evaluation ranks each held-out item among {_NEGATIVES} items the user never touched; "
            f"a user here touched {interacted.max()} of {ctx.train.n_items} items",
        )


def _check(ctx: RunContext) -> None:
    if ctx.config.feedback == "implicit":
        _check_evaluable(ctx)


def _row(round_index: int, report: RoundReport) -> dict[str, float]:
    return {"round": round_index, "participants": report.replied, "missing": report.missing, "rejected": report.rejected}


async def run(ctx: RunContext) -> Outcome:
    config: FCFConfig = ctx.config
    _check(ctx)
    users, server = _users(ctx, config, range(ctx.train.n_users)), _server(ctx, config)
    ctx.network.attach(SERVER)
    population = ctx.population(users)
    timing = ctx.scenario.run
    values = ctx.resumed(population, {"server": server}) or {
        "rounds": [],
        "initial_item_factors": server.item_factors.copy(),
        "initial_user_factors": _profiles(config, users.values()) if config.feedback == "explicit" else None,
    }
    rounds: list[dict[str, float]] = values["rounds"]
    async with population.open():
        if not rounds:
            await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(len(rounds) + 1, ctx.rounds + 1):
            population.begin_round(round_index)
            report: RoundReport = await server.round(round_index, ctx.network.now + timing.round_timeout_s)
            row = _row(round_index, report)
            if round_index % config.eval_every == 0 or round_index == ctx.rounds:
                row.update(_metrics(ctx, config, _profiles(config, users.values()), server.item_factors))
            rounds.append(row)
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            await ctx.end_round(round_index, population, {"server": server}, values)
    final = {name: value for name, value in rounds[-1].items() if name != "round"} if rounds else {}
    trivial = _trivial(ctx, config, final)
    state = {"item_factors": server.item_factors, "initial_item_factors": values["initial_item_factors"]}
    if config.feedback == "explicit":
        state["user_factors"] = _profiles(config, users.values())
        state["initial_user_factors"] = values["initial_user_factors"]
    state["population"] = {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes}
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, state=state, trivial=trivial, trivial_reason=_reason(config, rounds, final),
    )


# --------------------------------------------------------------------------- over TCP (`Distributed`)


async def _serve(ctx: RunContext, group: Group, cue: Cue) -> dict[str, Any]:
    """The server's process: once every user has joined and registered, the rounds of `run`."""
    config: FCFConfig = ctx.config
    server = _server(ctx, config)
    initial_item_factors = server.item_factors.copy()
    ctx.network.attach(SERVER)
    await cue.ready()
    timing = ctx.scenario.run
    everyone = [Party(Role.USER, index) for index in range(ctx.train.n_users)]
    await server.wait_until(
        lambda: server.knows(everyone), deadline=ctx.network.now + timing.round_timeout_s, what="every user's join"
    )
    rounds = []
    for round_index in range(1, ctx.rounds + 1):
        ctx.network.ledger.begin_round(round_index, len(server.members))
        rounds.append(_row(round_index, await server.round(round_index, ctx.network.now + timing.round_timeout_s)))
        ctx.progress(round_index)
        await ctx.network.sleep(timing.round_gap_s)
    return {"rounds": rounds, "item_factors": server.item_factors, "initial_item_factors": initial_item_factors}


async def _live(ctx: RunContext, group: Group, cue: Cue) -> dict[str, Any]:
    """A users' process: its block of users online until the run stops; their profiles are its part."""
    config: FCFConfig = ctx.config
    users = _users(ctx, config, group.users)
    initial = _profiles(config, users.values()) if users else np.empty((0, config.d))
    population = ctx.population(users)
    await cue.ready()
    async with population.open():
        await cue.stopped()
    final = _profiles(config, users.values()) if users else initial
    return {"users": group.users, "user_factors": final, "initial_user_factors": initial}


def _assembled(parts: list[dict[str, Any]], name: str) -> np.ndarray:
    """The users' rows of ``name`` from every users' process, in user order."""
    ordered = sorted(parts, key=lambda part: part["users"].start)
    return np.concatenate([part[name] for part in ordered])


def _distributed_outcome(ctx: RunContext, parts: Mapping[Role, list[dict[str, Any]]]) -> Outcome:
    """The outcome of a run over TCP: `run`'s, with the metrics measured after the last round only (the
    users' profiles stay in their processes until the run is over)."""
    config: FCFConfig = ctx.config
    served = parts[Role.SERVER][0]
    user_factors = _assembled(parts[Role.USER], "user_factors")
    rounds = served["rounds"]
    rounds[-1].update(_metrics(ctx, config, user_factors, served["item_factors"]))
    final = {name: value for name, value in rounds[-1].items() if name != "round"}
    trivial = _trivial(ctx, config, final)
    state = {"item_factors": served["item_factors"], "initial_item_factors": served["initial_item_factors"]}
    if config.feedback == "explicit":
        state["user_factors"] = user_factors
        state["initial_user_factors"] = _assembled(parts[Role.USER], "initial_user_factors")
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, state=state, trivial=trivial, trivial_reason=_reason(config, rounds, final),
    )


DISTRIBUTED = Distributed(
    (Role.SERVER, Role.USER), {Role.SERVER: _serve, Role.USER: _live}, _distributed_outcome, check=_check
)


#: Every metric fcf reports (`fedrecsim.metric_reference`).
METRICS = (
    count("participants", "users whose gradient the server received before the round's deadline", "users"),
    count("missing", "selected users whose reply did not arrive before the round's deadline", "users"),
    count("rejected", "replies the server refused (a gradient entry non-finite or beyond protocol.max_abs_gradient)", "replies"),
    *common(
        "train_rmse", "train_mae", "test_rmse", "test_mae",
        "train_rmse_clipped", "train_mae_clipped", "test_rmse_clipped", "test_mae_clipped",
        "train_rmse_mean_predictor", "train_mae_mean_predictor", "test_rmse_mean_predictor", "test_mae_mean_predictor",
        "hr@K", "hr@K_random",
    ),
)

PROTOCOL = ProtocolSpec(
    "fcf", FCFConfig, run, "non-private federated matrix factorization (baseline)", plan=traffic_plan, memory=memory_estimate,
    distributed=DISTRIBUTED, resumable=True, metrics=METRICS, audit=AUDIT,
)
