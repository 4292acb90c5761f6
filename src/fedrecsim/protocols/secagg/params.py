"""What one secure-aggregation session is: its stages and its parameters.

The stages are Bonawitz et al. 2017's rounds 0-4 without round 3 (ConsistencyCheck), which only the
actively secure variant needs; the server here is honest-but-curious. A user that crashes "at" a stage
sends nothing from that stage on.

The parameters are public: the server and every user know them from the scenario (Bonawitz et al. give
every party n and t before the protocol starts). The server draws a session's graph and sends each user
its neighbours and t (`messages.Setup`); a user checks them against these parameters (`setup_problem`)
and takes no part in a session they contradict -- a server that lowered t, or gave a user a neighbourhood
the parameters do not allow (too few users, users that do not exist, itself), cannot make a user share
its secrets with fewer holders than the threshold the parameters promise. The check is the user's own
view: it cannot see what the server told the others (that is the active variant's ConsistencyCheck,
omitted, and its signed keys).

How safe a sparse graph is depends on how many users the adversary holds and how many drop out
(`parameters`): the parameters carry the fractions assumed (``corrupt_fraction``, ``dropout_fraction``) and
the targets (``security_bits``, ``correctness_bits``). With ``sizing = "log2"`` (the default, as before) k
and t come from ``neighbours`` and ``threshold`` and `security_report` states how far they fall short;
with ``sizing = "secure"`` `parameters.find_parameters` chooses k and t for the population once, and every
session uses them (a session of k + 1 users or fewer is complete, with t capped at its size).
"""

from __future__ import annotations

import enum
import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ...errors import ConfigError
from ...mechanisms.ring import Ring
from . import graph as graphs
from .parameters import CORRECTNESS_BITS, SECURITY_BITS, GraphSecurity, find_parameters, security_level

