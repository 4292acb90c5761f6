"""The exception hierarchy of fedrecsim.

Every error the simulator raises on purpose derives from `SimulationError`. Where a built-in exception
has the same meaning, the subclass derives from it too, so callers can catch either: a bad scenario key
is both a `ConfigError` and a `ValueError`; a party that did not answer in time is both a `PartyTimeout`
and a `trio.TooSlowError`.
"""

from __future__ import annotations

import trio


class SimulationError(Exception):
    """Root of every error fedrecsim raises deliberately."""


class ConfigError(SimulationError, ValueError):
    """A scenario or protocol configuration value is missing, unknown, mistyped or out of range.

    The message names the key path (e.g. ``availability.p_join``) and what would have been accepted.
    """

    def __init__(self, key_path: str, problem: str) -> None:
        self.key_path = key_path
        self.problem = problem
        super().__init__(f"{key_path}: {problem}" if key_path else problem)


class DatasetError(SimulationError, ValueError):
    """A dataset file is missing or malformed; the message names the file and, where known, the line."""

    def __init__(self, path: object, problem: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class WireError(SimulationError, ValueError):
    """Bytes that do not decode to a registered message, or a message that cannot be encoded."""


class ProtocolViolation(SimulationError):
    """A party met a message or stage it did not expect; the message names party, expected and received."""


class PartyTimeout(SimulationError, trio.TooSlowError):
    """A party waited past its virtual deadline for a message that never came."""


class OutputError(SimulationError, OSError):
    """A result folder cannot be written where asked, or writing it would remove something of the user's.

    The message names the path and why; nothing has been created or removed when it is raised.
    """

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class MemoryLimitError(SimulationError, MemoryError):
    """A run would need more memory than is available (its estimate, before it starts: `fedrecsim.memory`),
    or an allocation failed while it ran; the message names the estimate or the array, and the override."""


class CheckpointError(SimulationError):
    """A checkpoint cannot be resumed: there is none, it is not one, another version wrote it, or the
    run's data changed since; the message names the file and the reason."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM after ``completed`` of ``total`` rounds; it wrote nothing.

    A `KeyboardInterrupt`, so code that already stops on Ctrl-C stops on it too.
    """

    def __init__(self, completed: int, total: int) -> None:
        self.completed = completed
        self.total = total
        super().__init__(f"interrupted after {completed:,} of {total:,} rounds")


class SecAggAborted(ProtocolViolation):
    """Secure aggregation gave up: after ``stage`` fewer parties remain than the threshold needs.

    The message names the stage, how many remained and how many were needed; the sum was not computed and
    no secret of a user who was still in the protocol has been revealed (the server aborts before asking
    for the shares that would unmask anybody).
    """

    def __init__(self, stage: str, problem: str) -> None:
        self.stage = stage
        self.problem = problem
        super().__init__(f"secure aggregation aborted at {stage}: {problem}")


__all__ = [
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "Interrupted",
    "MemoryLimitError",
    "OutputError",
    "PartyTimeout",
    "ProtocolViolation",
    "SecAggAborted",
    "SimulationError",
    "WireError",
]
