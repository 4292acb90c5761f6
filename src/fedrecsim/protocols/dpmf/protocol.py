"""Differentially private matrix factorization (Hua, Xia and Zhong, IJCAI 2015): S1, S2 and S3.

- **S1** (trusted recommender, Sec. 4.1): users upload their ratings; the recommender runs the MF of eqs.
  (1)-(5) for ``run.rounds`` iterations, then publishes V re-optimized with U fixed on objective (6), with
  eta per Theorem 1 (or Lemma 1's Laplace, ``noise = "laplace"``).
- **S2** (untrusted recommender, static users, Sec. 4.2): users keep u_i; before iteration 1 the recommender
  sends every rater H_j and k_j and each fixes its eta-piece (eq. (12)); each iteration every user sends
  grad + eta-piece + rho~ + psi (mod P) to the third party, which sums per item; the recommender removes
  the masks and steps V (eq. (9)).
- **S3** (dynamic users, "Further Practical Consideration"): an initialization phase pre-shares every eta_j
  through k online users (one set for all items, ``sharers = "common"``, as the paper; or k per item),
  beta and alpha, and the recommender keeps tau^_j = alpha_j + eta_j -- only from an attempt that brought
  all k pieces; short items are pre-shared again and not updated until whole (`recommender`); each
  iteration it serves at most K online users with pieces of tau^_j, and the third party subtracts alpha_j.
  Users join and leave between iterations (``[availability]``); a user that leaves keeps u_i. Mid-round
  dropout is recovered exactly (see `recommender`), and the rho~ it leaves short is reported.

**Step normalization -- a documented choice.** Eqs. (2)-(5) sum each gradient over all of an item's raters;
with gamma = 2^-5 that full-batch step diverges on MovieLens-100k-shaped data (items with hundreds of
raters), and the distributed scenarios can only aggregate per item per iteration. We take the
per-user / per-item-mean step of `fedrecsim.models.mf` (``MFHyper.normalize``, the FCF baseline's): a
user divides its gradient by its number of ratings, and the recommender divides an item's unmasked
aggregate by n_j, the number of users that contributed to it this iteration. The aggregate holds the
gradients *and* eta_j (and rho~_j): the noise is divided by the same n_j, exactly as objective (6) applies
its 1/M to the error term and to eta alike, so the paper's ratio of noise to gradient is kept. S1's
refit is the exact minimizer of (6) under the same normalization (`central.refit_items`), i.e. the fixed
point of that step. ``normalize = false`` restores the raw sums everywhere. The deviation from eqs. (2)-(5)
matters: on MovieLens-100k (``hua_s1.toml`` with ``data.source =
"movielens-100k"``, seed 7, 90 % training split) unprotected full-batch MF with the paper's literal summed
step has a mean absolute training error of 3.46, 2.68, 13.1 after iterations 1-3, 4.6e6 after 10 and
4.5e102 after 100 (it diverges; ``paper_baseline_err_mean``), against 3.52, 3.52, 3.51, 3.43 and 0.707
with each step divided by n_j. S1 with the summed step still publishes (its refit is an exact solve, U
stays in the unit ball): at eps = 1 err_mean 12.0 against a noiseless refit of 1.39, where the n_j step
gives 21.9 against 0.479.

**S3's weighted contributions -- a second documented choice.** In S3 only k'_j of an item's k_j raters are
served in an iteration, yet the aggregate holds the whole eta_j every time. Divided by n_j, eta would
weigh about k_j E[1/n_j] times more against the gradient than objective (6) gives it (here ~10x with
K = 100 of 943 users; measured: at eps = 800 it alone raised the training error by 0.021 over the
noiseless replay, while rho~ raised it by 0.0002; `hua_s3_churn.toml`, seed 1; with the weight below,
+0.0003 in all). So each served user weights its grad + rho~ by
k_j / k'_j: the served users' sum becomes an unbiased estimate of the sum over all k_j raters that S2's
eq. (9) aggregates, plus eta_j once -- S2's update in expectation. The recommender divides by
c_j = k_j n_j / k'_j, so the gradient part of the step is still the contributors' mean (the noiseless
replay is unchanged), eta enters as eta_j / k_j exactly as in (6) (a served user that drops out raises
that by k'_j / n_j for the iteration), and rho~ keeps its ratio to the gradient it protects (it is
weighted alike). k_j is what the recommender can know: the raters it has seen (each user's first item
request; never fewer than k'_j); it is sent with the item vectors (``known_raters``). With
``normalize = false`` S3 is the paper's literal raw sum of the served users.

**Metrics** (final, and every ``eval_every`` rounds for S2/S3; `METRICS` declares every one): ``err_mean``
and ``err_q25`` .. ``err_q90`` (absolute errors over the training ratings, the paper's CDF),
``train_rmse``/``train_mae``, ``test_rmse``/``test_mae``, and the same four of the predictions clipped to
the data's declared rating scale (``*_clipped``, `Ratings.rating_range`: post-processing, no privacy
cost); in the final metrics the trivial predictor's (the training mean rating: ``*_mean_predictor``;
``Outcome.trivial`` pairs each error with it, and ``trivial_reason`` compares the noise with the data's
term, `claims.noise_reason`), ``baseline_err_mean`` and ``err_increase`` against the unprotected baseline, and
``noiseless_err_mean`` / ``noise_err_increase`` against the same run without noise:

- S1: the baseline is the same pipeline with eta = 0 (``baseline_rounds`` iterations of unprotected MF,
  then the exact refit of V), so ``err_increase`` is what the noise costs; noiseless = baseline.
- S2, S3: the baseline is unprotected full-batch MF over every user for ``baseline_rounds`` iterations
  (default: as many as the run; the paper uses 100), from the same initial U and V -- the paper's
  baseline; S3's ``err_increase`` therefore includes what churn and K cost. The noiseless replay runs the
  same iterations with exactly the users that contributed to each, without noise, masks or ring.
- Every scenario: ``paper_baseline_err_mean`` / ``paper_err_increase``, against the paper's own baseline --
  unprotected MF after exactly 100 iterations from the run's initial U and V, no refit (`claims`: the paper
  states no number for it, so it is computed on the run's data; 0.707 for S1 and 0.705 for S2 on
  MovieLens-100k, where S1's ``baseline_err_mean``, the noiseless refit, is 0.479). The paper's claim is
  shown beside both increases in ``paper_figures`` (`claims.accuracy_figures`). A paper's baseline that
  diverged (its error above Delta, as the raw summed step's does with ``normalize = false``,
  `claims.baseline_diverged`) is no reference: both metrics are left out and a warning says why.
  ``paper_baseline = false`` skips it (100 iterations over every rating: 66 CPU seconds at W3's Netflix
  shape), and both metrics with it.
- The noise against the data (`claims`): ``eta_norm_expected``, ``noise_dominated_items`` / ``_share``
  (rated items with E||eta_j|| > 2 Delta n_j; a warning when they are most), the item-mean reference
  errors (``*_item_mean_predictor``) and the share of the test squared error on items with fewer than 50
  training ratings (``test_sq_error_share_few_ratings``, raw and ``_clipped``; ``test_share_few_ratings``).

**The ring** must hold every aggregate: `headroom` derives the range they need from eps, Delta, d, K and the
weights at a tail probability of 1e-12 per aggregate, and a run whose ring is smaller is refused with a
ConfigError naming the rings that would do -- before it starts, and by ``fedrecsim inspect`` (`check`).
``frac_bits = "auto"`` takes the most fractional bits the range allows; ``privacy.ring`` reports the ring
used (``frac_bits``, and ``frac_bits_from``: auto, set or default) and that range.

**Privacy report** (``privacy``): eps, Delta, the mechanism, b, the eta and rho~ measurements, the ring,
and ``known_leaks``: the rated-item sets, and that the recommender knows H (it draws H_j; H_j(t) of rho~
is public), so the noise it sees is Gaussian given H and eps-DP against the recommender does not hold
as the paper states (``eps_dp_against_recommender: false``); ``epsilon_spent``: eps is spent once, when eta is
fixed (round 0 in S2/S3, the publication after the last round in S1), not per iteration (`_epsilon_spent`);
``theorem1_covers_published_v``: true for S1, which publishes the minimizer of (6) with U fixed; false for
S2/S3, whose V after T iterations (U updated every iteration) is not the minimizer Theorem 1 covers
(``caveats``, `claims.claim_report`).

**Distributions** (``distributions`` in result.json, for the report's CDF): the absolute prediction errors
of this run and of its baseline over the training ratings, and of this run over the test ratings, each as
its 0%, 5%, ..., 100% quantiles (`central.error_distribution`).

Per round (S2/S3): ``selected``, ``participants`` (contributors), ``missing``, ``items_updated``, ``eta_skipped``,
``rho_short``/``rho_scale_min`` (see `monitors`), and the bytes of the iteration: ``user_down_max_b`` and
``user_up_max_b`` (the most any served user received / sent) and ``tp_sent_b`` (the third party).

``Outcome.state`` (for tests and scripts): ``item_factors``, ``user_factors`` and their initial values;
S1 also ``unpublished_item_factors`` and ``eta``; S2/S3 also ``eta`` (eta_j as it sits in every aggregate,
decoded), ``rho_last`` (the last iteration's rho~ sums per updated item), ``contributors`` (user indices per
iteration), ``recent_aggregates`` (the recommender's unmasked per-item sums of the last two iterations --
what the difference attack works on), ``rated_items_seen`` (the recommender's known leak), and
``loop_wall_s`` / ``round_wall_s`` (wall seconds of the protocol's loop and of each iteration) and ``loop_cpu_s`` /
``round_cpu_s`` (the CPU seconds the process spent in them, `time.process_time`: on a shared machine the wall
time also counts the time other processes held the core, the CPU time does not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import trio

from ...actors.population import Population
from ...data.metrics import item_mean_predictor_errors, mean_predictor_errors
from ...data.ratings import Ratings
from ...errors import ConfigError
from ...mechanisms.laplace import laplace_scale
from ...metric_declarations import MetricInfo, byte_count, common, count, error, fraction
from ...network.party import SERVER, THIRD_PARTY, Party, Role
from ...network.tcp import Group
from ...seeding import Stream
from ..runtime import Cue, Distributed, Outcome, PaperFigure, ProtocolSpec, RunContext
from .audit import AUDIT
from .central import accuracy, error_distribution, refit_items, replay, train_baseline, train_error
from .claims import (
    FEW_RATINGS,
    PAPER_BASELINE_ROUNDS,
    accuracy_figures,
    baseline_diverged,
    claim_report,
    diverged_warning,
    few_ratings_share,
    noise_metrics,
    noise_reason,
    noise_warning,
)
from .config import DPMFConfig
from .headroom import ITEM_NORM_BOUND, Headroom, aggregate_headroom, check_ring
from .monitors import Verifier
from .noise import PublicCoin
from .public import PublicParameters
from .recommender import Recommender, Served, TrustedRecommender, Update
from .third_party import Aggregator
from .traffic import memory as memory_estimate
from .traffic import plan as traffic_plan
from .user import PrivateUser, TrustingUser

_H_LEAK = (
    "the recommender draws H_j (eq. (12)) and H_j(t) of rho~ is public: given H, every eta_j and rho~_j element it "
    "sees is Gaussian N(0, 2 b^2 H), not Laplace, so eps-DP against the recommender does not hold as the paper "
    "states (Lemma 1 with Theorem 2 is eps-DP only for a party that does not know H)"
)
_KNOWN_LEAKS = {
    "S1": ["the trusted recommender holds every rating and U (the premise of S1)"],
    "S2": [
        "the recommender learns each user's rated-item set (item requests)",
        "the third party learns each contributor's rated-item set (contributions)",
        _H_LEAK,
    ],
}
_KNOWN_LEAKS["S3"] = _KNOWN_LEAKS["S2"]
_NOISE_CONSTRUCTION = {
    "S1": "central draw",
    "S2": "Theorem 2 pieces (eq. (12))",
    "S3": "Theorem 2 pieces (eq. (12)); users weight grad + rho~ by k_j / k'_j, so eta_j enters each step as eta_j / k_j",
}
# The summary shows each error beside the same error of the non-private baseline (Hua et al.'s comparison).
_BASELINES = {"err_mean": "baseline_err_mean"}
# Each error beside the trivial predictor's (the training mean rating): err_mean is the training MAE.
_TRIVIAL = {
    "err_mean": "train_mae_mean_predictor",
    **{f"{split}_{what}{clipped}": f"{split}_{what}_mean_predictor"
       for split in ("train", "test") for what in ("rmse", "mae") for clipped in ("", "_clipped")},
}
_NAIVE_LEAK = "naive variant: per-user gradients reach the recommender unmasked; consecutive differences are exact (eq. (11))"


def _public(scenario: Any, train: Ratings, config: DPMFConfig) -> PublicParameters:
    """The public parameters of a run of ``scenario`` on ``train``; the ring's fractional bits resolved
    when ``frac_bits = "auto"`` (`DPMFConfig.ring_holding`: the most the headroom allows).

    Raises:
        ConfigError: implicit feedback, an empty rating range or an empty training split.
    """
    if scenario.data.feedback != "explicit":
        raise ConfigError("data.feedback", "dpmf factorizes explicit ratings; got implicit feedback")
    low, high = train.rating_range
    if not high > low:
        raise ConfigError("data", f"the rating range {train.rating_range} is empty: Delta = max_r - min_r must be > 0")
    if not len(train):
        raise ConfigError("data", "the training split holds no ratings")
    scale = laplace_scale(config.d, config.epsilon, high - low)
    ring = config.ring
    if config.scenario != "S1" and config.frac_bits == "auto":
        ring = config.ring_holding(_aggregate_headroom(train, config, scale, (low, high)).bound)
    coin = PublicCoin(scenario.run.seed, train.n_items, config.d)
    return PublicParameters(
        config.scenario, config.variant, config.mask_transport, config.hyper, ring, scale, train.n_items, (low, high), coin
    )


def check(scenario: Any, train: Ratings) -> tuple[str, ...]:
    """Everything `run` refuses about ``scenario`` on ``train`` before it starts (`ProtocolSpec.check`):
    the data `_public` refuses and, for S2/S3, a ring that cannot hold the aggregates (`_headroom`).
    ``fedrecsim inspect`` calls it too, so it refuses what a run would; the note it returns names the
    fractional bits ``frac_bits = "auto"`` chose."""
    config: DPMFConfig = scenario.protocol
    public = _public(scenario, train, config)
    if config.scenario == "S1":
        return ()
    headroom = _headroom(train, config, public)
    if config.frac_bits != "auto":
        return ()
    return (
        f'protocol.frac_bits = "auto": {public.ring.frac_bits} fractional bits, the most a {public.ring.bits}-bit ring '
        f"can have and hold the aggregates' |x| <= {headroom.bound:.4g} (range {public.ring.max_abs:.4g})",
    )


def _with_references(
    final: dict[str, float], ctx: RunContext, config: DPMFConfig, public: PublicParameters, U: np.ndarray, V: np.ndarray
) -> dict[str, str]:
    """Add to ``final`` the reference predictors' errors (the training mean's, each item's mean), the noise
    against the data (`claims.noise_metrics`) and the few-ratings items' share of the test error
    (`claims.few_ratings_share`, of the published ``U``, ``V``); returns the pairs of `_TRIVIAL` the run has."""
    final.update(mean_predictor_errors(ctx.train, ctx.test))
    final.update(item_mean_predictor_errors(ctx.train, ctx.test))
    final.update(noise_metrics(config.mechanism, config.d, config.epsilon, public.delta, ctx.train))
    final.update(few_ratings_share(U, V, ctx.train, ctx.test))
    return {name: other for name, other in _TRIVIAL.items() if name in final and other in final}


def _claims(
    config: DPMFConfig, public: PublicParameters, final: dict[str, float], ctx: RunContext, baseline: list[str],
) -> dict[str, Any]:
    """The `Outcome` fields that set the run beside the paper's accuracy claim (`claims`): the warnings when
    the noise dominates most items and ``baseline`` (`_paper_baseline`'s), and the reason a model is worse
    than the mean's."""
    return {
        "warnings": noise_warning(final, ctx.train, config.scenario) + baseline,
        "trivial_reason": noise_reason(config.mechanism, config.epsilon, public.delta, config.d, final, ctx.train),
    }


def _user_data(ctx: RunContext) -> list[tuple[Party, np.ndarray, np.ndarray]]:
    index = ctx.train.by_user()
    return [
        (Party(Role.USER, user), index.items[index.indptr[user]:index.indptr[user + 1]], index.values[index.indptr[user]:index.indptr[user + 1]])
        for user in range(ctx.train.n_users)
    ]


def _privacy(config: DPMFConfig, public: PublicParameters, rounds: int) -> dict[str, Any]:
    delta = public.delta
    privacy: dict[str, Any] = {
        "scenario": config.scenario,
        "epsilon": config.epsilon,
        "sensitivity": delta,
        "mechanism": "theorem1" if config.mechanism == "theorem1" else "laplace (Lemma 1)",
        # S3 without the normalized step is the paper's literal raw sum: S2's construction, unweighted.
        "noise_construction": _NOISE_CONSTRUCTION["S2" if config.scenario == "S3" and not config.normalize else config.scenario],
        "laplace_scale": public.scale,
        "user_profiles_in_unit_ball": True,
        "known_leaks": list(_KNOWN_LEAKS[config.scenario]) + ([_NAIVE_LEAK] if config.variant == "naive" else []),
    }
    if config.scenario != "S1":
        privacy["eps_dp_against_recommender"] = False
    privacy["epsilon_spent"] = _epsilon_spent(config, rounds)
    if config.mechanism == "theorem1":
        privacy["theorem1_norm_gamma"] = {"shape": config.d, "scale": 2.0 * delta / config.epsilon}
    privacy.update(claim_report(config.scenario))
    return privacy


def _epsilon_spent(config: DPMFConfig, rounds: int) -> dict[str, Any]:
    """When the run spends its budget: objective perturbation spends eps once, for the whole training.

    The noise eta is fixed once -- S1 draws it to publish V after the last iteration; S2 and S3 fix it
    before iteration 1 (noise setup, pre-sharing) -- and every iteration optimizes the same perturbed
    objective (6), so iterations do not compose: the paper's guarantee is eps for the published V, not eps
    per iteration (rho~ is fresh noise against the difference attack, not accounted budget).
    """
    return {
        "total": config.epsilon,
        "at_round": rounds if config.scenario == "S1" else 0,
        "composition": "none: objective perturbation (eta fixed once; every iteration optimizes objective (6))",
        "against": "whoever sees V without H" + ("" if config.scenario == "S1" else "; not the recommender (known_leaks)"),
    }


def _aggregate_headroom(train: Ratings, config: DPMFConfig, scale: float, rating_range: tuple[float, float]) -> Headroom:
    """The range S2/S3 aggregates need on ``train`` (`headroom`)."""
    return aggregate_headroom(
        scale=scale, d=config.d, rating_range=rating_range, max_raters=int(train.item_counts().max()),
        max_users=config.max_users, weighted=config.scenario == "S3" and config.normalize, scenario=config.scenario,
    )


def _headroom(train: Ratings, config: DPMFConfig, public: PublicParameters) -> Headroom:
    """The range S2/S3 aggregates need (`headroom`); refuses a ring that cannot hold it."""
    headroom = _aggregate_headroom(train, config, public.scale, public.rating_range)
    context = f"eps = {config.epsilon:g}, Delta = {public.delta:g}, d = {config.d}, K = {config.max_users}, weight <= {headroom.weight_max:g}"
    check_ring(public.ring, headroom, "protocol.frac_bits" if config.frac_bits is not None else "protocol.ring_bits", context)
    return headroom


def _frac_bits_source(config: DPMFConfig) -> str:
    """How the ring's fractional bits were chosen: "auto" (the most the headroom allows), "set", or "default"."""
    if config.frac_bits == "auto":
        return "auto: the most the headroom allows"
    return "set" if config.frac_bits is not None else f"default for a {config.ring_bits}-bit ring"


def _ring_report(config: DPMFConfig, public: PublicParameters, headroom: Headroom) -> dict[str, Any]:
    return {
        "bits": public.ring.bits,
        "frac_bits": public.ring.frac_bits,
        "frac_bits_from": _frac_bits_source(config),
        "max_abs": public.ring.max_abs,
        "needed_abs": headroom.bound,
        "tail_probability_per_aggregate": headroom.tail,
        "noise_term": headroom.noise_term,
        "gradient_term": headroom.gradient_term,
        "item_norm_bound": ITEM_NORM_BOUND,
        "weight_max": headroom.weight_max,
    }


async def run(ctx: RunContext) -> Outcome:
    config: DPMFConfig = ctx.config
    public = _public(ctx.scenario, ctx.train, config)
    if config.scenario == "S1":
        return await _run_trusted(ctx, config, public)
    headroom = _headroom(ctx.train, config, public)
    outcome = await _run_private(ctx, config, public)
    outcome.privacy["ring"] = _ring_report(config, public, headroom)
    return outcome


# --------------------------------------------------------------------------- S1


async def _run_trusted(ctx: RunContext, config: DPMFConfig, public: PublicParameters) -> Outcome:
    users = {
        party: TrustingUser(party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, party.index), items, values)
        for party, items, values in _user_data(ctx)
    }
    recommender = TrustedRecommender(SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), public, ctx.train.n_users)
    ctx.network.attach(SERVER)
    population = ctx.population(users)
    timing = ctx.scenario.run
    objects = {"recommender": recommender}
    values = ctx.resumed(population, objects) or {
        "rounds": [], "initial_u": recommender.user_factors.copy(), "initial_v": recommender.item_factors.copy(),
    }
    rounds: list[dict[str, float]] = values["rounds"]
    initial_u, initial_v = values["initial_u"], values["initial_v"]
    async with population.open():
        if not rounds:
            await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(len(rounds) + 1, ctx.rounds + 1):
            population.begin_round(round_index)
            held = recommender.collect()
            recommender.iterate()
            rounds.append({"round": round_index, "participants": held})
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            await ctx.end_round(round_index, population, objects, values)
    published = recommender.publish(config.mechanism, config.epsilon, public.delta)
    final = accuracy(recommender.user_factors, published, ctx.train, ctx.test)
    held_ratings = recommender.ratings()
    baseline_rounds = config.baseline_rounds or ctx.rounds
    if baseline_rounds == ctx.rounds:
        base_u, base_v = recommender.user_factors, recommender.item_factors
    else:
        base_u, base_v = train_baseline(initial_u, initial_v, held_ratings, public.hyper, baseline_rounds)
    noiseless = refit_items(base_u, base_v, held_ratings, np.zeros_like(base_v), public.hyper)
    final["baseline_err_mean"] = final["noiseless_err_mean"] = train_error(base_u, noiseless, ctx.train)
    final["err_increase"] = final["noise_err_increase"] = final["err_mean"] - final["baseline_err_mean"]
    computed = {ctx.rounds: (recommender.user_factors, recommender.item_factors), baseline_rounds: (base_u, base_v)}
    baseline_warnings = []
    if config.paper_baseline:
        baseline_warnings = _paper_baseline(final, computed, initial_u, initial_v, held_ratings, public, ctx.train)
    final["participants"] = float(len(recommender.uploads))
    trivial = _with_references(final, ctx, config, public, recommender.user_factors, published)
    rounds[-1].update(final)
    privacy = _privacy(config, public, ctx.rounds)
    # Every published item carries its eta_j, rated or not (`central.refit_items`).
    eta = recommender.eta if recommender.eta is not None else np.zeros((0, public.hyper.d))
    privacy["eta"] = {
        "items_noised": int(eta.shape[0]),
        "abs_mean": float(np.abs(eta).mean()) if eta.size else 0.0,
        "norm_mean": float(np.linalg.norm(eta, axis=1).mean()) if eta.size else 0.0,
    }
    state = {
        "item_factors": published,
        "unpublished_item_factors": recommender.item_factors,
        "user_factors": recommender.user_factors,
        "initial_user_factors": initial_u,
        "initial_item_factors": initial_v,
        "eta": recommender.eta,
        "population": {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes},
    }
    distributions = _error_distributions(recommender.user_factors, published, base_u, noiseless, ctx)
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, privacy=privacy, baselines=_BASELINES, state=state,
        paper_figures=accuracy_figures(config.scenario, config.epsilon, final), distributions=distributions,
        trivial=trivial, **_claims(config, public, final, ctx, baseline_warnings),
    )


