"""DP-MF end to end: invariants under churn and dropout, the normalization, the ring, S1, determinism."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.models.mf import MFHyper, item_step
from fedrecsim.protocols.dpmf.headroom import aggregate_headroom, frac_bits_for

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _violations(result: fedrecsim.RunResult) -> dict[str, int]:
    return {invariant["name"]: invariant["violations"] for invariant in result.result["invariants"]}


def test_s3_keeps_eta_and_masks_exact_under_churn_and_dropout(tiny_s3_churn) -> None:
    result = fedrecsim.run(tiny_s3_churn)
    assert _violations(result) == {"eta_invariant": 0, "eta_pieces": 0, "masks_cancel": 0, "rho_shortfall": 0, "ring_overflow": 0}
    checked = {invariant["name"]: invariant["checked"] for invariant in result.result["invariants"]}
    assert checked["eta_invariant"] > 100 and checked["masks_cancel"] > 100
    assert sum(row["missing"] for row in result.rounds) > 0, "the scenario must exercise mid-round dropout"
    assert all(row["selected"] <= 12 for row in result.rounds)
    # The missing users' rho~ pieces are missing: the shortfall is measured, not hidden.
    rho = result.result["privacy"]["rho"]
    assert rho["short_updates"] > 0 and rho["min_effective_scale"] < rho["target_scale"]
    population = result.outcome.state["population"]
    assert population["joins"] > 0 and population["leaves"] > 0 and population["crashes"] > 0


def test_s2_is_not_robust_to_dropout_and_the_monitor_says_so(tiny_dpmf) -> None:
    """S2's eta_j is the sum of every rater's piece: a rater that drops takes its piece with it."""
    tiny_dpmf["availability"] = {"model": "always", "dropout": 0.2}
    tiny_dpmf["run"]["rounds"] = 4
    violations = _violations(fedrecsim.run(tiny_dpmf))
    assert violations["eta_invariant"] > 0
    # The items it left short are used with fewer pieces than their k_j raters drew: counted.
    assert violations["eta_pieces"] > 0
    assert violations["masks_cancel"] == 0


def test_only_contributors_move_and_absent_users_keep_their_profile(tiny_s3_churn) -> None:
    state = fedrecsim.run(tiny_s3_churn).outcome.state
    contributed = np.unique(np.concatenate(state["contributors"]))
    never = np.setdiff1d(np.arange(state["user_factors"].shape[0]), contributed)
    assert never.size and contributed.size
    np.testing.assert_array_equal(state["user_factors"][never], state["initial_user_factors"][never])
    assert not np.allclose(state["user_factors"][contributed], state["initial_user_factors"][contributed])
    # The proofs need ||u_i|| <= 1.
    assert np.linalg.norm(state["user_factors"], axis=1).max() <= 1.0 + 1e-12


@pytest.mark.parametrize("normalize", [True, False])
def test_the_noise_is_normalized_exactly_like_the_gradient(tiny_dpmf, normalize: bool) -> None:
    """One S2 iteration: v_j(1) = v_j(0) - gamma (A_j / n_j + 2 mu v_j(0)), A_j = gradients + eta_j + rho~_j."""
    tiny_dpmf["run"]["rounds"] = 1
    tiny_dpmf["protocol"]["normalize"] = normalize
    result = fedrecsim.run(tiny_dpmf)
    state = result.outcome.state
    (_, items, sums, counts), = state["recent_aggregates"]
    hyper = MFHyper(d=6, normalize=normalize)
    v0 = state["initial_item_factors"]
    expected = item_step(v0[items], sums, counts, hyper)
    np.testing.assert_array_equal(state["item_factors"][items], expected)
    divisor = counts[:, None] if normalize else 1.0
    np.testing.assert_allclose(
        state["item_factors"][items], v0[items] - hyper.gamma * (sums / divisor + 2 * hyper.mu * v0[items]), rtol=0, atol=1e-12
    )
    # The aggregate really holds noise of the Laplace scale (eta + rho~), not only gradients.
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_dpmf).data, 5)
    assert np.abs(sums).mean() > 0.3 * result.result["privacy"]["laplace_scale"]
    assert counts.sum() == len(train)


def test_s3_weights_contributions_so_eta_weighs_as_in_objective_6(tiny_dpmf) -> None:
    """S3, K = 10 of 30 users: A_j = (k_j / k'_j)(sum of grad + rho~) + eta_j, and the step divides by k_j."""
    tiny_dpmf["run"]["rounds"] = 1
    tiny_dpmf["protocol"].update({"scenario": "S3", "max_users": 10, "k_presharing": 4})
    result = fedrecsim.run(tiny_dpmf)
    state = result.outcome.state
    (_, items, sums, divisors), = state["recent_aggregates"]
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_dpmf).data, 5)
    contributors = state["contributors"][0]
    assert contributors.size == 10
    served = np.isin(train.users, contributors)
    known = np.bincount(train.items, minlength=train.n_items)
    served_raters = np.bincount(train.items[served], minlength=train.n_items)
    assert np.mean(served_raters[items] < known[items]) > 0.8, "most items must have raters that were not served"
    # No dropout: c_j = k_j n_j / k'_j = k_j, every rater of the item in the data.
    np.testing.assert_allclose(divisors, known[items], rtol=1e-12)
    u0, v0 = state["initial_user_factors"], state["initial_item_factors"]
    users, rated = train.users[served], train.items[served]
    errors = train.values[served] - np.einsum("nd,nd->n", u0[users], v0[rated])
    gradient_sums = np.zeros_like(v0)
    np.add.at(gradient_sums, rated, -2.0 * errors[:, None] * u0[users])
    rho_items, rho_sums = state["rho_last"]
    np.testing.assert_array_equal(rho_items, items)
    weight = (known[items] / served_raters[items])[:, None]
    expected = weight * (gradient_sums[items] + rho_sums) + state["eta"][items]
    np.testing.assert_allclose(sums, expected, rtol=0, atol=1e-6)
    hyper = MFHyper(d=6)
    np.testing.assert_allclose(
        state["item_factors"][items], v0[items] - hyper.gamma * (sums / divisors[:, None] + 2 * hyper.mu * v0[items]), rtol=0, atol=1e-12
    )


