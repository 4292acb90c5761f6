"""Runs over real TCP: a protocol's parties split across OS processes on this machine (``--transport tcp``).

``run_tcp(scenario, processes="server,third_party,users")`` is `fedrecsim.runner.run` with the simulated
network replaced by loopback TCP (`fedrecsim.network.tcp`) and virtual time by the real clock. The
process that calls it -- the launcher -- hosts no party. It checks everything it can before anything
starts (the protocol can run over TCP: its `ProtocolSpec.distributed`; the scenario asks for nothing
the real network cannot do; the placement), then starts one child process per group of ``processes``
(``python -m fedrecsim.launcher``) and steers them over their stdin and stdout, one JSON object a line:

1. each child prepares the run's data from the scenario and seed, listens on 127.0.0.1 and reports its
   port; the launcher sends every child all ports, and the children connect into a full mesh;
2. each child builds the actors of its parties through its role's entry (`Distributed.entries`) and
   reports ``ready``; when all have, the launcher says ``go`` and the parties start;
3. the server's entry drives the rounds; when it returns, its child reports ``finished`` and the launcher
   says ``stop`` to every child; each ends its entries, closes its connections gracefully (every frame
   sent is delivered), writes its part -- the entries' parts, its ledger's counters, its socket counts
   -- and reports ``done``;
4. the launcher combines the parts into the protocol's `Outcome` (`Distributed.outcome`) and the ledgers
   into one (`Ledger.combined`), and returns a `RunResult` like a simulated run's, with a ``transport``
   section: per process, its parties, the payload bytes on its sockets beside its ledger's bytes.

Every process runs on `SharedClock` with the launcher's epoch, so a deadline one sends is a deadline
for the other. Nothing can outlive the run: every stage has a wall-clock timeout; a child that fails
reports its typed error, which the launcher raises naming the process; the launcher kills every child
still running when it leaves, on success or failure; and a child whose launcher went away (its stdin
closed) stops at once.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import trio

from .clock import SharedClock
from .config import to_table, toml_literal
from .data import prepare_data
from .errors import ConfigError, PartyTimeout, ProtocolViolation, SimulationError, WireError
from .memory import check_memory
from .network.availability import AlwaysOnline, NoComputeDelay
from .network.ledger import Ledger
from .network.party import Role
from .network.tcp import CLOSE_TIMEOUT_S, LOOPBACK, Group, PeerGone, Placement, TcpNetwork, connect_mesh
from .output import OutputTarget
from .protocols import RunContext, built_in_protocols, protocol_spec
from .protocols.runtime import Distributed
from .runner import (
    BUDGET_MARGIN_S,
    ProgressCallback,
    RunResult,
    _output_target,
    _progress_callback,
    _result_document,
    _RoundCounter,
    sole_errors,
    _with_data_path,
    coerce_scenario,
    finish_run,
)
from .scenario import AvailabilityConfig, FaultsConfig, NetworkConfig, Scenario

#: Wall seconds a child has to start, prepare the data and connect; and to finish once told to stop.
STAGE_TIMEOUT_S = 60.0
#: How long the launcher waits, after a child reported that a peer is gone, for the error of that peer.
PEER_GONE_GRACE_S = 5.0
#: The network keys that stay free over TCP: everything else describes a simulated link.
_FREE_NETWORK_KEYS = frozenset({"resolution_s", "max_message_mb"})


@dataclass(frozen=True)
class Launch:
    """What every child reads before it starts (pickled into the run's work folder)."""

    scenario: Scenario
    placement: Placement
    epoch: float
    budget_s: float


def run_tcp(
    scenario: Any,
    *,
    processes: str | None = None,
    out: str | Path | OutputTarget | None = None,
    overwrite: bool = False,
    progress: ProgressCallback | bool | None = None,
) -> RunResult:
    """Run one scenario over loopback TCP with its parties in several processes (module docstring).

    Args:
        scenario: a `Scenario`, raw scenario tables, or a scenario file path.
        processes: the groups of parties, one process each: comma-separated, each one or more roles
            joined by ``+``, ``users`` repeatable to split the users (`Placement.parse`); default: one
            process per role of the protocol.
        out, overwrite, progress: as `fedrecsim.runner.run`.

    Raises:
        ConfigError: before anything starts -- the protocol cannot run over TCP (naming it), the scenario
            asks for simulated links, churn or faults, or ``processes`` is malformed.
        PartyTimeout, ProtocolViolation, WireError: a process failed (the message names it); every
            process has been stopped.
    """
    scenario = coerce_scenario(scenario)
    target = _output_target(out, overwrite)
    rounds = _RoundCounter(_progress_callback(progress), scenario.run.rounds)
    return finish_run(lambda: _launched(scenario, processes, rounds), target, rounds)


def _launched(scenario: Scenario, processes: str | None, rounds: _RoundCounter) -> RunResult:
    """Check the run, launch its processes, and make its result from their parts."""
    spec = protocol_spec(scenario.run.protocol)
    distributed = _distributed(spec.name, spec.distributed)
    _check_scenario(scenario)
    wall_start = time.perf_counter()
    ctx = _context(scenario)
    distributed.check(ctx)
    n_users = ctx.train.n_users
    placement = Placement.parse(processes, distributed.roles, n_users) if processes else Placement.default(distributed.roles, n_users)
    with tempfile.TemporaryDirectory(prefix="fedrecsim-tcp-") as workdir:
        budget_s = scenario.run.max_virtual_s or ctx.horizon_s - BUDGET_MARGIN_S
        launch = Launch(scenario, placement, time.monotonic(), budget_s)
        (Path(workdir) / "launch.pkl").write_bytes(pickle.dumps(launch))
        finished = trio.run(_coordinate, launch, Path(workdir), rounds)
        parts = [pickle.loads((Path(workdir) / f"part-{position}.pkl").read_bytes()) for position in range(len(placement.groups))]
    return _run_result(scenario, ctx, distributed, placement, parts, finished, time.perf_counter() - wall_start)


def _distributed(name: str, distributed: Distributed | None) -> Distributed:
    if distributed is None:
        supported = [other for other in built_in_protocols() if protocol_spec(other).distributed is not None]
        raise ConfigError(
            "run.protocol",
            f"{name}: TCP is not supported for this protocol yet (--transport tcp runs {', '.join(supported)}); "
            "run it simulated",
        )
    return distributed


def _check_scenario(scenario: Scenario) -> None:
    """Refuse what the real network cannot do: simulated links, churn, dropout, stragglers, faults."""
    defaults = NetworkConfig()
    for field in fields(NetworkConfig):
        if field.name not in _FREE_NETWORK_KEYS and getattr(scenario.network, field.name) != getattr(defaults, field.name):
            raise ConfigError(
                f"network.{field.name}",
                f"over TCP the real network is the link; a simulated link model cannot apply (leave it at "
                f"{toml_literal(to_table(getattr(defaults, field.name)))})",
            )
    availability, always = scenario.availability, AvailabilityConfig()
    for name in ("model", "dropout", "compute_median_s"):
        if getattr(availability, name) != getattr(always, name):
            raise ConfigError(
                f"availability.{name}",
                f"over TCP every user is online for the whole run; got {toml_literal(getattr(availability, name))}, "
                f"needs {toml_literal(getattr(always, name))}",
            )
    if scenario.faults != FaultsConfig():
        raise ConfigError("faults", "over TCP no fault is simulated; leave [faults] empty")


def _context(scenario: Scenario, progress: Callable[[int], None] = lambda completed: None) -> RunContext:
    """The run's context as every process builds it: the data from the scenario and seed, everyone online;
    no network yet (a child sets its `TcpNetwork` once connected; the launcher hosts no party)."""
    seen = _with_data_path(scenario)
    check_memory(seen)  # `fedrecsim.memory`: before the data, and before any process builds its actors
    train, test = prepare_data(seen.data, scenario.run.seed)
    check_memory(seen, (train.n_users, train.n_items, len(train), len(test)))
    return RunContext(seen, train, test, None, AlwaysOnline(), None, NoComputeDelay(), progress=progress)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the launcher


@dataclass(frozen=True)
class _Finished:
    """What the server's process reported at the end of its rounds."""

    elapsed_s: float


class _Child:
    """One child process and its control lines (JSON objects, one a line)."""

    def __init__(self, position: int, name: str, process: trio.Process, stderr: Path) -> None:
        self.position = position
        self.name = name
        self.process = process
        self.stderr = stderr

    def describe(self) -> str:
        return f"process {self.position} ({self.name})"

    async def send(self, message: dict[str, Any]) -> None:
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]

    async def listen(self, events: trio.MemorySendChannel[tuple[int, dict[str, Any]]]) -> None:
        """Pass each control line on as ``(position, message)``; at end-of-file, ``{"eof": True}``."""
        async for line in _lines(self.process.stdout):  # type: ignore[arg-type]
            await events.send((self.position, json.loads(line)))
        await events.send((self.position, {"eof": True}))

    def stderr_tail(self) -> str:
        text = self.stderr.read_text(errors="replace").strip() if self.stderr.exists() else ""
        return text[-2000:]


