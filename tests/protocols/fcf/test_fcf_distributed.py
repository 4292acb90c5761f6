"""FCF's TCP entries (`DISTRIBUTED`), run in one process on the simulated network: the model, metrics and
bytes of `run` -- the orchestration split by role changes nothing the parties do."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import trio

from fedrecsim.data import prepare_data
from fedrecsim.errors import PartyTimeout
from fedrecsim.network.availability import AlwaysOnline, NoComputeDelay
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.network import Network
from fedrecsim.network.party import Role
from fedrecsim.network.tcp import Group, Placement
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


def _context(tables: dict, progress: Callable[[int], None] = lambda completed: None) -> RunContext:  # type: ignore[type-arg]
    """The `RunContext` a process of a TCP run builds, on a simulated network."""
    scenario = parse_scenario(tables)
    train, test = prepare_data(scenario.data, scenario.run.seed)
    network = Network(scenario.network.link_policy(scenario.run.seed), Ledger())
    return RunContext(scenario, train, test, network, AlwaysOnline(), None, NoComputeDelay(), progress)


async def _run_here(tables: dict) -> tuple:  # type: ignore[type-arg]
    """The outcome of every entry run in this one process, its ledger, and the progress it reported."""
    progress: list[int] = []
    ctx = _context(tables, progress.append)
    async with ctx.network.open():
        outcome = await DISTRIBUTED.run_here(ctx)
    return outcome, ctx.network.ledger, progress


@pytest.mark.parametrize("tables", [EXPLICIT, IMPLICIT], ids=["explicit", "implicit"])
async def test_the_entries_end_with_the_model_metrics_and_bytes_of_run(autojump_clock, tables: dict) -> None:  # type: ignore[type-arg]
    simulated = await run_async(tables)
    outcome, ledger, progress = await _run_here(tables)
    assert progress == list(range(1, simulated.result["rounds_completed"] + 1))
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
    assert ledger.summary()["per_round"] == simulated.result["ledger"]["per_round"]  # with who was online, round by round


async def test_the_users_split_between_processes_are_assembled_in_user_order(autojump_clock) -> None:
    """A server process and two users' processes, their parts handed to the outcome last block first."""
    simulated = await run_async(EXPLICIT)
    ctx = _context(EXPLICIT)
    placement = Placement.parse("server,users,users", DISTRIBUTED.roles, ctx.train.n_users)
    set_up, server_done = trio.Event(), trio.Event()
    waiting = len(placement.groups)
    parts: dict[int, dict[Role, dict]] = {}  # type: ignore[type-arg]

    async def every_process_set_up() -> None:
        nonlocal waiting
        waiting -= 1
        if not waiting:
            set_up.set()
        await set_up.wait()

    async def process(position: int, group: Group) -> None:
        async def finished() -> None:
            if Role.SERVER in group.roles:
                server_done.set()
            await server_done.wait()

        parts[position] = await DISTRIBUTED.run_group(ctx, group, ready=every_process_set_up, finished=finished)

    async with ctx.network.open(), trio.open_nursery() as nursery:
        for position, group in enumerate(placement.groups):
            nursery.start_soon(process, position, group)
    server, first, second = (parts[position] for position in range(3))
    assert (first[Role.USER]["users"], second[Role.USER]["users"]) == (range(0, 7), range(7, 15))
    outcome = DISTRIBUTED.outcome(ctx, {Role.SERVER: [server[Role.SERVER]], Role.USER: [second[Role.USER], first[Role.USER]]})
    for name, value in simulated.outcome.state.items():
        if name != "population":
            assert np.array_equal(outcome.state[name], value), name
    assert outcome.final == simulated.metrics


async def test_a_users_process_hosting_no_users_returns_no_profiles(autojump_clock) -> None:
    """Its part has rows of width d for none of the users, so it adds nothing where the parts are assembled."""
    ctx = _context(EXPLICIT)
    go, stop = trio.Event(), trio.Event()
    go.set()
    stop.set()
    async with ctx.network.open():
        part = await DISTRIBUTED.entries[Role.USER](ctx, Group("users", frozenset({Role.USER}), range(0)), Cue(go, stop))
    assert part["users"] == range(0)
    for name in ("user_factors", "initial_user_factors"):
        assert part[name].shape == (0, 3), name


async def test_the_server_waits_for_every_users_join_then_gives_up(autojump_clock) -> None:
    """Alone -- no users' process -- the server's entry waits one round timeout for the joins."""
    ctx = _context({**EXPLICIT, "run": {**EXPLICIT["run"], "round_timeout_s": 7.0}})
    go, stop = trio.Event(), trio.Event()
    go.set()
    start = trio.current_time()
    async with ctx.network.open():
        with pytest.raises(PartyTimeout, match=r"server:0 waited for every user's join until t=\S+s; it did not come"):
            await DISTRIBUTED.entries[Role.SERVER](ctx, Group("server", frozenset({Role.SERVER})), Cue(go, stop))
    assert trio.current_time() - start == pytest.approx(7.0)
