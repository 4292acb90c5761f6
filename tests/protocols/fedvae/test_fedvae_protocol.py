"""FedVAE runs: Algorithm 1's rounds, sparse equal to dense, Krum against attackers, validation, epochs, the plan."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.errors import ConfigError
from fedrecsim.inspect import inspect_scenario
from fedrecsim.mechanisms.adam import adam_init, adam_step
from fedrecsim.models.multvae import Batch, dense_user_gradients, draw_noise, init_params, losses
from fedrecsim.network.party import SERVER, Role
from fedrecsim.network.wire import decode, encode
from fedrecsim.protocols.fedvae.aggregation import FilterSettings, global_update
from fedrecsim.protocols.fedvae import FedVAEConfig
from fedrecsim.protocols.fedvae.byzantine import choose_attackers
from fedrecsim.protocols.fedvae.evaluation import centralized_curve
from fedrecsim.protocols.fedvae.messages import Model
from fedrecsim.scenario import parse_scenario
from fedrecsim.seeding import Stream, generator


def scenario(rounds: int = 3, seed: int = 5, **protocol: Any) -> dict[str, Any]:
    """50 users (10 held out) over 40 items, a small network, R = 12: an epoch is 4 rounds."""
    return {
        "run": {"name": "fedvae-test", "protocol": "fedvae", "rounds": rounds, "seed": seed},
        "data": {
            "source": "synthetic", "feedback": "implicit", "users": 50, "items": 40, "ratings": 900,
            "split": "heldout_users", "test_fraction": 0.2,
        },
        "protocol": {"users_per_round": 12, "hidden": 16, "latent": 4, "baseline": False, **protocol},
    }


def test_sparse_first_layer_updates_give_the_dense_protocols_model_exactly_and_send_less() -> None:
    for extra in ({"secure_filter": "krum", "krum_m": 0}, {"secure_filter": "none"}, {"krum_m": 1}):
        attacked = {"byzantine_fraction": 0.1, "byzantine_policy": "scaled_negative", **extra}
        dense = fedrecsim.run(scenario(rounds=5, **attacked))
        sparse = fedrecsim.run(scenario(rounds=5, sparse=True, **attacked))
        assert np.array_equal(dense.outcome.state["omega"], sparse.outcome.state["omega"]), extra
        assert dense.rounds == sparse.rounds
        kinds = sparse.result["ledger"]["kinds"]
        assert "fedvae.gradient" not in kinds
        assert kinds["fedvae.sparse_gradient"]["bytes"] < dense.result["ledger"]["kinds"]["fedvae.gradient"]["bytes"]


def test_the_first_round_is_algorithm_2_applied_to_each_sampled_users_own_gradient() -> None:
    """Rebuild round 1 from outside: each user's gradient from its own generator's first draw, then GlobalUpdate."""
    table = scenario(rounds=1, secure_filter="krum", krum_m=0, krum_f=0.2)
    result = fedrecsim.run(table, record_views=[SERVER])
    config = parse_scenario(table)
    train, _ = prepare_data(config.data, 5)
    state = result.outcome.state
    layout, omega0 = state["layout"], state["initial_omega"]
    hyper = config.protocol.hyper()
    received = sorted((envelope.src, envelope.body) for envelope in result.views[SERVER] if envelope.kind == "fedvae.gradient")
    assert len(received) == 12
    for party, body in received:
        items, values = train.user_ratings(party.index)
        user = Batch.single(items, values, train.n_items)
        rng = generator(5, Stream.ACTOR, Role.USER.code, party.index)
        # ω exactly as the user decoded it: BLAS's float32 sums depend on the buffer's alignment, so the
        # check uses the same bytes, not a copy of ω elsewhere in memory.
        weights = decode(encode(SERVER, party, 1.0, Model(1, omega0))).body.weights
        (expected,) = dense_user_gradients(weights, layout, user, draw_noise(rng, user, hyper), hyper)
        assert np.array_equal(body.values, expected), party
    gradients = np.stack([body.values for _, body in received])
    update = global_update(omega0, gradients, adam_init(omega0), config.protocol.adam(), FilterSettings("krum", 0.2, 0), 0.0)
    assert np.array_equal(update.omega, state["omega"])
    assert result.rounds[0]["kept"] == 12 - 2 and result.rounds[0]["krum_f"] == 2


def test_a_run_is_reproducible_from_its_seed() -> None:
    first, second = fedrecsim.run(scenario()), fedrecsim.run(scenario())
    assert first.transcript_xxh3_128 == second.transcript_xxh3_128
    assert np.array_equal(first.outcome.state["omega"], second.outcome.state["omega"]) and first.rounds == second.rounds
    other = fedrecsim.run(scenario(seed=6))
    assert other.transcript_xxh3_128 != first.transcript_xxh3_128


def test_epochs_are_ceil_of_training_users_over_r_and_gamma_t_decays_per_epoch() -> None:
    result = fedrecsim.run(scenario(rounds=9, gamma=3.0, delta=0.5))
    training = result.result["ledger"]["roles"]["user"]["parties"]
    assert training == 40 and result.outcome.state["epoch_rounds"] == math.ceil(40 / 12) == 4
    assert [row["epoch"] for row in result.rounds] == [1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert [row["gamma_t"] for row in result.rounds] == [3.0 * 0.5**epoch for epoch in [1, 1, 1, 1, 2, 2, 2, 2, 3]]
    assert all(row["participants"] == 12 and row["gradients"] == 12 and row["missing"] == 0 for row in result.rounds)
    evaluated = [row["round"] for row in result.rounds if "ndcg@100" in row]
    assert evaluated == [4, 8, 9]
    every_third = fedrecsim.run(scenario(rounds=7, eval_every=3))
    assert [row["round"] for row in every_third.rounds if "recall@20" in row] == [3, 6, 7]


def test_plain_fedvae_has_gamma_zero_and_delta_zero_switches_the_boost_off_from_the_first_round() -> None:
    assert {row["gamma_t"] for row in fedrecsim.run(scenario(rounds=2)).rounds} == {0.0}
    assert {row["gamma_t"] for row in fedrecsim.run(scenario(rounds=2, gamma=5.0, delta=0.0)).rounds} == {0.0}


def test_krum_keeps_attackers_out_where_plain_averaging_takes_every_one_in() -> None:
    attack = {"byzantine_fraction": 0.2, "byzantine_policy": "scaled_negative", "byzantine_scale": 50.0}
    # f = floor(0.4 * 12) = 4 >= the attackers of any round here, and 2f + 2 < n as Blanchard et al. require.
    krum = fedrecsim.run(scenario(rounds=6, secure_filter="krum", krum_f=0.4, krum_m=0, **attack))
    assert all(row["byzantine_accepted"] <= row["krum_f"] == 4 for row in krum.rounds)
    assert sum(row["byzantine_accepted"] for row in krum.rounds) > 0
    assert all(row["byzantine_kept"] == 0 and row["kept"] == 8 for row in krum.rounds)
    averaging = fedrecsim.run(scenario(rounds=6, secure_filter="none", **attack))
    assert [row["byzantine_kept"] for row in averaging.rounds] == [row["byzantine_accepted"] for row in averaging.rounds]
    assert [row["byzantine_sampled"] for row in averaging.rounds] == [row["byzantine_sampled"] for row in krum.rounds]


@pytest.mark.parametrize("policy, sparse", [("non_finite", False), ("non_finite", True), ("wrong_shape", False), ("wrong_shape", True)])
def test_malformed_gradients_are_rejected_before_krum_and_the_run_goes_on(policy: str, sparse: bool) -> None:
    result = fedrecsim.run(scenario(rounds=4, byzantine_fraction=0.2, byzantine_policy=policy, sparse=sparse))
    rejected = sum(row["rejected"] for row in result.rounds)
    assert rejected == sum(row["byzantine_sampled"] for row in result.rounds) > 0
    assert all(row["byzantine_accepted"] == 0 and row["gradients"] + row["rejected"] == 12 for row in result.rounds)
    assert np.isfinite(result.outcome.state["omega"]).all()
    (warning,) = result.result["warnings"]
    assert f"{rejected} gradients were rejected" in warning and "server:0 rejected the gradient user:" in warning
    assert ("NaN or Inf" if policy == "non_finite" else "expected") in warning
    assert result.result["invariants"] == [
        {"name": "honest_gradients_accepted", "checked": 4, "violations": 0,
         "detail": "the server's validation never rejected an honest user's gradient"}
    ]


def test_colluders_sending_a_value_too_large_for_the_servers_float32_sums_are_rejected_not_fatal() -> None:
    result = fedrecsim.run(scenario(rounds=2, byzantine_fraction=0.2, byzantine_policy="same_value", byzantine_scale=1e30))
    assert sum(row["rejected"] for row in result.rounds) == sum(row["byzantine_sampled"] for row in result.rounds) > 0
    assert "L2 norm of" in result.result["warnings"][0] and "> 1e+15" in result.result["warnings"][0]


def test_users_that_crash_mid_round_are_missing_and_the_round_goes_on() -> None:
    table = scenario(rounds=4)
    table["availability"] = {"model": "always", "dropout": 0.3}
    table["run"]["round_timeout_s"] = 5.0
    result = fedrecsim.run(table)
    assert sum(row["missing"] for row in result.rounds) > 0
    assert all(row["gradients"] + row["missing"] == row["participants"] == 12 for row in result.rounds)
    assert result.outcome.state["population"]["crashes"] == sum(row["missing"] for row in result.rounds)


def test_held_out_users_are_not_parties_and_the_centralized_baseline_sits_beside_the_metrics() -> None:
    result = fedrecsim.run(scenario(rounds=4, baseline=True))
    parties = result.result["ledger"]["parties"]
    _, test = prepare_data(parse_scenario(scenario()).data, 5)
    held_out = set(np.flatnonzero(test.user_counts()).tolist())
    assert len(held_out) == 10 and not {f"user:{user}" for user in held_out} & set(parties)
    final = result.metrics
    for name in ("ndcg@20", "ndcg@100", "recall@20", "recall@100"):
        assert 0.0 <= final[name] <= 1.0 and 0.0 <= final[f"{name}_multvae"] <= 1.0
    assert len(result.outcome.state["baseline"]) == 1  # 4 rounds of 4: one epoch
    assert result.result["privacy"]["guarantee"] == "none"


def test_the_centralized_baseline_after_each_epoch_is_in_the_row_of_that_epochs_last_round() -> None:
    """9 rounds of epochs of 4: Mult-VAE trains 3 epochs from the same ω_0 on the same 40 training users, with
    its own generator; its metrics after epoch e sit in round 4e's row (the last, partial epoch: round 9)."""
    table = scenario(rounds=9, baseline=True)
    result = fedrecsim.run(table)
    config = parse_scenario(table)
    train, test = prepare_data(config.data, 5)
    state = result.outcome.state
    training = np.flatnonzero((train.user_counts() > 0) & (test.user_counts() == 0))
    expected = centralized_curve(
        state["initial_omega"], state["layout"], config.protocol.hyper(), config.protocol.adam(), train, test, training,
        epochs=3, batch_size=500, cutoffs=(20, 100), rng=generator(5, Stream.PROTOCOL, 2),
    )
    rows = {row["round"]: row for row in result.rounds}
    for epoch, last in enumerate((4, 8, 9)):
        assert {name: rows[last][f"{name}_multvae"] for name in expected[epoch]} == expected[epoch]
    assert all(not any(name.endswith("_multvae") for name in rows[r]) for r in rows if r not in (4, 8, 9))
    assert {name: result.metrics[f"{name}_multvae"] for name in expected[-1]} == expected[-1]


