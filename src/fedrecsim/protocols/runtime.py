"""What the runner hands a protocol, and what a protocol hands back.

A protocol is an async function ``run(ctx) -> Outcome`` executed inside an open network in virtual time.
It builds its actors, drives its rounds and measures its metrics; the runner owns everything around it
(data, network, ledger, clock, result folder).

A protocol that can also run over real TCP with its parties in several OS processes (``fedrecsim run
--transport tcp``, `fedrecsim.launcher`) says how in `Distributed`: the same actors, one entry per role
for the process that hosts that role's parties, and how the parts the processes return make its `Outcome`.

A protocol that can resume from checkpoints (``resumable``, `fedrecsim.checkpoint`) builds its world as
always, then asks `RunContext.resumed` for the state to carry on from, and ends every round with
`RunContext.end_round`.

A protocol that sends something after its last round -- a final broadcast of what its rounds computed --
says so first (`RunContext.begin_closing`): the ledger counts it in the closing phase, apart from the
rounds as the set-up is, so that a round's traffic does not depend on whether it was the last.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

from ..actors.membership import Join, Leave
from ..actors.population import Population
from ..actors.user import ModelUse, User
from ..checkpoint import Checkpoints
from ..data.ratings import Ratings
from ..invariants import InvariantMonitor
from ..metric_declarations import MetricInfo
from ..network.availability import Churn, ComputeTime, MidRoundDropout
from ..network.network import Network
from ..network.party import SERVER, Party, Role
from ..network.tcp import Group
from ..network.wire import encode, kind_of
from ..seeding import Stream, generator

if TYPE_CHECKING:
    from ..audit.spec import AuditSpec


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
        checkpoints: the run's checkpointing (None: it saves none and resumes from none).
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
    checkpoints: Checkpoints | None = None

    def resumed(self, population: Population | None, objects: Mapping[str, Any]) -> dict[str, Any] | None:
        """For a run resuming from a checkpoint: put the saved state into the world the protocol just built
        -- the network, the ledger, ``population`` and its users, and each of ``objects`` (its server-side
        actors and whatever else `end_round` saves) -- and return the values `end_round` saved; None for a
        new run. Call it once the world is built, before ``population.open()``."""
        if self.checkpoints is None or self.checkpoints.resumed is None:
            return None
        return self.checkpoints.restore(self, population, objects)

    async def end_round(
        self, round_index: int, population: Population | None, objects: Mapping[str, Any], values: dict[str, Any],
        resting: tuple[Any, ...] = (),
    ) -> None:
        """The end of round ``round_index`` of a resumable protocol, after its gap: fold the transcript hash
        (`Ledger.fold`) and, when one is due, save a checkpoint (`Checkpoints.save`).

        Args:
            population, objects: as for `resumed` (the same names each round).
            values: the driver's own state to carry on with (its metrics so far, initial models, ...).
            resting: actors with a task of their own besides the users (a third party, proxies): a
                checkpoint is saved only while each is at rest (`Actor.at_rest`); a resumed run starts
                their ``run`` again.
        """
        self.network.ledger.fold()
        checkpoints = self.checkpoints
        if checkpoints is not None and checkpoints.due(round_index, self.rounds):
            await checkpoints.save(self, round_index, population, objects, values, resting)

    def begin_closing(self, population: Population | None) -> None:
        """After the last round, before what the protocol sends once its rounds are over (privirec's
        filters): the ledger's closing phase begins (`Ledger.begin_closing`), with ``population``'s users
        online now (none without a population) -- counted apart from the rounds, whose means leave it out."""
        self.network.ledger.begin_closing(len(population.online) if population is not None else 0)

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
    """A figure the paper states, beside the same quantity measured in this run on the population the
    paper's claim is about.

    A paper's figure holds under a condition ("a user who rated no more than 20 items", "per silo"):
    ``population`` names that condition as this run applied it, and ``measured`` / ``measured_max`` are the
    mean and the largest value over the parties (and iterations) that meet it -- never over others. A
    run's extreme party outside the condition may be shown beside it as ``heaviest``, labelled so.

    Attributes:
        quantity: what is measured, e.g. "user download per iteration".
        paper: the paper's figure with its conditions, as text (e.g. "<= 12 KB with <= 20 rated items").
        measured: this run's mean over ``population``, in ``unit``; None when no party of the run meets
            the condition (``population_size`` 0).
        unit: "B" for bytes (printed with KiB beside), or any other unit name.
        setting: what the measured value depends on that the paper may not share (e.g. the ring used).
        population: the paper's condition as applied here, e.g. "served users with <= 20 rated items,
            per iteration" ("" for a figure about the whole run).
        population_size: how many parties meet it (with ``population_samples`` samples: party-iterations).
        population_samples: the values ``measured`` is the mean of (e.g. party-iterations).
        measured_max: the largest value over ``population`` (None if not stated or none meets it).
        heaviest: the largest value over every party of the run, whatever the condition (None: not shown).
        heaviest_label: what ``heaviest`` is, e.g. "heaviest served user, worst iteration (any number of
            rated items)".
    """

    quantity: str
    paper: str
    measured: float | None
    unit: str = "B"
    setting: str = ""
    population: str = ""
    population_size: int = 0
    population_samples: int = 0
    measured_max: float | None = None
    heaviest: float | None = None
    heaviest_label: str = ""


@dataclass
class Outcome:
    """What a protocol reports.

    ``rounds`` holds one metrics dict per round (with its ``round`` number); ``final`` the final metrics;
    ``baselines`` maps a final metric to the final metric holding its non-private baseline (e.g.
    ``{"err_mean": "baseline_err_mean"}``), so a summary can show the two side by side;
    ``paper_figures`` are the paper's own figures (e.g. its communication claims) beside this run's;
    ``warnings`` say what the run did not do that its user will have expected (e.g. no report released);
    ``distributions`` hold compact distributions for the report, each ``{"of": what, "unit": unit,
    "quantiles": [q, ...], "values": [the q-quantile, ...]}`` (e.g. dpmf's absolute prediction errors);
    ``timing`` holds wall-clock seconds the protocol measured of a part of its run (e.g. fedvae's
    ``krum_filter_s``): they vary from run to run, so they go to ``result.json``'s ``timing`` section
    beside ``wall_time_s``, never into the metrics or the transcript.

    ``trivial`` maps a final metric to the final metric holding its trivial predictor's value (e.g.
    ``{"test_rmse": "test_rmse_mean_predictor", "hr@10": "hr@10_random"}``); ``trivial_reason`` says why
    the model may do worse than it (e.g. the noise scale against the ratings' spread). result.json lists
    every metric on which the model does worse (`fedrecsim.metric_reference.worse_than_trivial`).
    """

    rounds_completed: int
    rounds: list[dict[str, float]]
    final: dict[str, float]
    privacy: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, str] = field(default_factory=dict)
    paper_figures: list[PaperFigure] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    invariants: list[InvariantMonitor] = field(default_factory=list)
    distributions: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    trivial: dict[str, str] = field(default_factory=dict)
    trivial_reason: str = ""
    timing: dict[str, float] = field(default_factory=dict)


def index_length(indices: np.ndarray) -> np.ndarray:
    """The msgpack length of each non-negative integer: 1 up to 127, 2 up to 255, 3 up to 65535, else 5.

    A party's index travels in every message it sends or receives, so a message's size depends on which
    user sends it once the users' indices pass 127: a plan's size for "one of these users" is their mean,
    certain only when all their indices have one length."""
    return 1 + (indices > 127) + 1 * (indices > 255) + 2 * (indices > 65535)


@dataclass(frozen=True)
class PlanContext:
    """What a protocol's traffic plan may look at (`ProtocolSpec.plan`): the scenario, the data, and the
    availability the scenario's ``[availability]`` model leads one to expect.

    Attributes:
        scenario: the validated scenario (``scenario.protocol`` is the protocol's own config).
        train, test: the data split the run would use.
        initial_online: users expected online when the population opens (round 0, the set-up).
        online: users expected online at the start of a round, averaged over rounds 1..R.
        joins, leaves: users expected to join / leave per round; each sends ``core.join`` /
            ``core.leave`` to its home party (`membership`).
        dropout: the chance that an online user crashes mid-round (silent after the round's request;
            it announces a join again at the round's end).
    """

    scenario: Any
    train: Ratings
    test: Ratings
    initial_online: float
    online: float
    joins: float
    leaves: float
    dropout: float = 0.0

    @property
    def config(self) -> Any:
        return self.scenario.protocol

    @property
    def rounds(self) -> int:
        return self.scenario.run.rounds

    @property
    def max_message_bytes(self) -> int:
        """The scenario's size limit of a message (``network.max_message_mb``), as its run's network has it."""
        return int(self.scenario.network.max_message_mb * 1024 * 1024)

    def message_bytes(self, body: Any, src: Party, dst: Party) -> int:
        """The exact encoded size of ``body`` sent from ``src`` to ``dst``: the real wire codec's length.

        Raises:
            WireError: the message exceeds the scenario's limit (`max_message_bytes`): the run would refuse it.
        """
        return len(encode(src, dst, 0.0, body, self.max_message_bytes))

    def user_bytes(self, make: Callable[[int], Any], other: Party, *, to_user: bool) -> np.ndarray:
        """For every user of the data, the exact encoded size of ``make(n)`` -- ``n`` the user's number of
        rated items -- sent to that user by ``other`` (``to_user``) or by that user to ``other``.

        ``make`` is called once per distinct ``n``; what differs between two users with the same ``n`` is
        only the length of their party index on the wire, which is added exactly.
        """
        counts = self.train.user_counts()
        first = Party(Role.USER, 0)
        distinct, inverse = np.unique(counts, return_inverse=True)
        sizes = np.array(
            [self.message_bytes(make(int(n)), *((other, first) if to_user else (first, other))) for n in distinct],
            dtype=np.int64,
        )
        return sizes[inverse] + index_length(np.arange(counts.size)) - index_length(np.zeros(1, dtype=np.int64))

    def flow(self, body: Any, src: Party, dst: Party, messages: float = 1.0) -> Flow:
        """``messages`` messages of exactly ``body``'s size from ``src``'s role to ``dst``'s role."""
        return Flow(kind_of(type(body)), src.role, dst.role, messages, messages * self.message_bytes(body, src, dst))

    def users_flow(
        self, body: Any, other: Party, messages: float, users: np.ndarray | None = None, *, to_user: bool = False
    ) -> Flow:
        """``messages`` messages of ``body``, each between one of ``users`` (indices; default every user of
        the data) and ``other``: sent to that user (``to_user``) or by it. Each is sized at the mean over
        ``users`` (`index_length`), exact when all their indices have one length, when there are no
        messages, or when ``messages`` is one message per user of ``users``."""
        indices = np.arange(self.train.n_users) if users is None else np.asarray(users)
        first = Party(Role.USER, 0)
        size = self.message_bytes(body, *((other, first) if to_user else (first, other)))
        lengths = index_length(indices)
        extra = float(lengths.mean()) - 1.0 if indices.size else 0.0
        exact = not messages or indices.size == 0 or bool(lengths.min() == lengths.max()) or messages == indices.size
        src, dst = (other.role, Role.USER) if to_user else (Role.USER, other.role)
        return Flow(kind_of(type(body)), src, dst, messages, messages * (size + extra), exact)

    def membership(
        self, home: Role = Role.SERVER, *, initial: bool = False, users: np.ndarray | None = None
    ) -> tuple[Flow, ...]:
        """The ``core.join`` / ``core.leave`` messages users send their ``home`` role: per round, or
        (``initial``) the initial online users' joins of the set-up. ``users`` (indices; default every
        user of the data) are the users that are parties: the availability's expected counts, which are
        over every user of the data, are scaled to their share, and each message is sized as one of
        theirs (`users_flow`)."""
        to = Party(home, 0) if home is not Role.SERVER else SERVER
        n_users = self.train.n_users
        share = (n_users if users is None else len(users)) / n_users if n_users else 0.0
        if initial:
            return (self.users_flow(Join(), to, self.initial_online * share, users),)
        return (self.users_flow(Join(), to, self.joins * share, users), self.users_flow(Leave(), to, self.leaves * share, users))


@dataclass(frozen=True)
class Flow:
    """Messages of one kind from one role to another, expected in a round (or in the set-up).

    Attributes:
        kind: the message kind, e.g. ``dpmf.item_vectors``.
        src, dst: the sending and the receiving role.
        messages: how many (an expectation: it may be fractional).
        bytes: their total encoded size; exact when the sizes are (fixed-size messages, or sizes
            computed sender by sender) and ``exact`` is true, an expectation otherwise.
        exact: false when ``bytes`` is itself an expectation (e.g. over a random choice of users).
    """

    kind: str
    src: Role
    dst: Role
    messages: float
    bytes: float
    exact: bool = True


@dataclass(frozen=True)
class TrafficPlan:
    """A protocol's own account of the messages of a run (`ProtocolSpec.plan`), for ``fedrecsim inspect``.

    Attributes:
        parties: the parties that will exist, per role (users: every user of the data).
        setup: the flows before round 1 (the ledger's round 0).
        per_round: the flows of one round, expected, for every round 1..R.
        assumptions: what the expectation assumes, in words (e.g. "one pre-sharing attempt").
        closing: the flows after round R (the ledger's closing phase, `RunContext.begin_closing`).
    """

    parties: Mapping[Role, int]
    setup: tuple[Flow, ...] = ()
    per_round: tuple[Flow, ...] = ()
    assumptions: tuple[str, ...] = ()
    closing: tuple[Flow, ...] = ()


class Cue:
    """What one entry of a process (`Distributed`) waits for: the start of the run, and its end.

    ``await cue.ready()`` says the entry has built its actors and attached the parties that must be
    reachable from the start (the server, the third party), and returns when every process has said so:
    no party sends before every process listens. ``await cue.stopped()`` returns when the run is over
    (the server's entry returned).
    """

    def __init__(self, go: trio.Event, stop: trio.Event) -> None:
        self.set_up = trio.Event()
        self._go = go
        self._stop = stop

    async def ready(self) -> None:
        self.set_up.set()
        await self._go.wait()

    async def stopped(self) -> None:
        await self._stop.wait()


#: One process's entry for the parties of one role it hosts: ``entry(ctx, group, cue) -> part``.
Entry = Callable[[RunContext, Group, Cue], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Distributed:
    """How a protocol runs over TCP with its parties split across OS processes (`fedrecsim.launcher`).

    The actors and their messages are the simulated run's; only the orchestration is split. Every process
    builds the run's `RunContext` itself -- the same data and seed, so each actor gets the generator it
    gets in the simulation (spawned from the seed by party id) -- with a network that reaches the other
    processes' parties over TCP.

    Attributes:
        roles: the roles of the protocol's parties, in launch order (by default one process each).
        entries: per role, the entry a process runs for the parties of that role it hosts (a user process:
            for its block of users, ``group.users``). Each calls ``await cue.ready()`` once set up. The
            server's entry drives the rounds, and its return ends the run; every other entry returns its
            part after ``await cue.stopped()``.
        outcome: the run's `Outcome` from the parts every process returned, per role in process order:
            ``outcome(ctx, parts)``, where ``ctx`` has no network (the launching process hosts no party).
        check: raises `ConfigError` for a configuration the entries cannot run (``check(ctx)``, again
            without a network), before any process starts.
    """

    roles: tuple[Role, ...]
    entries: Mapping[Role, Entry]
    outcome: Callable[[RunContext, Mapping[Role, list[dict[str, Any]]]], Outcome]
    check: Callable[[RunContext], None] = lambda ctx: None

    async def run_group(
        self, ctx: RunContext, group: Group, *, ready: Callable[[], Awaitable[None]], finished: Callable[[], Awaitable[None]]
    ) -> dict[Role, dict[str, Any]]:
        """Run the entries of ``group``'s roles on ``ctx.network`` (open); returns their parts by role.

        Once every entry is set up, ``await ready()`` returns when the run may start; once the server's
        entry returned (at once if the group has no server), ``await finished()`` returns when the run
        is to stop, and the other entries are told to.
        """
        go, stop, server_done = trio.Event(), trio.Event(), trio.Event()
        parts: dict[Role, dict[str, Any]] = {}
        if Role.SERVER not in group.roles:
            server_done.set()

        async def enter(role: Role, cue: Cue) -> None:
            parts[role] = await self.entries[role](ctx, group, cue)
            if role is Role.SERVER:
                server_done.set()

        async with trio.open_nursery() as nursery:
            cues = []
            for role in (role for role in self.roles if role in group.roles):
                cue = Cue(go, stop)
                cues.append(cue)
                nursery.start_soon(enter, role, cue)
            for cue in cues:
                await cue.set_up.wait()
            await ready()
            go.set()
            await server_done.wait()
            await finished()
            stop.set()
        return parts

    async def run_here(self, ctx: RunContext) -> Outcome:
        """Every role's entry in this one process on ``ctx.network`` (open), then the outcome: what the
        processes of a TCP run do, without processes or sockets -- e.g. on the simulated network in
        virtual time, to test a protocol's entries against its `ProtocolSpec.run`."""
        everyone = Group("every party", frozenset(self.roles), range(ctx.train.n_users))
        parts = await self.run_group(ctx, everyone, ready=trio.lowlevel.checkpoint, finished=trio.lowlevel.checkpoint)
        return self.outcome(ctx, {role: [part] for role, part in parts.items()})


@dataclass(frozen=True)
class ProtocolSpec:
    """A registered protocol: its name, its ``[protocol]`` config class and its run function.

    ``plan``, optional, returns the protocol's `TrafficPlan` for a scenario without running it:
    ``fedrecsim inspect`` estimates messages and bytes per round and role from it. Without one,
    inspect reports the traffic it measures in a short calibration run.

    ``memory``, optional, returns the protocol's own arrays for a scenario and a data shape -- its models and
    the messages a round keeps in flight -- as `fedrecsim.memory.MemoryItem`s, arithmetic only (nothing
    allocated): every run is checked against the memory available before it starts (`fedrecsim.memory`).
    Without one, the check counts the data and the parties only.

    ``distributed``, optional, lets the protocol run over TCP across processes (`Distributed`); without
    it, ``--transport tcp`` refuses the protocol before anything starts.

    ``resumable``: the protocol saves checkpoints and resumes from them (module docstring); without it,
    ``--checkpoint-every`` refuses the protocol before anything starts.

    ``check``, optional, ``check(scenario, train)`` raises `ConfigError` for a scenario the protocol
    refuses on its data (e.g. dpmf's ring headroom): the runner calls it before the run starts and
    ``fedrecsim inspect`` before it estimates, so inspect refuses exactly what a run would. It returns
    notes for inspect to print (e.g. what a setting of "auto" resolves to).
    ``metrics`` declares every metric the protocol reports, in ``metrics.final`` or ``metrics.rounds``:
    its meaning, unit and support (`fedrecsim.metric_reference`; ``fedrecsim metrics PROTOCOL`` prints them).

    ``audit``, optional, declares what the protocol's privacy claim protects and how to audit it
    (`fedrecsim.audit.AuditSpec`: the neighbouring relation, the claim for a scenario, the parties it covers
    and the protocol's own distinguishers); without it, ``fedrecsim audit`` refuses the protocol.
    """

    name: str
    config: type
    run: Callable[[RunContext], Awaitable[Outcome]]
    description: str = ""
    plan: Callable[[PlanContext], TrafficPlan] | None = None
    memory: Callable[[Any], Iterable[Any]] | None = None
    distributed: Distributed | None = None
    resumable: bool = False
    check: Callable[[Any, Ratings], tuple[str, ...]] | None = None
    metrics: tuple[MetricInfo, ...] = ()
    audit: AuditSpec | None = None
