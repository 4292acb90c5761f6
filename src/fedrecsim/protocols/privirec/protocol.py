"""PriviRec and PriviRec-k (Nicolas et al.): GF-CF's normalized item-item matrix and ideal low-pass filter
computed by a server and users that hold their own interaction rows, over secure aggregation.

The run, after the paper's Figs. 4 and 5 (``variant = "privirec"`` or ``"privirec_k"``):

- set-up (the ledger's round 0): the item degrees V by secure aggregation of the users' rows, broadcast;
  PriviRec also sums (1/d_u) R^(u)T R^(u) (upper triangles) and broadcasts P~ = V^-1/2 P' V^-1/2 (Thm 3.1);
- rounds 1..L (``run.rounds`` is L, the power iterations of Alg. 1): the server broadcasts X_(l-1), each
  user computes A^(u)T A^(u) X_(l-1) from its own row, the server securely sums them and factorizes
  Y_l = X_l T_l (QR with a non-negative diagonal). X_0 is the QR of a Gaussian m x p matrix drawn from
  the run's stream (``Stream.PROTOCOL``, `START_STREAM`) -- `start_rng` -- so that
  `fedrecsim.models.gfcf.fit_gfcf` with the same generator is the centralized twin. *Departure*: Alg. 1's
  first step is Y_0 = R~^T Omega for a Gaussian Omega of n x p (one more secure sum, of each user's
  a_u^T omega_u); the server draws the random orthonormal start instead, which the first iteration maps
  into the range of P~ all the same;
- the normalization R~ = U^-alpha R V^(alpha-1) takes ``alpha`` (default 1/2, GF-CF's and the paper's
  experiments'; Turbo-CF's published 0.6 for Gowalla and Yelp2018): users sum d_u^(-2 alpha) R^(u)T R^(u)
  and A^(u) = d_u^-alpha R^(u) V^(alpha-1); F_IDL's ideal filter keeps ``ideal_k`` (default GF-CF's
  k1 = 256, capped at k) leading columns of S_k;
- then, in the ledger's closing phase (`RunContext.begin_closing`: counted apart from the rounds, so a
  round's bytes are the same in a run of one round and of ten), the server broadcasts S_k (the first k
  columns of X_L) and, for PriviRec-k, diag(T_L)[:k]
  (Approx. 3.3: P~ ~ S_k Diag(t) S_k^T, no m^2 sum at all); each user scores its own row with GF-CF,
  S_u = R_u (P~ + gamma F_IDL) (``scorer = "gfcf"``), or Turbo-CF's polynomial filter of P~
  (``scorer = "turbo_cf"``), and recommends its top 20 items.

Secure aggregation: `fedrecsim.protocols.secagg` in a ring Z_2^bits with ``frac_bits`` fractional bits
(the default 64/40 keeps the fixed-point rounding of a sum of n inputs below n 2^-41), real mode while m <=
``real_max_items`` (``secagg = "auto"``), the ideal mode -- the same messages and bytes, no cryptography --
beyond it; ``result.json``'s ``privacy.secure_aggregation.mode`` says which ran. The sums are complete:
users with no interactions send zeros. Timing: every sum has ``run.round_timeout_s`` from its start (the
set-up holds one or two), each of its four stages at most ``stage_timeout_s``.

Faults (docs/faults.md). A user is asked for its part in one session at a time (the one its input is
for): a setup it never received means the sum went on without it, and it takes part in the next.

Evaluation: LightGCN's Recall@20 and NDCG@20 (`evaluation`) over the users with test items. A user's
scores depend only on its own row and the broadcast filters, which every user received byte for byte
the same, so the simulator scores the users' rows in blocks with the filters a user decoded (the same
numbers each user computes alone, faster). With ``baseline = true`` two centralized references are run
beside it, each scored by the configured scorer:

- the *twin*: `fedrecsim.models.gfcf.fit_gfcf`, the same randomized power method (L iterations, p
  columns, PriviRec-k's low rank) from the same Gaussian start, centralized -- ``recall@20_twin``,
  ``ndcg@20_twin`` and ``max_score_gap``, the largest difference between a decentralized and a twin's
  score; the monitor ``matches_centralized`` checks it is below 1e-6 when every user was in every sum.
  It shows the decentralization is exact, not that the result is GF-CF;
- GF-CF itself (Shen et al.): `fedrecsim.models.gfcf.fit_gfcf_exact`, the exact P~ and the exact top-k
  singular vectors of R~ (k = the ideal filter's width, ``ideal_k``) -- ``recall@20_gfcf``,
  ``ndcg@20_gfcf``, the run's ``baselines``. The power method reaches it as L grows (issue 30: on ML-1M
  at L = 2 PriviRec's NDCG@20 is 0.0960 and PriviRec-k's (k = 256) 0.0935 against GF-CF's 0.0983).

Dropout (the scenario's ``availability.dropout``; the paper assumes none). A user drawn to crash in
round l goes silent at a secure-aggregation stage (``crash_stage``, drawn uniformly by default) and
recovers at the round's end. Secure aggregation's recovery then does what it promises -- the server gets
the exact sum over U3, the users that sent their masked input -- and that is what hurts:

1. the power method no longer iterates one matrix: iteration l multiplies by P~ minus the crashed users'
   a_u^T a_u while V (and, for PriviRec, P~) still count them, so S_k is the top subspace of none of
   them; ``max_score_gap`` and the centralized baseline measure how far the recommendations move;
2. PriviRec's server knows P~ (it broadcast it) and X_(l-1), so P~ X_(l-1) - Y_l is exactly the crashed
   users' sum a_u^T (a_u X_(l-1)): with one crash in a round it is that user's own contribution, whose
   nonzero rows are its items -- its whole interaction profile; with g crashes, the union of their g
   profiles. ``exposed_users`` counts, per round, the crashed users the server so isolates in a group of
   ``exposure_group`` or fewer (of those P~ counts), and ``profiles_leaked`` the rounds in which the rows it learns are
   exactly the union of their items (checked by the simulator against their rows). PriviRec-k does not
   broadcast P~; its server can form the difference only once it has reconstructed P~ (Leaks, 2.).

Leaks the paper does not consider (`attacks`; ``privacy.known_leaks``), run at the end of every run on
what the parties received and checked against the users' rows:

1. PriviRec's broadcast V and P~ give every receiver P' = V^1/2 P~ V^1/2, whose rows of items of degree 1
   and 2 decode whole profiles exactly (9 users of ML-1M, 38 of Gowalla, 326 of Yelp2018):
   ``profiles_decoded_by_broadcast`` (what the first user that received P~ claims) and
   ``profiles_exposed_by_broadcast`` (the users whose whole profile is among the claims).
2. PriviRec-k's server sent X_0 .. X_(L-1) and received Y_l = P~ X_(l-1): whenever L p >= m the bases
   span R^m and it reconstructs P~ = Y X^+ exactly, although P~ is never summed nor broadcast.
   ``server_basis_rank`` (the rank of the stacked bases), ``server_p_error`` (max |Y X^+ - P~| against
   the data's P~; below rank m, over the first 2^22 / m columns only: a lower bound), ``server_recovers_p``
   (1 when the rank is m and the error at most `attacks.RECOVERY_TOLERANCE`) and
   ``profiles_exposed_to_server`` (attack 1 on the reconstruction).

Metrics per round: ``participants`` (|U3|), ``dropped`` (members whose input is missing from the sum),
``exposed_users``, ``profiles_leaked``; final adds ``recall@20``, ``ndcg@20``, the references' and the
bytes: ``user_sent_bytes`` / ``user_recv_bytes`` (mean per user, whole run) and ``server_sent_bytes`` /
``server_recv_bytes`` (whole run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...config import param
from ...data.metrics import random_ranking_expectation
from ...errors import ConfigError, SecAggAborted
from ...invariants import InvariantMonitor
from ...mechanisms.ring import Ring
from ...metric_declarations import MetricInfo, byte_count, common, count, flag, fraction
from ...models.gfcf import GFCFHyper, GraphFilters, fit_gfcf, fit_gfcf_exact, gaussian_start, interaction_matrix
from ...network.party import SERVER, Party, Role
from ...seeding import Stream, generator
from ..runtime import Outcome, ProtocolSpec, RunContext
from ..secagg import IdealSum, SecAggParams, Stage
from . import attacks
from .evaluation import evaluate
from .roles import ITEM_ITEM_SESSION, POWER, PriviRecServer, PriviRecUser, members_missing
from .audit import AUDIT
from .traffic import memory as memory_estimate
from .traffic import plan as traffic_plan

#: ``Stream.PROTOCOL`` ids: the power method's Gaussian start, and each user's crash-stage draws.
START_STREAM, STAGE_STREAM = 0, 1
#: A decentralized score within this of the centralized one counts as equal (`matches_centralized`).
SCORE_TOLERANCE = 1e-6
_K_EVAL = 20


@dataclass(frozen=True)
class PriviRecConfig:
    variant: Literal["privirec", "privirec_k"] = param(
        "privirec", doc="privirec: P~ by secure aggregation (m^2 per user) | privirec_k: P~ ~ S_k Diag(T_L) S_k^T"
    )
    k: int = param(256, ge=1, doc="singular vectors in the ideal low-pass filter (PriviRec-k: also P~'s rank)")
    oversample: int = param(0, ge=0, doc="extra columns carried through the power iterations (p = k + oversample)")
    ideal_k: int = param(
        256, ge=0, doc="the leading columns of S_k users put in F_IDL (PriviRec-k's Fig. 5), capped at k; default GF-CF's "
        "k1 = 256; 0 = all k"
    )
    alpha: float = param(
        0.5, gt=0, le=1, doc="the normalization R~ = U^-alpha R V^(alpha-1): GF-CF and PriviRec 1/2, Turbo-CF 0.6 on Gowalla and Yelp2018"
    )
    gamma: float = param(0.3, ge=0, doc="GF-CF: the weight of the ideal low-pass filter")
    scorer: Literal["gfcf", "turbo_cf"] = param("gfcf", doc="how users score: GF-CF, or Turbo-CF's polynomial filter of P~")
    turbo_filter: Literal[1, 2, 3] = param(2, doc="turbo_cf: 1 P | 2: 2P - P^2 | 3: P + 0.01(-P^3 + 10P^2 - 29P)")
    turbo_power: float = param(1.0, gt=0, doc="turbo_cf: P-bar = P~ raised element-wise to this (privirec_k: 1 only)")
    secagg: Literal["auto", "real", "ideal"] = param(
        "auto", doc="secure aggregation: auto = real while items <= real_max_items, else ideal (same bytes, no crypto)"
    )
    real_max_items: int = param(400, ge=1, doc="secagg = auto: the largest item count run with the real cryptography")
    graph: Literal["complete", "sparse"] = param("sparse", doc="complete: Bonawitz et al. 2017 | sparse: SecAgg+ (Bell et al. 2020)")
    neighbours: int = param(0, ge=0, doc="sparse: the degree k; 0 = 2 ceil(log2 n)")
    threshold: float = param(0.5, ge=0, lt=1, doc="t = floor(threshold (k + 1)) + 1 shares of a neighbourhood of k + 1")
    bits: Literal[32, 64] = param(64, doc="the ring Z_{2^bits} of the secure sums")
    frac_bits: int = param(40, ge=1, doc="fixed-point fractional bits of the encoding")
    stage_timeout_s: float = param(10.0, gt=0, doc="how long the server waits for one stage's replies (virtual s)")
    min_users: int = param(0, ge=0, doc="users refuse a session of fewer users than this; 0 = t of a session of all users")
    crash_stage: Literal["random", "advertise_keys", "share_keys", "masked_input_collection", "unmasking"] = param(
        "random", doc="where a user the dropout model picks goes silent: a secure-aggregation stage, or one drawn uniformly"
    )
    exposure_group: int = param(10, ge=1, doc="dropout: count users the server isolates in groups of at most this many")
    baseline: bool = param(
        True, doc="also run the centralized references: the twin (the same power method from the same start; score gap) "
        "and GF-CF with the exact top-k SVD (*_twin, *_gfcf metrics)"
    )


def start_rng(seed: int) -> np.random.Generator:
    """The generator of the power method's Gaussian start in a run of ``seed`` (module docstring)."""
    return generator(seed, Stream.PROTOCOL, START_STREAM)