async def _lines(stream: trio.abc.ReceiveStream):  # type: ignore[no-untyped-def]
    buffer = b""
    while True:
        chunk = await stream.receive_some()
        if not chunk:
            return
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line


async def _coordinate(launch: Launch, workdir: Path, rounds: _RoundCounter) -> _Finished:
    """Start the children, steer them through the stages, and kill whatever still runs when leaving."""
    children: list[_Child] = []
    try:
        with sole_errors():
            async with trio.open_nursery() as nursery:
                events_in, events = trio.open_memory_channel[tuple[int, dict[str, Any]]](math.inf)
                for position, group in enumerate(launch.placement.groups):
                    child = await _spawn(position, group.name, workdir)
                    children.append(child)
                    nursery.start_soon(child.listen, events_in)
                finished = await _steer(launch, _Stages(children, events, rounds))
                nursery.cancel_scope.cancel()
        return finished
    finally:
        with trio.CancelScope(shield=True):
            for child in children:
                if child.process.returncode is None:
                    child.process.kill()
                await child.process.wait()


async def _steer(launch: Launch, stages: _Stages) -> _Finished:
    """Take the children through the stages of the module docstring; wait until every one exited."""
    children = stages.children
    ports = await stages.await_all("port", STAGE_TIMEOUT_S)
    for child in children:
        await child.send({"ports": [ports[position]["port"] for position in range(len(children))]})
    await stages.await_all("ready", STAGE_TIMEOUT_S)
    for child in children:
        await child.send({"go": True})
    driver = next(position for position, group in enumerate(launch.placement.groups) if Role.SERVER in group.roles)
    finished = await stages.await_one(driver, "finished", launch.budget_s)
    for child in children:
        await child.send({"stop": True})
    await stages.await_all("done", CLOSE_TIMEOUT_S + STAGE_TIMEOUT_S)
    for child in children:
        with trio.move_on_after(STAGE_TIMEOUT_S):
            await child.process.wait()
    return _Finished(finished["finished"])


