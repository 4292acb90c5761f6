"""What secure aggregation promises the server, for ``fedrecsim audit`` (`fedrecsim.audit`).

The claim (Bonawitz et al. 2017, honest-but-curious security): the server's view -- and that of fewer
than t users colluding with it -- can be simulated from the sum of the inputs of the users in U3 alone.
It is a simulation claim, not differential privacy: the sum itself is released exactly, and an adversary
who knows every other input reads the target's input off it. So the audit asks the part of the question
the claim answers: does the server's view reveal anything *about one user's input beyond the sum*? That
is epsilon = 0 (`claim`), and any event of the view that does not compute the sum must have the same
probability whichever input the target holds. The audit does not decode the sum: its distinguishers
use the messages as they arrive (a decoded sum would show the sum's own leak, which the claim does not
cover -- the honest reading of "the server learns nothing beyond the sum").

The relation is one user's input replaced by another's (`user_replaced`): the audit needs
``protocol.inputs = "ratings"`` so that a user's input is its training row (the default random inputs do
not depend on the data; `claim` refuses them). Real mode only: in ideal mode no masked input travels.

* ``masked_match`` (the server's): the server receives the target's masked input y (``secagg.masked``)
  and knows the two candidate rows; encoded in the ring they are x_in and x_out. The score is the number
  of ring words where y equals x_in minus the number where it equals x_out. With the masks, y is uniform
  in Z_{2^bits}^m whatever x is, so a word matches by chance with probability 2^-bits in both worlds;
  with zero masks y = x and the score separates the worlds (the "able to fail" test zeroes the PRG).
"""

from __future__ import annotations

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import user_replaced
from ...audit.spec import AuditSpec, Claim
from ...errors import ConfigError
from ...mechanisms.ring import Ring
from ...network.party import Role
from .messages import Masked


def claim(scenario: object) -> Claim:
    """epsilon = delta = 0 for the server's view beyond the sum (module docstring)."""
    config = scenario.protocol  # type: ignore[attr-defined]
    if config.inputs != "ratings":
        raise ConfigError(
            "protocol.inputs",
            'an audit needs inputs = "ratings" (each user sums its training row); random inputs do not depend on the data',
        )
    if config.mode != "real":
        raise ConfigError("protocol.mode", 'an audit of secure aggregation needs mode = "real": in ideal mode no masked input travels')
    return Claim(
        0.0, 0.0,
        "Bonawitz et al. 2017: the honest-but-curious server's view (with < t colluding users) is simulatable from the sum of "
        "U3's inputs -- nothing about one input beyond the sum",
    )


def masked_match(view: TrialView) -> np.ndarray:
    """``[sum over sessions of #(y == x_in) - #(y == x_out)]``, y the target's masked input."""
    config = view.scenario.protocol
    ring = Ring(config.bits, config.frac_bits)
    word = np.dtype(ring.dtype).newbyteorder("<")
    x_in, x_out = (ring.encode(row.dense(view.known.n_items))[0] for row in (view.target.present, view.target.absent))
    total = 0
    for body in view.target_bodies(Masked.KIND):
        y = np.frombuffer(body.masked, dtype=word)
        if y.size == x_in.size:
            total += int(np.count_nonzero(y == x_in)) - int(np.count_nonzero(y == x_out))
    return np.array([float(total)])


AUDIT = AuditSpec.for_observer(
    Role.SERVER, user_replaced("one user's input (its training row) replaced by another user's", unit="input"), claim,
    Distinguisher("masked_match", masked_match,
                  description="ring words of the target's masked input equal to its 'in' input minus those equal to its 'out' input"),
)

__all__ = ["AUDIT", "claim", "masked_match"]
