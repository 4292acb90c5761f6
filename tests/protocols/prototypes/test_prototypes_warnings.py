"""What a prototypes run says about its prototypes and what it refuses (issue 30): the signal-to-noise
estimate against the module docstring's formula, the warnings on noise-dominated prototypes, empty clusters
and silos smaller than k (present at epsilon = 1, absent without noise), the public value bound that npz data
must declare, and the two readings of missing entries (``protocol.fill``)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.silos import silo_assignment
from fedrecsim.errors import ConfigError
from fedrecsim.network.party import Party, Role
from fedrecsim.models.nmf import NMFHyper
from fedrecsim.protocols.prototypes.pipeline import silo_data
from fedrecsim.protocols.prototypes.protocol import QUALITY_WARNINGS, factorize
from fedrecsim.scenario import parse_scenario

USERS, ITEMS, K, SUPPORT, SILOS = 60, 40, 3, 5, 3
#: Without noise in practice: every Laplace and exponential mechanism of the run at this epsilon is a rounding error.
NO_NOISE = 1e9


def _tables(ratings: int = 1200, **protocol: object) -> dict[str, Any]:
    return {
        "run": {"protocol": "prototypes", "seed": 3, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "counts", "users": USERS, "items": ITEMS, "ratings": ratings,
                 "rank": 3, "split": "users", "test_fraction": 0.2, "test_entries": 5, "silos": SILOS},
        "network": {"latency": {"model": "constant", "seconds": 0.05}},
        "protocol": {"k": K, "rank": 2, "lam": 0.3, "support": SUPPORT, "nmf_iterations": 30, "baselines": False,
                     **protocol},
    }


def _run(tables: dict[str, Any]) -> Any:
    return fedrecsim.run(parse_scenario(tables))


def _warning(result: Any, fragment: str) -> list[str]:
    return [warning for warning in result.result["warnings"] if fragment in warning]


# ------------------------------------------------------------------ the signal-to-noise estimate


@pytest.mark.parametrize(("epsilon", "support"), [(1.0, SUPPORT), (250.0, 15)])
def test_prototype_snr_is_a_clusters_sum_on_an_item_over_the_laplace_standard_deviation(epsilon, support) -> None:
    """The docstring's estimate, computed here from the data: a cluster holds mean silo size / k users, each
    keeping min(s, its non-zeros) entries (stored zeros are no entries) of mean value mu among n items; the
    Laplace noise on a revealed sum has scale s * bound / eps_values, eps_values = 0.45 of half the recovery's
    1 - 0.125 - 0.125 of epsilon, and standard deviation sqrt(2) times that."""
    tables = _tables(epsilon=epsilon, support=support)
    scenario = parse_scenario(tables)
    train, _ = prepare_data(scenario.data, 3)
    silos = silo_data(train, silo_assignment(scenario.data, train, 3))
    bound = 10.0  # the counts' public scale (0, 10)
    cluster = np.mean([silo.users.size for silo in silos]) / K
    dense = np.vstack([silo.rows.toarray() for silo in silos])
    assert sum(silo.rows.nnz for silo in silos) > np.count_nonzero(dense)  # the data stores observed zeros
    # 20 cells a user, about half of them non-zero: s = 15 keeps every non-zero of most records.
    kept = np.minimum(np.count_nonzero(dense, axis=1), support).mean()
    mu = dense[dense > 0].mean()
    eps_values = epsilon * (1 - 0.125 - 0.125) / 2 * 0.45
    noise = math.sqrt(2) * support * bound / eps_values
    expected = cluster * kept / ITEMS * mu / noise
    result = _run(tables)
    assert result.result["metrics"]["final"]["prototype_snr"] == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------ the warnings


def test_at_epsilon_one_the_prototypes_are_noise_and_some_clusters_empty_and_without_noise_neither() -> None:
    noisy = _run(_tables(epsilon=1.0))
    final = noisy.result["metrics"]["final"]
    assert final["prototype_snr"] < 0.01
    (warning,) = _warning(noisy, "noise-dominated")
    assert warning.startswith(f"the prototypes are noise-dominated: prototype_snr = {final['prototype_snr']:.3g} < 1")
    assert "protocol.epsilon = 1)" in warning
    # The true cluster sizes the silos computed (never released): the empty ones are counted.
    sizes = noisy.outcome.state["cluster_sizes"]
    assert sorted(sizes) == [Party(Role.SILO, h) for h in range(SILOS)]
    assert all(size.sum() == users.size for size, users in zip(sizes.values(), noisy.outcome.state["silo_users"].values(), strict=True))
    empty = sum(int(np.count_nonzero(size == 0)) for size in sizes.values())
    assert empty > 0 and final["empty_clusters"] == empty
    assert _warning(noisy, "clusters are empty") == [
        f"{empty} of {K * SILOS} clusters are empty in the silos' chosen trials; their prototypes are noise alone "
        "(empty_clusters)"
    ]
    assert len(noisy.result["warnings"]) == 2
    assert all(any(fragment in warning for fragment in QUALITY_WARNINGS) for warning in noisy.result["warnings"])
    clean = _run(_tables(epsilon=NO_NOISE))
    assert clean.result["metrics"]["final"]["prototype_snr"] > 1e5
    assert clean.result["metrics"]["final"]["empty_clusters"] == 0
    assert clean.result["warnings"] == []


def test_a_silo_with_fewer_users_than_k_is_warned_about_and_one_with_enough_is_not() -> None:
    # 60 users in 3 uniform silos: 20 each. k = 21 leaves every silo short; k = 20 none.
    short = _run(_tables(epsilon=NO_NOISE, k=21))
    assert _warning(short, "fewer users than k") == [
        "3 silos hold fewer users than k = 21: silo:0 (20 users), silo:1 (20 users), silo:2 (20 users)"
    ]
    assert short.result["metrics"]["final"]["empty_clusters"] >= 3  # at least one empty cluster per silo
    enough = _run(_tables(epsilon=NO_NOISE, k=20))
    assert _warning(enough, "fewer users than k") == []
    one = _tables(epsilon=NO_NOISE, k=USERS + 1)
    one["data"]["silos"] = 1
    assert _warning(_run(one), "fewer users than k") == [f"1 silo holds fewer users than k = {USERS + 1}: silo:0 ({USERS} users)"]


# ------------------------------------------------------------------ the public value bound


def _npz(path: Path, top: float) -> Path:
    """30 users x 20 items, 8 ratings each of 1 .. ``top`` (the largest value occurs)."""
    rng = np.random.default_rng(int(top))
    dense = np.zeros((30, 20))
    for user in range(30):
        dense[user, rng.choice(20, size=8, replace=False)] = rng.integers(1, int(top) + 1, size=8)
    dense[0, np.flatnonzero(dense[0])[0]] = top
    sp.save_npz(path, sp.csr_matrix(dense))
    return path


def _npz_tables(path: Path, **data: object) -> dict[str, Any]:
    tables = _tables(epsilon=1.0)
    tables["data"] = {"source": "npz", "path": str(path), "split": "users", "test_fraction": 0.2, "test_entries": 2,
                      "silos": 3, **data}
    return tables


def test_npz_without_a_public_bound_is_refused_naming_both_keys(tmp_path: Path) -> None:
    message = (
        "protocol.value_bound: data.source = 'npz' has no public scale: its default is the data's own smallest and "
        "largest value, and noise calibrated to the data's maximum is not epsilon-DP; set data.rating_range = "
        "[min, max] (the public scale) or protocol.value_bound"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        _run(_npz_tables(_npz(tmp_path / "three.npz", 3.0)))


def test_the_bound_of_npz_data_is_public_whatever_the_datas_maximum(tmp_path: Path) -> None:
    """Two data sets whose largest values differ (3 and 5) get the same bound and the same noise: the declared
    scale's top, or protocol.value_bound; the noise scale would differ were the bound the data's maximum."""
    paths = [_npz(tmp_path / "three.npz", 3.0), _npz(tmp_path / "five.npz", 5.0)]
    for data, protocol, bound in (({"rating_range": [0, 5]}, {}, 5.0), ({}, {"value_bound": 4.0}, 4.0)):
        for path in paths:
            tables = _npz_tables(path, **data)
            tables["protocol"].update(protocol)
            result = _run(tables)
            constants = result.result["privacy"]["constants"]
            assert (constants["value_bound"], constants["radius"]) == (bound, bound * math.sqrt(SUPPORT)), path
            # Without a declared scale the predictions are clipped to [0, value_bound], not to the data's extremes.
            state, final = result.outcome.state, result.result["metrics"]["final"]
            train, test = prepare_data(parse_scenario(tables).data, 3)
            predictions = np.einsum("ij,ij->i", state["user_factors"][test.users], state["item_factors"][test.items])
            scale = (0.0, 5.0) if data else (0.0, 4.0)
            clipped = np.clip(predictions, *scale)
            assert final["test_rmse_clipped"] == pytest.approx(np.sqrt(np.mean((clipped - test.values) ** 2)), rel=1e-9)


# ------------------------------------------------------------------ protocol.fill


def test_a_fill_other_than_observed_or_zeros_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r'^protocol\.fill: got "mean"; allowed values: "observed", "zeros"$'):
        _run(_tables(fill="mean"))


def test_with_missing_entries_the_zero_fill_fits_users_over_every_item_from_the_same_prototypes() -> None:
    """Algorithm 3 divides a cluster's sum by its size, so a missing entry and an observed 0 add the same to a
    prototype: both fills release the same prototypes and learn the same V. They differ in the users' fit:
    over the stored entries, or over every item with the missing ones read as 0."""
    observed, zeros = _run(_tables(fill="observed")), _run(_tables(fill="zeros"))
    for party, prototypes in observed.outcome.state["prototypes"].items():
        np.testing.assert_array_equal(zeros.outcome.state["prototypes"][party], prototypes)
    V = observed.outcome.state["item_factors"]
    np.testing.assert_array_equal(zeros.outcome.state["item_factors"], V)
    train, _ = prepare_data(parse_scenario(_tables()).data, 3)
    rows = sp.csr_matrix((train.values, (train.users, train.items)), shape=(USERS, ITEMS)).toarray()
    ridge = np.vstack([V, math.sqrt(0.3) * np.eye(2)])
    expected = np.array([nnls(ridge, np.concatenate([row, np.zeros(2)]))[0] for row in rows])
    np.testing.assert_allclose(zeros.outcome.state["user_factors"], expected, rtol=1e-7, atol=1e-10)
    assert np.abs(observed.outcome.state["user_factors"] - expected).max() > 0.1
    assert observed.result["metrics"]["final"]["test_rmse"] != zeros.result["metrics"]["final"]["test_rmse"]


def test_on_fully_observed_rows_both_fills_give_the_same_model() -> None:
    """Every cell observed (60 x 40 counts): the users whose training rows are complete -- all but the test
    users, who lost 5 entries to the split -- get the same factors under both fills, and so do the baselines'
    factorizations of a complete matrix. Two algorithms for one optimum (NNLS over the rows or in Gram form; the
    masked or the dense multiplicative updates): equal up to rounding."""
    tables = _tables(ratings=USERS * ITEMS)
    observed, zeros = _run({**tables, "protocol": {**tables["protocol"], "fill": "observed"}}), _run(
        {**tables, "protocol": {**tables["protocol"], "fill": "zeros"}}
    )
    for party, prototypes in observed.outcome.state["prototypes"].items():
        np.testing.assert_array_equal(zeros.outcome.state["prototypes"][party], prototypes)
    train, test = prepare_data(parse_scenario(tables).data, 3)
    complete = np.flatnonzero(train.user_counts() == ITEMS)
    assert complete.size == USERS - np.unique(test.users).size > 0
    U_observed, U_zeros = observed.outcome.state["user_factors"], zeros.outcome.state["user_factors"]
    np.testing.assert_allclose(U_zeros[complete], U_observed[complete], rtol=1e-9, atol=1e-12)
    incomplete = np.unique(test.users)
    assert np.abs(U_zeros[incomplete] - U_observed[incomplete]).max() > 1e-3
    full = sp.csr_matrix((train.values, (train.users, train.items)), shape=(USERS, ITEMS))[complete]
    assert full.nnz == complete.size * ITEMS > np.count_nonzero(full.data)  # every cell stored, observed zeros too
    hyper = NMFHyper(rank=2, lam=0.3, iterations=30)
    U_a, V_a = factorize(np.random.default_rng(5), full, hyper, "observed")
    U_b, V_b = factorize(np.random.default_rng(5), full, hyper, "zeros")
    np.testing.assert_allclose(U_b, U_a, rtol=1e-9)
    np.testing.assert_allclose(V_b, V_a, rtol=1e-9)
