"""The public parameters of a DP-MF run: what every party knows before the first message.

The scenario, d, the ring (P = 2^b and the fixed point), the Laplace scale b = 2 Delta sqrt(d) / eps of
the noise (Delta = max_r - min_r is public: it is the rating scale), the hyper-parameters of the
updates, the number of items, and the public coin from which the rho~ pieces take their H_j(t).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...mechanisms.ring import Ring
from ...models.mf import MFHyper
from .noise import PublicCoin


@dataclass(frozen=True)
class PublicParameters:
    """Known to every party of the run.

    Attributes:
        scenario: ``S1``, ``S2`` or ``S3``.
        variant: ``protected`` or ``naive`` (S2's difference-attack target).
        mask_transport: ``explicit`` or ``seeded``.
        hyper: d, gamma, lambda, mu and the normalization of the steps.
        ring: the masking ring and its fixed point.
        scale: b, the Laplace scale every noise sum (eta_j, rho~_j(t)) is built to have.
        n_items: m.
        rating_range: (min_r, max_r), the public rating scale (Delta = max_r - min_r).
        coin: the public H_j(t) of the rho~ pieces.
    """

    scenario: str
    variant: str
    mask_transport: str
    hyper: MFHyper
    ring: Ring
    scale: float
    n_items: int
    rating_range: tuple[float, float]
    coin: PublicCoin

    @property
    def d(self) -> int:
        return self.hyper.d

    @property
    def delta(self) -> float:
        """Delta = max_r - min_r, the sensitivity of Theorem 1."""
        return self.rating_range[1] - self.rating_range[0]

    @property
    def protected(self) -> bool:
        return self.variant == "protected"


__all__ = ["PublicParameters"]