def test_federated_rounds_lower_the_training_users_loss() -> None:
    """About 18 items a user over 40: the loss cannot fall much below 18 log 18 ~ 52 nats; it starts near 66.6."""
    result = fedrecsim.run(scenario(rounds=24, secure_filter="none", eta=0.01))
    state = result.outcome.state
    config = parse_scenario(scenario())
    train, test = prepare_data(config.data, 5)
    training = np.flatnonzero(test.user_counts() == 0)
    batch = Batch.of_users(train.by_user(), training, train.n_items)
    hyper = config.protocol.hyper()
    before = losses(state["initial_omega"], state["layout"], batch, None, hyper).mean()
    after = losses(state["omega"], state["layout"], batch, None, hyper).mean()
    assert after < before - 2.0


def test_a_split_that_holds_no_user_out_is_refused_and_a_tiny_held_out_share_is_a_warning() -> None:
    table = scenario()
    table["data"]["split"] = "per_user"
    with pytest.raises(ConfigError) as caught:
        fedrecsim.run(table)
    assert caught.value.key_path == "data.split" and "heldout_users" in str(caught.value)
    tiny = scenario(rounds=1)
    tiny["data"]["test_fraction"] = 0.001
    result = fedrecsim.run(tiny)
    assert result.result["warnings"] == ["no user is held out (no test entries), so nothing was ranked: raise data.test_fraction"]


