"""Privacy accounting: the paper's local composition and the shuffled central bound with its condition."""

from __future__ import annotations

import math

import pytest

from fedrecsim.mechanisms import shuffle_epsilon
from fedrecsim.protocols.ldp_implicit.accounting import privacy_report


def test_local_budget_composes_over_reports_and_epochs() -> None:
    report = privacy_report(2.5, 100, 20, anonymity_set=50, min_users=1000, delta=1e-6)
    assert report["epsilon_per_report"] == 2.5
    assert report["epsilon_per_user_epoch"] == pytest.approx(250.0)
    assert report["epsilon_per_user_total"] == pytest.approx(5000.0)


def test_a_small_anonymity_set_gets_no_amplification_and_says_why() -> None:
    shuffle = privacy_report(2.5, 100, 20, anonymity_set=50, min_users=1000, delta=1e-6)["shuffle"]
    assert shuffle["applicable"] is False
    assert "n = 50" in shuffle["condition"]
    assert shuffle["epsilon_total"] == pytest.approx(5000.0) and shuffle["delta_total_spent"] == 0.0


def test_a_large_anonymity_set_is_amplified_with_delta_split_over_every_shuffle() -> None:
    epsilon, k, epochs, n, delta = 1.0, 10, 5, 1_000_000, 1e-6
    shuffle = privacy_report(epsilon, k, epochs, anonymity_set=n, min_users=1000, delta=delta)["shuffle"]
    bound = shuffle_epsilon(epsilon, n, delta / (k * epochs))
    assert shuffle["applicable"] is True and bound.applicable
    assert shuffle["epsilon_per_shuffle"] == pytest.approx(bound.epsilon) and bound.epsilon < epsilon
    assert shuffle["epsilon_per_epoch"] == pytest.approx(k * bound.epsilon)
    assert shuffle["epsilon_total"] == pytest.approx(k * epochs * bound.epsilon)
    assert shuffle["delta_total_spent"] == pytest.approx(delta)
    assert shuffle["epsilon_total"] < k * epochs * epsilon


def test_no_released_pool_means_no_central_claim() -> None:
    shuffle = privacy_report(2.5, 100, 3, anonymity_set=None, min_users=10, delta=1e-6)["shuffle"]
    assert shuffle["applicable"] is False and "epsilon_total" not in shuffle
    assert math.isclose(privacy_report(2.5, 100, 3, None, 10, 1e-6)["epsilon_per_user_total"], 750.0)