async def _spawn(position: int, name: str, workdir: Path) -> _Child:
    """Start the child for group ``position``, the fedrecsim package importable as in this process."""
    package_root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([package_root, *filter(None, [env.get("PYTHONPATH")])])
    stderr = workdir / f"stderr-{position}.txt"
    with open(stderr, "wb") as handle:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "fedrecsim.launcher", str(workdir), str(position)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=handle,
            env=env,
        )
    return _Child(position, name, process, stderr)


class _Stages:
    """The launcher's view of its children's control lines: waits for a stage, fails on an error."""

    def __init__(self, children: list[_Child], events: trio.MemoryReceiveChannel[tuple[int, dict[str, Any]]], rounds: _RoundCounter) -> None:
        self.children = children
        self.events = events
        self.rounds = rounds
        self.seen: list[dict[str, Any]] = [{} for _ in children]

    async def await_all(self, stage: str, timeout_s: float) -> dict[int, dict[str, Any]]:
        return await self._await(stage, set(range(len(self.children))), timeout_s)

    async def await_one(self, position: int, stage: str, timeout_s: float) -> dict[str, Any]:
        return (await self._await(stage, {position}, timeout_s))[position]

    async def _await(self, stage: str, positions: set[int], timeout_s: float) -> dict[int, dict[str, Any]]:
        """Wait until every one of ``positions`` reported ``stage``; raise the first error a child reports
        -- but a `PeerGone` only if no child reports the error it is the consequence of within
        `PEER_GONE_GRACE_S`."""
        got: dict[int, dict[str, Any]] = {}
        consequence: SimulationError | None = None
        with trio.move_on_after(timeout_s) as scope:
            while not positions.issubset(got):
                position, message = await self.events.receive()
                if "progress" in message:
                    self.rounds(message["progress"])
                elif "error" in message:
                    self.seen[position]["error"] = message
                    error = _child_error(self.children[position], message)
                    if not isinstance(error, PeerGone):
                        raise error
                    if consequence is None:
                        consequence = error
                        scope.deadline = min(scope.deadline, trio.current_time() + PEER_GONE_GRACE_S)
                elif "eof" in message:
                    if "done" in self.seen[position] or "error" in self.seen[position]:
                        continue  # a child that is done, or told why it failed, exits
                    child = self.children[position]
                    raise ProtocolViolation(
                        f"{child.describe()} ended before it reported {stage!r}; its stderr: {child.stderr_tail() or '(empty)'}"
                    )
                else:
                    self.seen[position].update(message)
                    if stage in message:
                        got[position] = message
        if consequence is not None:
            raise consequence
        if not positions.issubset(got):
            late = ", ".join(self.children[position].describe() for position in sorted(positions - got.keys()))
            raise PartyTimeout(f"{late} did not report {stage!r} within {timeout_s:g} s (wall clock); every process was stopped")
        return got


