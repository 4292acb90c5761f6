"""What an S2/S3 run reports about itself, and the wiring of its driver (`protocol._run_private`).

The final metrics beside the baseline and the noiseless replay, computed here by hand on a one-rating
data set; the privacy report's noise measurements from hand-built parties (items without eta only in S3,
means over what was measured, no rho~ in the naive variant); the refusal of an empty training split,
which a scenario can reach. And from tiny runs: the set-up waits for a member's late item request, the
third party draws from its own generator, progress and wall timings are reported per round, and the
checkpoints hold the driver's parts by name -- also in the naive variant, which has no third party.
"""

from __future__ import annotations

import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.dpmf import protocol
from fedrecsim.protocols.dpmf.config import DPMFConfig
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.third_party import Aggregator
from fedrecsim.seeding import Stream, generator
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from


def _ratings(users: list[int], items: list[int], values: list[float], n_users: int, n_items: int) -> Ratings:
    return Ratings(np.array(users, dtype=np.int64), np.array(items, dtype=np.int64), np.array(values), n_users, n_items, (1.0, 5.0))


def _public(config: DPMFConfig, n_items: int) -> PublicParameters:
    return PublicParameters(
        config.scenario, config.variant, config.mask_transport, config.hyper, config.ring, 1.0, n_items, (1.0, 5.0),
        PublicCoin(0, n_items, config.d),
    )


def test_the_final_metrics_beside_the_baseline_and_the_noiseless_replay() -> None:
    # One user, one item, d = 1, gamma = 1/2, no regularization: u = 0.5, v = 1, r = 2. One full-batch step:
    # e = 1.5, u <- 0.5 + 0.5 * 2 e v = 2 (projected back to 1), v <- 1 + 0.5 * 2 e u = 1.75: the error is 0.25.
    config = DPMFConfig(scenario="S2", d=1, gamma=0.5, lam=0.0, mu=0.0)  # baseline_rounds = 0: as many as the run
    ctx = SimpleNamespace(train=_ratings([0], [0], [2.0], 1, 1), rounds=1)
    rounds = [{"round": 1, "err_mean": 0.75, "participants": 0}]
    # The user contributed to no iteration: the noiseless replay takes no step, its error stays |2 - 0.5|.
    # The paper's baseline runs 100 iterations: the second step has e = 0.25, u stays 1 (projected), v <- 2,
    # and from there the error is 0.
    final, base_u, base_v, _ = protocol._compared(
        ctx, config, _public(config, 1), rounds, [np.array([], dtype=np.int64)], np.array([[0.5]]), np.array([[1.0]]),
    )
    assert final == {
        "err_mean": 0.75, "participants": 0, "baseline_err_mean": 0.25, "err_increase": 0.5,
        "noiseless_err_mean": 1.5, "noise_err_increase": -0.75, "paper_baseline_err_mean": 0.0, "paper_err_increase": 0.75,
    }
    np.testing.assert_allclose([base_u[0, 0], base_v[0, 0]], [1.0, 1.75])


def _parties(eta_whole: list[bool], eta_pieces: list[int], eta_values: int, rho_values: int, d: int) -> dict[str, Any]:
    """Hand-built parties after one iteration: two users, the recommender's noise set-up and the monitors'
    measurements (eta: |sums| 6 over ``eta_values`` elements; rho~: 2 over ``rho_values``)."""
    users = {Party(Role.USER, 0): SimpleNamespace(u=np.full(d, 0.5)), Party(Role.USER, 1): SimpleNamespace(u=np.full(d, -0.5))}
    recommender = SimpleNamespace(
        eta_whole=np.array(eta_whole), eta_pieces=np.array(eta_pieces), eta_skipped=4, presharing=[{"attempt": 1, "items": 2}],
        item_factors=np.full((len(eta_whole), d), 0.25), recent=deque(), rated_items={},
    )
    verifier = SimpleNamespace(
        eta_abs_sum=6.0, eta_values=eta_values, rho_abs_sum=2.0, rho_values=rho_values, rho=SimpleNamespace(summary=lambda: {"short_updates": 0}),
        eta_truth=lambda items: np.zeros((items.size, d), dtype=np.uint64), last_rho=None, monitors=["a monitor"],
    )
    return {"users": users, "recommender": recommender, "verifier": verifier, "population": SimpleNamespace(joins=0, leaves=0, crashes=0)}


