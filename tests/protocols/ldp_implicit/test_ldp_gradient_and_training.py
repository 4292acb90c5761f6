"""The user's sampled gradient entries and the server's update schedule (steps per epoch, MF-NP)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrecsim.data import synthetic_implicit
from fedrecsim.mechanisms import estimate_mean_gradient, ldp_reports, ldp_reports_lazy
from fedrecsim.models.implicit_mf import ImplicitHyper, item_gradient, server_step, user_factors
from fedrecsim.protocols.ldp_implicit.gradient import gradient_entries
from fedrecsim.protocols.ldp_implicit.training import apply_steps, exact_mean_gradient, mf_np_trajectory


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_items=st.integers(1, 40), d=st.integers(1, 6), owned=st.integers(0, 40))
def test_sampled_entries_are_the_entries_of_item_gradient(seed: int, n_items: int, d: int, owned: int) -> None:
    rng = np.random.default_rng(seed)
    V = rng.normal(scale=0.3, size=(n_items, d))
    items = np.sort(rng.choice(n_items, size=min(owned, n_items), replace=False)).astype(np.int64)
    conf = 1.0 + rng.integers(1, 4, size=items.size).astype(np.float64)
    x = user_factors(V, items, conf, 1e-6) if items.size else rng.normal(size=d)
    dense = item_gradient(V, x, items, conf)
    sampled_items = rng.integers(0, n_items, size=(1, 50))
    factors = rng.integers(0, d, size=(1, 50))
    got = gradient_entries(V, x, items, conf)(sampled_items, factors)
    np.testing.assert_array_equal(got, dense[sampled_items, factors])


def test_lazy_reports_equal_the_dense_mechanism_for_the_same_generator_state() -> None:
    rng = np.random.default_rng(3)
    V = rng.normal(scale=0.1, size=(50, 5))
    items = np.array([2, 7, 31], dtype=np.int64)
    conf = np.full(3, 2.0)
    x = user_factors(V, items, conf, 1e-6)
    dense = ldp_reports(np.random.default_rng(11), item_gradient(V, x, items, conf), 2.5, 100)
    lazy = ldp_reports_lazy(np.random.default_rng(11), gradient_entries(V, x, items, conf), 1, 50, 5, 2.5, 100)
    np.testing.assert_array_equal(lazy[0][0], dense[0])
    np.testing.assert_array_equal(lazy[1][0], dense[1])


def test_steps_per_epoch_repeats_the_paper_update_with_one_estimate() -> None:
    """s steps of V <- V - gamma (g + 2 lam V) are a^s V - gamma g (1 - a^s) / (1 - a), a = 1 - 2 gamma lam."""
    rng = np.random.default_rng(0)
    V, g = rng.normal(size=(30, 5)), rng.normal(size=(30, 5))
    hyper = ImplicitHyper(d=5, gamma=1e-2, lam=0.3)
    a = 1.0 - 2.0 * hyper.gamma * hyper.lam
    for steps in (1, 7, 20):
        expected = a**steps * V - hyper.gamma * g * (1.0 - a**steps) / (1.0 - a)
        np.testing.assert_allclose(apply_steps(V, g, hyper, steps), expected, rtol=1e-12)
    # One step is Algorithm 2 verbatim.
    np.testing.assert_array_equal(apply_steps(V, g, hyper, 1), V - hyper.gamma * (g + 2.0 * hyper.lam * V))
    with pytest.raises(ValueError, match="steps"):
        apply_steps(V, g, hyper, 0)


def test_repeating_the_epoch_estimate_equals_a_step_per_share_of_the_shuffled_reports() -> None:
    """The documented equivalence: 20 steps, each with the estimate of 1/20 of the reports, equal 20 steps
    with the epoch's estimate up to O(gamma * lambda) (here with the paper's gamma and lambda)."""
    rng = np.random.default_rng(5)
    n_items, d, epsilon, steps = 40, 5, 2.5, 20
    indices = rng.integers(0, n_items * d, size=20 * 500)
    signs = rng.choice(np.array([-1, 1], dtype=np.int8), size=indices.size)
    hyper = ImplicitHyper(d=d, gamma=1e-3, lam=1e-6)
    V0 = rng.normal(scale=0.07, size=(n_items, d))
    whole = apply_steps(V0, estimate_mean_gradient(indices, signs, indices.size, n_items, d, epsilon), hyper, steps)
    V = V0
    for share_indices, share_signs in zip(np.split(indices, steps), np.split(signs, steps)):
        share = estimate_mean_gradient(share_indices, share_signs, share_indices.size, n_items, d, epsilon)
        V = server_step(V, share, 1, hyper)
    moved = np.abs(whole - V0).max()
    assert np.abs(V - whole).max() < 1e-6 * moved


def test_mf_np_uses_the_exact_mean_of_every_users_item_gradient() -> None:
    ratings = synthetic_implicit(np.random.default_rng(1), 12, 25, 90)
    hyper = ImplicitHyper(d=3, gamma=1e-3, lam=1e-4, alpha=2.0)
    V = np.random.default_rng(2).normal(scale=0.2, size=(25, 3))
    index = ratings.by_user()
    total = np.zeros_like(V)
    for user in range(ratings.n_users):
        items = index.items[index.indptr[user] : index.indptr[user + 1]]
        conf = 1.0 + hyper.alpha * index.values[index.indptr[user] : index.indptr[user + 1]]
        total += item_gradient(V, user_factors(V, items, conf, hyper.lam), items, conf)
    np.testing.assert_allclose(exact_mean_gradient(V, ratings, hyper), total / ratings.n_users, rtol=1e-9, atol=1e-12)
    trajectory = mf_np_trajectory(V, ratings, hyper, steps=4, epochs=2)
    first = apply_steps(V, total / ratings.n_users, hyper, 4)
    np.testing.assert_allclose(trajectory[0], first, rtol=1e-9, atol=1e-12)
    assert len(trajectory) == 2 and not np.allclose(trajectory[1], trajectory[0])
