"""FCF as configured: every protocol key reaches the maths, parties draw from their own generators,
implicit evaluation refuses data it cannot rank, and what a run reports (metrics, progress, population)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import Ratings, prepare_data
from fedrecsim.models.implicit_mf import implicit_round
from fedrecsim.models.mf import CentralizedMF, MFHyper, unit_rows
from fedrecsim.network.party import Role
from fedrecsim.protocols.fcf.protocol import _check_evaluable
from fedrecsim.seeding import Stream, generator


def _implicit(tiny_fcf, **protocol):
    tiny_fcf["data"].update({"feedback": "implicit", "split": "leave_one_out", "items": 300})
    tiny_fcf["protocol"].update({"feedback": "implicit", "d": 4, "gamma": 0.05, **protocol})
    return tiny_fcf


def _data(scenario):
    parsed = fedrecsim.parse_scenario(scenario)
    return prepare_data(parsed.data, parsed.run.seed)


def test_explicit_run_uses_the_configured_gamma_lam_and_mu(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 3
    tiny_fcf["protocol"].update({"gamma": 0.1, "lam": 0.05, "mu": 0.03})
    state = fedrecsim.run(tiny_fcf).outcome.state
    train, _ = _data(tiny_fcf)
    reference = CentralizedMF(MFHyper(d=8, gamma=0.1, lam=0.05, mu=0.03))
    U, V = state["initial_user_factors"], state["initial_item_factors"]
    for _ in range(3):
        U, V = reference.round(U, V, train, participating_users_mask=train.user_counts() > 0)
    np.testing.assert_allclose(state["user_factors"], U, rtol=0, atol=1e-9)
    np.testing.assert_allclose(state["item_factors"], V, rtol=0, atol=1e-9)


@pytest.mark.parametrize("normalize", [True, False])
def test_implicit_run_equals_the_vectorized_reference_with_its_d_alpha_lam_and_normalize(tiny_fcf, normalize) -> None:
    scenario = _implicit(tiny_fcf, d=3, alpha=2.5, lam=0.02, gamma=0.05 if normalize else 0.002, normalize=normalize)
    scenario["run"]["rounds"] = 3
    state = fedrecsim.run(scenario).outcome.state
    train, _ = _data(scenario)
    V = state["initial_item_factors"]
    assert V.shape == (300, 3)
    for _ in range(3):
        V = implicit_round(V, train, alpha=2.5, lam=0.02, gamma=0.05 if normalize else 0.002, normalize=normalize)
    np.testing.assert_allclose(state["item_factors"], V, rtol=0, atol=1e-9)


def test_every_party_draws_from_its_own_generator_spawned_by_party_id(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 1
    state = fedrecsim.run(tiny_fcf).outcome.state
    seed, d = tiny_fcf["run"]["seed"], 8
    expected_users = np.stack([unit_rows(generator(seed, Stream.ACTOR, Role.USER.code, u), 1, d)[0] for u in range(40)])
    np.testing.assert_array_equal(state["initial_user_factors"], expected_users)
    expected_items = unit_rows(generator(seed, Stream.ACTOR, Role.SERVER.code, 0), 60, d)
    np.testing.assert_array_equal(state["initial_item_factors"], expected_items)


def test_implicit_runs_report_hit_rates_at_2_5_and_10(tiny_fcf) -> None:
    scenario = _implicit(tiny_fcf)
    scenario["run"]["rounds"] = 1
    result = fedrecsim.run(scenario)
    assert set(result.metrics) == {
        "hr@2", "hr@5", "hr@10", "hr@2_random", "hr@5_random", "hr@10_random", "participants", "missing", "rejected"
    }
    assert all(0.0 <= result.metrics[f"hr@{k}"] <= 1.0 for k in (2, 5, 10))
    assert [result.metrics[f"hr@{k}_random"] for k in (2, 5, 10)] == [0.02, 0.05, 0.1]


def test_implicit_max_users_caps_the_participants(tiny_fcf) -> None:
    scenario = _implicit(tiny_fcf, max_users=7)
    scenario["run"]["rounds"] = 3
    assert [row["participants"] for row in fedrecsim.run(scenario).rounds] == [7, 7, 7]


def test_implicit_data_too_small_to_rank_is_refused_before_the_run(tiny_fcf) -> None:
    scenario = _implicit(tiny_fcf)
    scenario["data"].update({"items": 110, "ratings": 1200})
    train, test = _data(scenario)
    touched = int((train.user_counts() + np.bincount(test.users, minlength=train.n_users)).max())
    assert 110 - touched < 99  # the data: some user left fewer than 99 items to sample
    message = (
        "data.items: implicit evaluation ranks each held-out item among 99 items the user never touched; "
        f"a user here touched {touched} of 110 items"
    )
    with pytest.raises(fedrecsim.ConfigError, match=f"^{re.escape(message)}$"):
        fedrecsim.run(scenario)


def _ratings(users: list[int], items: list[int], n_users: int, n_items: int) -> Ratings:
    return Ratings(np.array(users), np.array(items), np.ones(len(users)), n_users, n_items, (0.0, 1.0))


def test_evaluable_means_99_untouched_items_for_every_user_counting_train_and_test() -> None:
    # User 0 touched 2 train + 1 test items of 102: exactly 99 are left, which is enough. User 2 has no
    # held-out item, so the test set names no user past 1.
    train = _ratings([0, 0, 1, 2], [0, 1, 0, 5], 3, 102)
    test = _ratings([0, 1], [2, 1], 3, 102)
    _check_evaluable(SimpleNamespace(train=train, test=test))
    # One item fewer: user 0 has only 98 left (train and test both count).
    train, test = _ratings([0, 0, 1, 2], [0, 1, 0, 5], 3, 101), _ratings([0, 1], [2, 1], 3, 101)
    with pytest.raises(fedrecsim.ConfigError, match="a user here touched 3 of 101 items$"):
        _check_evaluable(SimpleNamespace(train=train, test=test))
    # No test set: nothing is ranked, so any size will do.
    _check_evaluable(SimpleNamespace(train=train, test=test.subset(np.zeros(2, dtype=bool))))


def test_progress_is_reported_after_every_round(tiny_fcf) -> None:
    calls: list[tuple[int, int]] = []
    fedrecsim.run(tiny_fcf, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]


def test_final_metrics_are_the_last_rounds_and_the_population_counts_are_reported(tiny_fcf) -> None:
    tiny_fcf["run"]["rounds"] = 6
    tiny_fcf["availability"] = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.3, "initial_online": 0.5, "dropout": 0.2}
    result = fedrecsim.run(tiny_fcf)
    last = dict(result.rounds[-1])
    assert last.pop("round") == 6
    trivial = {name: value for name, value in result.metrics.items() if name.endswith("_mean_predictor")}
    assert set(trivial) == {f"{split}_{what}_mean_predictor" for split in ("train", "test") for what in ("rmse", "mae")}
    assert {name: value for name, value in result.metrics.items() if name not in trivial} == pytest.approx(last)
    ledger = result.result["ledger"]
    initially_online = next(row["online"] for row in ledger["per_round"] if row["round"] == 0)
    population = result.outcome.state["population"]
    assert set(population) == {"joins", "leaves", "crashes"}
    assert population["crashes"] == sum(row["missing"] for row in result.rounds) > 0
    assert population["leaves"] == ledger["kinds"]["core.leave"]["msgs"] > 0
    assert initially_online + population["joins"] + population["crashes"] == ledger["kinds"]["core.join"]["msgs"]
