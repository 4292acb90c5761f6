"""W1: one server, many users, request/reply rounds -- fedrecsim against SimPy in the same process.

Each round the server sends every user a `W1Request` carrying a float32[50] vector, every user answers
with a `W1Reply` carrying one, and the server waits for all replies before the next round. Latency is
log-normal (median 50 ms, sigma 0.5) on each directed link, arrival times rounded up to 1 ms. The
standard size is 1,000 users for 100 rounds; the scale line runs 100,000 users for 5 rounds on fedrecsim
alone, in a fresh interpreter so that its peak RSS is its own, beside ``trio_floor_s_per_round``: what
trio alone takes to wake each of as many parked tasks once and run it back to its next wait, with no
message, network or ledger (`trio_wake_floor`). No one-task-per-party engine on trio can run a round in
less; the closing notes of issue 12 compare the 2 s target with it.

Both simulations do the same work for every message:

- one encoding at the sender: `wire.encode` for a reply; `wire.encode_many` for the round's requests
  (the server's `send_many`), which validates and packs the common body once and gives each user its
  own envelope bytes;
- one latency draw through the same `Links` -- the same per-link generators, so both see identical
  delays and end at the same virtual time, which every run checks;
- one delivery into the receiver's mailbox and one decode into a fresh message with
  `wire.decode_trusted`, the decoder fedrecsim's network applies to bytes its own encoder produced;

and each runs one trio task / SimPy process per user and one for the server. The SimPy peer is written
the fast way SimPy allows: a `simpy.Store` per party as its mailbox and a bare ``env.timeout`` whose
callback puts the bytes into it (no process per message). On top of that, fedrecsim counts every byte
per party in its `Ledger` (with the transcript hash) and bounds every wait with a virtual deadline; the
peer only sums the bytes it sent.

Timing: each side runs the whole workload -- building its parties and running every round -- timed
with ``time.perf_counter`` (and ``time.process_time``) after a garbage collection; the sides alternate,
5 repetitions each (1 with ``--quick``), and the best of each side is reported: on a shared machine the
speed of one run drifts by tens of percent, and the best run is the least disturbed one. ``ratio`` is
fedrecsim's rounds per second over SimPy's in wall time (>= 1.0 means fedrecsim is at least as fast),
``ratio_cpu`` the same in CPU time (both sides are single-threaded, so on a loaded machine this is the
figure to read); the target is ``ratio_target_min`` (1.5, issue 32).

The scale line states ``wall_s_per_round`` (rounds only, building the parties excluded), the floor, their
quotient ``ratio_floor`` and the same three in CPU time (``cpu_s_per_round``, ``trio_floor_cpu_s_per_round``,
``ratio_floor_cpu``) beside the target ``ratio_floor_target_max`` (5, issue 32), and ``peak_rss_mb``, the
fresh interpreter's own peak. Each figure is the *median* of its rounds -- the run's `SCALE_ROUNDS`, the
floor's `FLOOR_ROUNDS`, measured in the same interpreter right after the run -- with the spread of the CPU
figures printed beside them (``cpu_s_per_round_range``, ``trio_floor_cpu_s_per_round_range``: fastest and
slowest round): a single reading of either side moved by a third on the shared machine (the floor read 0.69
and 0.99 s in one hour), and the median of several rounds with its spread says how far to trust the ratio.
The run's first round is in the median's sample but rarely its median: it also opens every link.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import numpy as np
import simpy
import trio

from fedrecsim.actors import Replies, Server, User
from fedrecsim.errors import ConfigError, SimulationError
from fedrecsim.clock import VirtualClock
from fedrecsim.runner import relaxed_garbage_collection
from fedrecsim.network import SERVER, Array, Ledger, LinkSpec, Links, LogNormal, Network, Party, Role, message
from fedrecsim.network.wire import decode_trusted, encode, encode_many
from fedrecsim.seeding import Stream, generator

from .common import Options, clocked, run_isolated

VECTOR_LENGTH = 50


@message("bench.w1_request")
@dataclass(frozen=True)
class W1Request:
    """Server to user, round ``round``: the server's current vector."""

    round: int
    vector: Array("float32", shape=(VECTOR_LENGTH,))


