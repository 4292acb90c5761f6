"""Availability: who is online when, who crashes mid-round, and how long local computation takes.

Three independent concerns, each a small policy object that the population and the runner consult:

- `Churn` decides membership: who is online at the start (`Churn.initial_online`), who joins and leaves
  between rounds (`Churn.between_rounds`, e.g. `BernoulliChurn`), and, for models in continuous virtual
  time, the lazily generated changes up to a horizon (`Churn.timeline`, e.g. `MarkovChurn`, `Trace`).
- `MidRoundDropout` decides which online parties crash in a round after receiving its request.
- `ComputeTime` gives each party's local compute time in a round (stragglers).

Determinism: the policies hold no state between calls. Every answer is a function of
``(seed, round, party)`` only, so it never depends on call order, on which rounds were asked about before,
or even on which *other* parties are listed. To get that cheaply, per-round draws are addressed by party
index: for each role present, one generator ``generator(seed, stream, ROUND, round_index, role.code)``
draws ``max_index + 1`` numbers and party ``role:i`` takes number ``i``. Besides order independence this
gives common random numbers across scenarios: at the same seed, raising a probability only ever adds
parties to the set it selects, which keeps churn and dropout studies comparable point to point.

Generator keys (the first id after the stream tags the use, so no two uses can share a spawn key):

====================================  =========================================================
``(AVAILABILITY, INITIAL, role)``     `BernoulliChurn.initial_online`
``(AVAILABILITY, ROUND, r, role)``    `BernoulliChurn.between_rounds` for round ``r``
``(AVAILABILITY, PARTY, role, i)``    `MarkovChurn`: party ``role:i``'s own on/off process
``(DROPOUT, ROUND, r, role)``         `MidRoundDropout.crashes` for round ``r``
``(STRAGGLER, INITIAL, role)``        `LogNormalCompute.is_slow` (fixed for the whole run)
``(STRAGGLER, ROUND, r, role)``       `LogNormalCompute.delays` for round ``r``
====================================  =========================================================
"""

from __future__ import annotations

import abc
import csv
import heapq
import math
import numbers
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError, DatasetError
from ..seeding import Stream, generator
from .party import Party

# Sub-stream tags: the first id after the stream (see the table in the module docstring).
_INITIAL, _ROUND, _PARTY = 0, 1, 2

_COMPUTE_KEY = "availability.compute"
_TRACE_HEADER = ("party", "online_from_s", "online_until_s")


class Transition(NamedTuple):
    """At virtual time ``time_s`` (seconds from the start of the run), ``party`` goes online or offline."""

    time_s: float
    party: Party
    online: bool


