"""What a prototypes run reports, checked against values recomputed here from the definitions: the
``rounds`` rows, ``final`` metrics (the federated model and every baseline), warnings when a silo's
messages are lost, the privacy table, the Table 1 paper figure, ``state`` and the invariant."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

import fedrecsim
from fedrecsim.data import prepare_data
from fedrecsim.data.silos import silo_assignment
from fedrecsim.models.kmeans import kmeans
from fedrecsim.models.nmf import NMFHyper, nmf_observed
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.prototypes.pipeline import item_factors, silo_data, user_factors
from fedrecsim.protocols.prototypes.protocol import QUALITY_WARNINGS
from fedrecsim.scenario import parse_scenario
from fedrecsim.seeding import Stream, generator

USERS, ITEMS, K, RANK, SILOS, LAM, ITERATIONS = 60, 40, 3, 2, 3, 0.3, 30


def _tables(seed: int = 3, links: dict | None = None, **protocol: object) -> dict:
    network: dict[str, Any] = {"latency": {"model": "constant", "seconds": 0.05}}
    if links:
        network["links"] = links
    return {
        "run": {"protocol": "prototypes", "seed": seed, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "counts", "users": USERS, "items": ITEMS, "ratings": 1200,
                 "rank": 3, "split": "users", "test_fraction": 0.2, "test_entries": 5, "silos": SILOS},
        "network": network,
        "protocol": {"k": K, "rank": RANK, "lam": LAM, "support": 5, "nmf_iterations": ITERATIONS,
                     "baselines": False, **protocol},
    }


def _about_messages(warnings: list[str]) -> list[str]:
    """The warnings about lost or rejected messages: without those on the prototypes' quality (noise-dominated,
    empty clusters, small silos; `test_prototypes_warnings`), which these runs at epsilon = 1 also give."""
    return [warning for warning in warnings if not any(fragment in warning for fragment in QUALITY_WARNINGS)]


def _run(tables: dict) -> tuple[Any, list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []
    result = fedrecsim.run(parse_scenario(tables), progress=lambda done, total: calls.append((done, total)))
    return result, calls


def _runs() -> dict[str, Any]:
    """The runs the tests read, built inside each test: mutmut maps a test to the functions its call reaches."""
    return {
        "base": _run(_tables(baselines=True)),
        # Seed 12: half the silo->server messages lost drops silo:0 and silo:2's prototypes.
        "up_lost": _run(_tables(seed=12, links={"silo->server": {"loss": 0.5}})),
        # Seed 1: half the server->silo messages lost leaves two silos without V.
        "down_lost": _run(_tables(seed=1, links={"server->silo": {"loss": 0.5}})),
        "all_lost": _run(_tables(links={"silo->server": {"loss": 0.99}})),
    }


def _silos(seed: int = 3) -> tuple[Any, Any, list]:
    scenario = parse_scenario(_tables(seed=seed))
    train, test = prepare_data(scenario.data, seed)
    return train, test, silo_data(train, silo_assignment(scenario.data, train, seed))


def _rmse(U: np.ndarray, V_of_user: Any, test: Any) -> float:
    predictions = np.array([U[u] @ V_of_user(u)[i] for u, i in zip(test.users, test.items)])
    return float(np.sqrt(np.mean((predictions - test.values) ** 2)))


def test_rounds_rows_progress_and_online_counts() -> None:
    runs = _runs()
    result, calls = runs["base"]
    assert result.result["metrics"]["rounds"] == [
        {"round": 1, "prototypes_received": SILOS, "silos_missing": 0, "silos_rejected": 0},
        {"round": 2, "silos_fitted": SILOS, "silos_without_model": 0},
    ]
    assert result.outcome.rounds == result.result["metrics"]["rounds"]
    assert calls == [(1, 2), (2, 2)]
    assert [row["online"] for row in result.result["ledger"]["per_round"]] == [SILOS + 1, SILOS + 1]
    assert _about_messages(result.result["warnings"]) == []
    assert result.result["metrics"]["final"]["silos"] == float(SILOS)


def test_lost_prototypes_are_reported_by_silo() -> None:
    runs = _runs()
    result, calls = runs["up_lost"]
    assert result.result["metrics"]["rounds"] == [
        {"round": 1, "prototypes_received": 1, "silos_missing": 2, "silos_rejected": 0},
        {"round": 2, "silos_fitted": SILOS, "silos_without_model": 0},
    ]
    assert _about_messages(result.result["warnings"]) == ["2 silos sent no prototypes in time: silo:0, silo:2"]
    assert set(result.outcome.state["prototypes"]) == {Party(Role.SILO, 1)}
    assert calls == [(1, 2), (2, 2)]
    assert [row["online"] for row in result.result["ledger"]["per_round"]] == [SILOS + 1, SILOS + 1]
    # The server waited the whole round timeout for the lost prototypes.
    timeout = result.result["scenario"]["run"]["round_timeout_s"]
    assert result.result["virtual_time_s"] >= timeout


def test_a_silo_without_item_matrix_is_warned_about_and_left_unscored() -> None:
    runs = _runs()
    result, _ = runs["down_lost"]
    assert result.result["metrics"]["rounds"] == [
        {"round": 1, "prototypes_received": SILOS, "silos_missing": 0, "silos_rejected": 0},
        {"round": 2, "silos_fitted": 1, "silos_without_model": 2},
    ]
    assert _about_messages(result.result["warnings"]) == ["2 silos received no item matrix; their users are unscored"]
    final = result.result["metrics"]["final"]
    assert final["silos"] == float(SILOS) and "test_rmse" in final
    timeout = result.result["scenario"]["run"]["round_timeout_s"]
    assert result.result["virtual_time_s"] >= timeout


def test_nothing_arrives_gives_both_warnings_and_no_model_metrics() -> None:
    runs = _runs()
    result, _ = runs["all_lost"]
    assert _about_messages(result.result["warnings"]) == [
        f"{SILOS} silos sent no prototypes in time: silo:0, silo:1, silo:2",
        f"{SILOS} silos received no item matrix; their users are unscored",
    ]
    final = result.result["metrics"]["final"]
    trivial = ("test_rmse_mean_predictor", "mean_rank_chance", "map@10_chance")
    diagnostics = ("prototype_snr", "empty_clusters")
    assert {name: value for name, value in final.items() if not name.startswith("users_per_silo_")} == {
        "silos": float(SILOS), **{name: final[name] for name in (*trivial, *diagnostics)}
    }
    assert result.outcome.state["item_factors"] is None
    assert not result.outcome.state["user_factors"].any()


def test_the_paper_figure_states_k_n_plus_l_n_and_measures_mean_bytes_per_silo() -> None:
    runs = _runs()
    result, _ = runs["base"]
    parties = result.result["ledger"]["parties"]
    per_silo = [parties[f"silo:{h}"]["sent_bytes"] + parties[f"silo:{h}"]["recv_bytes"] for h in range(SILOS)]
    assert result.result["paper_figures"] == [{
        "quantity": "values a silo sends and receives (k n up + l n down)",
        "paper": f"knH + ln over H silos (Table 1): {K * ITEMS + RANK * ITEMS} float64 per silo here",
        "measured": sum(per_silo) / SILOS,
        "unit": "B",
        "setting": "measured: bytes per silo over the whole run, including message framing",
        "population": "every silo (mean over silos)",
        "population_size": SILOS,
        "population_samples": SILOS,
        "measured_max": max(per_silo),
        "heaviest": None,
        "heaviest_label": "",
    }]


def test_the_privacy_table_names_the_mechanism_and_projection_dims_per_silo() -> None:
    runs = _runs()
    result, _ = runs["base"]
    privacy = result.result["privacy"]
    assert privacy["mechanism"] == (
        "private prototypes (Ribero et al. Alg. 2-3 over Balcan et al. private k-means), per silo"
    )
    assert privacy["neighbouring"] == "one user's record replaced within a silo (silo sizes public)"
    assert privacy["composition"] == f"basic within a silo; parallel across the {SILOS} silos (disjoint users)"
    sizes = {str(party): users.size for party, users in result.outcome.state["silo_users"].items()}
    assert privacy["constants"]["projection_dim"] == {
        name: min(16, max(1, math.floor(0.5 * math.log(m)))) for name, m in sizes.items()
    }
    assert sorted(sizes) == [f"silo:{h}" for h in range(SILOS)]


def test_a_one_user_silo_gets_projection_dim_one() -> None:
    from fedrecsim.protocols.prototypes.pipeline import projection_dim

    assert projection_dim(0, 1) == 1 and projection_dim(0, 0) == 1 and projection_dim(0, 2) == 1
    assert projection_dim(0, math.ceil(math.e ** 4)) == 2


def test_state_invariant_and_the_server_item_matrix() -> None:
    runs = _runs()
    result, _ = runs["base"]
    state = result.outcome.state
    assert set(state) == {"item_factors", "user_factors", "prototypes", "silo_users", "cluster_sizes"}
    assert result.result["invariants"] == [{
        "name": "prototype_support", "checked": SILOS, "violations": 0,
        "detail": "every prototype the server received reveals at most s entries",
    }]
    # V is the NMF of the stacked prototypes, drawn from the server's own stream (ACTOR, SERVER, 0).
    prototypes = [state["prototypes"][Party(Role.SILO, h)] for h in range(SILOS)]
    V = item_factors(generator(3, Stream.ACTOR, Role.SERVER.code, 0), prototypes, NMFHyper(RANK, LAM, ITERATIONS))
    np.testing.assert_allclose(state["item_factors"], V)
    # Each silo's users are fitted to V locally.
    _, _, silos = _silos()
    for silo in silos:
        np.testing.assert_allclose(state["user_factors"][silo.users], user_factors(silo.rows, V, LAM))


def test_the_silos_prototypes_come_from_their_own_streams() -> None:
    runs = _runs()
    from fedrecsim.protocols.prototypes.pipeline import silo_prototypes
    from fedrecsim.protocols.prototypes.protocol import PrototypesConfig, silo_params

    result, _ = runs["base"]
    config = PrototypesConfig(k=K, rank=RANK, lam=LAM, support=5, nmf_iterations=ITERATIONS, baselines=False)
    train, _, silos = _silos()
    bound = float(train.rating_range[1])
    for silo in silos:
        rng = generator(3, Stream.ACTOR, Role.SILO.code, silo.label)
        expected = silo_prototypes(rng, silo.rows, silo_params(config, silo.users.size, bound), config.budget())
        np.testing.assert_allclose(
            result.outcome.state["prototypes"][Party(Role.SILO, silo.label)], expected.prototypes
        )


def test_the_full_and_local_baselines_match_nmf_on_their_streams() -> None:
    runs = _runs()
    result, _ = runs["base"]
    final = result.result["metrics"]["final"]
    _, test, silos = _silos()
    hyper = NMFHyper(RANK, LAM, ITERATIONS)
    matrix = sp.vstack([silo.rows for silo in silos]).tocsr()
    users = np.concatenate([silo.users for silo in silos])
    U_rows, V = nmf_observed(generator(3, Stream.PROTOCOL, 1), matrix, hyper)
    U = np.zeros((USERS, RANK))
    U[users] = U_rows
    assert final["test_rmse_full"] == pytest.approx(_rmse(U, lambda u: V, test), rel=1e-9)
    U = np.zeros((USERS, RANK))
    V_of: dict[int, np.ndarray] = {}
    for silo in silos:
        U_h, V_h = nmf_observed(generator(3, Stream.PROTOCOL, 2, silo.label), silo.rows, hyper)
        U[silo.users] = U_h
        for user in silo.users:
            V_of[int(user)] = V_h
    assert final["test_rmse_local"] == pytest.approx(_rmse(U, lambda u: V_of[int(u)], test), rel=1e-9)


def test_the_kmeans_and_exemplar_baselines_match_their_definitions() -> None:
    runs = _runs()
    result, _ = runs["base"]
    final = result.result["metrics"]["final"]
    _, test, silos = _silos()
    hyper = NMFHyper(RANK, LAM, ITERATIONS)
    for name, stream in (("kmeans", 3), ("exemplars", 4)):
        rng = generator(3, Stream.PROTOCOL, stream)
        prototypes = []
        for silo in silos:
            if name == "kmeans":
                prototypes.append(kmeans(rng, silo.rows, K))
            else:
                picked = rng.choice(silo.users.size, size=min(K, silo.users.size), replace=False)
                assert np.unique(picked).size == min(K, silo.users.size)
                prototypes.append(silo.rows[np.sort(picked)].toarray())
        V = item_factors(rng, prototypes, hyper)
        U = np.zeros((USERS, RANK))
        for silo in silos:
            U[silo.users] = user_factors(silo.rows, V, LAM)
        assert final[f"test_rmse_{name}"] == pytest.approx(_rmse(U, lambda u: V, test), rel=1e-9)


def test_the_random_baseline_predicts_uniformly_on_the_data_scale() -> None:
    runs = _runs()
    result, _ = runs["base"]
    final = result.result["metrics"]["final"]
    train, test, _ = _silos()
    low, high = train.rating_range
    assert high > 1
    predictions = generator(3, Stream.EVALUATION).uniform(low, high, size=len(test))
    expected = float(np.sqrt(np.mean((predictions - test.values) ** 2)))
    assert final["test_rmse_random"] == pytest.approx(expected, rel=1e-9)


def test_the_federated_model_metrics_match_v_and_the_fitted_users() -> None:
    runs = _runs()
    result, _ = runs["base"]
    state, final = result.outcome.state, result.result["metrics"]["final"]
    _, test, _ = _silos()
    V = state["item_factors"]
    assert final["test_rmse"] == pytest.approx(_rmse(state["user_factors"], lambda u: V, test), rel=1e-9)


def test_rounds_other_than_two_name_the_key_and_the_count() -> None:
    from fedrecsim.errors import ConfigError

    tables = _tables()
    tables["run"]["rounds"] = 3
    with pytest.raises(ConfigError) as caught:
        fedrecsim.run(parse_scenario(tables))
    assert caught.value.args and "run.rounds" in str(caught.value)
    assert "exactly two communication rounds (Algorithm 1); got 3" in str(caught.value)
    assert caught.value.key_path == "run.rounds"


def test_a_prototype_revealing_more_than_s_entries_is_an_invariant_violation_naming_the_silo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from fedrecsim.protocols.prototypes import roles

    honest = roles.silo_prototypes

    def dense(*args: Any) -> Any:
        result = honest(*args)
        return dataclasses.replace(result, prototypes=np.ones_like(result.prototypes))

    monkeypatch.setattr(roles, "silo_prototypes", dense)
    result = fedrecsim.run(parse_scenario(_tables()))
    report = result.result["invariants"][0]
    assert (report["name"], report["checked"], report["violations"]) == ("prototype_support", SILOS, SILOS)
    assert report["detail"].startswith(f"silo:0: a prototype reveals {ITEMS} > s = 5 entries")


def test_byzantine_prototypes_are_rejected_left_out_of_v_and_reported() -> None:
    tables = _tables()
    tables["faults"] = {"byzantine": [
        {"party": "silo:0", "corrupt": "shape", "kind": "prototypes.prototypes"},
        {"party": "silo:2", "corrupt": "huge", "kind": "prototypes.prototypes"},
    ]}
    result = fedrecsim.run(parse_scenario(tables))
    assert result.result["metrics"]["rounds"][0] == {
        "round": 1, "prototypes_received": 1, "silos_missing": 0, "silos_rejected": 2,
    }
    assert _about_messages(result.result["warnings"]) == [
        "2 silos sent prototypes the server rejected (ledger.faults): silo:0, silo:2",
    ]
    assert set(result.outcome.state["prototypes"]) == {Party(Role.SILO, 1)}
    # The server's bound (`prototype_bound`): all USERS users in one cluster at the value bound, plus 50
    # Laplace scales s * bound / eps_values, eps_values = 0.45 of half the recovery's 1 - 0.125 - 0.125.
    train, _, _ = _silos()
    bound = float(train.rating_range[1])
    largest = USERS * bound + 50 * 5 * bound / (0.45 * 0.75 / 2)
    rejections = result.result["ledger"]["faults"]["rejections"]
    assert [(row["src"], row["reason"], row["problem"]) for row in rejections] == [
        ("silo:0", "invalid", "server:0 expected a valid prototypes.prototypes from silo:0: "
                              f"prototypes of shape ({K}, {ITEMS}), received ({K - 1}, {ITEMS})"),
        ("silo:2", "invalid", "server:0 expected a valid prototypes.prototypes from silo:2: "
                              f"entries finite and at most {largest:g} in magnitude, received 1e+300"),
    ]
