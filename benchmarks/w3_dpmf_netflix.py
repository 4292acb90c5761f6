"""W3: Hua et al.'s S3 at the scale of their Netflix subset -- seconds per iteration and peak memory.

191,668 users x 100 items with about 565,500 ratings (the density 100 random Netflix Prize movies carry,
`fedrecsim.data.synthetic.NETFLIX_DENSITY`), every user an actor, a third of them online, churn 0.005 /
0.01 between iterations, K = 1000 users served per iteration (the paper's value for Netflix), k = 10
pre-sharers, lognormal latency, 64-bit ring, every invariant checked. It runs in a fresh interpreter
(`benchmarks.common.run_isolated`) so that the peak RSS is its own. ``s_per_iter`` is the mean wall time
of an iteration (serving, users, third party, unmasking, monitors, churn and the round gap's joins and
leaves), after the initialization phase; building 191,668 actors, the data and the baselines are not in
it. The paper runs 10,000 iterations; the target is 0.1 s per iteration (10,000 in under 17 minutes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

import fedrecsim
from fedrecsim.data.synthetic import netflix_shape

from .common import Options, run_isolated

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "hua_s3_churn.toml"
STANDARD_ROUNDS, QUICK_ROUNDS = 50, 5
QUICK_USERS = 20_000


def measure(users: int, rounds: int) -> dict[str, float]:
    """One Netflix-shaped S3 run of ``rounds`` iterations with ``users`` users; its per-iteration wall time."""
    shape = netflix_shape()
    ratings = round(shape.n_ratings * users / shape.n_users)
    scenario = fedrecsim.load_scenario(SCENARIO, [
        f"data.users={users}", f"data.items={shape.n_items}", f"data.ratings={ratings}",
        f"data.min_per_user={shape.min_per_user}",
        "protocol.max_users=1000", f"run.rounds={rounds}",
        "protocol.eval_every=100000", "protocol.baseline_rounds=1", "protocol.replay=false",
    ])
    result = fedrecsim.run(scenario)
    if any(invariant["violations"] for invariant in result.result["invariants"]):
        raise fedrecsim.SimulationError(f"W3 broke an invariant: {result.result['invariants']}")
    walls = np.asarray(result.outcome.state["round_wall_s"])
    return {"users": users, "rounds": rounds, "s_per_iter": float(walls.mean()), "s_per_iter_max": float(walls.max())}


def run(options: Options) -> Iterator[str]:
    """``W3 dpmf_s3_netflix s_per_iter=... peak_rss_mb=...``."""
    users = QUICK_USERS if options.quick else netflix_shape().n_users
    rounds = QUICK_ROUNDS if options.quick else STANDARD_ROUNDS
    result = run_isolated(__name__, "measure", users=users, rounds=rounds)
    yield (
        f"W3 dpmf_s3_netflix s_per_iter={result['s_per_iter']:.3f} peak_rss_mb={result['peak_rss_mb']:.0f} "
        f"users={result['users']} iterations={result['rounds']}"
    )


__all__ = ["measure", "run"]
