"""Secure aggregation (Bonawitz et al. 2017; Bell et al. 2020, SecAgg+) as a building block.

A calling protocol sums vectors of Z_{2^b} over the network inside its own run:

- its server awaits ``aggregate(server, users, length, params, session=..., deadline=...)`` and gets an
  `Aggregate` (the sum over the surviving users U3, who survived each stage) or `SecAggAborted`;
- each of those users awaits ``participate(actor, x, params, deadline=...)`` with its input, ring
  elements of ``params.ring`` (real vectors: ``params.ring.encode``; the sum: ``params.ring.decode``).

``SecAggParams(graph="sparse")`` runs SecAgg+ over a random k-regular graph; ``SecAggParams(ideal=True)``
with an `IdealSum` handed to both sides sends the same bytes without the cryptography. ``parameters`` bounds
how often a sparse graph of degree k and threshold t fails (Bell et al.'s E1-E3) and finds the smallest safe
k; ``SecAggParams(sizing="secure")`` uses it and ``SecAggParams.security_report`` states a session's bounds.
``PROTOCOL`` (in ``protocol``) is the stand-alone ``secagg`` protocol of the scenario files.
"""

from ...errors import SecAggAborted
from .ideal import IdealSum, RowBlock
from .params import SecAggParams, Stage
from .roles import STAGE_WAITS, Aggregate, Contribution, aggregate, participate

__all__ = [
    "STAGE_WAITS", "Aggregate", "Contribution", "IdealSum", "RowBlock", "SecAggAborted", "SecAggParams", "Stage", "aggregate",
    "participate",
]