def _paper_baseline(
    final: dict[str, float], computed: Mapping[int, tuple[np.ndarray, np.ndarray]], initial_u: np.ndarray,
    initial_v: np.ndarray, ratings: Ratings, public: PublicParameters, train: Ratings,
) -> list[str]:
    """Add ``paper_baseline_err_mean`` (unprotected MF after `PAPER_BASELINE_ROUNDS` iterations from the
    run's initial U and V on ``ratings``, no refit: the paper's baseline, `claims`) and ``paper_err_increase``
    to ``final``; ``computed`` holds the U and V of unprotected MF the run already has, by iterations.

    A baseline that diverged (`claims.baseline_diverged`: the raw summed step, ``normalize = false``, does on
    MovieLens-shaped data) is no reference: both metrics are left out and the warning returned says why."""
    if PAPER_BASELINE_ROUNDS in computed:
        paper_u, paper_v = computed[PAPER_BASELINE_ROUNDS]
    else:
        paper_u, paper_v = train_baseline(initial_u, initial_v, ratings, public.hyper, PAPER_BASELINE_ROUNDS)
    error = train_error(paper_u, paper_v, train)
    if baseline_diverged(error, public.delta):
        return [diverged_warning(public.hyper, public.delta)]
    final["paper_baseline_err_mean"] = error
    final["paper_err_increase"] = final["err_mean"] - error
    return []


