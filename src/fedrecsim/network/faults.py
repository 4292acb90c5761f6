"""Party faults: crashes (with or without a restart), and byzantine parties that send corrupted messages.

Link faults -- loss, duplication, reordering delay, partitions -- and slow parties are policies of the
links (`fedrecsim.network.links`). What a *party* does wrong is here, and the network applies it where
the party meets the wire:

- `Crash`: the party crashes at a stage of the protocol -- just before it would send a message of a given
  kind, in a given round (the ledger's round) or the first time. From then on it is silent: the network
  detaches it, drops what it still tries to send without counting it (a crashed process sends nothing),
  and keeps it offline until `Network.recover`. With ``restart_after_s`` a user restarts that long after,
  its state kept or lost (`fedrecsim.actors.population.Population` does the restart); other roles never
  restart.
- `Byzantine`: every message of a kind (or every message) the party sends is replaced, on the wire, by a
  forged one (`forge`): its floats NaN or 1e300, its first array one row short or of another dtype, or
  its kind tag swapped for another of the same protocol. A forged message is decoded strictly at the
  receiver (`wire.decode`), so malformed bytes are rejected there, not trusted.

Nothing here draws randomness: a fault is a function of the scenario, so a run with faults is as
reproducible as one without. Each rule applies to its party alone; `PartyFaults` records which rules
fired, so a run can say which never did (a kind the party never sent, a round it was not in).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ..errors import ConfigError, WireError
from .party import Party
from .wire import _DTYPE_CODES, _DTYPES, _HEADER, _SHAPE_STRUCTS, Broadcast, _unpack_array, decode, registered_kinds

_NDARRAY_EXT = 1
_ENVELOPE_HEADER_LEN = 6
#: The value every float of a message becomes under `Corruption.HUGE`: finite, so the wire lets it through
#: (a float32 array gets its own largest finite value instead, which is what 1e300 would overflow past).
HUGE = 1e300


class Corruption(enum.StrEnum):
    """How a byzantine party corrupts a message (`forge`)."""

    NAN = "nan"
    """Every float -- scalar fields and float arrays -- becomes NaN (the wire refuses it at the receiver)."""
    HUGE = "huge"
    """Every float becomes 1e300: finite, well-formed, and absurd (only the receiver's checks can refuse it)."""
    SHAPE = "shape"
    """The first array field loses its last row (or gains one if it has none): a well-formed message of
    the wrong shape."""
    DTYPE = "dtype"
    """The first array field is sent as float32 (float64 if it was float32): the wrong dtype."""
    KIND = "kind"
    """The kind tag becomes another kind of the same protocol (the first, in sorted order, whose fields the
    body fits): a well-formed message of a kind the receiver does not expect."""


@dataclass(frozen=True)
class Crash:
    """``party`` crashes just before it sends a message of ``kind`` (``""``: any kind) in round ``round``
    (the ledger's round; None: the first time it sends such a message).

    Attributes:
        restart_after_s: a user restarts this many virtual seconds after the crash (None: never).
        keep_state: whether the restarted user keeps what it held (its profile, its noise pieces) or
            restarts from its initial state with a fresh generator, as a reinstalled device would.
    """

    party: Party
    kind: str = ""
    round: int | None = None
    restart_after_s: float | None = None
    keep_state: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.party, Party):
            raise ConfigError("faults.crash.party", f"must be a party such as user:3, got {self.party!r}")
        if self.round is not None and (isinstance(self.round, bool) or not isinstance(self.round, int) or self.round < 0):
            raise ConfigError("faults.crash.round", f"must be a round number >= 0, got {self.round!r}")
        restart = self.restart_after_s
        if restart is not None and not (isinstance(restart, (int, float)) and math.isfinite(restart) and restart >= 0):
            raise ConfigError("faults.crash.restart_after_s", f"must be a finite number of seconds >= 0, got {restart!r}")

    def matches(self, kind: str, round_index: int) -> bool:
        return (not self.kind or self.kind == kind) and (self.round is None or self.round == round_index)

    def __str__(self) -> str:
        when = f"in round {self.round}" if self.round is not None else "the first time"
        return f"{self.party} crashes before sending {self.kind or 'anything'} {when}"


@dataclass(frozen=True)
class Byzantine:
    """``party`` sends every message of ``kind`` (``""``: every message) corrupted as ``corrupt`` says."""

    party: Party
    corrupt: Corruption
    kind: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.party, Party):
            raise ConfigError("faults.byzantine.party", f"must be a party such as user:3, got {self.party!r}")
        object.__setattr__(self, "corrupt", Corruption(self.corrupt))

    def __str__(self) -> str:
        return f"{self.party} sends {self.kind or 'every message'} corrupted ({self.corrupt.value})"


