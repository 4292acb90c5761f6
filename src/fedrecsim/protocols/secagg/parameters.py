"""How safe a SecAgg+ graph is: the failure probabilities of a degree k and a threshold t, and the smallest k
(with its t) that keeps them below 2^-sigma (security) and 2^-eta (correctness).

Model (Bell et al., "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead", CCS 2020: the three
graph properties they call E1-E3 -- few corrupted neighbours, the honest survivors connected, enough surviving
neighbours; the bounds below are derived here for this package's graph, not taken from the paper, whose
Erdos-Renyi graph they do not fit). A session has n users. The adversary is the server, honest-but-curious,
with c = floor(gamma n) users it has corrupted; d = floor(delta n) users drop out. C and D are fixed before the
server draws the graph (a static adversary: the server draws the graph as the protocol says), and are taken
disjoint, the worst case for the events below. The graph is `graph.harary`: the users placed on a ring in a
uniformly random order, each joined to the floor(k/2) nearest on either side (and, for odd k, to the user
opposite). Under a uniform relabelling the k ring positions around a user hold a uniformly random k-subset of
the other n - 1 users, so the number of corrupted (or dropped) neighbours of a user is *hypergeometric*,
H(n - 1, c, k): c marked among n - 1, k drawn. (Bell et al.'s Erdos-Renyi graph gives a binomial instead;
the Harary graph's exact hypergeometric is the tighter of the two.) A user's secrets are Shamir-shared over
its neighbourhood, any t shares rebuild them.

Three failures, each bounded by a union bound over the users, all in log space (`scipy.stats.hypergeom`'s
log pmf summed by a running logaddexp, exact to rounding; binomial coefficients by `scipy.special.gammaln`):

- E1, exposure: an honest user u has t or more corrupted neighbours. They hold t shares of both of u's
  secrets (b_u and s_u^SK), so the adversary can unmask y_u alone:
  P1 <= (n - c) Pr[H(n - 1, c, k) >= t].
- E2, disconnection: the graph of the honest survivors, G minus C u D, is disconnected. The adversary
  removes the masks of every pair with a corrupted or dropped user, so each connected part of the honest
  survivors' graph would reveal its own partial sum. On the ring, an edge spans at most h = floor(k/2)
  positions, so the survivors are connected unless the r = c + d removed positions hold two or more
  maximal runs of h or more consecutive positions (one such run leaves a path; two cut the ring in two).
  A run *starts* at j when j - 1 is kept and j .. j + h - 1 are removed; two starts are compatible for
  n - 2h - 1 positions j' given j, and then fix 2h removed and 2 kept positions, all distinct. With M the
  number of starts, Pr[M >= 2] <= E[M (M - 1) / 2]:
  P2 <= n (n - 2h - 1) / 2 * C(n - 2h - 2, r - 2h) / C(n, r), and P2 = 0 when r < 2h or k >= n - 1
  (the complete graph). For odd k the opposite chords are ignored (a bound: fewer edges, more cuts).
- E3, correctness: some user has fewer than t shares among the users that survive, so the server cannot
  rebuild its secret and the session aborts. Counting only the k neighbours' shares (not a surviving
  user's own) and d dropped among the other n - 1 (a dropped user sees d - 1: smaller):
  P3 <= n Pr[H(n - 1, d, k) >= k - t + 1].

Security failure P_sec = P1 + P2 (Bell et al.'s 2^-sigma, default sigma = 40); correctness failure P3
(their 2^-eta; default eta = 20 here, `CORRECTNESS_BITS`: an aborted session is visible and can be rerun, a
security failure is not). For odd k with odd n the Harary graph gives some users k + 1 neighbours: E1 is
evaluated at k + 1, E3 at k.

The finder (`find_parameters`): the smallest k >= 2 for which some t in 1 .. k meets both bounds, scanned
upwards one k at a time (so k - 1 never meets them); its t is the largest that meets the correctness bound --
the most shares an adversary needs, within the dropouts the session must survive. Past k = n - 2 the only
graph left is the complete one (k = n - 1, Bonawitz et al. 2017), where the events are certain or
impossible: it works iff c + 1 <= t <= n - 1 - d. No graph works when c + d >= n - 1.

The bounds are upper bounds on Bell et al.'s failure events, for the graph this package draws; they say
nothing about an adversary that picks C or D after seeing the graph (the active setting) or about
repeated sessions (each session draws a fresh graph; a run of R sessions fails with probability at most R
times the per-session bound).

Figures (`security_level` and `find_parameters`, issue 30): on ML-1M's n = 6,040 at gamma = delta = 5 %, the
log2 rule's k = 2 ceil(log2 n) = 26 with t = floor(0.5 * 27) + 1 = 14 fails with 2^-26.0 (security, all of
it E1) and 2^-21.5 (correctness), short of 2^-40; the finder's k = 32, t = 19 reaches 2^-42.9 and 2^-20.7.
At 1 % and 1 % the finder needs k = 16 (t = 10); at 10 % and 10 %, k = 51 (t = 29); for n = 100,000 at 5 %,
k = 36 (t = 21). The degree grows with the fractions and the bits far more than with n.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln
from scipy.stats import hypergeom

#: Bell et al.'s statistical security parameter sigma: the adversary learns more than the sum w.p. <= 2^-40.
SECURITY_BITS = 40.0
#: The correctness parameter eta: a session aborts for want of shares w.p. <= 2^-20.
CORRECTNESS_BITS = 20.0
_LOG2 = math.log(2.0)


@dataclass(frozen=True)
class GraphSecurity:
    """The failure bounds of a session of ``n`` users over a graph of degree ``k`` with threshold ``t``
    (module docstring), each as log2 of the probability (-inf: impossible; at most 0).

    Attributes:
        n, k, t: the session's users, degree and threshold.
        gamma, delta: the corrupted and dropped fractions assumed; ``corrupted`` = floor(gamma n) and
            ``dropped`` = floor(delta n) users.
        exposure_log2: E1, some honest user has t or more corrupted neighbours.
        disconnection_log2: E2, the honest survivors' graph is disconnected.
        security_log2: log2 (P1 + P2), the adversary learns more than the sum.
        correctness_log2: E3, some user's secret has fewer than t surviving shares.
    """

    n: int
    k: int
    t: int
    gamma: float
    delta: float
    corrupted: int
    dropped: int
    exposure_log2: float
    disconnection_log2: float
    security_log2: float
    correctness_log2: float

    def meets(self, security_bits: float, correctness_bits: float) -> bool:
        """Whether the failures are at most 2^-security_bits and 2^-correctness_bits."""
        return self.security_log2 <= -security_bits and self.correctness_log2 <= -correctness_bits

    def report(self) -> dict[str, Any]:
        """The bounds as ``result.json`` states them: log2 of each failure probability, None where it is 0."""
        return {
            "users": self.n, "degree": self.k, "threshold": self.t,
            "corrupt_fraction": self.gamma, "dropout_fraction": self.delta,
            "corrupted_users": self.corrupted, "dropped_users": self.dropped,
            "security_failure_log2": _finite(self.security_log2),
            "correctness_failure_log2": _finite(self.correctness_log2),
            "bound": "Bell et al. 2020's events E1-E3 for the randomly relabelled Harary graph, union bounds "
            "(fedrecsim.protocols.secagg.parameters); null: the failure cannot happen",
        }


def _finite(log2: float) -> float | None:
    return None if log2 == -math.inf else round(float(log2), 3)


def marked(n: int, fraction: float) -> int:
    """floor(fraction n), the users a fraction of ``n`` stands for (robust to 0.29 * 100 = 28.999...)."""
    return math.floor(round(fraction * n, 9))


def _tail_log(total: int, marked_count: int, draws: int) -> np.ndarray:
    """ln Pr[H(total, marked_count, draws) >= x] for x = 0 .. draws + 1 (the last is -inf)."""
    x = np.arange(draws + 1)
    log_pmf = hypergeom.logpmf(x, total, marked_count, draws)
    tails = np.logaddexp.accumulate(log_pmf[::-1])[::-1]
    return np.append(tails, -np.inf)


def _log_comb(a: int, b: int) -> float:
    if b < 0 or b > a:
        return -math.inf
    return float(gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1))


def _disconnection_log(n: int, k: int, removed: int) -> float:
    """ln of the E2 bound (module docstring) for ``removed`` users out of ``n`` on a ring of degree ``k``."""
    h = k // 2
    if k >= n - 1 or removed < 2 * h:
        return -math.inf
    if h == 0:
        return 0.0
    pairs = math.log(n) + math.log(n - 2 * h - 1) - _LOG2
    return min(0.0, pairs + _log_comb(n - 2 * h - 2, removed - 2 * h) - _log_comb(n, removed))


@dataclass(frozen=True)
class _Tails:
    """For one (n, k, c, d): ln P1 and ln P3 for every t = 0 .. k + 1, and ln P2."""

    exposure: np.ndarray
    correctness: np.ndarray
    disconnection: float


def _tails(n: int, k: int, corrupted: int, dropped: int) -> _Tails:
    complete = k >= n - 1
    k = min(k, n - 1)
    widest = k + 1 if (k % 2 and n % 2 and not complete) else k
    exposure = math.log(n - corrupted) + _tail_log(n - 1, corrupted, widest)[: k + 2]
    survive = _tail_log(n - 1, dropped, k)  # survive[j] = ln Pr[dropped neighbours >= j]
    t = np.arange(k + 2)
    correctness = math.log(n) + survive[np.clip(k - t + 1, 0, k + 1)]
    return _Tails(
        np.minimum(exposure, 0.0), np.minimum(correctness, 0.0), _disconnection_log(n, k, corrupted + dropped)
    )


def _check(n: int, gamma: float, delta: float) -> tuple[int, int]:
    if n < 3:
        raise ValueError(f"a session needs at least 3 users for a threshold to mean anything, got n = {n}")
    if not (0.0 <= gamma < 1.0 and 0.0 <= delta < 1.0):
        raise ValueError(f"the fractions must lie in [0, 1), got gamma = {gamma}, delta = {delta}")
    corrupted, dropped = marked(n, gamma), marked(n, delta)
    if corrupted + dropped >= n - 1:
        raise ValueError(
            f"{corrupted} corrupted and {dropped} dropped users of {n} leave fewer than 2 honest survivors: no graph "
            "and threshold can hide one input in their sum (gamma + delta must be below 1 - 2/n)"
        )
    return corrupted, dropped


def security_level(n: int, k: int, t: int, gamma: float, delta: float) -> GraphSecurity:
    """The failure bounds of a session of ``n`` users over the Harary graph of degree ``k`` (``k >= n - 1``:
    the complete graph) with threshold ``t``, if ``gamma`` n users are corrupted and ``delta`` n drop out.

    Raises:
        ValueError: n < 3, k < 1, t outside 1 .. k + 1, a fraction outside [0, 1), or too few honest survivors.
    """
    corrupted, dropped = _check(n, gamma, delta)
    degree = min(k, n - 1)
    if k < 1 or not 1 <= t <= degree + 1:
        raise ValueError(f"need k >= 1 and 1 <= t <= k + 1 = {degree + 1}, got k = {k}, t = {t}")
    tails = _tails(n, k, corrupted, dropped)
    exposure, correctness = float(tails.exposure[t]), float(tails.correctness[t])
    security = min(0.0, float(np.logaddexp(exposure, tails.disconnection)))
    return GraphSecurity(
        n, degree, t, gamma, delta, corrupted, dropped, exposure / _LOG2, tails.disconnection / _LOG2,
        security / _LOG2, correctness / _LOG2,
    )


@functools.lru_cache(maxsize=256)
def find_parameters(
    n: int, gamma: float, delta: float, security_bits: float = SECURITY_BITS, correctness_bits: float = CORRECTNESS_BITS
) -> GraphSecurity:
    """The smallest degree k, and its largest threshold t, whose failures are at most 2^-``security_bits`` and
    2^-``correctness_bits`` for ``n`` users of which ``gamma`` n are corrupted and ``delta`` n drop out
    (module docstring); k = n - 1 is the complete graph.

    Raises:
        ValueError: the inputs `security_level` refuses, or bits that are not positive.
    """
    if not (security_bits > 0 and correctness_bits > 0):
        raise ValueError(f"the bits must be > 0, got security {security_bits}, correctness {correctness_bits}")
    corrupted, dropped = _check(n, gamma, delta)
    security_log, correctness_log = -security_bits * _LOG2, -correctness_bits * _LOG2
    for k in [*range(2, n - 1), n - 1]:
        tails = _tails(n, k, corrupted, dropped)
        if tails.disconnection > security_log:
            continue
        t = np.arange(len(tails.exposure))
        secure = np.logaddexp(tails.exposure, tails.disconnection) <= security_log
        fine = secure & (tails.correctness <= correctness_log) & (t >= 1) & (t <= min(k, n - 1))
        if fine.any():
            return security_level(n, k, int(t[fine].max()), gamma, delta)
    raise AssertionError("unreachable: the complete graph meets both bounds when c + d < n - 1")  # pragma: no cover


__all__ = ["CORRECTNESS_BITS", "SECURITY_BITS", "GraphSecurity", "find_parameters", "marked", "security_level"]
