"""dpmf S2's TCP entries (`DISTRIBUTED`), run in one process on the simulated network: the model, metrics
and bytes of `run`; and the configurations they refuse."""

from __future__ import annotations

import numpy as np
import pytest

from fedrecsim.data import prepare_data
from fedrecsim.errors import ConfigError
from fedrecsim.network.availability import AlwaysOnline, NoComputeDelay
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.network import Network
from fedrecsim.protocols.dpmf.protocol import DISTRIBUTED
from fedrecsim.protocols.runtime import RunContext
from fedrecsim.runner import run_async
from fedrecsim.scenario import parse_scenario


def _tables(**protocol: object) -> dict:  # type: ignore[type-arg]
    return {
        "run": {"protocol": "dpmf", "seed": 8, "rounds": 3, "round_gap_s": 0.5, "round_timeout_s": 30.0},
        "data": {"users": 16, "items": 30, "ratings": 250},
        "protocol": {"scenario": "S2", "d": 3, "epsilon": 2.0, **protocol},
    }


def _context(tables: dict) -> RunContext:  # type: ignore[type-arg]
    scenario = parse_scenario(tables)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    network = Network(scenario.network.link_policy(scenario.run.seed), Ledger())
    return RunContext(scenario, train, test, network, AlwaysOnline(), None, NoComputeDelay())


@pytest.mark.parametrize("masks", ["explicit", "seeded"])
async def test_the_entries_end_with_the_model_metrics_and_bytes_of_run(autojump_clock, masks: str) -> None:
    tables = _tables(mask_transport=masks)
    simulated = await run_async(tables)
    ctx = _context(tables)
    async with ctx.network.open():
        outcome = await DISTRIBUTED.run_here(ctx)
    state = simulated.outcome.state
    for name in ("item_factors", "user_factors", "initial_item_factors", "initial_user_factors"):
        assert np.array_equal(outcome.state[name], state[name]), name
    assert [list(row) for row in outcome.state["contributors"]] == [list(row) for row in state["contributors"]]
    assert outcome.state["rated_items_seen"].keys() == state["rated_items_seen"].keys()
    for (round_a, items_a, sums_a, div_a), (round_b, items_b, sums_b, div_b) in zip(outcome.state["recent_aggregates"], state["recent_aggregates"], strict=True):
        assert round_a == round_b and np.array_equal(items_a, items_b) and np.array_equal(sums_a, sums_b) and np.array_equal(div_a, div_b)
    # The final metrics measured the same way; the per-iteration bytes and monitors need every party's state.
    assert outcome.final == {name: value for name, value in simulated.metrics.items() if name in outcome.final}
    assert set(simulated.metrics) - set(outcome.final) == {"rho_short", "rho_scale_min", "user_down_max_b", "user_up_max_b", "tp_sent_b"}
    assert outcome.final["participants"] == 16 and outcome.final["baseline_err_mean"] == simulated.metrics["baseline_err_mean"]
    assert outcome.privacy["eta"]["items_noised"] == simulated.result["privacy"]["eta"]["items_noised"]
    assert outcome.privacy["ring"] == simulated.result["privacy"]["ring"]
    assert outcome.warnings == ["over TCP the invariant monitors did not run: they read every party's state, which lives in its own process"]
    assert outcome.distributions == simulated.outcome.distributions
    assert ctx.network.ledger.summary()["parties"] == simulated.result["ledger"]["parties"]
    assert ctx.network.ledger.summary()["kinds"] == simulated.result["ledger"]["kinds"]


@pytest.mark.parametrize(
    ("protocol", "key_path"),
    [({"scenario": "S1"}, "protocol.scenario"), ({"scenario": "S3"}, "protocol.scenario"), ({"variant": "naive"}, "protocol.variant")],
)
def test_only_the_protected_s2_runs_over_tcp(protocol: dict, key_path: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        DISTRIBUTED.check(_context(_tables(**protocol)))
    assert info.value.key_path == key_path


def test_a_ring_too_small_for_the_aggregates_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError) as info:
        DISTRIBUTED.check(_context(_tables(ring_bits=32, epsilon=0.001)))
    assert info.value.key_path == "protocol.ring_bits"