def test_the_plan_is_the_ledger_when_every_training_user_is_sampled_and_close_with_sparse_gradients() -> None:
    table = scenario(rounds=2, users_per_round=40)
    estimate = inspect_scenario(parse_scenario(table), calibration_rounds=0).estimate
    assert estimate.exact
    ledger = fedrecsim.run(table).result["ledger"]
    for row in ledger["per_round"]:
        traffic = estimate.setup if row["round"] == 0 else estimate.per_round
        assert (traffic.total("sent_bytes"), traffic.total("sent_msgs")) == (row["bytes"], row["msgs"])
    sparse = scenario(rounds=4, sparse=True, byzantine_fraction=0.1, byzantine_policy="gaussian")
    estimate = inspect_scenario(parse_scenario(sparse), calibration_rounds=0).estimate
    assert not estimate.exact
    measured = fedrecsim.run(sparse).result["ledger"]["kinds"]["fedvae.sparse_gradient"]["bytes"] / 4
    planned = next(flow for flow in estimate.flows if flow.kind == "fedvae.sparse_gradient").bytes
    assert planned == pytest.approx(measured, rel=0.05)


def faulty(fault: dict[str, Any], rounds: int = 3, **protocol: Any) -> dict[str, Any]:
    """`scenario` with every one of the 40 training users sent ω each round and ``fault``'s tables merged in."""
    table = scenario(rounds=rounds, users_per_round=40, secure_filter="none", **protocol)
    table["network"] = {"latency": {"model": "constant", "seconds": 0.01}}
    table["run"]["round_timeout_s"] = 5.0
    for name, values in fault.items():
        table.setdefault(name, {}).update(values)
    return table


