"""Explicit MF (Hua et al.): the per-party steps, the vectorized reference, and how they train."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from fedrecsim.data import Ratings, mae, movielens_100k_shape, random_split, rmse, synthetic_explicit
from fedrecsim.errors import ConfigError
from fedrecsim.models import CentralizedMF, MFHyper, item_step, predict, sequential_sgd_epoch, unit_rows, user_step


def loop_round(
    U: np.ndarray, V: np.ndarray, r: Ratings, hyper: MFHyper, users: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The round as the federated parties run it: one user_step per user, then one item_step."""
    new_U = U.copy()
    sums = np.zeros_like(V)
    counts = np.zeros(r.n_items, dtype=np.int64)
    for u in users:
        items, values = r.user_ratings(int(u))
        new_U[u], grads = user_step(U[u], V[items], values, hyper)
        sums[items] += grads
        counts[items] += 1
    return new_U, item_step(V, sums, counts, hyper)


def test_hyper_defaults_are_the_papers_and_validated() -> None:
    h = MFHyper()
    assert (h.d, h.gamma, h.lam, h.mu, h.normalize) == (50, 2**-5, 0.001, 0.001, True)
    for kwargs, key in [
        ({"d": 0}, "protocol.d"),
        ({"gamma": 0.0}, "protocol.gamma"),
        ({"gamma": float("inf")}, "protocol.gamma"),
        ({"lam": -1e-3}, "protocol.lam"),
        ({"mu": "0.1"}, "protocol.mu"),
        ({"normalize": 1}, "protocol.normalize"),
    ]:
        with pytest.raises(ConfigError) as caught:
            MFHyper(**kwargs)
        assert caught.value.key_path == key
    assert MFHyper(lam=0.0, mu=0.0).lam == 0.0


def test_unit_rows_are_uniform_on_the_sphere() -> None:
    rows = unit_rows(np.random.default_rng(0), 4000, 3)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    # Archimedes: on the 2-sphere each coordinate is uniform on [-1, 1]. KS test, fixed seed,
    # rejecting only at p < 0.001.
    assert stats.kstest(rows[:, 2], stats.uniform(-1, 2).cdf).pvalue > 1e-3


def test_user_step_by_hand() -> None:
    hyper = MFHyper(d=2, gamma=0.5, lam=0.1, normalize=True)
    u = np.array([1.0, 0.0])
    v = np.array([[1.0, 0.0], [0.0, 1.0]])
    r = np.array([3.0, 2.0])
    new_u, grads = user_step(u, v, r, hyper)
    # e = (3 - 1, 2 - 0) = (2, 2); grad_u = -2 (2 v_0 + 2 v_1) = (-4, -4); normalized by 2 -> (-2, -2).
    assert np.allclose(new_u, u - 0.5 * (np.array([-2.0, -2.0]) + 0.2 * u))
    assert np.allclose(grads, [[-4.0, 0.0], [-4.0, 0.0]])  # -2 e_j u with the old u
    raw_u, _ = user_step(u, v, r, MFHyper(d=2, gamma=0.5, lam=0.1, normalize=False))
    assert np.allclose(raw_u, u - 0.5 * (np.array([-4.0, -4.0]) + 0.2 * u))
    lonely_u, no_grads = user_step(u, np.empty((0, 2)), np.empty(0), hyper)
    assert np.allclose(lonely_u, u * (1 - 0.5 * 0.2)) and no_grads.shape == (0, 2)


def test_item_step_leaves_untouched_items_alone() -> None:
    hyper = MFHyper(d=2, gamma=0.5, mu=0.1)
    v = np.array([[1.0, 1.0], [2.0, 0.0]])
    sums = np.array([[4.0, 2.0], [0.0, 0.0]])
    new_v = item_step(v, sums, np.array([2, 0]), hyper)
    assert np.allclose(new_v[0], v[0] - 0.5 * (sums[0] / 2 + 0.2 * v[0]))
    assert np.array_equal(new_v[1], v[1])
    assert new_v is not v
    with pytest.raises(ValueError):
        item_step(v, sums[:1], np.array([1, 1]), hyper)


