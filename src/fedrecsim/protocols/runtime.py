"""What the runner hands a protocol, and what a protocol hands back.

A protocol is an async function ``run(ctx) -> Outcome`` executed inside an open network in virtual time.
It builds its actors, drives its rounds and measures its metrics; the runner owns everything around it
(data, network, ledger, clock, result folder).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.ratings import Ratings
from ..invariants import InvariantMonitor
from ..network.availability import Churn, ComputeTime, MidRoundDropout
from ..network.network import Network
from ..seeding import Stream, generator


@dataclass
class RunContext:
    """Everything a protocol needs from the runner.

    Attributes:
        scenario: the validated scenario (``scenario.protocol`` is the protocol's own config).
        train, test: the data split; test may be empty.
        network: the open network every actor talks through (its ``ledger`` counts the bytes).
        progress: call with the number of completed rounds after each round.
    """

    scenario: Any
    train: Ratings
    test: Ratings
    network: Network
    churn: Churn
    dropout: MidRoundDropout | None
    compute: ComputeTime
    progress: Callable[[int], None] = lambda completed: None

    @property
    def seed(self) -> int:
        return self.scenario.run.seed

    @property
    def config(self) -> Any:
        return self.scenario.protocol

    @property
    def rounds(self) -> int:
        return self.scenario.run.rounds

    def rng(self, stream: Stream, *ids: int) -> np.random.Generator:
        return generator(self.seed, stream, *ids)

    @property
    def horizon_s(self) -> float:
        """An upper bound on the run's virtual duration: the deadline of every user's wait."""
        run = self.scenario.run
        return (self.rounds + 2) * (run.round_gap_s + run.round_timeout_s) * 4 + 3600.0


@dataclass
class Outcome:
    """What a protocol reports. ``rounds`` holds one metrics dict per round (with its ``round`` number)."""

    rounds_completed: int
    rounds: list[dict[str, float]]
    final: dict[str, float]
    privacy: dict[str, Any] = field(default_factory=dict)
    invariants: list[InvariantMonitor] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProtocolSpec:
    """A registered protocol: its name, its ``[protocol]`` config class and its run function."""

    name: str
    config: type
    run: Callable[[RunContext], Awaitable[Outcome]]
    description: str = ""
