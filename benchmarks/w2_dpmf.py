"""W2: Hua et al.'s S3 on MovieLens-100k-shaped data, simulated, against the same maths without actors.

The simulation is `scenarios/hua_s3_churn.toml` (943 users x 1682 items, 100,000 ratings, K = 100
served per iteration, k = 10 pre-sharers, churn 0.005 / 0.01 with a third online, lognormal latency,
64-bit ring, every invariant checked every iteration) for 1000 iterations. ``sim_s`` is the CPU time of
the protocol's loop -- the initialization phase and every iteration, with every message encoded, carried,
counted, hashed and decoded -- as the protocol measures it (``state["loop_cpu_s"]``, `time.process_time`);
data generation and the baselines computed after the run are not part of it.

The floor (`floor`) is the same maths, vectorized over the served users in one process without actors,
messages, network or monitors: the same initialization (H, k pieces per item, beta, alpha, tau^), then per
iteration the same churn draws, selection of K online users, fixed-point item vectors, masks, split of
tau^ into pieces, users' steps (eq. (2), unit ball) and gradients, rho~ pieces, the k_j / k'_j weight (k_j
over the users seen so far), encoding, third-party sums minus alpha, unmasking and item step -- with the
protocol's own functions (`ringops`, `noise.pieces`, `Ring`, `item_step`). ``floor_s`` is its CPU time.

``ratio = sim_s / floor_s`` is what the simulation costs over the bare maths, and the figure the target
is read against. Both sides are CPU seconds (`time.process_time`) of a single-threaded computation -- run
it with ``OPENBLAS_NUM_THREADS=1`` so that BLAS threads do not spin. On a shared machine a side's wall
time also counts the time other processes held the core: the floor's wall time moved by a fifth between
runs of the same code (37.7-45.5 s), as much as the distance between the ratio and its target, while the
CPU a side spends is its own. The wall times are printed beside them (``sim_wall_s``, ``floor_wall_s``,
``wall_ratio``), as measured. Each repetition runs the simulation (in a fresh interpreter) and then the
floor, so the sides alternate; each figure is the best of the repetitions of its side.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.mechanisms.laplace import exponential_h, laplace_scale
from fedrecsim.models.mf import item_step, unit_rows
from fedrecsim.network.availability import BernoulliChurn
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.dpmf.central import project_unit_ball
from fedrecsim.protocols.dpmf.config import DPMFConfig
from fedrecsim.protocols.dpmf.noise import PublicCoin, pieces
from fedrecsim.protocols.dpmf.ringops import split_by_item, sum_by_item

from .common import Options, clocked, run_isolated

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "hua_s3_churn.toml"


@dataclass(frozen=True)
class W2Size:
    rounds: int
    overrides: tuple[str, ...] = ()


STANDARD = W2Size(1000)
QUICK = W2Size(20, ("data.users=200", "data.items=300", "data.ratings=6000", "protocol.max_users=30"))
# Only the final round is evaluated, the baseline is one round and the paper's (100 rounds, 4.6 CPU seconds
# here) is not trained: none is part of sim_s, but all ran after every simulation.
_LEAN = ("protocol.eval_every=100000", "protocol.baseline_rounds=1", "protocol.replay=false", "protocol.paper_baseline=false")


def scenario(size: W2Size) -> fedrecsim.Scenario:
    return fedrecsim.load_scenario(SCENARIO, [*size.overrides, *_LEAN, f"run.rounds={size.rounds}"])


def simulate(size: W2Size) -> dict[str, float]:
    """The simulated S3 run; returns the protocol loop's CPU and wall seconds, ``{"cpu_s": ..., "wall_s": ...}``."""
    result = fedrecsim.run(scenario(size))
    if any(invariant["violations"] for invariant in result.result["invariants"]):
        raise fedrecsim.SimulationError(f"W2 broke an invariant: {result.result['invariants']}")
    state = result.outcome.state
    return {"cpu_s": float(state["loop_cpu_s"]), "wall_s": float(state["loop_wall_s"])}


def simulate_alone(rounds: int, overrides: list[str]) -> dict[str, float]:
    """`simulate` of ``W2Size(rounds, overrides)`` as `run_isolated` calls it; the child adds its peak RSS."""
    return simulate(W2Size(rounds, tuple(overrides)))


