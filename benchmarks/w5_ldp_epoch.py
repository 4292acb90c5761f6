"""W5: one epoch of Minto et al.'s local-DP protocol through one proxy, end to end.

The standard size is the paper's medium setting: 10,000 users, 1,000 items, F = 5, k = 100 reports per
user (1,000,000 reports per epoch), one proxy holding the whole epoch as one pool. The run goes through
`fedrecsim.run` -- synthetic data, network with log-normal latency, ledger, users solving eq. (4) and
running Algorithm 1, the proxy splitting and shuffling, the server's eq. (9) estimate and update -- for
three epochs, and the middle one is timed: epoch 1 also opens every directed link (a seeded generator
each) and the last is followed by evaluation, so epoch 2 is the steady-state cost of an epoch.
``reports_per_s`` is the reports the server aggregated in that epoch over its wall seconds (target:
>= 200,000). There is no peer simulator for this protocol; the line stands alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import fedrecsim
from fedrecsim.errors import SimulationError

from .common import Options

STANDARD_USERS, QUICK_USERS = 10_000, 1_000


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


def epoch_seconds(users: int) -> tuple[int, float]:
    """Reports aggregated in epoch 2 and the wall seconds that epoch took."""
    marks: list[float] = []
    result = fedrecsim.run(tables(users), progress=lambda completed, total: marks.append(time.perf_counter()))
    reports = int(result.rounds[1]["reports"])
    if reports != users * 100 or result.rounds[1]["reports_missing"]:
        raise SimulationError(f"W5 epoch 2 did not complete: {result.rounds[1]}")
    return reports, marks[1] - marks[0]


def run(options: Options) -> Iterator[str]:
    users = QUICK_USERS if options.quick else STANDARD_USERS
    best_s, reports = math.inf, 0
    for _ in range(options.repeats or 1):
        reports, seconds = epoch_seconds(users)
        best_s = min(best_s, seconds)
    yield (
        f"W5 ldp_implicit users={users} reports={reports} epoch_s={best_s:.3f} "
        f"reports_per_s={reports / best_s:,.0f}"
    )


__all__ = ["epoch_seconds", "run", "tables"]
