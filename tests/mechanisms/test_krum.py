"""Krum and Multi-Krum (Blanchard et al. 2017): scores by definition, the choice, and what they resist."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.krum import krum_scores, krum_select, pairwise_squared_distances


def brute_distances(vectors: np.ndarray) -> np.ndarray:
    return np.array([[float(np.sum((a - b) ** 2)) for b in vectors] for a in vectors])


def brute_scores(vectors: np.ndarray, f: int) -> np.ndarray:
    """Blanchard et al.'s definition, literally: the n - f - 2 closest others, summed."""
    n = len(vectors)
    distances = brute_distances(vectors)
    return np.array([sorted(distances[i, j] for j in range(n) if j != i)[: n - f - 2] for i in range(n)]).sum(axis=1)


def test_distances_and_scores_are_the_definitions() -> None:
    vectors = np.random.default_rng(0).standard_normal((9, 6))
    assert np.allclose(pairwise_squared_distances(vectors), brute_distances(vectors), rtol=0, atol=1e-12)
    for f in range(0, 7):
        assert np.allclose(krum_scores(pairwise_squared_distances(vectors), f), brute_scores(vectors, f), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(3, 9), f=st.integers(0, 6), m=st.integers(1, 9), seed=st.integers(0, 2**32 - 1))
def test_the_chosen_vectors_have_the_least_scores(n: int, f: int, m: int, seed: int) -> None:
    if n - f - 2 < 1 or m > n - f:
        return
    vectors = np.random.default_rng(seed).standard_normal((n, 4))
    scores = brute_scores(vectors, f)
    chosen = krum_select(pairwise_squared_distances(vectors), f, m)
    assert chosen.tolist() == sorted(chosen.tolist()) and len(chosen) == m
    others = np.setdiff1d(np.arange(n), chosen)
    assert not others.size or scores[chosen].max() <= scores[others].min() + 1e-9


def test_equal_scores_go_to_the_lower_index() -> None:
    # Four corners of a square: every score is equal.
    square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert krum_select(pairwise_squared_distances(square), 0).tolist() == [0]
    assert krum_select(pairwise_squared_distances(square), 0, 3).tolist() == [0, 1, 2]


def test_krum_ignores_f_outliers_that_would_drag_the_mean_away() -> None:
    """Ten honest gradients near g, two attackers at -50 g: the mean flips sign, Krum's choice does not."""
    rng = np.random.default_rng(1)
    g = rng.standard_normal(50)
    honest = g + 0.3 * rng.standard_normal((10, 50))
    attackers = np.repeat(-50.0 * g[None, :], 2, axis=0)
    vectors = np.concatenate([honest[:4], attackers, honest[4:]])
    assert vectors.mean(axis=0) @ g < 0
    distances = pairwise_squared_distances(vectors)
    assert krum_select(distances, 2).item() not in (4, 5)
    chosen = krum_select(distances, 2, m=8)
    assert not set(chosen.tolist()) & {4, 5}
    assert vectors[chosen].mean(axis=0) @ g > 0.8 * (g @ g)


def test_colluders_sending_one_value_are_not_chosen_while_they_are_few() -> None:
    """f identical vectors far away: their mutual distance is 0, but n - f - 2 neighbours reach the honest."""
    rng = np.random.default_rng(2)
    honest = rng.standard_normal((12, 30))
    colluders = np.full((3, 30), 5.0)
    vectors = np.concatenate([honest, colluders])
    chosen = krum_select(pairwise_squared_distances(vectors), 3, m=12)
    assert set(chosen.tolist()) == set(range(12))


def test_blocks_of_coordinates_and_a_list_of_vectors_give_the_same_distances() -> None:
    vectors = np.random.default_rng(4).standard_normal((6, 1000))
    whole = pairwise_squared_distances(vectors)
    assert np.allclose(pairwise_squared_distances(vectors, block=7), whole, rtol=1e-12, atol=1e-9)
    assert np.array_equal(pairwise_squared_distances(list(vectors)), whole)


def test_float32_distances_of_equal_vectors_are_clamped_at_zero() -> None:
    vector = np.random.default_rng(3).standard_normal(100_000).astype(np.float32) * 1e3
    distances = pairwise_squared_distances(np.stack([vector, vector, -vector]))
    assert distances.dtype == np.float64 and distances.min() == 0.0 and distances[0, 1] >= 0.0
    assert distances[0, 2] == pytest.approx(4 * float(vector.astype(np.float64) @ vector), rel=1e-4)


@pytest.mark.parametrize(
    "call, where",
    [
        (lambda: krum_scores(np.zeros((4, 4)), 2), "krum_scores(f)"),
        (lambda: krum_scores(np.zeros((4, 3)), 0), "krum_scores(distances)"),
        (lambda: krum_scores(-np.ones((4, 4)), 0), "krum_scores(distances)"),
        (lambda: krum_scores(np.zeros((4, 4)), -1), "krum_scores(f)"),
        (lambda: krum_select(np.zeros((5, 5)), 1, 5), "krum_select(m)"),
        (lambda: krum_select(np.zeros((5, 5)), 1, 0), "krum_select(m)"),
        (lambda: pairwise_squared_distances(np.array([[np.nan, 0.0]])), "pairwise_squared_distances(vectors)"),
        (lambda: pairwise_squared_distances(np.zeros(3)), "pairwise_squared_distances(vectors)"),
        (lambda: pairwise_squared_distances([np.zeros(3), np.zeros(4)]), "pairwise_squared_distances(vectors)"),
        (lambda: pairwise_squared_distances([]), "pairwise_squared_distances(vectors)"),
        (lambda: pairwise_squared_distances(np.full((2, 3), 1e30, np.float32)), "pairwise_squared_distances(vectors)"),
        (lambda: pairwise_squared_distances(np.zeros((2, 3)), block=0), "pairwise_squared_distances(block)"),
    ],
)
def test_impossible_arguments_are_config_errors_naming_the_argument(call, where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        call()
    assert caught.value.key_path == where


def test_every_subset_of_three_honest_and_one_attacker_keeps_the_attacker_out() -> None:
    """Exhaustively over the positions the attacker can take among four vectors with f = 1 (n - f - 2 = 1)."""
    honest = np.array([[1.0, 0.0], [1.1, 0.1], [0.9, -0.1]])
    attacker = np.array([[-30.0, 40.0]])
    for position in range(4):
        vectors = np.insert(honest, position, attacker, axis=0)
        for m in (1, 2, 3):
            chosen = krum_select(pairwise_squared_distances(vectors), 1, m)
            assert position not in chosen.tolist()
