"""How much range the fixed-point ring needs: a bound on every S2/S3 aggregate at a stated tail probability.

The recommender decodes each item's unmasked aggregate A_j (`recommender`); if A_j left the ring's signed
range it wrapped, and decodes as a huge value of the opposite sign. So before a run starts the ring is
checked against a bound B that every element of one aggregate stays below except with probability
``TAIL_PROBABILITY`` = 1e-12 per aggregate (an item's d values in one iteration; a 10,000-iteration run
over 1682 items then expects fewer than 2e-5 wrapped aggregates). The derivation:

    A_j = w sum_c grad_c + w R_j + E_j      (S3 with the normalized step; w = 1 elsewhere)

- the weight w = k_j / k'_j <= k_j <= n_max, the most raters of any item in the training data (k_j counts
  raters the recommender has seen; k'_j >= 1 of them are served), so ``w_max = n_max`` in S3 with the
  normalized step and 1 otherwise;
- gradients: each element of -2 e_ij u_i has |.| <= g = 2 (R_abs + V) because ||u_i|| <= 1 and
  |e_ij| <= |r_ij| + ||v_j||, with R_abs = max(|min_r|, |max_r|) and V = ``ITEM_NORM_BOUND`` = 64 -- an
  assumption, not a theorem (the recommender does not bound ||v_j||); the sum holds at most n_g such
  terms times w: w k'_j <= k_j <= n_max in S3 (normalized) and S2, min(K, n_max) in S3 with raw sums.
  With the paper's eps the noise term below is hundreds of times larger, and the ``ring_overflow``
  monitor still checks every aggregate, so a broken assumption is reported, never hidden;
- noise: R_j, the sum of the contributors' rho~ pieces, is b sqrt(2 H n_j / k'_j) Z with n_j <= k'_j,
  so |R_j| is stochastically below |Laplace(b)|; E_j = eta_j is Laplace(b) (fewer pieces only shrink
  it). P(|Laplace(b)| > x) = exp(-x / b), so with x = b ln(2 d / p) each of |R_j[l]| > x and
  |E_j[l]| > x has probability p / (2d), an element exceeds g n_g + (w_max + 1) x with probability at
  most p / d, and one of the d elements of the aggregate with probability at most p.

    B = n_g * 2 (R_abs + V) + (w_max + 1) * b * ln(2 d / p),    b = 2 Delta sqrt(d) / eps

Every single value a user encodes (w (grad + rho~-piece), an eta-piece) is within B as well: a piece is
Laplace(b / sqrt(k)) and one user's weighted gradient is at most w g <= n_max g. Item vectors are not
covered (they are bounded by the model, not the noise); the monitor counts any that do not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError
from ...mechanisms.ring import Ring

#: p: the probability that one aggregate (an item's d values in one iteration) exceeds the bound.
TAIL_PROBABILITY = 1e-12
#: V: the item-vector norm the gradient term assumes (module docstring).
ITEM_NORM_BOUND = 64.0


@dataclass(frozen=True)
class Headroom:
    """The bound B of the module docstring and what it is made of.

    Attributes:
        bound: B, what every element of an aggregate stays below with probability >= 1 - ``tail``.
        gradient_term: n_g * 2 (R_abs + V).
        noise_term: (w_max + 1) * b * ln(2 d / p).
        weight_max: w_max, the largest weight k_j / k'_j a contribution can carry.
        tail: p, per aggregate.
    """

    bound: float
    gradient_term: float
    noise_term: float
    weight_max: float
    tail: float = TAIL_PROBABILITY


def aggregate_headroom(
    *, scale: float, d: int, rating_range: tuple[float, float], max_raters: int, max_users: int, weighted: bool, scenario: str,
) -> Headroom:
    """B for a run (module docstring).

    Args:
        scale: b, the Laplace scale of eta and rho~.
        d: the latent dimension.
        rating_range: (min_r, max_r).
        max_raters: n_max, the most raters of any item in the training data.
        max_users: K, the users served per iteration at most (S3).
        weighted: whether S3 users weight their contributions by k_j / k'_j (S3 with the normalized step).
        scenario: ``S2`` or ``S3``.
    """
    rating_abs = max(abs(rating_range[0]), abs(rating_range[1]))
    weight_max = float(max_raters) if weighted else 1.0
    terms = max_raters if scenario == "S2" or weighted else min(max_users, max_raters)
    gradient_term = terms * 2.0 * (rating_abs + ITEM_NORM_BOUND)
    noise_term = (weight_max + 1.0) * scale * math.log(2.0 * d / TAIL_PROBABILITY)
    return Headroom(gradient_term + noise_term, gradient_term, noise_term, weight_max)


def frac_bits_for(bits: int, bound: float) -> int:
    """The most fractional bits a ``bits``-wide ring can have and still hold ``bound`` (0 if none can)."""
    for frac_bits in range(bits - 2, 0, -1):
        if Ring(bits, frac_bits).max_abs >= bound:
            return frac_bits
    return 0


def check_ring(ring: Ring, headroom: Headroom, key: str, context: str) -> None:
    """Refuse a ring whose range is below the bound, saying which rings would hold it.

    Args:
        ring: the configured ring.
        headroom: the bound it must hold.
        key: the key path to name (``protocol.frac_bits`` if the user set it, else ``protocol.ring_bits``).
        context: the figures the bound was derived from, for the message.

    Raises:
        ConfigError: ``ring.max_abs < headroom.bound``.
    """
    if ring.max_abs >= headroom.bound:
        return
    options = []
    for bits in (32, 64):
        frac_bits = frac_bits_for(bits, headroom.bound)
        if frac_bits:
            options.append(f"ring_bits = {bits} with frac_bits <= {frac_bits}")
    raise ConfigError(
        key,
        f"a {ring.bits}-bit ring with {ring.frac_bits} fractional bits holds |x| <= {ring.max_abs:.4g}, but the aggregates "
        f"need |x| <= {headroom.bound:.4g} (exceeded with probability <= {headroom.tail:g} per aggregate; {context}); "
        + ("use " + " or ".join(options) if options else "no 32- or 64-bit ring holds that; raise epsilon"),
    )


__all__ = ["ITEM_NORM_BOUND", "TAIL_PROBABILITY", "Headroom", "aggregate_headroom", "check_ring", "frac_bits_for"]