#: The errors a child reports that the launcher raises as they are (naming the child); any other is a
#: `SimulationError` naming its type.
_REPORTED = {kind.__name__: kind for kind in (PartyTimeout, ProtocolViolation, WireError, PeerGone)}


def _child_error(child: _Child, message: dict[str, Any]) -> SimulationError:
    """The typed error a child reported, naming the child."""
    kind = _REPORTED.get(message["error"])
    text = f"{child.describe()}: {message['message']}"
    if kind is not None:
        return kind(text)
    return SimulationError(f"{text} ({message['error']})")


def _run_result(
    scenario: Scenario,
    ctx: RunContext,
    distributed: Distributed,
    placement: Placement,
    parts: list[dict[str, Any]],
    finished: _Finished,
    wall_s: float,
) -> RunResult:
    by_role: dict[Role, list[dict[str, Any]]] = {}
    for part in parts:
        for role, value in part["entries"].items():
            by_role.setdefault(role, []).append(value)
    outcome = distributed.outcome(ctx, by_role)
    ledger = Ledger.combined([part["ledger"] for part in parts])
    shape = {"users": ctx.train.n_users, "items": ctx.train.n_items, "train_entries": len(ctx.train), "test_entries": len(ctx.test)}
    document = _result_document(
        scenario, shape, outcome, ledger, finished.elapsed_s, wall_s, [], protocol_spec(scenario.run.protocol)
    )
    document["transport"] = _transport_section(placement, parts)
    return RunResult(document, ledger, outcome, {})


