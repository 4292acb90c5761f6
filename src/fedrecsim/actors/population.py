"""The population: starts and retires user actors as the availability model says.

The population is the simulator's model of the world, not a party: it decides (from seeded generators)
who is online, who crashes in a round and how long each user computes. Users themselves announce what
they do: a joining user attaches to the network and sends `Join` to the server, a leaving user sends
`Leave` and detaches. A crash is silence: the user detaches after it received the round's request and
never replies; it recovers (attaches and announces a join) at the next round boundary.

A user that leaves keeps its actor object -- and so its private state -- and resumes with it when it
rejoins; only its task is retired.

A user that crashes under a `Crash` fault rule (`fedrecsim.network.faults`) is silent until the rule's
``restart_after_s`` has passed; then, if the population still has it online, it restarts like a joining
user: attaches, announces its join, runs again. With ``keep_state = false`` it restarts from the state
it had when the population opened -- its data and its initial model -- with a fresh generator
(``generator(seed, Stream.ACTOR, role, index, restart)``), as a reinstalled device would: it never
reuses a random number it already drew.

Checkpoints (`fedrecsim.checkpoint`): between two instants the population's state is who is online, whose
task runs, how far it followed the churn timeline, which restarts are due when, and its counts
(`checkpoint_state`). A population opened after `restore_state` takes up from there: it announces no
joins, follows the timeline from the next transition, and starts each user whose task ran with
`User.resume` -- which is why a checkpoint is only taken while every such user waits at a resume point
(`not_at_rest`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from itertools import islice
from typing import Any

import outcome
import trio

from ..network.availability import Churn, ComputeTime, MidRoundDropout, NoComputeDelay, PartyList, Transition
from ..network.faults import Crash
from ..network.network import Network
from ..network.party import Party
from ..seeding import Stream, generator
from .user import ModelUse, User

# What a user's snapshot leaves out: the world it lives in (shared, or the network's), not its state.
_NOT_STATE = frozenset({"network", "_mailbox", "model_use", "rng"})
#: At most this many tasks whose user's life is over wait to run the next life (`Population._work`).
_IDLE_TASKS = 1024


class Population:
    """The users of a run and their comings and goings.

    Args:
        network: the network users attach to.
        users: every user actor of the run, online or not, by party.
        churn: who is online initially, between rounds and over virtual time.
        dropout: who crashes mid-round.
        compute: the per-round local compute time (stragglers).
        seed: the run seed the availability models derive their generators from.
        horizon_s: the virtual time after which no user waits any longer (every wait has a deadline).
        model_use: records whether the users consulted ``dropout`` and ``compute`` (the run's
            `RunContext.model_use`; `RunContext.population` passes it).
    """

    def __init__(
        self,
        network: Network,
        users: Mapping[Party, User],
        *,
        churn: Churn,
        dropout: MidRoundDropout | None = None,
        compute: ComputeTime | None = None,
        seed: int,
        horizon_s: float,
        model_use: ModelUse | None = None,
    ) -> None:
        self.network = network
        self.users = dict(sorted(users.items()))
        for user in self.users.values():
            user.horizon_s = horizon_s
            user.model_use = model_use
        self.parties = PartyList(self.users)
        self.churn = churn
        self.dropout = dropout
        self.compute = compute if compute is not None else NoComputeDelay()
        self.seed = seed
        self.horizon_s = horizon_s
        self._online: set[Party] = set()
        self._crashing: frozenset[Party] = frozenset()
        self._lives: dict[Party, _Life] = {}
        # Tasks whose user's life is over, waiting to run the next one (`_work`), the latest last.
        self._idle: dict[trio.lowlevel.Task, None] = {}
        self._nursery: trio.Nursery | None = None
        self._snapshots: dict[Party, dict[str, Any]] = {}
        self._restarted: dict[Party, int] = {}
        self._restarts_due: list[tuple[float, Crash]] = []
        self._followed = 0
        self._resumed: dict[str, Any] | None = None
        self.joins = 0
        self.leaves = 0
        self.crashes = 0
        self.restarts = 0

    @property
    def online(self) -> frozenset[Party]:
        """Who is online now, as the simulator knows it (a user that crashed this round is not)."""
        crashed = {party for party in self._crashing if not self.network.is_attached(party)}
        return frozenset(self._online.difference(crashed) if crashed else self._online)

    # ------------------------------------------------------------------ lifecycle

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Population]:
        """Bring the initial users online and follow the churn timeline for the duration of the block."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.network.crash_listeners.append(self._crashed)
            timeline = self.churn.timeline(self.seed, self.parties, self.horizon_s)
            if self._resumed is None:
                self._open_new()
            else:
                self._open_resumed(self._resumed)
            nursery.start_soon(self._follow, islice(timeline, self._followed, None))
            try:
                yield self
            finally:
                self.network.crash_listeners.remove(self._crashed)
                nursery.cancel_scope.cancel()
                self._nursery = None

    def _open_new(self) -> None:
        for party in sorted(self.network.faults.restarting(keep_state=False) & self.users.keys()):
            self._snapshots[party] = _snapshot(self.users[party])
        initial = sorted(self.churn.initial_online(self.seed, self.parties))
        # Round 0 is the set-up before the first round: the initial joins are attributed to it.
        self.network.ledger.begin_round(0, len(initial))
        for party in initial:
            self._join(party, count=False)

    def _open_resumed(self, state: dict[str, Any]) -> None:
        running = state.pop("running")
        vars(self).update(state)
        for party in running:
            self._start(party, resumed=True)
        for due, crash in self._restarts_due:
            self._nursery.start_soon(self._restart, crash, due)  # type: ignore[union-attr]

    def _crashed(self, crash: Crash) -> None:
        """A fault rule crashed a party: if it is one of these users and restarts, schedule the restart."""
        if crash.party in self.users and crash.restart_after_s is not None and self._nursery is not None:
            due = self.network.now + crash.restart_after_s
            self._restarts_due.append((due, crash))
            self._nursery.start_soon(self._restart, crash, due)

    async def _restart(self, crash: Crash, due: float) -> None:
        await self.network.sleep_until(due)
        self._restarts_due.remove((due, crash))
        party = crash.party
        self.restarts += 1
        restart = self._restarted[party] = self._restarted.get(party, 0) + 1
        if not crash.keep_state:
            user = self.users[party]
            _restore(user, self._snapshots[party])
            user.rng = generator(self.seed, Stream.ACTOR, party.role.code, party.index, restart)
        self.network.recover(party)
        if party in self._online:
            self.network.attach(party)
            self.users[party].announce_join()
            self._start(party)

    async def _follow(self, timeline: Iterator[Transition]) -> None:
        for transition in timeline:
            await self.network.sleep_until(transition.time_s)
            if transition.online and transition.party not in self._online:
                self._join(transition.party)
            elif not transition.online and transition.party in self._online:
                self._leave(transition.party)
            self._followed += 1

    async def _work(self, life: _Life | None) -> None:
        """Run users' lives one after another: a task whose user's life is over waits, idle, for the next
        `_start` (at most `_IDLE_TASKS` of them wait), so that a join mostly costs no task start."""
        while life is not None:
            user = life.user
            # A user retired before its life first ran must not act, nor one whose task a cancel (the
            # population closing) reached first -- it would stop at its first wait.
            if self._lives.get(user.party) is life and trio.current_effective_deadline() != -math.inf:
                life.task = trio.lowlevel.current_task()
                with life.scope:
                    try:
                        await (user.resume() if life.resumed else user.run())  # type: ignore[attr-defined]
                    except _Retired:
                        pass
                if self._lives.get(user.party) is life:
                    del self._lives[user.party]  # its life is over: nothing of it to retire or to resume
            life = await self._next_life()

    async def _next_life(self) -> _Life | None:
        """Wait, idle, for the life `_start` hands this task; None (the task ends) when enough wait."""
        idle = self._idle
        if len(idle) >= _IDLE_TASKS:
            return None
        task = trio.lowlevel.current_task()
        idle[task] = None

        def abort(raise_cancel: object) -> trio.lowlevel.Abort:
            del idle[task]
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]

    def _start(self, party: Party, resumed: bool = False) -> None:
        if self._nursery is None:
            raise RuntimeError("the population is not open")
        self._retire(party)
        life = self._lives[party] = _Life(self.users[party], resumed)
        if self._idle:
            task, _ = self._idle.popitem()
            trio.lowlevel.reschedule(task, outcome.Value(life))
        else:
            self._nursery.start_soon(self._work, life)

    def _retire(self, party: Party) -> None:
        """Stop ``party``'s task at its current wait: by `Network.interrupt` where that is one of the
        network's waits (every wait of a user's protocol code), by cancelling its scope otherwise."""
        life = self._lives.pop(party, None)
        if life is not None:
            task = life.task  # None: it never ran, and it will not (`_work`)
            if task is not None and not self.network.interrupt(party, task, _Retired()):
                life.scope.cancel()

    def _join(self, party: Party, count: bool = True) -> None:
        self.network.attach(party)
        self._online.add(party)
        self.users[party].announce_join()
        self._start(party)
        if count:
            self.joins += 1

    def _leave(self, party: Party) -> None:
        self._online.discard(party)
        if self.network.is_attached(party):
            self.users[party].announce_leave()
        self.network.detach(party)
        self._retire(party)
        self.leaves += 1

    # ------------------------------------------------------------------ checkpoints

    def not_at_rest(self) -> list[Party]:
        """The users whose task runs but is not at a resume point (`User.resume`: waiting for a delivery
        until its horizon, or computing) now. Empty: a checkpoint may be taken."""
        return [party for party in self._lives if not self.users[party].at_rest()]

    def checkpoint_state(self) -> dict[str, Any]:
        """What `restore_state` needs to take up from now, taken between rounds while `not_at_rest` is empty."""
        return {
            "_online": self._online,
            "_crashing": self._crashing,
            "_snapshots": self._snapshots,
            "_restarted": self._restarted,
            "_restarts_due": self._restarts_due,
            "_followed": self._followed,
            "joins": self.joins,
            "leaves": self.leaves,
            "crashes": self.crashes,
            "restarts": self.restarts,
            "running": sorted(self._lives),
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Open (`open`) where the population of ``state`` was, instead of bringing the initial users online."""
        self._resumed = dict(state)

    # ------------------------------------------------------------------ rounds

    def begin_round(self, round_index: int) -> None:
        """Draw this round's crashes and compute times for the users online now.

        Only the users drawn to crash are marked, and compute times are set only when there is a compute
        model, so that a round without dropout or stragglers costs nothing per online user: it only counts
        them, in ``_online`` itself when no crash is pending (`online` would be a copy of it, built for the
        count alone). Every draw is addressed by party index (`fedrecsim.network.availability`), so the order
        of ``online`` is moot.
        """
        drawn = self.dropout is not None or not isinstance(self.compute, NoComputeDelay)
        online = self.online if drawn or self._crashing else self._online
        if self.dropout is not None:
            self._crashing = self.dropout.crashes(self.seed, round_index, list(online))
            for party in self._crashing:
                self.users[party].crash_round = round_index
        if not isinstance(self.compute, NoComputeDelay):
            listed = list(online)
            for party, delay in zip(listed, self.compute.delays(self.seed, round_index, listed)):
                self.users[party].compute_delay_s = float(delay)
        self.network.ledger.begin_round(round_index, len(online))

    def end_round(self, round_index: int) -> None:
        """Recover the users that crashed in this round, then apply between-round churn."""
        for party in sorted(self._crashing):
            user = self.users[party]
            if user.crash_round == round_index and party in self._online and not self.network.is_attached(party):
                self.crashes += 1
                self.network.attach(party)
                user.announce_join()
                self._start(party)
            user.crash_round = None
        self._crashing = frozenset()
        joined, left = self.churn.between_rounds(self.seed, round_index, self.parties, self._online)
        for party in sorted(left):
            if party in self._online:
                self._leave(party)
        for party in sorted(joined):
            if party not in self._online:
                self._join(party)


class _Retired(BaseException):
    """Raised in a retired user's task where it waits (`Population._retire`) and caught at its top, as a
    cancellation would be: a BaseException, so no ``except Exception`` of protocol code stops it."""


class _Life:
    """One run of a user -- from `_start` until it ends or is retired: whether it resumes from a
    checkpoint, the cancel scope it runs in, and the task running it once it started."""

    __slots__ = ("resumed", "scope", "task", "user")

    def __init__(self, user: User, resumed: bool) -> None:
        self.user = user
        self.resumed = resumed
        self.scope = trio.CancelScope()
        self.task: trio.lowlevel.Task | None = None


def _snapshot(user: User) -> dict[str, Any]:
    """A deep copy of ``user``'s own state (everything but `_NOT_STATE`)."""
    return {name: copy.deepcopy(value) for name, value in vars(user).items() if name not in _NOT_STATE}


def _restore(user: User, snapshot: dict[str, Any]) -> None:
    """Put ``user`` back in the state of ``snapshot`` (a fresh copy of it: a later restart starts over)."""
    for name in [name for name in vars(user) if name not in _NOT_STATE]:
        delattr(user, name)
    for name, value in snapshot.items():
        setattr(user, name, copy.deepcopy(value))


__all__ = ["Population"]
