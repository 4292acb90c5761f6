"""W3: Hua et al.'s S3 at the scale of their Netflix subset -- seconds per iteration and peak memory.

191,668 users x 100 items with about 565,500 ratings (the density 100 random Netflix Prize movies carry,
`fedrecsim.data.synthetic.NETFLIX_DENSITY`), every user an actor, a third of them online, churn 0.005 /
0.01 between iterations, K = 1000 users served per iteration (the paper's value for Netflix), k = 10
pre-sharers, lognormal latency, 64-bit ring, every invariant checked. It runs in a fresh interpreter
(`benchmarks.common.run_isolated`) so that the peak RSS is its own. ``s_per_iter`` is the mean wall time
of an iteration (serving, users, third party, unmasking, monitors, churn and the round gap's joins and
leaves), after the initialization phase; building 191,668 actors, the data and the baselines are not in
it. ``cpu_s_per_iter`` beside it is the mean CPU time of an iteration (`time.process_time`, the protocol's
``round_cpu_s``): the figure to read on a shared machine, where the wall time also counts the time other
processes held the core (run it with ``OPENBLAS_NUM_THREADS=1``). ``gc_s_per_iter`` is the part of it the
cyclic garbage collector took (`GarbageTime`: its CPU seconds between the first iteration's end and the last's,
per iteration). The paper runs 10,000 iterations; the target is 0.1 s per iteration (10,000 in under 17
minutes).

The peer, ``carry_only_s_per_iter``, is what carrying an iteration's messages costs with no protocol work
at all: `carry_seconds_per_message` times W3's own messages per iteration (``msgs_per_iter``, from its
ledger). It bounds from below what any protocol code on this engine can reach at this scale.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import trio

import fedrecsim
from fedrecsim.clock import VirtualClock
from fedrecsim.data.synthetic import netflix_shape
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.protocols.dpmf.messages import Contribution, ItemRequest, ItemVectors

from .common import Options, run_isolated

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "hua_s3_churn.toml"
STANDARD_ROUNDS, QUICK_ROUNDS = 50, 5
QUICK_USERS = 20_000


def measure(users: int, rounds: int) -> dict[str, float]:
    """One Netflix-shaped S3 run of ``rounds`` iterations with ``users`` users; its per-iteration wall and CPU time."""
    shape = netflix_shape()
    ratings = round(shape.n_ratings * users / shape.n_users)
    scenario = fedrecsim.load_scenario(SCENARIO, [
        f"data.users={users}", f"data.items={shape.n_items}", f"data.ratings={ratings}",
        f"data.min_per_user={shape.min_per_user}",
        "protocol.max_users=1000", f"run.rounds={rounds}",
        "protocol.eval_every=100000", "protocol.baseline_rounds=1", "protocol.replay=false",
        # The paper's baseline, 100 iterations over every rating, costs 66 CPU seconds at the full shape.
        "protocol.paper_baseline=false",
    ])
    collector = GarbageTime()
    with collector:
        result = fedrecsim.run(scenario, progress=collector.mark)
    if any(invariant["violations"] for invariant in result.result["invariants"]):
        raise fedrecsim.SimulationError(f"W3 broke an invariant: {result.result['invariants']}")
    walls = np.asarray(result.outcome.state["round_wall_s"])
    cpus = np.asarray(result.outcome.state["round_cpu_s"])
    iterations = result.result["ledger"]["per_round"][1:]
    return {
        "users": users, "rounds": rounds, "s_per_iter": float(walls.mean()), "s_per_iter_max": float(walls.max()),
        "cpu_s_per_iter": float(cpus.mean()), "gc_s_per_iter": collector.per_iteration(),
        "msgs_per_iter": float(np.mean([entry["msgs"] for entry in iterations])),
    }


class GarbageTime:
    """The CPU seconds the cyclic garbage collector takes while the block runs, read at round ends.

    ``mark`` is a run's progress callback: it notes the collector's total at each round's end, so that
    `per_iteration` covers whole iterations after the first (the set-up's collections are not in it).
    """

    def __init__(self) -> None:
        self.total_s = 0.0
        self.marks: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.total_s += time.process_time() - self._started

    def __enter__(self) -> GarbageTime:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def mark(self, completed: int, total: int) -> None:
        self.marks.append(self.total_s)

    def per_iteration(self) -> float:
        """The collector's CPU seconds per iteration between the first and the last mark (0 with fewer than two)."""
        if len(self.marks) < 2:
            return 0.0
        return (self.marks[-1] - self.marks[0]) / (len(self.marks) - 1)


def carry_seconds_per_message(served: int, rounds: int, items: int = 3) -> float:
    """Wall seconds per message of W3's per-user exchange, carried with no protocol work.

    ``served`` users, each with ``items`` rated items (W3's mean is 2.95), over the scenario's links and
    64-bit ring: per iteration the server sends each its item vectors (vectors, masks, pieces of tau^),
    and each answers with a contribution to the third party and its next item request -- every message
    encoded, counted, hashed, carried in virtual time and decoded, as in W3, but nobody computes anything.
    """
    scenario = fedrecsim.load_scenario(SCENARIO)
    words = np.zeros((items, 2 * scenario.protocol.d), dtype=np.uint32)
    # W3's item vectors: v_j, the masks and the pieces of tau^ as three planes; k'_j and k_j as two.
    planes = np.zeros((3, *words.shape), dtype=np.uint32)
    counts = np.ones((2, items), dtype=np.int32)
    request = ItemRequest(np.arange(items, dtype=np.int32))
    users = [Party(Role.USER, index) for index in range(served)]

    async def user(network: Network, party: Party) -> None:
        mailbox = network.mailbox(party)
        while True:
            envelope = mailbox.take(ItemVectors.KIND, SERVER)
            if envelope is None:
                await mailbox.wait(math.inf)
                continue
            network.send(party, THIRD_PARTY, Contribution(envelope.body.round, request.items, words))
            network.send(party, SERVER, request)

    async def third_party(network: Network) -> None:
        mailbox = network.mailbox(THIRD_PARTY)
        while True:
            mailbox.take_all(Contribution.KIND)
            await mailbox.wait(math.inf)

    async def main() -> float:
        network = Network(scenario.network.link_policy(scenario.run.seed), Ledger())
        for party in (SERVER, THIRD_PARTY, *users):
            network.attach(party)
        server = network.mailbox(SERVER)
        async with network.open(), trio.open_nursery() as nursery:
            nursery.start_soon(third_party, network)
            for party in users:
                nursery.start_soon(user, network, party)
            start = time.perf_counter()
            for round_index in range(1, rounds + 1):
                for party in users:
                    network.send(SERVER, party, ItemVectors(round_index, planes, counts))
                answered = 0
                while answered < served:
                    if server.take(ItemRequest.KIND) is None:
                        await server.wait(math.inf)
                    else:
                        answered += 1
            seconds = time.perf_counter() - start
            nursery.cancel_scope.cancel()
        return seconds / (3 * served * rounds)

    return trio.run(main, clock=VirtualClock())


def run(options: Options) -> Iterator[str]:
    """``W3 dpmf_s3_netflix s_per_iter=... cpu_s_per_iter=... gc_s_per_iter=... carry_only_s_per_iter=...
    peak_rss_mb=...``."""
    users = QUICK_USERS if options.quick else netflix_shape().n_users
    rounds = QUICK_ROUNDS if options.quick else STANDARD_ROUNDS
    result = run_isolated(__name__, "measure", users=users, rounds=rounds)
    carry = carry_seconds_per_message(served=1000, rounds=rounds) * result["msgs_per_iter"]
    yield (
        f"W3 dpmf_s3_netflix s_per_iter={result['s_per_iter']:.3f} cpu_s_per_iter={result['cpu_s_per_iter']:.3f} "
        f"gc_s_per_iter={result['gc_s_per_iter']:.3f} "
        f"carry_only_s_per_iter={carry:.3f} "
        f"msgs_per_iter={result['msgs_per_iter']:.0f} peak_rss_mb={result['peak_rss_mb']:.0f} "
        f"users={result['users']} iterations={result['rounds']}"
    )


__all__ = ["GarbageTime", "carry_seconds_per_message", "measure", "run"]
