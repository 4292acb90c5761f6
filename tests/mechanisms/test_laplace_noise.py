"""Hua et al.'s noise: Theorem 1 vectors, Lemma 1 Laplace, and Theorem 2 pieces that sum to Laplace.

Distribution tests use scipy.stats.kstest on 20 000 draws from fixed seeds and reject at p < 1e-3.
Each also has a counterpart showing the same test rejects a wrong construction (p < 1e-6), so a pass
means something.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import (
    exponential_h,
    laplace_noise,
    laplace_piece,
    laplace_scale,
    theorem1_noise,
)

DRAWS = 20_000
REJECT = 1e-3


def test_laplace_scale_is_lemma_1() -> None:
    assert laplace_scale(16, 0.5, 4.0) == pytest.approx(2 * 4.0 * 4 / 0.5)
    assert laplace_scale(1, 2.0, 1.0) == 1.0


@pytest.mark.parametrize("k", [1, 2, 5, 50])
def test_k_pieces_sharing_h_sum_to_laplace(k: int) -> None:
    rng = np.random.default_rng(1000 + k)
    scale = 1.7
    h = exponential_h(rng, DRAWS)
    pieces = laplace_piece(rng, h, k, scale, n_pieces=k)
    assert pieces.shape == (k, DRAWS)
    total = pieces.sum(axis=0)
    assert stats.kstest(total, "laplace", args=(0.0, scale)).pvalue > REJECT


def test_pieces_with_independent_h_do_not_sum_to_laplace() -> None:
    """The shared H is essential: with a fresh H per piece the sum tends to a normal, not a Laplace."""
    rng = np.random.default_rng(77)
    k, scale = 50, 1.0
    h = exponential_h(rng, (k, DRAWS))
    total = laplace_piece(rng, h, k, scale).sum(axis=0)
    assert stats.kstest(total, "laplace", args=(0.0, scale)).pvalue < 1e-6


def test_pieces_broadcast_over_a_matrix_of_h() -> None:
    rng = np.random.default_rng(3)
    h = exponential_h(rng, (DRAWS // 10, 10))
    pieces = laplace_piece(rng, h, 4, 2.0, n_pieces=4)
    assert pieces.shape == (4, DRAWS // 10, 10)
    assert stats.kstest(pieces.sum(axis=0).ravel(), "laplace", args=(0.0, 2.0)).pvalue > REJECT
    # A zero H forces the whole element's noise to zero: every piece is scale * sqrt(0) * C.
    assert not laplace_piece(rng, np.zeros(3), 4, 2.0).any()


def test_exponential_h_is_exp_1() -> None:
    h = exponential_h(np.random.default_rng(5), DRAWS)
    assert stats.kstest(h, "expon").pvalue > REJECT


@pytest.mark.parametrize("d", [1, 2, 3, 10])
def test_theorem1_norm_is_gamma_and_direction_uniform(d: int) -> None:
    epsilon, delta = 0.8, 4.0
    noise = theorem1_noise(np.random.default_rng(2000 + d), DRAWS, d, epsilon, delta)
    assert noise.shape == (DRAWS, d)
    norms = np.linalg.norm(noise, axis=1)
    assert stats.kstest(norms, "gamma", args=(d, 0.0, 2 * delta / epsilon)).pvalue > REJECT
    directions = noise / norms[:, np.newaxis]
    # Each coordinate of a uniform unit vector has mean 0 and variance 1/d, so the sample mean has
    # standard deviation 1/sqrt(DRAWS * d); 5 of those bounds it with overwhelming probability.
    assert np.abs(directions.mean(axis=0)).max() < 5 / math.sqrt(DRAWS * d)
    if d >= 2:
        # On the sphere S^(d-1), (u_1 + 1)/2 ~ Beta((d-1)/2, (d-1)/2).
        half = (d - 1) / 2
        first = (directions[:, 0] + 1) / 2
        assert stats.kstest(first, "beta", args=(half, half)).pvalue > REJECT


def test_theorem1_is_not_iid_laplace() -> None:
    """The norm test separates Theorem 1 noise from Lemma 1 noise of the same ε, Δ, d."""
    d, epsilon, delta = 5, 1.0, 2.0
    lemma1 = laplace_noise(np.random.default_rng(9), DRAWS, d, epsilon, delta)
    norms = np.linalg.norm(lemma1, axis=1)
    assert stats.kstest(norms, "gamma", args=(d, 0.0, 2 * delta / epsilon)).pvalue < 1e-6


def test_laplace_noise_is_iid_laplace_of_lemma_1() -> None:
    d, epsilon, delta = 8, 0.5, 4.0
    noise = laplace_noise(np.random.default_rng(11), DRAWS // d, d, epsilon, delta)
    assert noise.shape == (DRAWS // d, d)
    scale = 2 * delta * math.sqrt(d) / epsilon
    assert stats.kstest(noise.ravel(), "laplace", args=(0.0, scale)).pvalue > REJECT


def test_draws_are_reproducible_from_the_seed() -> None:
    for draw in (
        lambda rng: theorem1_noise(rng, 4, 3, 1.0, 4.0),
        lambda rng: laplace_noise(rng, 4, 3, 1.0, 4.0),
        lambda rng: laplace_piece(rng, exponential_h(rng, 3), 2, 1.0, n_pieces=2),
    ):
        assert np.array_equal(draw(np.random.default_rng(42)), draw(np.random.default_rng(42)))


def test_zero_vectors_are_allowed() -> None:
    assert theorem1_noise(np.random.default_rng(0), 0, 3, 1.0, 1.0).shape == (0, 3)
    assert laplace_noise(np.random.default_rng(0), 0, 3, 1.0, 1.0).shape == (0, 3)


@pytest.mark.parametrize(
    ("call", "key"),
    [
        (lambda rng: theorem1_noise(rng, 3, 2, 0.0, 1.0), "theorem1_noise(epsilon)"),
        (lambda rng: theorem1_noise(rng, 3, 2, -1.0, 1.0), "theorem1_noise(epsilon)"),
        (lambda rng: theorem1_noise(rng, 3, 2, math.nan, 1.0), "theorem1_noise(epsilon)"),
        (lambda rng: theorem1_noise(rng, 3, 2, True, 1.0), "theorem1_noise(epsilon)"),
        (lambda rng: theorem1_noise(rng, 3, 2, 1.0, 0.0), "theorem1_noise(delta)"),
        (lambda rng: theorem1_noise(rng, 3, 0, 1.0, 1.0), "theorem1_noise(d)"),
        (lambda rng: theorem1_noise(rng, -1, 2, 1.0, 1.0), "theorem1_noise(n)"),
        (lambda rng: theorem1_noise(rng, 2.0, 2, 1.0, 1.0), "theorem1_noise(n)"),
        (lambda rng: laplace_noise(rng, 3, 2, math.inf, 1.0), "laplace_scale(epsilon)"),
        (lambda rng: laplace_noise(rng, 3, 2, 1.0, -4.0), "laplace_scale(delta)"),
        (lambda rng: laplace_noise(rng, 3, 0, 1.0, 4.0), "laplace_noise(d)"),
        (lambda rng: laplace_piece(rng, [1.0], 0, 1.0), "laplace_piece(k)"),
        (lambda rng: laplace_piece(rng, [1.0], 2.5, 1.0), "laplace_piece(k)"),
        (lambda rng: laplace_piece(rng, [1.0, -0.5], 2, 1.0), "laplace_piece(h)"),
        (lambda rng: laplace_piece(rng, [math.nan], 2, 1.0), "laplace_piece(h)"),
        (lambda rng: laplace_piece(rng, [1.0], 2, 0.0), "laplace_piece(scale)"),
        (lambda rng: laplace_piece(rng, [1.0], 2, 1.0, n_pieces=-1), "laplace_piece(n_pieces)"),
        (lambda rng: exponential_h(None, 3), "exponential_h(rng)"),
    ],
)
def test_bad_parameters_are_config_errors(call, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        call(np.random.default_rng(0))
    assert info.value.key_path == key


def test_laplace_noise_is_centred_at_zero() -> None:
    # A small scale (b = 2 * 1 * 1 / 100 = 0.02), where a shifted location stands out at once.
    noise = laplace_noise(np.random.default_rng(12), DRAWS, 1, 100.0, 1.0)
    assert stats.kstest(noise.ravel(), "laplace", args=(0.0, 0.02)).pvalue > REJECT
    assert stats.kstest(noise.ravel() + 0.01, "laplace", args=(0.0, 0.02)).pvalue < 1e-6
