"""Runs pinned across changes (issues 18 and 29): a run that configures no fault of issue 18 (duplication,
reordering, partitions, crash, byzantine or slow parties) keeps the messages it had before those faults
existed -- their draws are new purposes of the links' counters, drawn only when configured.

What is pinned is what holds on every machine (issue 29; README, "Determinism"): the run's *structure*
fingerprint -- who sent what kind of message of what size to whom, delivered when -- and its final
metrics within `RELATIVE_TOLERANCE`. The content hash (``transcript_xxh3_128``) is not pinned: it covers
the last bit of every float a message carries, which depends on numpy's BLAS kernel (``fcf`` and
``prototypes`` differ between ``OPENBLAS_CORETYPE=Haswell`` and ``Sandybridge``). The structure pins were
recorded at the commit that introduced them, where every run's content hash under ``Haswell`` was still
the one pinned since commit 0f7cacf (and its later deliberate changes: ldp_implicit's numbered batches,
secure aggregation's ideal padding, the round-end folding of the resumable protocols); their structure
fingerprints and metrics were the same under the Haswell, Sandybridge, Nehalem and Katmai kernels (the
metrics within 1.2e-15 relative). A change of any message's kind, size, sender, receiver or delivery time
fails here; so does a change of the values that moves a pinned metric.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import fedrecsim

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

#: How far a pinned metric may move from one BLAS kernel to another: the kernels measured differ by at most
#: 1.2e-15 relative on these runs (a few rounds); the margin leaves room for kernels not measured here
#: (AVX-512) while any change of the protocol's values moves the metrics by far more.
RELATIVE_TOLERANCE = 1e-9


class Pin(NamedTuple):
    """What a pinned run keeps on every machine: its structure fingerprint and some of its final metrics."""

    structure_xxh3_128: str
    metrics: dict[str, float]


PINNED: dict[str, tuple[dict[str, Any] | Path, Pin]] = {
    "fcf explicit, churn, dropout, loss": ({
        "run": {"protocol": "fcf", "seed": 3, "rounds": 4, "round_timeout_s": 5.0},
        "data": {"users": 40, "items": 60, "ratings": 800},
        "network": {"latency": _LOGNORMAL, "loss": 0.05, "bandwidth_bps": 1e6},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "initial_online": 0.7, "dropout": 0.1},
        "protocol": {"d": 4, "max_users": 20},
    }, Pin("25719ad669f10d12d6f65f666545e661", {"participants": 18, "missing": 2, "train_rmse": 3.188269232618858, "test_rmse": 3.0078128097506878})),
    "fcf implicit, markov churn": ({
        "run": {"protocol": "fcf", "seed": 4, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 150, "ratings": 600, "feedback": "implicit", "split": "leave_one_out"},
        "network": {"latency": {"model": "uniform", "low_s": 0.0, "high_s": 0.1}, "loss": 0.05},
        "availability": {"model": "markov", "mean_on_s": 20.0, "mean_off_s": 5.0},
        "protocol": {"feedback": "implicit", "d": 3},
    }, Pin("9ba7e50f3856edcbf18459a0cbf665f9", {"participants": 23, "hr@10": 0.06666666666666667})),
    "dpmf S1": ({
        "run": {"protocol": "dpmf", "seed": 6, "rounds": 3}, "data": {"users": 30, "items": 40, "ratings": 600},
        "network": {"latency": _LOGNORMAL}, "protocol": {"scenario": "S1", "d": 4, "epsilon": 1.0},
    }, Pin("cd11c03b8ae072dc17e0041f5873c1d6", {"err_mean": 3.2647643747128363, "err_q90": 6.58407165984676, "test_rmse": 9.40876643881403, "baseline_err_mean": 2.1660724605584267})),
    "dpmf S2": ({
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL},
        "protocol": {"scenario": "S2", "d": 4, "epsilon": 1.0},
    }, Pin("c92c0d4c1b4649e9b9f21e27e6c83035", {"participants": 30, "items_updated": 40, "err_mean": 2.957911874751771, "test_rmse": 2.949038225665926})),
    "dpmf S3, churn, dropout, loss": ({
        "run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
        "data": {"users": 30, "items": 40, "ratings": 600}, "network": {"latency": _LOGNORMAL, "loss": 0.02},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.6, "dropout": 0.1},
        "protocol": {"scenario": "S3", "d": 4, "epsilon": 1.0, "max_users": 10, "k_presharing": 4},
    }, Pin("0dcd264f1d3b6170e48423aaf2f494a2", {"participants": 9, "missing": 1, "rho_scale_min": 11.313708498984761, "err_mean": 3.001486765226909, "test_rmse": 2.9277044113125927})),
    "ldp_implicit, no pool released": ({
        "run": {"protocol": "ldp_implicit", "seed": 5, "rounds": 2},
        "data": {"feedback": "implicit", "users": 40, "items": 150, "ratings": 400, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL, "loss": 0.01}, "protocol": {"k": 20, "min_users": 40},
    }, Pin("8219c4a54048142d19df2d90bbdf7adf", {"reports_dropped": 780, "hr@10": 0.125, "hr@10_mf_np": 0.15})),
    "ldp_implicit, pools released (numbered batches)": ({
        "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 2},
        "data": {"feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
        "network": {"latency": _LOGNORMAL}, "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2},
        "protocol": {"k": 10, "proxies": 2, "min_users": 5},
    }, Pin("71a5a70d832e17e9db0691cecfc1708d", {"reports": 200, "anonymity_set": 5, "hr@10": 0.1, "hr@10_mf_np": 0.13333333333333333})),
    "prototypes": ({
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"feedback": "counts", "users": 60, "items": 40, "ratings": 1200, "rank": 3, "split": "users",
                 "test_fraction": 0.2, "test_entries": 5, "silos": 3},
        "network": {"latency": _LOGNORMAL}, "protocol": {"k": 3, "rank": 2, "support": 5, "nmf_iterations": 30},
    }, Pin("634141554db4850a226061c0f932dbe4", {"test_rmse": 2.9605962893674014, "map@10": 0.08777777777777779, "test_rmse_full": 1.9993989049242733, "test_rmse_kmeans": 3.331155603641446})),
    "secagg, dropout": ({
        "run": {"protocol": "secagg", "seed": 5, "rounds": 3}, "data": {"users": 12, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"dropout": 0.15},
        "protocol": {"mode": "real", "graph": "complete", "length": 16, "bits": 32, "frac_bits": 16},
    }, Pin("cefa8a97ca9995929217bd86c5548813", {"participants": 11, "max_abs_error": 3.1148899630739635e-05, "wrong_words": 0})),
    "secagg+, churn, dropout": ({
        "run": {"protocol": "secagg", "seed": 7, "rounds": 3}, "data": {"users": 16, "items": 50, "ratings": 300},
        "network": {"latency": _LOGNORMAL}, "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "dropout": 0.1},
        "protocol": {"mode": "ideal", "graph": "sparse", "neighbours": 6, "length": 16},
    }, Pin("0350e42f8d769bc5fc4ce42fa53e67f8", {"participants": 7, "max_abs_error": 1.9777861864023194e-05, "wrong_words": 0})),
    "scenarios/secagg_small.toml": (_SCENARIOS / "secagg_small.toml", Pin("616a502e19d13b72f436c82e4c5f60a7", {"participants": 19, "max_abs_error": 6.204417392807748e-05, "wrong_words": 0})),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_a_run_without_issue_18_faults_keeps_its_structure_and_metrics(name: str) -> None:
    scenario, pin = PINNED[name]
    result = fedrecsim.run(copy.deepcopy(scenario) if isinstance(scenario, dict) else scenario)
    assert result.structure_xxh3_128 == pin.structure_xxh3_128
    assert {name: result.metrics[name] for name in pin.metrics} == pytest.approx(pin.metrics, rel=RELATIVE_TOLERANCE, abs=0)


def test_the_last_bit_of_a_float_changes_the_content_hash_not_the_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    """What another BLAS kernel does to a run, done on purpose (issue 29): every gradient a user sends one
    ulp off. The content hash changes, the structure fingerprint does not, the metrics stay within
    `RELATIVE_TOLERANCE`."""
    import numpy as np

    from fedrecsim.protocols.fcf import roles

    def user_step_one_ulp_off(*args: Any) -> tuple[np.ndarray, np.ndarray]:
        new_u, gradients = user_step(*args)
        return new_u, np.nextafter(gradients, np.inf)

    scenario, pin = PINNED["fcf explicit, churn, dropout, loss"]
    before = fedrecsim.run(copy.deepcopy(scenario))
    user_step = roles.user_step
    monkeypatch.setattr(roles, "user_step", user_step_one_ulp_off)
    after = fedrecsim.run(copy.deepcopy(scenario))
    assert after.transcript_xxh3_128 != before.transcript_xxh3_128
    assert after.structure_xxh3_128 == before.structure_xxh3_128 == pin.structure_xxh3_128
    assert after.metrics == pytest.approx(before.metrics, rel=RELATIVE_TOLERANCE, abs=0)


def test_result_json_records_the_platform_beside_both_fingerprints(tmp_path: Path) -> None:
    """A user comparing two content hashes reads in result.json whether they should match (issue 29)."""
    import json
    import platform

    import numpy as np
    import threadpoolctl

    from fedrecsim.summary import summary_text

    scenario, pin = PINNED["dpmf S2"]
    result = fedrecsim.run(copy.deepcopy(scenario), out=tmp_path / "run")
    document = json.loads((tmp_path / "run" / "result.json").read_text())
    assert document["structure_xxh3_128"] == pin.structure_xxh3_128
    assert len(document["transcript_xxh3_128"]) == 32
    recorded = document["platform"]
    assert recorded["machine"] == platform.machine() and recorded["python"] == platform.python_version()
    assert recorded["numpy"] == np.__version__
    kernels = {library["architecture"] for library in threadpoolctl.threadpool_info() if library["user_api"] == "blas"}
    assert {library["kernel"] for library in recorded["blas"]} == kernels
    assert all(library["library"] and library["version"] for library in recorded["blas"])
    line = summary_text(result).splitlines()[1]
    assert line == (
        f"transcript xxh3_128 {result.transcript_xxh3_128} (bit for bit with BLAS kernel {', '.join(sorted(kernels))}); "
        f"structure {pin.structure_xxh3_128} (on any machine)"
    )
