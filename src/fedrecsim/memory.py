"""A run's memory, estimated before it starts, against the memory the machine will give it.

A typo such as ``--set protocol.d=100000000`` must not grow a process until the kernel's OOM killer
takes it (and other work with it): every run -- ``fedrecsim run``, a sweep's runs, ``fedrecsim inspect``
and its calibration -- is checked by `check_memory` before it allocates its data and again before its
protocol starts, and refused with `MemoryLimitError` when the estimate exceeds the memory available.

The estimate (`estimate_memory`) adds up

- the data: the rating arrays (and, for synthetic data, the generator's latent factors and sampling
  blocks), from ``[data]``'s sizes before the data exists and from the data's shape once it does;
- the parties: about `PARTY_BYTES` per user (its actor, generator, mailbox, ledger rows), measured;
- the protocol's own arrays -- its models and the messages a round keeps in flight (each once encoded
  and once decoded) -- as the protocol declares them next to its traffic plan
  (`ProtocolSpec.memory`, a function of a `MemoryContext` returning `MemoryItem`s). A protocol without
  a declaration is estimated from its data and parties only (the generic fallback), which says so.

The estimate is of the order of magnitude, meant to catch runs that cannot fit, not to budget tight
ones: its figures are upper-leaning (every selected user's messages in flight at once).

The memory available (`available_memory`) is the least of ``MemAvailable`` in ``/proc/meminfo``, the
headroom under the process's cgroup limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) and under
its address-space limit (``RLIMIT_AS``, ``ulimit -v``) -- whichever exist. The override, for users who
know better: the environment variable ``FEDRECSIM_MEMORY_LIMIT`` (the CLI's ``--memory-limit``), either
a number of GiB the run may use instead of the measured figure, or ``off`` for no check.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, MemoryLimitError

try:
    import resource
except ImportError:  # not on Windows: no address-space limit to read there
    resource = None  # type: ignore[assignment]

#: The environment variable that overrides the memory available: GiB, or "off".
LIMIT_ENV = "FEDRECSIM_MEMORY_LIMIT"

#: Bytes per user party (actor, generator, mailbox, ledger and result rows): measured as the growth of
#: a run's peak RSS from 2,000 to 20,000 users of fcf (11.7 KiB per user), rounded up.
PARTY_BYTES = 12 * 1024

#: Bytes per rating entry held by the data: user and item indices and the value, in the train/test
#: arrays and the per-user index a loader or split builds (measured peak in the same runs, rounded up).
ENTRY_BYTES = 64

_GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryItem:
    """One part of a run's memory: ``what`` it is, its ``bytes``, and the scenario ``keys`` that drive it."""

    what: str
    bytes: float
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryContext:
    """What a protocol's memory estimate may look at: the scenario and the data's shape.

    Attributes:
        scenario: the validated scenario (``scenario.protocol`` is the protocol's own config).
        users, items: the data's users and items (from ``[data]`` before the data exists).
        train_entries, test_entries: its training and test entries.
    """

    scenario: Any
    users: int
    items: int
    train_entries: int
    test_entries: int

    @property
    def config(self) -> Any:
        return self.scenario.protocol

    @property
    def entries_per_user(self) -> float:
        return self.train_entries / self.users if self.users else 0.0


@dataclass(frozen=True)
class MemoryEstimate:
    """A run's estimated memory: its parts, largest first, and whether the protocol declared its own."""

    items: tuple[MemoryItem, ...]
    declared: bool

    @property
    def total(self) -> float:
        return sum(item.bytes for item in self.items)

    def drivers(self, count: int = 4) -> list[str]:
        """The keys of the largest parts, largest first, each once (at most ``count``)."""
        keys: list[str] = []
        for item in self.items:
            keys.extend(key for key in item.keys if key not in keys)
        return keys[:count]

    def text(self) -> str:
        """``12.3 GiB (models 11.9 GiB, data 0.4 GiB, ...)``."""
        parts = ", ".join(f"{item.what} {gib(item.bytes)}" for item in self.items[:3] if item.bytes >= 1 << 20)
        return f"{gib(self.total)}" + (f" ({parts})" if parts else "")


def gib(value: float) -> str:
    """Bytes as GiB with one decimal, or MiB below 1 GiB."""
    return f"{value / _GIB:,.1f} GiB" if value >= _GIB else f"{value / (1 << 20):,.0f} MiB"


def config_shape(scenario: Any) -> tuple[int, int, int, int] | None:
    """The data's (users, items, train entries, test entries) from ``[data]`` alone (synthetic data), or
    None when only reading the data tells."""
    data = scenario.data
    if data.source != "synthetic":
        return None
    test = math.floor(data.ratings * data.test_fraction)
    return data.users, data.items, data.ratings - test, test


def _data_items(scenario: Any, users: int, items: int, entries: int, synthetic: bool) -> list[MemoryItem]:
    keys = ("data.ratings", "data.users", "data.items") if synthetic else ("data.path", "data.source")
    parts = [
        MemoryItem("data", float(entries) * ENTRY_BYTES, keys),
        MemoryItem("parties", float(users) * PARTY_BYTES, ("data.users",) if synthetic else ("data.path",)),
    ]
    if synthetic:
        from .data.synthetic import _CELLS_PER_BLOCK

        rank = getattr(scenario.data, "rank", 10)
        # The generator's latent factors, and the user x item weight block it samples from (three copies).
        block = min(float(users) * items, float(_CELLS_PER_BLOCK)) * 8 * 3
        parts.append(MemoryItem("data generator", (float(users) + items) * rank * 8 + block, ("data.users", "data.items")))
    return parts


