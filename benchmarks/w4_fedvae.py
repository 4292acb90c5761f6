"""W4: one FedVAE round with R = 250 users on MovieLens-1M-shaped data, against its numpy floor.

The standard size is Polato's ml-1m setting (Table II): synthetic interactions of 6,034 users x 3,520
items (575,259 of them, 400 users held out), R = 250, Mult-VAE 3,520 -> 600 -> 200 in float32 (ω and
every gradient are 4,589,120 entries, 18.4 MB).

``sim_s``: `fedrecsim.run` of that scenario for three rounds with zero latency, the second round timed
(from the progress callback): the server encodes ω once, 250 users each decode it, run one
forward/backward pass and encode their gradient, the server decodes and validates the 250 gradients,
averages them and takes one Adam step. Round 1 is left out because it also allocates what later rounds
reuse; round 3 is followed by the held-out users' evaluation. SecureFilter is off (plain averaging) in
this line, because the floor aggregates nothing either.

``floor_s``: the same 250 users' gradients -- each user's own gradient, not their sum -- computed in one
batched numpy pass without actors, messages or validation (`fedrecsim.models.multvae.
dense_user_gradients` over a 250-user batch into a preallocated ``[250, P]`` array), timed on the second
of two passes so that the array's pages are already mapped. ``ratio = sim_s / floor_s``; the target is
<= 2.

``sim_s`` runs as the ``fedrecsim`` command runs a scenario: glibc keeps the memory the process frees
mapped (`fedrecsim.allocator.keep_freed_memory`), as the floor's preallocated array is.
``sim_default_allocator_s`` is the same round with glibc's defaults, as `fedrecsim.run` runs in a
program of one's own that did not make the call: each round allocates 9.2 GB the previous round gave
back -- the 250 encoded gradients in flight (the network holds every message until it is delivered) and
the 250 decoded ones the server holds until it aggregates -- and glibc returns freed heap to the
kernel, so the next round faults every page in again (on a loaded 2-core VM, about 15 of 19 s, nearly
all of it kernel time). What ``sim_s`` spends beyond the floor is real work, each a pass over 18 MB per
user: one copy of each gradient into its message, msgpack's copy of it out and ours into an aligned
array, the ledger's hash over it, the server's validation pass and the average.

``message_passes_s`` is what carrying the gradients as messages costs at the least, with nothing else
around it (`message_passes`): one copy of each into bytes and one back, the transcript's hash, the
server's check and its average. ``ratio_bound = (floor_s + message_passes_s) / floor_s`` is the lowest
ratio a simulator that really encodes, hashes, checks and averages each message can reach (as measured on
the same machine, so it shares the machine's noise); the target of 2 lies below it at this size.

``krum_round_s`` is the second round again with Krum (m = 1, f = 10 %), and ``krum_filter_s`` Krum's
own cost on the floor's 250 gradients (the 250 x 250 distances and the choice): Krum is O(R^2 P) by
definition, so it is reported beside the line, not hidden in it. Every side runs in a fresh interpreter
(`run_isolated`), which also reports its peak resident memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import xxhash

import fedrecsim
from fedrecsim.allocator import keep_freed_memory
from fedrecsim.data import prepare_data
from fedrecsim.errors import SimulationError
from fedrecsim.mechanisms.krum import krum_select, pairwise_squared_distances
from fedrecsim.models.multvae import Batch, Layout, dense_user_gradients, draw_noise, init_params
from fedrecsim.protocols.fedvae.aggregation import average
from fedrecsim.scenario import parse_scenario

from .common import Options, run_isolated

STANDARD = {"users": 6034, "items": 3520, "ratings": 575_259, "users_per_round": 250, "hidden": 600, "latent": 200}
QUICK = {"users": 300, "items": 300, "ratings": 9_000, "users_per_round": 50, "hidden": 64, "latent": 16}


def tables(size: dict[str, int], secure_filter: str = "none") -> dict[str, Any]:
    """The W4 scenario at ``size`` (`STANDARD` or `QUICK`), three rounds, evaluation only after the last."""
    return {
        "run": {"protocol": "fedvae", "name": "w4", "seed": 4, "rounds": 3},
        "data": {
            "source": "synthetic", "feedback": "implicit", "users": size["users"], "items": size["items"],
            "ratings": size["ratings"], "split": "heldout_users", "test_fraction": 0.0663,
        },
        "network": {"latency": {"model": "constant", "seconds": 0.0}},
        "availability": {"model": "always"},
        "protocol": {
            "users_per_round": size["users_per_round"], "hidden": size["hidden"], "latent": size["latent"],
            "secure_filter": secure_filter, "krum_m": 1, "krum_f": 0.1, "baseline": False, "eval_every": 1000,
        },
    }


def sim(size: dict[str, int], secure_filter: str = "none", keep_memory: bool = True) -> dict[str, float]:
    """Wall seconds of round 2 of the W4 scenario (module docstring); ``keep_memory``: as the command runs it."""
    if keep_memory:
        keep_freed_memory()
    marks: list[float] = []
    result = fedrecsim.run(tables(size, secure_filter), progress=lambda completed, total: marks.append(time.perf_counter()))
    second = result.rounds[1]
    if second["gradients"] != size["users_per_round"] or not second["updated"]:
        raise SimulationError(f"W4 round 2 did not aggregate {size['users_per_round']} gradients: {second}")
    return {"seconds": marks[1] - marks[0]}


def floor(size: dict[str, int], krum: bool = False) -> dict[str, float]:
    """Wall seconds of the batched pass (second of two), and of Krum on its gradients if ``krum``."""
    scenario = parse_scenario(tables(size))
    train, test = prepare_data(scenario.data, scenario.run.seed)
    hyper = scenario.protocol.hyper()
    layout = Layout.of(train.n_items, hyper)
    rng = np.random.default_rng(4)
    omega = init_params(rng, layout)
    training = np.flatnonzero((train.user_counts() > 0) & (test.user_counts() == 0))
    users = np.sort(rng.choice(training, size["users_per_round"], replace=False))
    batch = Batch.of_users(train.by_user(), users, train.n_items)
    out = np.empty((users.size, layout.size), dtype=np.float32)
    seconds = math.inf
    for _ in range(2):
        noise = draw_noise(rng, batch, hyper)
        start = time.perf_counter()
        dense_user_gradients(omega, layout, batch, noise, hyper, out=out)
        seconds = time.perf_counter() - start
    result = {"seconds": seconds, "params": float(layout.size)}
    if krum:
        start = time.perf_counter()
        krum_select(pairwise_squared_distances(out), math.floor(0.1 * users.size), 1)
        result["krum_seconds"] = time.perf_counter() - start
    return result


def message_passes(size: dict[str, int]) -> dict[str, float]:
    """Wall seconds of the passes over the users' gradients that carrying them as messages cannot avoid,
    with no protocol, network or actor around them (second of two rounds, memory kept as the command
    keeps it): each gradient copied once into bytes and once back into an aligned array (plain memory
    copies), the transcript's hash over the bytes, and the server's own check (one dot product per
    gradient: `fedrecsim.protocols.fedvae.validation`) and average (`aggregation.average`). Any simulator
    that really encodes, hashes, checks and averages each message makes at least these passes."""
    keep_freed_memory()
    scenario = parse_scenario(tables(size))
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    params = Layout.of(train.n_items, scenario.protocol.hyper()).size
    rng = np.random.default_rng(4)
    gradients = [rng.standard_normal(params, dtype=np.float32) for _ in range(size["users_per_round"])]
    seconds = math.inf
    for _ in range(2):
        start = time.perf_counter()
        encoded = [gradient.tobytes() for gradient in gradients]
        digest = xxhash.xxh3_128()
        for data in encoded:
            digest.update(data)
        decoded = [np.frombuffer(data, dtype=np.float32).copy() for data in encoded]
        if not all(math.isfinite(float(gradient @ gradient)) for gradient in decoded):
            raise SimulationError("W4's drawn gradients are finite")
        average(decoded, np.arange(len(decoded)))
        seconds = time.perf_counter() - start
        del encoded, decoded
    return {"seconds": seconds}


def run(options: Options) -> Iterator[str]:
    """``W4 fedvae sim_s=... floor_s=... ratio=...`` and, beside it, the round with glibc's default
    allocator and Krum's round and filter."""
    size = QUICK if options.quick else STANDARD
    repeats = options.repeats or 1
    sims = [run_isolated(__name__, "sim", size=size) for _ in range(repeats)]
    defaults = [run_isolated(__name__, "sim", size=size, keep_memory=False) for _ in range(repeats)]
    floors = [run_isolated(__name__, "floor", size=size, krum=True) for _ in range(repeats)]
    krums = [run_isolated(__name__, "sim", size=size, secure_filter="krum") for _ in range(repeats)]
    passes = [run_isolated(__name__, "message_passes", size=size) for _ in range(repeats)]
    sim_s = min(result["seconds"] for result in sims)
    passes_s = min(result["seconds"] for result in passes)
    default_s = min(result["seconds"] for result in defaults)
    floor_s = min(result["seconds"] for result in floors)
    krum_round_s = min(result["seconds"] for result in krums)
    krum_filter_s = min(result["krum_seconds"] for result in floors)
    yield (
        f"W4 fedvae sim_s={sim_s:.3f} floor_s={floor_s:.3f} ratio={sim_s / floor_s:.2f} "
        f"sim_default_allocator_s={default_s:.3f} ratio_default_allocator={default_s / floor_s:.2f} "
        f"message_passes_s={passes_s:.3f} ratio_bound={(floor_s + passes_s) / floor_s:.2f} "
        f"krum_round_s={krum_round_s:.3f} krum_filter_s={krum_filter_s:.3f} users_per_round={size['users_per_round']} "
        f"items={size['items']} params={int(floors[0]['params'])} "
        f"sim_peak_mb={max(result['peak_rss_mb'] for result in sims):.0f} "
        f"floor_peak_mb={max(result['peak_rss_mb'] for result in floors):.0f}"
    )


__all__ = ["QUICK", "STANDARD", "floor", "message_passes", "run", "sim", "tables"]
