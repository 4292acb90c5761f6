"""DP-MF beside Hua et al.'s accuracy claim (`fedrecsim.protocols.dpmf.claims`): the paper's baseline on
the run's data, the noise-dominated items against Theorem 1's and Lemma 1's formulas, the few-ratings
items' share of the test error on a hand-built case, the warning, and the S2/S3 caveat that Theorem 1
does not cover V after T iterations."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.prepare import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.mechanisms.laplace import laplace_noise, theorem1_noise
from fedrecsim.protocols.dpmf import claims
from fedrecsim.protocols.dpmf.central import train_baseline
from fedrecsim.summary import summary_text


def _train(scenario: dict[str, Any]) -> Ratings:
    train, _ = prepare_data(fedrecsim.parse_scenario(scenario).data, scenario["run"]["seed"])
    return train


def _dominated_by_formula(train: Ratings, noise_norm: float) -> int:
    """Rated items whose noise norm exceeds 2 Delta n_j, counted here from the data."""
    low, high = train.rating_range
    counts = np.bincount(train.items, minlength=train.n_items)
    return sum(1 for n_j in counts if n_j > 0 and noise_norm > 2 * (high - low) * n_j)


@pytest.mark.parametrize("scenario", ["S1", "S2"])
def test_noise_dominated_items_are_counted_with_theorem1_or_lemma1s_noise_norm(tiny_dpmf: dict[str, Any], scenario: str) -> None:
    # S1 draws Theorem 1's noise, E||eta|| = d 2 Delta / eps; S2 Lemma 1's, RMS norm sqrt(d) 2 Delta sqrt(d) / eps * sqrt(2).
    tiny_dpmf["protocol"].update({"scenario": scenario, "epsilon": 2.0})
    tiny_dpmf["run"]["rounds"] = 2
    train = _train(tiny_dpmf)
    low, high = train.rating_range
    delta, d, epsilon = high - low, 6, 2.0
    norm = d * 2 * delta / epsilon if scenario == "S1" else math.sqrt(2 * d) * 2 * delta * math.sqrt(d) / epsilon
    final = fedrecsim.run(tiny_dpmf).result["metrics"]["final"]
    assert final["eta_norm_expected"] == pytest.approx(norm, rel=1e-12)
    expected = _dominated_by_formula(train, norm)
    rated = int(np.count_nonzero(np.bincount(train.items)))
    assert 0 < expected < rated  # the tiny data straddles the threshold, so the count is informative
    assert final["noise_dominated_items"] == expected
    assert final["noise_dominated_share"] == pytest.approx(expected / rated)


def test_the_noise_norm_formulas_are_those_of_the_noise_drawn() -> None:
    # Theorem 1's norm is Gamma(d, 2 Delta / eps) with mean d 2 Delta / eps; Lemma 1's Laplace vectors have
    # root mean square norm b sqrt(2 d), within 2 % above their mean norm at d = 50. 20,000 draws, seed 3:
    # the sample means are within 0.5 % (Theorem 1's norm has relative sd 1 / sqrt(50 * 20,000) = 0.1 %).
    rng = np.random.default_rng(3)
    d, epsilon, delta = 50, 0.1, 4.0
    theorem1 = np.linalg.norm(theorem1_noise(rng, 20_000, d, epsilon, delta), axis=1)
    assert theorem1.mean() == pytest.approx(claims.expected_noise_norm("theorem1", d, epsilon, delta), rel=5e-3)
    laplace = np.linalg.norm(laplace_noise(rng, 20_000, d, epsilon, delta), axis=1)
    rms = claims.expected_noise_norm("laplace", d, epsilon, delta)
    assert math.sqrt(np.mean(laplace**2)) == pytest.approx(rms, rel=5e-3)
    assert 0.98 * rms < laplace.mean() < rms


def test_a_run_whose_noise_dominates_most_items_warns_with_the_papers_claim(tiny_dpmf: dict[str, Any]) -> None:
    tiny_dpmf["protocol"].update({"scenario": "S1", "epsilon": 0.1})
    result = fedrecsim.run(tiny_dpmf).result
    warnings = [warning for warning in result["warnings"] if "the noise dominates" in warning]
    assert len(warnings) == 1
    train = _train(tiny_dpmf)
    rated = int(np.count_nonzero(np.bincount(train.items)))
    dominated = _dominated_by_formula(train, 6 * 2 * 4.0 / 0.1)
    assert dominated > rated / 2
    assert f"the noise dominates {dominated:,} of the {rated:,} rated items" in warnings[0]
    assert claims.PAPER_CLAIMS["S1"] in warnings[0]
    tiny_dpmf["protocol"]["epsilon"] = 1000.0
    assert not [warning for warning in fedrecsim.run(tiny_dpmf).result["warnings"] if "the noise dominates" in warning]


def test_the_few_ratings_items_share_of_the_test_squared_error_by_hand() -> None:
    # Item 0 has FEW_RATINGS training ratings (not few), item 1 one (few). d = 1, U = 1: predictions are V.
    n = claims.FEW_RATINGS
    users = np.r_[np.arange(n), 0]
    items = np.r_[np.zeros(n, dtype=np.int64), 1]
    train = Ratings(users, items, np.full(n + 1, 3.0), n, 2, (1.0, 5.0))
    test = Ratings(np.array([1, 2, 3]), np.array([0, 1, 1]), np.array([4.0, 2.0, 5.0]), n, 2, (1.0, 5.0))
    U, V = np.ones((n, 1)), np.array([[3.0], [8.0]])
    # Raw errors: item 0: 1; item 1: 6, 3 -> squared 1, 36, 9. Clipped to 5: item 1 predicts 5: 3, 0.
    shares = claims.few_ratings_share(U, V, train, test)
    assert shares == {
        "test_share_few_ratings": pytest.approx(2 / 3),
        "test_sq_error_share_few_ratings": pytest.approx(45 / 46),
        "test_sq_error_share_few_ratings_clipped": pytest.approx(9 / 10),
    }
    assert claims.few_ratings_share(U, np.array([[4.0], [2.0]]), train, test.subset(np.array([True, True, False])))[
        "test_sq_error_share_few_ratings"
    ] == 0.0


def test_s1_reports_the_papers_baseline_beside_the_noiseless_refit_and_the_claim(tiny_dpmf: dict[str, Any]) -> None:
    # The paper's baseline is MF after 100 iterations from the run's initial U and V: a 3-round run computes
    # it, a 100-round run is it (its unpublished U and V) -- the two must agree.
    tiny_dpmf["protocol"]["scenario"] = "S1"
    short = fedrecsim.run(tiny_dpmf)
    tiny_dpmf["run"]["rounds"] = claims.PAPER_BASELINE_ROUNDS
    full = fedrecsim.run(tiny_dpmf).result["metrics"]["final"]
    final = short.result["metrics"]["final"]
    assert final["paper_baseline_err_mean"] == pytest.approx(full["paper_baseline_err_mean"], rel=1e-9)
    assert final["paper_baseline_err_mean"] != pytest.approx(final["noiseless_err_mean"], rel=1e-3)
    assert final["paper_err_increase"] == final["err_mean"] - final["paper_baseline_err_mean"]
    assert final["err_increase"] == final["noise_err_increase"] == final["err_mean"] - final["noiseless_err_mean"]
    paper, noiseless = short.result["paper_figures"]
    assert paper["paper"] == claims.PAPER_CLAIMS["S1"] and paper["measured"] == final["paper_err_increase"]
    assert paper["unit"] == "rating" and "100 iterations" in paper["quantity"]
    assert noiseless["measured"] == final["noise_err_increase"] and "refit" in noiseless["quantity"]
    text = summary_text(short)
    assert claims.PAPER_CLAIMS["S1"] in text and "paper_err_increase" in text and "noise_err_increase" in text


@pytest.mark.parametrize("normalize", [False, True])
def test_a_diverged_papers_baseline_is_a_warning_not_a_huge_number(tiny_dpmf: dict[str, Any], normalize: bool) -> None:
    # The paper's baseline computed here: 100 iterations of unprotected full-batch MF from the run's initial U
    # and V. With the raw summed step (normalize = false) it diverges on this data -- its error is beyond
    # Delta, the most a prediction inside the rating scale errs by -- and the run must say so instead of
    # reporting the huge error as a reference; with the normalized step it is a reference like any other.
    # 45 raters per item make the summed step diverge (on MovieLens-100k it does by iteration 3).
    tiny_dpmf["data"].update({"users": 60, "items": 20, "ratings": 900})
    tiny_dpmf["protocol"].update({"normalize": normalize, "baseline_rounds": 1})
    tiny_dpmf["run"]["rounds"] = 2
    result = fedrecsim.run(tiny_dpmf)
    train = _train(tiny_dpmf)
    low, high = train.rating_range
    state = result.outcome.state
    hyper = fedrecsim.parse_scenario(tiny_dpmf).protocol.hyper
    U, V = train_baseline(state["initial_user_factors"], state["initial_item_factors"], train, hyper, claims.PAPER_BASELINE_ROUNDS)
    errors = np.abs(train.values - np.einsum("ij,ij->i", U[train.users], V[train.items]))
    paper_error = float(errors.mean()) if np.isfinite(errors).all() else math.inf
    final = result.result["metrics"]["final"]
    diverged = [warning for warning in result.result["warnings"] if warning.startswith("the paper's baseline diverged")]
    if not normalize:
        assert paper_error > high - low
        assert "paper_baseline_err_mean" not in final and "paper_err_increase" not in final
        assert len(diverged) == 1 and "protocol.normalize = false" in diverged[0]
        assert "diverged" in result.result["paper_figures"][0]["quantity"] and result.result["paper_figures"][0]["measured"] is None
    else:
        assert paper_error < high - low
        assert final["paper_baseline_err_mean"] == pytest.approx(paper_error, rel=1e-9) and not diverged


def test_the_item_mean_reference_and_the_clipped_errors_sit_beside_the_raw_ones(tiny_dpmf: dict[str, Any]) -> None:
    final = fedrecsim.run(tiny_dpmf).result["metrics"]["final"]
    for split in ("train", "test"):
        for what in ("rmse", "mae"):
            for name in (f"{split}_{what}", f"{split}_{what}_clipped", f"{split}_{what}_mean_predictor", f"{split}_{what}_item_mean_predictor"):
                assert np.isfinite(final[name]), name


@pytest.mark.parametrize("protocol", [{"scenario": "S2"}, {"scenario": "S3", "max_users": 12, "k_presharing": 4}])
def test_s2_s3_privacy_says_theorem1_does_not_cover_v_after_t_iterations(tiny_dpmf: dict[str, Any], protocol: dict[str, Any]) -> None:
    tiny_dpmf["protocol"].update(protocol)
    privacy = fedrecsim.run(tiny_dpmf).result["privacy"]
    assert privacy["theorem1_covers_published_v"] is False
    (caveat,) = privacy["caveats"]
    assert "V after T iterations" in caveat and "not the minimiser Theorem 1" in caveat


def test_s1_publishes_the_minimiser_theorem1_covers(tiny_dpmf: dict[str, Any]) -> None:
    tiny_dpmf["protocol"]["scenario"] = "S1"
    privacy = fedrecsim.run(tiny_dpmf).result["privacy"]
    assert privacy["theorem1_covers_published_v"] is True and "caveats" not in privacy


def test_without_the_papers_baseline_its_metrics_are_absent_and_the_rest_unchanged(tiny_dpmf: dict[str, Any]) -> None:
    tiny_dpmf["run"]["rounds"] = 2
    with_it = fedrecsim.run(tiny_dpmf).result
    tiny_dpmf["protocol"]["paper_baseline"] = False
    without = fedrecsim.run(tiny_dpmf).result
    paper = {"paper_baseline_err_mean", "paper_err_increase"}
    assert paper <= set(with_it["metrics"]["final"]) and not paper & set(without["metrics"]["final"])
    assert {k: v for k, v in with_it["metrics"]["final"].items() if k not in paper} == without["metrics"]["final"]
    assert without["paper_figures"][0]["measured"] is None and "paper_baseline = false" in without["paper_figures"][0]["quantity"]
