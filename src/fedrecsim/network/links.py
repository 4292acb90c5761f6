"""Link policies: when a message sent now arrives at its destination, whether it is lost, and whether the
network delivers it twice.

A link is *directed*: ``(src, dst)``. Its behaviour is a `LinkSpec` (a latency model, a bandwidth, a loss
probability, and the faults: duplication and extra reordering delay) chosen by the role pair of its two
ends, or the default. On top of the specs, `Partition` takes sets of links down during intervals of
virtual time, and a slow party (`Links`' ``slow``) adds its delay to everything it sends. `Links` keeps
one small state per directed link: how many messages it has carried and the time until which its sender
side is busy transmitting.

Determinism: the draws are *counter-based*. The random bits of the ``n``-th message on a link (counting
from 0, lost messages included) are a pure function of ``(seed, link, n, purpose)``: XXH3-128 of the
little-endian 64-bit words ``(seed, Stream.LINK, src.role.code, src.index, dst.role.code, dst.index, n,
purpose)``, with purpose 0 for the latency, 1 for the loss, 2 for the reordering delay, 3 for the
duplication and 4 for the duplicate's own latency. A purpose is drawn only when its fault is configured,
and adding a purpose never moves another's bits, so a run without faults draws exactly what it drew
before the faults existed (its transcript is unchanged). A keyed hash of a counter is a random
generator in the way Philox is (a keyed bijection of a counter); XXH3's 128-bit output passes SMHasher's
avalanche and bit-independence tests, which is all a delay needs. So a message's draws depend only on its
link and its number on that link -- never on which links were used first or on how trio schedules the
senders -- and a link costs no generator to create: at 100,000 users, creating a numpy generator per
link was most of a round.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import numbers
import os
import struct
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import xxhash

from ..config import param, toml_literal
from ..errors import ConfigError, DatasetError
from ..seeding import Stream
from .party import Party, Role

_LATENCY_KEY = "network.latency"


def _number(value: object, key_path: str) -> float:
    """``value`` as a finite float; booleans are refused because TOML ``true`` is never a duration."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(key_path, f"must be a number, got {toml_literal(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(key_path, f"must be finite, got {value!r}")
    return number


def _seconds(value: object, key_path: str) -> float:
    number = _number(value, key_path)
    if number < 0:
        raise ConfigError(key_path, f"must be >= 0 seconds, got {value!r}")
    return number


class Latency(abc.ABC):
    """A one-way propagation delay model: how long a message is in flight once it is on the wire.

    Implementations are frozen dataclasses validated on construction, so a `Latency` that exists is
    valid and `sample` never checks anything.
    """

    model: ClassVar[str]
    """The ``model`` name in a scenario table (``network.latency.model``)."""

    file_keys: ClassVar[Mapping[str, str]] = types.MappingProxyType({})
    """Keys that name a file to read a field's values from instead of giving them inline, each with its
    meaning; `latency_from_table` accepts them, the scenario reference lists them."""

    @abc.abstractmethod
    def sample(self, u: float, v: float) -> float:
        """One delay in seconds (>= 0) from two independent uniforms, ``u`` in [0, 1) and ``v`` in (0, 1]."""

    @abc.abstractmethod
    def to_table(self) -> dict[str, object]:
        """The scenario table that `latency_from_table` turns back into an equal model."""

    def _from_bits(self) -> Callable[[int], float]:
        """`sample` of the two uniforms in 128 random bits (`uniforms`), as one call for `Links.transit`."""
        sample = self.sample
        return lambda bits: sample((bits >> 75) * _ULP, ((bits & _LOW53) + 1) * _ULP)


_ULP = 2.0**-53
_LOW53 = (1 << 53) - 1


def uniforms(bits: int) -> tuple[float, float]:
    """The two uniforms a latency is drawn from, out of 128 random bits: ``u`` from the top 53 bits, in
    [0, 1), and ``v`` from the low 53 bits plus one ulp, in (0, 1] (so that ``log(v)`` is finite)."""
    return (bits >> 75) * _ULP, ((bits & _LOW53) + 1) * _ULP


@dataclass(frozen=True)
class Constant(Latency):
    """Every message takes exactly ``seconds``; draws nothing."""

    model: ClassVar[str] = "constant"
    seconds: float = param(ge=0, doc="the delay of every message, in seconds")

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _seconds(self.seconds, f"{_LATENCY_KEY}.seconds"))

    def sample(self, u: float, v: float) -> float:
        return self.seconds

    def to_table(self) -> dict[str, object]:
        return {"model": self.model, "seconds": self.seconds}


@dataclass(frozen=True)
class Uniform(Latency):
    """Delays uniform on ``[low_s, high_s)``: ``low_s + (high_s - low_s) * u``."""

    model: ClassVar[str] = "uniform"
    low_s: float = param(ge=0, doc="the shortest delay, in seconds")
    high_s: float = param(ge=0, doc="the longest delay, in seconds (>= low_s)")

    def __post_init__(self) -> None:
        low = _seconds(self.low_s, f"{_LATENCY_KEY}.low_s")
        high = _seconds(self.high_s, f"{_LATENCY_KEY}.high_s")
        if high < low:
            raise ConfigError(f"{_LATENCY_KEY}.high_s", f"must be >= low_s = {low!r}, got {high!r}")
        object.__setattr__(self, "low_s", low)
        object.__setattr__(self, "high_s", high)

    def sample(self, u: float, v: float) -> float:
        return self.low_s + (self.high_s - self.low_s) * u

    def to_table(self) -> dict[str, object]:
        return {"model": self.model, "low_s": self.low_s, "high_s": self.high_s}

    def _from_bits(self) -> Callable[[int], float]:
        low, width = self.low_s, self.high_s - self.low_s
        return lambda bits: low + width * ((bits >> 75) * _ULP)


@dataclass(frozen=True)
class LogNormal(Latency):
    """Log-normal delays: ``median_s * exp(sigma * Z)`` with Z standard normal.

    ``median_s`` is ``exp(mu)`` of the underlying normal, which is the quantity network measurements
    report; ``sigma`` is the standard deviation of ``log(delay)``. Z comes from the two uniforms by the
    Box-Muller transform, ``Z = sqrt(-2 log v) cos(2 pi u)``, which is exactly standard normal.
    """

    model: ClassVar[str] = "lognormal"
    median_s: float = param(gt=0, doc="the median delay, in seconds")
    sigma: float = param(ge=0, doc="the standard deviation of log(delay)")

    def __post_init__(self) -> None:
        median = _seconds(self.median_s, f"{_LATENCY_KEY}.median_s")
        if median == 0:
            raise ConfigError(
                f"{_LATENCY_KEY}.median_s",
                'must be > 0 (log(0) is undefined; use model = "constant" for zero latency)',
            )
        sigma = _number(self.sigma, f"{_LATENCY_KEY}.sigma")
        if sigma < 0:
            raise ConfigError(f"{_LATENCY_KEY}.sigma", f"must be >= 0, got {self.sigma!r}")
        object.__setattr__(self, "median_s", median)
        object.__setattr__(self, "sigma", sigma)

    def sample(self, u: float, v: float) -> float:
        return self.median_s * math.exp(self.sigma * math.sqrt(-2.0 * math.log(v)) * math.cos(_TWO_PI * u))

    def to_table(self) -> dict[str, object]:
        return {"model": self.model, "median_s": self.median_s, "sigma": self.sigma}


_TWO_PI = 2.0 * math.pi
_exp, _sqrt, _log, _cos = math.exp, math.sqrt, math.log, math.cos


@dataclass(frozen=True)
class Empirical(Latency):
    """Delays resampled uniformly from measured ``samples_s`` (e.g. a ping trace).

    The uniform ``u`` picks the index: ``floor(u * n)`` is uniform on ``0..n-1``.
    """

    model: ClassVar[str] = "empirical"
    file_keys: ClassVar[Mapping[str, str]] = types.MappingProxyType(
        {"file": "instead of samples_s: a text file of one delay in seconds per line (blank lines skipped)"}
    )
    samples_s: tuple[float, ...] = param(ge=0, doc="measured delays in seconds, each message's drawn uniformly")

    def __post_init__(self) -> None:
        key = f"{_LATENCY_KEY}.samples_s"
        if isinstance(self.samples_s, (str, bytes)) or not hasattr(self.samples_s, "__iter__"):
            raise ConfigError(key, f"must be a list of numbers, got {self.samples_s!r}")
        samples = tuple(_seconds(value, key) for value in self.samples_s)
        if not samples:
            raise ConfigError(key, "must hold at least one sample")
        object.__setattr__(self, "samples_s", samples)

    def sample(self, u: float, v: float) -> float:
        return self.samples_s[int(u * len(self.samples_s))]

    def to_table(self) -> dict[str, object]:
        return {"model": self.model, "samples_s": list(self.samples_s)}

    def _from_bits(self) -> Callable[[int], float]:
        samples, count = self.samples_s, len(self.samples_s)
        return lambda bits: samples[int((bits >> 75) * _ULP * count)]


#: The latency models a scenario's ``model`` key names; each takes its fields (all required) as keys.
LATENCY_MODELS: Mapping[str, type[Latency]] = types.MappingProxyType(
    {cls.model: cls for cls in (Constant, Uniform, LogNormal, Empirical)}
)


def latency_from_table(
    table: Mapping[str, object], key_path: str, *, base_dir: str | os.PathLike[str] | None = None
) -> Latency:
    """Build a latency model from a scenario table such as ``{"model": "lognormal", "median_s": 0.05,
    "sigma": 0.5}``.

    Accepted tables: ``constant`` (``seconds``), ``uniform`` (``low_s``, ``high_s``), ``lognormal``
    (``median_s``, ``sigma``) and ``empirical`` with either ``samples_s`` (a list of seconds) or ``file``
    (a text file of one delay in seconds per line; blank lines are skipped).

    Args:
        table: the table as parsed from TOML.
        key_path: where the table sits in the scenario (e.g. ``"network.latency"``); every error names
            the offending key under it.
        base_dir: the directory a relative ``file`` is resolved against (the scenario file's folder);
            the current directory when omitted.

    Raises:
        ConfigError: not a table, unknown model, unknown, missing or mistyped key, value out of range.
        DatasetError: the ``file`` cannot be read or has a line that is not a delay (names file and line).
    """
    if not isinstance(table, Mapping):
        raise ConfigError(key_path, f'must be a table like {{ model = "constant", seconds = 0.0 }}, got {table!r}')
    model = table.get("model")
    if not isinstance(model, str) or model not in LATENCY_MODELS:
        allowed = ", ".join(f'"{name}"' for name in LATENCY_MODELS)
        problem = "is missing" if model is None else f"is {toml_literal(model)}"
        raise ConfigError(f"{key_path}.model", f"{problem}; allowed models: {allowed}")
    cls = LATENCY_MODELS[model]
    required = tuple(field.name for field in dataclasses.fields(cls))
    optional = tuple(cls.file_keys)
    allowed_keys = ", ".join(("model", *required, *optional))
    values = {key: value for key, value in table.items() if key != "model"}
    for key in values:
        if key not in required and key not in optional:
            raise ConfigError(f"{key_path}.{key}", f'unknown key for model "{model}"; allowed keys: {allowed_keys}')
    if "file" in values:
        if "samples_s" in values:
            raise ConfigError(f"{key_path}.file", "give either samples_s or file, not both")
        values["samples_s"] = _read_samples(values.pop("file"), f"{key_path}.file", base_dir)
    for key in required:
        if key not in values:
            raise ConfigError(f"{key_path}.{key}", f'is required for model "{model}" (allowed keys: {allowed_keys})')
    try:
        return cls(**values)
    except ConfigError as err:
        # The dataclass names its field under the default "network.latency"; re-anchor it at this table.
        field = err.key_path.rpartition(".")[2]
        raise ConfigError(f"{key_path}.{field}", err.problem) from err


def _read_samples(file: object, key_path: str, base_dir: str | os.PathLike[str] | None) -> tuple[float, ...]:
    if not isinstance(file, str) or not file:
        raise ConfigError(key_path, f"must be a file path (a non-empty string), got {file!r}")
    path = Path(file)
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DatasetError(path, f"cannot read latency samples: {err}") from err
    samples = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        field = line.strip()
        if not field:
            continue
        try:
            value = float(field)
        except ValueError:
            raise DatasetError(path, f"expected one delay in seconds, got {field!r}", line=line_number) from None
        if not math.isfinite(value) or value < 0:
            raise DatasetError(path, f"a delay must be finite and >= 0 seconds, got {field!r}", line=line_number)
        samples.append(value)
    if not samples:
        raise DatasetError(path, "holds no latency samples (expected one delay in seconds per line)")
    return tuple(samples)


@dataclass(frozen=True)
class LinkSpec:
    """How one directed link behaves.

    Attributes:
        latency: the propagation delay of each message.
        bandwidth_bps: the sender side's capacity in bits per second; ``0`` means unlimited. A message of
            ``n`` bytes occupies the link for ``8 * n / bandwidth_bps`` seconds and messages on one link are
            transmitted one after another, first sent first.
        loss: the probability that a message is lost in flight, in ``[0, 1)``; each message independently.
        duplicate: the probability, in ``[0, 1]``, that the network delivers a message that was not lost a
            second time; the copy travels for its own latency draw (it may arrive first).
        reorder: the probability, in ``[0, 1]``, that a message is held back by an extra delay uniform on
            ``[0, reorder_delay_s)`` on top of its latency, so that messages sent after it may overtake it.
        reorder_delay_s: the longest extra delay of a reordered message, in seconds (> 0 when ``reorder``
            is).
    """

    latency: Latency = Constant(0.0)
    bandwidth_bps: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.latency, Latency):
            raise ConfigError(_LATENCY_KEY, f"must be a latency model (Constant, Uniform, ...), got {self.latency!r}")
        bandwidth = _number(self.bandwidth_bps, "network.bandwidth_bps")
        if bandwidth < 0:
            raise ConfigError(
                "network.bandwidth_bps", f"must be >= 0 bits per second (0 = unlimited), got {bandwidth!r}"
            )
        loss = _number(self.loss, "network.loss")
        if not 0 <= loss < 1:
            raise ConfigError("network.loss", f"must be in [0, 1), got {loss!r}")
        for name in ("duplicate", "reorder"):
            probability = _number(getattr(self, name), f"network.{name}")
            if not 0 <= probability <= 1:
                raise ConfigError(f"network.{name}", f"must be in [0, 1], got {probability!r}")
            object.__setattr__(self, name, probability)
        delay = _seconds(self.reorder_delay_s, "network.reorder_delay_s")
        if self.reorder and not delay:
            raise ConfigError("network.reorder_delay_s", f"must be > 0 seconds when reorder = {self.reorder!r} > 0")
        object.__setattr__(self, "bandwidth_bps", bandwidth)
        object.__setattr__(self, "loss", loss)
        object.__setattr__(self, "reorder_delay_s", delay)


