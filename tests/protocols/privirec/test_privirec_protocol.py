"""PriviRec / PriviRec-k (fedrecsim.protocols.privirec): decentralized GF-CF equals centralized GF-CF, real and
ideal secure aggregation count the same bytes, the plan is the ledger, and what dropout does."""

from __future__ import annotations

import numpy as np
import pytest

import fedrecsim
from fedrecsim.data.prepare import prepare_data
from fedrecsim.errors import ConfigError
from fedrecsim.models.gfcf import GFCFHyper, fit_gfcf, interaction_matrix
from fedrecsim.network.party import SERVER, Role
from fedrecsim.protocols import protocol_spec
from fedrecsim.protocols.privirec.protocol import start_rng
from fedrecsim.protocols.privirec.traffic import plan
from fedrecsim.protocols.runtime import PlanContext
from fedrecsim.scenario import parse_scenario
from privirec_harness import table as _table


def _central_scores(table: dict, low_rank: bool, scorer: str) -> np.ndarray:
    scenario = parse_scenario(table)
    train, _ = prepare_data(scenario.data, scenario.run.seed)
    config = scenario.protocol
    hyper = GFCFHyper(k=config.k, gamma=config.gamma, iterations=scenario.run.rounds, oversample=config.oversample, low_rank=low_rank,
                      ideal_k=config.ideal_k)
    filters = fit_gfcf(interaction_matrix(train), hyper, start_rng(scenario.run.seed))
    R = interaction_matrix(train)
    return filters.gfcf_scores(R, config.gamma) if scorer == "gfcf" else filters.turbo_scores(R, config.turbo_filter)


@pytest.mark.parametrize("variant", ["privirec", "privirec_k"])
@pytest.mark.parametrize("scorer", ["gfcf", "turbo_cf"])
def test_decentralized_scores_equal_centralized_scores(variant: str, scorer: str) -> None:
    table = _table(variant=variant, scorer=scorer, oversample=2, ideal_k=8)
    result = fedrecsim.run(table)
    users = result.outcome.state["users"]
    central = _central_scores(table, variant == "privirec_k", scorer)
    scenario = parse_scenario(table)
    R = interaction_matrix(prepare_data(scenario.data, scenario.run.seed)[0])
    for party, user in users.items():  # every user scores its own row with the filters it decoded
        assert user.filters is not None
        row = R[party.index]
        ours = user.filters.gfcf_scores(row) if scorer == "gfcf" else user.filters.turbo_scores(row, 2)
        np.testing.assert_allclose(ours[0], central[party.index], rtol=0, atol=1e-6)
    final = result.metrics
    assert final["ndcg@20"] == final["ndcg@20_twin"] and final["recall@20"] == final["recall@20_twin"]
    assert final["max_score_gap"] <= 1e-6
    monitor = result.result["invariants"][0]
    assert monitor["name"] == "matches_centralized" and monitor["checked"] == 1 and monitor["violations"] == 0
    assert result.result["privacy"]["secure_aggregation"]["mode"] == "real"
    assert result.result["rounds_completed"] == 2


def test_ideal_mode_gives_the_same_scores_and_the_same_bytes_per_party() -> None:
    real = fedrecsim.run(_table(secagg="real"))
    ideal = fedrecsim.run(_table(secagg="ideal"))
    assert ideal.result["privacy"]["secure_aggregation"]["mode"] == "ideal"
    assert real.result["ledger"]["roles"] == ideal.result["ledger"]["roles"]
    for party in real.ledger.parties():
        assert real.ledger.party(party) == ideal.ledger.party(party), party
    for name in ("ndcg@20", "recall@20", "user_sent_bytes", "server_recv_bytes"):
        assert real.metrics[name] == ideal.metrics[name]


def test_auto_mode_switches_to_ideal_above_the_configured_item_count() -> None:
    assert fedrecsim.run(_table(secagg="auto", real_max_items=60)).result["privacy"]["secure_aggregation"]["mode"] == "real"
    result = fedrecsim.run(_table(secagg="auto", real_max_items=59))
    assert result.result["privacy"]["secure_aggregation"]["mode"] == "ideal"
    assert "real_max_items = 59" in result.result["privacy"]["secure_aggregation"]["note"]


def test_privirec_k_sends_no_item_item_matrix_and_costs_less() -> None:
    exact = fedrecsim.run(_table(variant="privirec"))
    low = fedrecsim.run(_table(variant="privirec_k"))
    exact_kinds, low_kinds = exact.result["ledger"]["kinds"], low.result["ledger"]["kinds"]
    assert "privirec.item_item" in exact_kinds and "privirec.item_item" not in low_kinds
    assert low.metrics["user_sent_bytes"] < exact.metrics["user_sent_bytes"]
    # Four secure sums for PriviRec (degrees, P', two iterations), three for PriviRec-k.
    assert exact.result["privacy"]["secure_aggregation"]["sessions"] == 4
    assert low.result["privacy"]["secure_aggregation"]["sessions"] == 3


def test_the_server_receives_only_secure_aggregation_messages_and_joins() -> None:
    result = fedrecsim.run(_table(), record_views=[SERVER])
    kinds = {envelope.body.KIND for envelope in result.views[SERVER]}
    assert kinds <= {"core.join", "secagg.advertise", "secagg.shares", "secagg.masked", "secagg.reveal"}


def test_the_same_seed_gives_the_same_transcript() -> None:
    assert fedrecsim.run(_table()).transcript_xxh3_128 == fedrecsim.run(_table()).transcript_xxh3_128


@pytest.mark.parametrize("variant", ["privirec", "privirec_k"])
def test_with_everyone_online_the_plan_is_the_ledger(variant: str) -> None:
    table = _table(variant=variant)
    scenario = parse_scenario(table)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    users = float(train.n_users)
    traffic = plan(PlanContext(scenario, train, test, users, users, 0.0, 0.0))
    assert traffic.parties == {Role.USER: 40, Role.SERVER: 1}
    ledger = fedrecsim.run(scenario).result["ledger"]
    # The set-up, each of the two rounds and the closing phase (the filters' broadcast), each the plan's.
    planned = [traffic.setup, traffic.per_round, traffic.per_round, traffic.closing]
    assert [(row["round"], row.get("phase")) for row in ledger["per_round"]] == [(0, None), (1, None), (2, None), (3, "closing")]
    for flows, row in zip(planned, ledger["per_round"], strict=True):
        assert (sum(f.messages for f in flows), sum(f.bytes for f in flows)) == pytest.approx((row["msgs"], row["bytes"])), row


@pytest.mark.parametrize(
    ("protocol", "key"),
    [({"k": 61}, "protocol.k"), ({"k": 58, "oversample": 3}, "protocol.k"),
     ({"variant": "privirec_k", "scorer": "turbo_cf", "turbo_power": 0.5}, "protocol.turbo_power"),
     ({"bits": 32, "frac_bits": 31}, "protocol.frac_bits"), ({"alpha": 0.0}, "protocol.alpha")],
)
def test_configuration_errors_name_the_key(protocol: dict, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        fedrecsim.run(_table(**protocol))
    assert raised.value.key_path == key


def test_the_protocol_is_registered() -> None:
    assert protocol_spec("privirec").name == "privirec"
    assert protocol_spec("privirec").plan is plan
