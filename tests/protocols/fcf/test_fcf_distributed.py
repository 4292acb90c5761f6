"""FCF's TCP entries (`DISTRIBUTED`), run in one process on the simulated network: the model, metrics and
bytes of `run` -- the orchestration split by role changes nothing the parties do."""

from __future__ import annotations

import numpy as np
import pytest
import trio

from fedrecsim.data import prepare_data
from fedrecsim.errors import PartyTimeout
from fedrecsim.network.availability import AlwaysOnline, NoComputeDelay
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.network import Network
from fedrecsim.network.party import Role
from fedrecsim.network.tcp import Group
from fedrecsim.protocols.fcf.protocol import DISTRIBUTED
from fedrecsim.protocols.runtime import Cue, RunContext
from fedrecsim.runner import run_async
from fedrecsim.scenario import parse_scenario

EXPLICIT = {
    "run": {"protocol": "fcf", "seed": 4, "rounds": 3, "round_gap_s": 0.5, "round_timeout_s": 30.0},
    "data": {"users": 15, "items": 25, "ratings": 200},
    "protocol": {"d": 3, "eval_every": 2},
}
IMPLICIT = {
    "run": {"protocol": "fcf", "seed": 5, "rounds": 2, "round_gap_s": 0.5, "round_timeout_s": 30.0},
    "data": {"feedback": "implicit", "split": "leave_one_out", "users": 12, "items": 300, "ratings": 600},
    "protocol": {"feedback": "implicit", "d": 3, "max_users": 8},
}


async def _run_here(tables: dict) -> tuple:  # type: ignore[type-arg]
    scenario = parse_scenario(tables)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    network = Network(scenario.network.link_policy(scenario.run.seed), Ledger())
    ctx = RunContext(scenario, train, test, network, AlwaysOnline(), None, NoComputeDelay())
    async with network.open():
        outcome = await DISTRIBUTED.run_here(ctx)
    return outcome, network.ledger


@pytest.mark.parametrize("tables", [EXPLICIT, IMPLICIT], ids=["explicit", "implicit"])
async def test_the_entries_end_with_the_model_metrics_and_bytes_of_run(autojump_clock, tables: dict) -> None:  # type: ignore[type-arg]
    simulated = await run_async(tables)
    outcome, ledger = await _run_here(tables)
    for name, value in simulated.outcome.state.items():
        if name != "population":
            assert np.array_equal(outcome.state[name], value), name
    assert outcome.final == simulated.metrics
    assert outcome.rounds_completed == simulated.result["rounds_completed"]
    # Every round's counts; the metrics after the last round only (the profiles live with the users).
    assert [{key: row[key] for key in ("round", "participants", "missing", "rejected")} for row in outcome.rounds] == [
        {key: row[key] for key in ("round", "participants", "missing", "rejected")} for row in simulated.rounds
    ]
    assert outcome.rounds[-1] == simulated.rounds[-1]
    assert [set(row) for row in outcome.rounds[:-1]] == [{"round", "participants", "missing", "rejected"}] * (len(outcome.rounds) - 1)
    assert ledger.summary()["parties"] == simulated.result["ledger"]["parties"]
    assert ledger.summary()["kinds"] == simulated.result["ledger"]["kinds"]


async def test_the_server_waits_for_every_users_join_then_gives_up(autojump_clock) -> None:
    """Alone -- no users' process -- the server's entry waits one round timeout for the joins."""
    tables = {**EXPLICIT, "run": {**EXPLICIT["run"], "round_timeout_s": 7.0}}
    scenario = parse_scenario(tables)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    network = Network(scenario.network.link_policy(scenario.run.seed), Ledger())
    ctx = RunContext(scenario, train, test, network, AlwaysOnline(), None, NoComputeDelay())
    go, stop = trio.Event(), trio.Event()
    go.set()
    start = trio.current_time()
    async with network.open():
        with pytest.raises(PartyTimeout, match=r"server:0 waited for every user's join until t=\S+s; it did not come"):
            await DISTRIBUTED.entries[Role.SERVER](ctx, Group("server", frozenset({Role.SERVER})), Cue(go, stop))
    assert trio.current_time() - start == pytest.approx(7.0)
