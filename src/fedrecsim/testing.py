"""fedrecsim's pytest plugin: async integration tests of protocols on an open network in virtual time.

Installed with ``pip install "fedrecsim[test]"`` (it brings pytest and pytest-trio) and loaded by pytest
through the ``pytest11`` entry point, so its fixtures need no import. Tests are pytest-trio tests --
``trio_mode = true`` in your pytest configuration, or ``@pytest.mark.trio`` on each -- and request the
``autojump_clock`` fixture, which makes time virtual: a link with a one-hour latency costs no wall time.

Fixtures:

``sim_network``
    A `SimNetwork`: a fresh `Network` and `Ledger`, open (its delay line running) for the whole test,
    with every link following ``sim_links`` and every seeded draw following ``sim_seed``. Refuses to
    start unless the test runs on a virtual clock (``autojump_clock``).
``sim_seed``
    The seed of the network's links and of `SimNetwork.rng`; ``0``. Override it with
    ``@pytest.mark.parametrize("sim_seed", [1, 2, 3])`` or a fixture of the same name.
``sim_links``
    The `LinkSpec` of every link: ``LinkSpec()`` (no latency, unlimited bandwidth, no loss). Override it
    like ``sim_seed``, e.g. ``LinkSpec(Constant(0.05), bandwidth_bps=1e6, loss=0.1)``.

The link models are exported here for ``sim_links`` and `open_network`: `LinkSpec` and the latency
models `Constant`, `Uniform`, `LogNormal` and `Empirical`.

A `SimNetwork` starts actors (`SimNetwork.start`, `SimNetwork.population`), records what a party
receives (`SimNetwork.record`) and asserts on the ledger (`SimNetwork.assert_bytes`,
`SimNetwork.assert_no_drops`). `open_network` gives the same object without the fixture, e.g. for a
test that needs two networks or links that differ by role. To run a whole scenario in a test, await
`fedrecsim.run_async` under ``autojump_clock``; to test that a protocol resumes from its checkpoints,
interrupt a run with `InterruptAfter` and compare `fedrecsim.resume`'s result with the run's, or keep
`every_checkpoint` of a run, `resume_from` each, compare with `assert_same_run` and look inside one with
`checkpoint_world`. To check a protocol's traffic plan (what ``fedrecsim inspect`` prints) against a run's
ledger, build the plan's input with `plan_context`.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import trio
import trio.testing

from .actors.actor import Actor
from .actors.population import Population
from .actors.user import User
from .checkpoint import CHECKPOINT_FILE, Checkpoints, Saved, work_folder
from .clock import VirtualClock
from .data import prepare_data
from .network.availability import AlwaysOnline, Churn, ComputeTime, MidRoundDropout
from .network.ledger import Ledger
from .network.links import Constant, Empirical, LinkSpec, Links, LogNormal, Uniform
from .network.network import Network
from .network.party import Party, Role
from .network.wire import Broadcast, Envelope, decode, encode
from .protocols.runtime import PlanContext
from .scenario import parse_scenario
from .seeding import Stream, generator

M = TypeVar("M")

#: How long the users of `SimNetwork.population` wait for a message at most, in virtual seconds.
DEFAULT_HORIZON_S = 86_400.0


class Received:
    """Everything one party received since recording began, in delivery order.

    Each entry is the `Envelope` the party's mailbox got -- decoded from the delivered bytes, so equal to
    what the party itself saw -- and its virtual delivery time. Messages that were lost or addressed to
    the party while it was offline are not here (they were never received).
    """

    def __init__(self, party: Party) -> None:
        self.party = party
        self.envelopes: list[Envelope] = []
        self.times: list[float] = []

    def __len__(self) -> int:
        return len(self.envelopes)

    def __iter__(self) -> Iterator[Envelope]:
        return iter(self.envelopes)

    def messages(self, kind: type[M]) -> list[M]:
        """The bodies of the received messages of ``kind`` (a registered message class), oldest first."""
        tag = kind.KIND  # type: ignore[attr-defined]
        return [envelope.body for envelope in self.envelopes if envelope.kind == tag]

    def senders(self, kind: type | None = None) -> list[Party]:
        """Who sent each received message (of ``kind`` if given), in delivery order."""
        tag = None if kind is None else kind.KIND  # type: ignore[attr-defined]
        return [envelope.src for envelope in self.envelopes if tag is None or envelope.kind == tag]

    def kinds(self) -> list[str]:
        """The kind tag of each received message, in delivery order."""
        return [envelope.kind for envelope in self.envelopes]


class _RecordingLedger(Ledger):
    """A `Ledger` that also decodes, for the parties being recorded, the exact bytes delivered to them.

    The network reports every delivery to its ledger with the delivered bytes; decoding them again (with
    the strict decoder) gives the receiver's own copy without touching the network.
    """

    def __init__(self) -> None:
        super().__init__(record_transcript=True)
        self.recorded: dict[Party, Received] = {}

    def record_delivered(
        self, time: float, src: Party, dst: Party, kind: str, data: bytes | Broadcast, padding: int = 0,
        sent_round: int | None = None,
    ) -> None:
        super().record_delivered(time, src, dst, kind, data, padding, sent_round)
        received = self.recorded.get(dst)
        if received is not None:
            received.envelopes.append(decode(bytes(data)))
            received.times.append(time)


class SimNetwork:
    """An open network for a test: the `Network`, its `Ledger`, the seed, and helpers to drive and check it.

    Attributes:
        network: the open network; actors built for this test take it as their ``network``.
        ledger: its ledger (``transcript`` is recorded: one row per message, delivered or dropped).
        seed: the seed its links draw from and `rng` derives generators from.
    """

    def __init__(self, network: Network, ledger: _RecordingLedger, seed: int) -> None:
        self.network = network
        self.ledger = ledger
        self.seed = seed

    def rng(self, stream: Stream, *ids: int) -> np.random.Generator:
        """The generator of ``(seed, stream, *ids)``, as `fedrecsim.sim.generator` derives it."""
        return generator(self.seed, stream, *ids)

    def actor_rng(self, party: Party) -> np.random.Generator:
        """The generator a run would give the actor of ``party`` (`Stream.ACTOR`, role code, index)."""
        return generator(self.seed, Stream.ACTOR, party.role.code, party.index)

    def attach(self, *parties: Party) -> None:
        """Bring ``parties`` online (attaching an online party again is a no-op)."""
        for party in parties:
            self.network.attach(party)

    def record(self, party: Party) -> Received:
        """Start recording what ``party`` receives from now on; returns the record, which fills as it
        receives. Recording the same party again returns the same record."""
        received = self.ledger.recorded.get(party)
        if received is None:
            received = self.ledger.recorded[party] = Received(party)
        return received

    @asynccontextmanager
    async def start(self, *actors: Actor) -> AsyncIterator[SimNetwork]:
        """Attach every actor and run the ``run()`` of each that has one, for the duration of the block.

        Actors without ``run`` (e.g. a server driven by the test) are only attached. On exit the actors'
        tasks are cancelled; an actor that raised fails the block with its error.
        """
        for actor in actors:
            self.network.attach(actor.party)
        async with trio.open_nursery() as nursery:
            for actor in actors:
                run = getattr(actor, "run", None)
                if run is not None:
                    nursery.start_soon(run, name=f"{actor!r}.run")
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()

    def population(
        self,
        users: Mapping[Party, User] | Iterable[User],
        *,
        churn: Churn | None = None,
        dropout: MidRoundDropout | None = None,
        compute: ComputeTime | None = None,
        horizon_s: float = DEFAULT_HORIZON_S,
    ) -> Population:
        """A `Population` of ``users`` on this network and seed, as a run would build it.

        ``async with sim.population(users).open():`` brings the initially online users up -- each attaches
        and announces `Join` to its server, which must be attached to receive it -- and follows ``churn``
        (default: everyone always online); ``begin_round`` / ``end_round`` apply ``dropout`` and
        ``compute`` like a run's rounds. ``horizon_s`` bounds every user's wait.
        """
        by_party = dict(users) if isinstance(users, Mapping) else {user.party: user for user in users}
        return Population(
            self.network,
            by_party,
            churn=churn if churn is not None else AlwaysOnline(),
            dropout=dropout,
            compute=compute,
            seed=self.seed,
            horizon_s=trio.current_time() + horizon_s,
        )

    def assert_bytes(self, party: Party, *, sent: int | None = None, received: int | None = None) -> None:
        """Assert the bytes ``party`` sent and received so far (an argument left out is not checked).

        Bytes are the lengths of the encoded messages (`wire_size` computes one); received counts only
        delivered messages.
        """
        counters = self.ledger.party(party)
        problems = []
        if sent is not None and counters["sent_bytes"] != sent:
            problems.append(f"sent {counters['sent_bytes']:,} bytes, expected {sent:,}")
        if received is not None and counters["recv_bytes"] != received:
            problems.append(f"received {counters['recv_bytes']:,} bytes, expected {received:,}")
        if problems:
            raise AssertionError(
                f"{party} {' and '.join(problems)} "
                f"({counters['sent_msgs']} messages sent, {counters['recv_msgs']} received)"
            )

    def assert_no_drops(self) -> None:
        """Assert that no message was lost on a link or addressed to an offline party so far.

        Messages still in flight are counted as dropped (``unfinished``) only when the network closes; to
        include them, await until they are due before asserting.
        """
        totals = self.ledger.totals()
        if totals["dropped_msgs"]:
            reasons = ", ".join(f"{count} {reason}" for reason, count in self.ledger.dropped_by_reason.items() if count)
            senders = ", ".join(
                f"{party}: {self.ledger.party(party)['dropped_msgs']}"
                for party in self.ledger.parties()
                if self.ledger.party(party)["dropped_msgs"]
            )
            raise AssertionError(f"{totals['dropped_msgs']} messages dropped ({reasons}); by sender: {senders}")


def wire_size(src: Party, dst: Party, message: Any) -> int:
    """The bytes ``message`` from ``src`` to ``dst`` occupies on the wire: what the ledger counts for it.

    The size does not depend on when it is sent (the send time is always a 64-bit float on the wire).
    """
    return len(encode(src, dst, 0.0, message))


def plan_context(tables: Mapping[str, Any], **expected: float) -> PlanContext:
    """The `PlanContext` a protocol's traffic plan reads for the scenario ``tables``: its data prepared as a run
    prepares it, every user online from the start, no joins, leaves or dropout -- unless ``expected`` says
    otherwise (``online=``, ``joins=``, ``dropout=``, ...: the expectations of the scenario's availability)."""
    scenario = parse_scenario(tables)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    users = float(train.n_users)
    everyone = {"initial_online": users, "online": users, "joins": 0.0, "leaves": 0.0, "dropout": 0.0}
    return PlanContext(scenario, train, test, **{**everyone, **expected})


def every_checkpoint(scenario: Any, out: Path | str) -> tuple[Any, list[Saved]]:
    """Run ``scenario`` (as `fedrecsim.run` takes it) to the result folder ``out``, saving a checkpoint at
    every round's end; returns the result and each checkpoint the run wrote, in order (the run removes the
    files when it completes: `resume_from` puts one back)."""
    from .runner import run

    written: list[Saved] = []
    write = Checkpoints._write

    def keep(self: Checkpoints, saved: Saved) -> None:
        written.append(saved)
        write(self, saved)

    Checkpoints._write = keep  # type: ignore[method-assign]
    try:
        result = run(scenario, out=out, checkpoint_every=1)
    finally:
        Checkpoints._write = write  # type: ignore[method-assign]
    return result, written


def resume_from(saved: Saved, out: Path | str) -> Any:
    """Resume, from the checkpoint ``saved`` (`every_checkpoint`), the run whose result goes to ``out``, as
    `fedrecsim.resume` does after the run was killed right after it saved it."""
    from .runner import resume

    folder = work_folder(Path(out))
    folder.mkdir()
    (folder / CHECKPOINT_FILE).write_bytes(pickle.dumps(saved))
    return resume(out)


def checkpoint_world(saved: Saved) -> dict[str, Any]:
    """What the checkpoint ``saved`` holds -- the network's, the ledger's and the population's state, each
    user's and object's attributes, the driver's values -- with each live object it refers to left as its
    name (``"network"``, ``"user user:3"``): to look at, not to resume."""

    class Names(pickle.Unpickler):
        def persistent_load(self, name: str) -> str:
            return name

    return Names(io.BytesIO(saved.world)).load()


#: What a run resumed from a checkpoint must have ended with exactly as the run never interrupted.
SAME_RUN_KEYS = ("transcript_xxh3_128", "metrics", "ledger", "privacy", "invariants", "rounds_completed", "virtual_time_s")


def assert_same_run(run: Any, reference: Any) -> None:
    """Assert that ``run`` (a `fedrecsim.RunResult` of a run that saved checkpoints, or resumed from one)
    ended exactly as ``reference``, the run never interrupted: `SAME_RUN_KEYS` of the result, its warnings
    (but the one about checkpoints put off, which concerns how the run was saved), the per-round rows and
    every array of the protocol's final state, entry by entry (its other entries may hold wall-clock
    timings)."""
    for key in SAME_RUN_KEYS:
        assert run.result[key] == reference.result[key], f"{key} differs"

    def about_the_run(warnings: list[str]) -> list[str]:
        return [warning for warning in warnings if "checkpoint(s) due at a round's end were put off" not in warning]

    assert about_the_run(run.result["warnings"]) == about_the_run(reference.result["warnings"])
    assert run.rounds == reference.rounds
    arrays = {name for name, value in reference.outcome.state.items() if isinstance(value, np.ndarray)}
    assert arrays == {name for name, value in run.outcome.state.items() if isinstance(value, np.ndarray)}
    for name in sorted(arrays):
        np.testing.assert_array_equal(run.outcome.state[name], reference.outcome.state[name], err_msg=name)


class InterruptAfter:
    """A progress callback (`fedrecsim.run`'s ``progress``) that interrupts the run, as Ctrl-C would, once
    ``rounds`` rounds are complete: with ``checkpoint_every``, the run is left to `fedrecsim.resume`, so a
    test can check that a resumed run ends as the run never interrupted."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def __call__(self, completed: int, total: int) -> None:
        if completed == self.rounds:
            raise KeyboardInterrupt


def _check_virtual_clock() -> None:
    clock = trio.lowlevel.current_clock()
    virtual = isinstance(clock, VirtualClock) or (
        isinstance(clock, trio.testing.MockClock) and math.isfinite(clock.autojump_threshold)
    )
    if not virtual:
        raise RuntimeError(
            "the simulated network needs virtual time: request pytest-trio's autojump_clock fixture in the "
            f"test (the loop runs on {type(clock).__name__})"
        )


@asynccontextmanager
async def open_network(
    *,
    seed: int = 0,
    links: LinkSpec = LinkSpec(),
    by_roles: Mapping[tuple[Role, Role], LinkSpec] | None = None,
    resolution_s: float = 0.001,
) -> AsyncIterator[SimNetwork]:
    """An open `SimNetwork` for the duration of the block, in the running trio loop.

    Args:
        seed: what the links' loss and latency draws (and `SimNetwork.rng`) derive from.
        links: the spec of every link without an entry in ``by_roles``.
        by_roles: specs per directed role pair, e.g. ``{(Role.USER, Role.SERVER): LinkSpec(...)}``.
        resolution_s: delivery times are rounded up to a multiple of this (0 = exact).

    Raises:
        RuntimeError: the loop does not run on a virtual clock (``autojump_clock`` or `VirtualClock`).
    """
    _check_virtual_clock()
    ledger = _RecordingLedger()
    network = Network(Links(seed, links, by_roles or {}), ledger, resolution_s=resolution_s)
    async with network.open():
        yield SimNetwork(network, ledger, seed)


@pytest.fixture
def sim_seed() -> int:
    """The seed of ``sim_network``: ``0`` unless overridden (parametrize it, or define a fixture of that name)."""
    return 0


@pytest.fixture
def sim_links() -> LinkSpec:
    """The `LinkSpec` of every link of ``sim_network``: no latency, unlimited bandwidth, no loss."""
    return LinkSpec()


@pytest.fixture
async def sim_network(sim_seed: int, sim_links: LinkSpec) -> AsyncIterator[SimNetwork]:
    """An open `SimNetwork` on ``sim_links`` and ``sim_seed`` for the whole test (needs ``autojump_clock``)."""
    async with open_network(seed=sim_seed, links=sim_links) as sim:
        yield sim


__all__ = [
    "DEFAULT_HORIZON_S",
    "Constant",
    "InterruptAfter",
    "SAME_RUN_KEYS",
    "assert_same_run",
    "checkpoint_world",
    "every_checkpoint",
    "resume_from",
    "Empirical",
    "LinkSpec",
    "LogNormal",
    "Received",
    "SimNetwork",
    "Uniform",
    "open_network",
    "plan_context",
    "sim_links",
    "sim_network",
    "sim_seed",
    "wire_size",
]
