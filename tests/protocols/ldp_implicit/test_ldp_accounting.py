"""Privacy accounting: the paper's local composition, the shuffled central bound with its condition, the pools."""

from __future__ import annotations

import math
from typing import Any

import pytest

import fedrecsim
from fedrecsim.data import prepare_data
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


# The report key by key, its figures worked out here from the formulas the module implements: Minto et al.'s
# Theorem 3 with basic composition (k reports per epoch, T epochs: k*eps and T*k*eps) and form (B) of Feldman,
# McMillan and Talwar's Theorem 3.1 (`fedrecsim.mechanisms.shuffle`), with the run's delta split evenly over
# its T*k shuffles of one report per user.

MECHANISM = "randomized binary response on one gradient entry per report (Minto et al. Alg. 1)"
COMPOSITION = "basic: k reports per epoch, over every epoch (worst case: a user in every epoch)"
BOUND = (
    "Feldman, McMillan, Talwar 2021 (arXiv:2012.12803), Thm 3.1, in its conservative closed form (the authors' "
    "companion code), under eps0 <= log(n / (16 log(4/delta))); k shuffles per epoch, basic composition"
)
END_OF_RUN = "reports a proxy still held when the run ended were dropped, never released"
HELD = "each of reports_held is also among reports_released or reports_dropped, where it ended"
REPORT_KEYS = {
    "mechanism", "epsilon_per_report", "reports_per_user_epoch", "epsilon_per_user_epoch", "epochs",
    "epsilon_per_user_total", "composition", "pools", "shuffle",
}
AMPLIFIED_KEYS = {
    "bound", "anonymity_set", "delta_total", "applicable", "condition", "epsilon_per_shuffle", "delta_per_shuffle",
    "epsilon_per_epoch", "delta_per_epoch", "epsilon_total", "delta_total_spent",
}
TIGHT = 1e-12


def _threshold(n: int, delta: float) -> float:
    """Form (B)'s precondition: eps0 <= log(n / (16 log(4 / delta)))."""
    return math.log(n / (16 * math.log(4 / delta)))


def _form_b(eps0: float, n: int, delta: float) -> float:
    """Form (B): a = 8 sqrt(e^eps0 log(4/delta) / n), c = 8 e^eps0 / n, eps' = log(1 + a + c),
    eps = log(1 + (1 - e^-eps0) / (1 + e^-(eps0 + eps')) (a + c))."""
    a = 8 * math.sqrt(math.exp(eps0) * math.log(4 / delta) / n)
    c = 8 * math.exp(eps0) / n
    eps_prime = math.log(1 + a + c)
    return math.log(1 + (1 - math.exp(-eps0)) / (1 + math.exp(-(eps0 + eps_prime))) * (a + c))


def _local(report: dict, epsilon: float, k: int, epochs: int) -> None:
    """The paper's local guarantee: eps per report, k*eps per epoch, T*k*eps in all."""
    assert set(report) == REPORT_KEYS
    assert report["mechanism"] == MECHANISM and report["composition"] == COMPOSITION
    assert (report["epsilon_per_report"], report["reports_per_user_epoch"], report["epochs"]) == (epsilon, k, epochs)
    assert report["epsilon_per_user_epoch"] == pytest.approx(k * epsilon, rel=TIGHT)
    assert report["epsilon_per_user_total"] == pytest.approx(epochs * k * epsilon, rel=TIGHT)


