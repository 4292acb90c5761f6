"""What one secure-aggregation session is: its stages and its parameters.

The stages are Bonawitz et al. 2017's rounds 0-4 without round 3 (ConsistencyCheck), which only the
actively secure variant needs; the server here is honest-but-curious. A user that crashes "at" a stage
sends nothing from that stage on.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Literal

from ...errors import ConfigError
from ...mechanisms.ring import Ring
from . import graph as graphs


class Stage(enum.Enum):
    """The stages of a session, in order; ``value`` is the name errors and metrics use."""

    ADVERTISE_KEYS = "advertise_keys"
    SHARE_KEYS = "share_keys"
    MASKED_INPUT = "masked_input_collection"
    UNMASKING = "unmasking"


@dataclass(frozen=True)
class SecAggParams:
    """The parameters of a session, shared by the server and the users of a calling protocol.

    Attributes:
        ring: Z_{2^b} and its fixed-point encoding (`fedrecsim.mechanisms.ring.Ring`): inputs are ring
            elements; real vectors are encoded with ``ring.encode`` and the sum decoded with ``ring.decode``.
        graph: ``complete`` (Bonawitz et al. 2017) or ``sparse`` (Bell et al. 2020, SecAgg+).
        neighbours: the sparse graph's degree k; 0 means `graph.default_degree` (2 ceil(log2 n)).
        threshold: the fraction theta of a user's neighbourhood (k + 1 with itself) whose shares must
            meet to reconstruct its secrets: t = floor(theta (k + 1)) + 1, at most k + 1. theta = 1/2 asks
            a strict majority.
        ideal: run the ideal functionality instead of the cryptography (`ideal`): same messages, same
            bytes, the sum computed directly.
        stage_timeout_s: how long (virtual) the server waits for the replies of one stage.
    """

    ring: Ring = field(default_factory=lambda: Ring(32, 16))
    graph: Literal["complete", "sparse"] = "complete"
    neighbours: int = 0
    threshold: float = 0.5
    ideal: bool = False
    stage_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.graph not in ("complete", "sparse"):
            raise ConfigError("secagg.graph", f"must be 'complete' or 'sparse', got {self.graph!r}")
        if self.neighbours < 0:
            raise ConfigError("secagg.neighbours", f"must be >= 0, got {self.neighbours}")
        if not 0.0 <= self.threshold < 1.0:
            raise ConfigError("secagg.threshold", f"must lie in [0, 1), got {self.threshold}")
        if not self.stage_timeout_s > 0:
            raise ConfigError("secagg.stage_timeout_s", f"must be > 0, got {self.stage_timeout_s}")

    def degree(self, n: int) -> int:
        """k, the number of neighbours each of ``n`` users has (n - 1 for the complete graph)."""
        if self.graph == "complete":
            return n - 1
        return min(n - 1, self.neighbours or graphs.default_degree(n))

    def threshold_for(self, n: int) -> int:
        """t for ``n`` users: floor(theta (k + 1)) + 1 shares, at most k + 1."""
        neighbourhood = self.degree(n) + 1
        return min(neighbourhood, math.floor(self.threshold * neighbourhood) + 1)


__all__ = ["SecAggParams", "Stage"]
