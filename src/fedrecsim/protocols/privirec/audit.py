"""What PriviRec's broadcasts reveal of one user's row, for ``fedrecsim audit`` (`fedrecsim.audit`).

The claim. Nicolas et al. claim confidentiality under an honest-but-curious threat model (Sec. 3.2 and
the proof of their confidentiality theorem): individual contributions are never revealed, only
aggregates, and the aggregated P~ "does not give information about users". That is a secure-aggregation
claim, not a differential-privacy one: there is no epsilon. `claim` is therefore ``epsilon = inf`` (no DP
claim, `fedrecsim.audit.Claim`) with that statement, and an audit measures what the aggregates leak.

The relation is one user's whole row added or removed (`one_user`'s worlds). Its default target is the
user holding the item of lowest degree in the training data (ties: the lower user index; ``audit.user``
names another): the leak is about such users. The observer is any receiver of the broadcasts -- every
user, or an outsider who gets them -- so the distinguishers apply to users (the audited party must be
another user than the target).

* ``broadcast_decoder``: the attack of `attacks.decode_profiles` on the broadcast V and P~
  (`attacks.broadcast_from_view`): the score is 1 when the target's "in" row is among the profiles the
  rows of degree-1 and degree-2 items decode exactly, else 0. It needs no knowledge of other users. In
  world "out" the row is absent, so the decoder claims it only if another user holds exactly those items.
* ``degree_residual``: the strongest adversary of a DP claim knows every other row (`TrialView.known`);
  the broadcast degrees V are then the known degrees plus the target's row, exactly. The score is how
  much closer V minus the known degrees is (L1) to the "in" row's indicator than to the "out" row's.

PriviRec-k broadcasts no P~; ``broadcast_decoder`` then scores 0 and only ``degree_residual`` applies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import Neighbouring, Target, one_user
from ...audit.spec import AuditSpec, no_dp_claim
from ...data.ratings import Ratings
from ...network.party import Role
from .attacks import broadcast_from_view, decode_profiles, dense_rows
from .messages import Degrees


#: No DP claim; the paper's confidentiality claim in words.
claim = no_dp_claim(
    "Nicolas et al.: no DP claim; confidentiality under honest-but-curious parties -- only aggregates (V, P~, Y_l) "
    "are revealed and they 'do not give information about users' (secure aggregation)"
)


def _choose_rare_holder(train: Ratings, settings: Any) -> Target:
    """`one_user`'s target; without ``audit.user``, the holder of the item of lowest positive degree."""
    if settings.user < 0:
        degrees = train.item_counts()
        held = np.flatnonzero(degrees > 0)
        if held.size:
            rarest = int(held[np.argmin(degrees[held])])
            holders = np.unique(train.users[train.items == rarest])
            settings = dataclasses.replace(settings, user=int(holders.min()))
    return one_user().choose(train, settings)


def broadcast_decoder(view: TrialView) -> np.ndarray:
    """``[1.0]`` when the profiles decoded from the broadcast V and P~ hold the target's "in" row, else ``[0.0]``."""
    broadcast = broadcast_from_view(view.envelopes, view.known.n_items)
    if broadcast is None:
        return np.array([0.0])
    degrees, item_item = broadcast
    profiles = decode_profiles(degrees, dense_rows(item_item), view.scenario.protocol.alpha)
    return np.array([1.0 if tuple(view.target.present.items) in set(profiles) else 0.0])


def degree_residual(view: TrialView) -> np.ndarray:
    """``[|r - x_out|_1 - |r - x_in|_1]``, r the broadcast degrees minus the degrees of the known rows."""
    bodies = view.bodies(Degrees.KIND)
    if not bodies:
        return np.array([0.0])
    residual = bodies[-1].degrees - view.known.item_counts()
    indicators = [row.dense(view.known.n_items, 1.0) for row in (view.target.present, view.target.absent)]
    return np.array([float(np.abs(residual - indicators[1]).sum() - np.abs(residual - indicators[0]).sum())])


AUDIT = AuditSpec(
    neighbouring=Neighbouring(
        "user", "add_remove", "one user's whole row added or removed (default: the holder of the rarest item)",
        _choose_rare_holder,
    ),
    claim=claim,
    distinguishers=(
        Distinguisher(
            "broadcast_decoder", broadcast_decoder, roles=(Role.USER,),
            description="whether the profiles the degree-1/2 rows of the broadcast P' decode hold the target's row",
        ),
        Distinguisher(
            "degree_residual", degree_residual, roles=(Role.USER,),
            description="how much closer the broadcast degrees minus the other rows' are to the target's row than to none",
        ),
    ),
)

__all__ = ["AUDIT", "broadcast_decoder", "claim", "degree_residual"]