def _error_distributions(U: np.ndarray, V: np.ndarray, base_u: np.ndarray, base_v: np.ndarray, ctx: RunContext) -> dict[str, Any]:
    """The absolute prediction errors' CDFs (Hua et al.'s Fig. 7): this run's and its baseline's over the
    training ratings (the paper's measure), and this run's over the test ratings."""
    distributions = {
        "abs_error_train": error_distribution(U, V, ctx.train, "this run, training ratings"),
        "baseline_abs_error_train": error_distribution(base_u, base_v, ctx.train, "non-private baseline, training ratings"),
    }
    if len(ctx.test):
        distributions["abs_error_test"] = error_distribution(U, V, ctx.test, "this run, test ratings")
    return distributions


# --------------------------------------------------------------------------- S2, S3


#: Hua et al.'s communication claim is for "a user [who] rated no more than 20 items" (Sec. 5).
PAPER_RATED_ITEMS = 20


class _Traffic:
    """Bytes per iteration from the ledger: what the served users received and sent, and the third party.

    Besides the per-iteration metrics (`measure`: the heaviest served user, in the window from serving to
    the aggregate), it keeps the paper's population apart (`begin_round` / `end_round`): each served user
    with at most `PAPER_RATED_ITEMS` rated (training) items, the bytes it sent and received in the
    iteration's round -- from the round's start to the start of the next, after the gap, so that every
    message of the round is delivered and nothing of the next is (`fedrecsim.network.ledger`, "Rounds").
    """

    def __init__(self, ledger: Any, rated: np.ndarray) -> None:
        self.ledger = ledger
        self._before: dict[Party, tuple[int, int]] = {}
        self._rated = rated
        self._round_start: dict[Party, tuple[int, int]] = {}
        self.paper_users: set[int] = set()
        self.paper_samples = 0
        self.paper_down = [0, 0]  # sum, max over (user, iteration)
        self.paper_up = [0, 0]

    def begin_round(self, users: Iterable[Party]) -> None:
        """Snapshot the counters of ``users``, which hold every user served this round, as they were at its
        start: taken right after the start when an attempt will move messages before the serving (otherwise
        `start` takes it, after the serving, when nothing was delivered in between)."""
        bytes_of, rated = self.ledger.bytes_of, self._rated
        self._round_start = {p: bytes_of(p) for p in users if rated[p.index] <= PAPER_RATED_ITEMS}

    def end_round(self, served: Iterable[Party]) -> None:
        """Add the round's bytes of each served user with at most `PAPER_RATED_ITEMS` rated items."""
        bytes_of = self.ledger.bytes_of
        for p in served:
            start = self._round_start.get(p)
            if start is None:
                continue
            recv, sent = bytes_of(p)
            down, up = recv - start[0], sent - start[1]
            self.paper_users.add(p.index)
            self.paper_samples += 1
            self.paper_down[0] += down
            self.paper_down[1] = max(self.paper_down[1], down)
            self.paper_up[0] += up
            self.paper_up[1] = max(self.paper_up[1], up)

    def start(self, parties: list[Party], round_start: bool = False) -> None:
        """Snapshot the counters of the served ``parties`` and the third party as the serving left them. With
        ``round_start`` nothing was delivered since the round began, so the same counters are also the
        round's start for `end_round` (one ledger read per party instead of two)."""
        bytes_of = self.ledger.bytes_of
        self._before = {p: bytes_of(p) for p in [*parties, THIRD_PARTY]}
        if round_start:
            before, rated = self._before, self._rated
            self._round_start = {p: before[p] for p in parties if rated[p.index] <= PAPER_RATED_ITEMS}

    def measure(self) -> dict[str, float]:
        bytes_of = self.ledger.bytes_of
        down, up = [0], [0]
        third = 0
        for p, (recv_before, sent_before) in self._before.items():
            recv, sent = bytes_of(p)
            if p == THIRD_PARTY:
                third = sent - sent_before
            else:
                down.append(recv - recv_before)
                up.append(sent - sent_before)
        return {"user_down_max_b": float(max(down)), "user_up_max_b": float(max(up)), "tp_sent_b": float(third)}


