"""FedVAE resumed from a checkpoint (`fedrecsim.checkpoint`): from each round's end of a tiny run with churn,
stragglers, mid-round crashes, attackers and learning-rate decay under way, the resumed run ends as the run
never interrupted -- transcript hash, metrics, ledger, invariants, the server's ω -- and a checkpoint holds
the server's state at its round's end."""

from __future__ import annotations

from typing import Any

import numpy as np

import fedrecsim
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

TABLES: dict[str, Any] = {
    "run": {"protocol": "fedvae", "seed": 3, "rounds": 4, "round_timeout_s": 3.0},
    "data": {"feedback": "implicit", "users": 40, "items": 30, "ratings": 500, "split": "heldout_users", "test_fraction": 0.2},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "availability": {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2, "dropout": 0.1,
                     "compute_median_s": 1.0, "compute_sigma": 1.0},
    "protocol": {"users_per_round": 10, "hidden": 8, "latent": 4, "byzantine_fraction": 0.1, "gamma": 1.0,
                 "krum_m": 0, "baseline": False},
}


def test_a_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path) -> None:
    uninterrupted = fedrecsim.run(TABLES)
    checkpointed, written = every_checkpoint(TABLES, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == [1, 2, 3]
    population = uninterrupted.outcome.state["population"]
    assert population["joins"] and population["leaves"] and population["crashes"]
    for result in [checkpointed, *(resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written)]:
        assert_same_run(result, uninterrupted)
        assert set(result.outcome.state) == set(uninterrupted.outcome.state)
        for key, value in uninterrupted.outcome.state.items():
            if not isinstance(value, np.ndarray):
                assert result.outcome.state[key] == value, key


def test_a_checkpoint_holds_the_servers_omega_and_the_rows_at_its_rounds_end(tmp_path) -> None:
    _, written = every_checkpoint(TABLES, tmp_path / "checkpointed")
    two_rounds = fedrecsim.run({**TABLES, "run": {**TABLES["run"], "rounds": 2}})
    world = checkpoint_world(written[1])
    np.testing.assert_array_equal(world["objects"]["server"]["omega"], two_rounds.outcome.state["omega"])
    assert world["objects"]["server"]["adam"].t == 2
    rows = [{name: value for name, value in row.items() if not name.startswith(("ndcg", "recall"))} for row in two_rounds.rounds]
    assert world["values"]["rows"] == rows