if TYPE_CHECKING:
    from .roles import Aggregate


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
        population: the users a session may be over: user indices 0 .. population - 1 (the calling
            protocol's users); 0 leaves it unstated (any index, any session size).
        min_users: the fewest users a session may be over (at most the population); 0, the default,
            means the threshold t(population) of a session over the whole population -- Bonawitz et
            al.'s rule that a session goes on while t of the n users remain -- or 2 where the population
            is unstated (`session_floor`). A user refuses a setup whose neighbourhood implies a smaller
            session: in a session of one user the sum is its input, and in a session of few, few shares
            rebuild its secrets -- so a server could otherwise read a user's input by setting it up
            (nearly) alone.
        sizing: ``log2`` -- k is ``neighbours`` (0: 2 ceil(log2 n)) and t follows ``threshold`` -- or
            ``secure``: k and t are `parameters.find_parameters`'s for the population (sparse graph and a
            stated population only; ``neighbours`` must be 0 and ``threshold`` is not used).
        corrupt_fraction: gamma, the fraction of a session's users the adversary (with the server) holds.
        dropout_fraction: delta, the fraction of a session's users that drop out.
        security_bits: sigma: the adversary learns more than the sum with probability at most 2^-sigma.
        correctness_bits: eta: a session aborts for want of shares with probability at most 2^-eta.
        found: what `find_parameters` chose (``sizing = "secure"``), else None; derived, not compared.
    """

    ring: Ring = field(default_factory=lambda: Ring(32, 16))
    graph: Literal["complete", "sparse"] = "complete"
    neighbours: int = 0
    threshold: float = 0.5
    ideal: bool = False
    stage_timeout_s: float = 10.0
    population: int = 0
    min_users: int = 0
    sizing: Literal["log2", "secure"] = "log2"
    corrupt_fraction: float = 0.05
    dropout_fraction: float = 0.05
    security_bits: float = SECURITY_BITS
    correctness_bits: float = CORRECTNESS_BITS
    found: GraphSecurity | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.graph not in ("complete", "sparse"):
            raise ConfigError("secagg.graph", f"must be 'complete' or 'sparse', got {self.graph!r}")
        if self.neighbours < 0:
            raise ConfigError("secagg.neighbours", f"must be >= 0, got {self.neighbours}")
        if not 0.0 <= self.threshold < 1.0:
            raise ConfigError("secagg.threshold", f"must lie in [0, 1), got {self.threshold}")
        if not self.stage_timeout_s > 0:
            raise ConfigError("secagg.stage_timeout_s", f"must be > 0, got {self.stage_timeout_s}")
        if self.population < 0:
            raise ConfigError("secagg.population", f"must be >= 0, got {self.population}")
        if self.min_users < 0:
            raise ConfigError("secagg.min_users", f"must be >= 0, got {self.min_users}")
        for name in ("corrupt_fraction", "dropout_fraction"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"secagg.{name}", f"must lie in [0, 1), got {getattr(self, name)}")
        for name in ("security_bits", "correctness_bits"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"secagg.{name}", f"must be > 0, got {getattr(self, name)}")
        if self.sizing not in ("log2", "secure"):
            raise ConfigError("secagg.sizing", f"must be 'log2' or 'secure', got {self.sizing!r}")
        if self.sizing == "secure":
            object.__setattr__(self, "found", self._find())

    def _find(self) -> GraphSecurity:
        """`find_parameters` for the population, or a `ConfigError` naming what stands in its way."""
        if self.graph != "sparse":
            raise ConfigError("secagg.sizing", "'secure' chooses a sparse graph's k and t: set graph = 'sparse'")
        if self.neighbours:
            raise ConfigError("secagg.neighbours", f"'secure' sizing chooses k: leave neighbours = 0, got {self.neighbours}")
        if self.population < 3:
            raise ConfigError("secagg.population", f"'secure' sizing needs a population of 3 or more users, got {self.population}")
        try:
            return find_parameters(
                self.population, self.corrupt_fraction, self.dropout_fraction, self.security_bits, self.correctness_bits
            )
        except ValueError as error:
            raise ConfigError("secagg.corrupt_fraction", f"with dropout_fraction: {error}") from None

    def _fixed_degree(self) -> int:
        """The degree the parameters fix (the finder's k, or ``neighbours``); 0 leaves it to the log2 rule."""
        return self.found.k if self.found is not None else self.neighbours

    def degree(self, n: int) -> int:
        """k, the number of neighbours each of ``n`` users has (n - 1 for the complete graph)."""
        if self.graph == "complete":
            return n - 1
        return min(n - 1, self._fixed_degree() or graphs.default_degree(n))

    def threshold_for(self, n: int) -> int:
        """t for ``n`` users: floor(theta (k + 1)) + 1 shares, at most k + 1."""
        return self.threshold_of_degree(self.degree(n))

    def threshold_of_degree(self, k: int) -> int:
        """t for users of nominal degree ``k``: floor(theta (k + 1)) + 1 shares, at most k + 1 (``sizing =
        "secure"``: the finder's t, at most k + 1)."""
        neighbourhood = k + 1
        if self.found is not None:
            return min(neighbourhood, self.found.t)
        return min(neighbourhood, math.floor(self.threshold * neighbourhood) + 1)

    def session_floor(self) -> int:
        """The fewest users a session may be over: `min_users` (at most the population), or if it is 0 the
        threshold of a session over the whole population (2 if the population is unstated)."""
        if self.min_users:
            return min(self.min_users, self.population) if self.population else self.min_users
        return self.threshold_for(self.population) if self.population else 2

    def sessions_of_degree(self, k: int) -> tuple[int, int] | None:
        """The session sizes n, from `session_floor` to `population` (if stated), whose nominal degree is
        ``k``: the interval (lowest, highest), or None if there is none. `degree` never decreases with n."""
        lowest = self.session_floor()
        # Unstated population: past k + 2 + 2^(k/2 + 1) users every degree rule gives more than k (or caps).
        highest = self.population if self.population else max(lowest, k + 2 + 2 ** (k // 2 + 1))
        first = self._first_session_of_degree(k, lowest, highest)
        if first is None or self.degree(first) != k:
            return None
        after = self._first_session_of_degree(k + 1, first, highest)
        return first, (highest if after is None else after - 1)

    def _first_session_of_degree(self, k: int, lowest: int, highest: int) -> int | None:
        """The smallest n in [lowest, highest] with degree(n) >= k, or None."""
        if lowest > highest or self.degree(highest) < k:
            return None
        while lowest < highest:
            middle = (lowest + highest) // 2
            if self.degree(middle) >= k:
                highest = middle
            else:
                lowest = middle + 1
        return lowest

    def setup_problem(self, me: int, neighbours: Sequence[int], t: int) -> str | None:
        """What in a setup -- user ``me``'s ``neighbours`` and the threshold ``t`` -- the public parameters
        do not allow, or None if an honest server could have sent it.

        The neighbours must be distinct users of the population in ascending order, ``me`` not among
        them. Their number is the user's degree (for a sparse graph of odd degree k, one more is the
        Harary graph's extra neighbour), which must be the nominal degree of a session of
        `session_floor` users or more (and at most `population`), and t must be that degree's threshold.
        """
        listed = neighbours.tolist() if isinstance(neighbours, np.ndarray) else [int(index) for index in neighbours]
        if not all(map(operator.lt, listed, listed[1:])):
            return f"neighbours in ascending order, each once, received {listed}"
        if me in listed:
            return f"neighbours other than user:{me} itself, received {listed}"
        if listed and (listed[0] < 0 or (self.population and listed[-1] >= self.population)):  # ascending: the ends
            strangers = [index for index in listed if index < 0 or (self.population and index >= self.population)]
            return f"neighbours among users 0 to {self.population - 1}, received {strangers}" if self.population else (
                f"neighbours with indices >= 0, received {strangers}"
            )
        return self._degree_problem(len(listed), t)

    def _degree_problem(self, count: int, t: int) -> str | None:
        """`setup_problem`'s verdict on a setup of ``count`` neighbours and threshold ``t``: a function of
        the parameters and these two numbers alone, so worked out once per triple (`_degree_verdict`):
        every user of a session asks the same."""
        return _degree_verdict(self, count, t)

    def security(self, n: int, k: int, t: int) -> GraphSecurity:
        """`parameters.security_level` of a session of ``n`` users, degree ``k``, threshold ``t``, at the
        fractions these parameters assume."""
        return security_level(n, k, t, self.corrupt_fraction, self.dropout_fraction)

    def security_report(self, session: Aggregate | None) -> dict[str, Any] | None:
        """What ``result.json``'s ``privacy`` says of a session's graph: `GraphSecurity.report` of its users,
        degree and threshold, the targets and whether it meets them; None without a session, and a note
        instead of the bounds for a session too small to have them (fewer than 3 users, or too few honest
        survivors at these fractions)."""
        if session is None:
            return None
        n, k, t = len(session.graph), session.degree, session.threshold
        targets = {"security_bits": self.security_bits, "correctness_bits": self.correctness_bits, "sizing": self.sizing}
        try:
            level = self.security(n, k, t)
        except ValueError as error:
            return {"users": n, "degree": k, "threshold": t, **targets, "note": str(error)}
        return {**level.report(), **targets, "meets_targets": level.meets(self.security_bits, self.correctness_bits)}



@functools.lru_cache(maxsize=64)
def _degree_verdict(params: SecAggParams, count: int, t: int) -> str | None:
    """What the parameters say of a user's setup of ``count`` neighbours and threshold ``t`` (None: allowed)."""
    degree = count
    fixed = params._fixed_degree()
    if params.graph == "sparse" and fixed % 2 and degree == fixed + 1:
        degree = params.neighbours  # odd k, odd n: the user opposite on the ring as well
    sessions = params.sessions_of_degree(degree)
    floor = params.session_floor()
    if sessions is None:
        size = f"{floor} to {params.population}" if params.population else f"at least {floor}"
        return f"the neighbours of a user in a session of {size} users, received {count} neighbours"
    if t != params.threshold_of_degree(degree):
        return f"t = {params.threshold_of_degree(degree)} for {count} neighbours, received t = {t}"
    return None


__all__ = ["SecAggParams", "Stage"]