class LinkEnds(NamedTuple):
    """One end pair a `Partition` takes down: messages from ``src`` to ``dst``, each a whole role or one
    party."""

    src: Role | Party
    dst: Role | Party

    def covers(self, src: Party, dst: Party) -> bool:
        return _end_covers(self.src, src) and _end_covers(self.dst, dst)

    def __str__(self) -> str:
        # A role prints as its name (a StrEnum), a party as role:index.
        return f"{self.src}->{self.dst}"


def _end_covers(end: Role | Party, party: Party) -> bool:
    return end == party if isinstance(end, Party) else end is party.role


def link_ends(text: str, key_path: str) -> tuple[LinkEnds, ...]:
    """Parse ``"A->B"`` (one direction) or ``"A-B"`` (both) where A and B are a role (``user``: every user)
    or a party (``user:3``); the directed pairs it names, ``A->B`` first.

    Raises:
        ConfigError: naming ``key_path``, when ``text`` is not of that form.
    """
    directed = isinstance(text, str) and "->" in text
    src = dst = None
    if isinstance(text, str):
        # Without its separator, or with a third end, a side is empty or holds a separator: no role or party.
        left, _, right = text.partition("->" if directed else "-")
        src, dst = _end(left.strip()), _end(right.strip())
    if src is None or dst is None:
        roles = ", ".join(sorted(role.value for role in Role))
        raise ConfigError(
            key_path, f"expected A->B or A-B, each a role ({roles}) or a party such as user:3, got {text!r}"
        )
    pair = LinkEnds(src, dst)
    return (pair,) if directed else (pair, LinkEnds(dst, src))