def _user_factors(users: Mapping[Party, PrivateUser]) -> np.ndarray:
    """U, one row per user in ``users``' order (``np.stack``'s rows, from one concatenation: a fifth of its
    time at W3's 191,668 users, where it runs in the last iteration)."""
    return np.concatenate([user.u for user in users.values()]).reshape(len(users), -1)


def _round_row(round_index: int, served: Served, update: Update | None) -> dict[str, float]:
    contributors = len(update.contributors) if update is not None else 0
    return {
        "round": round_index,
        "selected": len(served.parties),
        "participants": contributors,
        "missing": len(served.parties) - contributors,
        "items_updated": int(update.updated.size) if update is not None else 0,
        "eta_skipped": int(update.items.size - update.updated.size) if update is not None else 0,
    }


async def _preshare(recommender: Recommender, verifier: Verifier, config: DPMFConfig, round_timeout_s: float) -> None:
    """One S3 pre-sharing attempt for the items whose eta_j is not whole, then its ground-truth check."""
    accepted = await recommender.preshare(round_timeout_s)
    if config.check_invariants:
        verifier.after_presharing(accepted)


async def _run_private(ctx: RunContext, config: DPMFConfig, public: PublicParameters) -> Outcome:
    users = {
        party: PrivateUser(party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, party.index), items, values, public)
        for party, items, values in _user_data(ctx)
    }
    recommender = Recommender(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), public, config.max_users, config.k_presharing, config.sharers
    )
    aggregator = None
    if public.protected:
        aggregator = Aggregator(THIRD_PARTY, ctx.network, ctx.rng(Stream.ACTOR, Role.THIRD_PARTY.code, 0), public)
        aggregator.horizon_s = ctx.horizon_s
        ctx.network.attach(THIRD_PARTY)
    ctx.network.attach(SERVER)
    verifier = Verifier(public, users, recommender, aggregator)
    traffic = _Traffic(ctx.network.ledger, ctx.train.user_counts())
    timing = ctx.scenario.run
    population = ctx.population(users)
    objects: dict[str, Any] = {"recommender": recommender, "verifier": verifier, "traffic": traffic}
    if aggregator is not None:
        objects["aggregator"] = aggregator
    values = ctx.resumed(population, objects) or {
        "rounds": [], "contributed": [], "round_wall_s": [], "round_cpu_s": [],
        "initial_u": _user_factors(users), "initial_v": recommender.item_factors.copy(),
    }
    rounds: list[dict[str, float]] = values["rounds"]
    contributed: list[np.ndarray] = values["contributed"]
    round_wall_s: list[float] = values["round_wall_s"]
    round_cpu_s: list[float] = values["round_cpu_s"]
    resting = (aggregator,) if aggregator is not None else ()
    async with population.open(), trio.open_nursery() as nursery:
        if aggregator is not None:
            nursery.start_soon(aggregator.run)
        started, started_cpu = time.perf_counter(), time.process_time()
        if not rounds:
            await ctx.network.sleep(timing.round_gap_s)
            await _set_up(recommender, verifier, config, timing.round_timeout_s)
            await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(len(rounds) + 1, ctx.rounds + 1):
            round_started, round_started_cpu = time.perf_counter(), time.process_time()
            population.begin_round(round_index)
            presharing = config.scenario == "S3" and not recommender.eta_whole.all()
            if presharing:
                # The attempt moves messages before the serving: snapshot everyone who may be served.
                traffic.begin_round(users)
                await _preshare(recommender, verifier, config, timing.round_timeout_s)
            served = recommender.serve(round_index, timing.round_timeout_s)
            # Without an attempt nothing was delivered since the round began (no await; a send counts only on
            # its sender's account, the server's), so the served users' counters are still the start's.
            traffic.start(served.parties, round_start=not presharing)
            update = await recommender.collect(ctx.network.now + timing.round_timeout_s)
            row = _round_row(round_index, served, update)
            if config.check_invariants:
                row.update(verifier.after_round(served, update))
            row.update(traffic.measure())
            contributed.append(np.array([party.index for party in update.contributors] if update is not None else [], dtype=np.int64))
            if round_index % config.eval_every == 0 or round_index == ctx.rounds:
                row.update(accuracy(_user_factors(users), recommender.item_factors, ctx.train, ctx.test))
            rounds.append(row)
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            traffic.end_round(served.parties)
            round_wall_s.append(time.perf_counter() - round_started)
            round_cpu_s.append(time.process_time() - round_started_cpu)
            await ctx.end_round(round_index, population, objects, values, resting)
        loop_wall_s, loop_cpu_s = time.perf_counter() - started, time.process_time() - started_cpu
        nursery.cancel_scope.cancel()
    timing_s = {"loop_wall_s": loop_wall_s, "round_wall_s": round_wall_s, "loop_cpu_s": loop_cpu_s, "round_cpu_s": round_cpu_s}
    return _private_outcome(
        ctx, config, public, users, recommender, verifier, population, rounds, contributed, values["initial_u"],
        values["initial_v"], timing_s, traffic,
    )