def test_duplicated_models_and_gradients_count_once_so_the_model_is_the_fault_free_one() -> None:
    """A user answers each round once (a copy of ω costs it no dropout or eps draw) and the server counts the
    first gradient of each user: with plain averaging any extra or different gradient would move ω."""
    clean = fedrecsim.run(faulty({}))
    copied = fedrecsim.run(faulty({"network": {"duplicate": 0.5}}))
    assert np.array_equal(copied.outcome.state["omega"], clean.outcome.state["omega"])
    faults = copied.result["ledger"]["faults"]
    assert faults["duplicated"] > 0 and faults["rejected"]["duplicate"] > 0
    assert all(row["gradients"] == 40 for row in copied.rounds)


@pytest.mark.parametrize("corrupt, reason", [("nan", "invalid"), ("huge", "invalid"), ("shape", "invalid"),
                                             ("dtype", "malformed"), ("kind", "unexpected")])
def test_a_gradient_forged_on_the_wire_is_rejected_and_the_model_is_that_without_its_sender(corrupt: str, reason: str) -> None:
    victim = "user:0"
    forged = fedrecsim.run(faulty({"faults": {"byzantine": [{"party": victim, "corrupt": corrupt, "kind": "fedvae.gradient"}]}}))
    silent = fedrecsim.run(faulty({"faults": {"crash": [{"party": victim, "kind": "fedvae.gradient"}]}}))
    assert np.array_equal(forged.outcome.state["omega"], silent.outcome.state["omega"])
    rejections = forged.result["ledger"]["faults"]["rejections"]
    assert len(rejections) == 3 and {(row["src"], row["dst"], row["reason"]) for row in rejections} == {(victim, "server:0", reason)}
    assert [row["gradients"] for row in forged.rounds] == [39, 39, 39]
    # The forging user is not an honest one, so the monitor has nothing to report.
    assert forged.result["invariants"][0]["violations"] == 0
    if reason == "invalid":
        assert [row["rejected"] for row in forged.rounds] == [1, 1, 1]
        assert all(row["problem"].startswith("server:0 expected a valid fedvae.gradient from user:0: ") for row in rejections)


