"""A population resumed from its checkpoint state (issue 18) carries on exactly as the one never stopped.

At a round's end, once every task is blocked, the test saves what `fedrecsim.checkpoint` saves -- the
network's, the ledger's and the population's ``checkpoint_state``, every user's and the server's
attributes -- and copies it into a second world built from the same arguments (the live objects of the
first world mapped to the second's, as the checkpoint's pickler maps them by name). That world starts at
the checkpoint's instant (`VirtualClock`) and runs the remaining rounds. Churn follows a continuous
timeline; users crash mid-round, crash on a fault rule and restart (with and without their state, one of
them twice), and straggle past a round's end: each is under way at some checkpoint.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
import trio
import trio.testing

from fedrecsim.actors.population import Population
from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.clock import VirtualClock
from fedrecsim.network.availability import LogNormalCompute, MarkovChurn, MidRoundDropout
from fedrecsim.network.faults import Crash, PartyFaults
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import message
from fedrecsim.seeding import Stream, generator

ROUNDS = 9
SEED = 11


@message("test.resume_ping")
@dataclass(frozen=True)
class Ping:
    round: int


@message("test.resume_pong")
@dataclass(frozen=True)
class Pong:
    round: int
    draw: float


class Counter(User):
    """Answers each ping, after computing, with a draw from its generator; keeps a record of what it did."""

    def __init__(self, party, network, rng) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.record: dict[str, list[int]] = {"answered": [], "started": [], "resumed": []}
        self.pending: Pong | None = None

    async def run(self) -> None:
        self.record["started"].append(round(self.now, 6))
        await self._serve()

    async def resume(self) -> None:
        self.record["resumed"].append(round(self.now, 6))
        if await self.compute_rest():
            self._reply()
        await self._serve()

    async def _serve(self) -> None:
        while True:
            ping = (await self.recv(Ping, deadline=self.horizon_s)).body
            if self.crashes_in(ping.round):
                return
            self.pending = Pong(ping.round, float(self.rng.random()))
            await self.compute()
            self._reply()

    def _reply(self) -> None:
        assert self.pending is not None
        self.record["answered"].append(self.pending.round)
        pending, self.pending = self.pending, None
        self.send(self.server, pending)


def _user(index: int) -> Party:
    return Party(Role.USER, index)


# user 0 restarts twice without its state, user 1 once with it; the restarts fall after round ends.
CRASHES = (
    Crash(_user(0), Pong.KIND, 2, restart_after_s=2.2, keep_state=False),
    Crash(_user(0), Pong.KIND, 6, restart_after_s=1.6, keep_state=False),
    Crash(_user(1), Pong.KIND, 4, restart_after_s=1.3, keep_state=True),
)


@dataclass
class World:
    network: Network
    server: Server
    population: Population

    @classmethod
    def build(cls) -> World:
        network = Network(Links(SEED, LinkSpec(Constant(0.01))), Ledger(), faults=PartyFaults(CRASHES))
        network.attach(SERVER)
        server = Server(SERVER, network, generator(SEED, Stream.ACTOR, 2, 0))
        users = {_user(i): Counter(_user(i), network, generator(SEED, Stream.ACTOR, 0, i)) for i in range(8)}
        population = Population(
            network, users, churn=MarkovChurn(mean_on_s=6.0, mean_off_s=2.5), dropout=MidRoundDropout(0.1),
            compute=LogNormalCompute(median_s=0.1, sigma=0.3, slow_fraction=0.3, slow_factor=15.0), seed=SEED,
            horizon_s=1e6,
        )
        return cls(network, server, population)

    def live(self) -> dict[str, Any]:
        """The objects a checkpoint refers to by name, not by value."""
        live: dict[str, Any] = {"network": self.network, "ledger": self.network.ledger, "server": self.server,
                                "population": self.population}
        live.update((f"user {party}", user) for party, user in self.population.users.items())
        return live

    def checkpoint(self) -> dict[str, Any]:
        def attributes(actor: Any) -> dict[str, Any]:
            return {name: value for name, value in vars(actor).items() if name != "_mailbox"}

        return {
            "time": trio.current_time(),
            "network": self.network.checkpoint_state(),
            "ledger": self.network.ledger.checkpoint_state(),
            "population": self.population.checkpoint_state(),
            "users": {party: attributes(user) for party, user in self.population.users.items()},
            "server": attributes(self.server),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.network.restore_state(state["network"])
        self.network.ledger.restore_state(state["ledger"])
        for party, attributes in state["users"].items():
            vars(self.population.users[party]).update(attributes, _mailbox=None)
        vars(self.server).update(state["server"], _mailbox=None)
        self.population.restore_state(state["population"])

    async def rounds(self, first: int, last: int, *, resume: dict[str, Any] | None = None, stop_after: int | None = None,
                     into: World | None = None, early: bool = False) -> tuple[list[dict[Party, float]], dict[str, Any] | None]:
        """Rounds ``first`` to ``last`` (1 s apart, half a second to answer); with ``stop_after``, returns the
        checkpoint state at that round's end, copied for the world ``into``, instead of going on.

        ``early``: the checkpoint is taken before the population's end of the round (its crashes not yet
        recovered, its churn not yet applied); a run resuming from it (``early`` too) first ends that round.
        """
        seen = []
        async with self.network.open():
            if resume is not None:
                self.restore(resume)
            async with self.population.open():
                if resume is not None and early:
                    self.population.end_round(first - 1)
                for round_index in range(first, last + 1):
                    await self.network.sleep(1.0)
                    self.population.begin_round(round_index)
                    self.server.update_membership()
                    members = sorted(self.server.members)
                    self.server.send_many(members, Ping(round_index))
                    replies = await self.server.gather(
                        Pong, members, deadline=trio.current_time() + 0.5, accept=lambda pong, r=round_index: pong.round == r
                    )
                    seen.append({party: pong.draw for party, pong in replies})
                    if not (early and round_index == stop_after):
                        self.population.end_round(round_index)
                    self.network.ledger.fold()
                    if round_index == stop_after:
                        await trio.testing.wait_all_tasks_blocked()
                        assert self.population.not_at_rest() == []
                        assert into is not None
                        live = into.live()
                        return seen, copy.deepcopy(self.checkpoint(), {id(obj): live[name] for name, obj in self.live().items()})
        return seen, None

    def outcome(self) -> dict[str, Any]:
        population = self.population
        users = population.users.values()
        return {
            "online": sorted(population.online),
            "counts": (population.joins, population.leaves, population.crashes, population.restarts),
            "records": [{key: user.record[key] for key in ("answered", "started")} for user in users],
            "generators": [user.rng.bit_generator.state for user in users],
            "members": sorted(self.server.members),
            "crashed": [party for party in population.users if self.network.is_crashed(party)],
            "transcript": self.network.ledger.transcript_xxh3_128,
            "ledger": self.network.ledger.export(),
        }


def _run(first: int, last: int, world: World, start: float = 0.0, **options: Any):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        return await world.rounds(first, last, **options), trio.current_time()

    (seen, state), now = trio.run(main, clock=VirtualClock(start))
    return seen, state, now


def _resumed_from(round_index: int, early: bool = False) -> tuple[World, list[dict[Party, float]], float, dict[str, Any]]:
    second = World.build()
    seen_before, state, _ = _run(1, ROUNDS, World.build(), stop_after=round_index, into=second, early=early)
    assert state is not None
    # The resumed world takes the state's objects over: keep a copy of them as they were, to inspect.
    as_saved = copy.deepcopy(state, {id(obj): obj for obj in second.live().values()})
    seen_after, _, now = _run(round_index + 1, ROUNDS, second, start=state["time"], resume=state, early=early)
    return second, seen_before + seen_after, now, as_saved


@pytest.fixture(scope="module")
def uninterrupted() -> tuple[World, list[dict[Party, float]], float]:
    world = World.build()
    seen, _, now = _run(1, ROUNDS, world)
    return world, seen, now


@pytest.mark.parametrize("round_index", range(1, ROUNDS))
def test_a_population_resumed_at_any_rounds_end_ends_as_the_one_never_stopped(uninterrupted, round_index: int) -> None:
    world, seen, now = uninterrupted
    resumed, resumed_seen, resumed_now, _ = _resumed_from(round_index)
    assert resumed_seen == seen
    assert resumed_now == now
    assert resumed.outcome() == world.outcome()


@pytest.mark.parametrize("round_index", [1, 4])
def test_a_checkpoint_taken_before_the_populations_round_end_keeps_the_rounds_crashes(uninterrupted, round_index: int) -> None:
    world, seen, now = uninterrupted
    resumed, resumed_seen, resumed_now, state = _resumed_from(round_index, early=True)
    assert state["population"]["_crashing"]  # users the dropout model crashed, to recover at the round's end
    assert (resumed_seen, resumed_now) == (seen, now)
    assert resumed.outcome() == world.outcome()


def test_the_checkpoints_were_taken_with_every_kind_of_business_under_way() -> None:
    """The resumes above are tested on states that hold a restart due, users offline, a straggler computing
    and a churn timeline part-applied; and resuming starts again exactly the tasks that ran."""
    states = {round_index: _resumed_from(round_index)[3] for round_index in range(1, ROUNDS)}
    populations = {round_index: state["population"] for round_index, state in states.items()}
    due = [crash for p in populations.values() for _, crash in p["_restarts_due"]]
    assert {crash.keep_state for crash in due} == {True, False}
    assert any(p["_restarted"].get(_user(0)) == 1 for p in populations.values())
    assert all(p["_followed"] > 0 for p in populations.values()) and len({p["_followed"] for p in populations.values()}) > 1
    assert any(len(p["_online"]) < 8 for p in populations.values())
    assert any(attributes.get("computing_until") is not None for state in states.values() for attributes in state["users"].values())
    assert all(p["running"] == sorted(p["running"]) for p in populations.values())
    assert set(populations[3]["_snapshots"]) == {_user(0)}  # only the user restarting without its state


def test_a_resumed_user_resumes_and_a_task_that_was_not_running_stays_stopped() -> None:
    resumed, _, _, state = _resumed_from(7)  # after the last restart that resets a record
    at = round(state["time"], 6)
    running = set(state["population"]["running"])
    for party, user in resumed.population.users.items():
        assert (at in user.record["resumed"]) == (party in running)
        assert at not in user.record["started"]  # resumed users did not start over


async def test_a_user_class_that_does_not_implement_resume_says_so() -> None:
    class Plain(User):
        async def run(self) -> None:
            pass

    world = World.build()
    with pytest.raises(NotImplementedError, match=r"^Plain cannot resume from a checkpoint$"):
        await Plain(_user(9), world.network, generator(SEED, Stream.ACTOR, 0, 9)).resume()