@pytest.mark.parametrize(
    ("scenario", "variant", "eta_whole", "eta_pieces", "eta_values", "expected_eta", "expected_rho"),
    [
        (
            "S3", "protected", [True, True, False], [3, 2, 0], 4,
            {"items_noised": 2, "items_without_eta": 1, "pieces_min": 2, "abs_mean": 1.5, "skipped_updates": 4, "sharers": "common",
             "presharing": [{"attempt": 1, "items": 2}]},
            {"short_updates": 0, "abs_mean": 0.4},
        ),
        (
            "S2", "naive", [False, False, False], [0, 0, 0], 0,
            {"items_noised": 0, "items_without_eta": 0, "pieces_min": 0, "abs_mean": None, "skipped_updates": 4},
            {"variant": "naive: no rho~"},
        ),
    ],
    ids=["S3, an item without eta", "S2 naive, no eta measured"],
)
def test_the_noise_report_of_the_parties(
    scenario: str, variant: str, eta_whole: list[bool], eta_pieces: list[int], eta_values: int,
    expected_eta: dict[str, Any], expected_rho: dict[str, Any],
) -> None:
    config = DPMFConfig(scenario=scenario, variant=variant, d=1, replay=False, check_invariants=False)
    ctx = SimpleNamespace(train=_ratings([0, 1], [0, 1], [4.0, 2.0], 2, 3), test=_ratings([], [], [], 2, 3), rounds=1)
    row = {"round": 1, "selected": 2, "err_mean": 2.0, "user_down_max_b": 10.0, "user_up_max_b": 5.0, "tp_sent_b": 20.0}
    parties = _parties(eta_whole, eta_pieces, eta_values, rho_values=5, d=1)
    outcome = protocol._private_outcome(
        ctx, config, _public(config, 3), parties["users"], parties["recommender"], parties["verifier"], parties["population"],
        [row], [np.array([0, 1])], np.full((2, 1), 0.5), np.full((3, 1), 0.25), {},
        protocol._Traffic(None, np.zeros(2, dtype=np.int64)),
    )
    assert outcome.privacy["eta"] == expected_eta
    assert outcome.privacy["rho"] == expected_rho
    assert outcome.invariants == []
    assert (outcome.rounds_completed, outcome.baselines) == (1, {"err_mean": "baseline_err_mean"})


def test_a_training_split_without_ratings_is_refused() -> None:
    # One rating, and a random split holds out round(0.6 * 1) = 1 of it.
    tables = {
        "run": {"protocol": "dpmf", "seed": 1, "rounds": 1},
        "data": {"users": 2, "items": 2, "ratings": 1, "split": "random", "test_fraction": 0.6},
        "protocol": {"scenario": "S2", "d": 2},
    }
    with pytest.raises(ConfigError) as info:
        fedrecsim.run(tables)
    assert (info.value.key_path, info.value.problem) == ("data", "the training split holds no ratings")


def _tiny(**protocol_keys: Any) -> dict[str, Any]:
    return {
        "run": {"protocol": "dpmf", "seed": 2, "rounds": 3, "round_gap_s": 0.5, "round_timeout_s": 5.0},
        "data": {"users": 6, "items": 8, "ratings": 30},
        "network": {"latency": {"model": "constant", "seconds": 0.05}},
        "protocol": {"scenario": "S2", "d": 2, "epsilon": 1.0, **protocol_keys},
    }


def test_the_noise_set_up_waits_for_a_members_item_request_that_comes_late() -> None:
    # user:0 joins, crashes before its item request and is back 2 s later: past the gap, within the set-up's timeout.
    tables = {**_tiny(), "faults": {"crash": [{"party": "user:0", "kind": "dpmf.item_request", "restart_after_s": 2.0}]}}
    result = fedrecsim.run(tables)
    assert [row.tolist() for row in result.outcome.state["contributors"]] == [list(range(6))] * 3


def test_the_third_party_draws_from_its_own_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    generators: list[Any] = []

    class Recorded(Aggregator):
        def __init__(self, party, network, rng, public) -> None:  # type: ignore[no-untyped-def]
            generators.append(rng.bit_generator.state)
            super().__init__(party, network, rng, public)

    monkeypatch.setattr(protocol, "Aggregator", Recorded)
    fedrecsim.run(_tiny())
    assert generators == [generator(2, Stream.ACTOR, Role.THIRD_PARTY.code, 0).bit_generator.state]


def test_progress_and_wall_and_cpu_timings_are_reported_per_round() -> None:
    calls: list[tuple[int, int]] = []
    started, started_cpu = time.perf_counter(), time.process_time()
    result = fedrecsim.run(_tiny(), progress=lambda completed, total: calls.append((completed, total)))
    elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    assert calls == [(1, 3), (2, 3), (3, 3)]
    state = result.outcome.state
    assert len(state["round_wall_s"]) == len(state["round_cpu_s"]) == 3
    assert 0.0 <= sum(state["round_wall_s"]) <= state["loop_wall_s"] <= elapsed
    assert 0.0 < sum(state["round_cpu_s"]) <= state["loop_cpu_s"] <= elapsed_cpu


@pytest.mark.parametrize(
    ("variant", "parts"),
    [("protected", {"recommender", "verifier", "traffic", "aggregator"}), ("naive", {"recommender", "verifier", "traffic"})],
)
def test_the_checkpoints_hold_the_drivers_parts_by_name_and_resume(tmp_path, variant: str, parts: set[str]) -> None:
    checkpointed, written = every_checkpoint(_tiny(variant=variant), tmp_path / "checkpointed")
    assert [saved.round for saved in written] == [1, 2]
    assert {frozenset(checkpoint_world(saved)["objects"]) for saved in written} == {frozenset(parts)}
    assert_same_run(resume_from(written[0], tmp_path / "resumed"), checkpointed)
