"""Ribero et al. (2022), "Federating recommendations using differentially private prototypes".

H silos (``Role.SILO``) and an untrusted server, exactly two communication rounds (Algorithm 1):

1. each silo sends ``k`` epsilon-DP prototypes of its users' rows (Algorithm 2, `fedrecsim.mechanisms.
   private_kmeans` with Algorithm 3, `fedrecsim.mechanisms.sparse_recovery`);
2. the server stacks them, clips negatives, learns the item matrix V by NMF (eq. 2, `fedrecsim.models.
   nmf`) and broadcasts it; each silo fits its users' factors with V fixed (NNLS per user) and predicts
   locally. Nothing else is sent.

The silo partition is the ``[data]`` table's (`fedrecsim.data.silos`); availability models apply to
users, and this protocol has only silos, which are always online. ``run.rounds`` must be 2.

Metrics (Sec. 4.2-4.3, on the split's test entries; the paper's is ``split = "users"``, 20 % of users with
five entries each): ``test_rmse``, ``mean_rank`` (eq. 4) and ``map@10`` (eqs. 5-6, `fedrecsim.data.
ranking`), and with ``baselines = true`` the same for Full (centralized NMF on all training data,
``_full``), Local (NMF per silo, ``_local``), MF + k-means (non-private k-means prototypes, ``_kmeans``),
MF + k-random exemplars (``_exemplars``) and Random (uniform scores and predictions on the data's
scale, ``_random``). ``Outcome.baselines`` pairs each metric with ``_kmeans``, the non-private version
of the same pipeline (Sec. 4.6). Every model's ``test_rmse_clipped`` is that of its predictions clipped to
the data's declared scale (`Ratings.rating_range`; post-processing, no privacy cost), and
``test_rmse_mean_predictor`` the trivial predictor's (the training mean), ``mean_rank_chance`` and
``map@K_chance`` a random ranking's exact expectation; ``Outcome.trivial`` pairs the private model's
metrics with them, ``trivial_reason`` gives the noise against the signal
(`_noise_reason`). `METRICS` declares every metric.

Departures from the paper, each for a stated reason:

* **Constants** (feasibility). The paper sets the JL dimension ``p = 8 log n`` (``2^p`` children per
  cube), ``T = 2 log(1/delta)`` trials, ``25 k log(n/delta)`` grids and ``n/delta`` swaps: far beyond
  any run (2^51 children per cube at n = 600). As the authors' public code does, the default
  ``projection_dim = 0`` means ``floor(0.5 ln m_h)`` for a silo of ``m_h`` users, and ``trials = 1``;
  ``candidate_grids`` (2, as Balcan et al.'s code) and ``swap_steps`` (20) are explicit counts. The
  accounting is exact for the constants used (`accounting`).
* **Bounds**. Records are truncated to ``support`` (s) entries and clipped to ``[0, value_bound]``
  (the data scale's maximum), which bounds every record's L2 norm by ``Lambda = value_bound sqrt(s)``;
  the paper assumes ``X in B(0, Lambda)`` and ``||x||_0 <= s`` without saying how. The authors' code took
  both bounds from the data, which is not private.
* **Sparse recovery** divides a noisy cluster sum by a noisy size (the paper divides by the true size,
  which is private) and accounts for both; see `fedrecsim.mechanisms.sparse_recovery`.
* **Budget split**. The paper's per-subroutine constants add up to more than epsilon; ours add up to
  epsilon exactly (`accounting`, reported in ``privacy.split``).
* **Eq. (2)** is minimized with the data term summed, not averaged (`fedrecsim.models.nmf`: the mean
  against ``lam = 0.1`` would zero the factors); V by multiplicative updates, U by exact NNLS.

Utility at small epsilon (measured, not assumed; ``scenarios/ribero_epsilon_k.toml``). Sparse recovery
adds ``Laplace(s * bound / eps_values)`` to each revealed entry of a cluster's sum, with ``eps_values =
0.169 eps`` under the default split. A cluster of ``c`` users whose records keep ``s`` of ``n`` items
sums to about ``c (s / n) mu`` per item (``mu`` the mean observed value), so the signal-to-noise ratio
of a revealed entry is about ``0.12 c mu eps / (n * bound)``, whatever ``s``. On the synthetic scenario
(``n = 500``, ``bound = 10``, ``mu ~ 1.65``, ``c ~ 5``) it reaches 1 near ``eps ~ 5,000``: below that
the prototypes are mostly noise and the private model ranks no better than Random, and at ``eps = 1``
a cluster would need about 25,000 users. The faithful mechanism is kept; the study prints where the
private model meets MF + k-means instead of tuning the scenario until the paper's curves appear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...config import param
from ...data.metrics import mean_predictor_errors, rmse
from ...data.ranking import chance_ranking_metrics, ranking_metrics
from ...data.ratings import IntArray, Ratings
from ...data.silos import silo_assignment
from ...errors import ConfigError
from ...invariants import InvariantMonitor
from ...mechanisms.private_kmeans import PrototypeBudget, PrototypeParams
from ...memory import MemoryContext, MemoryItem
from ...metric_declarations import MetricInfo, common, count, error, fraction
from ...models.kmeans import kmeans
from ...models.nmf import NMFHyper, nmf_observed
from ...network.party import SERVER, Party, Role
from ...seeding import Stream
from ..runtime import Outcome, PaperFigure, ProtocolSpec, RunContext
from .accounting import budget_split, privacy_report
from .audit import AUDIT
from .pipeline import SiloData, item_factors, projection_dim, silo_data, user_factors
from .roles import PrototypeServer, PrototypeSilo

# Baselines draw from Stream.PROTOCOL with these ids; the Random baseline from Stream.EVALUATION.
_FULL, _LOCAL, _KMEANS, _EXEMPLARS = 1, 2, 3, 4


@dataclass(frozen=True)
class PrototypesConfig:
    epsilon: float = param(1.0, gt=0, doc="each silo's budget; the protocol is epsilon-DP (parallel composition)")
    k: int = param(10, ge=1, doc="prototypes per silo (the paper: 10 for eICU, 50 for MovieLens)")
    rank: int = param(10, ge=1, doc="latent factors l of the NMF")
    lam: float = param(0.1, ge=0, doc="ridge weight lambda of eq. (2)")
    nmf_iterations: int = param(200, ge=1, doc="multiplicative updates of every NMF (server, baselines)")
    support: int = param(50, ge=1, doc="s: records keep at most s entries; a prototype reveals s entries")
    value_bound: float = param(0.0, ge=0, doc="largest entry value; 0 = the top of the data's rating scale")
    projection_dim: int = param(0, ge=0, le=16, doc="JL dimension p; 0 = floor(0.5 ln m_h) per silo (authors' code)")
    trials: int = param(1, ge=1, doc="T of Algorithm 2 (paper: 2 log(1/delta); authors' code: 1)")
    candidate_grids: int = param(2, ge=1, doc="shifted grids per trial in Algorithm 5 (paper: 25 k log(n/delta))")
    swap_steps: int = param(20, ge=0, doc="swaps per trial in Algorithm 6 (paper: n/delta)")
    budget_candidates: float = param(0.125, gt=0, lt=1, doc="fraction of epsilon for candidate centers")
    budget_localswap: float = param(0.125, gt=0, lt=1, doc="fraction of epsilon for the local swaps")
    budget_selection: float = param(0.25, gt=0, lt=1, doc="fraction of epsilon for choosing a trial (trials > 1)")
    recovery_support: float = param(0.45, gt=0, lt=1, doc="fraction of the recovery budget for the Gumbel support")
    recovery_values: float = param(0.45, gt=0, lt=1, doc="fraction of the recovery budget for the Laplace values")
    baselines: bool = param(True, doc="also run Full, Local, MF + k-means, MF + k-random exemplars and Random")
    map_k: int = param(10, ge=1, doc="k of MAP@k")

    def __post_init__(self) -> None:
        self.budget()  # the split must leave the recovery a positive share

    def budget(self) -> PrototypeBudget:
        return budget_split(
            self.epsilon, self.trials, self.budget_candidates, self.budget_localswap, self.budget_selection,
            self.recovery_support, self.recovery_values,
        )


def silo_params(config: PrototypesConfig, m: int, bound: float) -> PrototypeParams:
    """The constants of Algorithm 2 for a silo of ``m`` users."""
    return PrototypeParams(
        k=config.k, s=config.support, bound=bound, projection_dim=projection_dim(config.projection_dim, m),
        trials=config.trials, grids=config.candidate_grids, swap_steps=config.swap_steps,
    )


def value_bound(config: PrototypesConfig, train: Ratings) -> float:
    """The public bound of record entries; the data must be non-negative for NMF."""
    low, high = train.rating_range
    if low < 0:
        raise ConfigError("data", f"prototypes factorizes non-negative data; the data's scale is [{low:g}, {high:g}]")
    return config.value_bound or float(high)


#: Laplace scales beyond which the server takes a prototype entry for a byzantine one (`prototype_bound`).
TAIL_SCALES = 50.0


def values_scale(config: PrototypesConfig, budget: PrototypeBudget, bound: float) -> float:
    """The Laplace scale of the noise on each revealed entry of a cluster's sum (`fedrecsim.mechanisms.
    sparse_recovery`), from the public budget split."""
    per_cluster = budget.recovery / config.trials / 2
    return config.support * bound / (per_cluster * budget.values_share)


def prototype_bound(config: PrototypesConfig, budget: PrototypeBudget, bound: float, n_users: int) -> float:
    """The largest magnitude an honest prototype entry reaches but with probability below e^-50: every user
    of the federation in one cluster at the value bound, divided by a noisy size of at least 1, plus 50
    scales of the Laplace noise on a revealed sum (`fedrecsim.mechanisms.sparse_recovery`; the scale from
    the public budget split, as each silo computes it). The server rejects prototypes beyond it."""
    return n_users * bound + TAIL_SCALES * values_scale(config, budget, bound)


def evaluate(scores_of: Any, predict: Any, train: Ratings, test: Ratings, k: int, suffix: str = "") -> dict[str, float]:
    """``test_rmse``, ``test_rmse_clipped`` (predictions clipped to the data's declared scale), ``mean_rank``
    and ``map@k`` (with ``suffix``) of one model."""
    if len(test):
        predicted = predict(test.users, test.items)
        metrics = {"test_rmse": rmse(predicted, test.values), "test_rmse_clipped": rmse(np.clip(predicted, *train.rating_range), test.values)}
    else:
        metrics = {"test_rmse": float("nan"), "test_rmse_clipped": float("nan")}
    metrics.update(ranking_metrics(scores_of, train, test, k))
    return {f"{name}{suffix}": value for name, value in metrics.items()}


class FactorModel:
    """Scores from per-user factors and per-silo item matrices: ``U[u] . V_{silo(u)}[i]``."""

    def __init__(self, n_users: int, rank: int) -> None:
        self.U = np.zeros((n_users, rank))
        self.silo_of_user = np.full(n_users, -1)
        self.item_matrices: list[np.ndarray] = []

    def add(self, users: IntArray, U: np.ndarray, V: np.ndarray) -> None:
        self.U[users] = U
        self.silo_of_user[users] = len(self.item_matrices)
        self.item_matrices.append(V)

    def scores(self, users: IntArray) -> np.ndarray:
        n_items = self.item_matrices[0].shape[0] if self.item_matrices else 0
        out = np.zeros((users.size, n_items))
        for index, V in enumerate(self.item_matrices):
            rows = self.silo_of_user[users] == index
            out[rows] = self.U[users[rows]] @ V.T
        return out

    def predict(self, users: IntArray, items: IntArray) -> np.ndarray:
        out = np.zeros(users.size)
        for index, V in enumerate(self.item_matrices):
            rows = self.silo_of_user[users] == index
            out[rows] = np.einsum("ij,ij->i", self.U[users[rows]], V[items[rows]])
        return out


def shared_item_model(silos: list[SiloData], V: np.ndarray, lam: float, n_users: int) -> FactorModel:
    """Every silo fits its users to the same V (the federated pipeline without messages)."""
    model = FactorModel(n_users, V.shape[1])
    for silo in silos:
        model.add(silo.users, user_factors(silo.rows, V, lam), V)
    return model


def baseline_metrics(ctx: RunContext, config: PrototypesConfig, silos: list[SiloData]) -> dict[str, float]:
    """Full, Local, MF + k-means, MF + k-random exemplars and Random (module docstring)."""
    train, test, k = ctx.train, ctx.test, config.map_k
    hyper = NMFHyper(config.rank, config.lam, config.nmf_iterations)
    metrics: dict[str, float] = {}
    matrix = sp.vstack([silo.rows for silo in silos]).tocsr()
    users = np.concatenate([silo.users for silo in silos])
    U, V = nmf_observed(ctx.rng(Stream.PROTOCOL, _FULL), matrix, hyper)
    full = FactorModel(train.n_users, config.rank)
    full.add(users, U, V)
    metrics.update(evaluate(full.scores, full.predict, train, test, k, "_full"))
    local = FactorModel(train.n_users, config.rank)
    for silo in silos:
        U_h, V_h = nmf_observed(ctx.rng(Stream.PROTOCOL, _LOCAL, silo.label), silo.rows, hyper)
        local.add(silo.users, U_h, V_h)
    metrics.update(evaluate(local.scores, local.predict, train, test, k, "_local"))
    for name, stream in (("kmeans", _KMEANS), ("exemplars", _EXEMPLARS)):
        rng = ctx.rng(Stream.PROTOCOL, stream)
        prototypes = []
        for silo in silos:
            if name == "kmeans":
                prototypes.append(kmeans(rng, silo.rows, config.k))
            else:
                picked = rng.choice(silo.users.size, size=min(config.k, silo.users.size), replace=False)
                prototypes.append(silo.rows[np.sort(picked)].toarray())
        model = shared_item_model(silos, item_factors(rng, prototypes, hyper), config.lam, train.n_users)
        metrics.update(evaluate(model.scores, model.predict, train, test, k, f"_{name}"))
    rng = ctx.rng(Stream.EVALUATION)
    low, high = train.rating_range

    def random_scores(chosen: IntArray) -> np.ndarray:
        return rng.random((chosen.size, train.n_items))

    def random_predictions(chosen: IntArray, items: IntArray) -> np.ndarray:
        return rng.uniform(low, high, size=chosen.size)

    metrics.update(evaluate(random_scores, random_predictions, train, test, k, "_random"))
    return metrics


async def run(ctx: RunContext) -> Outcome:
    config: PrototypesConfig = ctx.config
    if ctx.rounds != 2:
        raise ConfigError("run.rounds", f"prototypes runs exactly two communication rounds (Algorithm 1); got {ctx.rounds}")
    bound = value_bound(config, ctx.train)
    budget = config.budget()
    silos = silo_data(ctx.train, silo_assignment(ctx.scenario.data, ctx.train, ctx.seed))
    hyper = NMFHyper(config.rank, config.lam, config.nmf_iterations)
    actors = {
        Party(Role.SILO, silo.label): PrototypeSilo(
            Party(Role.SILO, silo.label), ctx.network, ctx.rng(Stream.ACTOR, Role.SILO.code, silo.label), silo,
            silo_params(config, silo.users.size, bound), budget, config.lam,
        )
        for silo in silos
    }
    server = PrototypeServer(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), hyper, (config.k, ctx.train.n_items),
        prototype_bound(config, budget, bound, ctx.train.n_users),
    )
    parties = sorted(actors)
    for party in [SERVER, *parties]:
        ctx.network.attach(party)
    ledger, timing = ctx.network.ledger, ctx.scenario.run
    objects = {"server": server, **{str(party): actors[party] for party in parties}}
    values = ctx.resumed(None, objects) or {
        "rounds": [], "missing": [],
        "support": InvariantMonitor("prototype_support", "every prototype the server received reveals at most s entries"),
    }
    rounds: list[dict[str, float]] = values["rounds"]
    support: InvariantMonitor = values["support"]

    if not rounds:
        ledger.begin_round(1, len(parties) + 1)
        for party in parties:
            actors[party].send_prototypes()
        values["missing"] = await server.learn(parties, ctx.network.now + timing.round_timeout_s)
        for party, prototypes in server.received.items():
            revealed = int(np.count_nonzero(prototypes, axis=1).max())
            support.check(revealed <= config.support, f"{party}: a prototype reveals {revealed} > s = {config.support} entries")
        rounds.append({
            "round": 1, "prototypes_received": len(server.received), "silos_missing": len(values["missing"]),
            "silos_rejected": len(server.rejected),
        })
        ctx.progress(1)
        await ctx.end_round(1, None, objects, values)
    missing: list[Party] = values["missing"]

    ledger.begin_round(2, len(parties) + 1)
    server.broadcast(parties)
    deadline = ctx.network.now + timing.round_timeout_s
    fitted = [party for party in parties if await actors[party].fit(deadline)]
    rounds.append({"round": 2, "silos_fitted": len(fitted), "silos_without_model": len(parties) - len(fitted)})
    ctx.progress(2)
    await ctx.end_round(2, None, objects, values)

    warnings = []
    if missing:
        warnings.append(f"{len(missing)} silo(s) sent no prototypes in time: {', '.join(map(str, missing))}")
    if server.rejected:
        warnings.append(
            f"{len(server.rejected)} silo(s) sent prototypes the server rejected (ledger.faults): "
            f"{', '.join(map(str, server.rejected))}"
        )
    if len(fitted) < len(parties):
        warnings.append(f"{len(parties) - len(fitted)} silo(s) received no item matrix; their users are unscored")
    model = FactorModel(ctx.train.n_users, config.rank)
    for party in fitted:
        silo = actors[party]
        model.add(silo.data.users, silo.user_factors, server.item_factors)
    final: dict[str, float] = {"silos": float(len(parties)), **_users_per_silo(silos)}
    if model.item_matrices:
        final.update(evaluate(model.scores, model.predict, ctx.train, ctx.test, config.map_k))
    if config.baselines:
        final.update(baseline_metrics(ctx, config, silos))
    trivial = _trivial(final, ctx, config)
    per_silo = [ledger.party(party) for party in parties]
    n_items = ctx.train.n_items
    params = {str(party): actors[party].params for party in parties}
    privacy = privacy_report(config.epsilon, budget, next(iter(params.values())), len(parties))
    privacy["constants"]["projection_dim"] = {name: p.projection_dim for name, p in params.items()}
    return Outcome(
        rounds_completed=len(rounds),
        rounds=rounds,
        final=final,
        privacy=privacy,
        baselines={
            name: f"{name}_kmeans" for name in ("test_rmse", "mean_rank", f"map@{config.map_k}") if name in final
        },
        paper_figures=[
            PaperFigure(
                "values a silo sends and receives (k n up + l n down)",
                f"knH + ln over H silos (Table 1): {config.k * n_items + config.rank * n_items} float64 per silo here",
                float(np.mean([c["sent_bytes"] + c["recv_bytes"] for c in per_silo])) if per_silo else None,
                setting="measured: bytes per silo over the whole run, including message framing",
                population="every silo (mean over silos)",
                population_size=len(per_silo),
                population_samples=len(per_silo),
                measured_max=float(max(c["sent_bytes"] + c["recv_bytes"] for c in per_silo)) if per_silo else None,
            )
        ],
        warnings=warnings,
        trivial=trivial,
        trivial_reason=_noise_reason(config, budget, bound, silos, ctx.train),
        invariants=[support],
        state={
            "item_factors": server.item_factors,
            "user_factors": model.U,
            "prototypes": dict(server.received),
            "silo_users": {party: actors[party].data.users for party in parties},
        },
    )


def memory_estimate(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """The prototypes protocol's arrays (`fedrecsim.memory`): the dense users x items score and observation
    matrices of the evaluation and the baselines' NMFs (three at a time), and the factors."""
    rank = ctx.config.rank
    return (
        MemoryItem("dense scores and baselines", 3.0 * ctx.users * ctx.items * 8, ("data.users", "data.items")),
        MemoryItem("factors", 4.0 * (ctx.users + ctx.items) * rank * 8, ("protocol.rank", "data.users", "data.items")),
    )


def _users_per_silo(silos: list[SiloData]) -> dict[str, float]:
    """The silos' sizes: users are not parties here (the silos hold their rows), so this is who takes part."""
    sizes = np.array([silo.users.size for silo in silos], dtype=np.float64)
    if not sizes.size:
        return {}
    return {"users_per_silo_min": float(sizes.min()), "users_per_silo_mean": float(sizes.mean()), "users_per_silo_max": float(sizes.max())}


def _trivial(final: dict[str, float], ctx: RunContext, config: PrototypesConfig) -> dict[str, str]:
    """Add the trivial predictors to ``final`` -- the mean predictor's test RMSE, a random ranking's exact
    expected mean_rank and map@k (``_chance``; `chance_ranking_metrics`) -- and return the private model's
    metrics paired with them."""
    if len(ctx.test):
        final.update({name: value for name, value in mean_predictor_errors(ctx.train, ctx.test).items() if name == "test_rmse_mean_predictor"})
        final.update(chance_ranking_metrics(ctx.train, ctx.test, config.map_k))
    pairs = {"test_rmse": "test_rmse_mean_predictor", "test_rmse_clipped": "test_rmse_mean_predictor"}
    pairs.update({name: f"{name}_chance" for name in ("mean_rank", f"map@{config.map_k}")})
    return {name: other for name, other in pairs.items() if name in final and other in final}


def _noise_reason(config: PrototypesConfig, budget: PrototypeBudget, bound: float, silos: list[SiloData], train: Ratings) -> str:
    """The noise on a prototype's revealed entries against a cluster's sum (module docstring, "Utility at
    small epsilon")."""
    users = np.array([silo.users.size for silo in silos], dtype=np.float64)
    cluster = float(users.mean()) / config.k if users.size else 0.0
    kept = min(config.support, train.n_items) / train.n_items if train.n_items else 0.0
    signal = cluster * kept * float(np.mean(train.values)) if len(train) else 0.0
    return (
        f"each revealed entry of a cluster's sum carries Laplace noise of scale {values_scale(config, budget, bound):,.4g} "
        f"(eps = {config.epsilon:g}, s = {config.support}, value bound {bound:g}), against an entry of about {signal:.3g} "
        f"(a cluster of ~{cluster:.3g} users, each keeping {config.support} of {train.n_items} items, mean value "
        f"{float(np.mean(train.values)) if len(train) else 0.0:.3g}): below eps of a few thousand the prototypes are mostly noise"
    )


_MODELS = {
    "": "the private model (DP prototypes, the server's NMF, each silo's NNLS)",
    "_full": "Full: centralized NMF on all training data (protocol.baselines)",
    "_local": "Local: NMF per silo on its own users (protocol.baselines)",
    "_kmeans": "MF + k-means: the same pipeline with non-private k-means prototypes (protocol.baselines)",
    "_exemplars": "MF + k-random exemplars: k random users' rows as prototypes (protocol.baselines)",
    "_random": "Random: uniform scores and uniform predictions on the data's scale (protocol.baselines)",
}

#: Every metric prototypes reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    count("silos", "silos in the run", "silos"),
    count("users_per_silo_min", "users held by the smallest silo (the users are no parties: their silo holds their rows)", "users"),
    MetricInfo("users_per_silo_mean", "users held by a silo, on average over the silos", "users", 0.0),
    count("users_per_silo_max", "users held by the largest silo", "users"),
    count("prototypes_received", "round 1: silos whose prototypes the server accepted", "silos"),
    count("silos_missing", "round 1: silos whose prototypes did not arrive before the deadline", "silos"),
    count("silos_rejected", "round 1: silos whose prototypes the server rejected (beyond the honest bound)", "silos"),
    count("silos_fitted", "round 2: silos that received V and fitted their users", "silos"),
    count("silos_without_model", "round 2: silos that received no V; their users are unscored", "silos"),
    *(
        info
        for suffix, model in _MODELS.items()
        for info in (
            error(f"test_rmse{suffix}", f"test RMSE of {model}"),
            error(f"test_rmse_clipped{suffix}", f"test RMSE of {model}, predictions clipped to the data's declared scale"),
            MetricInfo(
                f"mean_rank{suffix}",
                f"mean percentile rank (eq. 4) of the test items among each user's candidates, weighted by value, of {model} "
                "(0 = top, 1 = bottom; a random ranking: 0.5)",
                "percentile", 0.0, 1.0, "lower",
            ),
            fraction(f"map@K{suffix}", f"MAP@K (eqs. 5-6, K = protocol.map_k) of {model}", "higher"),
        )
    ),
    *common("test_rmse_mean_predictor"),
    MetricInfo(
        "mean_rank_chance", "mean_rank's exact expectation under a uniformly random ranking: 0.5", "percentile", 0.0, 1.0, "lower"
    ),
    fraction("map@K_chance", "MAP@K's exact expectation under a uniformly random ranking of each user's candidates", "higher"),
)

PROTOCOL = ProtocolSpec(
    "prototypes", PrototypesConfig, run, "Ribero et al.: DP prototypes across silos, two rounds", resumable=True,
    memory=memory_estimate, metrics=METRICS, audit=AUDIT,
)
