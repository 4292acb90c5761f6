"""What the runner hands a protocol, and what a protocol hands back.

A protocol is an async function ``run(ctx) -> Outcome`` executed inside an open network in virtual time.
It builds its actors, drives its rounds and measures its metrics; the runner owns everything around it
(data, network, ledger, clock, result folder).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..actors.population import Population
from ..actors.user import ModelUse, User
from ..data.ratings import Ratings
from ..invariants import InvariantMonitor
from ..network.availability import Churn, ComputeTime, MidRoundDropout
from ..network.network import Network
from ..network.party import Party
from ..seeding import Stream, generator


@dataclass
class RunContext:
    """Everything a protocol needs from the runner.

    Attributes:
        scenario: the validated scenario (``scenario.protocol`` is the protocol's own config).
        train, test: the data split; test may be empty.
        network: the open network every actor talks through (its ``ledger`` counts the bytes).
        churn, dropout, compute: the availability models (who is online, who crashes, who straggles).
        progress: call with the number of completed rounds after each round.
        model_use: whether the users consulted ``dropout`` and ``compute`` (filled in by the users).
    """

    scenario: Any
    train: Ratings
    test: Ratings
    network: Network
    churn: Churn
    dropout: MidRoundDropout | None
    compute: ComputeTime
    progress: Callable[[int], None] = lambda completed: None
    model_use: ModelUse = field(default_factory=ModelUse)

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

    def population(self, users: Mapping[Party, User]) -> Population:
        """The run's `Population` of ``users``, following this run's availability models."""
        return Population(
            self.network,
            users,
            churn=self.churn,
            dropout=self.dropout,
            compute=self.compute,
            seed=self.seed,
            horizon_s=self.horizon_s,
            model_use=self.model_use,
        )

    @property
    def horizon_s(self) -> float:
        """An upper bound on the run's virtual duration: the deadline of every user's wait."""
        run = self.scenario.run
        return (self.rounds + 2) * (run.round_gap_s + run.round_timeout_s) * 4 + 3600.0


@dataclass(frozen=True)
class PaperFigure:
    """A figure the paper states, beside the same quantity measured in this run.

    Attributes:
        quantity: what is measured, e.g. "user download per iteration (heaviest served user)".
        paper: the paper's figure with its conditions, as text (e.g. "<= 12 KB with <= 20 rated items").
        measured: this run's value, in ``unit``.
        unit: "B" for bytes (printed with KiB beside), or any other unit name.
        setting: what the measured value depends on that the paper may not share (e.g. the ring used).
    """

    quantity: str
    paper: str
    measured: float
    unit: str = "B"
    setting: str = ""


@dataclass
class Outcome:
    """What a protocol reports.

    ``rounds`` holds one metrics dict per round (with its ``round`` number); ``final`` the final metrics;
    ``baselines`` maps a final metric to the final metric holding its non-private baseline (e.g.
    ``{"err_mean": "baseline_err_mean"}``), so a summary can show the two side by side;
    ``paper_figures`` are the paper's own figures (e.g. its communication claims) beside this run's;
    ``warnings`` say what the run did not do that its user will have expected (e.g. no report released).
    """

    rounds_completed: int
    rounds: list[dict[str, float]]
    final: dict[str, float]
    privacy: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, str] = field(default_factory=dict)
    paper_figures: list[PaperFigure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    invariants: list[InvariantMonitor] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProtocolSpec:
    """A registered protocol: its name, its ``[protocol]`` config class and its run function."""

    name: str
    config: type
    run: Callable[[RunContext], Awaitable[Outcome]]
    description: str = ""
