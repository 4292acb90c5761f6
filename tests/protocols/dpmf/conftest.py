"""DP-MF test scenarios at test size."""

from __future__ import annotations

import copy
from typing import Any

import pytest

TINY_DPMF: dict[str, Any] = {
    "run": {"protocol": "dpmf", "name": "tiny-dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 10.0},
    "data": {"source": "synthetic", "users": 30, "items": 40, "ratings": 600},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"scenario": "S2", "d": 6, "epsilon": 1.0},
}


@pytest.fixture
def tiny_dpmf() -> dict[str, Any]:
    """A fresh copy of a small DP-MF scenario (S2, always online; mutate freely)."""
    return copy.deepcopy(TINY_DPMF)


@pytest.fixture
def tiny_s3_churn(tiny_dpmf: dict[str, Any]) -> dict[str, Any]:
    """S3 with Bernoulli churn, 10% mid-round dropout and lognormal latency, K = 12, k = 4."""
    tiny_dpmf["protocol"].update({"scenario": "S3", "max_users": 12, "k_presharing": 4})
    tiny_dpmf["availability"] = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2, "initial_online": 0.6, "dropout": 0.1}
    tiny_dpmf["network"] = {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}}
    tiny_dpmf["run"]["rounds"] = 8
    return tiny_dpmf