def hyper(config: PriviRecConfig, rounds: int) -> GFCFHyper:
    """The centralized GF-CF's hyper-parameters of a run (L = ``run.rounds``)."""
    return GFCFHyper(k=config.k, gamma=config.gamma, iterations=rounds, oversample=config.oversample,
                     low_rank=config.variant == "privirec_k", ideal_k=ideal_rank(config), alpha=config.alpha)


def ideal_rank(config: PriviRecConfig) -> int:
    """The columns of S_k in F_IDL: ``ideal_k`` capped at k, all k for 0."""
    return min(config.ideal_k, config.k) if config.ideal_k else config.k


def secagg_mode(config: PriviRecConfig, n_items: int) -> str:
    """``real`` or ``ideal``: what ``secagg`` means for ``n_items`` items."""
    if config.secagg != "auto":
        return config.secagg
    return "real" if n_items <= config.real_max_items else "ideal"


def secagg_params(config: PriviRecConfig, n_items: int, n_users: int) -> SecAggParams:
    """The sessions' public parameters: the config's, over the population of the data's ``n_users`` users
    (against which each user checks its setups)."""
    if config.frac_bits >= config.bits - 1:
        raise ConfigError("protocol.frac_bits", f"must be < bits - 1 = {config.bits - 1}, got {config.frac_bits}")
    return SecAggParams(
        ring=Ring(config.bits, config.frac_bits), graph=config.graph, neighbours=config.neighbours,
        threshold=config.threshold, ideal=secagg_mode(config, n_items) == "ideal", stage_timeout_s=config.stage_timeout_s,
        population=n_users, min_users=config.min_users,
    )