@message("bench.w1_reply")
@dataclass(frozen=True)
class W1Reply:
    """User to server, round ``round``: the user's vector."""

    round: int
    vector: Array("float32", shape=(VECTOR_LENGTH,))


@dataclass(frozen=True)
class W1Config:
    """The size and the network of one W1 run.

    Attributes:
        users: number of users (>= 1).
        rounds: number of rounds (>= 1).
        seed: the run seed (links, actors, the server's vector).
        median_s, sigma: the log-normal one-way latency of every link.
        resolution_s: arrival times are rounded up to a multiple of this.
        round_timeout_s: the server's virtual deadline for a round's replies; far above any latency
            the log-normal can plausibly draw, so a healthy run never hits it.
    """

    users: int = 1000
    rounds: int = 100
    seed: int = 0
    median_s: float = 0.05
    sigma: float = 0.5
    resolution_s: float = 0.001
    round_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for key in ("users", "rounds"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"w1.{key}", f"must be an integer >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("w1.seed", f"must be an integer >= 0, got {self.seed!r}")
        if not (self.round_timeout_s > 0 and math.isfinite(self.round_timeout_s)):
            raise ConfigError("w1.round_timeout_s", f"must be a finite number > 0, got {self.round_timeout_s!r}")

    def links(self) -> Links:
        return Links(self.seed, LinkSpec(latency=LogNormal(self.median_s, self.sigma)))

    def server_vector(self) -> np.ndarray:
        return generator(self.seed, Stream.PROTOCOL).standard_normal(VECTOR_LENGTH).astype(np.float32)


STANDARD = W1Config(users=1000, rounds=100)
QUICK = W1Config(users=100, rounds=10)
SCALE_USERS, SCALE_ROUNDS = 100_000, 5
QUICK_SCALE_USERS, QUICK_SCALE_ROUNDS = 2_000, 2
#: How many rounds the floor is measured for at the scale line, quick or not (each is under a second).
FLOOR_ROUNDS = 9
#: Issue 32's targets: W1 at least 1.5 x SimPy's rounds per second; W1-scale at most 5 x the trio floor.
SIMPY_RATIO_TARGET, FLOOR_RATIO_TARGET = 1.5, 5.0


@dataclass(frozen=True)
class W1Outcome:
    """What one simulation of W1 did.

    Attributes:
        replies: per round, how many distinct users' replies the server received for that round.
        virtual_time_s: virtual time from the first request to the last reply of the last round.
        messages, bytes: everything sent, both directions (bytes are encoded lengths).
        round_wall_s: per round, the wall-clock seconds the server spent in it (fedrecsim only).
        round_cpu_s: per round, the CPU seconds of this process in it (fedrecsim only).
        ledger: fedrecsim's ledger of the run; None for the SimPy peer.
    """

    replies: tuple[int, ...]
    virtual_time_s: float
    messages: int
    bytes: int
    round_wall_s: tuple[float, ...] = ()
    round_cpu_s: tuple[float, ...] = ()
    ledger: Ledger | None = None


def _quantize(arrival: float, resolution_s: float) -> float:
    """Round ``arrival`` up to the resolution exactly as `Network.send` does, so both sides agree."""
    if resolution_s <= 0:
        return arrival
    return math.ceil(arrival / resolution_s - 1e-9) * resolution_s


# --------------------------------------------------------------------------- fedrecsim


class W1User(User):
    """Answers each round's request with a vector of its own: here, the one it received."""

    async def run(self, rounds: int) -> None:
        for _ in range(rounds):
            request: W1Request = (await self.recv(W1Request, deadline=self.horizon_s)).body
            self.send(self.server, W1Reply(request.round, request.vector))


class W1Server(Server):
    """Sends its vector to every user and gathers one reply per user, by a virtual deadline."""

    def __init__(
        self,
        party: Party,
        network: Network,
        rng: np.random.Generator,
        vector: np.ndarray,
        round_timeout_s: float,
    ) -> None:
        super().__init__(party, network, rng)
        self.vector = vector
        self.round_timeout_s = round_timeout_s

    async def play_round(self, round_index: int, users: list[Party]) -> Replies[W1Reply]:
        self.send_many(users, W1Request(round_index, self.vector))
        return await self.gather(
            W1Reply,
            users,
            deadline=self.now + self.round_timeout_s,
            accept=lambda reply: reply.round == round_index,
        )


def run_fedrecsim(config: W1Config) -> W1Outcome:
    """Run W1 on fedrecsim under a mock clock: real messages, network, ledger and one task per user."""
    ledger = Ledger()
    network = Network(config.links(), ledger, resolution_s=config.resolution_s)
    server = W1Server(
        SERVER,
        network,
        generator(config.seed, Stream.ACTOR, Role.SERVER.code, SERVER.index),
        config.server_vector(),
        config.round_timeout_s,
    )
    users = [
        W1User(Party(Role.USER, index), network, generator(config.seed, Stream.ACTOR, Role.USER.code, index))
        for index in range(config.users)
    ]
    parties = [actor.party for actor in users]
    for party in (SERVER, *parties):
        network.attach(party)

    async def main() -> W1Outcome:
        start = trio.current_time()
        # Every user's wait ends at the latest when the server would have given up on every round.
        horizon = start + (config.rounds + 1) * config.round_timeout_s
        replies: list[int] = []
        round_wall: list[float] = []
        round_cpu: list[float] = []
        async with network.open(), trio.open_nursery() as nursery:
            for actor in users:
                actor.horizon_s = horizon
                nursery.start_soon(actor.run, config.rounds)
            for round_index in range(config.rounds):
                ledger.begin_round(round_index, len(parties) + 1)
                wall_start, cpu_start = time.perf_counter(), time.process_time()
                answered = await server.play_round(round_index, parties)
                round_wall.append(time.perf_counter() - wall_start)
                round_cpu.append(time.process_time() - cpu_start)
                replies.append(len(answered))
            end = trio.current_time()
        totals = ledger.totals()
        return W1Outcome(
            tuple(replies), end - start, totals["sent_msgs"], totals["sent_bytes"], tuple(round_wall),
            tuple(round_cpu), ledger,
        )

    # As `fedrecsim.run` does for every run.
    with relaxed_garbage_collection():
        return trio.run(main, clock=VirtualClock())


# --------------------------------------------------------------------------- SimPy peer


def run_simpy(config: W1Config) -> W1Outcome:
    """Run W1 on SimPy: a Store per party, a timeout callback per message, a process per party."""
    env = simpy.Environment()
    links = config.links()
    resolution_s = config.resolution_s
    vector = config.server_vector()
    parties = [Party(Role.USER, index) for index in range(config.users)]
    user_boxes = [simpy.Store(env) for _ in parties]
    server_box = simpy.Store(env)
    sent = [0, 0]
    replies: list[int] = []

    def transmit(src: Party, dst: Party, box: simpy.Store, data: bytes) -> None:
        now = env.now
        sent[0] += 1
        sent[1] += len(data)
        arrival = _quantize(links.transit(src, dst, len(data), now), resolution_s)
        env.timeout(arrival - now, data).callbacks.append(lambda event: box.put(event.value))

    def user_process(party: Party, box: simpy.Store) -> Generator[simpy.Event, bytes, None]:
        for _ in range(config.rounds):
            request: W1Request = decode_trusted((yield box.get())).body
            reply = W1Reply(request.round, request.vector)
            transmit(party, SERVER, server_box, encode(party, SERVER, env.now, reply))

    def server_process() -> Generator[simpy.Event, bytes, None]:
        expected = set(parties)
        for round_index in range(config.rounds):
            requests = encode_many(SERVER, parties, env.now, W1Request(round_index, vector))
            for party, box, data in zip(parties, user_boxes, requests):
                transmit(SERVER, party, box, data)
            replied: set[Party] = set()
            while len(replied) < len(expected):
                envelope = decode_trusted((yield server_box.get()))
                if envelope.body.round == round_index and envelope.src in expected:
                    replied.add(envelope.src)
            replies.append(len(replied))

    for party, box in zip(parties, user_boxes):
        env.process(user_process(party, box))
    env.process(server_process())
    env.run()
    return W1Outcome(tuple(replies), env.now, sent[0], sent[1])


# --------------------------------------------------------------------------- measurement


def check_same_work(config: W1Config, ours: W1Outcome, peer: W1Outcome) -> None:
    """Refuse to report a number unless both sides completed every round with every user, alike."""
    complete = (config.users,) * config.rounds
    if ours.replies != complete or peer.replies != complete:
        raise SimulationError(
            f"W1 did not complete: fedrecsim replies per round {ours.replies}, SimPy {peer.replies}, "
            f"expected {config.users} in each of {config.rounds} rounds"
        )
    if (ours.messages, ours.bytes) != (peer.messages, peer.bytes):
        raise SimulationError(
            f"W1 sides did different work: fedrecsim sent {ours.messages} messages / {ours.bytes} bytes, "
            f"SimPy {peer.messages} / {peer.bytes}"
        )
    if not math.isclose(ours.virtual_time_s, peer.virtual_time_s, rel_tol=1e-9, abs_tol=1e-6):
        raise SimulationError(
            f"W1 sides saw different delays: fedrecsim ended at t={ours.virtual_time_s}s, "
            f"SimPy at t={peer.virtual_time_s}s"
        )


@dataclass(frozen=True)
class Comparison:
    """The best of each side over the repetitions of W1, in wall and in CPU seconds (each minimum taken
    apart: the least disturbed run by either clock)."""

    ours_wall_s: float
    peer_wall_s: float
    ours_cpu_s: float
    peer_cpu_s: float


def compare(config: W1Config, repeats: int) -> Comparison:
    """Best seconds of fedrecsim and of SimPy over ``repeats`` alternating runs of ``config``."""
    ours_wall = peer_wall = ours_cpu = peer_cpu = math.inf
    for _ in range(repeats):
        ours, ours_s, ours_c = clocked(lambda: run_fedrecsim(config))
        peer, peer_s, peer_c = clocked(lambda: run_simpy(config))
        check_same_work(config, ours, peer)
        ours_wall, peer_wall = min(ours_wall, ours_s), min(peer_wall, peer_s)
        ours_cpu, peer_cpu = min(ours_cpu, ours_c), min(peer_cpu, peer_c)
    return Comparison(ours_wall, peer_wall, ours_cpu, peer_cpu)


def trio_wake_floor(tasks: int, rounds: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The wall and the CPU seconds of each of ``rounds`` rounds in which trio wakes ``tasks`` parked tasks
    once each and runs every one back to its next wait: a round of W1 with everything but the task switches
    taken away.

    Each task parks with `trio.lowlevel.wait_task_rescheduled`, as a fedrecsim mailbox wait does; each
    round the main task reschedules all of them (as deliveries do) and parks until the last one has run.
    """
    parked: list[trio.lowlevel.Task] = []
    main_task: list[trio.lowlevel.Task] = []
    ran = [0]

    def no_abort(_: object) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.SUCCEEDED

    async def party() -> None:
        parked.append(trio.lowlevel.current_task())
        for _ in range(rounds):
            await trio.lowlevel.wait_task_rescheduled(no_abort)
            ran[0] += 1
            if ran[0] == tasks:
                trio.lowlevel.reschedule(main_task[0])

    async def main() -> tuple[tuple[float, ...], tuple[float, ...]]:
        main_task.append(trio.lowlevel.current_task())
        wall: list[float] = []
        cpu: list[float] = []
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(party)
            while len(parked) < tasks:
                await trio.sleep(0)
            for _ in range(rounds):
                start, cpu_start = time.perf_counter(), time.process_time()
                ran[0] = 0
                for task in parked:
                    trio.lowlevel.reschedule(task)
                await trio.lowlevel.wait_task_rescheduled(no_abort)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - cpu_start)
        return tuple(wall), tuple(cpu)

    with relaxed_garbage_collection():
        return trio.run(main)


def scale(users: int, rounds: int, seed: int = 0, floor_rounds: int = FLOOR_ROUNDS) -> dict[str, object]:
    """W1 at ``users`` on fedrecsim alone for ``rounds`` rounds, then `trio_wake_floor` for as many tasks for
    ``floor_rounds`` rounds (for `run_isolated`): the median wall and CPU seconds of a round of each
    (building the parties excluded), and the fastest and slowest round's CPU seconds of each."""
    config = W1Config(users=users, rounds=rounds, seed=seed)
    outcome = run_fedrecsim(config)
    if outcome.replies != (users,) * rounds:
        raise SimulationError(f"W1-scale did not complete: replies per round {outcome.replies}")
    floor_wall, floor_cpu = trio_wake_floor(users, floor_rounds)
    return {
        "users": users,
        "rounds": rounds,
        "wall_s_per_round": statistics.median(outcome.round_wall_s),
        "cpu_s_per_round": statistics.median(outcome.round_cpu_s),
        "cpu_s_per_round_range": (min(outcome.round_cpu_s), max(outcome.round_cpu_s)),
        "floor_rounds": floor_rounds,
        "trio_floor_s_per_round": statistics.median(floor_wall),
        "trio_floor_cpu_s_per_round": statistics.median(floor_cpu),
        "trio_floor_cpu_s_per_round_range": (min(floor_cpu), max(floor_cpu)),
    }


def run(options: Options) -> Iterator[str]:
    """The W1 comparison line, then the W1-scale line."""
    config = QUICK if options.quick else STANDARD
    repeats = options.repeats or (1 if options.quick else 5)
    best = compare(config, repeats)
    ours_rate, peer_rate = config.rounds / best.ours_wall_s, config.rounds / best.peer_wall_s
    yield (
        f"W1 fedrecsim rounds_per_s={ours_rate:.1f} simpy rounds_per_s={peer_rate:.1f} "
        f"ratio={ours_rate / peer_rate:.2f} ratio_cpu={best.peer_cpu_s / best.ours_cpu_s:.2f} "
        f"ratio_target_min={SIMPY_RATIO_TARGET} users={config.users} rounds={config.rounds}"
    )
    users, rounds = (QUICK_SCALE_USERS, QUICK_SCALE_ROUNDS) if options.quick else (SCALE_USERS, SCALE_ROUNDS)
    result = run_isolated(__name__, "scale", users=users, rounds=rounds, seed=config.seed)
    wall, floor = result["wall_s_per_round"], result["trio_floor_s_per_round"]
    cpu, floor_cpu = result["cpu_s_per_round"], result["trio_floor_cpu_s_per_round"]
    (cpu_low, cpu_high), (floor_low, floor_high) = result["cpu_s_per_round_range"], result["trio_floor_cpu_s_per_round_range"]
    yield (
        f"W1-scale users={result['users']} rounds={result['rounds']} wall_s_per_round={wall:.3f} "
        f"trio_floor_s_per_round={floor:.3f} ratio_floor={wall / floor:.1f} cpu_s_per_round={cpu:.3f} "
        f"trio_floor_cpu_s_per_round={floor_cpu:.3f} ratio_floor_cpu={cpu / floor_cpu:.1f} "
        f"ratio_floor_target_max={FLOOR_RATIO_TARGET:.0f} peak_rss_mb={result['peak_rss_mb']:.0f} "
        f"cpu_s_per_round_range={cpu_low:.3f}-{cpu_high:.3f} floor_rounds={result['floor_rounds']} "
        f"trio_floor_cpu_s_per_round_range={floor_low:.3f}-{floor_high:.3f}"
    )


__all__ = [
    "FLOOR_ROUNDS",
    "QUICK",
    "STANDARD",
    "Comparison",
    "W1Config",
    "W1Outcome",
    "W1Reply",
    "W1Request",
    "check_same_work",
    "compare",
    "run",
    "run_fedrecsim",
    "run_simpy",
    "scale",
    "trio_wake_floor",
]
