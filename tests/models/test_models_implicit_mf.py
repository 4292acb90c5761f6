"""Implicit MF (FCF, Minto et al. eqs. (4), (5)): closed form, gradient convention, vectorized round."""

from __future__ import annotations

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
