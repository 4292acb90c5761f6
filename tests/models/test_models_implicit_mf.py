"""Implicit MF (FCF, Minto et al. eqs. (4), (5)): closed form, gradient convention, vectorized round."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedrecsim.data import Ratings, synthetic_implicit
from fedrecsim.errors import ConfigError
from fedrecsim.models import (
    ImplicitHyper,
    all_user_factors,
    confidence,
    implicit_loss,
    implicit_round,
    item_gradient,
    server_step,
    unit_rows,
    user_factors,
)


def user_data_term(V: np.ndarray, x: np.ndarray, items: np.ndarray, conf: np.ndarray) -> float:
    """sum_i c_ui (p_ui - x . v_i)^2 over all M items, written out densely."""
    c = np.ones(V.shape[0])
    p = np.zeros(V.shape[0])
    c[items], p[items] = conf, 1.0
    return float(np.sum(c * (p - V @ x) ** 2))


def setup(seed: int = 0) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((12, 4)) * 0.3
    items = np.array([1, 4, 7, 10])
    conf = confidence(np.array([1.0, 2.0, 1.0, 5.0]), alpha=0.5)
    return rng, V, items, conf


def test_confidence() -> None:
    assert confidence([0.0, 1.0, 4.0], 2.0).tolist() == [1.0, 3.0, 9.0]


def test_user_factors_is_eq_4_and_minimises_the_users_loss() -> None:
    _, V, items, conf = setup()
    lam = 0.1
    x = user_factors(V, items, conf, lam)
    C = np.ones(12)
    C[items] = conf
    p = np.zeros(12)
    p[items] = 1.0
    direct = np.linalg.solve(V.T @ np.diag(C) @ V + lam * np.eye(4), V.T @ np.diag(C) @ p)
    assert np.allclose(x, direct, atol=1e-13)
    assert np.allclose(user_factors(V, items, conf, lam, gram=V.T @ V), x, atol=1e-14)
    # It is the minimiser: any perturbation increases the regularized loss.
    loss = lambda y: user_data_term(V, y, items, conf) + lam * y @ y  # noqa: E731
    for delta in np.eye(4) * 1e-3:
        assert loss(x + delta) > loss(x) and loss(x - delta) > loss(x)
    assert np.array_equal(user_factors(V, np.empty(0, dtype=np.int64), np.empty(0), lam), np.zeros(4))


def test_item_gradient_is_the_derivative_of_the_users_data_term() -> None:
    # Central finite differences of sum_i c (p - x.v_i)^2 with respect to every entry of V: this pins
    # down sign and factor (-2 c (p - x.v) x, i.e. -2 f(u, i) of eq. (5)).
    _, V, items, conf = setup(1)
    x = np.array([0.5, -1.0, 0.25, 2.0])
    gradient = item_gradient(V, x, items, conf)
    numeric = np.zeros_like(V)
    h = 1e-6
    for index in np.ndindex(V.shape):
        bump = np.zeros_like(V)
        bump[index] = h
        numeric[index] = (user_data_term(V + bump, x, items, conf) - user_data_term(V - bump, x, items, conf)) / (2 * h)
    assert np.allclose(gradient, numeric, atol=1e-6)
    assert gradient.shape == (12, 4)


def test_server_step() -> None:
    V = np.ones((3, 2))
    total = np.full((3, 2), 4.0)
    averaged = server_step(V, total, 2, ImplicitHyper(d=2, gamma=0.1, lam=0.5))
    assert np.allclose(averaged, 1 - 0.1 * (2.0 + 1.0))
    summed = server_step(V, total, 2, ImplicitHyper(d=2, gamma=0.1, lam=0.5, normalize=False))
    assert np.allclose(summed, 1 - 0.1 * (4.0 + 1.0))
    with pytest.raises(ValueError):
        server_step(V, total, 0, ImplicitHyper(d=2))


def test_hyper_validation() -> None:
    cases = [({"d": 0}, "protocol.d"), ({"gamma": -1.0}, "protocol.gamma"), ({"alpha": float("nan")}, "protocol.alpha")]
    for kwargs, key in cases:
        with pytest.raises(ConfigError) as caught:
            ImplicitHyper(**kwargs)
        assert caught.value.key_path == key


def data(seed: int = 2) -> Ratings:
    r = synthetic_implicit(np.random.default_rng(seed), 60, 25, 500, rank=3)
    # Graded interaction counts and a user without any interaction, to exercise c and the empty case.
    counts = 1.0 + (r.users + r.items) % 3
    keep = r.users != 5
    return Ratings(r.users[keep], r.items[keep], counts[keep], r.n_users, r.n_items, (0.0, 3.0))


def loop_round(
    V: np.ndarray, r: Ratings, alpha: float, lam: float, gamma: float, normalize: bool, users: np.ndarray
) -> np.ndarray:
    """The round as the federated parties run it: every user's gradient, summed, then the server step."""
    gram = V.T @ V
    total = np.zeros_like(V)
    for u in users:
        items, values = r.user_ratings(int(u))
        conf = confidence(values, alpha)
        total += item_gradient(V, user_factors(V, items, conf, lam, gram), items, conf)
    hyper = ImplicitHyper(d=V.shape[1], gamma=gamma, lam=lam, alpha=alpha, normalize=normalize)
    return server_step(V, total, users.size, hyper)