def _end(text: str) -> Role | Party | None:
    if ":" in text:
        try:
            return Party.parse(text)
        except ValueError:
            return None
    return next((role for role in Role if role.value == text), None)


@dataclass(frozen=True)
class Partition:
    """The links ``links`` are down during ``[from_s, until_s)`` of virtual time: a message sent on one of
    them meanwhile is lost (it still occupied its sender's side of the link). Messages already in flight
    when the partition starts arrive.

    Raises:
        ConfigError: ``from_s < 0``, ``until_s <= from_s`` or no links (names ``network.partitions``).
    """

    from_s: float
    until_s: float
    links: tuple[LinkEnds, ...]

    def __post_init__(self) -> None:
        start = _seconds(self.from_s, "network.partitions.from_s")
        end = _number(self.until_s, "network.partitions.until_s")
        if end <= start:
            raise ConfigError("network.partitions.until_s", f"must be > from_s = {start!r}, got {end!r}")
        if not self.links or not all(isinstance(ends, LinkEnds) for ends in self.links):
            raise ConfigError("network.partitions.links", f"must name at least one link (A->B or A-B), got {self.links!r}")
        object.__setattr__(self, "from_s", start)
        object.__setattr__(self, "until_s", end)
        object.__setattr__(self, "links", tuple(self.links))