def _check(config: PriviRecConfig, n_items: int) -> None:
    if config.k + config.oversample > n_items:
        raise ConfigError(
            "protocol.k", f"k + oversample = {config.k + config.oversample} exceeds the number of items {n_items}"
        )
    if config.scorer == "turbo_cf" and config.variant == "privirec_k" and config.turbo_power != 1.0:
        raise ConfigError("protocol.turbo_power", "privirec_k's low-rank P~ takes turbo_power = 1 only")


def score_function(filters: GraphFilters, config: PriviRecConfig, R: Any):  # type: ignore[no-untyped-def]
    """The score block function of ``filters``: users -> their rows' scores (the configured scorer); for
    PriviRec-k's low-rank filters one that `evaluation.evaluate` screens in float32 (`LowRankScores`)."""
    if config.scorer == "gfcf":
        return filters.gfcf_block(R, config.gamma)
    return filters.turbo_block(R, config.turbo_filter, config.turbo_power)


def max_gap(one: Any, other: Any, n_users: int, n_items: int) -> float:
    """The largest |one - other| over every user's scores, block by block."""
    rows = max(1, (1 << 22) // max(n_items, 1))
    gap = 0.0
    for start in range(0, n_users, rows):
        users = np.arange(start, min(start + rows, n_users))
        gap = max(gap, float(np.max(np.abs(one(users) - other(users)), initial=0.0)))
    return gap


def _parties(ctx: RunContext, config: PriviRecConfig, params: SecAggParams, ideal: IdealSum | None):  # type: ignore[no-untyped-def]
    train = ctx.train
    index = train.by_user()
    crash_stage = None if config.crash_stage == "random" else Stage(config.crash_stage)
    users = {}
    for user_index in range(train.n_users):
        party = Party(Role.USER, user_index)
        users[party] = PriviRecUser(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, user_index),
            index.items[index.indptr[user_index] : index.indptr[user_index + 1]], train.n_items, params, ideal,
            exact_item_item=config.variant == "privirec", iterations=ctx.rounds, ideal_k=ideal_rank(config), alpha=config.alpha,
            stage_rng=ctx.rng(Stream.PROTOCOL, STAGE_STREAM, user_index), crash_stage=crash_stage,
        )
    start = gaussian_start(train.n_items, config.k + config.oversample, start_rng(ctx.seed))
    server = PriviRecServer(
        SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0), train.n_items, params, ideal,
        exact_item_item=config.variant == "privirec", k=config.k, start=start, alpha=config.alpha,
    )
    return users, server