def _real(value: object, key_path: str) -> float:
    """``value`` as a float, refusing booleans and non-numbers; NaN is refused by the range checks."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(key_path, f"must be a number, got {value!r}")
    return float(value)


def _probability(value: object, key_path: str) -> float:
    number = _real(value, key_path)
    if not 0.0 <= number <= 1.0:
        raise ConfigError(key_path, f"must be in [0, 1], got {value!r}")
    return number


def _positive(value: object, key_path: str, unit: str = "") -> float:
    number = _real(value, key_path)
    if not (math.isfinite(number) and number > 0):
        raise ConfigError(key_path, f"must be a finite number > 0{unit}, got {value!r}")
    return number


def _round(round_index: int) -> int:
    if isinstance(round_index, bool) or not isinstance(round_index, numbers.Integral) or round_index < 0:
        raise ValueError(f"round_index must be a non-negative integer, got {round_index!r}")
    return int(round_index)


def _horizon(horizon_s: float) -> float:
    if isinstance(horizon_s, bool) or not isinstance(horizon_s, numbers.Real) or not 0 <= horizon_s < math.inf:
        raise ValueError(f"horizon_s must be a finite number of seconds >= 0, got {horizon_s!r}")
    return float(horizon_s)


_index_of = operator.itemgetter(1)


class PartyList(tuple):  # type: ignore[type-arg]
    """An immutable sequence of parties that carries their indices and role codes as arrays.

    The availability models address every draw by party index; a population passes the same (large)
    list of parties every round, so computing the index arrays once here keeps a round of churn at
    Netflix scale (191,668 users) a few numpy calls instead of a pass over the parties in Python.
    """

    indices: np.ndarray
    codes: np.ndarray

    def __new__(cls, parties: Iterable[Party]) -> PartyList:
        self = super().__new__(cls, parties)
        self.indices = np.fromiter(map(_index_of, self), dtype=np.int64, count=len(self))
        self.codes = np.fromiter((party.role.code for party in self), dtype=np.int64, count=len(self))
        return self


def _listed(parties: Iterable[Party]) -> Sequence[Party]:
    """``parties`` as an indexable sequence; a set or other iterable is taken in sorted order."""
    return parties if isinstance(parties, (list, tuple)) else sorted(parties)


def _per_party(
    seed: int,
    stream: Stream,
    ids: tuple[int, ...],
    parties: Sequence[Party],
    draw: Callable[[np.random.Generator, int], np.ndarray],
) -> np.ndarray:
    """One number per listed party (aligned with ``parties``) that depends on ``(seed, stream, ids, party)``
    only: per role, ``draw(generator(seed, stream, *ids, role.code), max_index + 1)[party.index]``."""
    listed = parties if isinstance(parties, PartyList) else PartyList(parties)
    indices, codes = listed.indices, listed.codes
    if codes.size and codes.min() == codes.max():
        # The common case (only users): no per-role split.
        return draw(generator(seed, stream, *ids, int(codes[0])), int(indices.max()) + 1)[indices]
    values = np.empty(len(parties))
    for code in np.unique(codes).tolist():
        mask = codes == code
        selected = indices[mask]
        values[mask] = draw(generator(seed, stream, *ids, code), int(selected.max()) + 1)[selected]
    return values


def _uniforms(seed: int, stream: Stream, ids: tuple[int, ...], parties: Sequence[Party]) -> np.ndarray:
    return _per_party(seed, stream, ids, parties, lambda rng, size: rng.random(size))


def _selected(parties: Sequence[Party], mask: np.ndarray) -> frozenset[Party]:
    return frozenset(parties[position] for position in np.flatnonzero(mask).tolist())


class Churn(abc.ABC):
    """A membership model: who is online at the start, between rounds and over continuous time.

    Round-based models override `between_rounds`; continuous-time models override `timeline`. The
    defaults mean "no change". ``parties`` is the whole population; parties outside it are ignored.
    """

    @abc.abstractmethod
    def initial_online(self, seed: int, parties: Sequence[Party]) -> frozenset[Party]:
        """The parties online when the run starts."""

    def between_rounds(
        self, seed: int, round_index: int, parties: Sequence[Party], online: AbstractSet[Party]
    ) -> tuple[frozenset[Party], frozenset[Party]]:
        """``(joined, left)`` before round ``round_index``, given who is ``online`` now (only read).

        ``joined`` holds only listed parties not in ``online``; ``left`` only parties in ``online``.
        """
        return frozenset(), frozenset()

    def timeline(self, seed: int, parties: Sequence[Party], horizon_s: float) -> Iterator[Transition]:
        """Every change of membership at virtual times ``0 < time_s < horizon_s``, lazily, sorted by
        ``(time_s, party)``; each party's transitions alternate, starting from its initial state.

        The iterator holds O(parties) state however long the horizon: a run follows it as virtual time
        passes instead of materializing every change up front."""
        return iter(())


@dataclass(frozen=True)
class AlwaysOnline(Churn):
    """Everyone is online for the whole run."""

    def initial_online(self, seed: int, parties: Sequence[Party]) -> frozenset[Party]:
        return frozenset(parties)


class BernoulliChurn(Churn):
    """Independent coin flips between rounds (Hua et al., scenario S3, uses ``p_join = 0.005``,
    ``p_leave = 0.01``).

    At the start each party is online with probability ``initial_online``. Before each round every
    offline party joins with probability ``p_join`` and every online party leaves with probability
    ``p_leave``. A party's coin in round ``r`` is its own uniform ``u``: it joins if offline and
    ``u < p_join``, leaves if online and ``u < p_leave``. Over many rounds the online fraction tends to
    ``p_join / (p_join + p_leave)``.

    The constructor's ``initial_online`` is stored as `p_initial`, because `initial_online` is the
    method every `Churn` has.

    Raises:
        ConfigError: a probability outside ``[0, 1]`` (names ``availability.<key>``).
    """

    def __init__(self, p_join: float, p_leave: float, initial_online: float = 1.0) -> None:
        self._p_join = _probability(p_join, "availability.p_join")
        self._p_leave = _probability(p_leave, "availability.p_leave")
        self._p_initial = _probability(initial_online, "availability.initial_online")

    @property
    def p_join(self) -> float:
        return self._p_join

    @property
    def p_leave(self) -> float:
        return self._p_leave

    @property
    def p_initial(self) -> float:
        """The probability that a party is online at the start (the constructor's ``initial_online``)."""
        return self._p_initial

    def __repr__(self) -> str:
        return f"BernoulliChurn(p_join={self._p_join!r}, p_leave={self._p_leave!r}, initial_online={self._p_initial!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BernoulliChurn):
            return NotImplemented
        return (self._p_join, self._p_leave, self._p_initial) == (other._p_join, other._p_leave, other._p_initial)

    def __hash__(self) -> int:
        return hash((BernoulliChurn, self._p_join, self._p_leave, self._p_initial))

    def initial_online(self, seed: int, parties: Sequence[Party]) -> frozenset[Party]:
        if self._p_initial == 1.0:
            return frozenset(parties)
        if self._p_initial == 0.0:
            return frozenset()
        parties = _listed(parties)
        return _selected(parties, _uniforms(seed, Stream.AVAILABILITY, (_INITIAL,), parties) < self._p_initial)

    def between_rounds(
        self, seed: int, round_index: int, parties: Sequence[Party], online: AbstractSet[Party]
    ) -> tuple[frozenset[Party], frozenset[Party]]:
        round_index = _round(round_index)
        threshold = max(self._p_join, self._p_leave)
        if threshold == 0.0:
            return frozenset(), frozenset()
        parties = _listed(parties)
        coins = _uniforms(seed, Stream.AVAILABILITY, (_ROUND, round_index), parties)
        joined, left = [], []
        # Only a party whose coin is below the larger probability can change state; checking membership
        # for those few instead of for everyone keeps a round O(n) in numpy and O(n * p) in Python.
        for position in np.flatnonzero(coins < threshold).tolist():
            party, coin = parties[position], coins[position]
            if party in online:
                if coin < self._p_leave:
                    left.append(party)
            elif coin < self._p_join:
                joined.append(party)
        return frozenset(joined), frozenset(left)


@dataclass(frozen=True)
class MarkovChurn(Churn):
    """Each party alternates online and offline periods of exponential length in continuous virtual time.

    Periods have means ``mean_on_s`` and ``mean_off_s``; a party starts in its stationary state (online
    with probability ``mean_on_s / (mean_on_s + mean_off_s)``), and since the exponential is memoryless
    its first period is an ordinary one, so the process is stationary from ``t = 0``. Each party draws from
    its own generator: first one uniform for the initial state, then the period lengths in order, so a
    longer horizon only appends transitions.

    Raises:
        ConfigError: a mean that is not a finite number > 0 (names ``availability.mean_on_s`` / ``mean_off_s``).
    """

    mean_on_s: float
    mean_off_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean_on_s", _positive(self.mean_on_s, "availability.mean_on_s", " seconds"))
        object.__setattr__(self, "mean_off_s", _positive(self.mean_off_s, "availability.mean_off_s", " seconds"))

    @property
    def stationary_online(self) -> float:
        """The long-run fraction of time a party is online."""
        return self.mean_on_s / (self.mean_on_s + self.mean_off_s)

    def _start(self, seed: int, party: Party) -> tuple[np.random.Generator, bool]:
        rng = generator(seed, Stream.AVAILABILITY, _PARTY, party.role.code, party.index)
        return rng, bool(rng.random() < self.stationary_online)

    def initial_online(self, seed: int, parties: Sequence[Party]) -> frozenset[Party]:
        return frozenset(party for party in parties if self._start(seed, party)[1])

    def timeline(self, seed: int, parties: Sequence[Party], horizon_s: float) -> Iterator[Transition]:
        horizon_s = _horizon(horizon_s)
        return heapq.merge(*(self._changes(seed, party, horizon_s) for party in parties), key=_time_then_party)

    def _changes(self, seed: int, party: Party, horizon_s: float) -> Iterator[Transition]:
        rng, online = self._start(seed, party)
        # Periods are drawn in even-sized chunks: drawing in chunks gives the same numbers as drawing one at
        # a time, so the chunk size never changes a timeline, and an even chunk keeps the on/off alternation.
        means = np.resize((self.mean_on_s, self.mean_off_s) if online else (self.mean_off_s, self.mean_on_s), 16)
        elapsed = 0.0
        changes = 0
        while True:
            times = elapsed + np.cumsum(rng.standard_exponential(means.size) * means)
            for time_s in times.tolist():
                if time_s >= horizon_s:
                    return
                # The k-th change (k = 0, 1, ...) leaves the initial state when k is even.
                yield Transition(time_s, party, online == bool(changes % 2))
                changes += 1
            elapsed = float(times[-1])


def _time_then_party(transition: Transition) -> tuple[float, Party]:
    return transition.time_s, transition.party


def _trace_row_problem(row: object) -> str | None:
    """What is wrong with one ``(party, online_from_s, online_until_s)`` session, or None."""
    if not isinstance(row, (tuple, list)) or len(row) != len(_TRACE_HEADER):
        return f"expected (party, online_from_s, online_until_s), got {row!r}"
    party, from_s, until_s = row
    if not isinstance(party, Party):
        return f"party must be a Party such as user:3, got {party!r}"
    for name, value in (("online_from_s", from_s), ("online_until_s", until_s)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"{name} must be a number of seconds, got {value!r}"
    if not (math.isfinite(from_s) and from_s >= 0):
        return f"online_from_s must be a finite number of seconds >= 0, got {from_s!r}"
    if math.isnan(until_s) or until_s < from_s:
        return f"online_until_s must be >= online_from_s = {from_s!r} (inf = never leaves), got {until_s!r}"
    return None


class Trace(Churn):
    """Membership replayed from recorded sessions: party ``p`` is online during ``[from_s, until_s)``.

    A party may have several sessions; overlapping or touching ones are merged, and empty ones
    (``from_s == until_s``) are ignored. ``until_s`` may be ``inf``. A listed party that the trace does not
    mention is never online; trace parties that are not listed are ignored. The seed is unused: a trace
    draws nothing.

    Args:
        rows: ``(party, online_from_s, online_until_s)`` triples.

    Raises:
        ValueError: a row whose party is not a `Party` or whose times are not ``0 <= from_s <= until_s``.
    """

    def __init__(self, rows: Iterable[tuple[Party, float, float]]) -> None:
        sessions: dict[Party, list[tuple[float, float]]] = {}
        for number, row in enumerate(rows):
            problem = _trace_row_problem(row)
            if problem is not None:
                raise ValueError(f"trace row {number}: {problem}")
            party, from_s, until_s = row
            if from_s < until_s:
                sessions.setdefault(party, []).append((float(from_s), float(until_s)))
        self._intervals = {party: _merged(spans) for party, spans in sorted(sessions.items())}

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a trace from CSV with the header ``party,online_from_s,online_until_s``.

        Example rows: ``user:3,0,3600`` and ``user:3,7200,inf``. Blank lines are skipped.

        Raises:
            DatasetError: the file cannot be read, the header is missing or different, or a row is
                malformed (names the file and the line).
        """
        rows: list[tuple[Party, float, float]] = []
        try:
            with open(path, encoding="utf-8-sig", newline="") as handle:
                reader = csv.reader(handle)
                header = next(reader, None)
                if header is None or tuple(field.strip() for field in header) != _TRACE_HEADER:
                    expected = ",".join(_TRACE_HEADER)
                    raise DatasetError(path, f"expected the header line {expected}, got {header!r}", line=1)
                for record in reader:
                    if record:
                        rows.append(_parse_trace_record(path, reader.line_num, record))
        except OSError as err:
            raise DatasetError(path, f"cannot read the trace: {err}") from err
        except UnicodeDecodeError as err:
            raise DatasetError(path, f"not UTF-8 text: {err}") from err
        except csv.Error as err:
            raise DatasetError(path, f"not valid CSV: {err}") from err
        if not rows:
            raise DatasetError(path, "holds no sessions after the header")
        return cls(rows)

    @property
    def parties(self) -> frozenset[Party]:
        """The parties that are online at some time."""
        return frozenset(self._intervals)

    def intervals(self, party: Party) -> tuple[tuple[float, float], ...]:
        """``party``'s merged sessions ``(from_s, until_s)``, sorted and disjoint; empty if never online."""
        return self._intervals.get(party, ())

    def __repr__(self) -> str:
        sessions = sum(len(spans) for spans in self._intervals.values())
        return f"Trace(<{len(self._intervals)} parties, {sessions} sessions>)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self._intervals == other._intervals

    __hash__ = None  # type: ignore[assignment]  # equal by content, and the content is a dict

    def initial_online(self, seed: int, parties: Sequence[Party]) -> frozenset[Party]:
        return frozenset(party for party in parties if self._online_at_zero(party))

    def _online_at_zero(self, party: Party) -> bool:
        spans = self._intervals.get(party, ())
        return bool(spans) and spans[0][0] == 0.0

    def timeline(self, seed: int, parties: Sequence[Party], horizon_s: float) -> Iterator[Transition]:
        horizon_s = _horizon(horizon_s)
        transitions = [
            Transition(time_s, party, online)
            for party in parties
            for from_s, until_s in self._intervals.get(party, ())
            for time_s, online in ((from_s, True), (until_s, False))
            if 0.0 < time_s < horizon_s
        ]
        transitions.sort(key=_time_then_party)
        return iter(transitions)


def _merged(spans: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Sorted disjoint intervals covering ``spans``; touching ones merge so no party leaves and rejoins
    at the same instant."""
    merged: list[tuple[float, float]] = []
    for from_s, until_s in sorted(spans):
        if merged and from_s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], until_s))
        else:
            merged.append((from_s, until_s))
    return tuple(merged)


def _parse_trace_record(path: str | os.PathLike[str], line: int, record: list[str]) -> tuple[Party, float, float]:
    if len(record) != len(_TRACE_HEADER):
        expected = ",".join(_TRACE_HEADER)
        raise DatasetError(path, f"expected 3 fields ({expected}), got {len(record)}", line=line)
    party_text, from_text, until_text = (field.strip() for field in record)
    try:
        party = Party.parse(party_text)
    except ValueError:
        raise DatasetError(path, f"not a party: {party_text!r} (expected ROLE:INDEX, e.g. user:3)", line=line) from None
    try:
        from_s, until_s = float(from_text), float(until_text)
    except ValueError:
        problem = f"times must be numbers of seconds, got {from_text!r}, {until_text!r}"
        raise DatasetError(path, problem, line=line) from None
    problem = _trace_row_problem((party, from_s, until_s))
    if problem is not None:
        raise DatasetError(path, problem, line=line)
    return party, from_s, until_s


@dataclass(frozen=True)
class MidRoundDropout:
    """Crashes: an online party that received a round's request fails before replying, with probability
    ``p``, independently per party and round. Crashing is silence; the protocol finds it by deadline.

    Raises:
        ConfigError: ``p`` outside ``[0, 1]`` (names ``availability.dropout``).
    """

    p: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _probability(self.p, "availability.dropout"))

    def crashes(self, seed: int, round_index: int, parties: Sequence[Party]) -> frozenset[Party]:
        """The listed parties that crash in round ``round_index``; with ``p == 0`` nothing is drawn."""
        round_index = _round(round_index)
        if self.p == 0.0:
            return frozenset()
        parties = _listed(parties)
        return _selected(parties, _uniforms(seed, Stream.DROPOUT, (_ROUND, round_index), parties) < self.p)


class ComputeTime(abc.ABC):
    """How long each party computes locally in a round before it can reply (straggler model)."""

    @abc.abstractmethod
    def delays(self, seed: int, round_index: int, parties: Sequence[Party]) -> np.ndarray:
        """Seconds of local compute in round ``round_index``: a float64 array, ``delays[k]`` for
        ``parties[k]`` (for a set: the k-th party in sorted order), every entry >= 0."""


@dataclass(frozen=True)
class NoComputeDelay(ComputeTime):
    """Local computation takes no virtual time."""

    def delays(self, seed: int, round_index: int, parties: Sequence[Party]) -> np.ndarray:
        _round(round_index)
        return np.zeros(len(parties))


@dataclass(frozen=True)
class LogNormalCompute(ComputeTime):
    """Log-normal compute times, ``median_s * exp(sigma * Z)`` per party and round, with a fixed slow tail.

    A party is slow for the whole run with probability ``slow_fraction`` (decided once from the seed, so
    the same devices straggle every round, as real slow devices do); a slow party's times are multiplied
    by ``slow_factor``.

    Raises:
        ConfigError: ``median_s <= 0``, ``sigma < 0``, ``slow_fraction`` outside ``[0, 1]`` or
            ``slow_factor < 1`` (names ``availability.compute.<key>``).
    """

    median_s: float
    sigma: float
    slow_fraction: float = 0.0
    slow_factor: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "median_s", _positive(self.median_s, f"{_COMPUTE_KEY}.median_s", " seconds"))
        sigma = _real(self.sigma, f"{_COMPUTE_KEY}.sigma")
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ConfigError(f"{_COMPUTE_KEY}.sigma", f"must be a finite number >= 0, got {self.sigma!r}")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "slow_fraction", _probability(self.slow_fraction, f"{_COMPUTE_KEY}.slow_fraction"))
        factor = _real(self.slow_factor, f"{_COMPUTE_KEY}.slow_factor")
        if not (math.isfinite(factor) and factor >= 1):
            raise ConfigError(f"{_COMPUTE_KEY}.slow_factor", f"must be a finite number >= 1, got {self.slow_factor!r}")
        object.__setattr__(self, "slow_factor", factor)

    def is_slow(self, seed: int, parties: Sequence[Party]) -> np.ndarray:
        """Which listed parties are slow (a bool array aligned with ``parties``); the same in every round."""
        if self.slow_fraction == 0.0:
            return np.zeros(len(parties), dtype=bool)
        parties = _listed(parties)
        return _uniforms(seed, Stream.STRAGGLER, (_INITIAL,), parties) < self.slow_fraction

    def delays(self, seed: int, round_index: int, parties: Sequence[Party]) -> np.ndarray:
        round_index = _round(round_index)
        parties = _listed(parties)
        if self.sigma == 0.0:
            times = np.full(len(parties), self.median_s)
        else:
            normals = _per_party(
                seed, Stream.STRAGGLER, (_ROUND, round_index), parties, lambda rng, size: rng.standard_normal(size)
            )
            times = self.median_s * np.exp(self.sigma * normals)
        times[self.is_slow(seed, parties)] *= self.slow_factor
        return times


__all__ = [
    "AlwaysOnline",
    "BernoulliChurn",
    "Churn",
    "ComputeTime",
    "LogNormalCompute",
    "MarkovChurn",
    "MidRoundDropout",
    "NoComputeDelay",
    "PartyList",
    "Trace",
    "Transition",
]
