"""DP-MF's S1 (trusted recommender, Hua et al. Sec. 4.1) end to end, every reported number recomputed here.

The recommender runs ``run.rounds`` iterations of unprotected MF (eqs. (1)-(5), normalized step, U kept in
the unit ball) over the uploaded ratings, then publishes V minimizing objective (6) with U fixed and eta per
Theorem 1 (or Lemma 1). The tests replay the iterations with `fedrecsim.models.mf.CentralizedMF`, solve
(6) item by item in numpy, and recompute the metrics, the baseline (the same pipeline with eta = 0), the
privacy report's eta figures, the error distributions and the rounds' rows from the data and that model.

`fedrecsim.protocols.dpmf.central`'s pieces on hand-built ratings: a baseline round is eq. (2) for every
user with ratings and leaves the others alone, the replay computes in float64, an item's refit depends on
its own ratings only (bit for bit), and no ratings give an all-zero error distribution.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.ratings import Ratings
from fedrecsim.models.mf import CentralizedMF, MFHyper, unit_rows
from fedrecsim.network.party import Role
from fedrecsim.protocols.dpmf.central import error_distribution, refit_items, replay, train_baseline
from fedrecsim.seeding import Stream, generator

SEED = 5
D = 6
EPSILON = 1.0
# 30 users, 120 items, 360 training ratings on 1..5: 41 items nobody rated (the last four among them) and 20
# items with exactly one rater.
S1: dict[str, Any] = {
    "run": {"protocol": "dpmf", "name": "tiny-dpmf-s1", "seed": SEED, "rounds": 3, "round_timeout_s": 10.0},
    "data": {"source": "synthetic", "users": 30, "items": 120, "ratings": 400},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "availability": {"model": "always"},
    "protocol": {"scenario": "S1", "d": D, "epsilon": EPSILON},
}
QUANTILES = [round(0.05 * step, 2) for step in range(21)]
# A KS test on a fixed seed rejects the true distribution at this level with probability 1e-3.
KS_LEVEL = 1e-3


def _scenario(**protocol: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(S1)
    scenario["protocol"].update(protocol)
    return scenario


def _data(scenario: dict[str, Any]):  # type: ignore[no-untyped-def]
    return prepare_data(fedrecsim.parse_scenario(scenario).data, SEED)


def _initial_factors(n_items: int, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """The recommender's own generator (run seed, actor stream, server role, index 0): V's unit rows, then U's."""
    rng = generator(SEED, Stream.ACTOR, Role.SERVER.code, 0)
    V0 = unit_rows(rng, n_items, D)
    U0 = unit_rows(rng, n_users, D)
    return U0, V0


def _train(U: np.ndarray, V: np.ndarray, train, rounds: int) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``rounds`` full-batch normalized MF iterations over the users with ratings, U scaled back into the unit ball."""
    model = CentralizedMF(MFHyper(d=D))
    raters = np.bincount(train.users, minlength=train.n_users) > 0
    for _ in range(rounds):
        U, V = model.round(U, V, train, participating_users_mask=raters)
        U = U / np.maximum(1.0, np.linalg.norm(U, axis=1))[:, None]
    return U, V


def _minimizer(U: np.ndarray, V: np.ndarray, train, eta: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Objective (6) with U fixed, normalized: per rated item (U_j^T U_j + mu n_j I) v_j = U_j^T r_j - eta_j / 2,
    per unrated item argmin mu ||v||^2 + eta_j . v = -eta_j / (2 mu)."""
    mu = MFHyper().mu
    refit = -eta / (2 * mu)
    for j in np.unique(train.items):
        mine = train.items == j
        rows = U[train.users[mine]]
        refit[j] = np.linalg.solve(rows.T @ rows + mu * mine.sum() * np.eye(D), rows.T @ train.values[mine] - eta[j] / 2)
    return refit


def _abs_errors(U: np.ndarray, V: np.ndarray, ratings) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.abs(np.einsum("ij,ij->i", U[ratings.users], V[ratings.items]) - ratings.values)