@pytest.mark.parametrize("normalize", [True, False])
def test_vectorized_round_equals_the_per_user_loop(normalize: bool) -> None:
    r = data()
    rng = np.random.default_rng(3)
    V = unit_rows(rng, r.n_items, 4) * 0.5
    for _ in range(3):
        expected = loop_round(V, r, 2.0, 0.05, 0.01, normalize, np.arange(r.n_users))
        V_next = implicit_round(V, r, 2.0, 0.05, 0.01, normalize)
        assert np.max(np.abs(V_next - expected)) < 1e-10
        V = V_next
    mask = rng.random(r.n_users) < 0.4
    expected = loop_round(V, r, 2.0, 0.05, 0.01, normalize, np.flatnonzero(mask))
    assert np.max(np.abs(implicit_round(V, r, 2.0, 0.05, 0.01, normalize, mask) - expected)) < 1e-10


def test_all_user_factors_equals_one_by_one() -> None:
    r = data()
    V = unit_rows(np.random.default_rng(4), r.n_items, 4)
    X = all_user_factors(V, r, 1.5, 0.2)
    for u in range(r.n_users):
        items, values = r.user_ratings(u)
        assert np.allclose(X[u], user_factors(V, items, confidence(values, 1.5), 0.2), atol=1e-12)
    assert np.array_equal(X[5], np.zeros(4))


def test_loss_is_the_papers_and_decreases() -> None:
    r = data()
    V = unit_rows(np.random.default_rng(5), r.n_items, 4) * 0.5
    alpha, lam = 2.0, 0.05
    # implicit_loss equals the dense definition at the solved profiles.
    X = all_user_factors(V, r, alpha, lam)
    dense = 0.0
    for u in range(r.n_users):
        items, values = r.user_ratings(u)
        dense += user_data_term(V, X[u], items, confidence(values, alpha))
    assert implicit_loss(V, r, alpha, lam) == pytest.approx(dense + lam * (np.sum(X**2) + np.sum(V**2)), rel=1e-12)
    # Gradient descent on min_X L: with summed gradients and a small step, monotone.
    losses = [implicit_loss(V, r, alpha, lam)]
    W = V
    for _ in range(15):
        W = implicit_round(W, r, alpha, lam, 1e-3, normalize=False)
        losses.append(implicit_loss(W, r, alpha, lam))
    assert np.all(np.diff(losses) < 0)
    # Averaged gradients (the default) with a larger step also train.
    W = V
    for _ in range(15):
        W = implicit_round(W, r, alpha, lam, 0.05)
    assert implicit_loss(W, r, alpha, lam) < 0.9 * losses[0]


def test_shapes_are_checked() -> None:
    r = data()
    with pytest.raises(ValueError, match="V must have shape"):
        implicit_round(np.zeros((3, 4)), r, 1.0, 0.1, 0.1)
    with pytest.raises(ValueError, match="participating_users_mask"):
        implicit_round(np.zeros((r.n_items, 4)), r, 1.0, 0.1, 0.1, participating_users_mask=np.ones(3, dtype=bool))
    with pytest.raises(ValueError):
        item_gradient(np.zeros((5, 2)), np.zeros(3), np.array([0]), np.array([1.0]))