def _exposure(server: PriviRecServer, seen, users, group: int, tolerance: float) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(users the server isolates as a group of at most ``group``, 1 if the rows it so learns are exactly the
    union of their items) of one power iteration -- PriviRec only (module docstring, Dropout 2.). Only a
    user whose input is in P~ is isolated: P~ X - Y_l holds nothing of one that was missing from P' too."""
    if server.state.item_item is None:
        return 0, 0
    in_item_item = next(sum_.result.survivors for sum_ in server.state.sums if sum_.session == ITEM_ITEM_SESSION)
    missing = [party for party in members_missing(seen.members, seen) if party in in_item_item]
    if not missing or len(missing) > group:
        return 0, 0
    basis = server.state.bases[seen.session - POWER - 1]
    total = server.params.ring.decode(seen.result.total).reshape(basis.shape)
    difference = server.state.item_item @ basis - total  # what the server can compute: sum of the missing inputs
    revealed = set(np.flatnonzero(np.max(np.abs(difference), axis=1) > tolerance).tolist())
    union = set(np.concatenate([users[party].items for party in missing]).tolist())
    return len(missing), int(bool(union) and revealed == union)


def _known_leaks(config: PriviRecConfig, rounds: int, n_items: int) -> list[str]:
    """What the paper's privacy argument misses, as the run's ``privacy.known_leaks`` (module docstring, Leaks)."""
    if config.variant == "privirec":
        return [
            "the broadcast V and P~ give every receiver P' = V^1/2 P~ V^1/2, whose rows of items of degree 1 and 2 "
            "decode whole profiles exactly (metrics: profiles_exposed_by_broadcast, checked against the users' rows)",
        ]
    p = config.k + config.oversample
    return [
        f"the server knows Y_l = P~ X_(l-1) for the L = {rounds} bases it sent, so it reconstructs P~ exactly "
        f"whenever L p >= m (here L p = {rounds * p}, m = {n_items}) and then decodes profiles as from PriviRec's "
        "broadcast (metrics: server_recovers_p, server_p_error, profiles_exposed_to_server)",
    ]


