"""Polato (IJCNN 2021), "Federated Variational Autoencoder for Collaborative Filtering": FedVAE and FedVAE_dec.

Every training user is a party holding its own row r_u. ``run.rounds`` counts federated rounds
(Algorithm 1's T). In round t the server samples R online users, sends each ω_{t-1}, each answers with
the gradient of its own Mult-VAE loss (one forward/backward pass, `fedrecsim.models.multvae`), users
that crash or miss the deadline are simply missing, and the server validates the gradients, keeps
those SecureFilter (Krum) keeps, averages them and takes one Adam step (Algorithm 2), then, for
FedVAE_dec, ``ω_t <- ω_t + gamma_t (ω_t - ω_{t-1})`` (eq. (4)). Who does what is in `roles`, the
server's maths in `aggregation`, what travels in `messages`.

Epochs (Sec. V-A): an epoch is ``M = ceil(|U \\ U_test| / R)`` rounds, so ``M R >= |U \\ U_test| >
(M - 1) R``; round t is in epoch ``e = ceil(t / M)`` and ``gamma_t = gamma delta^e``. The epoch count
starts at 1, as Algorithm 1's t does: with delta = 0 the schedule is plain FedVAE from the first
round, as the paper says it must be (0^0 = 1 would boost the first epoch).

Data and evaluation (Sec. V-A): ``data.split`` must hold users out -- ``"heldout_users"`` (the paper's:
a ``test_fraction`` share of the users, each testing ``test_share`` = 20 % of its entries and folding in
the rest) or ``"users"``. Held-out users (those with test entries) never train and are not parties;
after every epoch (``eval_every = 0``; or every ``eval_every`` rounds) and after the last round the
simulator ranks every item for each of them from its fold-in row with the server's ω, fold-in items
excluded: ``ndcg@K`` and ``recall@K`` for K in ``cutoffs`` (`evaluation`). Values are used as they are
(the multinomial likelihood counts them); ``data.binarize = true`` gives the paper's binary r_u, and
MovieLens-1M as the paper prepares it is ``min_rating = 4``, ``binarize``, ``min_user_interactions = 5``.
With ``baseline = true`` the final metrics add ``ndcg@K_multvae`` / ``recall@K_multvae``: centralized
Mult-VAE (minibatches of ``baseline_batch`` users, the same Adam) from the same ω_0 on the same
training users for ``ceil(rounds / M)`` epochs; its metrics after epoch e are also in the row of round
``min(e M, rounds)`` (the last round of FedVAE's epoch e), as ``ndcg@K_multvae`` / ``recall@K_multvae``
beside FedVAE's own, and in ``state["baseline"]``.

Choices where the paper is silent or ambiguous, each documented where it is made:

* Initialization is Liang et al.'s (Glorot-uniform weights, N(0, 0.001^2) biases), not Algorithm 1's
  literal N(0, 1), which saturates the network (`fedrecsim.models.multvae`).
* Parameters, gradients and Adam's moments are float32, as the reference TensorFlow implementation's.
* SecureFilter: Blanchard et al.'s f is a count; here it is ``floor(krum_f n)`` of the n gradients a
  round accepted, so it follows R and dropout. Rounds Krum cannot score (n < 3) apply no update
  (`aggregation`). ``secure_filter = "none"`` is plain averaging.
* SecureFilter keeps n - f by default (``krum_m = 0``: Multi-Krum). Algorithm 2 line 2 averages what the
  filter kept, which presumes several gradients; Multi-Krum keeping n - f is that filter (it still drops
  the f gradients of highest Krum score) with the variance of an average of ~0.9 R gradients.
  ``krum_m = 1`` is single Krum, the other reading: the average is then of one gradient, and every
  round steps along a single user's gradient (a batch of one). It costs accuracy: on the binarized
  ML-1M split (R = 250) FedVAE with single Krum stalls at NDCG@100 ~0.16-0.19 against ~0.39 with
  averaging (the review in issue 30). Measured on 1,200 users x 700 items (1,120 training, R = 100,
  seed 17), NDCG@100 after epoch 8 without attackers: Multi-Krum n - f 0.392, single Krum 0.327, plain
  averaging 0.393, centralized Mult-VAE 0.364; with 10 % attackers sending -10 x their gradient:
  Multi-Krum 0.377, single Krum 0.320, plain averaging 0.102 (``python scenarios/fedvae_convergence.py
  --epochs 8``, which prints them per epoch; single Krum never reaches 95 % of Mult-VAE's last value in
  the 8 epochs, Multi-Krum does from epoch 3).
  With the decay schedule single Krum also makes the larger gammas unstable: the decay study
  (``scenarios/fedvae_decay.py``) at the same size, NDCG@100 after epoch 8 for gamma = 0 / 1 / 3 / 5:
  single Krum 0.327 / 0.324 / 0.282 / 0.124 (gamma = 5 swings between 0.10 and 0.26 from epoch 2 on);
  Multi-Krum n - f 0.392 / 0.427 / 0.438 / 0.427; plain averaging 0.393 / 0.436 / 0.441 / 0.441. With
  Multi-Krum, as the paper shows, a larger gamma gets there sooner (epoch 4: 0.373 / 0.378 / 0.421 /
  0.439) and stays. Fig. 1's runs have no attackers and the paper does not say what filtered them.
* Krum's cost: the Gram matrix of a round's n gradients of P entries is O(n^2 P) -- at ML-1M's size
  (R = 250, P = 4.6 million) 13.2 s of a 22 s round. The server measures the wall time of each round's
  filter; its sum is ``krum_filter_s`` in ``result.json``'s ``timing`` section (0 without Krum; wall
  time, so outside the deterministic metrics), and the run's summary names it when it is at least half
  the run's wall time. ``secure_filter = "none"`` costs nothing there, at the price of no defence.
  Measured on this project's shared 2-core machine, two rounds at 3,000 users x 1,000 items, R = 250
  (``fedrecsim run scenarios/fedvae_ml1m_shape.toml --set run.rounds=2 --set data.users=3000 --set
  data.items=1000 --set data.ratings=200000 --set protocol.baseline=false --set protocol.eval_every=1000``):
  ``most of the wall time went to krum_filter_s: 72.88 s of 121.87 s (60%)``.
* Validation: every gradient is checked (length, indices, finiteness) before SecureFilter; a bad one is
  rejected and counted, the round goes on (`validation`).
* Sparse first-layer updates (``sparse = true``, beyond the paper): a user's W1 gradient is zero outside
  the rows of its kept (rated, not dropped) items, so it sends those rows and their indices. The server
  expands them; the aggregate equals the dense protocol's exactly. The indices tell the server nothing
  the dense gradient did not: its non-zero rows are the same items.

Per-round metrics: ``epoch``, ``gamma_t``, ``participants`` (users sent ω), ``gradients`` (accepted),
``missing``, ``rejected``, ``kept`` (by SecureFilter), ``krum_f`` (with Krum), ``updated`` (1 if ω moved),
and, counted by the simulator (the server cannot know), ``byzantine_sampled``, ``byzantine_accepted`` and
``byzantine_kept``; the ranking metrics where measured.

Privacy: none is claimed. Polato argues that input dropout perturbs the gradients and suggests
differential privacy "for free" (Sec. IV-C) without a guarantee; the server sees every sampled user's
gradient, whose non-zero W1 rows are the user's kept items. ``result.json``'s privacy section says so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...data.metrics import random_ranking_expectation
from ...errors import ConfigError
from ...invariants import InvariantMonitor
from ...metric_declarations import MetricInfo, common, count, flag, fraction
from ...models.multvae import Layout, init_params
from ...network.party import SERVER, Party, Role
from ...seeding import Stream
from ..runtime import Outcome, ProtocolSpec, RunContext
from .aggregation import FilterSettings
from .audit import AUDIT
from .byzantine import choose_attackers
from .config import FedVAEConfig
from .evaluation import centralized_curve, ranking_metrics
from .roles import ByzantineUser, FedVAEServer, FedVAEUser, RoundReport
from .traffic import memory as memory_estimate
from .traffic import plan as traffic_plan

# Stream.PROTOCOL ids: which users attack, and the centralized baseline's minibatches and noise.
_ATTACKERS, _BASELINE = 1, 2
_SPLITS = ("heldout_users", "users")


def training_users(ctx: RunContext) -> np.ndarray:
    """The users that train: those with training entries and no test entries, ascending."""
    return np.flatnonzero((ctx.train.user_counts() > 0) & (ctx.test.user_counts() == 0))


def epoch_rounds(n_training: int, users_per_round: int) -> int:
    """M: the rounds of an epoch, ``ceil(n_training / R)`` (at least 1)."""
    return max(1, math.ceil(n_training / users_per_round))


def _check(ctx: RunContext, training: np.ndarray) -> None:
    data = ctx.scenario.data
    if data.split not in _SPLITS or data.test_path:
        given = f"data.test_path = {data.test_path!r}" if data.test_path else f"data.split = {data.split!r}"
        raise ConfigError(
            "data.split",
            f"FedVAE trains on some users and ranks items for held-out others (Polato Sec. V-A); {given} does not hold "
            'users out: use split = "heldout_users" (or "users") and no test_path',
        )
    if not training.size:
        raise ConfigError("data.test_fraction", "no user is left to train: every user with data is held out")


def _users(
    ctx: RunContext, config: FedVAEConfig, layout: Layout, training: np.ndarray, attackers: frozenset[int]
) -> dict[Party, FedVAEUser]:
    """One actor per training user holding its own row; the ``attackers`` play `ByzantineUser`."""
    index = ctx.train.by_user()
    hyper = config.hyper()
    users: dict[Party, FedVAEUser] = {}
    for user in training:
        party = Party(Role.USER, int(user))
        start, stop = index.indptr[user], index.indptr[user + 1]
        rng = ctx.rng(Stream.ACTOR, Role.USER.code, int(user))
        arguments = (party, ctx.network, rng, index.items[start:stop], index.values[start:stop], layout, hyper, config.sparse)
        if int(user) in attackers:
            users[party] = ByzantineUser(*arguments, policy=config.byzantine_policy, scale=config.byzantine_scale)
        else:
            users[party] = FedVAEUser(*arguments)
    return users


def _round_row(
    round_index: int, epoch: int, gamma_t: float, report: RoundReport, attackers: frozenset[int], krum: bool
) -> dict[str, float]:
    def attacking(parties: tuple[Party, ...]) -> int:
        return sum(party.index in attackers for party in parties)

    row: dict[str, float] = {
        "round": round_index,
        "epoch": epoch,
        "gamma_t": gamma_t,
        "participants": len(report.selected),
        "gradients": len(report.accepted),
        "missing": len(report.missing),
        "rejected": len(report.rejected),
        "kept": len(report.kept),
        "updated": int(report.applied),
        "byzantine_sampled": attacking(report.selected),
        "byzantine_accepted": attacking(report.accepted),
        "byzantine_kept": attacking(report.kept),
    }
    if krum:
        row["krum_f"] = report.selection.f
    return row


def _warnings(rows: list[dict[str, float]], rejected: list[str], evaluated: bool, unranked: list[int]) -> list[str]:
    warnings = []
    idle = sum(1 for row in rows if not row["updated"])
    if idle:
        warnings.append(
            f"{idle} of {len(rows)} rounds applied no update: no gradient was accepted, or Krum had fewer than 3 to "
            "choose from (see the gradients and missing metrics)"
        )
    if rejected:
        warnings.append(f"{len(rejected)} gradients were rejected by the server's validation; the first: {rejected[0]}")
    if not evaluated:
        warnings.append("no user is held out (no test entries), so nothing was ranked: raise data.test_fraction")
    if unranked:
        warnings.append(
            f"the model's scores were not finite when it was to be evaluated in round(s) {', '.join(map(str, unranked))}: "
            "omega diverged (a learning rate too large, or byzantine gradients let through), so ndcg and recall "
            "were not measured there"
        )
    return warnings


async def run(ctx: RunContext) -> Outcome:
    config: FedVAEConfig = ctx.config
    training = training_users(ctx)
    _check(ctx, training)
    hyper = config.hyper()
    layout = Layout.of(ctx.train.n_items, hyper)
    server_rng = ctx.rng(Stream.ACTOR, Role.SERVER.code, 0)
    initial_omega = init_params(server_rng, layout)
    attackers = choose_attackers(ctx.rng(Stream.PROTOCOL, _ATTACKERS), training, config.byzantine_fraction)
    users = _users(ctx, config, layout, training, attackers)
    settings = FilterSettings(config.secure_filter, config.krum_f, config.krum_m)
    server = FedVAEServer(
        SERVER, ctx.network, server_rng, layout, initial_omega.copy(), users_per_round=config.users_per_round,
        adam=config.adam(), settings=settings, sparse=config.sparse,
    )
    # Not honest: the protocol's attackers, and users whose messages a [faults.byzantine] rule forges on the wire.
    forging = {rule.party.index for rule in ctx.network.faults.byzantine if rule.party.role is Role.USER}
    dishonest = attackers | forging
    per_epoch = epoch_rounds(training.size, config.users_per_round)
    evaluated = bool(len(ctx.test))
    ctx.network.attach(SERVER)
    population = ctx.population(users)
    timing = ctx.scenario.run
    objects = {"server": server}
    values = ctx.resumed(population, objects) or {
        "rows": [], "rejected": [], "unranked": [], "omega0": initial_omega,
        "honest": InvariantMonitor("honest_gradients_accepted", "the server's validation never rejected an honest user's gradient"),
    }
    rows: list[dict[str, float]] = values["rows"]
    rejected: list[str] = values["rejected"]
    unranked: list[int] = values["unranked"]
    honest: InvariantMonitor = values["honest"]
    omega0: np.ndarray = values["omega0"]
    async with population.open():
        if not rows:
            await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(len(rows) + 1, ctx.rounds + 1):
            epoch = math.ceil(round_index / per_epoch)
            gamma_t = config.gamma * config.delta**epoch
            population.begin_round(round_index)
            report = await server.round(round_index, gamma_t, ctx.network.now + timing.round_timeout_s)
            wronged = [str(fault) for fault in report.rejected if fault.party.index not in dishonest]
            honest.check(not wronged, f"round {round_index}: {'; '.join(wronged)}")
            rejected.extend(str(fault) for fault in report.rejected)
            row = _round_row(round_index, epoch, gamma_t, report, attackers, config.secure_filter == "krum")
            due = round_index % per_epoch == 0 if config.eval_every == 0 else round_index % config.eval_every == 0
            if evaluated and (due or round_index == ctx.rounds):
                ranked = ranking_metrics(server.omega, layout, hyper, ctx.train, ctx.test, config.cutoffs)
                if not ranked:
                    unranked.append(round_index)
                row.update(ranked)
            rows.append(row)
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            await ctx.end_round(round_index, population, objects, values)
    final = {name: value for name, value in rows[-1].items() if name != "round"} if rows else {}
    state: dict[str, Any] = {
        "omega": server.omega,
        "initial_omega": omega0,
        "layout": layout,
        "attackers": sorted(attackers),
        "epoch_rounds": per_epoch,
        "population": {"joins": population.joins, "leaves": population.leaves, "crashes": population.crashes},
    }
    baselines: dict[str, str] = {}
    if config.baseline and evaluated and rows:
        curve = centralized_curve(
            omega0, layout, hyper, config.adam(), ctx.train, ctx.test, training, epochs=math.ceil(len(rows) / per_epoch),
            batch_size=config.baseline_batch, cutoffs=config.cutoffs, rng=ctx.rng(Stream.PROTOCOL, _BASELINE),
        )
        state["baseline"] = curve
        for epoch, metrics in enumerate(curve, start=1):
            rows[min(epoch * per_epoch, len(rows)) - 1].update({f"{name}_multvae": value for name, value in metrics.items()})
        for name, value in curve[-1].items():
            final[f"{name}_multvae"] = value
            baselines[name] = f"{name}_multvae"
    timing = {"krum_filter_s": server.filter_s}
    privacy = {
        "guarantee": "none",
        "note": "input dropout perturbs the gradients (Polato Sec. IV-C) but no differential-privacy bound is claimed; "
        "the server sees each sampled user's gradient, whose non-zero W1 rows are the user's kept items",
        "attackers": len(attackers),
    }
    trivial: dict[str, str] = {}
    if evaluated and rows and any(f"ndcg@{k}" in final for k in config.cutoffs):
        final.update(random_ranking_expectation(ctx.test, ctx.train, config.cutoffs))
        trivial = {name: f"{name}_random" for k in config.cutoffs for name in (f"ndcg@{k}", f"recall@{k}") if name in final}
    return Outcome(
        rounds_completed=len(rows), rounds=rows, final=final, privacy=privacy, baselines=baselines,
        warnings=_warnings(rows, rejected, evaluated, unranked), invariants=[honest], state=state, timing=timing, trivial=trivial,
        trivial_reason=(
            "FedVAE adds no noise: the model has not learned enough yet in these rounds (see the per-round metrics), "
            "too few gradients were kept, or byzantine gradients steered it"
        ),
    )


#: Every metric fedvae reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    count("epoch", "the epoch the round belongs to (ceil(round / M), M rounds per epoch)", "epochs"),
    MetricInfo("gamma_t", "the round's FedVAE_dec momentum weight gamma delta^epoch (0 for plain FedVAE)", "", 0.0),
    count("participants", "users the server sent omega in the round (the R sampled online users)", "users"),
    count("gradients", "gradients the server accepted after validation", "gradients"),
    count("missing", "sampled users whose gradient did not arrive before the deadline", "users"),
    count("rejected", "gradients refused by validation (length, indices, non-finite values)", "gradients"),
    count("kept", "gradients SecureFilter (Krum, Multi-Krum) kept and averaged", "gradients"),
    count("krum_f", "the byzantine gradients Krum tolerated in the round: floor(protocol.krum_f n)", "gradients"),
    flag("updated", "1 if omega moved in the round (0: too few gradients for Krum, or none)"),
    count("byzantine_sampled", "attackers among the sampled users (counted by the simulator; the server cannot know)", "users"),
    count("byzantine_accepted", "attackers' gradients that passed validation (simulator's count)", "gradients"),
    count("byzantine_kept", "attackers' gradients SecureFilter kept (simulator's count)", "gradients"),
    *common("ndcg@K", "recall@K", "ndcg@K_random", "recall@K_random"),
    fraction("ndcg@K_multvae", "ndcg@K of centralized Mult-VAE after the same epochs (protocol.baseline)", "higher"),
    fraction("recall@K_multvae", "recall@K of centralized Mult-VAE after the same epochs (protocol.baseline)", "higher"),
)

PROTOCOL = ProtocolSpec(
    "fedvae", FedVAEConfig, run, "Polato: federated Mult-VAE with Krum, Adam at the server and learning-rate decay",
    plan=traffic_plan, memory=memory_estimate, resumable=True, metrics=METRICS, audit=AUDIT,
)