#: The purposes of a message's draws: one 128-bit block each (module docstring).
LATENCY_DRAW, LOSS_DRAW, REORDER_DRAW, DUPLICATE_DRAW, COPY_LATENCY_DRAW = 0, 1, 2, 3, 4
_LINK_KEY = struct.Struct("<6Q")
_COUNTER = struct.Struct("<2Q")
_pack_counter = _COUNTER.pack
_TABLED_COUNTERS = 2048
#: ``_COUNTER.pack(n, purpose)`` for the first `_TABLED_COUNTERS` message numbers of the two draws every
#: lossy link makes (a look-up costs a third of a pack); later messages pack their own.
_LATENCY_COUNTERS = tuple(_pack_counter(message, LATENCY_DRAW) for message in range(_TABLED_COUNTERS))
_LOSS_COUNTERS = tuple(_pack_counter(message, LOSS_DRAW) for message in range(_TABLED_COUNTERS))
_hash128 = xxhash.xxh3_128_intdigest


_LINK_STREAM = int(Stream.LINK)
_ROLE_CODES = {role: role.code for role in Role}


def link_key(seed: int, src: Party, dst: Party) -> bytes:
    """The packed words ``(seed, Stream.LINK, src.role.code, src.index, dst.role.code, dst.index)``."""
    return _LINK_KEY.pack(seed, _LINK_STREAM, _ROLE_CODES[src.role], src.index, _ROLE_CODES[dst.role], dst.index)


