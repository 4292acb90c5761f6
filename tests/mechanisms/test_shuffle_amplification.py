"""Amplification by shuffling (Feldman, McMillan, Talwar 2021, Theorem 3.1, the conservative form) and
basic composition."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import ShuffleBound, compose_approximate, compose_pure, shuffle_epsilon


def closed_form(epsilon0: float, n: int, delta: float) -> float:
    """Form (B) of the bound (the authors' companion code), written out literally as the reference."""
    a = 8 * math.sqrt(math.exp(epsilon0) * math.log(4 / delta)) / math.sqrt(n)
    c = 8 * math.exp(epsilon0) / n
    eps_prime = math.log(1 + a + c)
    return math.log(1 + (1 - math.exp(-epsilon0)) / (1 + math.exp(-epsilon0 - eps_prime)) * (a + c))


def quoted_form(epsilon0: float, n: int, delta: float) -> float:
    """Form (A), the theorem as usually quoted: the same terms times (e^eps0 - 1)/(e^eps0 + 1)."""
    e = math.exp(epsilon0)
    return math.log(1 + (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))


def smallest_applicable_n(epsilon0: float, delta: float) -> int:
    """The least n with epsilon0 <= log(n / (16 log(4/delta)))."""
    return math.ceil(16 * math.log(4 / delta) * math.exp(epsilon0))


def test_a_worked_number_of_the_conservative_form() -> None:
    """n = 10,000, eps0 = 2.5, delta = 3.3e-9, by hand:

        e^2.5 = 12.18249,  log(4 / 3.3e-9) = 20.91564,
        a = 8 sqrt(12.18249 x 20.91564) / 100 = 1.277008,  c = 8 x 12.18249 / 10,000 = 0.009746,
        eps' = log(1 + 1.286754) = 0.827133,
        factor = (1 - e^-2.5) / (1 + e^-(2.5 + 0.827133)) = 0.917915 / 1.035894 = 0.886107,
        eps = log(1 + 0.886107 x 1.286754) = log(2.140204) = 0.7609.

    The quoted form (A) multiplies by tanh(1.25) = 0.848284 instead and gives 0.7379: 0.023 less.
    The precondition: log(10,000 / (16 x 20.91564)) = 3.3973 >= 2.5.
    """
    bound = shuffle_epsilon(2.5, 10_000, 3.3e-9)
    assert bound.applicable and bound.delta == 3.3e-9
    assert bound.epsilon == pytest.approx(0.7609, abs=1e-4)
    assert quoted_form(2.5, 10_000, 3.3e-9) == pytest.approx(0.7379, abs=1e-4)
    assert "3.39725" in bound.condition and "16 log(4/delta)" in bound.condition


def test_the_bound_is_the_conservative_closed_form() -> None:
    bound = shuffle_epsilon(1.0, 10_000, 1e-6)
    assert bound.applicable
    assert bound.epsilon == pytest.approx(closed_form(1.0, 10_000, 1e-6), rel=1e-12)
    assert bound.delta == 1e-6
    assert bound.epsilon < 1.0


def test_more_users_give_more_privacy() -> None:
    epsilon0, delta = 2.0, 1e-8
    start = smallest_applicable_n(epsilon0, delta)
    bounds = [shuffle_epsilon(epsilon0, start * 2**i, delta) for i in range(12)]
    assert all(b.applicable for b in bounds)
    epsilons = [b.epsilon for b in bounds]
    assert all(later < earlier for earlier, later in zip(epsilons, epsilons[1:]))
    assert epsilons[0] < epsilon0
    # Deep in the regime the bound shrinks like 1/sqrt(n): 4x the users, about half the epsilon.
    assert epsilons[-1] / epsilons[-3] == pytest.approx(0.5, rel=0.02)


def test_the_condition_boundary() -> None:
    epsilon0, delta = 2.0, 1e-6
    n = smallest_applicable_n(epsilon0, delta)
    inside = shuffle_epsilon(epsilon0, n, delta)
    outside = shuffle_epsilon(epsilon0, n - 1, delta)
    assert inside.applicable and inside.epsilon < epsilon0 and inside.delta == delta
    assert "<=" in inside.condition and f"n = {n}" in inside.condition
    assert outside == ShuffleBound(epsilon0, 0.0, False, outside.condition)
    assert ">" in outside.condition and f"n = {n - 1}" in outside.condition


def test_no_amplification_falls_back_to_the_local_guarantee() -> None:
    """Near the boundary with a small epsilon0 the closed form exceeds epsilon0; (epsilon0, 0) is reported."""
    epsilon0, delta = 0.01, 0.5
    n = smallest_applicable_n(epsilon0, delta)
    assert closed_form(epsilon0, n, delta) > epsilon0
    bound = shuffle_epsilon(epsilon0, n, delta)
    assert bound.applicable
    assert (bound.epsilon, bound.delta) == (epsilon0, 0.0)
    assert "does not improve" in bound.condition


@given(
    st.floats(1e-3, 12.0),
    st.integers(1, 10**9),
    st.floats(1e-15, 0.9),
)
def test_the_reported_guarantee_never_exceeds_the_local_one(
    epsilon0: float, n: int, delta: float
) -> None:
    bound = shuffle_epsilon(epsilon0, n, delta)
    assert 0 < bound.epsilon <= epsilon0
    assert bound.delta in (0.0, delta)
    if bound.delta > 0:
        assert bound.applicable and bound.epsilon < epsilon0
        assert bound.epsilon == pytest.approx(closed_form(epsilon0, n, delta), rel=1e-9)
        # Never below the quoted form, so it holds under either reading of the theorem.
        assert bound.epsilon >= quoted_form(epsilon0, n, delta) * (1 - 1e-12)
    applicable = epsilon0 <= math.log(n / (16 * math.log(4 / delta)))
    assert bound.applicable == applicable
    # The stricter precondition implies the quoted one, log(n / (16 log(2/delta))).
    assert not applicable or epsilon0 <= math.log(n / (16 * math.log(2 / delta)))


def test_basic_composition() -> None:
    assert compose_pure(0.5, 4) == 2.0
    assert compose_pure(0.5, 0) == 0.0
    assert compose_approximate(0.25, 1e-6, 8) == (2.0, pytest.approx(8e-6))
    assert compose_approximate(0.1, 0.3, 5) == (pytest.approx(0.5), 1.0)


@pytest.mark.parametrize(
    ("call", "key"),
    [
        (lambda: shuffle_epsilon(0.0, 100, 1e-6), "shuffle_epsilon(epsilon0)"),
        (lambda: shuffle_epsilon(math.inf, 100, 1e-6), "shuffle_epsilon(epsilon0)"),
        (lambda: shuffle_epsilon(1.0, 0, 1e-6), "shuffle_epsilon(n)"),
        (lambda: shuffle_epsilon(1.0, 100.0, 1e-6), "shuffle_epsilon(n)"),
        (lambda: shuffle_epsilon(1.0, 100, 0.0), "shuffle_epsilon(delta)"),
        (lambda: shuffle_epsilon(1.0, 100, 1.0), "shuffle_epsilon(delta)"),
        (lambda: compose_pure(-0.1, 3), "compose_pure(epsilon)"),
        (lambda: compose_pure(0.1, -1), "compose_pure(times)"),
        (lambda: compose_approximate(0.1, 1.5, 2), "compose_approximate(delta)"),
        (lambda: compose_approximate(0.1, -0.5, 2), "compose_approximate(delta)"),
        (lambda: compose_approximate(0.1, 0.1, 2.0), "compose_approximate(times)"),
    ],
)
def test_bad_parameters_are_config_errors(call, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert info.value.key_path == key


def test_the_condition_holds_at_equality_and_reads_as_its_numbers() -> None:
    n, delta = 10_000, 1e-6
    threshold = math.log(n / (16.0 * math.log(4.0 / delta)))  # the very float the bound computes
    at_edge = shuffle_epsilon(threshold, n, delta)
    assert at_edge.applicable
    assert at_edge.condition.startswith(
        f"epsilon0 = {threshold:.6g} <= log(n / (16 log(4/delta))) = {threshold:.6g} for n = {n}, delta = 1e-06"
    )
    beyond = shuffle_epsilon(math.nextafter(threshold, math.inf), n, delta)
    assert not beyond.applicable
    assert beyond.condition == (
        f"epsilon0 = {beyond.epsilon:.6g} > log(n / (16 log(4/delta))) = {threshold:.6g} for n = {n}, delta = 1e-06"
    )
