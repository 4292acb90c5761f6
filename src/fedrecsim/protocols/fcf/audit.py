"""What FCF's server sees of one rating, for ``fedrecsim audit`` (`fedrecsim.audit`).

FCF is the non-private baseline: its only promise is that a user's ratings and profile stay on the
device. It makes no DP claim, so its `claim` is ``epsilon = inf`` (`fedrecsim.audit.Claim`) and an audit
measures the leak rather than checking a bound. The relation is one rating added to or removed from the
target user's row (`one_rating`); the observer is the server, which receives every message a user sends.

The server's distinguishers use only what the protocol sends it and the two candidate rows:

* ``registered_item`` (explicit feedback): the target's ``fcf.register`` lists the items it rated, so
  the score is 1 when the added item is among them. The server learns the rated-item set outright.
* ``gradient_match`` (implicit feedback): the server sent V (``fcf.model``) and received the target's
  full M x d gradient (``fcf.model_gradient``). The user's gradient is a deterministic function of V and
  its row (the profile is solved fresh from V each round, `fedrecsim.models.implicit_mf.user_factors`),
  so the server recomputes it for both candidate rows; the score is how much closer the received
  gradient is to the "in" row's than to the "out" row's, summed over rounds.
"""

from __future__ import annotations

import math

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import Row, one_rating
from ...audit.spec import AuditSpec, Claim
from ...models.implicit_mf import confidence, item_gradient, user_factors
from ...network.party import SERVER, Party, Role
from .messages import Model, ModelGradient, Register


def claim(scenario: object) -> Claim:
    """No DP claim: FCF only keeps the ratings on the device and sends the server their gradients."""
    return Claim(math.inf, 0.0, "FCF (non-private baseline): ratings stay on the device; the server sees each user's gradients")


def _added_items(view: TrialView) -> set[int]:
    return set(view.target.present.items) - set(view.target.absent.items)


def registered_item(view: TrialView) -> np.ndarray:
    """``[1.0]`` when the target's registration lists the item the "in" row adds, else ``[0.0]``."""
    added = _added_items(view)
    listed = any(added & set(body.items.tolist()) for body in view.bodies(Register.KIND, Party(Role.USER, view.target.user)))
    return np.array([1.0 if listed else 0.0])


def _gradient(V: np.ndarray, row: Row, alpha: float, lam: float) -> np.ndarray:
    items = np.asarray(row.items, dtype=np.int64)
    conf = confidence(np.asarray(row.values, dtype=np.float64), alpha)
    return item_gradient(V, user_factors(V, items, conf, lam), items, conf)


def gradient_match(view: TrialView) -> np.ndarray:
    """``[sum over rounds of |g - g_out| - |g - g_in|]`` (Frobenius norms), g the target's received gradient."""
    config = view.scenario.protocol
    models = {body.round: body.item_factors for body in view.bodies(Model.KIND, SERVER)}
    total = 0.0
    for reply in view.bodies(ModelGradient.KIND, Party(Role.USER, view.target.user)):
        V = models.get(reply.round)
        if V is None:
            continue
        g_in = _gradient(V, view.target.present, config.alpha, config.lam)
        g_out = _gradient(V, view.target.absent, config.alpha, config.lam)
        total += float(np.linalg.norm(reply.gradient - g_out) - np.linalg.norm(reply.gradient - g_in))
    return np.array([total])


AUDIT = AuditSpec(
    neighbouring=one_rating("one rating added to or removed from the target user's row", unit="rating"),
    claim=claim,
    parties=(Role.SERVER,),
    distinguishers=(
        Distinguisher(
            "registered_item", registered_item, roles=(Role.SERVER,),
            description="explicit feedback: whether the target's registered item set holds the added item",
        ),
        Distinguisher(
            "gradient_match", gradient_match, roles=(Role.SERVER,),
            description="implicit feedback: how much closer the target's gradient is to the one its 'in' row gives under the sent V",
        ),
    ),
)

__all__ = ["AUDIT", "claim", "gradient_match", "registered_item"]
