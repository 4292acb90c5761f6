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
MF + k-random exemplars (``_exemplars``) and Random (uniform scores and predictions on the public
scale, ``_random``). ``Outcome.baselines`` pairs each metric with ``_kmeans``, the non-private version
of the same pipeline (Sec. 4.6). Every model's ``test_rmse`` is that of its raw predictions -- an NMF
fitted to noise predicts far off the scale (4.68 on MovieLens-100k in zip silos at epsilon 1) -- and
``test_rmse_clipped`` that of its predictions clipped to the public scale (`PublicBounds.scale`: the
data's declared scale, else ``[0, value_bound]``; post-processing, no privacy cost), as dpmf and fcf
report both. ``test_rmse_mean_predictor`` is the trivial predictor's (the training mean),
``mean_rank_chance`` and ``map@K_chance`` a random ranking's exact expectation; ``Outcome.trivial`` pairs
the private model's metrics with them, ``trivial_reason`` gives the noise against the signal
(`_noise_reason`). `METRICS` declares every metric.

What the simulator says about the prototypes (it sees the silos' records and true cluster sizes; nothing
of this is released): ``prototype_snr`` (`signal_to_noise`, the estimate of "Utility at small epsilon"
below) and ``empty_clusters``, the clusters of the silos' chosen trials that hold no user -- at small
epsilon the candidate set collapses to the grids' roots, so most of the k clusters are empty and their
prototypes are noise alone. The run warns when ``prototype_snr < 1``, when a cluster is empty and when a
silo holds fewer users than k (at least ``k - m_h`` of its clusters are then empty); ``state`` keeps the
``cluster_sizes``.

Departures from the paper, each for a stated reason:

* **Constants** (feasibility). The paper sets the JL dimension ``p = 8 log n`` (``2^p`` children per
  cube), ``T = 2 log(1/delta)`` trials, ``25 k log(n/delta)`` grids and ``n/delta`` swaps: far beyond
  any run (2^51 children per cube at n = 600). As the authors' public code does, the default
  ``projection_dim = 0`` means ``floor(0.5 ln m_h)`` for a silo of ``m_h`` users, and ``trials = 1``;
  ``candidate_grids`` (2, as Balcan et al.'s code) and ``swap_steps`` (20) are explicit counts. The
  accounting is exact for the constants used (`accounting`).
* **Bounds**. Records are truncated to ``support`` (s) non-zero entries and clipped to ``[0,
  value_bound]``, which bounds every record's L2 norm by ``Lambda = value_bound sqrt(s)``; the paper
  assumes ``X in B(0, Lambda)`` and ``||x||_0 <= s`` without saying how. The authors' code took both
  bounds from the data, which is not private. Here both are public: ``s`` is a key, and ``value_bound``
  is ``protocol.value_bound`` or the top of the data's *declared* scale (`public_bounds`). Data whose
  scale is its own smallest and largest value -- ``data.source = "npz"`` without ``data.rating_range``,
  Last.fm play counts -- is refused unless ``protocol.value_bound`` is set: noise calibrated to the
  data's maximum would make the noise depend on the data, and the epsilon claim would not hold. The
  truncation counts non-zero values, not stored cells (`truncate_records`): on count data a stored 0 is
  an observation, but it adds nothing to a cluster's sum and must not take one of the ``s`` places.
* **Sparse recovery** divides a noisy cluster sum by a noisy size (the paper divides by the true size,
  which is private) and accounts for both; see `fedrecsim.mechanisms.sparse_recovery`.
* **Budget split**. The paper's per-subroutine constants add up to more than epsilon; ours add up to
  epsilon exactly (`accounting`, reported in ``privacy.split``).
* **Eq. (2)** is minimized with the data term summed, not averaged (`fedrecsim.models.nmf`: the mean
  against ``lam = 0.1`` would zero the factors); V by multiplicative updates, U by exact NNLS.
* **Missing entries** (``protocol.fill``). Eq. (2) sums over the observed entries T, and so does the
  default ``fill = "observed"``: each silo fits its users' factors to V on their stored entries, and the
  Full and Local baselines factorize the observed entries. The authors' public code instead fits
  zero-filled matrices (and re-estimates V at the silos, which is not reproduced here: Algorithm 1 has
  the silos use the server's V); ``fill = "zeros"`` fits every user over all n items with a missing entry
  read as 0 (`pipeline.zero_filled_users`), and the Full and Local baselines factorize the zero-filled
  matrix. A zero-filled fit learns which items a user rated, and so ranks held-out items high (mean_rank,
  MAP) while predicting values near 0 (RMSE): where the paper's MovieLens rankings come from. The
  prototypes are the same under both fills: Algorithm 3 divides a cluster's sum by its size, to which a
  missing entry and an observed 0 add the same, so the records, the released prototypes and V do not
  depend on the fill; only the users' fit (and the baselines') does. On data with every cell observed
  the two fills are the same model.

Utility at small epsilon (measured, not assumed; ``scenarios/ribero_epsilon_k.toml``). Sparse recovery
adds ``Laplace(s * bound / eps_values)`` to each revealed entry of a cluster's sum, with ``eps_values =
0.169 eps`` under the default split: a standard deviation of ``sqrt(2)`` times that. A cluster of ``c``
users (mean silo size / k) whose records keep ``kept`` non-zeros (on average ``min(s, non-zeros)``) of
``n`` items, of mean non-zero value ``mu``, sums to about ``c (kept / n) mu`` per item, so the
signal-to-noise ratio of a revealed entry is about ``0.12 c mu eps (kept / s) / (n * bound)``: at most
``0.12 c mu eps / (n bound)``, whatever ``s``. `signal_to_noise` computes it from the silos' records
(``prototype_snr``). On the synthetic scenario (``n = 500``, ``bound = 10``, ``mu = 2.53``, ``c = 5``,
``kept = 50``) it is 3.0e-4 at ``eps = 1`` and reaches 1 near ``eps ~ 3,300``; on MovieLens-100k in zip
silos with ``k = 50``, ``s = 100`` (``c = 1.7``, ``kept = 65``, ``mu = 3.53``, ``bound = 5``) it is
5.6e-5 at ``eps = 1``, 1 near ``eps ~ 18,000``. Below that the prototypes are mostly noise and the
private model ranks no better than Random. The faithful mechanism is kept; the study prints where the
private model meets MF + k-means instead of tuning the scenario until the paper's curves appear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

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
from ...models.nmf import NMFHyper, nmf_dense, nmf_observed
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
    support: int = param(50, ge=1, doc="s: records keep at most s non-zero entries; a prototype reveals s entries")
    value_bound: float = param(
        0.0, ge=0, doc="largest entry value, a public bound; 0 = the top of the data's declared scale (refused when the "
        "scale is the data's own: npz without data.rating_range, lastfm play counts)",
    )
    projection_dim: int = param(0, ge=0, le=16, doc="JL dimension p; 0 = floor(0.5 ln m_h) per silo (authors' code)")
    trials: int = param(1, ge=1, doc="T of Algorithm 2 (paper: 2 log(1/delta); authors' code: 1)")
    candidate_grids: int = param(2, ge=1, doc="shifted grids per trial in Algorithm 5 (paper: 25 k log(n/delta))")
    swap_steps: int = param(20, ge=0, doc="swaps per trial in Algorithm 6 (paper: n/delta)")
    budget_candidates: float = param(0.125, gt=0, lt=1, doc="fraction of epsilon for candidate centers")
    budget_localswap: float = param(0.125, gt=0, lt=1, doc="fraction of epsilon for the local swaps")
    budget_selection: float = param(0.25, gt=0, lt=1, doc="fraction of epsilon for choosing a trial (trials > 1)")
    recovery_support: float = param(0.45, gt=0, lt=1, doc="fraction of the recovery budget for the Gumbel support")
    recovery_values: float = param(0.45, gt=0, lt=1, doc="fraction of the recovery budget for the Laplace values")
    fill: Literal["observed", "zeros"] = param(
        "observed", doc="what the factorizations fit: the observed entries (eq. 2) or zero-filled rows over every item "
        "(the authors' code)",
    )
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


#: Sources whose scale, unless declared, is the data's own smallest and largest value, and how to give a public one.
_OWN_SCALE = {
    "npz": "set data.rating_range = [min, max] (the public scale) or protocol.value_bound",
    "lastfm": "set protocol.value_bound (larger play counts are clipped to it) or data.binarize = true",
}


@dataclass(frozen=True)
class PublicBounds:
    """The two public numbers a run needs from the data's scale.

    Attributes:
        value: The largest record entry (records are clipped to ``[0, value]``; ``Lambda = value sqrt(s)``).
        scale: The range predictions are clipped to: the data's declared scale, or ``[0, value]`` when the
            data declares none.
    """

    value: float
    scale: tuple[float, float]


def public_scale(data: Any, train: Ratings) -> tuple[float, float] | None:
    """The data's scale when it is public (declared by its format or by ``data.rating_range``); None when it is
    the data's own extremes (``_OWN_SCALE``: npz without ``data.rating_range``, Last.fm play counts)."""
    if data.source in _OWN_SCALE and not data.binarize and data.rating_range is None:
        return None
    return train.rating_range


def public_bounds(config: PrototypesConfig, data: Any, train: Ratings) -> PublicBounds:
    """The value bound and the prediction scale (`PublicBounds`), both public: ``protocol.value_bound`` or the
    top of the declared scale. A bound taken from the data's own maximum would make the noise scale depend on
    the data -- the epsilon claim would not hold -- so data without a public scale needs
    ``protocol.value_bound``. The data must be non-negative for NMF."""
    low, high = train.rating_range
    if low < 0:
        raise ConfigError("data", f"prototypes factorizes non-negative data; the data's scale is [{low:g}, {high:g}]")
    scale = public_scale(data, train)
    if config.value_bound:
        return PublicBounds(config.value_bound, scale or (0.0, config.value_bound))
    if scale is None:
        raise ConfigError(
            "protocol.value_bound",
            f"data.source = {data.source!r} has no public scale: its default is the data's own smallest and largest "
            f"value, and noise calibrated to the data's maximum is not epsilon-DP; {_OWN_SCALE[data.source]}",
        )
    return PublicBounds(float(scale[1]), scale)


def check(scenario: Any, train: Ratings) -> tuple[str, ...]:
    """What `run` refuses about the data before it starts (`ProtocolSpec.check`): no public bound, negative
    data (`public_bounds`). ``fedrecsim inspect`` calls it too."""
    public_bounds(scenario.protocol, scenario.data, train)
    return ()


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


def evaluate(
    scores_of: Any, predict: Any, train: Ratings, test: Ratings, k: int, suffix: str = "", *, scale: tuple[float, float]
) -> dict[str, float]:
    """``test_rmse``, ``test_rmse_clipped`` (predictions clipped to the public ``scale``, `PublicBounds`),
    ``mean_rank`` and ``map@k`` (with ``suffix``) of one model."""
    if len(test):
        predicted = predict(test.users, test.items)
        metrics = {"test_rmse": rmse(predicted, test.values), "test_rmse_clipped": rmse(np.clip(predicted, *scale), test.values)}
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


def shared_item_model(silos: list[SiloData], V: np.ndarray, lam: float, n_users: int, fill: str = "observed") -> FactorModel:
    """Every silo fits its users to the same V (the federated pipeline without messages)."""
    model = FactorModel(n_users, V.shape[1])
    for silo in silos:
        model.add(silo.users, user_factors(silo.rows, V, lam, fill), V)
    return model


def factorize(rng: np.random.Generator, rows: sp.csr_matrix, hyper: NMFHyper, fill: str) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (2) on ``rows``: over the stored entries (``fill = "observed"``) or over the zero-filled matrix."""
    if fill == "zeros":
        return nmf_dense(rng, rows.toarray(), hyper)
    return nmf_observed(rng, rows, hyper)


def baseline_metrics(
    ctx: RunContext, config: PrototypesConfig, silos: list[SiloData], scale: tuple[float, float]
) -> dict[str, float]:
    """Full, Local, MF + k-means, MF + k-random exemplars and Random (module docstring), each fitting as
    ``protocol.fill`` says; predictions clipped to the public ``scale``."""
    train, test, k = ctx.train, ctx.test, config.map_k
    hyper = NMFHyper(config.rank, config.lam, config.nmf_iterations)
    metrics: dict[str, float] = {}
    matrix = sp.vstack([silo.rows for silo in silos]).tocsr()
    users = np.concatenate([silo.users for silo in silos])
    U, V = factorize(ctx.rng(Stream.PROTOCOL, _FULL), matrix, hyper, config.fill)
    full = FactorModel(train.n_users, config.rank)
    full.add(users, U, V)
    metrics.update(evaluate(full.scores, full.predict, train, test, k, "_full", scale=scale))
    local = FactorModel(train.n_users, config.rank)
    for silo in silos:
        U_h, V_h = factorize(ctx.rng(Stream.PROTOCOL, _LOCAL, silo.label), silo.rows, hyper, config.fill)
        local.add(silo.users, U_h, V_h)
    metrics.update(evaluate(local.scores, local.predict, train, test, k, "_local", scale=scale))
    for name, stream in (("kmeans", _KMEANS), ("exemplars", _EXEMPLARS)):
        rng = ctx.rng(Stream.PROTOCOL, stream)
        prototypes = []
        for silo in silos:
            if name == "kmeans":
                prototypes.append(kmeans(rng, silo.rows, config.k))
            else:
                picked = rng.choice(silo.users.size, size=min(config.k, silo.users.size), replace=False)
                prototypes.append(silo.rows[np.sort(picked)].toarray())
        model = shared_item_model(silos, item_factors(rng, prototypes, hyper), config.lam, train.n_users, config.fill)
        metrics.update(evaluate(model.scores, model.predict, train, test, k, f"_{name}", scale=scale))
    rng = ctx.rng(Stream.EVALUATION)
    low, high = scale

    def random_scores(chosen: IntArray) -> np.ndarray:
        return rng.random((chosen.size, train.n_items))

    def random_predictions(chosen: IntArray, items: IntArray) -> np.ndarray:
        return rng.uniform(low, high, size=chosen.size)

    metrics.update(evaluate(random_scores, random_predictions, train, test, k, "_random", scale=scale))
    return metrics


async def run(ctx: RunContext) -> Outcome:
    config: PrototypesConfig = ctx.config
    if ctx.rounds != 2:
        raise ConfigError("run.rounds", f"prototypes runs exactly two communication rounds (Algorithm 1); got {ctx.rounds}")
    bounds = public_bounds(config, ctx.scenario.data, ctx.train)
    bound = bounds.value
    budget = config.budget()
    silos = silo_data(ctx.train, silo_assignment(ctx.scenario.data, ctx.train, ctx.seed))
    hyper = NMFHyper(config.rank, config.lam, config.nmf_iterations)
    actors = {
        Party(Role.SILO, silo.label): PrototypeSilo(
            Party(Role.SILO, silo.label), ctx.network, ctx.rng(Stream.ACTOR, Role.SILO.code, silo.label), silo,
            silo_params(config, silo.users.size, bound), budget, config.lam, config.fill,
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
        warnings.append(f"{_silos(len(missing))} sent no prototypes in time: {', '.join(map(str, missing))}")
    if server.rejected:
        warnings.append(
            f"{_silos(len(server.rejected))} sent prototypes the server rejected (ledger.faults): "
            f"{', '.join(map(str, server.rejected))}"
        )
    if len(fitted) < len(parties):
        warnings.append(f"{_silos(len(parties) - len(fitted))} received no item matrix; their users are unscored")
    snr = signal_to_noise(config, budget, bound, silos, ctx.train.n_items)
    # The true cluster sizes of each silo's chosen trial: the simulator's view, never released.
    cluster_sizes = {party: actors[party].result.cluster_sizes for party in parties if actors[party].result is not None}
    empty = sum(int(np.count_nonzero(sizes == 0)) for sizes in cluster_sizes.values())
    warnings.extend(_prototype_warnings(config, snr, empty, [(party, actors[party].data.users.size) for party in parties]))
    model = FactorModel(ctx.train.n_users, config.rank)
    for party in fitted:
        silo = actors[party]
        model.add(silo.data.users, silo.user_factors, server.item_factors)
    final: dict[str, float] = {
        "silos": float(len(parties)), **_users_per_silo(silos), "prototype_snr": snr.ratio, "empty_clusters": float(empty),
    }
    if model.item_matrices:
        final.update(evaluate(model.scores, model.predict, ctx.train, ctx.test, config.map_k, scale=bounds.scale))
    if config.baselines:
        final.update(baseline_metrics(ctx, config, silos, bounds.scale))
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
        trivial_reason=_noise_reason(config, snr, bound),
        invariants=[support],
        state={
            "item_factors": server.item_factors,
            "user_factors": model.U,
            "prototypes": dict(server.received),
            "silo_users": {party: actors[party].data.users for party in parties},
            "cluster_sizes": cluster_sizes,
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


class SignalToNoise(NamedTuple):
    """The module docstring's estimate ("Utility at small epsilon") of a revealed prototype entry's signal
    against its noise, from the silos' sizes and records (`signal_to_noise`).

    Attributes:
        ratio: ``signal / noise``: below 1 the prototypes are mostly noise.
        signal: A cluster's sum on an item: ``cluster * kept / n * mean_value``.
        noise: The standard deviation of the Laplace noise on a revealed sum (``sqrt 2`` times its scale).
        cluster: Users per cluster were the silos' users split evenly: mean silo size / k.
        kept: Non-zero entries a record keeps after truncation, on average: ``mean min(s, non-zeros)``.
        mean_value: The mean non-zero entry, clipped to the value bound.
    """

    ratio: float
    signal: float
    noise: float
    cluster: float
    kept: float
    mean_value: float


def signal_to_noise(
    config: PrototypesConfig, budget: PrototypeBudget, bound: float, silos: list[SiloData], n_items: int
) -> SignalToNoise:
    """`SignalToNoise` of the silos' truncated records (the simulator's diagnostic; nothing is released)."""
    noise = math.sqrt(2.0) * values_scale(config, budget, bound)
    sizes = [silo.users.size for silo in silos]
    if not sum(sizes) or not n_items:
        return SignalToNoise(0.0, 0.0, noise, 0.0, 0.0, 0.0)
    rows = sp.vstack([silo.rows for silo in silos]).tocsr()
    values = np.minimum(rows.data, bound)
    positive = values > 0
    owner = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
    non_zeros = np.bincount(owner[positive], minlength=rows.shape[0])
    kept = float(np.minimum(non_zeros, config.support).mean())
    mean_value = float(values[positive].mean()) if positive.any() else 0.0
    cluster = float(np.mean(sizes)) / config.k
    signal = cluster * kept / n_items * mean_value
    return SignalToNoise(signal / noise, signal, noise, cluster, kept, mean_value)


#: A fragment of each warning `_prototype_warnings` gives, to tell them from the warnings about messages.
QUALITY_WARNINGS = (
    "the prototypes are noise-dominated", "clusters are empty in the silos' chosen trials", "hold fewer users than k",
)


def _prototype_warnings(
    config: PrototypesConfig, snr: SignalToNoise, empty: int, sizes: list[tuple[Party, int]]
) -> list[str]:
    """Warnings that the prototypes carry little of the data: noise-dominated entries, empty clusters (whose
    prototypes are noise alone), silos with fewer users than k (at least k - m of their clusters empty)."""
    warnings = []
    if snr.ratio < 1.0:
        warnings.append(
            f"the prototypes are noise-dominated: prototype_snr = {snr.ratio:.3g} < 1 (noise of standard deviation "
            f"{snr.noise:,.4g} on each revealed entry of a cluster's sum against about {snr.signal:.3g}; "
            f"protocol.epsilon = {config.epsilon:g})"
        )
    if empty:
        warnings.append(
            f"{empty} of {config.k * len(sizes)} clusters are empty in the silos' chosen trials; their prototypes are "
            "noise alone (empty_clusters)"
        )
    small = [f"{party} ({users} users)" for party, users in sizes if users < config.k]
    if small:
        verb = "holds" if len(small) == 1 else "hold"
        warnings.append(f"{_silos(len(small))} {verb} fewer users than k = {config.k}: {', '.join(small)}")
    return warnings


def _silos(count: int) -> str:
    """``1 silo``, ``3 silos``: a count of silos as the warnings print it."""
    return f"{count} silo{'' if count == 1 else 's'}"


def _noise_reason(config: PrototypesConfig, snr: SignalToNoise, bound: float) -> str:
    """The noise on a prototype's revealed entries against a cluster's sum (module docstring, "Utility at
    small epsilon")."""
    return (
        f"each revealed entry of a cluster's sum carries Laplace noise of standard deviation {snr.noise:,.4g} "
        f"(eps = {config.epsilon:g}, s = {config.support}, value bound {bound:g}), against an entry of about "
        f"{snr.signal:.3g} (a cluster of ~{snr.cluster:.3g} users, each keeping {snr.kept:.3g} non-zeros, mean value "
        f"{snr.mean_value:.3g}): prototype_snr = {snr.ratio:.3g}"
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
    MetricInfo(
        "prototype_snr",
        "estimated signal-to-noise ratio of a revealed prototype entry: a cluster's sum on an item (mean silo size / k "
        "users, each keeping its truncated non-zeros) over the standard deviation of its Laplace noise; below 1 the "
        "prototypes are mostly noise (a diagnostic of the simulator: nothing is released)",
        "ratio", 0.0, math.inf, "higher",
    ),
    count(
        "empty_clusters",
        "clusters of the silos' chosen trials that hold no user (their prototypes are noise alone), over all silos",
        "clusters",
    ),
    *(
        info
        for suffix, model in _MODELS.items()
        for info in (
            error(f"test_rmse{suffix}", f"test RMSE of {model}"),
            error(
                f"test_rmse_clipped{suffix}",
                f"test RMSE of {model}, predictions clipped to the public scale (the data's declared scale, else "
                "[0, protocol.value_bound])",
            ),
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
    memory=memory_estimate, check=check, metrics=METRICS, audit=AUDIT,
)
