"""Transcripts pinned across the fault machinery (issue 18): a run that configures no fault of issue 18
(duplication, reordering, partitions, crash, byzantine or slow parties) has the transcript it had before
those faults existed -- their draws are new purposes of the links' counters, drawn only when configured.

The hashes were recorded at commit 0f7cacf, before issue 18's changes, and hold since, with one deliberate
exception: ldp_implicit's report batches gained their number (so that a duplicated batch counts once),
which changes the bytes of every run in which a proxy releases a pool; that run is pinned from then on
(its metrics and model did not change). A run whose scenario already had loss changes only where a fault
is now handled better: a secagg user whose message was lost no longer waits out the run. And secure
aggregation's ideal mode sends its masked inputs empty, booked at their real size as padding (issue 16,
W8): the bytes that travel changed, so its run is pinned from then on; its metrics and every party's
ledger counters are those of before (checked against commit 805cb06). The transcript hashes of fcf, dpmf,
ldp_implicit, prototypes and secagg changed once more when those protocols became resumable (checkpoints, issue 18):
their ledgers fold the hash at every round's end (`Ledger.fold`); their metrics and ledgers are those of
commit 72223d4 (checked).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import fedrecsim

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

PINNED: dict[str, tuple[dict[str, Any] | Path, str]] = {
    "fcf explicit, churn, dropout, loss": ({
        "run": {"protocol": "fcf", "seed": 3, "rounds": 4, "round_timeout_s": 5.0},
        "data": {"users": 40, "items": 60, "ratings": 800},
        "network": {"latency": _LOGNORMAL, "loss": 0.05, "bandwidth_bps": 1e6},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "initial_online": 0.7, "dropout": 0.1},
        "protocol": {"d": 4, "max_users": 20},
    }, "e4e29a27c6357ed58e2c7f6c23c8a0a7"),
    "fcf implicit, markov churn": ({
        "run": {"protocol": "fcf", "seed": 4, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 150, "ratings": 600, "feedback": "implicit", "split": "leave_one_out"},
        "network": {"latency": {"model": "uniform", "low_s": 0.0, "high_s": 0.1}, "loss": 0.05},
        "availability": {"model": "markov", "mean_on_s": 20.0, "mean_off_s": 5.0},
        "protocol": {"feedback": "implicit", "d": 3},
    }, "9fdc2c5cfd12f7f5a7e1c38c05a7d8c1"),
    "dpmf S1": ({
        "run": {"protocol": "dpmf", "seed": 6, "rounds": 3}, "data": {"users": 30, "items": 40, "ratings": 600},
        "network": {"latency": _LOGNORMAL}, "protocol": {"scenario": "S1", "d": 4, "epsilon": 1.0},
    }, "b3d5eaf735ac6e31bcc7c2053697e6fe"),
    "dpmf S2": ({
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL},
        "protocol": {"scenario": "S2", "d": 4, "epsilon": 1.0},
    }, "83e88d3fa4d4e1f3c4f41b133708baf5"),
    "dpmf S3, churn, dropout, loss": ({
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL, "loss": 0.02},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6, "dropout": 0.1},
        "protocol": {"scenario": "S3", "d": 4, "epsilon": 1.0, "max_users": 10, "k_presharing": 4},
    }, "937eaef251b7ae7d610c0147b24f8878"),
    "ldp_implicit, no pool released": ({
        "run": {"protocol": "ldp_implicit", "seed": 5, "rounds": 2},
        "data": {"feedback": "implicit", "users": 40, "items": 150, "ratings": 400, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL, "loss": 0.01}, "protocol": {"k": 20, "min_users": 40},
    }, "823b054c8f5b61bc34d705c8e0579b3b"),
    "ldp_implicit, pools released (numbered batches)": ({
        "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 2},
        "data": {"feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL}, "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2},
        "protocol": {"k": 10, "proxies": 2, "min_users": 5},
    }, "62b4353b731ff60281e3284529b92fa3"),
    "prototypes": ({
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"feedback": "counts", "users": 60, "items": 40, "ratings": 1200, "rank": 3, "split": "users",
                 "test_fraction": 0.2, "test_entries": 5, "silos": 3},
        "network": {"latency": _LOGNORMAL}, "protocol": {"k": 3, "rank": 2, "support": 5, "nmf_iterations": 30},
    }, "9d1456d9547b978558cc3b33a388e0c9"),
    "secagg, dropout": ({
        "run": {"protocol": "secagg", "seed": 5, "rounds": 3}, "data": {"users": 12, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"dropout": 0.15},
        "protocol": {"mode": "real", "graph": "complete", "length": 16, "bits": 32, "frac_bits": 16},
    }, "e98c9a56a1179c817d250d1d8004c987"),
    "secagg+, churn, dropout": ({
        "run": {"protocol": "secagg", "seed": 7, "rounds": 3}, "data": {"users": 16, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "dropout": 0.1},
        "protocol": {"mode": "ideal", "graph": "sparse", "neighbours": 6, "length": 16},
    }, "e7f9e60e960e75409560b31756ac43df"),
    "scenarios/secagg_small.toml": (_SCENARIOS / "secagg_small.toml", "783be0b8ee09c40e84c9d0bcee15de5b"),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_a_run_without_issue_18_faults_keeps_its_transcript(name: str) -> None:
    scenario, expected = PINNED[name]
    result = fedrecsim.run(copy.deepcopy(scenario) if isinstance(scenario, dict) else scenario)
    assert result.transcript_xxh3_128 == expected