def test_s1_publishes_the_minimizer_of_objective_6_for_the_u_it_trained_and_reports_its_errors() -> None:
    scenario = _scenario()
    train, test = _data(scenario)
    calls: list[tuple[Any, int]] = []
    result = fedrecsim.run(scenario, progress=lambda completed, total: calls.append((completed, total)))
    state, final = result.outcome.state, result.metrics

    # The recommender's initial profiles come from its own generator; three iterations of MF follow.
    U0, V0 = _initial_factors(train.n_items, train.n_users)
    np.testing.assert_array_equal(state["initial_item_factors"], V0)
    np.testing.assert_array_equal(state["initial_user_factors"], U0)
    U, V_trained = _train(U0, V0, train, 3)
    np.testing.assert_allclose(state["user_factors"], U, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(state["unpublished_item_factors"], V_trained, rtol=1e-9, atol=1e-12)

    # The published V is the exact minimizer of (6) for that U and the eta drawn.
    eta = state["eta"]
    assert eta.shape == (train.n_items, D)
    published = _minimizer(U, V_trained, train, eta)
    np.testing.assert_allclose(state["item_factors"], published, rtol=1e-8, atol=1e-10)

    # Metrics of the published model over the training and test ratings.
    errors, test_errors = _abs_errors(U, published, train), _abs_errors(U, published, test)
    assert len(test) > 0
    assert final["err_mean"] == pytest.approx(errors.mean(), rel=1e-9)
    for name, q in (("err_q25", 0.25), ("err_q50", 0.5), ("err_q75", 0.75), ("err_q90", 0.9)):
        assert final[name] == pytest.approx(np.quantile(errors, q), rel=1e-9)
    assert final["train_rmse"] == pytest.approx(math.sqrt(np.mean(errors**2)), rel=1e-9)
    assert final["train_mae"] == pytest.approx(errors.mean(), rel=1e-9)
    assert final["test_rmse"] == pytest.approx(math.sqrt(np.mean(test_errors**2)), rel=1e-9)
    assert final["test_mae"] == pytest.approx(test_errors.mean(), rel=1e-9)

    # The baseline is the same pipeline with eta = 0; it is also the noiseless run.
    noiseless = _minimizer(U, V_trained, train, np.zeros_like(eta))
    baseline = _abs_errors(U, noiseless, train).mean()
    assert final["baseline_err_mean"] == pytest.approx(baseline, rel=1e-9)
    assert final["noiseless_err_mean"] == pytest.approx(baseline, rel=1e-9)
    assert final["err_increase"] == pytest.approx(errors.mean() - baseline, rel=1e-9)
    assert final["noise_err_increase"] == pytest.approx(errors.mean() - baseline, rel=1e-9)
    assert final["err_increase"] > 0  # eps = 1 costs accuracy
    raters = int((np.bincount(train.users, minlength=train.n_users) > 0).sum())
    assert final["participants"] == float(raters) == 30.0
    assert result.result["metrics"]["baselines"] == {"err_mean": "baseline_err_mean"}

    # One row per iteration, the final metrics on the last; progress after each.
    assert result.result["rounds_completed"] == 3
    assert result.rounds[:2] == [{"round": 1, "participants": raters}, {"round": 2, "participants": raters}]
    assert result.rounds[2] == {"round": 3, **final}
    assert calls == [(1, 3), (2, 3), (3, 3)]

    # Error distributions (Fig. 7): 0%, 5%, ..., 100% quantiles of this run's and the baseline's errors.
    distributions = result.result["distributions"]
    assert sorted(distributions) == ["abs_error_test", "abs_error_train", "baseline_abs_error_train"]
    for name, expected in (
        ("abs_error_train", errors), ("baseline_abs_error_train", _abs_errors(U, noiseless, train)), ("abs_error_test", test_errors),
    ):
        assert distributions[name]["quantiles"] == QUANTILES
        assert distributions[name]["unit"] == "rating units"
        np.testing.assert_allclose(distributions[name]["values"], np.quantile(expected, QUANTILES), rtol=1e-9)
    assert {name: distribution["of"] for name, distribution in distributions.items()} == {
        "abs_error_train": "this run, training ratings",
        "baseline_abs_error_train": "non-private baseline, training ratings",
        "abs_error_test": "this run, test ratings",
    }

    # The privacy report's eta figures, over every item: the 41 nobody rated carry their eta_j too.
    counts = np.bincount(train.items, minlength=train.n_items)
    rated = counts > 0
    assert (~rated).sum() == 41 and not rated[-1] and (counts == 1).sum() == 20
    assert result.result["privacy"]["eta"] == {
        "items_noised": train.n_items,
        "abs_mean": pytest.approx(np.abs(eta).mean(), rel=1e-12),
        "norm_mean": pytest.approx(np.linalg.norm(eta, axis=1).mean(), rel=1e-12),
    }
    assert result.result["privacy"]["epsilon_spent"]["at_round"] == 3
    # Everybody stays online: nobody joins after the start, leaves or crashes.
    assert state["population"] == {"joins": 0, "leaves": 0, "crashes": 0}


@pytest.mark.parametrize("noise", ["theorem1", "laplace"])
def test_s1_eta_follows_the_configured_mechanism(noise: str) -> None:
    scenario = _scenario(noise=noise, epsilon=0.5)
    scenario["data"].update({"items": 1500, "ratings": 300})
    scenario["run"]["rounds"] = 1
    result = fedrecsim.run(scenario)
    eta = result.outcome.state["eta"]
    assert eta.shape == (1500, D)
    delta = 4.0  # ratings on 1..5
    gamma_norms = stats.gamma(a=D, scale=2 * delta / 0.5).cdf  # Theorem 1: ||eta|| ~ Gamma(d, 2 Delta / eps)
    laplace = stats.laplace(scale=2 * delta * math.sqrt(D) / 0.5).cdf  # Lemma 1: iid Laplace(2 Delta sqrt(d) / eps)
    norm_p = stats.kstest(np.linalg.norm(eta, axis=1), gamma_norms).pvalue
    element_p = stats.kstest(eta.ravel(), laplace).pvalue
    if noise == "theorem1":
        assert norm_p > KS_LEVEL and element_p < 1e-6
    else:
        assert element_p > KS_LEVEL and norm_p < 1e-6


def test_s1_baseline_with_fewer_rounds_trains_its_own_u_from_the_initial_profiles() -> None:
    scenario = _scenario(baseline_rounds=1)
    train, _ = _data(scenario)
    result = fedrecsim.run(scenario)
    U0, V0 = _initial_factors(train.n_items, train.n_users)
    base_u, base_v = _train(U0, V0, train, 1)
    baseline = _abs_errors(base_u, _minimizer(base_u, base_v, train, np.zeros_like(base_v)), train).mean()
    final = result.metrics
    assert final["baseline_err_mean"] == pytest.approx(baseline, rel=1e-9)
    assert final["noiseless_err_mean"] == pytest.approx(baseline, rel=1e-9)
    assert final["err_increase"] == pytest.approx(final["err_mean"] - baseline, rel=1e-9)
    # The run itself still trained three rounds.
    U, _ = _train(U0, V0, train, 3)
    np.testing.assert_allclose(result.outcome.state["user_factors"], U, rtol=1e-9, atol=1e-12)


def test_s1_with_nobody_online_publishes_the_noise_alone() -> None:
    scenario = _scenario()
    scenario["availability"] = {"model": "bernoulli", "p_join": 0.0, "p_leave": 0.0, "initial_online": 0.0}
    train, _ = _data(scenario)
    result = fedrecsim.run(scenario)
    assert [row["participants"] for row in result.rounds] == [0, 0, 0]
    assert result.metrics["participants"] == 0.0
    # No rating held: every item is published as the minimizer of mu ||v||^2 + eta_j . v, the noise alone.
    U0, _ = _initial_factors(train.n_items, train.n_users)
    eta = result.outcome.state["eta"]
    assert result.result["privacy"]["eta"]["items_noised"] == train.n_items
    np.testing.assert_allclose(result.outcome.state["item_factors"], -eta / (2 * MFHyper().mu), rtol=1e-12)
    noisy = _abs_errors(U0, -eta / (2 * MFHyper().mu), train).mean()
    assert result.metrics["err_mean"] == pytest.approx(noisy, rel=1e-9)
    assert result.metrics["err_increase"] == pytest.approx(noisy - np.abs(train.values).mean(), rel=1e-9)


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def test_s1_refuses_implicit_feedback_naming_the_key() -> None:
    scenario = _scenario()
    scenario["data"]["feedback"] = "implicit"
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(scenario)
    error = _innermost(raised.value)
    assert isinstance(error, fedrecsim.ConfigError) and error.key_path == "data.feedback"
    assert str(error) == "data.feedback: dpmf factorizes explicit ratings; got implicit feedback"


def test_s1_refuses_a_rating_range_without_width(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every rating 3: Delta = max_r - min_r = 0, so no Laplace scale exists."""
    import scipy.sparse

    rng = np.random.default_rng(0)
    dense = (rng.random((12, 10)) < 0.5) * 3.0
    scipy.sparse.save_npz(tmp_path / "flat.npz", scipy.sparse.csr_matrix(dense))
    scenario = _scenario()
    scenario["data"] = {"source": "npz", "path": str(tmp_path / "flat.npz")}
    with pytest.raises((fedrecsim.ConfigError, BaseExceptionGroup)) as raised:
        fedrecsim.run(scenario)
    error = _innermost(raised.value)
    assert isinstance(error, fedrecsim.ConfigError) and error.key_path == "data"
    assert "the rating range (3.0, 3.0) is empty: Delta = max_r - min_r must be > 0" in str(error)


def _small_ratings() -> Ratings:
    """Four users on three items: user 0 rates items 0 and 2, user 1 only item 1, user 2 nothing, user 3 all."""
    users = np.array([0, 0, 1, 3, 3, 3])
    items = np.array([0, 2, 1, 0, 1, 2])
    values = np.array([4.0, 2.0, 5.0, 1.0, 3.0, 4.0])
    return Ratings(users, items, values, 4, 3, (1.0, 5.0))


def test_a_baseline_round_moves_every_rater_by_eq_2_and_leaves_a_user_without_ratings_alone() -> None:
    """One round over every user: u_i -= gamma (-2 sum_j (r_ij - u_i.v_j) v_j / n_i + 2 lambda u_i), then the ball."""
    ratings = _small_ratings()
    rng = np.random.default_rng(8)
    U0, V0 = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    U0 *= 0.5 / np.linalg.norm(U0, axis=1)[:, None]  # inside the ball, so the start is not projected
    hyper = MFHyper(d=3, gamma=0.1, lam=0.05)
    U, _ = train_baseline(U0, V0, ratings, hyper, 1)
    for user in (0, 1, 3):
        mine = ratings.users == user
        rated, values = ratings.items[mine], ratings.values[mine]
        errors = values - V0[rated] @ U0[user]
        step = U0[user] - 0.1 * (-2.0 * errors @ V0[rated] / mine.sum() + 2.0 * 0.05 * U0[user])
        np.testing.assert_allclose(U[user], step / max(1.0, np.linalg.norm(step)), rtol=1e-12)
    np.testing.assert_array_equal(U[2], U0[2])


def test_replay_computes_and_returns_float64_whatever_the_initial_profiles_dtype() -> None:
    ratings = _small_ratings()
    rng = np.random.default_rng(9)
    U0, V0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    hyper = MFHyper(d=3, gamma=0.1)
    participants = [None, np.array([1, 3])]
    U, V = replay(U0, V0, ratings, hyper, participants)
    U_wide, V_wide = replay(U0.astype(np.float64), V0.astype(np.float64), ratings, hyper, participants)
    assert U.dtype == V.dtype == np.float64
    np.testing.assert_array_equal(U, U_wide)
    np.testing.assert_array_equal(V, V_wide)
    U_none, V_none = replay(U0, V0, ratings, hyper, [])
    assert U_none.dtype == V_none.dtype == np.float64
    np.testing.assert_array_equal(V_none, V0)


def test_an_items_refit_depends_on_its_own_ratings_only_bit_for_bit() -> None:
    """Objective (6) splits by item: refitting with every other item's ratings removed gives the same row exactly.

    Each item's system sums over its raters in the ratings' order (ascending user), whatever other items
    are interleaved; U's rows span six orders of magnitude so that a different order changes the bits.
    """
    rng = np.random.default_rng(1)
    n_users, n_items, d = 200, 3, 8
    pairs = rng.permutation(n_users * n_items)[:600]
    users, items = pairs // n_items, pairs % n_items
    values = rng.integers(1, 6, size=600).astype(float)
    U = rng.standard_normal((n_users, d)) * 10.0 ** rng.integers(-3, 3, size=(n_users, 1))
    V, eta = rng.standard_normal((n_items, d)), rng.standard_normal((n_items, d))
    hyper = MFHyper(d=d, mu=0.01)
    everything = refit_items(U, V, Ratings(users, items, values, n_users, n_items, (1.0, 5.0)), eta, hyper)
    for item in range(n_items):
        mine = items == item
        alone = refit_items(U, V, Ratings(users[mine], items[mine], values[mine], n_users, n_items, (1.0, 5.0)), eta, hyper)
        np.testing.assert_array_equal(alone[item], everything[item])


def test_the_error_distribution_of_no_ratings_is_21_zeros() -> None:
    empty = Ratings(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), 2, 2, (1.0, 5.0))
    distribution = error_distribution(np.ones((2, 3)), np.ones((2, 3)), empty, "nobody")
    assert distribution == {"of": "nobody", "unit": "rating units", "quantiles": QUANTILES, "values": [0.0] * 21}
