"""Privacy accounting: the paper's local composition, the shuffled central bound with its condition, the pools."""

from __future__ import annotations

import math

import pytest

from fedrecsim.mechanisms import shuffle_epsilon
from fedrecsim.protocols.ldp_implicit.accounting import privacy_report
from fedrecsim.protocols.ldp_implicit.pool import ClosedPool, Fate


def _released(*users: int) -> list[ClosedPool]:
    """Released pools of ``users`` distinct users each (one report per user)."""
    return [ClosedPool(1, count, count, Fate.RELEASED, False) for count in users]


def test_local_budget_composes_over_reports_and_epochs() -> None:
    report = privacy_report(2.5, 100, 20, _released(50), min_users=50, underfull="hold", delta=1e-6)
    assert report["epsilon_per_report"] == 2.5
    assert report["epsilon_per_user_epoch"] == pytest.approx(250.0)
    assert report["epsilon_per_user_total"] == pytest.approx(5000.0)


def test_a_small_anonymity_set_gets_no_amplification_and_says_why() -> None:
    shuffle = privacy_report(2.5, 100, 20, _released(50, 70), 50, "hold", delta=1e-6)["shuffle"]
    assert shuffle["applicable"] is False and shuffle["anonymity_set"] == 50
    assert "n = 50" in shuffle["condition"]
    assert shuffle["epsilon_total"] == pytest.approx(5000.0) and shuffle["delta_total_spent"] == 0.0


def test_a_large_anonymity_set_is_amplified_with_delta_split_over_every_shuffle() -> None:
    epsilon, k, epochs, n, delta = 1.0, 10, 5, 1_000_000, 1e-6
    shuffle = privacy_report(epsilon, k, epochs, _released(n + 5, n), 1000, "hold", delta=delta)["shuffle"]
    bound = shuffle_epsilon(epsilon, n, delta / (k * epochs))
    assert shuffle["applicable"] is True and bound.applicable and shuffle["anonymity_set"] == n
    assert shuffle["epsilon_per_shuffle"] == pytest.approx(bound.epsilon) and bound.epsilon < epsilon
    assert shuffle["epsilon_per_epoch"] == pytest.approx(k * bound.epsilon)
    assert shuffle["epsilon_total"] == pytest.approx(k * epochs * bound.epsilon)
    assert shuffle["delta_total_spent"] == pytest.approx(delta)
    assert shuffle["epsilon_total"] < k * epochs * epsilon


def test_no_released_pool_means_no_central_claim() -> None:
    dropped = [ClosedPool(1, 3, 300, Fate.DROPPED, True)]
    report = privacy_report(2.5, 100, 3, dropped, 10, "hold", 1e-6)
    assert report["shuffle"]["applicable"] is False and "epsilon_total" not in report["shuffle"]
    assert math.isclose(report["epsilon_per_user_total"], 750.0)
    assert report["pools"]["releases"] == 0 and report["pools"]["users_per_release_min"] is None


def test_the_pools_table_counts_every_report_by_its_fate() -> None:
    pools = [
        ClosedPool(1, 10, 100, Fate.RELEASED, False),
        ClosedPool(1, 14, 140, Fate.RELEASED, True),
        ClosedPool(2, 3, 30, Fate.DROPPED, True),
        ClosedPool(2, 2, 20, Fate.DROPPED, False),
    ]
    table = privacy_report(2.5, 10, 2, pools, 10, "hold", 1e-6)["pools"]
    assert (table["min_users"], table["underfull"], table["releases"]) == (10, "hold", 2)
    assert (table["users_per_release_min"], table["users_per_release_mean"]) == (10, 12.0)
    assert (table["reports_released"], table["reports_held"], table["reports_dropped"]) == (240, 170, 50)
