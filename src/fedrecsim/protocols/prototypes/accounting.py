"""The privacy a run of prototypes spends: one epsilon per silo, split over Algorithm 2's subroutines.

Each silo releases exactly one thing computed from its users, its prototypes P_h (round 1); V and the
local fits that follow are post-processing (round 2 sends nothing back). A silo's release is
``budget.total``-DP for its users (neighbouring = one user's record replaced; silo sizes public,
`fedrecsim.mechanisms.private_kmeans`), and the silos hold disjoint users, so by parallel composition
the whole protocol is epsilon-DP (Theorem 3.1).

The split. ``budget_candidates``, ``budget_localswap`` and (with more than one trial) ``budget_selection``
are fractions of epsilon; sparse recovery gets the rest, itself split ``recovery_support`` /
``recovery_values`` / the rest (cluster sizes). With one trial there is nothing to select and the
selection fraction goes to the recovery, so the parts always add up to epsilon. The paper's own
constants (``eps / 8T`` for candidates and swaps per trial, ``eps / 3`` for the selection -- its
``24 Lambda^2`` -- and ``eps`` again for the recovery) add up to more than epsilon; we keep its
proportions for the first three and give the recovery what is left.

The mechanism is pure epsilon-DP: delta = 0. The paper's delta only sizes its utility constants
(trials ``2 log(1/delta)``, ``25 k log(n/delta)`` grids, ``n / delta`` swaps, the partition threshold),
which this implementation takes as explicit counts instead.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ...mechanisms.private_kmeans import PrototypeBudget, PrototypeParams


def budget_split(
    epsilon: float,
    trials: int,
    candidates: float,
    localswap: float,
    selection: float,
    support_share: float,
    values_share: float,
) -> PrototypeBudget:
    """The silo budget: fractions of ``epsilon`` (module docstring); ``total`` equals ``epsilon``."""
    used = candidates + localswap + (selection if trials > 1 else 0.0)
    if used >= 1.0:
        raise ConfigError(
            "protocol.budget_candidates",
            f"budget_candidates + budget_localswap{' + budget_selection' if trials > 1 else ''} = {used:g} "
            "leaves nothing for the sparse recovery; they must add up to less than 1",
        )
    if support_share + values_share >= 1.0:
        raise ConfigError(
            "protocol.recovery_support",
            f"recovery_support + recovery_values = {support_share + values_share:g} leaves nothing for the "
            "cluster sizes; they must add up to less than 1",
        )
    chosen = selection * epsilon if trials > 1 else 0.0
    fixed = candidates * epsilon + localswap * epsilon + chosen
    return PrototypeBudget(
        candidates=candidates * epsilon,
        localswap=localswap * epsilon,
        recovery=epsilon - fixed,
        selection=chosen,
        support_share=support_share,
        values_share=values_share,
    )


def privacy_report(epsilon: float, budget: PrototypeBudget, params: PrototypeParams, silos: int) -> dict[str, Any]:
    """The ``privacy`` table of ``result.json``."""
    return {
        "mechanism": "private prototypes (Ribero et al. Alg. 2-3 over Balcan et al. private k-means), per silo",
        "epsilon": epsilon,
        "delta": 0.0,
        "neighbouring": "one user's record replaced within a silo (silo sizes public)",
        "composition": f"basic within a silo; parallel across the {silos} silos (disjoint users)",
        "split": {
            "candidates": budget.candidates,
            "localswap": budget.localswap,
            "recovery_support": budget.recovery * budget.support_share,
            "recovery_values": budget.recovery * budget.values_share,
            "recovery_sizes": budget.recovery * budget.count_share,
            "selection": budget.selection,
        },
        "split_total": budget.total,
        "constants": {
            "k": params.k,
            "support": params.s,
            "value_bound": params.bound,
            "radius": params.radius,
            "projection_dim": params.projection_dim,
            "trials": params.trials,
            "grids_per_trial": params.grids,
            "swap_steps_per_trial": params.swap_steps,
        },
    }


__all__ = ["budget_split", "privacy_report"]
