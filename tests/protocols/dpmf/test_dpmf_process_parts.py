"""dpmf S2's TCP process entries (`DISTRIBUTED`) one at a time, in this process, on hand-built inputs.

The recommender's process against scripted users: it waits for every user's join, sets up every member
whose item request comes in before its deadline, starts each iteration once every set-up user asked
again, and stops with a timeout naming what it waited for. The third party's process builds its
aggregator on the party's own generator and serves rosters until the run stops; a users' process with
no users returns empty profiles; the outcome puts the users' blocks in user order and reports the
noise set-up as the recommender's part holds it. And what the entries refuse, in words.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import trio

from fedrecsim.actors.membership import Join
from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError, PartyTimeout
from fedrecsim.models.mf import predict
from fedrecsim.network.availability import AlwaysOnline, NoComputeDelay
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.tcp import Group
from fedrecsim.protocols.dpmf import protocol
from fedrecsim.protocols.dpmf.messages import Aggregate, ItemRequest, ItemVectors, NoiseSetup, Roster
from fedrecsim.protocols.dpmf.third_party import Aggregator
from fedrecsim.protocols.runtime import Cue, RunContext
from fedrecsim.scenario import parse_scenario
from fedrecsim.seeding import Stream, generator

ALICE, BOB = Party(Role.USER, 0), Party(Role.USER, 1)
RATED = {ALICE: [0, 1], BOB: [1, 2]}
SEED, D, GAP_S, TIMEOUT_S = 3, 2, 0.5, 10.0
EVERY_PARTY = Group("every party", frozenset(Role), range(2))


def _train() -> Ratings:
    """Alice rated items 0 and 1, Bob items 1 and 2."""
    return Ratings(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2]), np.array([4.0, 2.0, 5.0, 1.0]), 2, 3, (1.0, 5.0))


def _context(network: Network | None = None, rounds: int = 2, **protocol_keys: Any) -> RunContext:
    scenario = parse_scenario({
        "run": {"protocol": "dpmf", "seed": SEED, "rounds": rounds, "round_gap_s": GAP_S, "round_timeout_s": TIMEOUT_S},
        "data": {"users": 2, "items": 3, "ratings": 4},
        "protocol": {"scenario": "S2", "d": D, "epsilon": 1.0, **protocol_keys},
    })
    empty = Ratings(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0), 2, 3, (1.0, 5.0))
    return RunContext(scenario, _train(), empty, network, AlwaysOnline(), None, NoComputeDelay())  # type: ignore[arg-type]


def _network() -> Network:
    """Every message arrives 1 ms after it was sent (the network's resolution); the users' views are kept."""
    return Network(Links(0, LinkSpec(Constant(0.0))), Ledger(), record_views=[ALICE, BOB])


def _started(stop: trio.Event | None = None) -> Cue:
    """The cue of an entry whose run has started (and ends when ``stop`` is set)."""
    go = trio.Event()
    go.set()
    return Cue(go, stop if stop is not None else trio.Event())


async def _scripted_user(network: Network, party: Party, join_at: float | None, requests_at: list[float]) -> None:
    """A user that joins at ``join_at`` (never: None) and sends its item request at each of ``requests_at``."""
    if join_at is None:
        return
    await trio.sleep_until(join_at)
    network.send(party, SERVER, Join())
    for at in requests_at:
        await trio.sleep_until(at)
        network.send(party, SERVER, ItemRequest(np.array(RATED[party], dtype=np.int32)))


async def _recommend_for(network: Network, ctx: RunContext, join_at: float | None, requests_at: list[float]) -> dict[str, Any]:
    """The recommender's process against Alice and Bob scripted alike, and a third party that never answers."""
    for party in (THIRD_PARTY, ALICE, BOB):
        network.attach(party)
    async with network.open(), trio.open_nursery() as nursery:
        for party in (ALICE, BOB):
            nursery.start_soon(_scripted_user, network, party, join_at, requests_at)
        with trio.fail_after(100.0):
            part = await protocol._recommend(ctx, EVERY_PARTY, _started())
        nursery.cancel_scope.cancel()
    return part


async def test_the_recommender_waits_for_the_joins_the_set_up_requests_and_each_iterations_requests(autojump_clock) -> None:
    network = _network()
    completed: list[int] = []
    ctx = _context(network)
    ctx.progress = completed.append
    part = await _recommend_for(network, ctx, join_at=1.0, requests_at=[2.0, 14.0])
    # Joins in at 1.001; the requests at 2.001, so the set-up; iteration 1 after the gap; its collect finds no
    # aggregate until 12.501, the gap ends at 13.001, and iteration 2 waits for the second requests (14.001).
    for party in (ALICE, BOB):
        received = [(envelope.kind, getattr(envelope.body, "round", 0), envelope.sent_at) for envelope in network.view(party)]
        assert received == [
            (NoiseSetup.KIND, 0, pytest.approx(2.001)),
            (ItemVectors.KIND, 1, pytest.approx(2.501)),
            (ItemVectors.KIND, 2, pytest.approx(14.001)),
        ], party
    assert part["rounds"] == [
        {"round": round_index, "selected": 2, "participants": 0, "missing": 2, "items_updated": 0, "eta_skipped": 0}
        for round_index in (1, 2)
    ]
    assert [(row.dtype, row.size) for row in part["contributed"]] == [(np.dtype(np.int64), 0)] * 2
    online = {row["round"]: row["online"] for row in network.ledger.summary()["per_round"]}
    assert (online[1], online[2]) == (2, 2)
    assert completed == [1, 2]
    np.testing.assert_array_equal(part["eta_pieces"], [1, 2, 1])


@pytest.mark.parametrize(
    ("join_at", "requests_at", "message"),
    [
        (None, [], "waited for every user's join until t=10.000s"),
        (1.0, [2.0], "waited for every set-up user's item request for round 2 until t=23.001s"),
    ],
    ids=["a user never joins", "a set-up user never asks again"],
)
async def test_the_recommender_stops_with_a_timeout_naming_what_never_came(
    autojump_clock, join_at: float | None, requests_at: list[float], message: str
) -> None:
    network = _network()
    with pytest.raises(ExceptionGroup) as info:
        await _recommend_for(network, _context(network), join_at, requests_at)
    assert info.group_contains(PartyTimeout, match=re.escape(message))


async def test_the_third_party_process_draws_from_its_own_generator_and_serves_rosters_until_stopped(
    autojump_clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    generators: list[Any] = []

    class Recorded(Aggregator):
        def __init__(self, party, network, rng, public) -> None:  # type: ignore[no-untyped-def]
            generators.append(rng.bit_generator.state if rng is not None else None)
            super().__init__(party, network, rng, public)

    monkeypatch.setattr(protocol, "Aggregator", Recorded)
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger(), record_views=[SERVER])
    network.attach(SERVER)
    stop = trio.Event()
    async with network.open(), trio.open_nursery() as nursery:
        parts: list[dict[str, Any]] = []

        async def third_party() -> None:
            parts.append(await protocol._aggregate(_context(network), EVERY_PARTY, _started(stop)))

        nursery.start_soon(third_party)
        await trio.sleep(1.0)
        network.send(SERVER, THIRD_PARTY, Roster(1, (), 3.0))
        await trio.sleep(5.0)
        stop.set()
    assert parts == [{}]
    assert generators == [generator(SEED, Stream.ACTOR, Role.THIRD_PARTY.code, 0).bit_generator.state]
    [answer] = network.view(SERVER)
    assert (answer.kind, answer.body.round, answer.body.items.size, answer.body.contributors) == (Aggregate.KIND, 1, 0, ())


async def test_a_users_process_without_users_returns_empty_profiles(autojump_clock) -> None:
    network = _network()
    stopped = trio.Event()
    stopped.set()
    async with network.open():
        part = await protocol._contribute(_context(network), Group("users", frozenset({Role.USER}), range(2, 2)), _started(stopped))
    assert part["users"] == range(2, 2)
    assert part["user_factors"].shape == part["initial_user_factors"].shape == (0, D)


def test_the_users_rows_come_in_user_order_whatever_order_the_processes_answered() -> None:
    parts = [
        {"users": range(3, 5), "rows": np.array([[3.0], [4.0]])},
        {"users": range(0, 1), "rows": np.array([[0.0]])},
        {"users": range(1, 3), "rows": np.array([[1.0], [2.0]])},
    ]
    np.testing.assert_array_equal(protocol._users_rows(parts, "rows"), [[0.0], [1.0], [2.0], [3.0], [4.0]])


def _parts(eta_whole: list[bool], eta_pieces: list[int]) -> dict[Role, list[dict[str, Any]]]:
    """The processes' parts after one iteration in which both users contributed (Bob's block first)."""
    item_factors = np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    served = {
        "rounds": [{"round": 1, "selected": 2, "participants": 2, "missing": 0, "items_updated": 3, "eta_skipped": 0}],
        "contributed": [np.array([0, 1])], "item_factors": item_factors, "initial_item_factors": item_factors.copy(),
        "eta_whole": np.array(eta_whole), "eta_pieces": np.array(eta_pieces), "eta_skipped": 4, "recent": [], "rated_items": {},
    }
    users = [
        {"users": range(1, 2), "user_factors": np.array([[0.0, 0.8]]), "initial_user_factors": np.array([[0.0, 1.0]])},
        {"users": range(0, 1), "user_factors": np.array([[0.6, 0.0]]), "initial_user_factors": np.array([[1.0, 0.0]])},
    ]
    return {Role.SERVER: [served], Role.THIRD_PARTY: [{}], Role.USER: users}


@pytest.mark.parametrize(
    ("eta_whole", "eta_pieces", "pieces_min"),
    [([True, True, False], [3, 2, 0], 2), ([False, False, False], [0, 0, 0], 0)],
    ids=["two items noised", "none noised"],
)
def test_the_outcome_of_the_parts(eta_whole: list[bool], eta_pieces: list[int], pieces_min: int) -> None:
    ctx = _context(rounds=1, check_invariants=False)
    outcome = protocol._distributed_outcome(ctx, _parts(eta_whole, eta_pieces))
    user_factors = np.array([[0.6, 0.0], [0.0, 0.8]])
    np.testing.assert_array_equal(outcome.state["user_factors"], user_factors)
    train = _train()
    errors = np.abs(predict(user_factors, outcome.state["item_factors"], train.users, train.items) - train.values)
    assert outcome.rounds_completed == 1
    assert [row["round"] for row in outcome.rounds] == [1]
    assert outcome.rounds[0]["err_mean"] == pytest.approx(errors.mean(), abs=1e-12)
    assert outcome.privacy["eta"] == {"items_noised": sum(eta_whole), "items_without_eta": 0, "pieces_min": pieces_min, "skipped_updates": 4}
    assert outcome.baselines == {"err_mean": "baseline_err_mean"}
    # Without the monitors no warning that they did not run; the noise dominates all 3 items (`claims`).
    (warning,) = outcome.warnings
    assert warning.startswith("the noise dominates 3 of the 3 rated items")


@pytest.mark.parametrize(
    ("protocol_keys", "problem"),
    [
        ({"scenario": "S3"}, "over TCP dpmf runs S2 only yet; got S3"),
        ({"variant": "naive"}, "over TCP dpmf runs the protected variant (with the third party) only"),
    ],
)
def test_what_the_entries_refuse_says_why(protocol_keys: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        protocol._check_distributed(_context(**protocol_keys))
    assert info.value.problem == problem