def draw_bits(seed: int, src: Party, dst: Party, message: int, purpose: int) -> int:
    """The 128 random bits of draw ``purpose`` for message number ``message`` (from 0) on ``src -> dst``."""
    return _hash128(link_key(seed, src, dst) + _COUNTER.pack(message, purpose))


class _Behaviour:
    """How every link of one role pair, from a sender of one extra delay, behaves: read on every message,
    built once per such pair (`Links._open`), shared by the links it describes and never changed.

    ``faulty`` is true when the spec duplicates or reorders (the only per-message cost of those faults on
    links without them); ``plain`` when it is a log-normal latency and nothing else -- no bandwidth, loss
    or fault -- which `Links.transit` draws first, with none of the other checks; a slow sender's delay is folded into the latency (``fixed_latency`` or
    ``delay``). A log-normal latency, the scenarios' usual model, is also kept as its two parameters
    (``median_s``, ``sigma``; ``median_s`` is 0.0 for any other model) so that `Links.transit` draws it
    without a call: the same operations in the same order as `LogNormal.sample`, then plus ``extra_s``.
    """

    __slots__ = (
        "delay", "duplicate", "extra_s", "faulty", "fixed_latency", "loss", "median_s", "plain", "reorder",
        "reorder_delay_s", "seconds_per_byte", "sigma",
    )

    def __init__(self, spec: LinkSpec, extra_s: float) -> None:
        self.seconds_per_byte = 8.0 / spec.bandwidth_bps if spec.bandwidth_bps else 0.0
        self.loss = spec.loss
        self.duplicate = spec.duplicate
        self.reorder = spec.reorder
        self.reorder_delay_s = spec.reorder_delay_s
        self.faulty = bool(spec.duplicate or spec.reorder)
        self.extra_s = extra_s
        lognormal = type(spec.latency) is LogNormal
        self.median_s = spec.latency.median_s if lognormal else 0.0
        self.sigma = spec.latency.sigma if lognormal else 0.0
        self.plain = bool(self.median_s) and not (self.seconds_per_byte or self.loss or self.faulty)
        if isinstance(spec.latency, Constant):
            self.fixed_latency: float = spec.latency.seconds + extra_s
            self.delay: Callable[[int], float] | None = None
        else:
            self.fixed_latency = 0.0
            delay = spec.latency._from_bits()
            self.delay = (lambda bits: delay(bits) + extra_s) if extra_s else delay


