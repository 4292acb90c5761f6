"""The ``secagg`` protocol resumed from a checkpoint (`fedrecsim.checkpoint`): from each round's end of a tiny
run, real mode (Bonawitz et al.) with dropout and stragglers and ideal-mode SecAgg+ with churn and dropout,
the resumed run ends as the run never interrupted -- transcript hash, metrics, ledger, invariants, virtual
time, the last sum -- and the checkpoints hold the server and, in ideal mode, the one ideal functionality
every user refers to."""

from __future__ import annotations

from typing import Any

import pytest

import fedrecsim
from fedrecsim.checkpoint import Saved
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_STRAGGLERS = {"compute_median_s": 1.0, "compute_sigma": 1.0}

RUNS: dict[str, dict[str, Any]] = {
    "real, complete graph: dropout, stragglers": {
        "run": {"protocol": "secagg", "seed": 6, "rounds": 5, "round_timeout_s": 8.0},
        "data": {"users": 8, "items": 20, "ratings": 80},
        "network": {"latency": _LOGNORMAL},
        "availability": {"dropout": 0.35, **_STRAGGLERS},
        "protocol": {"mode": "real", "graph": "complete", "length": 8, "stage_timeout_s": 2.0},
    },
    "ideal, SecAgg+: churn, dropout": {
        "run": {"protocol": "secagg", "seed": 7, "rounds": 5},
        "data": {"users": 10, "items": 20, "ratings": 80},
        "network": {"latency": _LOGNORMAL},
        "availability": {"model": "bernoulli", "p_join": 0.4, "p_leave": 0.15, "initial_online": 0.8, "dropout": 0.15},
        "protocol": {"mode": "ideal", "graph": "sparse", "neighbours": 4, "length": 8},
    },
}

# What the checkpoints of each run caught under way, which its resumed users and driver carry on from.
CAUGHT: dict[str, set[str]] = {
    "real, complete graph: dropout, stragglers": {
        "a straggler computing", "a user yet to take part in a session", "a user whose last session is behind",
        "an aborted round",
    },
    "ideal, SecAgg+: churn, dropout": {
        "a user offline", "a user yet to take part in a session", "a user whose last session is behind",
    },
}


def _under_way(saved: Saved) -> set[str]:
    """What ``saved`` caught: a user computing, a user offline, a running user that has not taken part in a
    session yet or whose last one is older than the round just ended (it crashed, was left behind or was
    offline), an aborted round among those so far."""
    world = checkpoint_world(saved)
    population, users = world["population"], world["users"]
    running = [users[party] for party in population["running"]]
    return {name for name, held in (
        ("a straggler computing", any(user.get("computing_until") is not None for user in users.values())),
        ("a user offline", len(population["_online"]) < len(users)),
        ("a user yet to take part in a session", any(user["session"] == 0 for user in running)),
        ("a user whose last session is behind", any(0 < user["session"] < saved.round for user in running)),
        ("an aborted round", any(row["aborted"] for row in world["values"]["rounds"])),
    ) if held}


@pytest.mark.parametrize("name", RUNS)
def test_a_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path, name) -> None:
    tables = RUNS[name]
    uninterrupted = fedrecsim.run(tables)
    assert [invariant["violations"] for invariant in uninterrupted.result["invariants"]] == [0]
    checkpointed, written = every_checkpoint(tables, tmp_path / "checkpointed")
    assert len(written) >= 2
    for result in [checkpointed, *(resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written)]:
        assert_same_run(result, uninterrupted)
    assert set().union(*map(_under_way, written)) == CAUGHT[name]


@pytest.mark.parametrize(("name", "objects"), [
    ("real, complete graph: dropout, stragglers", {"server"}),
    ("ideal, SecAgg+: churn, dropout", {"server", "ideal"}),
])
def test_a_checkpoint_holds_the_server_and_the_ideal_functionality_the_users_share(tmp_path, name, objects) -> None:
    _, [saved, *_] = every_checkpoint(RUNS[name], tmp_path / "checkpointed")
    world = checkpoint_world(saved)
    assert set(world["objects"]) == objects
    assert world["objects"]["server"]["members"]
    expected = "object ideal" if "ideal" in objects else None  # the resumed run's own functionality, not a copy
    assert {user["ideal"] for user in world["users"].values()} == {expected}