@pytest.mark.parametrize("normalize", [True, False])
def test_centralized_round_equals_the_per_user_loop(normalize: bool) -> None:
    rng = np.random.default_rng(1)
    r = synthetic_explicit(rng, 40, 30, 500)
    # User 0 has no ratings (it only shrinks by its regularizer) and user 1 exactly one.
    r = r.subset((r.users != 0) & ((r.users != 1) | (r.items == r.user_items(1)[0])))
    assert r.user_counts()[:2].tolist() == [0, 1]
    hyper = MFHyper(d=6, gamma=0.01, normalize=normalize)
    U, V = unit_rows(rng, 40, 6), unit_rows(rng, 30, 6)
    model = CentralizedMF(hyper)
    for _ in range(3):
        expected = loop_round(U, V, r, hyper, np.arange(r.n_users))
        U, V = model.round(U, V, r)
        assert np.max(np.abs(U - expected[0])) < 1e-12 and np.max(np.abs(V - expected[1])) < 1e-12
    mask = rng.random(40) < 0.3
    expected = loop_round(U, V, r, hyper, np.flatnonzero(mask))
    got = model.round(U, V, r, mask)
    assert np.max(np.abs(got[0] - expected[0])) < 1e-12 and np.max(np.abs(got[1] - expected[1])) < 1e-12
    assert np.array_equal(got[0][~mask], U[~mask])


def test_rounds_do_not_modify_their_inputs() -> None:
    rng = np.random.default_rng(2)
    r = synthetic_explicit(rng, 20, 15, 150)
    U, V = unit_rows(rng, 20, 4), unit_rows(rng, 15, 4)
    before = U.copy(), V.copy()
    CentralizedMF(MFHyper(d=4)).round(U, V, r)
    sequential_sgd_epoch(U, V, r, MFHyper(d=4), rng)
    assert np.array_equal(U, before[0]) and np.array_equal(V, before[1])


def test_bad_shapes_are_refused() -> None:
    rng = np.random.default_rng(3)
    r = synthetic_explicit(rng, 10, 8, 40)
    model = CentralizedMF(MFHyper(d=4))
    with pytest.raises(ValueError, match="shapes"):
        model.round(np.zeros((10, 5)), np.zeros((8, 5)), r)
    with pytest.raises(ValueError, match="participating_users_mask"):
        model.round(np.zeros((10, 4)), np.zeros((8, 4)), r, np.ones(9, dtype=bool))


def test_fit_reports_every_round_and_rmse_decreases() -> None:
    rng = np.random.default_rng(4)
    r = synthetic_explicit(rng, 200, 100, 5000, rank=3)
    U, V = unit_rows(rng, 200, 10), unit_rows(rng, 100, 10)
    history: list[float] = []
    CentralizedMF(MFHyper(d=10, gamma=0.05)).fit(
        U, V, r, 40, on_round=lambda t, U, V: history.append(rmse(predict(U, V, r.users, r.items), r.values))
    )
    assert len(history) == 40
    assert np.all(np.diff(history) < 0)
    assert history[-1] < 0.5 * rmse(predict(U, V, r.users, r.items), r.values)


def test_paper_settings_diverge_unnormalized_and_converge_normalized() -> None:
    """Hua et al.'s gamma = 2^-5 with raw gradient sums blows up on MovieLens-shaped data."""
    rng = np.random.default_rng(5)
    r = synthetic_explicit(rng, **movielens_100k_shape().as_kwargs())
    train, test = random_split(r, 0.1, rng)
    U0, V0 = unit_rows(rng, r.n_users, 50), unit_rows(rng, r.n_items, 50)
    start = rmse(predict(U0, V0, train.users, train.items), train.values)

    with np.errstate(over="ignore", invalid="ignore"):
        U, V = CentralizedMF(MFHyper(normalize=False)).fit(U0, V0, train, 4)
        raw = rmse(predict(U, V, train.users, train.items), train.values)
    assert not np.isfinite(raw) or raw > 1e6 * start

    U, V = CentralizedMF(MFHyper()).fit(U0, V0, train, 100)
    train_mae = mae(predict(U, V, train.users, train.items), train.values)
    test_rmse = rmse(predict(U, V, test.users, test.items), test.values)
    # Measured: train MAE ~0.64, test RMSE ~1.11 after 100 rounds (start: RMSE ~3.2).
    assert train_mae < 0.75 and test_rmse < 1.25