class _Link:
    """The state of one directed link: its own key, message count and busy time, the intervals during
    which a partition takes it down (``down``), and its `_Behaviour`; ``plain`` when that behaviour is
    (`_Behaviour`) and no partition ever takes the link down."""

    __slots__ = ("behaviour", "busy_until", "count", "down", "key", "plain")

    def __init__(self, behaviour: _Behaviour, key: bytes, down: tuple[tuple[float, float], ...]) -> None:
        self.behaviour = behaviour
        self.busy_until = -math.inf
        self.count = 0
        self.down = down
        self.key = key
        self.plain = behaviour.plain and not down


_NO_OVERRIDES: Mapping[tuple[Role, Role], LinkSpec] = types.MappingProxyType({})
#: The links of a sender that has none yet.
_NO_LINKS: Mapping[Party, _Link] = types.MappingProxyType({})
_NO_SLOW: Mapping[Party, float] = types.MappingProxyType({})


class Links:
    """The links of one run: per directed link, its key, message count and transmit queue, and the
    `_Behaviour` of its role pair (its `LinkSpec`, with the sender's slow delay).

    Args:
        seed: the run seed.
        default: the spec of every link whose role pair has no entry in ``by_roles``.
        by_roles: specs for directed role pairs ``(src_role, dst_role)``; ``(USER, SERVER)`` does not
            cover ``(SERVER, USER)``, so a symmetric setting lists both directions.
        partitions: intervals during which sets of links are down.
        slow: seconds added to the latency of every message each listed party sends (a slow party: its
            messages leave that much later; a party of a role the run does not have changes nothing).

    Attributes:
        copy_at: after `transit` put a message on a link that duplicates it, the arrival time of the
            network's second copy, for the caller to take (and reset to None); None otherwise.
    """

    def __init__(
        self,
        seed: int,
        default: LinkSpec,
        by_roles: Mapping[tuple[Role, Role], LinkSpec] = _NO_OVERRIDES,
        *,
        partitions: Iterable[Partition] = (),
        slow: Mapping[Party, float] = _NO_SLOW,
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise TypeError(f"seed must be a non-negative integer, got {seed!r}")
        if not isinstance(default, LinkSpec):
            raise TypeError(f"default must be a LinkSpec, got {default!r}")
        for pair, spec in by_roles.items():
            if not (
                isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(role, Role) for role in pair)
            ):
                raise TypeError(f"by_roles keys must be (Role, Role) pairs, got {pair!r}")
            if not isinstance(spec, LinkSpec):
                raise TypeError(f"by_roles[{pair!r}] must be a LinkSpec, got {spec!r}")
        self._partitions = tuple(partitions)
        for partition in self._partitions:
            if not isinstance(partition, Partition):
                raise TypeError(f"partitions must be Partition objects, got {partition!r}")
        self._slow = dict(slow)
        for party, delay in self._slow.items():
            if not isinstance(party, Party):
                raise TypeError(f"slow must map parties to seconds, got the key {party!r}")
            _seconds(delay, "faults.slow.delay_s")
        self._seed = int(seed)
        self._default = default
        self._by_roles = dict(by_roles)
        # Per sender, its links by receiver: two look-ups of a party cost less than one of a pair of them.
        self._links: dict[Party, dict[Party, _Link]] = {}
        self._behaviours: dict[tuple[Role, Role, float], _Behaviour] = {}
        self.copy_at: float | None = None

    def spec(self, src_role: Role, dst_role: Role) -> LinkSpec:
        """The spec that governs links from ``src_role`` parties to ``dst_role`` parties."""
        return self._by_roles.get((src_role, dst_role), self._default)

    def transit(self, src: Party, dst: Party, nbytes: int, now: float) -> float | None:
        """Put a message of ``nbytes`` on the link ``src -> dst`` at time ``now``; return its arrival time.

        The message starts transmitting when the link is free (``max(now, busy_until)``), occupies it for
        ``8 * nbytes / bandwidth_bps`` seconds, then travels for one latency draw. A lost message still
        occupied the link (it was sent; it vanished in flight), so it delays the messages behind it.

        A message sent while a `Partition` takes the link down is lost (before any draw). Draws: the
        ``n``-th message on a link is lost if the first uniform of its `LOSS_DRAW` block is below ``loss``
        (only if ``loss > 0``); otherwise its latency is the model's `Latency.sample` of the two uniforms
        of its `LATENCY_DRAW` block (none for `Constant`), plus the sender's slow delay. If ``reorder >
        0`` and the first uniform of its `REORDER_DRAW` block is below ``reorder``, the second uniform
        times ``reorder_delay_s`` is added. If ``duplicate > 0`` and the first uniform of its
        `DUPLICATE_DRAW` block is below ``duplicate``, a copy arrives at the send time plus a latency from
        its `COPY_LATENCY_DRAW` block (`copy_at`). All are `draw_bits` of ``(seed, src, dst, n,
        purpose)``, so they do not depend on any other link.

        Args:
            src, dst: the ends of the directed link.
            nbytes: the encoded size of the message (>= 0, not checked: this is the per-message hot path).
            now: the current virtual time in seconds; calls on one link come in non-decreasing ``now``.

        Returns:
            The arrival time in seconds, or ``None`` if the message is lost.
        """
        link = (self._links.get(src) or _NO_LINKS).get(dst) or self._open(src, dst)
        message = link.count
        link.count = message + 1
        behaviour = link.behaviour
        if link.plain:
            # The log-normal draw below, of a message that leaves at once and is neither lost nor faulted.
            try:
                counter = _LATENCY_COUNTERS[message]
            except IndexError:
                counter = _pack_counter(message, LATENCY_DRAW)
            bits = _hash128(link.key + counter)
            return now + (behaviour.median_s * _exp(
                behaviour.sigma * _sqrt(-2.0 * _log(((bits & _LOW53) + 1) * _ULP)) * _cos(_TWO_PI * ((bits >> 75) * _ULP))
            ) + behaviour.extra_s)
        sent = now  # when the last bit has left the sender
        if behaviour.seconds_per_byte:
            start = now if now > link.busy_until else link.busy_until
            sent = link.busy_until = start + nbytes * behaviour.seconds_per_byte
        if link.down and _is_down(link.down, now):
            return None
        if behaviour.loss:
            try:
                counter = _LOSS_COUNTERS[message]
            except IndexError:
                counter = _pack_counter(message, LOSS_DRAW)
            if (_hash128(link.key + counter) >> 75) * _ULP < behaviour.loss:
                return None
        delay = behaviour.delay
        if delay is None:
            arrival = sent + behaviour.fixed_latency
        else:
            try:
                counter = _LATENCY_COUNTERS[message]
            except IndexError:
                counter = _pack_counter(message, LATENCY_DRAW)
            bits = _hash128(link.key + counter)
            if behaviour.median_s:
                arrival = sent + (behaviour.median_s * _exp(
                    behaviour.sigma * _sqrt(-2.0 * _log(((bits & _LOW53) + 1) * _ULP))
                    * _cos(_TWO_PI * ((bits >> 75) * _ULP))
                ) + behaviour.extra_s)
            else:
                arrival = sent + delay(bits)
        if behaviour.faulty:
            arrival = self._faults(link.key, behaviour, message, sent, arrival)
        return arrival

    def _faults(self, key: bytes, behaviour: _Behaviour, message: int, sent: float, arrival: float) -> float:
        """The reordering delay added to ``arrival``, and the duplicate's arrival set in `copy_at`."""
        if behaviour.reorder:
            u, v = uniforms(_hash128(key + _COUNTER.pack(message, REORDER_DRAW)))
            if u < behaviour.reorder:
                arrival += v * behaviour.reorder_delay_s
        if behaviour.duplicate and (
            (_hash128(key + _COUNTER.pack(message, DUPLICATE_DRAW)) >> 75) * _ULP < behaviour.duplicate
        ):
            delay = behaviour.delay
            bits = _hash128(key + _COUNTER.pack(message, COPY_LATENCY_DRAW))
            self.copy_at = sent + (behaviour.fixed_latency if delay is None else delay(bits))
        return arrival

    def is_down(self, src: Party, dst: Party, now: float) -> bool:
        """Whether a partition takes the link ``src -> dst`` down at virtual time ``now``."""
        link = (self._links.get(src) or _NO_LINKS).get(dst) or self._open(src, dst)
        return _is_down(link.down, now)

    def checkpoint_state(self) -> dict[tuple[Party, Party], tuple[float, int]]:
        """What the links have changed since they were built: per opened link, when it is free again and
        how many messages it carried (its draws are counter-based, so that is all of its state)."""
        return {
            (src, dst): (link.busy_until, link.count) for src, links in self._links.items() for dst, link in links.items()
        }

    def restore_state(self, state: dict[tuple[Party, Party], tuple[float, int]]) -> None:
        """Carry on from `checkpoint_state`'s ``state`` (on links built from the same specs and seed)."""
        for (src, dst), (busy_until, count) in state.items():
            link = self._open(src, dst)
            link.busy_until, link.count = busy_until, count

    def _open(self, src: Party, dst: Party) -> _Link:
        """The link ``src -> dst``, first used now: its behaviour is the one every link of its role pair
        from a sender of its delay shares, built for the first of them."""
        extra_s = self._slow.get(src, 0.0) if self._slow else 0.0
        behaviour = self._behaviours.get((src.role, dst.role, extra_s))
        if behaviour is None:
            spec = self.spec(src.role, dst.role)
            behaviour = self._behaviours[(src.role, dst.role, extra_s)] = _Behaviour(spec, extra_s)
        down = tuple(
            (partition.from_s, partition.until_s)
            for partition in self._partitions
            if any(ends.covers(src, dst) for ends in partition.links)
        ) if self._partitions else ()
        link = _Link(behaviour, link_key(self._seed, src, dst), down)
        self._links.setdefault(src, {})[dst] = link
        return link


def _is_down(intervals: tuple[tuple[float, float], ...], now: float) -> bool:
    return any(start <= now < end for start, end in intervals)


__all__ = [
    "COPY_LATENCY_DRAW",
    "Constant",
    "DUPLICATE_DRAW",
    "Empirical",
    "LATENCY_DRAW",
    "LATENCY_MODELS",
    "LOSS_DRAW",
    "Latency",
    "LinkEnds",
    "LinkSpec",
    "Links",
    "LogNormal",
    "Partition",
    "REORDER_DRAW",
    "Uniform",
    "draw_bits",
    "latency_from_table",
    "link_ends",
    "uniforms",
]
