"""What FCF's server sees of one rating, for ``fedrecsim audit`` (`fedrecsim.audit`).

FCF is the non-private baseline: its only promise is that a user's ratings and profile stay on the
device. It makes no DP claim, so its `claim` is ``epsilon = inf`` (`fedrecsim.audit.Claim`) and an audit
measures the leak rather than checking a bound. The relation is one rating added to or removed from the
target user's row (`one_rating`); the observer is the server, which receives every message a user sends.

The server's distinguisher uses only what the protocol sends it and the two candidate rows.
``registered_item`` (explicit feedback): the target's ``fcf.register`` lists the items it rated, so
the score is 1 when the added item is among them: the server learns the rated-item set outright.
Implicit feedback sends no registration: the server's view is the users' full M x d gradients, and the
declared distinguisher scores 0 there (only the generic one learns anything). The user's gradient is a
function of V and its row, but an audit's view holds what the server *received*, not the V it sent, so
a distinguisher recomputing the gradient would have to replay the server's state; it is not written.
"""

from __future__ import annotations

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import one_rating
from ...audit.spec import AuditSpec, no_dp_claim
from ...network.party import Role
from .messages import Register

#: No DP claim: FCF only keeps the ratings on the device and sends the server their gradients.
claim = no_dp_claim("FCF (non-private baseline): ratings stay on the device; the server sees each user's gradients")


def registered_item(view: TrialView) -> np.ndarray:
    """``[1.0]`` when the target's registration lists the item the "in" row adds, else ``[0.0]``."""
    added = set(view.target.added)
    listed = any(added & set(body.items.tolist()) for body in view.target_bodies(Register.KIND))
    return np.array([1.0 if listed else 0.0])


AUDIT = AuditSpec.for_observer(
    Role.SERVER, one_rating("one rating added to or removed from the target user's row", unit="rating"), claim,
    Distinguisher("registered_item", registered_item,
                  description="explicit feedback: whether the target's registered item set holds the added item"),
)

__all__ = ["AUDIT", "claim", "registered_item"]
