"""The ``[protocol]`` table of DP-MF: which scenario of the paper, its privacy budget, ring and defaults.

Defaults are the paper's (Sec. 5): gamma = 2^-5, lambda = mu = 0.001, d = 50, K = 100 (MovieLens; the
paper uses 1000 for Netflix). The paper gives no value for k, the number of users that pre-share each
item's noise in S3; 10 is our choice. The paper picks one set of k online users that pre-shares the noise
of every item (``sharers = "common"``, the default); ``"per_item"`` draws k users per item instead (see
`recommender` for what that changes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...config import param
from ...errors import ConfigError
from ...mechanisms.ring import Ring
from ...models.mf import MFHyper
from .headroom import frac_bits_for

#: Fractional bits when ``frac_bits`` is not set: 2^-32 resolution with 2^31 of integer range in a 64-bit
#: ring; 2^-16 resolution with 2^15 of range in a 32-bit ring. Whether that range is enough depends on eps,
#: Delta, d, K and the data (`headroom`); a run whose ring cannot hold its aggregates is refused.
DEFAULT_FRAC_BITS = {64: 32, 32: 16}

_NOISE_BY_SCENARIO = {"S1": "theorem1", "S2": "laplace", "S3": "laplace"}


@dataclass(frozen=True)
class DPMFConfig:
    """Validated ``[protocol]`` keys of ``run.protocol = "dpmf"`` (see each field's doc)."""

    scenario: Literal["S1", "S2", "S3"] = param("S3", doc="S1 trusted recommender | S2 static users | S3 dynamic users")
    epsilon: float = param(0.1, gt=0, doc="the privacy budget of the published item profiles V")
    max_users: int = param(100, ge=1, doc="S3: K, users served per iteration at most (chosen at random)")
    k_presharing: int = param(10, ge=1, doc="S3: k, online users that pre-share each item's noise eta_j")
    sharers: Literal["common", "per_item"] = param("common", doc="S3: one set of k sharers for every item (paper) | k per item")
    presharing_attempts: int = param(5, ge=1, doc="S3: pre-sharing attempts before iteration 1 (items still short are retried before each iteration)")
    ring_bits: Literal[32, 64] = param(64, doc="P = 2^ring_bits, the modulus of the masking ring")
    frac_bits: int | Literal["auto"] | None = param(
        None, ge=1,
        doc='fixed-point fractional bits (default: 32 in a 64-bit ring, 16 in a 32-bit one); "auto": the most the ring\'s '
        "headroom allows for this scenario and data (S2/S3; privacy.ring.frac_bits records the value)",
    )
    mask_transport: Literal["explicit", "seeded"] = param("explicit", doc="psi as explicit masks (paper) or a PRG key")
    noise: Literal["theorem1", "laplace"] | None = param(None, doc="S1 noise; S2/S3 can only distribute Lemma 1's laplace (default: theorem1 for S1)")
    variant: Literal["protected", "naive"] = param("protected", doc="S2 only: naive = grad + eta-piece straight to the recommender")
    d: int = param(50, ge=1, doc="latent dimension")
    gamma: float = param(2.0**-5, gt=0, doc="gain factor (learning rate)")
    lam: float = param(0.001, ge=0, doc="user regularization lambda")
    mu: float = param(0.001, ge=0, doc="item regularization mu")
    normalize: bool = param(True, doc="per-user / per-item-mean step, applied to noise and gradient alike")
    eval_every: int = param(1, ge=1, doc="measure the accuracy metrics every this many rounds (and after the last)")
    baseline_rounds: int = param(0, ge=0, doc="rounds of the unprotected MF baseline; 0 = as many as the run")
    replay: bool = param(True, doc="also replay the run without any noise (noiseless_err_mean)")
    paper_baseline: bool = param(
        True, doc="also train the paper's baseline, 100 iterations of unprotected MF (paper_baseline_err_mean, paper_err_increase)"
    )
    check_invariants: bool = param(True, doc="verify the invariant monitors every iteration")

    def __post_init__(self) -> None:
        if isinstance(self.frac_bits, int) and self.frac_bits >= self.ring_bits - 1:
            raise ConfigError(
                "protocol.frac_bits",
                f"must be < ring_bits - 1 = {self.ring_bits - 1} (a sign and an integer bit), got {self.frac_bits}",
            )
        if self.scenario != "S1" and self.noise == "theorem1":
            raise ConfigError(
                "protocol.noise",
                f"{self.scenario} distributes the noise in pieces (Theorem 2), which only sum to Lemma 1's "
                "per-element Laplace noise; use noise = 'laplace' (or leave it unset)",
            )
        if self.variant == "naive" and self.scenario != "S2":
            raise ConfigError("protocol.variant", f"the naive variant is S2's difference-attack target; scenario is {self.scenario}")

    @property
    def mechanism(self) -> str:
        """The noise actually drawn: ``theorem1`` or ``laplace``."""
        return self.noise if self.noise is not None else _NOISE_BY_SCENARIO[self.scenario]

    @property
    def ring(self) -> Ring:
        """The ring of ``ring_bits`` and ``frac_bits`` (the default for ``ring_bits`` when unset or "auto":
        an "auto" run's ring comes from `ring_holding`)."""
        bits = self.frac_bits if isinstance(self.frac_bits, int) else DEFAULT_FRAC_BITS[self.ring_bits]
        return Ring(self.ring_bits, bits)

    def ring_holding(self, bound: float) -> Ring:
        """The run's ring when its aggregates need ``|x| <= bound`` (`headroom`): with ``frac_bits = "auto"``
        the most fractional bits a ``ring_bits`` ring can have and still hold ``bound`` (1 when none can:
        the headroom check then refuses it, naming the rings that would do); otherwise `ring`."""
        if self.frac_bits != "auto":
            return self.ring
        return Ring(self.ring_bits, max(1, frac_bits_for(self.ring_bits, bound)))

    @property
    def hyper(self) -> MFHyper:
        return MFHyper(d=self.d, gamma=self.gamma, lam=self.lam, mu=self.mu, normalize=self.normalize)


__all__ = ["DEFAULT_FRAC_BITS", "DPMFConfig"]
