"""W8: PriviRec-k on Gowalla-shaped synthetic data, simulated, against the centralized GF-CF floor.

``sim_s`` is the wall time of `fedrecsim.run` of PriviRec-k (ideal-mode SecAgg+, L = 2, every user online,
zero latency): the data, every user's actor, the degree sum, two power iterations -- X broadcast to
every user, each user's A^(u)T A^(u) X deposited with the ideal functionality and its masked input sent,
booked at its real m p ring words -- the QR factorizations, the filters' broadcast and the LightGCN
evaluation. ``floor_s`` is the same data's centralized computation of the same result:
`fedrecsim.models.gfcf.fit_gfcf` (low rank, the same Gaussian start) and the same evaluation. Both report
NDCG@20, which must agree.

The standard size is Gowalla's (29,858 users x 40,981 items, 1,027,370 interactions, k = 256): the
protocol moves every X to every user and every masked input back, (2L + 1) n m k 8 bytes = 12.5 TB in
the ledger (``full_traffic_tb``). The simulator carries it because ideal mode books each masked input
as padding instead of sending it (`Network.send`), users deposit their nonzero rows only (`RowBlock`),
and a broadcast's copies share one encoded body (`wire.Broadcast`). Both sides take minutes and about
7 GB; ``--quick`` runs n = 60 with the same ratios.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import fedrecsim
from fedrecsim.data.prepare import prepare_data
from fedrecsim.models.gfcf import GFCFHyper, fit_gfcf, interaction_matrix
from fedrecsim.protocols.privirec.evaluation import evaluate
from fedrecsim.protocols.privirec.protocol import start_rng
from fedrecsim.scenario import parse_scenario

from .common import Options, timed

GOWALLA_USERS, GOWALLA_ITEMS, GOWALLA_INTERACTIONS = 29_858, 40_981, 1_027_370
STANDARD_USERS, STANDARD_K = GOWALLA_USERS, 256
QUICK_USERS, QUICK_K = 60, 8
ITERATIONS, SEED = 2, 8


def shape(users: int) -> tuple[int, int]:
    """(items, interactions) of Gowalla's shape at ``users`` users."""
    items = round(users * GOWALLA_ITEMS / GOWALLA_USERS)
    return items, round(users * GOWALLA_INTERACTIONS / GOWALLA_USERS)


def scenario(users: int, k: int) -> dict[str, Any]:
    items, interactions = shape(users)
    return {
        "run": {"name": "w8-privirec-k", "protocol": "privirec", "seed": SEED, "rounds": ITERATIONS},
        "data": {"source": "synthetic", "feedback": "implicit", "users": users, "items": items,
                 "ratings": interactions, "split": "per_user", "test_fraction": 0.2},
        "network": {"latency": {"model": "constant", "seconds": 0.0}},
        "availability": {"model": "always"},
        "protocol": {"variant": "privirec_k", "k": k, "secagg": "ideal", "graph": "sparse", "baseline": False},
    }


def ours(users: int, k: int) -> dict[str, float]:
    result = fedrecsim.run(scenario(users, k))
    if result.result["rounds_completed"] != ITERATIONS or "ndcg@20" not in result.metrics:
        raise fedrecsim.SimulationError("W8: the PriviRec-k run did not complete")
    return {"ndcg": result.metrics["ndcg@20"], "user_bytes": result.metrics["user_sent_bytes"] + result.metrics["user_recv_bytes"]}


def floor(users: int, k: int) -> dict[str, float]:
    parsed = parse_scenario(scenario(users, k))
    train, test = prepare_data(parsed.data, SEED)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=k, iterations=ITERATIONS, low_rank=True), start_rng(SEED))
    return {"ndcg": evaluate(lambda batch: filters.gfcf_scores(R[batch]), train, test)["ndcg@20"]}


def full_traffic_tb(k: int = 256) -> float:
    """The bytes of X's broadcasts and the masked inputs at Gowalla's full size: (2L + 1) n m k 8."""
    return (2 * ITERATIONS + 1) * GOWALLA_USERS * GOWALLA_ITEMS * k * 8 / 1e12


def run(options: Options) -> Iterator[str]:
    """``W8 privirec_k sim_s=... floor_s=... ratio=...``."""
    users, k = (QUICK_USERS, QUICK_K) if options.quick else (STANDARD_USERS, STANDARD_K)
    repeats = options.repeats or 1
    sim_s = floor_s = math.inf
    sim = base = None
    for _ in range(repeats):
        sim, seconds = timed(lambda: ours(users, k))
        sim_s = min(sim_s, seconds)
        base, seconds = timed(lambda: floor(users, k))
        floor_s = min(floor_s, seconds)
    assert sim is not None and base is not None
    if abs(sim["ndcg"] - base["ndcg"]) > 1e-3:  # equal scores to 1e-6; a tie at rank 20 may still flip
        raise fedrecsim.SimulationError(f"W8: NDCG@20 {sim['ndcg']} simulated against {base['ndcg']} centralized")
    items, interactions = shape(users)
    yield (
        f"W8 privirec_k sim_s={sim_s:.3f} floor_s={floor_s:.3f} ratio={sim_s / floor_s:.1f} users={users} items={items} "
        f"interactions={interactions} k={k} ndcg@20={sim['ndcg']:.4f} user_bytes={sim['user_bytes']:.0f} "
        f"full_traffic_tb={full_traffic_tb():.1f}"
    )


__all__ = ["floor", "full_traffic_tb", "ours", "run", "scenario", "shape"]
