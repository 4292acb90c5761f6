"""What a PriviRec run reports (`fedrecsim.protocols.privirec.protocol`): the privacy block of each variant,
the baselines and byte means, users that leave between rounds, aborted sums, and a run without baseline."""

from __future__ import annotations

import pytest

import fedrecsim
from privirec_harness import table as _table

MONITOR = ("with every user in every sum, each decentralized score is within 1e-06 of its centralized twin's (the same "
           "power method from the same start)")


def _means(result: fedrecsim.RunResult) -> dict[str, float]:
    parties = result.result["ledger"]["parties"]
    users = [counters for name, counters in parties.items() if name.startswith("user:")]
    return {
        "user_sent_bytes": sum(c["sent_bytes"] for c in users) / len(users),
        "user_recv_bytes": sum(c["recv_bytes"] for c in users) / len(users),
        "server_sent_bytes": parties["server:0"]["sent_bytes"],
        "server_recv_bytes": parties["server:0"]["recv_bytes"],
    }


def test_privirec_says_its_server_learns_p_tilde_and_what_dropout_exposes() -> None:
    result = fedrecsim.run(_table(variant="privirec", graph="sparse"))
    # The graph's failure bounds are checked against their formula in tests/protocols/secagg/test_secagg_parameters.py.
    graph = result.result["privacy"]["secure_aggregation"].pop("graph_failure")
    assert (graph["users"], graph["degree"], graph["threshold"], graph["sizing"]) == (40, 12, 7, "log2")
    assert result.result["privacy"] == {
        "mechanism": "PriviRec (Nicolas et al.)",
        "secure_aggregation": {"mode": "real", "protocol": "SecAgg+ (Bell et al. 2020)", "ring_bits": 64, "frac_bits": 40,
                               "threshold": 7, "degree": 12, "sessions": 4},
        "server_learns": "the item degrees V, P~ (the whole normalized item-item matrix), every Y_l = P~ X_(l-1) "
        "summed over the users in U3, and so S_k",
        "users_learn": "V, P~, every X_l and the filters",
        "dropout": "with users dropping mid-protocol PriviRec's server isolates the dropped users' inputs (P~ X - Y_l); "
        "see exposed_users and profiles_leaked",
        "adversary": "honest-but-curious server; no collusion beyond secure aggregation's threshold",
        "known_leaks": [
            "the broadcast V and P~ give every receiver P' = V^1/2 P~ V^1/2, whose rows of items of degree 1 and 2 "
            "decode whole profiles exactly (metrics: profiles_exposed_by_broadcast, checked against the users' rows)",
        ],
    }
    # k = 2 ceil(log2 40) = 12 neighbours; t = floor(0.5 * 13) + 1 = 7.
    assert result.outcome.baselines == {"recall@20": "recall@20_gfcf", "ndcg@20": "ndcg@20_gfcf"}
    final = result.metrics
    assert {name: final[name] for name in _means(result)} == pytest.approx(_means(result))
    assert (final["participants"], final["dropped"], final["exposed_users"], final["profiles_leaked"]) == (40, 0, 0, 0)
    assert result.result["invariants"] == [{"name": "matches_centralized", "checked": 1, "violations": 0, "detail": MONITOR}]
    assert result.result["warnings"] == []


def test_privirec_k_says_its_server_learns_p_tilde_once_l_times_p_reaches_m() -> None:
    result = fedrecsim.run(_table(variant="privirec_k", secagg="ideal", graph="complete", threshold=0.25, bits=32,
                                  frac_bits=20))
    graph = result.result["privacy"]["secure_aggregation"].pop("graph_failure")
    assert (graph["users"], graph["degree"], graph["threshold"]) == (40, 39, 11)
    assert result.result["privacy"] == {
        "mechanism": "PriviRec-k (Nicolas et al.)",
        "secure_aggregation": {
            "mode": "ideal", "protocol": "Bonawitz et al. 2017", "ring_bits": 32, "frac_bits": 20, "threshold": 11,
            "degree": 39, "sessions": 3,
            "note": "ideal mode (60 items > real_max_items = 400, or secagg = ideal): bytes as in real mode, the sums "
            "computed by the ideal functionality",
        },
        "server_learns": "the item degrees V, every Y_l = P~ X_(l-1) summed over the users in U3, and so S_k and diag(T_L)",
        "users_learn": "V, every X_l and the filters",
        "dropout": "PriviRec-k's server does not isolate a dropped user's input by P~ X - Y_l while L p < m (it does "
        "not know P~); with L p >= m it reconstructs P~ (server_recovers_p) and can",
        "adversary": "honest-but-curious server; no collusion beyond secure aggregation's threshold",
        "known_leaks": [
            "the server knows Y_l = P~ X_(l-1) for the L = 2 bases it sent, so it reconstructs P~ exactly whenever "
            "L p >= m (here L p = 24, m = 60) and then decodes profiles as from PriviRec's broadcast (metrics: "
            "server_recovers_p, server_p_error, profiles_exposed_to_server)",
        ],
    }
    assert (result.metrics["server_recovers_p"], result.metrics["server_basis_rank"]) == (0.0, 24)
    # 32-bit words with 20 fractional bits: the sums still decode to the centralized filters closely.
    assert result.metrics["max_score_gap"] < 1e-3