async def _set_up(recommender: Recommender, verifier: Verifier, config: DPMFConfig, round_timeout_s: float) -> None:
    """The set-up before round 1: S2's noise set-up, or S3's pre-sharing attempts until every eta_j is whole."""
    if config.scenario == "S2":
        await recommender.set_up_noise(recommender.now + round_timeout_s)
        return
    for _ in range(config.presharing_attempts):
        if recommender.eta_whole.all():
            break
        await _preshare(recommender, verifier, config, round_timeout_s)


def _compared(
    ctx: RunContext, config: DPMFConfig, public: PublicParameters, rounds: list[dict[str, float]],
    contributed: list[np.ndarray], initial_u: np.ndarray, initial_v: np.ndarray,
) -> tuple[dict[str, float], np.ndarray, np.ndarray, list[str]]:
    """The final metrics -- the last round's, beside the baseline's and (``replay``) the noiseless run's --
    the baseline's U and V, and the warning about a diverged paper's baseline (`_paper_baseline`)."""
    final = {name: value for name, value in rounds[-1].items() if name != "round"}
    baseline_rounds = config.baseline_rounds or ctx.rounds
    base_u, base_v = train_baseline(initial_u, initial_v, ctx.train, public.hyper, baseline_rounds)
    final["baseline_err_mean"] = train_error(base_u, base_v, ctx.train)
    final["err_increase"] = final["err_mean"] - final["baseline_err_mean"]
    warnings = []
    if config.paper_baseline:
        warnings = _paper_baseline(final, {baseline_rounds: (base_u, base_v)}, initial_u, initial_v, ctx.train, public, ctx.train)
    if config.replay:
        replay_u, replay_v = replay(initial_u, initial_v, ctx.train, public.hyper, contributed)
        final["noiseless_err_mean"] = train_error(replay_u, replay_v, ctx.train)
        final["noise_err_increase"] = final["err_mean"] - final["noiseless_err_mean"]
    return final, base_u, base_v, warnings