def _leaks(config: PriviRecConfig, params: SecAggParams, users, server: PriviRecServer, R: Any) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The `attacks` run on what the parties received, checked against the users' rows (module docstring,
    Leaks): PriviRec's broadcast decoded by its first receiver; PriviRec-k's server's reconstruction of P~
    from the bases it sent and the sums it decoded, and the profiles that reconstruction decodes."""
    rows = [user.items for user in users.values()]
    if config.variant == "privirec":
        receiver = next((user for user in users.values() if user.item_item is not None), None)
        if receiver is None:
            return {}
        profiles = attacks.decode_profiles(receiver.degrees, attacks.dense_rows(receiver.item_item), config.alpha)
        return {"profiles_decoded_by_broadcast": len(profiles),
                "profiles_exposed_by_broadcast": attacks.exposed_users(profiles, rows)}
    power = [seen for seen in server.state.sums if seen.session > POWER]
    if not power:
        return {}
    bases = [server.state.bases[seen.session - POWER - 1] for seen in power]
    totals = [params.ring.decode(seen.result.total).reshape(basis.shape) for seen, basis in zip(power, bases)]
    recovery = attacks.recover_item_item(bases, totals)
    error = recovery.error(R, config.alpha, first_block_only=not recovery.determined)
    recovers = recovery.determined and error <= attacks.RECOVERY_TOLERANCE
    leaks = {"server_recovers_p": float(recovers), "server_p_error": error, "server_basis_rank": recovery.rank}
    profiles = attacks.decode_profiles(server.state.degrees, recovery.rows, config.alpha) if recovery.determined else []
    leaks["profiles_exposed_to_server"] = attacks.exposed_users(profiles, rows)
    return leaks


async def run(ctx: RunContext) -> Outcome:
    config: PriviRecConfig = ctx.config
    train, test = ctx.train, ctx.test
    _check(config, train.n_items)
    params = secagg_params(config, train.n_items, train.n_users)
    ideal = IdealSum() if params.ideal else None
    users, server = _parties(ctx, config, params, ideal)
    ctx.network.attach(SERVER)
    timing = ctx.scenario.run
    population = ctx.population(users)
    objects: dict[str, Any] = {"server": server, "ideal": ideal} if ideal is not None else {"server": server}
    values = ctx.resumed(population, objects) or {"rounds": [], "warnings": []}
    rounds: list[dict[str, float]] = values["rounds"]
    warnings: list[str] = values["warnings"]
    aborted = False
    tolerance = 1e-6
    async with population.open():
        if not rounds:
            await ctx.network.sleep(timing.round_gap_s)
            try:
                await server.setup(timing.round_timeout_s)
            except SecAggAborted as error:
                warnings.append(f"set-up: {error}")
                aborted = True
        for round_index in range(len(rounds) + 1, ctx.rounds + 1):
            if aborted:
                break
            population.begin_round(round_index)
            try:
                seen = await server.iterate(round_index, ctx.network.now + timing.round_timeout_s)
            except SecAggAborted as error:
                warnings.append(f"round {round_index}: {error}")
                aborted = True
                population.end_round(round_index)
                break
            missing = members_missing(seen.members, seen)
            exposed, leaked = _exposure(server, seen, users, config.exposure_group, tolerance)
            rounds.append({
                "round": round_index, "participants": len(seen.result.survivors), "dropped": len(missing),
                "exposed_users": exposed, "profiles_leaked": leaked,
            })
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            await ctx.end_round(round_index, population, objects, values)
        if not aborted:
            ctx.begin_closing(population)
            server.publish()
            await ctx.network.sleep(timing.round_gap_s)
    # Some user missing from some sum -- crashed in it, or offline for it (set-up or round) -- or none.
    dropped_any = any(len(seen.result.survivors) < len(users) for seen in server.state.sums)
    return _outcome(ctx, config, params, users, server, rounds, warnings, aborted, dropped_any)


def _outcome(ctx, config, params, users, server, rounds, warnings, aborted, dropped_any) -> Outcome:  # type: ignore[no-untyped-def]
    train, test = ctx.train, ctx.test
    final: dict[str, float] = {}
    if rounds:
        final.update({name: value for name, value in rounds[-1].items() if name != "round"})
        final["exposed_users"] = sum(row["exposed_users"] for row in rounds)
        final["profiles_leaked"] = sum(row["profiles_leaked"] for row in rounds)
    matches = InvariantMonitor(
        "matches_centralized",
        f"with every user in every sum, each decentralized score is within {SCORE_TOLERANCE:g} of its centralized "
        "twin's (the same power method from the same start)",
    )
    state: dict[str, Any] = {"server": server.state, "users": users, "params": params}
    received = next((user.filters for user in users.values() if user.filters is not None), None)
    R = interaction_matrix(train)
    if received is not None and not aborted:
        ours = score_function(received, config, R)
        final.update(evaluate(ours, train, test, _K_EVAL))
        state["filters"] = received
        if config.baseline:
            twin = fit_gfcf(R, hyper(config, ctx.rounds), start_rng(ctx.seed))
            theirs = score_function(twin, config, R)
            final.update({f"{name}_twin": value for name, value in evaluate(theirs, train, test, _K_EVAL).items()})
            gap = max_gap(ours, theirs, train.n_users, train.n_items)
            final["max_score_gap"] = gap
            state["twin"] = twin
            if not dropped_any:
                matches.check(gap <= SCORE_TOLERANCE, f"the largest score gap is {gap:.3g}")
            reference = fit_gfcf_exact(R, ideal_rank(config), config.alpha)
            exact = score_function(reference, config, R)
            final.update({f"{name}_gfcf": value for name, value in evaluate(exact, train, test, _K_EVAL).items()})
            state["gfcf"] = reference
    if not aborted:
        final.update(_leaks(config, params, users, server, R))
    missing_filters = sum(user.filters is None for user in users.values())
    if missing_filters and not aborted:
        warnings.append(f"{missing_filters} users did not receive the filters (offline at the end, or the broadcast was lost)")
    ledger = ctx.network.ledger
    user_counters = [ledger.party(party) for party in users]
    n = max(len(users), 1)
    final.update({
        "user_sent_bytes": sum(c["sent_bytes"] for c in user_counters) / n,
        "user_recv_bytes": sum(c["recv_bytes"] for c in user_counters) / n,
        "server_sent_bytes": ledger.party(SERVER)["sent_bytes"],
        "server_recv_bytes": ledger.party(SERVER)["recv_bytes"],
    })
    baselines = {name: f"{name}_gfcf" for name in (f"recall@{_K_EVAL}", f"ndcg@{_K_EVAL}") if f"{name}_gfcf" in final}
    last = server.state.sums[-1].result if server.state.sums else None
    privacy = {
        "mechanism": "PriviRec-k (Nicolas et al.)" if config.variant == "privirec_k" else "PriviRec (Nicolas et al.)",
        "secure_aggregation": {
            "mode": "ideal" if params.ideal else "real",
            "protocol": "SecAgg+ (Bell et al. 2020)" if config.graph == "sparse" else "Bonawitz et al. 2017",
            "ring_bits": config.bits, "frac_bits": config.frac_bits,
            "threshold": last.threshold if last else None, "degree": last.degree if last else None,
            "sessions": len(server.state.sums), "graph_failure": params.security_report(last),
        },
        "server_learns": "the item degrees V, "
        + ("P~ (the whole normalized item-item matrix), " if config.variant == "privirec" else "")
        + "every Y_l = P~ X_(l-1) summed over the users in U3, and so S_k"
        + (" and diag(T_L)" if config.variant == "privirec_k" else ""),
        "users_learn": "V, " + ("P~, " if config.variant == "privirec" else "") + "every X_l and the filters",
        "dropout": "with users dropping mid-protocol PriviRec's server isolates the dropped users' inputs "
        "(P~ X - Y_l); see exposed_users and profiles_leaked" if config.variant == "privirec"
        else "PriviRec-k's server does not isolate a dropped user's input by P~ X - Y_l while L p < m (it does not "
        "know P~); with L p >= m it reconstructs P~ (server_recovers_p) and can",
        "adversary": "honest-but-curious server; no collusion beyond secure aggregation's threshold",
        "known_leaks": _known_leaks(config, ctx.rounds, ctx.train.n_items),
    }
    if params.ideal:
        privacy["secure_aggregation"]["note"] = (
            f"ideal mode ({ctx.train.n_items} items > real_max_items = {config.real_max_items}, or secagg = ideal): "
            "bytes as in real mode, the sums computed by the ideal functionality"
        )
    trivial: dict[str, str] = {}
    if f"ndcg@{_K_EVAL}" in final:
        final.update(random_ranking_expectation(test, train, (_K_EVAL,), recall_by="count"))
        trivial = {name: f"{name}_random" for name in (f"recall@{_K_EVAL}", f"ndcg@{_K_EVAL}")}
    return Outcome(
        len(rounds), rounds, final, privacy=privacy, baselines=baselines, invariants=[matches], warnings=warnings,
        state=state, trivial=trivial,
        trivial_reason=(
            "PriviRec adds no noise: its scores equal its centralized twin's (*_twin) unless users dropped; "
            "GF-CF itself ranks no better than chance on data with little collaborative structure"
        ),
    )


#: Every metric privirec reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    count("participants", "users whose input is in the round's secure sum (|U3|)", "users"),
    count("dropped", "members whose input is missing from the round's sum (crashed mid-protocol)", "users"),
    count(
        "exposed_users",
        "crashed users whose contribution the server isolates in a group of protocol.exposure_group or fewer "
        "(per round; final: summed over rounds)",
        "users",
    ),
    count(
        "profiles_leaked",
        "rounds in which the rows the server learns are exactly the crashed users' items (per round 0 or 1; final: summed)",
        "rounds",
    ),
    *common("recall@K", "ndcg@K", "recall@K_random", "ndcg@K_random"),
    fraction(
        "recall@K_twin",
        "recall@K of the centralized twin (the same randomized power method from the same Gaussian start, run "
        "centrally; protocol.baseline): the run's own unless users dropped",
        "higher",
    ),
    fraction("ndcg@K_twin", "ndcg@K of the centralized twin (the same randomized power method; protocol.baseline)", "higher"),
    fraction(
        "recall@K_gfcf",
        "recall@K of GF-CF (exact top-k SVD): the exact P~ and the exact top-k singular vectors of R~ (protocol.baseline)",
        "higher",
    ),
    fraction("ndcg@K_gfcf", "ndcg@K of GF-CF (exact top-k SVD; protocol.baseline)", "higher"),
    MetricInfo("max_score_gap", "the largest difference between a decentralized and the centralized twin's score", "score", 0.0, better="lower"),
    count(
        "profiles_decoded_by_broadcast",
        "PriviRec: profiles the first receiver of the broadcast P~ decodes from items held by one or two users (the attack's claims)",
        "users",
    ),
    count(
        "profiles_exposed_by_broadcast",
        "PriviRec: users whose whole profile is among those claims, checked against their rows (a leak the paper denies)",
        "users",
    ),
    flag(
        "server_recovers_p",
        "PriviRec-k: 1 when the server rebuilds P~ from the bases it sent and the sums it decoded "
        "(the stacked bases have rank m, possible once L p >= m) to within 1e-6",
    ),
    MetricInfo("server_p_error", "PriviRec-k: the largest error of the server's reconstruction of P~", "value", 0.0, better="lower"),
    count("server_basis_rank", "PriviRec-k: the rank of the bases the server sent, stacked over the L iterations (m: P~ recovered)", "dimensions"),
    count("profiles_exposed_to_server", "PriviRec-k: users whose whole profile the server decodes from its reconstruction of P~", "users"),
    MetricInfo("user_sent_bytes", "bytes a user sent over the whole run, mean over the users", "bytes", 0.0),
    MetricInfo("user_recv_bytes", "bytes a user received over the whole run, mean over the users", "bytes", 0.0),
    byte_count("server_sent_bytes", "bytes the server sent over the whole run"),
    byte_count("server_recv_bytes", "bytes the server received over the whole run"),
)

PROTOCOL = ProtocolSpec(
    "privirec", PriviRecConfig, run, "PriviRec / PriviRec-k: GF-CF's graph filters over secure aggregation (Nicolas et al.)",
    plan=traffic_plan, memory=memory_estimate, resumable=True, metrics=METRICS, audit=AUDIT,
)
