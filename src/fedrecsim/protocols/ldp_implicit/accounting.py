"""The privacy a run of ldp_implicit spent: the paper's local guarantee and the shuffled central one.

Local (Minto et al. Theorem 3 and Sec. 5.1): every report is eps-LDP, a user's k reports of an epoch
are k*eps-LDP, and T epochs compose to T*k*eps (a worst case: a user that missed epochs spent less).

Central, beyond the paper: the proxies shuffle reports, and shuffling n users' eps0-LDP reports is
(eps, delta)-DP by Feldman, McMillan and Talwar's Theorem 3.1, in the conservative closed form of
`fedrecsim.mechanisms.shuffle`, where its precondition holds. It counts one report per user, so an
epoch is accounted as k shuffles of one report from each of n users, composed: a proxy shuffling all
n*k reports of a pool at once outputs a post-processing of those k shuffles (shuffle their
concatenation again), so it is at least as private. n is the smallest anonymity set the run actually produced -- the fewest distinct users in any
pool a proxy released, never below ``min_users`` (a proxy holds or drops a smaller pool) and possibly
above it. The ``delta`` budget is for the whole run and is split evenly over its T*k shuffles.

The ``pools`` table reports the anonymity set of the releases (how many, the fewest and the mean
distinct users per release) and the fates of the reports the proxies received: released or dropped
unreleased (each report under one of the two), and how many of them were first held past their pool's
deadline (``reports_held``, a part of the two, not a third fate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...mechanisms.shuffle import compose_approximate, compose_pure, shuffle_epsilon
from .pool import ClosedPool, Fate


def pools_report(pools: Sequence[ClosedPool], min_users: int, underfull: str) -> dict[str, Any]:
    """The ``privacy.pools`` table: the anonymity set of every release and the fate of every report."""
    released = [pool.users for pool in pools if pool.fate is Fate.RELEASED]
    return {
        "min_users": min_users,
        "underfull": underfull,
        "releases": len(released),
        "users_per_release_min": min(released) if released else None,
        "users_per_release_mean": sum(released) / len(released) if released else None,
        "reports_released": sum(pool.reports for pool in pools if pool.fate is Fate.RELEASED),
        "reports_dropped": sum(pool.reports for pool in pools if pool.fate is Fate.DROPPED),
        "reports_held": sum(pool.reports for pool in pools if pool.held),
        "held": "each of reports_held is also among reports_released or reports_dropped, where it ended",
        "end_of_run": "reports a proxy still held when the run ended were dropped, never released",
    }


def privacy_report(
    epsilon: float, k: int, epochs: int, pools: Sequence[ClosedPool], min_users: int, underfull: str, delta: float
) -> dict[str, Any]:
    """The ``privacy`` table of ``result.json``.

    Args:
        epsilon: The per-report budget.
        k: Reports per user per epoch.
        epochs: Epochs the run completed.
        pools: Every pool the proxies released or dropped.
        min_users: The configured pool threshold.
        underfull: The configured fate of a pool short of ``min_users`` at its deadline.
        delta: The run's total delta for the central guarantee.
    """
    table = pools_report(pools, min_users, underfull)
    anonymity_set = table["users_per_release_min"]
    report: dict[str, Any] = {
        "mechanism": "randomized binary response on one gradient entry per report (Minto et al. Alg. 1)",
        "epsilon_per_report": epsilon,
        "reports_per_user_epoch": k,
        "epsilon_per_user_epoch": compose_pure(epsilon, k),
        "epochs": epochs,
        "epsilon_per_user_total": compose_pure(epsilon, k * epochs),
        "composition": "basic: k reports per epoch, over every epoch (worst case: a user in every epoch)",
        "pools": table,
    }
    shuffles = k * epochs
    shuffle: dict[str, Any] = {
        "bound": (
            "Feldman, McMillan, Talwar 2021 (arXiv:2012.12803), Thm 3.1, in its conservative closed form (the "
            "authors' companion code), under eps0 <= log(n / (16 log(4/delta))); k shuffles per epoch, basic "
            "composition"
        ),
        "anonymity_set": anonymity_set,
        "delta_total": delta,
    }
    if anonymity_set is None or shuffles == 0:
        shuffle.update(applicable=False, condition="no pool of reports was released")
    else:
        bound = shuffle_epsilon(epsilon, anonymity_set, delta / shuffles)
        per_epoch = compose_approximate(bound.epsilon, bound.delta, k)
        total = compose_approximate(bound.epsilon, bound.delta, shuffles)
        shuffle.update(
            applicable=bound.applicable,
            condition=bound.condition,
            epsilon_per_shuffle=bound.epsilon,
            delta_per_shuffle=bound.delta,
            epsilon_per_epoch=per_epoch[0],
            delta_per_epoch=per_epoch[1],
            epsilon_total=total[0],
            delta_total_spent=total[1],
        )
    report["shuffle"] = shuffle
    return report


__all__ = ["pools_report", "privacy_report"]