def test_predict_matches_the_dense_product() -> None:
    rng = np.random.default_rng(6)
    U, V = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    users, items = rng.integers(0, 7, 40), rng.integers(0, 5, 40)
    assert np.allclose(predict(U, V, users, items), (U @ V.T)[users, items])
    with pytest.raises(ValueError):
        predict(U, V, users, items[:3])


def test_sequential_sgd_is_per_rating_sgd_in_a_random_order() -> None:
    rng = np.random.default_rng(7)
    r = synthetic_explicit(rng, 15, 10, 60)
    hyper = MFHyper(d=3, gamma=0.02)
    U, V = unit_rows(rng, 15, 3), unit_rows(rng, 10, 3)
    got = sequential_sgd_epoch(U, V, r, hyper, np.random.default_rng(8))
    # Reference: the same permutation, one rating at a time, by the textbook update.
    order = np.random.default_rng(8).permutation(len(r))
    eU, eV = U.copy(), V.copy()
    for k in order:
        i, j, value = r.users[k], r.items[k], r.values[k]
        error = value - eU[i] @ eV[j]
        gu = -2 * error * eV[j] + 2 * hyper.lam * eU[i]
        gv = -2 * error * eU[i] + 2 * hyper.mu * eV[j]
        eU[i] -= hyper.gamma * gu
        eV[j] -= hyper.gamma * gv
    assert np.allclose(got[0], eU, atol=1e-12) and np.allclose(got[1], eV, atol=1e-12)


def test_sequential_sgd_reduces_the_error() -> None:
    rng = np.random.default_rng(9)
    r = synthetic_explicit(rng, 100, 60, 3000, rank=3)
    U, V = unit_rows(rng, 100, 8), unit_rows(rng, 60, 8)
    before = rmse(predict(U, V, r.users, r.items), r.values)
    for _ in range(3):
        U, V = sequential_sgd_epoch(U, V, r, MFHyper(d=8), rng)
    assert rmse(predict(U, V, r.users, r.items), r.values) < 0.5 * before


def test_a_wrong_user_matrix_is_refused_even_with_a_right_item_matrix() -> None:
    r = synthetic_explicit(np.random.default_rng(3), 10, 8, 40)
    message = "U and V must have shapes (10, 4) and (8, 4), got (10, 5) and (8, 4)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CentralizedMF(MFHyper(d=4)).round(np.zeros((10, 5)), np.zeros((8, 4)), r)


def test_an_item_with_a_single_contribution_moves() -> None:
    hyper = MFHyper(d=2, gamma=0.5, mu=0.1)
    v = np.array([[1.0, 1.0], [2.0, 0.0]])
    new_v = item_step(v, np.array([[4.0, 2.0], [1.0, 1.0]]), np.array([1, 0]), hyper)
    # v_0 - gamma (G_0 / 1 + 2 mu v_0) = (1, 1) - 0.5 ((4, 2) + (0.2, 0.2)) = (-1.1, -0.1)
    np.testing.assert_allclose(new_v, [[-1.1, -0.1], [2.0, 0.0]], atol=1e-15)


def test_item_step_refuses_mismatched_shapes_naming_them() -> None:
    message = "item_step needs v_rows[m, d], grad_sums[m, d], counts[m]; got (2, 2), (1, 2), (2,)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        item_step(np.zeros((2, 2)), np.zeros((1, 2)), np.array([1, 1]), MFHyper(d=2))


def test_user_step_refuses_mismatched_shapes_naming_them() -> None:
    hyper = MFHyper(d=2)
    for u, v_rows, ratings, shapes in [
        (np.zeros(2), np.zeros((3, 2)), np.zeros(2), "(2,), (3, 2), (2,)"),
        (np.zeros((1, 2)), np.zeros((2, 2)), np.zeros(2), "(1, 2), (2, 2), (2,)"),
    ]:
        message = f"user_step needs u[d], v_rows[m, d], ratings[m]; got {shapes}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            user_step(u, v_rows, ratings, hyper)