def test_an_amplified_report_key_by_key_from_the_formulas() -> None:
    # Two proxies' releases (the smallest, 100,000 distinct users, is the anonymity set) and a dropped pool.
    epsilon, k, epochs, delta = 1.0, 2, 3, 1e-6
    pools = [
        ClosedPool(1, 100_004, 200_008, Fate.RELEASED, False),
        ClosedPool(1, 100_000, 200_000, Fate.RELEASED, True),
        ClosedPool(2, 7, 14, Fate.DROPPED, True),
    ]
    report = privacy_report(epsilon, k, epochs, pools, 100_000, "hold", delta)
    _local(report, epsilon, k, epochs)
    assert report["epsilon_per_user_total"] == pytest.approx(6.0, rel=TIGHT)
    assert report["pools"] == {
        "min_users": 100_000, "underfull": "hold", "releases": 2, "users_per_release_min": 100_000,
        "users_per_release_mean": 100_002.0, "reports_released": 400_008, "reports_held": 200_014,
        "reports_dropped": 14, "held": HELD, "end_of_run": END_OF_RUN,
    }
    shuffle = report["shuffle"]
    assert set(shuffle) == AMPLIFIED_KEYS
    # delta = 1e-6 over T*k = 6 shuffles: 1.667e-7 each; log(1e5 / (16 log(2.4e7))) = 5.9075 >= eps0 = 1.
    per_shuffle_delta = delta / 6
    assert _threshold(100_000, per_shuffle_delta) == pytest.approx(5.907502, abs=1e-6)
    eps_shuffle = _form_b(epsilon, 100_000, per_shuffle_delta)
    assert eps_shuffle == pytest.approx(0.0795772, abs=1e-7)
    assert (shuffle["bound"], shuffle["anonymity_set"], shuffle["delta_total"], shuffle["applicable"]) == (
        BOUND, 100_000, delta, True,
    )
    assert shuffle["condition"] == (
        "epsilon0 = 1 <= log(n / (16 log(4/delta))) = 5.9075 for n = 100000, delta = 1.67e-07"
    )
    assert shuffle["epsilon_per_shuffle"] == pytest.approx(eps_shuffle, rel=TIGHT)
    assert shuffle["delta_per_shuffle"] == pytest.approx(per_shuffle_delta, rel=TIGHT)
    assert shuffle["epsilon_per_epoch"] == pytest.approx(2 * eps_shuffle, rel=TIGHT)
    assert shuffle["delta_per_epoch"] == pytest.approx(2 * per_shuffle_delta, rel=TIGHT)
    assert shuffle["epsilon_total"] == pytest.approx(6 * eps_shuffle, rel=TIGHT)
    assert shuffle["delta_total_spent"] == pytest.approx(delta, rel=TIGHT)


def test_a_single_shuffle_spends_the_whole_delta_on_it() -> None:
    # k = 1 report in T = 1 epoch: one shuffle, the run's delta unsplit.
    report = privacy_report(1.0, 1, 1, _released(100_000), 100_000, "drop", 1e-6)
    _local(report, 1.0, 1, 1)
    shuffle = report["shuffle"]
    eps_shuffle = _form_b(1.0, 100_000, 1e-6)
    assert eps_shuffle == pytest.approx(0.0752901, abs=1e-7)
    assert shuffle["applicable"] is True and shuffle["condition"] == (
        "epsilon0 = 1 <= log(n / (16 log(4/delta))) = 6.01892 for n = 100000, delta = 1e-06"
    )
    for key in ("epsilon_per_shuffle", "epsilon_per_epoch", "epsilon_total"):
        assert shuffle[key] == pytest.approx(eps_shuffle, rel=TIGHT), key
    for key in ("delta_per_shuffle", "delta_per_epoch", "delta_total_spent"):
        assert shuffle[key] == pytest.approx(1e-6, rel=TIGHT), key
    assert report["pools"]["underfull"] == "drop"


def test_below_the_precondition_the_central_claim_is_the_local_one_with_delta_zero() -> None:
    # n = 50: log(50 / (16 log(4 / 5e-10))) = -1.98744 < 2.5; the shuffled reports are still 2.5-DP each.
    epsilon, k, epochs, delta = 2.5, 100, 20, 1e-6
    report = privacy_report(epsilon, k, epochs, _released(50, 70), 50, "hold", delta)
    _local(report, epsilon, k, epochs)
    assert report["shuffle"] == {
        "bound": BOUND, "anonymity_set": 50, "delta_total": delta, "applicable": False,
        "condition": "epsilon0 = 2.5 > log(n / (16 log(4/delta))) = -1.98744 for n = 50, delta = 5e-10",
        "epsilon_per_shuffle": 2.5, "delta_per_shuffle": 0.0, "epsilon_per_epoch": pytest.approx(250.0, rel=TIGHT),
        "delta_per_epoch": 0.0, "epsilon_total": pytest.approx(5000.0, rel=TIGHT), "delta_total_spent": 0.0,
    }