def test_confidence_of_float32_values_is_computed_in_float64() -> None:
    values = np.array([0.1, 0.7], dtype=np.float32)
    got = confidence(values, 0.3)
    assert got.dtype == np.float64
    assert got.tolist() == [1.0 + 0.3 * float(v) for v in values]


def test_user_factors_of_a_two_item_example_written_out() -> None:
    # M = 3 items, F = 1: V = (1, 2, 3), the user holds items 0 and 2 with c = 2 and 3.
    # V^T C V = 2*1 + 1*4 + 3*9 = 33, V^T C p = 2*1 + 3*3 = 11, so x = 11 / (33 + lam).
    V = np.array([[1.0], [2.0], [3.0]])
    assert user_factors(V, np.array([0, 2]), np.array([2.0, 3.0]), 0.5).tolist() == [11.0 / 33.5]


def test_user_factors_uses_the_gram_it_is_given() -> None:
    # A user that shares a precomputed V^T V does not recompute it: the system is gram + V_J^T (C_J - 1) V_J + lam.
    V = np.array([[1.0], [2.0], [3.0]])
    gram = np.array([[10.0]])
    x = user_factors(V, np.array([0, 2]), np.array([2.0, 3.0]), 0.5, gram=gram)
    assert x.tolist() == [11.0 / (10.0 + 1.0 + 2.0 * 9.0 + 0.5)]


def test_a_user_without_items_given_as_empty_lists() -> None:
    _, V, _, _ = setup()
    assert np.array_equal(user_factors(V, [], [], 0.1), np.zeros(4))
    x = np.array([0.5, -1.0, 0.25, 2.0])
    # No interactions: every item gets 2 (x . v_i) x.
    np.testing.assert_allclose(item_gradient(V, x, [], []), 2.0 * np.outer(V @ x, x), atol=1e-15)


def test_extended_precision_inputs_are_computed_in_float64() -> None:
    _, V, items, conf = setup()
    x = np.array([0.5, -1.0, 0.25, 2.0])
    wide = np.longdouble
    expected_x = user_factors(V, items, conf, 0.1)
    got_x = user_factors(V.astype(wide), items, conf.astype(wide), 0.1)
    assert got_x.dtype == np.float64
    np.testing.assert_allclose(got_x, expected_x, rtol=1e-12)
    V_wide, x_wide, conf_wide = V.astype(wide) / 3, x.astype(wide) / 3, conf.astype(wide) / 3
    gradient = item_gradient(V_wide, x_wide, items, conf_wide)
    assert gradient.dtype == np.float64
    np.testing.assert_array_equal(
        gradient,
        item_gradient(V_wide.astype(np.float64), x_wide.astype(np.float64), items, conf_wide.astype(np.float64)),
    )


def test_user_factors_refuses_mismatched_shapes_naming_them() -> None:
    _, V, _, _ = setup()
    needs = "user_factors needs V[M, F], items[m], conf[m]; got "
    with pytest.raises(ValueError, match=f"^{re.escape(needs + '(12, 4), (2,), (1,)')}$"):
        user_factors(V, np.array([1, 2]), np.array([2.0]), 0.1)
    with pytest.raises(ValueError, match=f"^{re.escape(needs + '(12,), (1,), (1,)')}$"):
        user_factors(V[:, 0], np.array([1]), np.array([2.0]), 0.1)


@pytest.mark.parametrize(
    ("V", "x", "items", "conf", "shapes"),
    [
        (np.zeros((5, 2)), np.zeros(2), np.array([0, 1]), np.array([1.0]), "(5, 2), (2,), (2,), (1,)"),
        (np.zeros((5, 2)), np.zeros(3), np.array([0]), np.array([1.0]), "(5, 2), (3,), (1,), (1,)"),
        (np.zeros(5), np.zeros(2), np.array([0]), np.array([1.0]), "(5,), (2,), (1,), (1,)"),
    ],
)
def test_item_gradient_refuses_mismatched_shapes_naming_them(V, x, items, conf, shapes) -> None:
    message = f"item_gradient needs V[M, F], x_u[F], items[m], conf[m]; got {shapes}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        item_gradient(V, x, items, conf)