def test_extended_precision_inputs_give_the_float64_steps() -> None:
    wide = np.longdouble
    hyper = MFHyper(d=2, gamma=0.5, lam=0.1, mu=0.1)
    u = np.array([1.0, 0.5], dtype=wide) / 3
    v = np.array([[1.0, 0.0], [0.5, 1.0]], dtype=wide) / 3
    r = np.array([3.0, 2.0], dtype=wide) / 3
    new_u, grads = user_step(u, v, r, hyper)
    expected_u, expected_grads = user_step(u.astype(np.float64), v.astype(np.float64), r.astype(np.float64), hyper)
    assert new_u.dtype == np.float64 and grads.dtype == np.float64
    np.testing.assert_array_equal(new_u, expected_u)
    np.testing.assert_array_equal(grads, expected_grads)
    rng = np.random.default_rng(0)
    rows, sums = rng.standard_normal((6, 2)).astype(wide) / 3, rng.standard_normal((6, 2)).astype(wide) / 3
    counts = np.array([1, 2, 3, 0, 5, 7])
    new_rows = item_step(rows, sums, counts, hyper)
    assert new_rows.dtype == np.float64
    np.testing.assert_array_equal(new_rows, item_step(rows.astype(np.float64), sums.astype(np.float64), counts, hyper))


def test_predict_takes_indices_as_any_sequence_of_whole_numbers() -> None:
    # Ids that arrive as floats (e.g. read from a float column) index like integers.
    U, V = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert predict(U, V, np.array([1.0, 0.0]), np.array([2.0, 1.0])).tolist() == [7.0, 2.0]


def test_predict_refuses_unequal_or_two_dimensional_indices() -> None:
    U = V = np.eye(2)
    needs = "users and items must be equally long 1-D arrays, got "
    with pytest.raises(ValueError, match=f"^{re.escape(needs + '(2,) and (1,)')}$"):
        predict(U, V, [0, 1], [0])
    with pytest.raises(ValueError, match=f"^{re.escape(needs + '(1, 2) and (1, 2)')}$"):
        predict(U, V, [[0, 1]], [[0, 1]])


@pytest.mark.parametrize("rounds", [-1, True, 2.0])
def test_fit_refuses_rounds_that_are_not_a_non_negative_integer(rounds) -> None:
    r = synthetic_explicit(np.random.default_rng(3), 10, 8, 40)
    with pytest.raises(ValueError, match=f"^rounds must be a non-negative integer, got {re.escape(repr(rounds))}$"):
        CentralizedMF(MFHyper(d=2)).fit(np.zeros((10, 2)), np.zeros((8, 2)), r, rounds)


def test_fit_of_zero_rounds_returns_float64_copies_of_the_start() -> None:
    rng = np.random.default_rng(3)
    r = synthetic_explicit(rng, 10, 8, 40)
    U0, V0 = unit_rows(rng, 10, 2).astype(np.float32), unit_rows(rng, 8, 2).astype(np.float32)
    U, V = CentralizedMF(MFHyper(d=2)).fit(U0, V0, r, 0)
    assert U.dtype == np.float64 and V.dtype == np.float64
    assert np.array_equal(U, U0) and np.array_equal(V, V0)


def test_fit_numbers_the_rounds_from_one() -> None:
    rng = np.random.default_rng(3)
    r = synthetic_explicit(rng, 10, 8, 40)
    seen: list[int] = []
    U0, V0 = unit_rows(rng, 10, 2), unit_rows(rng, 8, 2)
    CentralizedMF(MFHyper(d=2)).fit(U0, V0, r, 3, on_round=lambda t, U, V: seen.append(t))
    assert seen == [1, 2, 3]


def test_sequential_sgd_of_float32_profiles_runs_in_float64() -> None:
    rng = np.random.default_rng(7)
    r = synthetic_explicit(rng, 15, 10, 60)
    hyper = MFHyper(d=3, gamma=0.02)
    U, V = unit_rows(rng, 15, 3).astype(np.float32), unit_rows(rng, 10, 3).astype(np.float32)
    got = sequential_sgd_epoch(U, V, r, hyper, np.random.default_rng(8))
    expected = sequential_sgd_epoch(U.astype(np.float64), V.astype(np.float64), r, hyper, np.random.default_rng(8))
    assert got[0].dtype == np.float64 and got[1].dtype == np.float64
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