def test_omega_0_is_drawn_from_the_servers_own_generator() -> None:
    result = fedrecsim.run(scenario(rounds=1))
    state = result.outcome.state
    expected = init_params(generator(5, Stream.ACTOR, Role.SERVER.code, 0), state["layout"])
    assert np.array_equal(state["initial_omega"], expected)


def test_gamma_t_extrapolates_the_rounds_adam_step_from_omega_t_minus_1() -> None:
    """Eq. (4) in round 1 (epoch 1, gamma_1 = 2 * 0.5 = 1): ω_1 = ω'_1 + 1 (ω'_1 - ω_0), where ω'_1 is the
    plain round's ω (the same gradients: gamma does not change what users compute in round 1)."""
    plain = fedrecsim.run(scenario(rounds=1)).outcome.state
    boosted = fedrecsim.run(scenario(rounds=1, gamma=2.0, delta=0.5)).outcome.state
    stepped, omega0 = plain["omega"], plain["initial_omega"]
    assert np.array_equal(boosted["omega"], stepped + np.float32(1.0) * (stepped - omega0))
    assert not np.array_equal(boosted["omega"], stepped)


def test_the_attackers_are_drawn_from_the_protocols_own_stream() -> None:
    result = fedrecsim.run(scenario(rounds=1, byzantine_fraction=0.2))
    config = parse_scenario(scenario())
    train, test = prepare_data(config.data, 5)
    training = np.flatnonzero((train.user_counts() > 0) & (test.user_counts() == 0))
    expected = choose_attackers(generator(5, Stream.PROTOCOL, 1), training, 0.2)
    assert result.outcome.state["attackers"] == sorted(expected) and len(expected) == 8


def test_krum_m_is_how_many_gradients_secure_filter_keeps() -> None:
    """krum_m = 0 (the default) keeps n - f = 11 of the 12 (f = floor(0.1 x 12) = 1), 1 is single Krum, 3 is
    Multi-Krum keeping 3."""
    assert FedVAEConfig().krum_m == 0
    assert {row["kept"] for row in fedrecsim.run(scenario(rounds=2)).rounds} == {11}
    assert {row["kept"] for row in fedrecsim.run(scenario(rounds=2, krum_m=1)).rounds} == {1}
    assert {row["kept"] for row in fedrecsim.run(scenario(rounds=2, krum_m=3)).rounds} == {3}


