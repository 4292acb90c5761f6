"""ldp_implicit resumed from a checkpoint (`fedrecsim.checkpoint`): from each epoch's end of a tiny run with
two proxies holding underfull pools, churn and stragglers, the resumed run ends as the run never
interrupted -- transcript hash, metrics, ledger, privacy accounting, final model."""

from __future__ import annotations

import numpy as np

import fedrecsim
from fedrecsim.checkpoint import Saved
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

RUN = {
    "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 6, "round_timeout_s": 3.0},
    "data": {"feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}, "loss": 0.02},
    "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2, "compute_median_s": 1.0, "compute_sigma": 1.0},
    "protocol": {"k": 10, "proxies": 2, "min_users": 6, "underfull": "hold", "proxy_wait_s": 1.0},
}


def _under_way(saved: Saved) -> set[str]:
    """What ``saved`` caught unfinished: a proxy holding an underfull pool, a straggler's computation, a
    user offline."""
    world = checkpoint_world(saved)
    proxies = [world["objects"][f"proxy:{index}"] for index in range(2)]
    users = world["users"].values()
    return {name for name, caught in (
        ("a proxy holding a pool", any(pool.held for proxy in proxies for pool in proxy["pools"].values())),
        ("a straggler computing", any(user.get("computing_until") is not None for user in users)),
        ("a user offline", len(world["population"]["_online"]) < len(users)),
    ) if caught}


def test_a_run_resumed_from_each_checkpoint_ends_as_the_run_never_interrupted(tmp_path) -> None:
    uninterrupted = fedrecsim.run(RUN)
    checkpointed, written = every_checkpoint(RUN, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == [1, 2, 3, 4, 5]
    assert set().union(*map(_under_way, written)) == {"a proxy holding a pool", "a straggler computing", "a user offline"}
    pools = uninterrupted.result["privacy"]["pools"]
    assert pools["reports_released"] > 0 and pools["reports_held"] > 0  # pools both released and held
    for result in [checkpointed, *(resume_from(saved, tmp_path / f"from-{saved.round}") for saved in written)]:
        assert_same_run(result, uninterrupted)
        assert set(result.outcome.state) == set(uninterrupted.outcome.state)
        for key, value in uninterrupted.outcome.state.items():  # the trajectories, the pools' fates, ...
            np.testing.assert_equal(result.outcome.state[key], value, err_msg=key)