def _private_outcome(
    ctx: RunContext,
    config: DPMFConfig,
    public: PublicParameters,
    users: Mapping[Party, PrivateUser],
    recommender: Recommender,
    verifier: Verifier,
    population: Population,
    rounds: list[dict[str, float]],
    contributed: list[np.ndarray],
    initial_u: np.ndarray,
    initial_v: np.ndarray,
    timing_s: dict[str, Any],
    traffic: _Traffic,
) -> Outcome:
    final, base_u, base_v, baseline_warnings = _compared(ctx, config, public, rounds, contributed, initial_u, initial_v)
    privacy = _privacy(config, public, ctx.rounds)
    noised = recommender.eta_whole
    privacy["eta"] = {
        "items_noised": int(noised.sum()),
        "items_without_eta": int(public.n_items - noised.sum()) if config.scenario == "S3" else 0,
        "pieces_min": int(recommender.eta_pieces[noised].min()) if noised.any() else 0,
        "abs_mean": verifier.eta_abs_sum / verifier.eta_values if verifier.eta_values else None,
        "skipped_updates": recommender.eta_skipped,
    }
    if config.scenario == "S3":
        privacy["eta"]["sharers"] = config.sharers
        privacy["eta"]["presharing"] = list(recommender.presharing)
    privacy["rho"] = verifier.rho.summary() if config.variant == "protected" else {"variant": "naive: no rho~"}
    if config.variant == "protected" and verifier.rho_values:
        privacy["rho"]["abs_mean"] = verifier.rho_abs_sum / verifier.rho_values
    state = {
        "item_factors": recommender.item_factors,
        "user_factors": _user_factors(users),
        "initial_user_factors": initial_u,
        "initial_item_factors": initial_v,
        "contributors": contributed,
        "recent_aggregates": list(recommender.recent),
        "eta": public.ring.decode(verifier.eta_truth(np.arange(public.n_items))),
        "rho_last": verifier.last_rho,
        "rated_items_seen": dict(recommender.rated_items),
        **timing_s,
        "population": {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes},
    }
    invariants = verifier.monitors if config.check_invariants else []
    trivial = _with_references(final, ctx, config, public, _user_factors(users), recommender.item_factors)
    figures = _communication_figures(config, public, rounds, traffic) + accuracy_figures(config.scenario, config.epsilon, final)
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, privacy=privacy, baselines=_BASELINES,
        paper_figures=figures, invariants=invariants, state=state,
        distributions=_error_distributions(_user_factors(users), recommender.item_factors, base_u, base_v, ctx),
        trivial=trivial, **_claims(config, public, final, ctx, baseline_warnings),
    )