def test_the_normalized_step_converges_where_raw_sums_blow_up(tiny_dpmf) -> None:
    """Items with ~80 raters: gamma = 2^-5 times a raw sum of 80 gradients overshoots; the mean does not."""
    tiny_dpmf["data"] = {"source": "synthetic", "users": 100, "items": 10, "ratings": 800}
    tiny_dpmf["protocol"].update({"epsilon": 1e6, "eval_every": 1})
    tiny_dpmf["run"]["rounds"] = 20
    normalized = fedrecsim.run(tiny_dpmf).rounds
    tiny_dpmf["protocol"]["normalize"] = False
    raw = fedrecsim.run(tiny_dpmf).rounds
    assert normalized[-1]["err_mean"] < 0.6 * normalized[0]["err_mean"]
    assert all(later["err_mean"] < earlier["err_mean"] for earlier, later in zip(normalized, normalized[1:]))
    assert raw[-1]["err_mean"] > 100 * normalized[-1]["err_mean"]


def test_with_negligible_noise_the_run_is_the_noiseless_replay(tiny_s3_churn) -> None:
    tiny_s3_churn["protocol"]["epsilon"] = 1e9
    metrics = fedrecsim.run(tiny_s3_churn).metrics
    # Only the fixed point (2^-32) separates the protocol from the float replay.
    assert abs(metrics["noise_err_increase"]) < 1e-6
    assert metrics["baseline_err_mean"] != metrics["noiseless_err_mean"]


def test_hua_s3_churn_in_a_32_bit_ring_is_refused_and_the_ring_it_names_runs_clean() -> None:
    """16 fractional bits leave 2^15 of range; S3's aggregates need far more (the weight k_j / k'_j)."""
    tiny = ["run.rounds=3", "data.users=30", "data.items=120", "data.ratings=900", "protocol.ring_bits=32"]
    path = SCENARIOS / "hua_s3_churn.toml"
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(fedrecsim.load_scenario(path, tiny))
    error = _innermost(raised.value)
    assert isinstance(error, fedrecsim.ConfigError) and error.key_path == "protocol.ring_bits"
    suggested = int(re.search(r"ring_bits = 32 with frac_bits <= (\d+)", str(error)).group(1))
    assert "ring_bits = 64 with frac_bits <=" in str(error) and "1e-12" in str(error)
    result = fedrecsim.run(fedrecsim.load_scenario(path, [*tiny, f"protocol.frac_bits={suggested}"]))
    assert _violations(result) == dict.fromkeys(_violations(result), 0)
    ring = result.result["privacy"]["ring"]
    assert (ring["bits"], ring["frac_bits"]) == (32, suggested) and ring["needed_abs"] <= ring["max_abs"]
    # One more fractional bit halves the range below what is needed: the suggestion is the largest.
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(fedrecsim.load_scenario(path, [*tiny, f"protocol.frac_bits={suggested + 1}"]))
    assert _innermost(raised.value).key_path == "protocol.frac_bits"


def test_the_aggregate_bound_of_the_ring() -> None:
    """B = n_g 2 (R_abs + V) + (w_max + 1) b ln(2 d / p), computed here from its parts (headroom docstring)."""
    b = 2 * 4.0 * math.sqrt(50) / 0.1
    noise = b * math.log(2 * 50 / 1e-12)
    common = {"scale": b, "d": 50, "rating_range": (1.0, 5.0), "max_raters": 773, "max_users": 100}
    s3 = aggregate_headroom(**common, weighted=True, scenario="S3")
    assert s3.bound == pytest.approx(773 * 2 * (5 + 64) + 774 * noise, rel=1e-12)
    assert s3.tail == 1e-12 and s3.weight_max == 773
    raw = aggregate_headroom(**common, weighted=False, scenario="S3")
    assert raw.bound == pytest.approx(100 * 2 * (5 + 64) + 2 * noise, rel=1e-12)
    s2 = aggregate_headroom(**common, weighted=False, scenario="S2")
    assert s2.bound == pytest.approx(773 * 2 * (5 + 64) + 2 * noise, rel=1e-12)
    # 1.42e7 needs 24 integer bits and a sign: 7 fractional bits in a 32-bit ring, 39 in a 64-bit one.
    assert (frac_bits_for(32, s3.bound), frac_bits_for(64, s3.bound)) == (7, 39)
    assert frac_bits_for(32, 2.0**31) == 0


