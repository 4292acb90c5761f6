"""What FedVAE's server learns of one interaction, for ``fedrecsim audit`` (`fedrecsim.audit`).

Polato's FedVAE makes no differential-privacy claim: a user's interactions stay on the device and the
server receives, each round the user is sampled, the gradient of its Mult-VAE loss. Its `claim` is
therefore ``epsilon = inf`` (no DP claim, `fedrecsim.audit.Claim`) and an audit measures the leak. The
relation is one interaction added to or removed from the target user's row (`one_rating`, unit
"interaction"); the observer is the server, as in the paper's threat model (honest-but-curious server,
Sec. IV; the byzantine users are another threat).

The server's distinguisher, ``gradient_support``, uses what the protocol sends it. The encoder's first
layer multiplies the user's (normalized, dropped-out) row by W1, so the gradient of W1's row i is zero
unless item i is in the row and survived this round's input dropout: the non-zero rows of the W1 block
of the user's gradient are a subset of its items (`fedrecsim.models.multvae`; in the sparse format,
``fedvae.sparse_gradient``, the items are even listed). Its score is the number of rounds in which the
target's gradient has a non-zero W1 row at the added item. With input dropout p each round exposes a
held item with probability 1 - p, and an item the user does not hold never: after T rounds with the
user sampled every round, the test "score >= 1" has FPR 0 and TPR about 1 - p^T (measured over 200 "in"
runs at T = 1, 2, 4: 0.475, 0.685, 0.905 against 0.5, 0.75, 0.94 -- docs/audit.md, "Polato (fedvae)").
"""

from __future__ import annotations

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import one_rating
from ...audit.spec import AuditSpec, no_dp_claim
from ...network.party import Role
from .messages import Gradient, SparseGradient

#: No DP claim: FedVAE keeps the data on the device and sends the server per-user gradients.
claim = no_dp_claim("Polato's FedVAE: interactions stay on the device; the server sees each sampled user's gradient")


def gradient_support(view: TrialView) -> np.ndarray:
    """``[rounds in which the target's gradient has a non-zero W1 row at an item the "in" row adds]``."""
    added = list(view.target.added)
    hidden = view.scenario.protocol.hidden
    dense = sum(any(np.any(body.values[item * hidden : (item + 1) * hidden] != 0) for item in added)
                for body in view.target_bodies(Gradient.KIND))
    sparse = sum(bool(np.any(body.rows[np.isin(body.items, added)] != 0)) for body in view.target_bodies(SparseGradient.KIND))
    return np.array([float(dense + sparse)])


AUDIT = AuditSpec.for_observer(
    Role.SERVER, one_rating("one interaction added to or removed from the target user's row", unit="interaction"), claim,
    Distinguisher("gradient_support", gradient_support,
                  description="rounds in which the target's gradient has a non-zero first-layer row at the added item"),
)

__all__ = ["AUDIT", "claim", "gradient_support"]
