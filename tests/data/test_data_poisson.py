"""Ribero et al.'s synthetic Poisson counts: entries spread over users exactly as documented, items
distinct and uniform, counts capped at 10, log-rates of unit variance whatever the rank (statistical,
fixed seeds, tolerances stated), the authors' unit-norm factors (``factors = "unit-norm"``), and size
errors naming their ``data.*`` key."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from fedrecsim.data.poisson import COUNT_CAP, FACTORS, poisson_factors, synthetic_poisson
from fedrecsim.errors import ConfigError


def test_entries_are_spread_over_users_as_documented() -> None:
    data = synthetic_poisson(np.random.default_rng(0), 5, 9, 23, rank=3)
    # 23 // 5 = 4 each, one more for the first 23 % 5 = 3 users.
    np.testing.assert_array_equal(data.user_counts(), [5, 5, 5, 4, 4])
    assert len(data) == 23 and (data.n_users, data.n_items) == (5, 9)
    assert data.rating_range == (0.0, COUNT_CAP) == (0.0, 10.0)
    for user in range(5):
        items = data.user_items(user)
        assert np.unique(items).size == items.size and items.min() >= 0 and items.max() < 9


def test_fewer_entries_than_users_gives_the_first_users_one_each() -> None:
    data = synthetic_poisson(np.random.default_rng(1), 6, 4, 4, rank=2)
    np.testing.assert_array_equal(data.user_counts(), [1, 1, 1, 1, 0, 0])


def test_users_times_items_entries_is_the_full_matrix() -> None:
    data = synthetic_poisson(np.random.default_rng(2), 7, 6, 42, rank=2)
    for user in range(7):
        np.testing.assert_array_equal(data.user_items(user), np.arange(6))


def test_values_are_whole_counts_capped_at_ten_and_observed_zeros_are_kept() -> None:
    data = synthetic_poisson(np.random.default_rng(3), 200, 100, 20_000, rank=10)
    values = data.values
    assert values.dtype == np.float64
    np.testing.assert_array_equal(values, np.round(values))
    assert values.min() == 0.0 and values.max() == COUNT_CAP
    assert np.count_nonzero(values == 0) > 0.3 * values.size  # P(count = 0) is about 0.38


def test_items_are_drawn_uniformly() -> None:
    n_items = 20
    data = synthetic_poisson(np.random.default_rng(4), 4000, n_items, 8000, rank=2)
    # Two distinct items per user; 8000 draws over 20 items: chi-square against uniform.
    assert np.all(data.user_counts() == 2)
    observed = np.bincount(data.items, minlength=n_items)
    assert stats.chisquare(observed).pvalue > 0.001
    # Pairs are independent between users: all 190 item pairs occur, none more than chance allows.
    pairs = np.bincount(data.items[::2] * n_items + data.items[1::2], minlength=n_items**2)
    assert np.count_nonzero(pairs) == n_items * (n_items - 1) // 2


def _reference(rank: int, draws: int, seed: int) -> tuple[float, float]:
    """The documented model with fresh u, v per cell: mean and P(= cap) of min(Poisson(e^{u.v}), 10),
    u, v with i.i.d. N(0, rank^(-1/2)) entries (so u . v has variance 1)."""
    rng = np.random.default_rng(seed)
    scale = rank**-0.25
    z = (rng.normal(0, scale, (draws, rank)) * rng.normal(0, scale, (draws, rank))).sum(axis=1)
    assert z.var() == pytest.approx(1.0, abs=0.02)  # the model's own claim: unit variance
    counts = np.minimum(rng.poisson(np.exp(z)), COUNT_CAP)
    return float(counts.mean()), float((counts == COUNT_CAP).mean())


@pytest.mark.parametrize("rank", [4, 10, 40])
def test_log_rates_have_unit_variance_whatever_the_rank(rank) -> None:
    """The mean count is E[e^z] (about e^(1/2) = 1.65, less by the cap) only if Var z = 1: a variance of
    1/rank would give about 1.05, a variance of rank would put most counts at 0 or 10.

    Tolerance: 300 x 300 cells share 600 random vectors, so their mean varies by about 2 % between
    seeds (measured over seeds 0-3 at ranks 10 and 25); we allow 6 %. P(count = cap) is about 1.7 %
    and is allowed a factor 1.5 either way.
    """
    data = synthetic_poisson(np.random.default_rng(5), 300, 300, 90_000, rank=rank)
    mean, capped = _reference(rank, 100_000, 6)
    assert data.values.mean() == pytest.approx(mean, rel=0.06)
    assert capped / 1.5 < np.mean(data.values == COUNT_CAP) < capped * 1.5
    assert 0.01 < np.mean(data.values == COUNT_CAP) < 0.03


def test_users_and_items_have_their_own_rates() -> None:
    """u_i . v_j varies by user and by item: per-user mean counts spread far more than Poisson noise."""
    data = synthetic_poisson(np.random.default_rng(7), 100, 400, 40_000, rank=10)
    per_user = np.bincount(data.users, weights=data.values) / 400
    per_item = np.bincount(data.items, weights=data.values) / 100
    # Pure Poisson noise around one rate ~1.6 would give sd ~ sqrt(1.6 / 400) = 0.06 per user.
    assert per_user.std() > 0.15 and per_item.std() > 0.15


def test_the_same_generator_state_gives_the_same_data() -> None:
    first = synthetic_poisson(np.random.default_rng(8), 10, 12, 50, rank=3)
    second = synthetic_poisson(np.random.default_rng(8), 10, 12, 50, rank=3)
    for name in ("users", "items", "values"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


@pytest.mark.parametrize(
    ("args", "key", "shown"),
    [
        ((0, 5, 3, 2), "data.users", "0"),
        ((5, 0, 3, 2), "data.items", "0"),
        ((5, 5, 0, 2), "data.ratings", "0"),
        ((5, 5, 3, 0), "data.rank", "0"),
        ((5.0, 5, 3, 2), "data.users", "5.0"),
        ((5, True, 3, 2), "data.items", "True"),
        ((5, 5, 3, "2"), "data.rank", "'2'"),
        ((5, 5, -1, 2), "data.ratings", "-1"),
    ],
)
def test_sizes_out_of_range_name_their_key(args, key, shown) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}: must be an integer >= 1, got {re.escape(shown)}$"):
        synthetic_poisson(np.random.default_rng(0), *args[:3], rank=args[3])


def test_more_entries_than_cells_is_refused_naming_data_ratings() -> None:
    with pytest.raises(ConfigError, match=r"^data\.ratings: 13 exceeds users \* items = 12$"):
        synthetic_poisson(np.random.default_rng(0), 3, 4, 13)
    data = synthetic_poisson(np.random.default_rng(0), np.int64(3), np.int32(4), 12, rank=np.int64(1))
    assert len(data) == 12


def test_one_of_everything_is_accepted() -> None:
    data = synthetic_poisson(np.random.default_rng(9), 1, 1, 1, rank=1)
    assert len(data) == 1 and data.users.tolist() == [0] and data.items.tolist() == [0]


def test_the_default_rank_is_ten() -> None:
    np.testing.assert_array_equal(
        synthetic_poisson(np.random.default_rng(10), 8, 8, 30).values,
        synthetic_poisson(np.random.default_rng(10), 8, 8, 30, rank=10).values,
    )


def test_unit_norm_factors_are_gaussian_rows_of_length_one() -> None:
    U, V = poisson_factors(np.random.default_rng(11), 300, 40, 7, "unit-norm")
    assert U.shape == (300, 7) and V.shape == (40, 7)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(V, axis=1), 1.0, rtol=1e-12)
    # A Gaussian direction: every coordinate of a unit row has mean 0 and variance 1/rank (here 1/7).
    # 300 rows: the variance's standard error is about 0.14 * sqrt(2 / 300) ~ 0.012; we allow 0.04.
    assert np.abs(U.mean(axis=0)).max() < 0.1
    np.testing.assert_allclose(U.var(axis=0), 1 / 7, atol=0.04)
    scaled_U, _ = poisson_factors(np.random.default_rng(11), 300, 40, 7, "scaled")
    assert np.linalg.norm(scaled_U, axis=1).std() > 0.1  # the default's rows are not normalized


def _unit_norm_reference(rank: int, draws: int, seed: int) -> float:
    """The notebooks' model with fresh unit vectors per cell: the mean of min(Poisson(e^{u.v}), 10)."""
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal((draws, rank)), rng.standard_normal((draws, rank))
    z = (u * v).sum(axis=1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    return float(np.minimum(rng.poisson(np.exp(z)), COUNT_CAP).mean())


def test_unit_norm_counts_are_near_poisson_one_at_the_notebooks_rank() -> None:
    """At rank 100 the log-rate u . v is a cosine of variance 1/100: the mean count is E[e^z] ~ e^0.005
    (the scaled default's is about 1.65) and no count comes near the cap.

    Tolerance: 80,000 counts of variance ~1 give a mean with standard error ~0.004, and the 600 shared
    vectors add about as much; we allow 0.03.
    """
    data = synthetic_poisson(np.random.default_rng(12), 400, 200, 80_000, rank=100, factors="unit-norm")
    assert (data.n_users, data.n_items, len(data)) == (400, 200, 80_000)
    assert data.rating_range == (0.0, COUNT_CAP)
    np.testing.assert_array_equal(data.values, np.round(data.values))
    assert data.values.mean() == pytest.approx(_unit_norm_reference(100, 100_000, 13), abs=0.03)
    assert data.values.mean() == pytest.approx(np.exp(0.005), abs=0.03)
    assert data.values.max() < COUNT_CAP


def test_unit_norm_log_rates_stay_within_one() -> None:
    """Rank 1: u . v = +-1 exactly, so every rate is e or 1/e -- the mean count is (e + 1/e) / 2 ~ 1.54.

    Tolerance: 20,000 counts of variance ~1.5, standard error ~0.01 (the signs are shared by 200 + 100
    vectors, which adds ~0.1 at most); we allow 0.15."""
    data = synthetic_poisson(np.random.default_rng(14), 200, 100, 20_000, rank=1, factors="unit-norm")
    assert data.values.mean() == pytest.approx((np.e + 1 / np.e) / 2, abs=0.15)


@pytest.mark.parametrize("factors", FACTORS)
def test_a_seed_gives_its_data_and_another_seed_other_data(factors: str) -> None:
    first = synthetic_poisson(np.random.default_rng(15), 30, 20, 300, rank=4, factors=factors)
    again = synthetic_poisson(np.random.default_rng(15), 30, 20, 300, rank=4, factors=factors)
    other = synthetic_poisson(np.random.default_rng(16), 30, 20, 300, rank=4, factors=factors)
    for name in ("users", "items", "values"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.values, other.values) or not np.array_equal(first.items, other.items)


def test_the_default_factors_are_scaled() -> None:
    np.testing.assert_array_equal(
        synthetic_poisson(np.random.default_rng(17), 8, 8, 30, rank=3).values,
        synthetic_poisson(np.random.default_rng(17), 8, 8, 30, rank=3, factors="scaled").values,
    )


def test_an_unknown_factors_value_names_data_factors() -> None:
    with pytest.raises(ConfigError, match=r"^data\.factors: got 'unit'; allowed values: 'scaled', 'unit-norm'$"):
        synthetic_poisson(np.random.default_rng(0), 3, 4, 5, factors="unit")