def test_users_that_leave_between_rounds_are_not_in_the_sums_and_the_monitor_is_not_checked() -> None:
    """The users online at round 2 sum over fewer users than V and P~ counted: the scores are not the
    centralized ones, and the monitor, whose premise is every user in every sum, does not apply."""
    table = _table()
    table["availability"] = {"model": "bernoulli", "p_join": 0.0, "p_leave": 0.05, "initial_online": 1.0}
    result = fedrecsim.run(table)
    assert [row["participants"] for row in result.rounds] == [40, 38]
    assert [row["dropped"] for row in result.rounds] == [0, 0]  # they left; nobody crashed mid-sum
    assert result.metrics["max_score_gap"] > 1e-3
    [monitor] = result.result["invariants"]
    assert (monitor["checked"], monitor["violations"]) == (0, 0)
    assert result.result["warnings"] == ["3 users did not receive the filters (offline at the end, or the broadcast was lost)"]


def test_an_aborted_round_ends_the_run_with_no_filters_and_a_warning() -> None:
    table = _table(threshold=0.95, graph="complete")
    table["availability"] = {"dropout": 0.05}
    table["run"]["rounds"] = 3
    result = fedrecsim.run(table)
    assert result.rounds == [] and result.result["rounds_completed"] == 0
    assert result.result["warnings"] == [
        "round 1: secure aggregation aborted at share_keys: 38 users remain, the threshold is t = 39"
    ]
    users = result.outcome.state["users"]
    assert all(user.filters is None for user in users.values()) and "filters" not in result.outcome.state
    final = result.metrics
    assert set(final) == set(_means(result)) and final == pytest.approx(_means(result))
    secure = result.result["privacy"]["secure_aggregation"]
    assert (secure["sessions"], secure["threshold"], secure["degree"]) == (2, 39, 39)  # the set-up's two sums
    assert result.result["invariants"][0]["checked"] == 0


def test_an_aborted_set_up_runs_no_round() -> None:
    # Replies take ~0.05 s; a stage that waits 0.06 s hears too few of them.
    result = fedrecsim.run(_table(stage_timeout_s=0.06))
    assert result.rounds == []
    assert result.result["warnings"] == ["set-up: secure aggregation aborted at advertise_keys: 0 users remain, the threshold is t = 7"]
    secure = result.result["privacy"]["secure_aggregation"]
    assert (secure["sessions"], secure["threshold"], secure["degree"]) == (0, None, None)
    assert all(user.phase == "degrees" for user in result.outcome.state["users"].values())


def test_without_the_baseline_there_is_no_reference_metric_gap_or_check() -> None:
    result = fedrecsim.run(_table(baseline=False))
    final = result.metrics
    assert not [name for name in final if name.endswith(("_twin", "_gfcf")) or name == "max_score_gap"]
    assert final["ndcg@20"] > 0.3 and final["recall@20"] > 0.5
    assert result.outcome.baselines == {} and not {"twin", "gfcf"} & set(result.outcome.state)
    assert result.result["invariants"][0]["checked"] == 0


def test_a_complete_run_keeps_the_filters_the_users_received_and_the_centralized_ones() -> None:
    from fedrecsim.models.gfcf import GraphFilters

    result = fedrecsim.run(_table())
    state = result.outcome.state
    assert "round" not in result.metrics and result.metrics["participants"] == 40
    assert isinstance(state["filters"], GraphFilters) and isinstance(state["twin"], GraphFilters)
    assert isinstance(state["gfcf"], GraphFilters)
    assert any(user.filters is state["filters"] for user in state["users"].values())
    assert result.result["invariants"][0]["checked"] == 1 and result.result["invariants"][0]["violations"] == 0