def blanchard_keeps(gradients: list[np.ndarray], f: int, m: int) -> list[int]:
    """Blanchard et al. (2017) from the definition, in float64 and without a Gram matrix: each gradient's score
    is the sum of its squared distances to its n - f - 2 nearest others; Multi-Krum keeps the m of lowest score."""
    n = len(gradients)
    wide = [gradient.astype(np.float64) for gradient in gradients]
    scores = []
    for i in range(n):
        distances = sorted(float(((wide[i] - wide[j]) ** 2).sum()) for j in range(n) if j != i)
        scores.append(sum(distances[: n - f - 2]))
    assert len(set(scores)) == n  # no ties: the choice is the definition's, not a tie-break's
    return sorted(sorted(range(n), key=scores.__getitem__)[:m])


@pytest.mark.parametrize("keep", [None, 1])
def test_by_default_the_servers_step_is_along_the_mean_of_the_n_minus_f_gradients_multi_krum_keeps(keep: int | None) -> None:
    """One round with the default SecureFilter (krum_f = 0.1, krum_m = 0): of the n = 12 gradients the
    server received, Multi-Krum keeps n - f = 11, and ω_1 is Adam's first step along their mean. With
    ``krum_m = 1`` (single Krum, still selectable) the step is along the one gradient of least score.
    A large Adam epsilon makes the first step nearly linear in the mean (Δω = -eta g / (|g| + eps)), so
    the step tells the mean of 11 from that of all 12 or from a single gradient."""
    extra = {"adam_epsilon": 1.0, "byzantine_fraction": 0.1}
    table = scenario(rounds=1, **extra) if keep is None else scenario(rounds=1, krum_m=keep, **extra)
    result = fedrecsim.run(table, record_views=[SERVER])
    config = parse_scenario(table).protocol
    state = result.outcome.state
    omega0 = state["initial_omega"]
    received = [body.values for _, body in sorted(
        (envelope.src, envelope.body) for envelope in result.views[SERVER] if envelope.kind == "fedvae.gradient"
    )]
    n, f = len(received), math.floor(0.1 * len(received))
    assert (n, f) == (12, 1)
    kept = blanchard_keeps(received, f, n - f if keep is None else keep)
    assert result.rounds[0]["kept"] == len(kept) == (11 if keep is None else 1)

    def step(chosen: list[int]) -> np.ndarray:
        mean = np.mean([received[position].astype(np.float64) for position in chosen], axis=0).astype(np.float32)
        return adam_step(omega0, mean, adam_init(omega0), config.adam())[0]

    assert np.allclose(state["omega"], step(kept), rtol=0, atol=1e-8)
    others = [list(range(n)), blanchard_keeps(received, f, 1) if keep is None else blanchard_keeps(received, f, n - f)]
    for chosen in others:
        assert not np.allclose(state["omega"], step(chosen), rtol=0, atol=1e-6), chosen


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_monitor_names_the_round_and_each_honest_gradient_the_server_rejected() -> None:
    """A learning rate of 1e20 throws ω so far in round 1 that every honest gradient of round 2 overflows
    to NaN: the server rejects them all, and the invariant reports each rejection as `InvalidGradient`
    words it, in party order."""
    result = fedrecsim.run(scenario(rounds=2, eta=1e20))
    assert [row["rejected"] for row in result.rounds] == [0, 12]
    rejections = sorted(result.result["ledger"]["faults"]["rejections"], key=lambda row: int(row["src"].split(":")[1]))
    faults = [
        f"server:0 rejected the gradient {row['src']} sent in round 2: "
        + row["problem"].removeprefix(f"server:0 expected a valid fedvae.gradient from {row['src']}: ")
        for row in rejections
    ]
    (monitor,) = result.result["invariants"]
    assert monitor == {"name": "honest_gradients_accepted", "checked": 2, "violations": 1, "detail": "round 2: " + "; ".join(faults)}


