"""W5: one epoch of Minto et al.'s local-DP protocol through one proxy, end to end.

The standard size is the paper's medium setting: 10,000 users, 1,000 items, F = 5, k = 100 reports per
user (1,000,000 reports per epoch), one proxy holding the whole epoch as one pool. The run goes through
`fedrecsim.run` -- synthetic data, network with log-normal latency, ledger, users solving eq. (4) and
running Algorithm 1, the proxy splitting and shuffling, the server's eq. (9) estimate and update -- for
three epochs, and the middle one is timed: epoch 1 also opens every directed link (a seeded generator
each) and the last is followed by evaluation, so epoch 2 is the steady-state cost of an epoch.
``reports_per_s`` is the reports the server aggregated in that epoch over its wall seconds (target:
>= 200,000, printed as ``reports_per_s_target_min``). Each run is a fresh interpreter
(`benchmarks.common.run_isolated`), so ``peak_rss_mb`` -- the largest of the repeats' peaks -- is the whole
run's own memory (data, users, proxy, server). There is no peer simulator for this protocol; the line
stands alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import fedrecsim
from fedrecsim.errors import SimulationError

from .common import Options, run_isolated

STANDARD_USERS, QUICK_USERS = 10_000, 1_000
#: The target: the server aggregates at least this many reports per second of an epoch.
REPORTS_PER_S_TARGET = 200_000


def tables(users: int) -> dict[str, Any]:
    """The W5 scenario at ``users`` users (1,000 items, 50 interactions each; 200 and 20 below 10,000 users)."""
    items, per_user = (1000, 50) if users >= STANDARD_USERS else (200, 20)
    return {
        "run": {"protocol": "ldp_implicit", "name": "w5", "seed": 0, "rounds": 3},
        "data": {"source": "synthetic", "feedback": "implicit", "users": users, "items": items,
                 "ratings": users * per_user, "split": "leave_one_out"},
        "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
        "availability": {"model": "always"},
        "protocol": {"d": 5, "k": 100, "epsilon": 2.5, "proxies": 1, "min_users": users, "eval_every": 1000},
    }


def epoch_seconds(users: int) -> dict[str, float]:
    """Reports aggregated in epoch 2 and the wall seconds that epoch took (for `run_isolated`)."""
    marks: list[float] = []
    result = fedrecsim.run(tables(users), progress=lambda completed, total: marks.append(time.perf_counter()))
    reports = int(result.rounds[1]["reports"])
    if reports != users * 100 or result.rounds[1]["reports_missing"]:
        raise SimulationError(f"W5 epoch 2 did not complete: {result.rounds[1]}")
    return {"reports": reports, "epoch_s": marks[1] - marks[0]}


def run(options: Options) -> Iterator[str]:
    """``W5 ldp_implicit users=... reports=... epoch_s=... reports_per_s=... peak_rss_mb=...``."""
    users = QUICK_USERS if options.quick else STANDARD_USERS
    runs = [run_isolated(__name__, "epoch_seconds", users=users) for _ in range(options.repeats or 1)]
    best = min(runs, key=lambda result: result["epoch_s"])
    yield (
        f"W5 ldp_implicit users={users} reports={best['reports']} epoch_s={best['epoch_s']:.3f} "
        f"reports_per_s={best['reports'] / best['epoch_s']:,.0f} reports_per_s_target_min={REPORTS_PER_S_TARGET:,} "
        f"peak_rss_mb={max(result['peak_rss_mb'] for result in runs):.0f}"
    )


__all__ = ["epoch_seconds", "run", "tables"]
