"""W6: Ribero et al.'s two-round protocol on MovieLens-1M-shaped data, against the bare computation.

The standard size: 6,040 users x 3,706 items with 1,000,209 Poisson counts (`fedrecsim.data.poisson`),
10 uniform silos, k = 20 prototypes, rank 10, no baselines. ``sim_s`` is a whole `fedrecsim.run`
(data, silo actors, server, network with log-normal latency, ledger, metrics) in a fresh interpreter,
which also reports its peak RSS; ``floor_s`` is the same computation called directly -- the same data
preparation, the protocol's own pipeline functions with the same generators, the same metrics -- without
actors or messages, in a fresh interpreter too (each side pays the same first-call costs: lazy imports,
BLAS start-up). With two rounds the simulator should cost next to nothing: target ratio <= 1.1, printed
as ``ratio_target_max``. ``peak_rss_mb`` is the largest peak of the simulated runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import fedrecsim
from fedrecsim.data import prepare_data, silo_assignment
from fedrecsim.models.nmf import NMFHyper
from fedrecsim.network.party import Role
from fedrecsim.protocols.prototypes.pipeline import item_factors, silo_data, silo_prototypes
from fedrecsim.protocols.prototypes.protocol import (
    evaluate,
    public_bounds,
    shared_item_model,
    signal_to_noise,
    silo_params,
)
from fedrecsim.scenario import parse_scenario
from fedrecsim.seeding import Stream, generator

from .common import Options, run_isolated

STANDARD = (6040, 3706, 1_000_209)
QUICK = (600, 400, 20_000)
RATIO_TARGET = 1.1


def tables(users: int, items: int, entries: int) -> dict[str, Any]:
    return {
        "run": {"protocol": "prototypes", "name": "w6", "seed": 0, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "counts", "users": users, "items": items, "ratings": entries,
                 "split": "users", "test_fraction": 0.2, "test_entries": 5, "silos": 10},
        "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
        "availability": {"model": "always"},
        "protocol": {"k": 20, "rank": 10, "baselines": False},
    }


def simulate(users: int, items: int, entries: int) -> dict[str, float]:
    """One whole run (for `run_isolated`): its wall seconds."""
    start = time.perf_counter()
    fedrecsim.run(tables(users, items, entries))
    return {"seconds": time.perf_counter() - start}


def bare(users: int, items: int, entries: int) -> dict[str, float]:
    """The computation without the simulator (for `run_isolated`): its wall seconds."""
    start = time.perf_counter()
    floor(users, items, entries)
    return {"seconds": time.perf_counter() - start}


def floor(users: int, items: int, entries: int) -> dict[str, float]:
    """The same computation as the run, called directly; returns its metrics."""
    scenario = parse_scenario(tables(users, items, entries))
    config, seed = scenario.protocol, scenario.run.seed
    train, test = prepare_data(scenario.data, seed)
    bounds, budget = public_bounds(config, scenario.data, train), config.budget()
    bound = bounds.value
    silos = silo_data(train, silo_assignment(scenario.data, train, seed))
    prototypes = [
        silo_prototypes(generator(seed, Stream.ACTOR, Role.SILO.code, silo.label), silo.rows,
                        silo_params(config, silo.users.size, bound), budget).prototypes
        for silo in silos
    ]

    hyper = NMFHyper(config.rank, config.lam, config.nmf_iterations)
    V = item_factors(generator(seed, Stream.ACTOR, Role.SERVER.code, 0), prototypes, hyper)
    model = shared_item_model(silos, V, config.lam, train.n_users, config.fill)
    snr = signal_to_noise(config, budget, bound, silos, train.n_items)
    return {"prototype_snr": snr.ratio, **evaluate(model.scores, model.predict, train, test, config.map_k, scale=bounds.scale)}


def run(options: Options) -> Iterator[str]:
    size = QUICK if options.quick else STANDARD
    best_sim = best_floor = math.inf
    rss = 0.0
    for _ in range(options.repeats or 3):
        child = run_isolated(__name__, "simulate", users=size[0], items=size[1], entries=size[2])
        best_sim, rss = min(best_sim, child["seconds"]), max(rss, child["peak_rss_mb"])
        best_floor = min(best_floor, run_isolated(__name__, "bare", users=size[0], items=size[1], entries=size[2])["seconds"])
    yield (
        f"W6 prototypes sim_s={best_sim:.2f} floor_s={best_floor:.2f} ratio={best_sim / best_floor:.2f} "
        f"ratio_target_max={RATIO_TARGET} peak_rss_mb={rss:.0f} users={size[0]} items={size[1]} entries={size[2]}"
    )


__all__ = ["bare", "floor", "run", "simulate", "tables"]
