"""The small PriviRec scenario the tests run: 40 users, 60 items, k = 12, L = 2, real secure aggregation."""

from __future__ import annotations

import copy

LATENCY = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
TABLE = {
    "run": {"protocol": "privirec", "seed": 4, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 40, "items": 60, "ratings": 900,
             "split": "per_user", "test_fraction": 0.2},
    "network": {"latency": LATENCY},
    "protocol": {"k": 12, "secagg": "real"},
}


def table(**protocol: object) -> dict:
    """`TABLE` with ``protocol`` keys set."""
    result = copy.deepcopy(TABLE)
    result["protocol"].update(protocol)
    return result