def test_server_step_from_a_single_user_and_the_refusal_of_none() -> None:
    V = np.ones((3, 2))
    one = server_step(V, np.full((3, 2), 4.0), 1, ImplicitHyper(d=2, gamma=0.1, lam=0.5))
    assert np.allclose(one, 1 - 0.1 * (4.0 + 1.0))
    with pytest.raises(ValueError, match=r"^server_step needs at least one user's gradient, got n_users=0$"):
        server_step(V, V, 0, ImplicitHyper(d=2))


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"gamma": 0.0}, "protocol.gamma"),
        ({"lam": -1.0}, "protocol.lam"),
        ({"alpha": -1.0}, "protocol.alpha"),
        ({"normalize": 1}, "protocol.normalize"),
    ],
)
def test_hyper_refusals_name_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ImplicitHyper(**kwargs)
    assert caught.value.key_path == key
    assert str(caught.value).startswith(f"{key}: ")


def test_hyper_accepts_zero_regularization_and_zero_alpha() -> None:
    hyper = ImplicitHyper(lam=0.0, alpha=0.0)
    assert (hyper.lam, hyper.alpha) == (0.0, 0.0)


def test_round_refuses_zero_factors_and_a_negative_alpha_as_config_errors() -> None:
    r = data()
    with pytest.raises(ConfigError) as caught:
        implicit_round(np.zeros((r.n_items, 0)), r, 1.0, 0.1, 0.1)
    assert caught.value.key_path == "protocol.d"
    with pytest.raises(ConfigError) as caught:
        implicit_round(np.full((r.n_items, 2), 0.1), r, -1.0, 0.1, 0.1)
    assert caught.value.key_path == "protocol.alpha"


def test_round_averages_the_gradients_by_default() -> None:
    r = data()
    V = unit_rows(np.random.default_rng(6), r.n_items, 3) * 0.5
    expected = loop_round(V, r, 2.0, 0.05, 0.1, True, np.arange(r.n_users))
    assert np.max(np.abs(implicit_round(V, r, 2.0, 0.05, 0.1) - expected)) < 1e-10


def test_the_last_user_and_the_last_item_without_interactions() -> None:
    r = Ratings(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([1.0, 2.0, 1.0]), 3, 3, (0.0, 2.0))
    V = np.array([[0.5, 0.1], [-0.2, 0.4], [0.3, 0.3]])
    X = all_user_factors(V, r, 1.0, 0.1)
    assert X.shape == (3, 2) and np.array_equal(X[2], np.zeros(2))
    expected = loop_round(V, r, 1.0, 0.1, 0.05, True, np.arange(3))
    assert np.max(np.abs(implicit_round(V, r, 1.0, 0.1, 0.05) - expected)) < 1e-12


def test_all_user_factors_takes_user_ids_as_any_sequence_of_whole_numbers() -> None:
    # An empty list, or ids that arrive as floats (e.g. read from a float column).
    r = data()
    V = unit_rows(np.random.default_rng(4), r.n_items, 4)
    assert all_user_factors(V, r, 1.0, 0.1, users=[]).shape == (0, 4)
    everyone = all_user_factors(V, r, 1.0, 0.1)
    np.testing.assert_array_equal(all_user_factors(V, r, 1.0, 0.1, users=np.array([3.0, 1.0])), everyone[[3, 1]])


@pytest.mark.parametrize("dtype", [np.float32, np.longdouble])
def test_item_factors_of_another_float_type_are_computed_in_float64(dtype) -> None:
    r = data()
    V = (unit_rows(np.random.default_rng(7), r.n_items, 4) * 0.5).astype(dtype)
    exact = V.astype(np.float64)
    X = all_user_factors(V, r, 2.0, 0.05)
    assert X.dtype == np.float64
    np.testing.assert_allclose(X, all_user_factors(exact, r, 2.0, 0.05), rtol=1e-12, atol=1e-14)
    V_next = implicit_round(V, r, 2.0, 0.05, 0.1)
    assert V_next.dtype == np.float64
    np.testing.assert_allclose(V_next, implicit_round(exact, r, 2.0, 0.05, 0.1), rtol=1e-14, atol=1e-15)
    assert implicit_loss(V, r, 2.0, 0.05) == pytest.approx(implicit_loss(exact, r, 2.0, 0.05), rel=1e-12)