def test_where_the_closed_form_does_not_beat_eps0_the_local_epsilon_stands() -> None:
    # n = 246 just meets the precondition for eps0 = 0.01 (16 log(4e6) e^0.01 = 245.7), but form (B) gives
    # 0.0151 > 0.01 there: the report keeps eps0 and spends no delta.
    assert _threshold(246, 1e-6) == pytest.approx(0.0113286, abs=1e-7) and _threshold(245, 1e-6) < 0.01
    assert _form_b(0.01, 246, 1e-6) == pytest.approx(0.0151227, abs=1e-7)
    shuffle = privacy_report(0.01, 1, 1, _released(246), 246, "hold", 1e-6)["shuffle"]
    assert shuffle["applicable"] is True
    assert shuffle["condition"] == (
        "epsilon0 = 0.01 <= log(n / (16 log(4/delta))) = 0.0113286 for n = 246, delta = 1e-06; the closed form "
        "0.0151227 does not improve on epsilon0"
    )
    assert (shuffle["epsilon_per_shuffle"], shuffle["epsilon_per_epoch"], shuffle["epsilon_total"]) == (0.01,) * 3
    assert (shuffle["delta_per_shuffle"], shuffle["delta_per_epoch"], shuffle["delta_total_spent"]) == (0.0,) * 3


NO_CLAIM = {"bound": BOUND, "applicable": False, "condition": "no pool of reports was released"}


def test_without_a_released_pool_the_shuffle_entry_claims_nothing() -> None:
    dropped = [ClosedPool(1, 3, 300, Fate.DROPPED, True), ClosedPool(2, 9, 900, Fate.DROPPED, False)]
    report = privacy_report(2.5, 100, 3, dropped, 10, "drop", 1e-6)
    _local(report, 2.5, 100, 3)
    assert report["shuffle"] == {**NO_CLAIM, "anonymity_set": None, "delta_total": 1e-6}
    assert report["pools"] == {
        "min_users": 10, "underfull": "drop", "releases": 0, "users_per_release_min": None,
        "users_per_release_mean": None, "reports_released": 0, "reports_held": 300, "reports_dropped": 1200,
        "held": HELD, "end_of_run": END_OF_RUN,
    }


def test_a_run_of_no_epochs_spent_nothing_and_claims_nothing() -> None:
    report = privacy_report(2.5, 100, 0, [], 1000, "hold", 1e-6)
    _local(report, 2.5, 100, 0)
    assert report["epsilon_per_user_total"] == 0.0
    assert report["shuffle"] == {**NO_CLAIM, "anonymity_set": None, "delta_total": 1e-6}
    assert report["pools"] == {
        "min_users": 1000, "underfull": "hold", "releases": 0, "users_per_release_min": None,
        "users_per_release_mean": None, "reports_released": 0, "reports_held": 0, "reports_dropped": 0,
        "held": HELD, "end_of_run": END_OF_RUN,
    }


def test_no_epoch_means_no_shuffle_even_with_a_pool_on_record() -> None:
    # T*k = 0 shuffles: there is no delta to split and nothing was shuffled for the epochs counted.
    report = privacy_report(1.0, 3, 0, _released(100_000), 100_000, "hold", 1e-6)
    assert report["shuffle"] == {**NO_CLAIM, "anonymity_set": 100_000, "delta_total": 1e-6}


# Whole runs: what the run hands the accounting (its epochs, every proxy's closed pools, its configuration).


def _run(data: dict[str, Any], protocol: dict[str, Any], rounds: int) -> fedrecsim.RunResult:
    return fedrecsim.run({
        "run": {"protocol": "ldp_implicit", "name": "accounting", "seed": 5, "rounds": rounds},
        "data": {"source": "synthetic", "split": "leave_one_out", **data},
        "availability": {"model": "always"},
        "protocol": protocol,
    })


