"""FCF resumed from a checkpoint (`fedrecsim.checkpoint`): from each round's end of a tiny run, explicit
and implicit, with churn, stragglers and a crash-restart under way, the resumed run ends as the run never
interrupted -- transcript hash, metrics, ledger, final model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.checkpoint import Saved
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

_LOGNORMAL = {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}
_STRAGGLERS = {"compute_median_s": 1.0, "compute_sigma": 1.0}

RUNS: dict[str, dict[str, Any]] = {
    "explicit: churn, dropout, stragglers, a crashed user restarting with its state": {
        "run": {"protocol": "fcf", "seed": 3, "rounds": 4, "round_timeout_s": 3.0},
        "data": {"users": 12, "items": 15, "ratings": 120},
        "network": {"latency": _LOGNORMAL, "duplicate": 0.2},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.1, "initial_online": 0.8, "dropout": 0.1, **_STRAGGLERS},
        "faults": {"crash": [{"party": "user:2", "kind": "fcf.item_gradients", "round": 2, "restart_after_s": 7.0}]},
        "protocol": {"d": 3},
    },
    "implicit: churn, stragglers, a crashed user restarting": {
        "run": {"protocol": "fcf", "seed": 4, "rounds": 4, "round_timeout_s": 3.0},
        "data": {"feedback": "implicit", "split": "leave_one_out", "users": 12, "items": 120, "ratings": 240},
        "network": {"latency": _LOGNORMAL},
        "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.1, "initial_online": 0.8, **_STRAGGLERS},
        "faults": {"crash": [{"party": "user:3", "kind": "fcf.model_gradient", "round": 2, "restart_after_s": 7.0}]},
        "protocol": {"feedback": "implicit", "d": 3, "max_users": 8},
    },
}


def _under_way(saved: Saved) -> set[str]:
    """What ``saved`` caught unfinished: a crashed user's restart, a straggler's computation, a user offline."""
    world = checkpoint_world(saved)
    population, users = world["population"], world["users"].values()
    return {name for name, held in (
        ("a restart due", population["_restarts_due"]),
        ("a straggler computing", any(user.get("computing_until") is not None for user in users)),
        ("a user offline", len(population["_online"]) < len(users)),
    ) if held}


@pytest.mark.parametrize("name", RUNS)
def test_a_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path, name) -> None:
    tables = RUNS[name]
    uninterrupted = fedrecsim.run(tables)
    checkpointed, written = every_checkpoint(tables, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == [1, 2, 3]
    assert set().union(*map(_under_way, written)) == {"a restart due", "a straggler computing", "a user offline"}
    for result in [checkpointed, *(resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written)]:
        assert_same_run(result, uninterrupted)
        assert set(result.outcome.state) == set(uninterrupted.outcome.state)
        for key, value in uninterrupted.outcome.state.items():
            if not isinstance(value, np.ndarray):
                assert result.outcome.state[key] == value, key