def floor(train: Ratings, config: DPMFConfig, churn: BernoulliChurn, rounds: int, seed: int) -> tuple[np.ndarray, ...]:
    """S3's maths for ``rounds`` iterations, vectorized over users; returns initial and final ``(U0, V0, U, V)``."""
    rng = np.random.default_rng(seed)
    ring, hyper, d = config.ring, config.hyper, config.d
    n, m = train.n_users, train.n_items
    scale = laplace_scale(d, config.epsilon, train.rating_range[1] - train.rating_range[0])
    coin = PublicCoin(seed, m, d)
    U, V = unit_rows(rng, n, d), unit_rows(rng, m, d)
    initial = (U.copy(), V.copy())
    index = train.by_user()
    counts = train.user_counts()
    parties = [Party(Role.USER, user) for user in range(n)]
    online = np.zeros(n, dtype=bool)
    online[[party.index for party in churn.initial_online(seed, parties)]] = True
    seen = np.zeros(n, dtype=bool)
    known = np.zeros(m, dtype=np.int64)
    # Initialization: k online users per item pre-share eta_j through beta and the third party's alpha.
    sharers = np.flatnonzero(online)
    k = min(config.k_presharing, sharers.size)
    h = exponential_h(rng, (m, d))
    row_items = np.repeat(np.arange(m), k)
    beta = ring.uniform(rng, (row_items.size, d))
    shares = ring.encode(pieces(rng, h[row_items], np.full(row_items.size, k), scale))[0]
    alpha = ring.uniform(rng, (m, d))
    _, tau = sum_by_item(ring, row_items, ring.add(shares, beta), m)
    _, beta_sums = sum_by_item(ring, row_items, beta, m)
    tau_hat = ring.sub(ring.add(alpha, tau), beta_sums)
    for round_index in range(1, rounds + 1):
        arrived = np.flatnonzero(online & ~seen)
        seen[arrived] = True
        known += np.bincount(index.items[index.positions(arrived)], minlength=m)
        candidates = np.flatnonzero(online & (counts > 0))
        if candidates.size > config.max_users:
            candidates = np.sort(rng.choice(candidates, size=config.max_users, replace=False))
        positions = index.positions(candidates)
        items, ratings = index.items[positions], index.values[positions]
        owner = np.repeat(np.arange(candidates.size), counts[candidates])
        raters = np.bincount(items, minlength=m)
        vectors = ring.decode(ring.encode(V)[0][items])
        masks = ring.uniform(rng, (items.size, d))
        eta_pieces = split_by_item(ring, items, tau_hat, rng)
        # Users: eq. (2) with the per-user mean, the unit ball, and eq. (13)'s gradient rows.
        u = U[candidates]
        errors = ratings - np.einsum("ij,ij->i", u[owner], vectors)
        grad_u = np.zeros_like(u)
        np.add.at(grad_u, owner, -2.0 * errors[:, None] * vectors)
        grad_u /= counts[candidates, None]
        U[candidates] = project_unit_ball(u - hyper.gamma * (grad_u + 2.0 * hyper.lam * u))
        gradients = -2.0 * errors[:, None] * u[owner]
        rho = pieces(rng, coin.h(round_index)[items], raters[items], scale)
        signal = ring.encode((gradients + rho) * (known[items] / raters[items])[:, None])[0]
        phi = ring.add(ring.add(signal, eta_pieces), masks)
        # Third party, then recommender.
        present, sums = sum_by_item(ring, items, phi, m)
        sums = ring.sub(sums, alpha[present])
        _, mask_sums = sum_by_item(ring, items, masks, m)
        aggregate = ring.decode(ring.sub(sums, mask_sums))
        V[present] = item_step(V[present], aggregate, known[present], hyper)
        joined, left = churn.between_rounds(seed, round_index, parties, frozenset(parties[i] for i in np.flatnonzero(online)))
        online[[party.index for party in left]] = False
        online[[party.index for party in joined]] = True
    return (*initial, U, V)


def floor_time(size: W2Size) -> dict[str, float]:
    """The floor of ``size`` (its data prepared first, untimed); its CPU and wall seconds, ``{"cpu_s": ..., "wall_s": ...}``."""
    chosen = scenario(size)
    train, _ = prepare_data(chosen.data, chosen.run.seed)
    churn = chosen.availability.churn()
    _, wall, cpu = clocked(lambda: floor(train, chosen.protocol, churn, size.rounds, chosen.run.seed))
    return {"cpu_s": cpu, "wall_s": wall}


def run(options: Options) -> Iterator[str]:
    """``W2 dpmf_s3 sim_s=... floor_s=... ratio=... sim_wall_s=... floor_wall_s=... wall_ratio=... cpu=process_time
    peak_rss_mb=...``: each figure the best of the repetitions of its side; each simulation runs in a fresh
    interpreter, so the peak RSS, the largest of them, is the simulation's."""
    size = QUICK if options.quick else STANDARD
    repeats = options.repeats or 1
    sims, floors = [], []
    for _ in range(repeats):
        sims.append(run_isolated(__name__, "simulate_alone", rounds=size.rounds, overrides=list(size.overrides)))
        floors.append(floor_time(size))
    sim = {clock: min(child[clock] for child in sims) for clock in ("cpu_s", "wall_s")}
    bare = {clock: min(side[clock] for side in floors) for clock in ("cpu_s", "wall_s")}
    yield (
        f"W2 dpmf_s3 sim_s={sim['cpu_s']:.2f} floor_s={bare['cpu_s']:.2f} ratio={sim['cpu_s'] / bare['cpu_s']:.2f} "
        f"sim_wall_s={sim['wall_s']:.2f} floor_wall_s={bare['wall_s']:.2f} wall_ratio={sim['wall_s'] / bare['wall_s']:.2f} "
        f"cpu=process_time peak_rss_mb={max(child['peak_rss_mb'] for child in sims):.0f}"
    )


__all__ = ["QUICK", "STANDARD", "W2Size", "floor", "floor_time", "run", "scenario", "simulate", "simulate_alone"]