def test_a_model_whose_scores_are_not_finite_is_not_ranked_and_the_run_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a diverged omega's scores overflow to inf depends on the BLAS kernel: the run never fails on
    it, it measures no ranking where the scores are not finite and warns with the rounds."""
    from fedrecsim.protocols.fedvae import evaluation

    finite = fedrecsim.run(scenario(rounds=4, eval_every=2))
    real_scores = evaluation.scores

    def overflowing(omega: np.ndarray, *args: Any) -> np.ndarray:
        block = real_scores(omega, *args)
        block[0, 0] = np.inf
        return block

    monkeypatch.setattr(evaluation, "scores", overflowing)
    diverged = fedrecsim.run(scenario(rounds=4, eval_every=2))
    assert [sorted(name for name in row if name.startswith("ndcg@")) for row in finite.rounds] == [
        [], ["ndcg@100", "ndcg@20"], [], ["ndcg@100", "ndcg@20"]
    ]
    assert all(not any(name.startswith(("ndcg@", "recall@")) for name in row) for row in diverged.rounds)
    assert diverged.transcript_xxh3_128 == finite.transcript_xxh3_128  # evaluation sends nothing
    assert any(warning.startswith("the model's scores were not finite when it was to be evaluated in round(s) 2, 4: ")
               for warning in diverged.result["warnings"])
    assert not any("not finite" in warning for warning in finite.result["warnings"])


def test_the_final_metrics_are_the_last_rounds_row_and_progress_is_reported_after_each_round() -> None:
    calls: list[tuple[int, int]] = []
    result = fedrecsim.run(scenario(rounds=3), progress=lambda completed, total: calls.append((completed, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)] and result.result["rounds_completed"] == 3
    last = dict(result.rounds[-1])
    final = result.result["metrics"]["final"]
    random = {name for name in final if name.endswith("_random")}
    assert random == {f"{name}@{k}_random" for name in ("ndcg", "recall") for k in (20, 100)}
    assert last.pop("round") == 3 and {name: value for name, value in final.items() if name not in random} == last


def test_the_state_counts_the_populations_joins_leaves_and_crashes() -> None:
    """Every user starts online (round 0's joins); later joins and every leave are announced to the server."""
    table = scenario(rounds=4)
    table["availability"] = {"model": "bernoulli", "p_join": 0.3, "p_leave": 0.2}
    result = fedrecsim.run(table)
    ledger = result.result["ledger"]
    initial = ledger["per_round"][0]["msgs"]
    assert initial == 40
    expected = {"joins": ledger["kinds"]["core.join"]["msgs"] - initial, "leaves": ledger["kinds"]["core.leave"]["msgs"], "crashes": 0}
    assert result.outcome.state["population"] == expected and expected["joins"] > 0 and expected["leaves"] > 0


def test_the_baseline_is_named_beside_each_metric_only_when_asked_for() -> None:
    with_baseline = fedrecsim.run(scenario(rounds=4, baseline=True))
    names = with_baseline.outcome.state["baseline"][-1]
    assert with_baseline.result["metrics"]["baselines"] == {name: f"{name}_multvae" for name in names}
    assert sorted(names) == ["ndcg@100", "ndcg@20", "recall@100", "recall@20"]
    without = fedrecsim.run(scenario(rounds=4))
    assert without.result["metrics"]["baselines"] == {} and "baseline" not in without.outcome.state
    assert not any(name.endswith("_multvae") for row in without.rounds for name in row)


def test_the_privacy_section_claims_no_guarantee_says_what_the_server_sees_and_counts_the_attackers() -> None:
    result = fedrecsim.run(scenario(rounds=1, byzantine_fraction=0.1))
    assert result.result["privacy"] == {
        "guarantee": "none",
        "note": "input dropout perturbs the gradients (Polato Sec. IV-C) but no differential-privacy bound is claimed; "
        "the server sees each sampled user's gradient, whose non-zero W1 rows are the user's kept items",
        "attackers": 4,
    }