def _communication_figures(
    config: DPMFConfig, public: PublicParameters, rounds: list[dict[str, float]], traffic: _Traffic
) -> list[PaperFigure]:
    """Hua et al.'s communication claims for S3 (Sec. 5), each on the population it is about.

    The user figures are for "a user [who] rated no more than 20 items": the mean and the largest
    per-iteration bytes of the served users with at most `PAPER_RATED_ITEMS` rated (training) items, one
    sample per user and iteration, each over its whole round (`_Traffic`); the heaviest served user of any
    size is shown beside them, labelled with its own window: the per-iteration metrics', which ends when the
    aggregate arrives, so it can be below the population's largest (a leave in the gap is in one, not the
    other). The third party's figure is for 1,000 online users over at most 10,000 items: the mean and
    the worst iteration of this run, whose served users and items the setting states. 32-bit values in
    the paper; the measured figures are exact encoded bytes in the ring this run used.
    """
    if config.scenario != "S3" or not rounds:
        return []
    setting = f"ring Z_2^{public.ring.bits} with {public.ring.frac_bits} fractional bits, {config.mask_transport} masks"
    worst = {name: max(row[name] for row in rounds) for name in ("user_down_max_b", "user_up_max_b", "tp_sent_b")}
    samples = traffic.paper_samples
    population = (
        f"served users with at most {PAPER_RATED_ITEMS} rated items, per iteration, each counted over its whole round "
        "until the next round starts (mean over users and iterations)"
    )
    users = {"population": population, "population_size": len(traffic.paper_users), "population_samples": samples}
    heaviest = (
        "heaviest served user of any number of rated items, worst iteration, from its serving until the aggregate "
        "arrived (user_down_max_b / user_up_max_b); the largest above counts the whole round -- a pre-sharing "
        "request, a late contribution, a leave or join in the gap -- so it can be larger"
    )
    served = max(row["selected"] for row in rounds)
    return [
        PaperFigure(
            "user download per iteration (all it received)",
            "at most 12 KB for a user with at most 20 rated items (32-bit values)",
            traffic.paper_down[0] / samples if samples else None,
            setting=setting,
            measured_max=float(traffic.paper_down[1]) if samples else None,
            heaviest=worst["user_down_max_b"],
            heaviest_label=heaviest,
            **users,
        ),
        PaperFigure(
            "user upload per iteration (its contribution to the third party and its item request to the recommender)",
            "at most 5 KB to the third party for a user with at most 20 rated items (32-bit values)",
            traffic.paper_up[0] / samples if samples else None,
            setting=setting,
            measured_max=float(traffic.paper_up[1]) if samples else None,
            heaviest=worst["user_up_max_b"],
            heaviest_label=heaviest,
            **users,
        ),
        PaperFigure(
            "third party to recommender per iteration",
            "under 3 MB for 1,000 online users over at most 10,000 items (32-bit values)",
            sum(row["tp_sent_b"] for row in rounds) / len(rounds),
            setting=f"{setting}; up to {served:,.0f} served users per iteration",
            population="every iteration of this run (mean over iterations)",
            population_size=len(rounds),
            population_samples=len(rounds),
            measured_max=worst["tp_sent_b"],
        ),
    ]


# --------------------------------------------------------------------------- S2 over TCP (`Distributed`)


def _check_distributed(ctx: RunContext) -> None:
    """Over TCP: S2's protected variant only; the rest of `run`'s checks (rating range, ring) as usual."""
    config: DPMFConfig = ctx.config
    if config.scenario != "S2":
        raise ConfigError("protocol.scenario", f"over TCP dpmf runs S2 only yet; got {config.scenario}")
    if config.variant != "protected":
        raise ConfigError("protocol.variant", "over TCP dpmf runs the protected variant (with the third party) only")
    _headroom(ctx.train, config, _public(ctx.scenario, ctx.train, config))


def _refreshed(recommender: Recommender, condition: Callable[[Recommender], bool]) -> Callable[[], bool]:
    """``condition`` of the recommender after it applied the joins, leaves and item requests delivered."""

    def check() -> bool:
        recommender.refresh()
        return condition(recommender)

    return check


async def _recommend(ctx: RunContext, group: Group, cue: Cue) -> dict[str, Any]:
    """The recommender's process: `_run_private`'s set-up and iterations, each started once what the
    simulation's round gap guarantees is in -- every user's join, and every set-up user's next request."""
    config: DPMFConfig = ctx.config
    public = _public(ctx.scenario, ctx.train, config)
    recommender = Recommender(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), public, config.max_users, config.k_presharing, config.sharers
    )
    initial_v = recommender.item_factors.copy()
    ctx.network.attach(SERVER)
    await cue.ready()
    timing = ctx.scenario.run
    everyone = frozenset(Party(Role.USER, index) for index in range(ctx.train.n_users))
    await recommender.wait_until(
        _refreshed(recommender, lambda r: r.members >= everyone), deadline=ctx.network.now + timing.round_timeout_s,
        what="every user's join",
    )
    await recommender.set_up_noise(ctx.network.now + timing.round_timeout_s)
    await ctx.network.sleep(timing.round_gap_s)
    rounds: list[dict[str, float]] = []
    contributed: list[np.ndarray] = []
    for round_index in range(1, ctx.rounds + 1):
        ctx.network.ledger.begin_round(round_index, len(recommender.members))
        await recommender.wait_until(
            _refreshed(recommender, lambda r: r.set_up is not None and r.set_up.issubset(r.requests)),
            deadline=ctx.network.now + timing.round_timeout_s, what=f"every set-up user's item request for round {round_index}",
        )
        served = recommender.serve(round_index, timing.round_timeout_s)
        update = await recommender.collect(ctx.network.now + timing.round_timeout_s)
        rounds.append(_round_row(round_index, served, update))
        contributed.append(np.array([party.index for party in update.contributors] if update is not None else [], dtype=np.int64))
        ctx.progress(round_index)
        await ctx.network.sleep(timing.round_gap_s)
    return {
        "rounds": rounds, "contributed": contributed, "item_factors": recommender.item_factors, "initial_item_factors": initial_v,
        "eta_whole": recommender.eta_whole, "eta_pieces": recommender.eta_pieces, "eta_skipped": recommender.eta_skipped,
        "recent": list(recommender.recent), "rated_items": dict(recommender.rated_items),
    }


async def _aggregate(ctx: RunContext, group: Group, cue: Cue) -> dict[str, Any]:
    """The third party's process: its `Aggregator` until the run stops."""
    public = _public(ctx.scenario, ctx.train, ctx.config)
    aggregator = Aggregator(THIRD_PARTY, ctx.network, ctx.rng(Stream.ACTOR, Role.THIRD_PARTY.code, 0), public)
    aggregator.horizon_s = ctx.horizon_s
    ctx.network.attach(THIRD_PARTY)
    await cue.ready()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(aggregator.run)
        await cue.stopped()
        nursery.cancel_scope.cancel()
    return {}


async def _contribute(ctx: RunContext, group: Group, cue: Cue) -> dict[str, Any]:
    """A users' process: its block of users online until the run stops; their profiles are its part."""
    public = _public(ctx.scenario, ctx.train, ctx.config)
    users = {
        party: PrivateUser(party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, party.index), items, values, public)
        for party, items, values in _user_data(ctx)
        if party.index in group.users
    }
    initial_u = _user_factors(users) if users else np.empty((0, public.d))
    population = ctx.population(users)
    await cue.ready()
    async with population.open():
        await cue.stopped()
    return {"users": group.users, "user_factors": _user_factors(users) if users else initial_u, "initial_user_factors": initial_u}


def _users_rows(parts: list[dict[str, Any]], name: str) -> np.ndarray:
    """The users' rows of ``name`` from every users' process, in user order."""
    return np.concatenate([part[name] for part in sorted(parts, key=lambda part: part["users"].start)])