def test_seeded_masks_change_the_bytes_not_the_result(tiny_dpmf) -> None:
    explicit = fedrecsim.run(tiny_dpmf)
    tiny_dpmf["protocol"]["mask_transport"] = "seeded"
    seeded = fedrecsim.run(tiny_dpmf)
    np.testing.assert_array_equal(explicit.outcome.state["item_factors"], seeded.outcome.state["item_factors"])
    kinds = lambda result: result.result["ledger"]["kinds"]["dpmf.item_vectors"]["bytes"]  # noqa: E731
    assert kinds(seeded) < 0.75 * kinds(explicit)
    assert _violations(seeded) == _violations(explicit) == dict.fromkeys(_violations(seeded), 0)


def test_same_seed_same_run_other_seed_differs(tiny_s3_churn) -> None:
    tiny_s3_churn["run"]["rounds"] = 4
    first, second = fedrecsim.run(tiny_s3_churn), fedrecsim.run(tiny_s3_churn)
    assert first.transcript_xxh3_128 == second.transcript_xxh3_128
    assert first.result["metrics"] == second.result["metrics"]
    assert first.result["privacy"] == second.result["privacy"]
    tiny_s3_churn["run"]["seed"] = 6
    assert fedrecsim.run(tiny_s3_churn).transcript_xxh3_128 != first.transcript_xxh3_128


@pytest.mark.parametrize("noise", ["theorem1", "laplace"])
def test_s1_publishes_the_exact_minimizer_of_the_perturbed_objective(tiny_dpmf, noise: str) -> None:
    tiny_dpmf["protocol"].update({"scenario": "S1", "noise": noise})
    result = fedrecsim.run(tiny_dpmf)
    state = result.outcome.state
    assert result.result["privacy"]["mechanism"].startswith(noise)
    train, _ = prepare_data(fedrecsim.parse_scenario(tiny_dpmf).data, 5)
    U, V, eta = state["user_factors"], state["item_factors"], state["eta"]
    mu = MFHyper().mu
    # Stationarity of (6) per item, normalized: sum_i u_i (u_i.v_j - r_ij) + mu n_j v_j + eta_j / 2 = 0.
    residual = np.zeros_like(V)
    errors = np.einsum("ij,ij->i", U[train.users], V[train.items]) - train.values
    np.add.at(residual, train.items, U[train.users] * errors[:, None])
    counts = np.bincount(train.items, minlength=V.shape[0])
    residual += mu * counts[:, None] * V + 0.5 * eta
    rated = counts > 0
    assert np.abs(residual[rated]).max() < 1e-6 * (1 + np.abs(eta).max())
    np.testing.assert_array_equal(V[~rated], state["unpublished_item_factors"][~rated])


def test_s1_error_increase_vanishes_as_epsilon_grows(tiny_dpmf) -> None:
    tiny_dpmf["protocol"]["scenario"] = "S1"
    increases = []
    for epsilon in (1.0, 100.0, 1e6):
        tiny_dpmf["protocol"]["epsilon"] = epsilon
        increases.append(fedrecsim.run(tiny_dpmf).metrics["err_increase"])
    assert increases[0] > increases[1] > abs(increases[2])
    assert abs(increases[2]) < 1e-3


@pytest.mark.parametrize("key, value, fragment", [
    ("noise", "theorem1", "protocol.noise"),
    ("variant", "naive", "protocol.variant"),
    ("frac_bits", 63, "protocol.frac_bits"),
    ("ring_bits", 16, "protocol.ring_bits"),
    ("epsilon", 0.0, "protocol.epsilon"),
    ("mask_transport", "carrier pigeon", "protocol.mask_transport"),
    ("sharers", "everyone", "protocol.sharers"),
    ("presharing_attempts", 0, "protocol.presharing_attempts"),
])
def test_bad_protocol_keys_name_their_path(tiny_dpmf, key: str, value: object, fragment: str) -> None:
    tiny_dpmf["protocol"].update({"scenario": "S3", key: value})
    with pytest.raises(fedrecsim.ConfigError, match=fragment):
        fedrecsim.run(tiny_dpmf)


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def test_implicit_feedback_is_refused(tiny_dpmf) -> None:
    tiny_dpmf["data"].update({"feedback": "implicit"})
    # Raised inside the protocol, i.e. inside the runner's trio nursery, which may wrap it in a group.
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(tiny_dpmf)
    error = _innermost(raised.value)
    assert isinstance(error, fedrecsim.ConfigError) and error.key_path == "data.feedback"