class PartyFaults:
    """The party faults of one run, and which of them have fired so far (`fired`, `forged`).

    Args:
        crashes: crash rules; each fires at most once.
        byzantine: byzantine rules; for a message, the first rule of its sender that names its kind (or
            any kind) applies.
    """

    def __init__(self, crashes: Iterable[Crash] = (), byzantine: Iterable[Byzantine] = ()) -> None:
        self.crashes = tuple(crashes)
        self.byzantine = tuple(byzantine)
        for rule in self.crashes:
            if not isinstance(rule, Crash):
                raise TypeError(f"crashes must be Crash rules, got {rule!r}")
        for rule in self.byzantine:
            if not isinstance(rule, Byzantine):
                raise TypeError(f"byzantine must be Byzantine rules, got {rule!r}")
        self._pending: dict[Party, list[Crash]] = {}
        for rule in self.crashes:
            self._pending.setdefault(rule.party, []).append(rule)
        self._byzantine: dict[Party, list[Byzantine]] = {}
        for rule in self.byzantine:
            self._byzantine.setdefault(rule.party, []).append(rule)
        self.fired: list[Crash] = []
        self.forged: dict[Byzantine, int] = dict.fromkeys(self.byzantine, 0)

    @property
    def forging(self) -> bool:
        """Whether any party is byzantine."""
        return bool(self._byzantine)

    def crash_now(self, party: Party, kind: str, round_index: int) -> Crash | None:
        """The rule under which ``party`` crashes now, about to send ``kind`` in ``round_index`` (it is
        then spent), or None."""
        rules = self._pending.get(party)
        if not rules:
            return None
        for position, rule in enumerate(rules):
            if rule.matches(kind, round_index):
                del rules[position]
                self.fired.append(rule)
                return rule
        return None

    def forge(self, party: Party, kind: str, data: bytes | Broadcast) -> bytes | None:
        """The forged bytes ``party`` sends instead of ``data`` (a message of ``kind``), or None when no
        rule applies or the corruption leaves the message unchanged (e.g. NaN in a message of integers)."""
        for rule in self._byzantine.get(party, ()):
            if not rule.kind or rule.kind == kind:
                data = bytes(data)
                forged = forge(data, rule.corrupt)
                if forged == data:
                    return None
                self.forged[rule] += 1
                return forged
        return None

    def restarting(self, keep_state: bool) -> frozenset[Party]:
        """The parties with a crash rule that restarts them with their state kept (or lost)."""
        return frozenset(
            rule.party for rule in self.crashes if rule.restart_after_s is not None and rule.keep_state == keep_state
        )

    def idle_rules(self) -> list[Crash | Byzantine]:
        """The rules that never applied: crashes that did not fire, byzantine rules that forged nothing."""
        pending = [rule for rule in self.crashes if rule not in self.fired]
        return [*pending, *(rule for rule, count in self.forged.items() if not count)]


def forge(data: bytes, corruption: Corruption) -> bytes:
    """``data`` (an encoded envelope) with its body corrupted as ``corruption`` says (`Corruption`).

    Envelope fields -- kind (except for `Corruption.KIND`), sender, addressee, send time -- are kept, so
    the forgery arrives where the original would have, from the same sender. The result is msgpack, so it
    always unpacks; whether it decodes to a valid message is the receiver's wire's decision.
    """
    frame = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    fields = frame[_ENVELOPE_HEADER_LEN:]
    if corruption in (Corruption.NAN, Corruption.HUGE):
        value = math.nan if corruption is Corruption.NAN else HUGE
        frame[_ENVELOPE_HEADER_LEN:] = [_filled(field, value) for field in fields]
    elif corruption is Corruption.KIND:
        frame[0] = _other_kind(frame)
    else:
        _first_array(frame, _one_row_off if corruption is Corruption.SHAPE else _other_dtype)
    return msgpack.packb(frame, use_bin_type=True)


def _array_of(value: Any) -> np.ndarray | None:
    if isinstance(value, msgpack.ExtType) and value.code == _NDARRAY_EXT:
        return _unpack_array(value.data)
    return None


def _ext(array: np.ndarray) -> msgpack.ExtType:
    code = _DTYPE_CODES[array.dtype.newbyteorder("<")]
    header = _HEADER.pack(code, array.ndim) + _SHAPE_STRUCTS[array.ndim].pack(*array.shape)
    return msgpack.ExtType(_NDARRAY_EXT, header + np.ascontiguousarray(array, dtype=_DTYPES[code]).tobytes())


def _filled(value: Any, fill: float) -> Any:
    """``value`` with every float in it -- a float, a float array, inside tuples -- replaced by ``fill``."""
    if isinstance(value, float):
        return fill
    if isinstance(value, list):
        return [_filled(item, fill) for item in value]
    array = _array_of(value)
    if array is not None and array.dtype.kind == "f":
        return _ext(np.full_like(array, min(fill, float(np.finfo(array.dtype).max)) if math.isfinite(fill) else fill))
    return value


def _first_array(frame: list[Any], change: Any) -> None:
    """Replace the first array field of ``frame`` (inside tuples too) by ``change(array)``."""

    def visit(container: list[Any], start: int) -> bool:
        for position in range(start, len(container)):
            item = container[position]
            if isinstance(item, list) and visit(item, 0):
                return True
            array = _array_of(item)
            if array is not None:
                container[position] = _ext(change(array))
                return True
        return False

    visit(frame, _ENVELOPE_HEADER_LEN)


def _one_row_off(array: np.ndarray) -> np.ndarray:
    if array.ndim == 0:
        return array.reshape(1)
    if array.shape[0]:
        return array[:-1]
    return np.zeros((1, *array.shape[1:]), dtype=array.dtype)


def _other_dtype(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64 if array.dtype == np.float32 else np.float32)


def _other_kind(frame: list[Any]) -> str:
    """Another kind of the same protocol (the prefix before the first dot) for this frame: the first, in
    sorted order, under which the frame decodes; else the first of them; else ``core.join``."""
    kind = frame[0]
    prefix = kind.partition(".")[0] + "."
    siblings = [other for other in registered_kinds() if other.startswith(prefix) and other != kind]
    for other in siblings:
        try:
            decode(msgpack.packb([other, *frame[1:]], use_bin_type=True))
        except WireError:
            continue
        return other
    return siblings[0] if siblings else "core.join"


__all__ = ["Byzantine", "Corruption", "Crash", "HUGE", "PartyFaults", "forge"]
