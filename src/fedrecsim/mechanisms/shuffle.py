"""Privacy accounting for shuffled local reports, and basic composition.

Minto et al. send ε-LDP reports through a proxy network that strips metadata and shuffles them
(Sec. 3.1.2). Shuffling amplifies the local guarantee: Feldman, McMillan and Talwar, "Hiding Among the
Clones: A Simple and Nearly Optimal Analysis of Privacy Amplification by Shuffling" (FOCS 2021,
arXiv:2012.12803), Theorem 3.1, show that for n users each applying an ε0-DP local randomizer, δ in
(0, 1) and ε0 <= log(n / (16·log(2/δ))), the shuffled output is (ε, δ)-DP with

    ε <= log(1 + (e^ε0 − 1)/(e^ε0 + 1) · (8·sqrt(e^ε0·log(4/δ)) / sqrt(n) + 8·e^ε0 / n)).

The ε expression was checked against the closed-form analysis in the authors' companion code
(github.com/apple/ml-shuffling-amplification, ``closedformanalysis``). That code tests the slightly
stricter precondition ε0 <= log(n / (16·log(4/δ))); the log(2/δ) form used here is the theorem as it
is quoted, and the theorem's text itself was not available to check it against.

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
        applicable: Whether the precondition ε0 <= log(n / (16·log(2/δ))) of Theorem 3.1 holds.
        condition: The precondition with its numbers, for logs and ``result.json``.
    """

    epsilon: float
    delta: float
    applicable: bool
    condition: str


def shuffle_epsilon(epsilon0: float, n: int, delta: float) -> ShuffleBound:
    """The amplified guarantee of shuffling n ε0-LDP reports (Feldman et al. 2021, Theorem 3.1).

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
    threshold = math.log(users / (16.0 * math.log(2.0 / dp_delta)))
    applicable = eps0 <= threshold
    condition = (
        f"epsilon0 = {eps0:.6g} {'<=' if applicable else '>'} "
        f"log(n / (16 log(2/delta))) = {threshold:.6g} for n = {users}, delta = {dp_delta:.3g}"
    )
    if not applicable:
        return ShuffleBound(eps0, 0.0, False, condition)
    growth = math.exp(eps0)
    spread = 8.0 * math.sqrt(growth * math.log(4.0 / dp_delta) / users) + 8.0 * growth / users
    amplified = math.log1p(math.tanh(eps0 / 2.0) * spread)
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
