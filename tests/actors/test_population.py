"""The population: churn follows the availability model, join/leave are counted, crashes are silence."""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.actors.population import Population
from fedrecsim.actors.server import Server
from fedrecsim.actors.user import ModelUse, User
from fedrecsim.network.availability import (
    AlwaysOnline,
    BernoulliChurn,
    Churn,
    LogNormalCompute,
    MarkovChurn,
    MidRoundDropout,
    Transition,
)
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import message
from fedrecsim.seeding import Stream, generator


@message("test.pop_request")
@dataclass(frozen=True)
class Request:
    round: int


@message("test.pop_reply")
@dataclass(frozen=True)
class Reply:
    round: int


class EchoUser(User):
    async def run(self) -> None:
        while True:
            request = (await self.recv(Request, deadline=self.horizon_s)).body
            if self.crashes_in(request.round):
                return
            await self.compute()
            self.send(self.server, Reply(request.round))


def _world(n: int, churn, dropout=None, latency_s: float = 0.01, compute=None):  # type: ignore[no-untyped-def]
    network = Network(Links(5, LinkSpec(Constant(latency_s))), Ledger())
    network.attach(SERVER)
    server = Server(SERVER, network, generator(5, Stream.ACTOR, 2, 0))
    users = {Party(Role.USER, i): EchoUser(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(n)}
    population = Population(network, users, churn=churn, dropout=dropout, compute=compute, seed=5, horizon_s=1e7)
    return network, server, population


async def _rounds(network, server, population, rounds: int, gap_s: float = 1.0, trials=None, max_users: int = 0,  # type: ignore[no-untyped-def]
                  members_seen=None):
    missing_per_round = []
    async with network.open(), population.open():
        await trio.sleep(gap_s)
        for round_index in range(1, rounds + 1):
            population.begin_round(round_index)
            server.update_membership()
            if members_seen is not None:
                members_seen.append((frozenset(server.members), population.online))
            selected = sorted(server.members)
            if 0 < max_users < len(selected):
                picks = server.rng.choice(len(selected), size=max_users, replace=False)
                selected = sorted(selected[position] for position in picks.tolist())
            for party in selected:
                server.send(party, Request(round_index))
            replies = await server.gather(
                Reply, selected, deadline=trio.current_time() + 10, accept=lambda reply: reply.round == round_index
            )
            missing_per_round.append((len(selected), replies.missing))
            online_before = len(population.online)
            joins, leaves = population.joins, population.leaves
            population.end_round(round_index)
            if trials is not None:
                trials.append((online_before, population.joins - joins, population.leaves - leaves))
            await trio.sleep(gap_s)
    return missing_per_round


async def test_bernoulli_churn_rates_match_p_join_and_p_leave(autojump_clock) -> None:
    n, p_join, p_leave = 200, 0.05, 0.1
    network, server, population = _world(n, BernoulliChurn(p_join, p_leave, initial_online=0.5))
    initially_online = len(population.churn.initial_online(5, population.parties))
    trials: list[tuple[int, int, int]] = []
    await _rounds(network, server, population, 60, trials=trials)
    leave_trials = sum(online for online, _, _ in trials)
    join_trials = sum(n - online for online, _, _ in trials)
    joins = sum(joined for _, joined, _ in trials)
    leaves = sum(left for _, _, left in trials)
    # Binomial counts; 4 standard deviations of tolerance each.
    assert abs(joins - p_join * join_trials) <= 4 * np.sqrt(join_trials * p_join * (1 - p_join))
    assert abs(leaves - p_leave * leave_trials) <= 4 * np.sqrt(leave_trials * p_leave * (1 - p_leave))
    kinds = network.ledger.summary()["kinds"]
    assert kinds["core.join"]["msgs"] == initially_online + population.joins
    assert kinds["core.leave"]["msgs"] == population.leaves


async def test_dropout_users_show_up_in_missing_and_the_run_does_not_hang(autojump_clock) -> None:
    network, server, population = _world(50, AlwaysOnline(), dropout=MidRoundDropout(0.2))
    start = trio.current_time()
    result = await _rounds(network, server, population, 30)
    total_selected = sum(selected for selected, _ in result)
    total_missing = sum(len(missing) for _, missing in result)
    # Binomial(1500, 0.2): mean 300, sd ~15.5; 4 sd tolerance.
    assert abs(total_missing - 0.2 * total_selected) <= 4 * np.sqrt(total_selected * 0.2 * 0.8)
    assert population.crashes == total_missing
    # Every round either completes when all answered or at its 10 s deadline.
    assert trio.current_time() - start <= 30 * (10 + 1) + 1


async def test_a_user_that_leaves_keeps_its_state_and_resumes_it(autojump_clock) -> None:
    network, server, population = _world(1, BernoulliChurn(0.0, 1.0))
    user = population.users[Party(Role.USER, 0)]
    user.secret = 42  # type: ignore[attr-defined]
    await _rounds(network, server, population, 1)
    assert not network.is_attached(user.party)
    assert population.users[user.party] is user and user.secret == 42  # type: ignore[attr-defined]
    assert network.ledger.summary()["kinds"]["core.leave"]["msgs"] == 1


async def test_trace_availability_brings_users_on_and_off_in_virtual_time(autojump_clock, tmp_path) -> None:
    from fedrecsim.network.availability import Trace

    trace = tmp_path / "trace.csv"
    trace.write_text("party,online_from_s,online_until_s\nuser:0,0,10\nuser:1,5,inf\nuser:2,20,30\n")
    network, server, population = _world(3, Trace.from_csv(trace))
    seen = {}
    async with network.open(), population.open():
        start = trio.current_time()
        for t in (1, 7, 12, 25, 35):
            await trio.sleep_until(start + t)
            server.update_membership()
            seen[t] = sorted(party.index for party in server.members)
    # Join/leave messages take 10 ms to reach the server.
    assert seen == {1: [0], 7: [0, 1], 12: [1], 25: [1, 2], 35: [1]}
    assert population.joins == 2 and population.leaves == 2


async def test_markov_churn_keeps_about_the_stationary_fraction_online(autojump_clock) -> None:
    from fedrecsim.network.availability import MarkovChurn

    network, server, population = _world(300, MarkovChurn(mean_on_s=100.0, mean_off_s=300.0))
    fractions = []
    async with network.open(), population.open():
        start = trio.current_time()
        for t in range(200, 2000, 200):
            await trio.sleep_until(start + t)
            fractions.append(len(population.online) / 300)
    # Stationary fraction 0.25; each snapshot is ~Binomial(300, 0.25) (sd 0.025), nine snapshots averaged.
    assert abs(np.mean(fractions) - 0.25) < 0.05


# ------------------------------------------------------------------ crashes, churn and stragglers together (issue 13)


async def test_with_max_users_and_dropout_crashes_equal_missing(autojump_clock) -> None:
    # Only the selected users receive a request; one drawn to crash but not selected never crashes.
    network, server, population = _world(40, AlwaysOnline(), dropout=MidRoundDropout(0.3))
    result = await _rounds(network, server, population, 8, max_users=10)
    total_missing = sum(len(missing) for _, missing in result)
    assert all(selected == 10 for selected, _ in result)
    assert total_missing > 0
    assert population.crashes == total_missing
    # Recovery announces a join only for those that really crashed.
    assert network.ledger.summary()["kinds"]["core.join"]["msgs"] == 40 + population.crashes


async def test_with_churn_and_dropout_crashes_equal_missing_and_the_server_knows_who_is_online(autojump_clock) -> None:
    network, server, population = _world(60, BernoulliChurn(0.2, 0.2, initial_online=0.7), dropout=MidRoundDropout(0.3))
    members_seen: list[tuple[frozenset[Party], frozenset[Party]]] = []
    result = await _rounds(network, server, population, 12, members_seen=members_seen)
    total_missing = sum(len(missing) for _, missing in result)
    assert total_missing > 0 and population.leaves > 0 and population.joins > 0
    assert population.crashes == total_missing
    # At the start of every round the server's view (built from join/leave messages) is the truth.
    for members, online in members_seen:
        assert members == online


async def test_with_continuous_churn_a_user_that_crashes_and_then_leaves_stays_offline(autojump_clock) -> None:
    # Rounds last up to 10 s and users stay ~15 s: many crash and then leave within the same round. Such a
    # user is not recovered (it has left), so only the online users are attached. (Missing here also
    # counts users that left before replying, so crashes can only be fewer than the missing.)
    network, server, population = _world(60, MarkovChurn(mean_on_s=15.0, mean_off_s=15.0), dropout=MidRoundDropout(0.3))
    result = await _rounds(network, server, population, 12)
    total_missing = sum(len(missing) for _, missing in result)
    assert 0 < population.crashes < total_missing and population.leaves > 0 and population.joins > 0
    assert network.attached - {SERVER} == population.online


async def test_the_parties_that_miss_the_deadline_are_the_ones_the_straggler_model_marks_slow(autojump_clock) -> None:
    # Normal users compute ~1 s (at most ~1.5 s at sigma 0.1), slow ones twenty times that; a round's
    # deadline is 10 s.
    compute = LogNormalCompute(median_s=1.0, sigma=0.1, slow_fraction=0.3, slow_factor=20.0)
    network, server, population = _world(40, AlwaysOnline(), compute=compute)
    slow = {party for party, is_slow in zip(population.parties, compute.is_slow(5, population.parties)) if is_slow}
    assert 0 < len(slow) < 40
    result = await _rounds(network, server, population, 3, gap_s=1.0)
    for selected, missing in result:
        assert selected == 40
        assert set(missing) == slow


async def test_a_user_that_crashes_and_churns_out_in_one_round_ends_as_not_a_member(autojump_clock) -> None:
    # Everyone crashes in round 1 and leaves after it: the recovery join and the leave go out together.
    network, server, population = _world(5, BernoulliChurn(0.0, 1.0), dropout=MidRoundDropout(1.0))
    result = await _rounds(network, server, population, 1)
    assert result == [(5, [Party(Role.USER, index) for index in range(5)])]
    assert population.crashes == 5 and population.leaves == 5
    server.update_membership()
    assert server.members == set()


# ------------------------------------------------------------------ what the population sets on users, retiring tasks


class Ticker(User):
    """Counts virtual seconds while its task runs."""

    ticks = 0

    async def run(self) -> None:
        while True:
            await self.network.sleep(1.0)
            self.ticks += 1


def _tickers(n: int, churn, dropout=None):  # type: ignore[no-untyped-def]
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger())
    network.attach(SERVER)
    users = {Party(Role.USER, i): Ticker(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(n)}
    return network, Population(network, users, churn=churn, dropout=dropout, seed=5, horizon_s=1e7)


def test_the_population_gives_every_user_the_horizon_and_the_model_use_record() -> None:
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger())
    users = {Party(Role.USER, i): EchoUser(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(3)}
    use = ModelUse()
    Population(network, users, churn=AlwaysOnline(), seed=5, horizon_s=123.0, model_use=use)
    assert all(user.horizon_s == 123.0 and user.model_use is use for user in users.values())


async def test_model_use_records_that_users_consulted_the_dropout_and_compute_models(autojump_clock) -> None:
    network, server, population = _world(
        4, AlwaysOnline(), dropout=MidRoundDropout(0.0), compute=LogNormalCompute(median_s=0.5, sigma=0.1)
    )
    use = ModelUse()
    for user in population.users.values():
        user.model_use = use
    async with network.open(), population.open():
        assert use == ModelUse(dropout=False, compute=False)  # nobody was asked anything yet
    await _rounds(network, server, population, 1)
    assert use.dropout is True and use.compute is True


async def test_compute_spends_the_drawn_delay_in_virtual_time_even_under_a_second(autojump_clock) -> None:
    network, _, population = _world(1, AlwaysOnline())
    user = population.users[Party(Role.USER, 0)]
    async with network.open():
        for delay in (0.25, 0.0, 2.5):
            user.compute_delay_s = delay
            start = trio.current_time()
            await user.compute()
            assert trio.current_time() - start == pytest.approx(delay)


async def test_the_ledger_records_how_many_were_online_at_each_round(autojump_clock) -> None:
    network, server, population = _world(20, BernoulliChurn(0.3, 0.3, initial_online=0.5))
    online_at_start: list[int] = []
    members_seen: list[tuple[frozenset[Party], frozenset[Party]]] = []
    await _rounds(network, server, population, 4, members_seen=members_seen)
    online_at_start = [len(online) for _, online in members_seen]
    per_round = {row["round"]: row["online"] for row in network.ledger.summary()["per_round"]}
    assert [per_round[r] for r in range(1, 5)] == online_at_start
    assert per_round[0] == len(population.churn.initial_online(5, population.parties))


async def test_recovery_clears_the_crash_mark(autojump_clock) -> None:
    network, server, population = _world(5, AlwaysOnline(), dropout=MidRoundDropout(1.0))
    await _rounds(network, server, population, 1)
    assert population.crashes == 5
    assert all(user.crash_round is None for user in population.users.values())


async def test_starting_a_user_outside_open_is_refused(autojump_clock) -> None:
    network, population = _tickers(2, BernoulliChurn(1.0, 0.0, initial_online=0.0))
    with pytest.raises(RuntimeError, match="^the population is not open$"):
        population.end_round(1)  # everyone joins, but there is no nursery to run them in


async def test_a_user_that_leaves_stops_acting_until_it_rejoins(autojump_clock, tmp_path) -> None:
    from fedrecsim.network.availability import Trace

    trace = tmp_path / "trace.csv"
    trace.write_text("party,online_from_s,online_until_s\nuser:0,0,10.5\nuser:0,20.5,inf\n")
    network, population = _tickers(1, Trace.from_csv(trace))
    user = population.users[Party(Role.USER, 0)]
    async with network.open(), population.open():
        start = trio.current_time()
        await trio.sleep_until(start + 15)
        assert user.ticks == 10
        await trio.sleep_until(start + 20)
        assert user.ticks == 10  # gone: its task was retired
        await trio.sleep_until(start + 30)
        assert user.ticks == 19  # back at 20.5 with its state, one task ticking again


async def test_a_recovered_user_runs_one_task_not_two(autojump_clock) -> None:
    network, population = _tickers(1, AlwaysOnline(), dropout=MidRoundDropout(1.0))
    user = population.users[Party(Role.USER, 0)]
    async with network.open(), population.open():
        start = trio.current_time()
        await trio.sleep_until(start + 5.5)
        population.begin_round(1)
        assert user.crashes_in(1)  # this user's task keeps ticking through the crash
        population.end_round(1)  # recovery starts a task: the old one must be retired
        ticks = user.ticks
        await trio.sleep_until(start + 15.25)
        assert user.ticks - ticks == 9  # at 6.5, 7.5, ..., 14.5


class _Scripted(Churn):
    """User 0 starts online and user 1 offline; round 1 swaps them; the timeline then says the same again."""

    def initial_online(self, seed, parties):  # type: ignore[no-untyped-def]
        return frozenset({Party(Role.USER, 0)})

    def between_rounds(self, seed, round_index, parties, online):  # type: ignore[no-untyped-def]
        return frozenset({Party(Role.USER, 1)}), frozenset({Party(Role.USER, 0)})

    def timeline(self, seed, parties, horizon_s):  # type: ignore[no-untyped-def]
        return iter([Transition(50.0, Party(Role.USER, 0), False), Transition(60.0, Party(Role.USER, 1), True)])


async def test_a_timeline_change_to_the_state_a_party_is_already_in_is_a_no_op(autojump_clock) -> None:
    network, server, population = _world(2, _Scripted())
    async with network.open(), population.open():
        start = trio.current_time()
        await trio.sleep_until(start + 1)
        population.begin_round(1)
        population.end_round(1)
        await trio.sleep_until(start + 100)
        assert population.online == {Party(Role.USER, 1)}
    assert (population.joins, population.leaves) == (1, 1)
    kinds = network.ledger.summary()["kinds"]
    assert (kinds["core.join"]["msgs"], kinds["core.leave"]["msgs"]) == (2, 1)


# ------------------------------------------------------------------ where a leaving user's task stops


class Recorder(User):
    """Takes requests and notes them, noting too where its task ended; replies to nobody."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.taken: list[int] = []
        self.runs = 0
        self.ended: list[tuple[str, float]] = []
        self.event = trio.Event()

    async def run(self) -> None:
        self.runs += 1
        try:
            while True:
                request = (await self.recv(Request, deadline=self.horizon_s)).body
                self.taken.append(request.round)
                if request.round == 99:
                    await self.event.wait()  # parked outside the network's waits
        except BaseException as exc:
            self.ended.append((type(exc).__name__, self.now))
            raise


def _recorders(n: int):  # type: ignore[no-untyped-def]
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger(), event_time=True)
    network.attach(SERVER)
    users = {Party(Role.USER, i): Recorder(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(n)}
    return network, Population(network, users, churn=AlwaysOnline(), seed=5, horizon_s=1e7)


async def test_a_user_that_leaves_while_waiting_for_a_message_stops_at_that_wait(autojump_clock) -> None:
    network, population = _recorders(2)
    quiet, leaving = population.users[Party(Role.USER, 0)], population.users[Party(Role.USER, 1)]
    async with network.open(), population.open():
        await network.sleep_until(1.0)
        population._leave(leaving.party)
        assert population.checkpoint_state()["running"] == [quiet.party]
        await network.sleep_until(2.0)
        assert leaving.ended == [("_Retired", 1.0)] and quiet.ended == []  # stopped where it waited, at once
        assert leaving.mailbox.waits_until is None
        population._join(leaving.party)
        network.send(SERVER, leaving.party, Request(1))
        await network.sleep_until(3.0)
        assert leaving.taken == [1] and leaving.runs == 2  # back, one task taking its messages
        assert sorted(population.checkpoint_state()["running"]) == [quiet.party, leaving.party]
    assert population.leaves == 1 and population.joins == 1


async def test_a_user_retired_before_its_task_first_ran_never_acts(autojump_clock) -> None:
    network, population = _recorders(1)
    user = population.users[Party(Role.USER, 0)]
    async with network.open(), population.open():
        await network.sleep_until(1.0)
        population._leave(user.party)
        population._join(user.party)
        population._leave(user.party)  # the joined task has not run yet
        await network.sleep_until(2.0)
        assert user.ended == [("_Retired", 1.0)]  # only the first task's end: the second never entered run
        assert user.runs == 1
        assert population.checkpoint_state()["running"] == []
        population._join(user.party)  # and the population closes before this task first runs
    assert user.runs == 1


async def test_a_user_that_leaves_while_woken_or_parked_elsewhere_stops_at_its_next_wait(autojump_clock) -> None:
    """Retired while not parked in a network wait, a task is cancelled: it runs on to its next checkpoint."""
    from fedrecsim.network.wire import decode_trusted, encode

    network, population = _recorders(2)
    woken, parked = population.users[Party(Role.USER, 0)], population.users[Party(Role.USER, 1)]
    async with network.open(), population.open():
        network.send(SERVER, parked.party, Request(99))
        await network.sleep_until(1.0)
        assert parked.taken == [99]  # and now waits on its event
        woken.mailbox.put(decode_trusted(encode(SERVER, woken.party, 1.0, Request(7))))  # runnable, not yet run
        population._leave(woken.party)
        population._leave(parked.party)
        await network.sleep_until(2.0)
        assert woken.taken == [7] and woken.ended == [("Cancelled", 1.0)]
        assert parked.ended == [("Cancelled", 1.0)]
        assert population.checkpoint_state()["running"] == []


async def test_a_joining_user_runs_in_a_task_a_retired_one_left_and_at_most_so_many_wait_idle(autojump_clock, monkeypatch) -> None:
    import fedrecsim.actors.population as population_module

    monkeypatch.setattr(population_module, "_IDLE_TASKS", 2)
    network, population = _recorders(4)
    users = list(population.users.values())
    async with network.open(), population.open():
        await network.sleep_until(1.0)
        def children() -> frozenset[trio.lowlevel.Task]:
            return population._nursery.child_tasks  # type: ignore[union-attr]

        tasks = children()  # the four users' (the timeline of `AlwaysOnline` is over)
        assert len(tasks) == 4
        for user in users[:3]:
            population._leave(user.party)
        await network.sleep_until(2.0)
        assert len(children()) == 3  # two of the three retired tasks wait idle, the third ended
        for user in users[:3]:
            population._join(user.party)
        for user in users[:3]:
            network.send(SERVER, user.party, Request(2))
        await network.sleep_until(3.0)
        assert [user.taken for user in users] == [[2], [2], [2], []] and [user.runs for user in users] == [2, 2, 2, 1]
        assert len(children()) == 4 and len(children() - tasks) == 1  # one new task, two reused


class _Held:
    """An object a user's task holds in a local variable, to watch when that task's frames are freed."""


class Holder(Recorder):
    """A `Recorder` that keeps a `_Held` in its run's frame; ``held`` refers to it weakly."""

    async def run(self) -> None:
        held = _Held()
        self.held = weakref.ref(held)
        await super().run()


@pytest.mark.parametrize("parked_in", ["network", "elsewhere"])
async def test_a_retired_users_frames_are_freed_at_once_not_left_to_the_cyclic_collector(autojump_clock, parked_in) -> None:
    """No reference cycle per leaver (issue 32): the network's waits drop the outcome whose error they raise,
    so with the cyclic collector off the frames of a retired user's task -- and what they hold -- are gone as
    soon as its task stopped."""
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger(), event_time=True)
    network.attach(SERVER)
    party = Party(Role.USER, 0)
    user = Holder(party, network, generator(5, Stream.ACTOR, 0, 0))
    population = Population(network, {party: user}, churn=AlwaysOnline(), seed=5, horizon_s=1e7)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        async with network.open(), population.open():
            if parked_in == "elsewhere":
                network.send(SERVER, party, Request(99))
            await network.sleep_until(1.0)
            assert user.held() is not None
            population._leave(party)
            await network.sleep_until(2.0)
            assert user.ended == [("_Retired" if parked_in == "network" else "Cancelled", 1.0)]
            assert user.held() is None
    finally:
        if enabled:
            gc.enable()
