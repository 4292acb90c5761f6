"""A user's own checks against the server it follows (`participate`): it refuses to go on when its view falls
below the threshold -- so a server that claims too few neighbours cannot isolate it -- reveals exactly
the shares the protocol allows, and takes its session's messages from its own server only.

The test plays the server by hand: user 0 has neighbours 1, 2, 3 (real `RealUser` peers off the network)
and t = 3, so it must see at least t - 1 = 2 neighbours at every stage.
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.errors import PartyTimeout, ProtocolViolation
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import SecAggParams, Stage, participate
from fedrecsim.protocols.secagg.crypto import CIPHERTEXT_BYTES
from fedrecsim.protocols.secagg.messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from fedrecsim.protocols.secagg.real import RealUser
from fedrecsim.testing import open_network
from secagg_harness import inputs, run_session

PARAMS = SecAggParams()
SESSION, T, PEERS = 7, 3, (1, 2, 3)


def _user(index: int) -> Party:
    return Party(Role.USER, index)


class _Me(User):
    def __init__(self, party, network, rng, coordinator: Party) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.server = coordinator
        self.contribution = None
        self.error: ProtocolViolation | None = None

    async def run(self) -> None:
        try:
            self.contribution = await participate(
                self, np.arange(4, dtype=np.uint32), PARAMS, deadline=trio.current_time() + 50.0
            )
        except ProtocolViolation as error:
            self.error = error


def _ids(indices) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array(list(indices), dtype=np.int32)


def _key_rows(keys: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)


async def _play(sim, *, keys=PEERS, senders=PEERS, survivors=(1, 2), coordinator=SERVER, stranger=None, sessions=(SESSION,)):  # type: ignore[no-untyped-def]
    """Run user 0 against a hand-played server at ``coordinator``; return the user and what it sent.

    ``stranger``: user 9 sends user 0 messages of the session, all ``"before"`` the user starts (they wait in
    its mailbox with the server's setups), or its setup ``"while"`` the user waits for one. ``sessions``:
    the server's setups, the last one played out.
    """
    server = Server(coordinator, sim.network, sim.actor_rng(coordinator))
    me = _Me(_user(0), sim.network, sim.actor_rng(_user(0)), coordinator)
    sim.attach(coordinator, _user(0), _user(9))
    peers = {index: RealUser(index, np.random.default_rng(index), SESSION, PARAMS.ring) for index in PEERS}
    forged = Setup(SESSION, 32, 5, T, _ids(PEERS))
    if stranger:
        for body in (Keys(SESSION, _ids([8]), _key_rows([bytes(32)]), _key_rows([bytes(32)])),
                     Ciphertexts(SESSION, _ids([8]), np.zeros((1, CIPHERTEXT_BYTES), np.uint8)), Unmask(SESSION, _ids([8]))):
            sim.network.send(_user(9), _user(0), body)
    sent: list[object] = []
    async with trio.open_nursery() as nursery:
        if stranger == "before":
            sim.network.send(_user(9), _user(0), forged)
            for session in sessions:
                server.send(_user(0), Setup(session, 32, 4, T, _ids(PEERS)))
            await trio.sleep(1)
        nursery.start_soon(me.run)
        if stranger == "while":
            await trio.sleep(1)
            sim.network.send(_user(9), _user(0), forged)
            await trio.sleep(1)
        try:
            if stranger != "before":
                for session in sessions:
                    server.send(_user(0), Setup(session, 32, 4, T, _ids(PEERS)))
            advertised = (await server.recv(Advertise, deadline=trio.current_time() + 5)).body
            sent.append(advertised)
            public = {0: (advertised.c_public, advertised.s_public)} | {i: peer.advertise() for i, peer in peers.items()}
            server.send(_user(0), Keys(SESSION, _ids(keys), _key_rows([public[i][0] for i in keys]),
                                       _key_rows([public[i][1] for i in keys])))
            sent.append((await server.recv(Shares, deadline=trio.current_time() + 5)).body)
            sealed = {i: peers[i].share({j: public[j] for j in public if j != i}, T)[0] for i in senders}
            rows = np.frombuffer(b"".join(sealed[i] for i in senders), np.uint8).reshape(len(senders), CIPHERTEXT_BYTES)
            server.send(_user(0), Ciphertexts(SESSION, _ids(senders), rows))
            sent.append((await server.recv(Masked, deadline=trio.current_time() + 5)).body)
            server.send(_user(0), Unmask(SESSION, _ids(survivors)))
            sent.append((await server.recv(Reveal, deadline=trio.current_time() + 5)).body)
        except PartyTimeout:
            pass  # the user sent nothing more
        await trio.sleep(60)
    return me, sent


@pytest.mark.parametrize(
    ("view", "completed"),
    [({"keys": (1,)}, (Stage.ADVERTISE_KEYS,)),
     ({"senders": (2,)}, (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS)),
     ({"survivors": (3,)}, (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT))],
    ids=["keys", "ciphertexts", "unmask"],
)
async def test_a_user_refuses_a_view_of_fewer_than_t_minus_one_neighbours(autojump_clock, view, completed) -> None:
    async with open_network() as sim:
        me, sent = await _play(sim, **view)
    assert me.error is None
    assert me.contribution.outcome == "refused" and me.contribution.session == SESSION
    assert me.contribution.completed == completed
    assert len(sent) == len(completed)  # it sent nothing after refusing: no shares, no masked input, no reveal


async def test_with_exactly_t_minus_one_neighbours_at_every_stage_the_user_goes_on(autojump_clock) -> None:
    async with open_network() as sim:
        me, sent = await _play(sim, keys=(1, 2), senders=(1, 2), survivors=(1, 2))
    assert me.error is None and me.contribution.outcome == "done"
    shares, reveal = sent[1], sent[3]
    assert shares.recipients.tolist() == [1, 2]
    # It reveals b of the survivors and itself, and s^SK of no one: nobody dropped after sharing.
    assert (reveal.b_owners.tolist(), reveal.sk_owners.tolist()) == ([0, 1, 2], [])


async def test_the_user_reveals_b_of_survivors_and_s_sk_of_those_that_dropped_after_sharing(autojump_clock) -> None:
    async with open_network() as sim:
        me, sent = await _play(sim, survivors=(1, 2))
    assert me.contribution.outcome == "done" and me.contribution.completed == tuple(Stage)
    reveal = sent[3]
    assert (reveal.b_owners.tolist(), reveal.sk_owners.tolist()) == ([0, 1, 2], [3])
    assert reveal.b_shares.shape == (3, 33) and reveal.sk_shares.shape == (1, 33)


@pytest.mark.parametrize("stranger", ["before", "while"])
async def test_the_user_follows_its_own_server_and_ignores_anyone_else(autojump_clock, stranger: str) -> None:
    coordinator = Party(Role.SERVER, 1)
    async with open_network() as sim:
        me, sent = await _play(sim, coordinator=coordinator, stranger=stranger)
    assert me.error is None and me.contribution.outcome == "done" and len(sent) == 4
    assert sim.ledger.party(SERVER)["recv_msgs"] == 0  # nothing went to server:0
    assert sim.ledger.party(coordinator)["recv_msgs"] == 4
    assert sim.ledger.party(_user(0))["recv_msgs"] == 4 + 4  # the stranger's four were delivered, and ignored


async def test_of_two_setups_waiting_the_user_takes_part_in_the_newest(autojump_clock) -> None:
    async with open_network() as sim:
        me, sent = await _play(sim, stranger="before", sessions=(SESSION - 1, SESSION))
    assert me.error is None and me.contribution.session == SESSION and me.contribution.outcome == "done"
    assert [body.session for body in sent] == [SESSION] * 4


async def test_shares_from_a_user_whose_keys_it_never_got_are_a_violation(autojump_clock) -> None:
    async with open_network() as sim:
        me, sent = await _play(sim, keys=(1, 2), senders=(1, 2, 3))
    assert str(me.error) == f"user:0 received shares from users it gave no keys to in session {SESSION}"
    assert len(sent) == 2  # no masked input after the violation


async def test_a_user_that_never_hears_a_setup_times_out_outside_any_session(autojump_clock) -> None:
    async with open_network() as sim:
        sim.attach(_user(0))
        me = _Me(_user(0), sim.network, sim.actor_rng(_user(0)), SERVER)
        await me.run()
    assert me.error is None
    assert (me.contribution.session, me.contribution.completed, me.contribution.outcome) == (None, (), "timed_out")


def test_a_user_that_crashes_says_so_with_the_stages_it_completed() -> None:
    params = SecAggParams()  # n = 10: t = 6, so four users may crash
    crash_at = {1: Stage.ADVERTISE_KEYS, 3: Stage.SHARE_KEYS, 5: Stage.MASKED_INPUT, 7: Stage.UNMASKING}
    outcome = run_session(inputs(10, 4, params.ring), params, crash_at)
    stages = tuple(Stage)
    for index, stage in crash_at.items():
        contribution = outcome.users[_user(index)].contribution
        assert (contribution.session, contribution.outcome) == (SESSION, "crashed"), index
        assert contribution.completed == stages[: stages.index(stage)], index
    assert {outcome.users[_user(index)].contribution.outcome for index in (0, 2, 4, 6, 8, 9)} == {"done"}
