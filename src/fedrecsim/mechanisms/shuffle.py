"""Privacy accounting for shuffled local reports, and basic composition.

Minto et al. send ε-LDP reports through a proxy network that strips metadata and shuffles them
(Sec. 3.1.2) and cite amplification by shuffling (Erlingsson et al. 2019) without a number. We
account it with Feldman, McMillan and Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal
Analysis of Privacy Amplification by Shuffling" (FOCS 2021, arXiv:2012.12803), Theorem 3.1: if each
of n users applies an ε0-DP local randomizer (chosen adaptively or not) and the n outputs are
uniformly shuffled, the output is (ε, δ)-DP for δ in (0, 1). Two closed forms of its bound are in use.
With

    a = 8·sqrt(e^ε0·log(4/δ) / n),   c = 8·e^ε0 / n,

(A) the form in which the theorem is usually quoted, under ε0 <= log(n / (16·log(2/δ))):

    ε = log(1 + (e^ε0 − 1)/(e^ε0 + 1) · (a + c));

(B) the form of the authors' companion code (github.com/apple/ml-shuffling-amplification,
``computeamplification.closedformanalysis``), under ε0 <= log(n / (16·log(4/δ))):

    ε' = log(1 + a + c),   ε = log(1 + (1 − e^−ε0)/(1 + e^−(ε0 + ε')) · (a + c)).

We use (B), the conservative one. Its factor is never below (A)'s -- ε' >= 0, so
(1 − e^−ε0)/(1 + e^−ε0·e^−ε') >= (1 − e^−ε0)/(1 + e^−ε0) = (e^ε0 − 1)/(e^ε0 + 1) -- and its
precondition implies (A)'s (log(4/δ) > log(2/δ)), so the ε we report is guaranteed by either
reading of the theorem. The two differ where a + c is not small: at n = 10,000, ε0 = 2.5,
δ = 3.3e-9, (A) gives 0.738 and (B) 0.761; as n grows both tend to the same value. We did not have
the theorem's text to decide which form it prints, and no figure here was checked against the paper
or run against the companion code: the tests check our arithmetic against (B) worked out by hand.

The theorem counts one report per user. With k reports per user per epoch, a conservative account
treats the epoch as k shuffles of n reports and composes them (`compose_approximate`).
"""

from __future__ import annotations

import dataclasses
import math

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks


@dataclasses.dataclass(frozen=True)
class ShuffleBound:
    """A central (ε, δ)-DP guarantee for n shuffled ε0-LDP reports.

    Invariant: ``(epsilon, delta)`` is always a valid guarantee and ``epsilon <= epsilon0``. When the
    theorem does not apply, or its closed form does not beat ε0 (possible near the boundary for small
    ε0), the result is the local guarantee (ε0, 0): the shuffled reports are a post-processing of the
    ε0-LDP reports, which are ε0-DP with respect to any one user's data.

    Attributes:
        epsilon: The ε of the guarantee.
        delta: The δ of the guarantee: the requested δ when amplified, else 0.0.
        applicable: Whether the precondition ε0 <= log(n / (16·log(4/δ))) of the form used holds.
        condition: The precondition with its numbers, for logs and ``result.json``.
    """

    epsilon: float
    delta: float
    applicable: bool
    condition: str


def shuffle_epsilon(epsilon0: float, n: int, delta: float) -> ShuffleBound:
    """The amplified guarantee of shuffling n ε0-LDP reports: form (B) of Theorem 3.1 (module docstring).

    Args:
        epsilon0: The local randomizer's ε0 > 0 (for Minto et al.'s Algorithm 1, the per-report ε).
        n: Number of users whose reports are shuffled together, >= 1.
        delta: The δ in (0, 1) to spend.

    Returns:
        A `ShuffleBound`; see its invariant.

    Raises:
        ConfigError: A parameter is out of range.
    """
    eps0 = _checks.positive(epsilon0, "shuffle_epsilon(epsilon0)")
    users = _checks.integer(n, "shuffle_epsilon(n)", 1)
    dp_delta = _checks.open_unit(delta, "shuffle_epsilon(delta)")
    threshold = math.log(users / (16.0 * math.log(4.0 / dp_delta)))
    applicable = eps0 <= threshold
    condition = (
        f"epsilon0 = {eps0:.6g} {'<=' if applicable else '>'} "
        f"log(n / (16 log(4/delta))) = {threshold:.6g} for n = {users}, delta = {dp_delta:.3g}"
    )
    if not applicable:
        return ShuffleBound(eps0, 0.0, False, condition)
    growth = math.exp(eps0)
    spread = 8.0 * math.sqrt(growth * math.log(4.0 / dp_delta) / users) + 8.0 * growth / users
    # -expm1(-eps0) = 1 - e^-eps0; e^-(eps0 + eps') = e^-eps0 / (1 + spread).
    factor = -math.expm1(-eps0) / (1.0 + math.exp(-eps0) / (1.0 + spread))
    amplified = math.log1p(factor * spread)
    if amplified >= eps0:
        return ShuffleBound(
            eps0, 0.0, True, f"{condition}; the closed form {amplified:.6g} does not improve on epsilon0"
        )
    return ShuffleBound(amplified, dp_delta, True, condition)


def compose_pure(epsilon: float, times: int) -> float:
    """Basic composition of ``times`` ε-DP releases: ``times·ε``-DP.

    Minto et al. use it twice: k reports per user per epoch give kε-LDP (Theorem 3 and the
    paragraph after it), and T epochs give T·k·ε.

    Raises:
        ConfigError: ``epsilon`` < 0 or ``times`` < 0.
    """
    eps = _checks.non_negative(epsilon, "compose_pure(epsilon)")
    count = _checks.integer(times, "compose_pure(times)", 0)
    return count * eps


def compose_approximate(epsilon: float, delta: float, times: int) -> tuple[float, float]:
    """Basic composition of ``times`` (ε, δ)-DP releases: (times·ε, times·δ), δ capped at 1.

    A δ of 1 is vacuous; the cap keeps the result a probability.

    Raises:
        ConfigError: ``epsilon`` < 0, ``delta`` outside [0, 1], or ``times`` < 0.
    """
    eps = _checks.non_negative(epsilon, "compose_approximate(epsilon)")
    dp_delta = _checks.non_negative(delta, "compose_approximate(delta)")
    if dp_delta > 1.0:
        raise ConfigError("compose_approximate(delta)", f"must be <= 1, got {dp_delta!r}")
    count = _checks.integer(times, "compose_approximate(times)", 0)
    return count * eps, min(1.0, count * dp_delta)
