"""Secure aggregation under faults (issue 18): a user whose stage message breaks the protocol is rejected
by the server and dropped from that stage -- the session goes on and sums the others exactly -- a user
takes part in a session once however often its setup arrives, and a user the server left behind gives up
in time for the next session."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.network.ledger import RejectReason
from fedrecsim.network.links import Constant, LinkSpec
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Aggregate, SecAggParams, Stage, aggregate, participate
from fedrecsim.protocols.secagg.messages import Advertise, Masked, Reveal, Setup, Shares
from fedrecsim.testing import open_network

from secagg_harness import SESSION, SummingUser, inputs

PARAMS = SecAggParams()  # six users: t = 4


def _user(index: int) -> Party:
    return Party(Role.USER, index)


def _tampered(body: object) -> object:
    """What a user that breaks the protocol sends instead of its stage message."""
    if isinstance(body, Advertise):
        return dataclasses.replace(body, c_public=body.c_public[:31])
    if isinstance(body, Shares):
        return dataclasses.replace(body, recipients=body.recipients[::-1].copy())
    if isinstance(body, Masked):
        return dataclasses.replace(body, masked=body.masked + b"\x00\x00\x00\x00")
    if isinstance(body, Reveal):
        return dataclasses.replace(body, b_owners=body.b_owners[::-1].copy())
    return body


class Cheater(SummingUser):
    """Honest but for its message of one stage."""

    def __init__(self, *args, cheat: type, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.cheat = cheat

    def send(self, dst: Party, message: object, *, padding: int = 0) -> int:
        return super().send(dst, _tampered(message) if isinstance(message, self.cheat) else message, padding=padding)


async def _session(make_user, link: LinkSpec, linger_s: float = 0.0) -> tuple[Aggregate, dict, list]:  # type: ignore[no-untyped-def, type-arg]
    """One session of six users, user i made by ``make_user(sim, party, x_i)``; the users keep running
    ``linger_s`` after it. Returns the aggregate, the users and the ledger's rejections."""
    x = inputs(6, 8, PARAMS.ring)
    async with open_network(seed=0, links=link) as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER)
        users = {_user(i): make_user(sim, _user(i), x[i]) for i in range(6)}
        async with trio.open_nursery() as nursery:
            for party, user in users.items():
                sim.attach(party)
                nursery.start_soon(user.run)
            await trio.sleep(0)
            result = await aggregate(server, list(users), 8, PARAMS, session=SESSION, deadline=trio.current_time() + 400.0)
            await trio.sleep(linger_s)
            nursery.cancel_scope.cancel()
        rejections = list(sim.network.ledger.rejections)
    return result, users, rejections


def _exact(result: Aggregate, users: dict) -> None:  # type: ignore[type-arg]
    survivors = [users[party].x for party in result.survivors]
    np.testing.assert_array_equal(result.total, np.sum(survivors, axis=0, dtype=np.uint32))


@pytest.mark.parametrize(
    ("cheat", "stage", "problem"),
    [
        (Advertise, Stage.ADVERTISE_KEYS, "two 32-byte public keys, received (31, 32)"),
        (Shares, Stage.SHARE_KEYS, "shares for users [0, 1, 3, 4, 5], received them for [5, 4, 3, 1, 0]"),
        (Masked, Stage.MASKED_INPUT, "8 words, received 36 bytes"),
        (Reveal, Stage.UNMASKING, "shares of b of [0, 1, 2, 3, 4, 5] and of s^SK of [], received them of [5, 4, 3, 2, 1, 0] and []"),
    ],
)
async def test_a_user_that_breaks_a_stage_is_rejected_and_dropped_from_it(autojump_clock, cheat, stage, problem) -> None:
    def make_user(sim, party, x):  # type: ignore[no-untyped-def]
        if party == _user(2):
            return Cheater(party, sim.network, sim.actor_rng(party), x, PARAMS, None, cheat=cheat)
        return SummingUser(party, sim.network, sim.actor_rng(party), x, PARAMS, None)

    result, users, rejections = await _session(make_user, LinkSpec(Constant(0.05)))
    assert _user(2) not in result.stages[stage]
    assert all(len(result.stages[other]) == 6 for other in list(Stage)[: list(Stage).index(stage)])
    _exact(result, users)
    [rejection] = rejections
    assert (rejection.src, rejection.reason) == (_user(2), RejectReason.INVALID)
    assert rejection.problem == f"server:0 expected a valid {cheat.KIND} from user:2: {problem}"


class Repeater(SummingUser):
    """Takes part in two sessions in a row, as a protocol's user does each round."""

    async def run(self) -> None:
        first = await participate(self, self.x, self.params, deadline=trio.current_time() + 500.0)
        self.contribution = first
        self.second = await participate(
            self, self.x, self.params, deadline=trio.current_time() + 30.0, after=first.session, stage_s=4.0
        )


async def test_a_user_takes_part_in_a_session_once_however_often_its_setup_arrives(autojump_clock) -> None:
    def make_user(sim, party, x):  # type: ignore[no-untyped-def]
        return Repeater(party, sim.network, sim.actor_rng(party), x, PARAMS, None)

    result, users, _ = await _session(make_user, LinkSpec(Constant(0.05), duplicate=1.0), linger_s=40.0)
    assert len(result.survivors) == 6
    _exact(result, users)
    # Every user got its setup twice; none went into session 7 again: each waited for a newer one.
    assert all(user.contribution.outcome == "done" for user in users.values())
    assert all(user.second.outcome == "timed_out" and user.second.session is None for user in users.values())


class LeftBehind(SummingUser):
    async def run(self) -> None:
        self.contribution = await participate(
            self, self.x, self.params, deadline=trio.current_time() + 500.0, stage_s=3.0
        )


async def test_a_user_left_behind_gives_up_on_its_session_after_stage_s(autojump_clock) -> None:
    async with open_network(seed=0, links=LinkSpec(Constant(0.05))) as sim:
        sim.attach(SERVER)
        user = LeftBehind(_user(0), sim.network, sim.actor_rng(_user(0)), inputs(1, 4, PARAMS.ring)[0], PARAMS, None)
        sim.attach(user.party)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(user.run)
            sim.network.send(SERVER, user.party, Setup(SESSION, 32, 4, 2, np.array([1], dtype=np.int32)))  # a session of two
            start = trio.current_time()
            while user.contribution is None:
                await trio.sleep(0.5)
            # Set up at 0.05 s, advertised, then waited 3 s for keys that never came.
            assert trio.current_time() - start == pytest.approx(3.5)
    assert (user.contribution.session, user.contribution.outcome) == (SESSION, "timed_out")
    assert user.contribution.completed == (Stage.ADVERTISE_KEYS,)
