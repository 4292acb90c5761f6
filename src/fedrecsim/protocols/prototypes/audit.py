"""What Ribero et al.'s privacy claim protects, for ``fedrecsim audit`` (`fedrecsim.audit`).

The claim (Sec. 3, Algorithm 2 with the budget split of `accounting`): each silo's prototypes are
eps-differentially private for one user's record within that silo, replaced by any other (the silo's
size is public, `fedrecsim.mechanisms.private_kmeans`) (delta = 0: the mechanism is pure; the
paper's delta only sizes utility constants); the silos hold disjoint users, so the protocol is eps-DP by
parallel composition. The relation is ``one_user``: the target user's whole row present or emptied;
the user stays in its silo with an all-zero record, so the silo's size is the same in both worlds and
the pair is a replacement (the row by the zero record), which the claim covers. The server receives every silo's
prototypes and nothing else; V, which it computes and broadcasts, is post-processing.

The server's distinguisher, ``prototype_projection``: it knows the target's row (both candidate rows,
the rest of the data) and the mechanism. The row, truncated and clipped as the silo does, adds to one
cluster's sum before sparse recovery; so it scores the run by the largest projection of one of the
target's silo's prototypes onto the target's row, ``max_r <P_r, x> / ||x||`` (the silo partition is
drawn from the run's seed, `fedrecsim.data.silos`, which the threat model does not hide: the silo of the
target is known). The silo truncates records to ``s`` entries chosen at random; x keeps the ``s``
largest (clipped) values instead, a choice of the test's. A heuristic test
(the exact likelihood ratio would need the private clustering's choices): at small eps the Laplace noise
on each revealed entry (scale ``s * bound / eps_values``, `protocol` docstring) hides a row completely
and the audited bound is near 0; as eps grows the row's pull on its prototype shows.

Measured (``python scenarios/audit_ribero.py --workers 2``: 20 users x 30 items in 10 silos of two
users, k = 1, support s = 30 so no entry is truncated -- the size where this test has the most power --,
200 trials per world, 95% per distinguisher; machine loaded, about 4 trials/s):

    claimed eps   audited lower bound (best)        meaning
    1             0                                 no evidence of leakage (nor of privacy)
    100           0                                 no evidence
    10,000        3.28 (prototype_projection)       the row shows; far below the claim

With sparse recovery's three noises scaled by 1e-4 at a claim of 1 the bound exceeds the claim
(tests/protocols/prototypes/test_prototypes_audit.py); halving them, or 1/4, is not caught at that size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import Row, one_user
from ...audit.spec import AuditSpec, Claim
from ...data.silos import silo_assignment
from ...network.party import Party, Role
from .messages import Prototypes


def claim(scenario: Any) -> Claim:
    """eps per silo, for one user's row of the silo (pure DP, delta = 0)."""
    epsilon = scenario.protocol.epsilon
    return Claim(
        epsilon, 0.0,
        f"each silo's prototypes are eps = {epsilon:g}-DP for one user's row of the silo (Ribero et al. Algorithm 2; "
        "disjoint silos compose in parallel)",
    )


def prototype_projection(view: TrialView) -> np.ndarray:
    """``[max_r <P_r, x> / ||x||]`` over the target's silo's prototypes, x the target's (truncated, clipped) row."""
    from .protocol import public_bounds  # the protocol module imports this one: imported here to avoid a cycle

    config = view.scenario.protocol
    bound = public_bounds(config, view.scenario.data, view.known).value
    row = view.target.present
    keep = np.argsort(-np.asarray(row.values), kind="stable")[: config.support]
    x = Row.of(np.asarray(row.items)[keep], np.clip(np.asarray(row.values)[keep], 0.0, bound)).dense(view.known.n_items)
    x /= max(float(np.linalg.norm(x)), 1e-12)
    silo = int(silo_assignment(view.scenario.data, view.known, view.scenario.run.seed)[view.target.user])
    received = view.bodies(Prototypes.KIND, Party(Role.SILO, silo))
    if not received:
        return np.array([0.0])
    return np.array([float(np.max(received[0].prototypes @ x))])


AUDIT = AuditSpec.for_observer(
    Role.SERVER, one_user("one user's whole row added to or removed from its silo"), claim,
    Distinguisher("prototype_projection", prototype_projection,
                  description="the largest projection of a prototype of the target's silo onto the target user's (truncated, clipped) row"),
)

__all__ = ["AUDIT", "claim", "prototype_projection"]