def test_one_proxy_counts_users_without_items_in_its_anonymity_set() -> None:
    # Ratings below 5 removed: 14 of the 40 users keep no training item, yet each still receives V and sends
    # its k reports, so every epoch's single pool holds all 40 users.
    data = {"feedback": "explicit", "users": 40, "items": 150, "ratings": 400, "min_rating": 5}
    train = prepare_data(fedrecsim.parse_scenario({"run": {"protocol": "ldp_implicit", "seed": 5},
                                                   "data": {"source": "synthetic", "split": "leave_one_out",
                                                            **data}}).data, 5)[0]
    assert int((train.user_counts() == 0).sum()) == 14
    result = _run(data, {"k": 20, "min_users": 40}, rounds=2)
    report = result.result["privacy"]
    _local(report, 2.5, 20, 2)
    assert report["epsilon_per_user_epoch"] == 50.0 and report["epsilon_per_user_total"] == 100.0
    assert report["pools"] == {
        "min_users": 40, "underfull": "hold", "releases": 2, "users_per_release_min": 40,
        "users_per_release_mean": 40.0, "reports_released": 2 * 40 * 20, "reports_held": 0, "reports_dropped": 0,
        "held": HELD, "end_of_run": END_OF_RUN,
    }
    # 40 shuffles share delta = 1e-6: 2.5e-8 each; log(40 / (16 log(1.6e8))) = -2.02238 < 2.5: no amplification.
    assert _threshold(40, 2.5e-8) == pytest.approx(-2.022378, abs=1e-6)
    assert report["shuffle"] == {
        "bound": BOUND, "anonymity_set": 40, "delta_total": 1e-6, "applicable": False,
        "condition": "epsilon0 = 2.5 > log(n / (16 log(4/delta))) = -2.02238 for n = 40, delta = 2.5e-08",
        "epsilon_per_shuffle": 2.5, "delta_per_shuffle": 0.0, "epsilon_per_epoch": 50.0, "delta_per_epoch": 0.0,
        "epsilon_total": 100.0, "delta_total_spent": 0.0,
    }


def test_two_proxies_amplify_by_the_smaller_release_and_drop_the_rest() -> None:
    # 600 users report to two proxies; each releases a pool the moment it holds 250 users and drops the
    # ~50 stragglers' pool at its deadline (underfull = "drop"): 2 releases of 250 users, 100 users dropped.
    data = {"feedback": "implicit", "users": 600, "items": 60, "ratings": 1800}
    protocol = {"k": 2, "min_users": 250, "proxies": 2, "epsilon": 0.1, "delta": 0.5, "underfull": "drop",
                "negatives": 20}
    report = _run(data, protocol, rounds=1).result["privacy"]
    _local(report, 0.1, 2, 1)
    assert report["pools"] == {
        "min_users": 250, "underfull": "drop", "releases": 2, "users_per_release_min": 250,
        "users_per_release_mean": 250.0, "reports_released": 2 * 250 * 2, "reports_held": 0,
        "reports_dropped": 100 * 2, "held": HELD, "end_of_run": END_OF_RUN,
    }
    # k * T = 2 shuffles: delta 0.25 each; log(250 / (16 log 16)) = 1.72909 >= 0.1.
    eps_shuffle = _form_b(0.1, 250, 0.25)
    assert eps_shuffle == pytest.approx(0.0578766, abs=1e-7)
    shuffle = report["shuffle"]
    assert set(shuffle) == AMPLIFIED_KEYS
    assert (shuffle["bound"], shuffle["anonymity_set"], shuffle["delta_total"], shuffle["applicable"]) == (
        BOUND, 250, 0.5, True,
    )
    assert shuffle["condition"] == "epsilon0 = 0.1 <= log(n / (16 log(4/delta))) = 1.72909 for n = 250, delta = 0.25"
    assert shuffle["epsilon_per_shuffle"] == pytest.approx(eps_shuffle, rel=TIGHT)
    assert shuffle["epsilon_per_epoch"] == pytest.approx(2 * eps_shuffle, rel=TIGHT)
    assert shuffle["epsilon_total"] == pytest.approx(2 * eps_shuffle, rel=TIGHT)
    assert (shuffle["delta_per_shuffle"], shuffle["delta_per_epoch"], shuffle["delta_total_spent"]) == (0.25, 0.5, 0.5)
