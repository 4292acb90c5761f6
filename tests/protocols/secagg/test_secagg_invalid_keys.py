"""A user that advertises a key no X25519 agreement works with (issue 29): it costs that user only.

The server rejects the advertisement -- recorded in the ledger, the user listed in `Aggregate.rejected` --
so the user is not in U1: its neighbours never get its key, make no pairwise mask with it, and the session
sums the others exactly. Before, the server checked only the keys' length and forwarded a small-order
point, on which each neighbour's key agreement raised `ProtocolViolation` and stopped the run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.errors import ProtocolViolation
from fedrecsim.network.ledger import RejectReason
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Aggregate, SecAggParams, Stage, aggregate, crypto
from fedrecsim.protocols.secagg.messages import Advertise, Keys, Setup
from fedrecsim.testing import open_network

from secagg_harness import SESSION, SummingUser, inputs, session

P = 2**255 - 19
#: Encodings of points of small order: every key agreement with them is the all-zero secret.
SMALL_ORDER = {
    "zero": bytes(32),
    "one": (1).to_bytes(32, "little"),
    "order 8": bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    "p - 1": (P - 1).to_bytes(32, "little"),
    "p (zero, not reduced)": P.to_bytes(32, "little"),
}
BAD = 2


def _user(index: int) -> Party:
    return Party(Role.USER, index)


class BadKey(SummingUser):
    """Honest, but advertises ``key`` instead of its own public key ``which`` (``c``, ``s`` or both)."""

    def __init__(self, *args, key: bytes, which: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.key = key
        self.which = which

    def send(self, dst: Party, message: object, *, padding: int = 0) -> int:
        if isinstance(message, Advertise):
            changes = {"c_public": self.key} if self.which in ("c", "both") else {}
            changes |= {"s_public": self.key} if self.which in ("s", "both") else {}
            message = dataclasses.replace(message, **changes)
        return super().send(dst, message, padding=padding)


async def _session(params: SecAggParams, n: int, key: bytes, which: str) -> tuple[Aggregate, dict, list, int]:  # type: ignore[type-arg]
    """A session of ``n`` users in which user `BAD` advertises ``key``; the aggregate, the users, the
    rejections and the number of messages the bad user sent."""
    x = inputs(n, 8, params.ring)
    async with open_network(seed=0) as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER)
        users = {}
        for i in range(n):
            args = (_user(i), sim.network, sim.actor_rng(_user(i)), x[i], params, None)
            users[_user(i)] = BadKey(*args, key=key, which=which) if i == BAD else SummingUser(*args)
        async with trio.open_nursery() as nursery:
            for party, user in users.items():
                sim.attach(party)
                nursery.start_soon(user.run)
            await trio.sleep(0)
            result = await aggregate(server, list(users), 8, params, session=SESSION, deadline=trio.current_time() + 400.0)
            nursery.cancel_scope.cancel()
        rejections = list(sim.network.ledger.rejections)
        sent = sim.network.ledger.party(_user(BAD))["sent_msgs"]
    return result, users, rejections, sent


CASES = [pytest.param(key, "c", id=f"c {name}") for name, key in SMALL_ORDER.items()] + [
    pytest.param(SMALL_ORDER["order 8"], "s", id="s order 8"),
    pytest.param(bytes(32), "both", id="both zero"),
    pytest.param(bytes(31), "s", id="s of 31 bytes"),
    pytest.param(bytes(33), "c", id="c of 33 bytes"),
]


@pytest.mark.parametrize(("key", "which"), CASES)
@pytest.mark.parametrize("params", [SecAggParams(population=6), SecAggParams(graph="sparse", neighbours=4, population=10)],
                         ids=["complete", "sparse"])
async def test_an_invalid_key_drops_its_owner_only_and_the_others_are_summed_exactly(autojump_clock, params, key, which) -> None:  # type: ignore[no-untyped-def]
    n = params.population
    result, users, rejections, sent = await _session(params, n, key, which)
    assert isinstance(result, Aggregate)
    others = tuple(_user(i) for i in range(n) if i != BAD)
    assert result.stages[Stage.ADVERTISE_KEYS] == others and result.survivors == others
    assert result.rejected[Stage.ADVERTISE_KEYS] == (_user(BAD),)
    assert all(not result.rejected[stage] for stage in (Stage.SHARE_KEYS, Stage.MASKED_INPUT, Stage.UNMASKING))
    np.testing.assert_array_equal(result.total, np.sum([users[party].x for party in others], axis=0, dtype=np.uint32))
    assert all(users[party].contribution.outcome == "done" for party in others)
    assert sent == 1  # the bad user advertised, then heard nothing more of the session
    [rejection] = rejections
    assert (rejection.src, rejection.dst, rejection.kind, rejection.reason) == (_user(BAD), SERVER, "secagg.advertise", RejectReason.INVALID)
    if len(key) == 32:
        expected = f"{key.hex()} is no valid X25519 public key (Error computing shared key.)"
    else:  # the wire admits any length: the server's length check comes first
        expected = f"two 32-byte public keys, received {(len(key), 32) if which == 'c' else (32, len(key))}"
    assert rejection.problem == f"server:0 expected a valid secagg.advertise from user:{BAD}: {expected}"


async def test_in_ideal_mode_the_keys_are_zeros_of_the_real_size_and_nobody_is_rejected(autojump_clock) -> None:
    """Ideal mode sends zero keys (nothing agrees on them): the server does not test them as keys."""
    params = SecAggParams(ideal=True, population=6)
    outcome = await session(inputs(6, 8, params.ring), params)
    assert isinstance(outcome.result, Aggregate) and len(outcome.result.survivors) == 6
    assert all(not parties for parties in outcome.result.rejected.values())


def test_the_key_test_accepts_every_key_a_user_makes_and_the_libraries_other_points() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        assert crypto.public_key_problem(crypto.KeyPair.generate(rng).public) is None
    # Bytes that are no small-order point: agreement works, whatever the encoding's top bit.
    assert crypto.public_key_problem(b"\xff" * 32) is None
    assert crypto.public_key_problem((9).to_bytes(32, "little")) is None
    for key in SMALL_ORDER.values():
        problem = crypto.public_key_problem(key)
        assert problem is not None and problem.startswith(key.hex())
        with pytest.raises(ProtocolViolation, match="an advertised X25519 public key is invalid"):
            crypto.KeyPair.generate(rng).agree(key)


async def test_a_user_refuses_an_invalid_key_the_server_forwarded_before_it_shares(autojump_clock) -> None:
    """A server that forwards a key it should have rejected breaks the protocol: the user raises, naming the
    key's owner, and sends no shares (it never agrees a key with it)."""
    params = SecAggParams(population=4)  # four users: t = 3
    me = _user(0)
    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER, me)
        user = SummingUser(me, sim.network, sim.actor_rng(me), inputs(1, 4, params.ring)[0], params, None)
        error: list[ProtocolViolation] = []

        async def run() -> None:
            try:
                await user.run()
            except ProtocolViolation as caught:
                error.append(caught)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            server.send(me, Setup(SESSION, 32, 4, 3, np.array([1, 2, 3], dtype=np.int32)))
            await server.recv(Advertise, deadline=trio.current_time() + 5)
            good = [crypto.KeyPair.generate(np.random.default_rng(i)).public for i in (1, 2)]
            rows = np.frombuffer(b"".join([*good, SMALL_ORDER["order 8"]]), np.uint8).reshape(3, 32)
            server.send(me, Keys(SESSION, np.array([1, 2, 3], dtype=np.int32), rows, rows))
            await trio.sleep(30)
        assert sim.ledger.party(SERVER)["recv_msgs"] == 1  # the advertisement, no shares
    [violation] = error
    assert str(violation) == (f"user:0 received user:3's keys in session {SESSION}: "
                              f"{SMALL_ORDER['order 8'].hex()} is no valid X25519 public key (Error computing shared key.)")