def estimate_memory(scenario: Any, shape: tuple[int, int, int, int]) -> MemoryEstimate:
    """The memory of a run of ``scenario`` on data of ``shape`` (users, items, train and test entries)."""
    from .protocols import protocol_spec

    users, items, train, test = shape
    synthetic = scenario.data.source == "synthetic"
    parts = _data_items(scenario, users, items, train + test, synthetic)
    spec = protocol_spec(scenario.run.protocol)
    declare: Callable[[MemoryContext], Iterable[MemoryItem]] | None = spec.memory
    if declare is not None:
        parts.extend(declare(MemoryContext(scenario, users, items, train, test)))
    return MemoryEstimate(tuple(sorted(parts, key=lambda item: -item.bytes)), declare is not None)


def available_memory() -> tuple[float, str] | None:
    """The bytes this process may still allocate, and where the figure comes from; None if unknown."""
    figures: list[tuple[float, str]] = []
    meminfo = _meminfo()
    if "MemAvailable" in meminfo:
        figures.append((meminfo["MemAvailable"], "MemAvailable in /proc/meminfo"))
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        figures.append(cgroup)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS) if resource is not None else (-1, -1)
    if resource is not None and soft != resource.RLIM_INFINITY:
        used = _status_bytes("VmSize")
        figures.append((max(0.0, soft - used), "the address-space limit (RLIMIT_AS, ulimit -v)"))
    return min(figures) if figures else None


def _meminfo() -> dict[str, float]:
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return {}
    values = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = float(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


def _status_bytes(name: str) -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0


def _cgroup_headroom() -> tuple[float, str] | None:
    """The headroom under this process's cgroup memory limit (v2, else v1), None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and controllers == "":
            folder = Path("/sys/fs/cgroup") / path.lstrip("/")
            limit, usage = _read_number(folder / "memory.max"), _read_number(folder / "memory.current")
        elif "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            limit, usage = _read_number(folder / "memory.limit_in_bytes"), _read_number(folder / "memory.usage_in_bytes")
            if limit is not None and limit >= 1 << 60:  # v1 writes "no limit" as a huge number
                limit = None
        else:
            continue
        if limit is not None:
            return max(0.0, limit - (usage or 0.0)), "the cgroup's memory limit"
    return None


def _read_number(path: Path) -> float | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return float(text) if text.isdigit() else None


def memory_limit() -> tuple[float, str] | None:
    """The memory a run may use and its source: ``FEDRECSIM_MEMORY_LIMIT`` GiB, else `available_memory`;
    None when the check is off (``off``) or nothing is known.

    Raises:
        ConfigError: the variable is neither ``off`` nor a positive number.
    """
    given = os.environ.get(LIMIT_ENV, "").strip()
    if given.lower() == "off":
        return None
    if given:
        try:
            value = float(given)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{LIMIT_ENV} (--memory-limit)", f"expected GiB > 0 or off, got {given!r}")
        return value * _GIB, f"{LIMIT_ENV} (--memory-limit)"
    return available_memory()


def check_memory(scenario: Any, shape: tuple[int, int, int, int] | None = None) -> MemoryEstimate | None:
    """Refuse (`MemoryLimitError`) a run of ``scenario`` whose estimate exceeds the memory it may use.

    ``shape``: the data's (users, items, train entries, test entries); default from ``[data]`` (synthetic
    data), and without one (a file not read yet) nothing is checked. Returns the estimate checked.
    """
    shape = shape if shape is not None else config_shape(scenario)
    if shape is None:
        return None
    estimate = estimate_memory(scenario, shape)
    limit = memory_limit()
    if limit is not None and estimate.total > limit[0]:
        drivers = ", ".join(_key_value(scenario, key) for key in estimate.drivers())
        raise MemoryLimitError(
            f"the run needs about {estimate.text()} of memory, more than the {gib(limit[0])} available "
            f"({limit[1]}); it grows with {drivers}; --memory-limit GIB or off (env {LIMIT_ENV}) overrides the check"
        )
    return estimate


def _key_value(scenario: Any, key: str) -> str:
    table, _, name = key.partition(".")
    section = scenario.protocol if table == "protocol" else getattr(scenario, table, None)
    value = getattr(section, name, None)
    return f"{key} = {value!r}" if value is not None else key


def allocation_failed(exc: MemoryError) -> MemoryLimitError:
    """An allocation that failed while a run ran (numpy's ``_ArrayMemoryError`` names the array), as the
    one-line error the command prints."""
    what = str(exc) or "an allocation"
    return MemoryLimitError(
        f"out of memory while running: {what}; lower the scenario's sizes or give the process more memory"
    )


__all__ = [
    "ENTRY_BYTES",
    "LIMIT_ENV",
    "PARTY_BYTES",
    "MemoryContext",
    "MemoryEstimate",
    "MemoryItem",
    "allocation_failed",
    "available_memory",
    "check_memory",
    "config_shape",
    "estimate_memory",
    "gib",
    "memory_limit",
]
