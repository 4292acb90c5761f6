"""W9: the FedAvg shape a Flower user would compare -- fedrecsim against Flower's simulation engine.

100 users, all online and selected every round; the server sends each the float64[1682 x 50] item
factors and each returns its full gradient (implicit FCF on MovieLens-100k-shaped interactions: real
work, zero latency, every message encoded, counted, hashed, carried and decoded). ``ours_s_per_round``
is the mean wall time of a round after the first and before the last (timed from `fedrecsim.run`'s
per-round progress callback; the last round also measures hr@k on every user), so building the users and
the data are not in it; ``ours_cpu_s_per_round`` is the same in CPU time. Flower's side spreads over
Ray's processes, whose CPU time is not counted here, so only wall times are compared: on a loaded machine
its several processes win a larger share of the cores than our one, and the ratio is below a quiet
machine's. Each of our runs is a fresh interpreter (`run_isolated`) and ``peak_rss_mb`` is the
largest peak resident set of those runs: the whole simulation's memory, data and evaluation included.

The peer, when installed (``pip install -e .[peers]``): Flower's simulation engine (`flwr.simulation.
run_simulation`) with 100 supernodes, FedAvg selecting everyone, starting from the same float64[1682 x 50]
array, and clients that return the received array plus Gaussian noise (no training: Flower is charged for
carrying the model, not for maths). It runs in a fresh interpreter (Ray owns the process);
``flower_s_per_round`` is the mean time from one round's aggregation to the next's after the first round,
and its start-up -- importing Flower, starting Ray, creating the actors and the whole first round; not the
interpreter's own start -- is reported apart as ``flower_startup_s``. Flower's memory lives in Ray's
worker processes, which the child does not wait for, so no peak is printed for it. ``ratio`` is Flower's
seconds per round over ours (> 1 means fedrecsim is faster; target >= 10, printed as ``ratio_target_min``).
Both sides take the best of the repeats (3; 1 with ``--quick``). Without Flower the line says
``flower=not-installed``.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import fedrecsim

from .common import Options, run_isolated

USERS, ITEMS, D = 100, 1682, 50
STANDARD_ROUNDS, QUICK_ROUNDS = 10, 3
#: Issue 32's target: Flower's seconds per round at least 10 times ours.
RATIO_TARGET = 10.0


def scenario(rounds: int, users: int = USERS, items: int = ITEMS) -> dict[str, Any]:
    """The W9 scenario: implicit FCF, everyone online and selected, zero latency."""
    return {
        "run": {"name": "w9-fedavg", "protocol": "fcf", "seed": 9, "rounds": rounds},
        "data": {
            "source": "synthetic", "feedback": "implicit", "users": users, "items": items,
            "ratings": min(60 * users, users * items // 4), "split": "leave_one_out",
        },
        "network": {"latency": {"model": "constant", "seconds": 0.0}},
        "availability": {"model": "always"},
        "protocol": {"feedback": "implicit", "d": D, "gamma": 0.05, "eval_every": rounds},
    }


def ours(rounds: int, users: int = USERS, items: int = ITEMS) -> dict[str, float]:
    """fedrecsim's mean wall and CPU seconds per round after the first (for `run_isolated`)."""
    if rounds < 2:
        raise ValueError(f"W9 times the rounds after the first: rounds must be >= 2, got {rounds}")
    marks: list[tuple[float, float]] = []
    result = fedrecsim.run(
        scenario(rounds, users, items),
        progress=lambda done, total: marks.append((time.perf_counter(), time.process_time())),
    )
    if result.result["rounds_completed"] != rounds or len(marks) != rounds:
        raise fedrecsim.SimulationError(f"W9 did not complete: {result.result['rounds_completed']} of {rounds} rounds")
    # The last round also measures hr@k on every user; it is left out with the first.
    timed = marks[:-1] if rounds > 2 else marks
    count = len(timed) - 1
    return {
        "s_per_round": (timed[-1][0] - timed[0][0]) / count,
        "cpu_s_per_round": (timed[-1][1] - timed[0][1]) / count,
    }


def flower(rounds: int, users: int = USERS, items: int = ITEMS) -> dict[str, float]:
    """Flower's simulation engine on the same shape (run in a fresh interpreter by `run`)."""
    start = time.perf_counter()
    import logging

    import numpy as np
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    ends: list[float] = []

    class NoisyEcho(NumPyClient):
        def __init__(self, seed: int) -> None:
            self.rng = np.random.default_rng(seed)

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            return [array + self.rng.normal(0.0, 0.01, array.shape) for array in parameters], 1, {}

    class TimedFedAvg(FedAvg):
        def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
            if failures or len(results) != users:
                raise RuntimeError(f"Flower round {server_round}: {len(results)} results, {len(failures)} failures")
            aggregated = super().aggregate_fit(server_round, results, failures)
            ends.append(time.perf_counter())
            return aggregated

    def client_fn(context: Context):  # type: ignore[no-untyped-def]
        return NoisyEcho(int(context.node_config.get("partition-id", 0))).to_client()

    model = np.random.default_rng(0).normal(0.0, 0.1, (items, D))

    def server_fn(context: Context) -> ServerAppComponents:
        strategy = TimedFedAvg(
            fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=users, min_available_clients=users,
            initial_parameters=ndarrays_to_parameters([model]),
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    run_simulation(
        server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
        num_supernodes=users, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    if len(ends) != rounds:
        raise RuntimeError(f"Flower completed {len(ends)} of {rounds} rounds")
    steps = [later - earlier for earlier, later in zip(ends, ends[1:])]
    return {"s_per_round": sum(steps) / len(steps), "startup_s": ends[0] - start}


def run(options: Options) -> Iterator[str]:
    """``W9 fedavg ours_s_per_round=... flower_s_per_round=... ratio=... flower_startup_s=... peak_rss_mb=...``."""
    rounds = QUICK_ROUNDS if options.quick else STANDARD_ROUNDS
    repeats = options.repeats or (1 if options.quick else 3)
    runs = [run_isolated(__name__, "ours", rounds=rounds) for _ in range(repeats)]
    best = min(result["s_per_round"] for result in runs)
    best_cpu = min(result["cpu_s_per_round"] for result in runs)
    peak = max(result["peak_rss_mb"] for result in runs)
    line = f"W9 fedavg ours_s_per_round={best:.3f} ours_cpu_s_per_round={best_cpu:.3f}"
    sizes = f"peak_rss_mb={peak:.0f} users={USERS} rounds={rounds}"
    if importlib.util.find_spec("flwr") is None:
        yield f"{line} flower=not-installed (pip install -e .[peers]) {sizes}"
        return
    peers = [run_isolated(__name__, "flower", rounds=rounds) for _ in range(repeats)]
    peer = min(peers, key=lambda result: result["s_per_round"])
    yield (
        f"{line} flower_s_per_round={peer['s_per_round']:.3f} ratio={peer['s_per_round'] / best:.1f} "
        f"ratio_target_min={RATIO_TARGET:.0f} flower_startup_s={peer['startup_s']:.1f} {sizes}"
    )


__all__ = ["flower", "ours", "run", "scenario"]