def _distributed_outcome(ctx: RunContext, parts: Mapping[Role, list[dict[str, Any]]]) -> Outcome:
    """`_private_outcome` from the processes' parts: metrics after the last round only, and without the
    invariant monitors and the noise measurements, which read every party's state."""
    config: DPMFConfig = ctx.config
    public = _public(ctx.scenario, ctx.train, config)
    served = parts[Role.SERVER][0]
    user_factors, initial_u = _users_rows(parts[Role.USER], "user_factors"), _users_rows(parts[Role.USER], "initial_user_factors")
    rounds = served["rounds"]
    rounds[-1].update(accuracy(user_factors, served["item_factors"], ctx.train, ctx.test))
    final, base_u, base_v, baseline_warnings = _compared(
        ctx, config, public, rounds, served["contributed"], initial_u, served["initial_item_factors"]
    )
    privacy = _privacy(config, public, ctx.rounds)
    noised = served["eta_whole"]
    privacy["eta"] = {
        "items_noised": int(noised.sum()),
        "items_without_eta": 0,
        "pieces_min": int(served["eta_pieces"][noised].min()) if noised.any() else 0,
        "skipped_updates": served["eta_skipped"],
    }
    privacy["ring"] = _ring_report(config, public, _headroom(ctx.train, config, public))
    state = {
        "item_factors": served["item_factors"],
        "user_factors": user_factors,
        "initial_user_factors": initial_u,
        "initial_item_factors": served["initial_item_factors"],
        "contributors": served["contributed"],
        "recent_aggregates": served["recent"],
        "rated_items_seen": served["rated_items"],
    }
    trivial = _with_references(final, ctx, config, public, user_factors, served["item_factors"])
    claimed = _claims(config, public, final, ctx, baseline_warnings)
    if config.check_invariants:
        claimed["warnings"].append(
            "over TCP the invariant monitors did not run: they read every party's state, which lives in its own process"
        )
    return Outcome(
        rounds_completed=len(rounds), rounds=rounds, final=final, privacy=privacy, baselines=_BASELINES, state=state,
        paper_figures=accuracy_figures(config.scenario, config.epsilon, final),
        distributions=_error_distributions(user_factors, served["item_factors"], base_u, base_v, ctx),
        trivial=trivial, **claimed,
    )


DISTRIBUTED = Distributed(
    (Role.SERVER, Role.THIRD_PARTY, Role.USER),
    {Role.SERVER: _recommend, Role.THIRD_PARTY: _aggregate, Role.USER: _contribute},
    _distributed_outcome,
    check=_check_distributed,
)

#: Every metric dpmf reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    error("err_mean", "mean absolute prediction error over the training ratings (Hua et al.'s measure; unclipped)"),
    *(
        error(f"err_q{q}", f"the {q}th percentile of the absolute prediction errors over the training ratings")
        for q in (25, 50, 75, 90)
    ),
    *common(
        "train_rmse", "train_mae", "test_rmse", "test_mae",
        "train_rmse_clipped", "train_mae_clipped", "test_rmse_clipped", "test_mae_clipped",
        "train_rmse_mean_predictor", "train_mae_mean_predictor", "test_rmse_mean_predictor", "test_mae_mean_predictor",
    ),
    error(
        "baseline_err_mean",
        "err_mean of the unprotected baseline: S1 the same pipeline with eta = 0; S2/S3 full-batch MF over every user "
        "for protocol.baseline_rounds iterations from the same initial U and V",
    ),
    MetricInfo("err_increase", "err_mean - baseline_err_mean: what privacy (and in S3 churn and K) cost", "rating", better="lower"),
    error(
        "noiseless_err_mean",
        "err_mean without noise: S1 the noiseless refit of V (= baseline_err_mean); S2/S3 the same iterations with "
        "exactly the users that took part, without noise, masks or ring",
    ),
    MetricInfo("noise_err_increase", "err_mean - noiseless_err_mean: what the noise alone cost", "rating", better="lower"),
    error(
        "paper_baseline_err_mean",
        f"err_mean of Hua et al.'s baseline computed on this run's data: unprotected full-batch MF for {PAPER_BASELINE_ROUNDS} "
        "iterations from the run's initial U and V, no refit (the paper states no number for it)",
    ),
    MetricInfo(
        "paper_err_increase", "err_mean - paper_baseline_err_mean: the increase the paper's accuracy claim is about",
        "rating", better="lower",
    ),
    *(
        error(
            f"{split}_{what}_item_mean_predictor",
            f"{split}_{what} of the reference predictor of each item's mean training rating (the training mean for an item without any)",
        )
        for split in ("train", "test") for what in ("rmse", "mae")
    ),
    MetricInfo(
        "eta_norm_expected",
        "E||eta_j||: Theorem 1's d 2 Delta / eps; for Lemma 1's Laplace noise its root mean square norm 2 Delta d sqrt(2) / eps",
        "rating", 0.0,
    ),
    count(
        "noise_dominated_items",
        "rated items whose eta_norm_expected exceeds 2 Delta n_j, the largest data term eta_j perturbs "
        "(n_j: the item's training ratings)",
        "items",
    ),
    fraction("noise_dominated_share", "noise_dominated_items over the items with training ratings"),
    fraction("test_share_few_ratings", f"share of the test ratings on items with fewer than {FEW_RATINGS} training ratings"),
    fraction(
        "test_sq_error_share_few_ratings", f"share of the test squared error on items with fewer than {FEW_RATINGS} training ratings"
    ),
    fraction(
        "test_sq_error_share_few_ratings_clipped",
        "test_sq_error_share_few_ratings of the predictions clipped to the data's rating scale",
    ),
    count("participants", "S1: users whose ratings the recommender holds; S2/S3: users whose contribution is in the iteration's update", "users"),
    count("selected", "users the recommender served in the iteration (S3: at most protocol.max_users online users)", "users"),
    count("missing", "served users whose contribution did not arrive (crashed, left or late)", "users"),
    count("items_updated", "items whose V row the iteration updated (the third party's aggregate of them unmasked)", "items"),
    count(
        "eta_skipped",
        "items with a contribution in the iteration but not updated: S3 items whose eta_j was not whole (short of k pieces)",
        "items",
    ),
    fraction(
        "rho_short",
        "share of the iteration's updated items whose rho~ noise came from fewer contributors than were served "
        "(mid-round dropout; its scale is then b sqrt(n_j / k'_j) instead of b, `monitors`)",
    ),
    MetricInfo(
        "rho_scale_min",
        "the smallest Laplace scale of rho~ over the iteration's updated items, b sqrt(n_j / k'_j) (b, "
        "privacy.laplace_scale, when no contributor dropped)",
        "Laplace scale", 0.0,
    ),
    byte_count("user_down_max_b", "the most bytes any served user received in the iteration"),
    byte_count("user_up_max_b", "the most bytes any served user sent in the iteration"),
    byte_count("tp_sent_b", "bytes the third party sent in the iteration (its aggregates to the recommender)"),
)

PROTOCOL = ProtocolSpec(
    "dpmf", DPMFConfig, run, "Hua et al. differentially private MF: S1, S2, S3 with the third party", plan=traffic_plan, memory=memory_estimate,
    distributed=DISTRIBUTED, resumable=True, check=check, metrics=METRICS, audit=AUDIT,
)