def _transport_section(placement: Placement, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process: its parties, its sockets' counts and its ledger's bytes (equal when all its parties'
    messages cross processes; the ledger's also hold what its parties sent each other)."""
    processes = []
    for group, part in zip(placement.groups, parts):
        counters = part["ledger"]["parties"].values()
        processes.append({
            "group": group.name,
            "roles": sorted(role.value for role in group.roles),
            "users": [group.users.start, group.users.stop] if Role.USER in group.roles else [],
            "sockets": part["sockets"],
            "ledger_sent_bytes": sum(counts[0] for counts in counters),
            "ledger_recv_bytes": sum(counts[1] for counts in counters),
        })
    return {"kind": "tcp", "host": LOOPBACK, "clock": "real (wall seconds)", "processes": processes}


# --------------------------------------------------------------------------- a child


class _Control:
    """A child's control lines: read from stdin (in order, by stage), written to its own copy of stdout."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        # Anything else printed goes to stderr: stdout carries control lines only.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        self._received: dict[str, dict[str, Any]] = {}
        self._arrived = trio.Event()

    def send(self, message: dict[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")

    async def listen(self) -> None:
        """Read the launcher's lines until end-of-file, which means the launcher went away: then fail."""
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async for line in _lines(stdin):
            message = json.loads(line)
            self._received.update((key, message) for key in message)
            self._arrived.set()
            self._arrived = trio.Event()
        raise ProtocolViolation("the launching process went away (its end of the control pipe closed)")

    async def receive(self, stage: str) -> dict[str, Any]:
        while stage not in self._received:
            await self._arrived.wait()
        return self._received[stage]


async def _child(launch: Launch, workdir: Path, position: int, control: _Control) -> None:
    group = launch.placement.groups[position]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control.listen)
        with trio.move_on_after(launch.budget_s) as budget:
            part = await _host(launch, group, position, control)
        if budget.cancelled_caught:
            raise PartyTimeout(f"the run did not finish within its budget of {launch.budget_s:g} s (run.max_virtual_s, wall seconds over TCP)")
        (workdir / f"part-{position}.pkl").write_bytes(pickle.dumps(part))
        control.send({"done": True})
        nursery.cancel_scope.cancel()


async def _host(launch: Launch, group: Group, position: int, control: _Control) -> dict[str, Any]:
    """Prepare, connect, run this process's entries, close; returns the part the launcher collects."""
    scenario = launch.scenario
    distributed: Distributed = protocol_spec(scenario.run.protocol).distributed  # type: ignore[assignment]
    driver = Role.SERVER in group.roles
    ctx = _context(scenario, progress=lambda completed: control.send({"progress": completed}) if driver else None)
    listener = (await trio.open_tcp_listeners(0, host=LOOPBACK))[0]
    control.send({"port": listener.socket.getsockname()[1]})
    ports = (await control.receive("ports"))["ports"]
    streams = await connect_mesh(position, ports, listener, STAGE_TIMEOUT_S)
    await listener.aclose()
    ledger = Ledger()
    ctx.network = TcpNetwork(
        scenario.network.link_policy(scenario.run.seed), ledger, launch.placement, position, streams,
        resolution_s=scenario.network.resolution_s, max_message_bytes=int(scenario.network.max_message_mb * 1024 * 1024),
    )
    started = []

    async def ready() -> None:
        control.send({"ready": True})
        await control.receive("go")
        started.append(trio.current_time())

    async def finished() -> None:
        if driver:
            control.send({"finished": trio.current_time() - started[0]})
        await control.receive("stop")

    async with ctx.network.open():
        entries = await distributed.run_group(ctx, group, ready=ready, finished=finished)
    return {"entries": entries, "ledger": ledger.export(), "sockets": ctx.network.counts.as_dict()}


def main(argv: list[str]) -> int:
    """A child: ``python -m fedrecsim.launcher WORKDIR POSITION`` (started by `run_tcp`, never by hand)."""
    workdir, position = Path(argv[0]), int(argv[1])
    control = _Control()
    try:
        with sole_errors():
            launch: Launch = pickle.loads((workdir / "launch.pkl").read_bytes())
            trio.run(_child, launch, workdir, position, control, clock=SharedClock(launch.epoch))
    except BaseException as exc:  # reported to the launcher, which raises it naming this process
        with suppress(BrokenPipeError):  # the launcher is gone: nobody is left to tell
            control.send({"error": type(exc).__name__, "message": str(exc)})
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
