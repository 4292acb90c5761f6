"""Whole sessions over the simulated network: the sum is exact under every tolerable dropout pattern,
sessions abort naming the stage when too few remain, ideal mode sends exactly the real mode's bytes, and
the bytes per user follow the paper's cost analysis."""

from __future__ import annotations

import re

import numpy as np
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secagg_harness import SESSION, inputs, run_session, session

from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.errors import PartyTimeout, ProtocolViolation, SecAggAborted
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.links import Constant, LinkSpec
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Aggregate, IdealSum, SecAggParams, Stage, participate
from fedrecsim.protocols.secagg.crypto import CIPHERTEXT_BYTES
from fedrecsim.protocols.secagg.messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from fedrecsim.protocols.secagg.real import RealUser
from fedrecsim.protocols.secagg.shamir import SHARE_BYTES
from fedrecsim.testing import open_network, wire_size

STAGES = list(Stage)
COMPLETE = SecAggParams()  # n = 6: t = floor(6 / 2) + 1 = 4, so up to n - t = 2 users may drop
SPARSE = SecAggParams(graph="sparse", neighbours=4)  # k = 4: t = floor(5 / 2) + 1 = 3; 2 may drop anywhere


def _user(index: int) -> Party:
    return Party(Role.USER, index)


async def test_without_dropout_the_server_gets_the_exact_sum_and_only_masked_inputs(autojump_clock) -> None:
    x = inputs(6, 40, COMPLETE.ring)
    outcome = await session(x, COMPLETE, links=LinkSpec(Constant(0.05)))
    result = outcome.result
    assert isinstance(result, Aggregate)
    assert (result.session, result.threshold, result.degree) == (SESSION, 4, 5)
    np.testing.assert_array_equal(result.total, np.sum(x, axis=0, dtype=np.uint32))
    assert all(stage_users == tuple(_user(i) for i in range(6)) for stage_users in result.stages.values())
    masked = [(src, body) for src, body in outcome.seen if isinstance(body, Masked)]
    assert len(masked) == 6
    for src, body in masked:
        assert not np.array_equal(np.frombuffer(body.masked, dtype="<u4"), x[src.index])
    assert {user.contribution.outcome for user in outcome.users.values()} == {"done"}
    assert all(user.contribution.completed == tuple(STAGES) for user in outcome.users.values())


def _patterns(n: int, most: int):  # type: ignore[no-untyped-def]
    return st.dictionaries(st.integers(0, n - 1), st.sampled_from(STAGES), max_size=most)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crash_at=_patterns(6, 2), bits=st.sampled_from([32, 64]))
def test_masks_cancel_for_every_dropout_pattern_up_to_n_minus_t(crash_at, bits) -> None:
    params = SecAggParams(ring=Ring(bits, 16))
    x = inputs(6, 16, params.ring, seed=len(crash_at))
    outcome = run_session(x, params, crash_at)
    result = outcome.result
    assert isinstance(result, Aggregate), result
    np.testing.assert_array_equal(result.total, outcome.truth)
    expected_u3 = tuple(_user(i) for i in range(6) if crash_at.get(i) not in (Stage.ADVERTISE_KEYS, Stage.SHARE_KEYS, Stage.MASKED_INPUT))
    assert result.survivors == expected_u3
    for stage_index, stage in enumerate(STAGES):
        gone = {i for i, at in crash_at.items() if STAGES.index(at) <= stage_index}
        assert result.stages[stage] == tuple(_user(i) for i in range(6) if i not in gone)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crash_at=_patterns(10, 2))
def test_secagg_plus_masks_cancel_when_any_two_users_drop(crash_at) -> None:
    x = inputs(10, 16, SPARSE.ring, seed=3)
    outcome = run_session(x, SPARSE, crash_at)
    assert isinstance(outcome.result, Aggregate), outcome.result
    assert outcome.result.degree == 4 and outcome.result.threshold == 3
    np.testing.assert_array_equal(outcome.result.total, outcome.truth)


@pytest.mark.parametrize("stage", STAGES, ids=[stage.value for stage in STAGES])
def test_fewer_than_t_users_abort_naming_the_stage(stage: Stage) -> None:
    x = inputs(6, 8, COMPLETE.ring)
    outcome = run_session(x, COMPLETE, {0: stage, 2: stage, 5: stage})
    aborted = outcome.result
    assert isinstance(aborted, SecAggAborted) and isinstance(aborted, ProtocolViolation)
    assert aborted.stage == stage.value
    if stage is Stage.UNMASKING:
        assert str(aborted) == "secure aggregation aborted at unmasking: 3 users revealed shares, the threshold is t = 4"
    else:
        assert str(aborted) == f"secure aggregation aborted at {stage.value}: 3 users remain, the threshold is t = 4"


def test_exactly_t_users_left_still_sum() -> None:
    x = inputs(6, 8, COMPLETE.ring)
    outcome = run_session(x, COMPLETE, {1: Stage.UNMASKING, 4: Stage.MASKED_INPUT})
    assert isinstance(outcome.result, Aggregate)
    assert len(outcome.result.stages[Stage.UNMASKING]) == 4
    np.testing.assert_array_equal(outcome.result.total, outcome.truth)


def test_a_sparse_neighbourhood_below_t_aborts_naming_the_user() -> None:
    x = inputs(10, 8, SPARSE.ring)
    params = SecAggParams(graph="sparse", neighbours=2, threshold=0.5)  # k = 2: t = 2 of 3
    graph = run_session(x, params).result.graph
    victim = _user(0)
    crash = {neighbour.index: Stage.ADVERTISE_KEYS for neighbour in graph[victim]}
    aborted = run_session(x, params, crash).result
    assert isinstance(aborted, SecAggAborted) and aborted.stage == "advertise_keys"
    assert "1 of the 3 users of user:0's neighbourhood remain, the threshold is t = 2" in str(aborted)


def test_a_dropped_users_secret_with_too_few_shares_aborts_at_unmasking() -> None:
    """User 0 sends its shares then drops; its neighbours reveal too few shares of its key."""
    x = inputs(10, 8, SPARSE.ring)
    params = SecAggParams(graph="sparse", neighbours=2, threshold=0.4)  # k = 2: t = floor(1.2) + 1 = 2 of 3
    graph = run_session(x, params).result.graph
    first, second = graph[_user(0)]
    aborted = run_session(x, params, {0: Stage.MASKED_INPUT, first.index: Stage.UNMASKING}).result
    assert isinstance(aborted, SecAggAborted) and aborted.stage == "unmasking"
    assert re.search(r"1 shares of (b|s\^SK) of user:\d+ were revealed, the threshold is t = 2$", str(aborted))


@pytest.mark.parametrize("params", [COMPLETE, SPARSE], ids=["complete", "sparse"])
@pytest.mark.parametrize(
    "crash_at",
    [{}, {1: Stage.ADVERTISE_KEYS, 4: Stage.UNMASKING}, {0: Stage.SHARE_KEYS, 7: Stage.MASKED_INPUT}],
    ids=["none", "advertise+unmask", "share+masked"],
)
def test_ideal_mode_gives_the_same_sum_and_the_same_bytes_per_party(params, crash_at) -> None:
    x = inputs(9, 30, params.ring)
    real = run_session(x, params, crash_at)
    ideal = run_session(x, SecAggParams(**{**params.__dict__, "ideal": True}), crash_at)
    assert isinstance(real.result, Aggregate) and isinstance(ideal.result, Aggregate)
    np.testing.assert_array_equal(real.result.total, ideal.result.total)
    np.testing.assert_array_equal(real.result.total, real.truth)
    assert real.result.stages == ideal.result.stages
    assert real.ledger == ideal.ledger
    assert [(src, type(body)) for src, body in real.seen] == [(src, type(body)) for src, body in ideal.seen]


def test_ideal_mode_aborts_where_real_mode_does() -> None:
    x = inputs(6, 8, COMPLETE.ring)
    crash = {0: Stage.MASKED_INPUT, 2: Stage.MASKED_INPUT, 5: Stage.MASKED_INPUT}
    real = run_session(x, COMPLETE, crash)
    ideal = run_session(x, SecAggParams(ideal=True), crash)
    assert str(real.result) == str(ideal.result)
    assert real.ledger == ideal.ledger


async def test_ideal_and_real_must_agree_with_the_functionality(autojump_clock) -> None:
    from fedrecsim.protocols.secagg import aggregate

    async with open_network() as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        with pytest.raises(ValueError, match="ideal mode needs the IdealSum functionality"):
            await aggregate(server, [_user(0)], 1, SecAggParams(ideal=True), session=1, deadline=10.0)
        with pytest.raises(ValueError, match="ideal mode needs the IdealSum functionality"):
            await aggregate(server, [_user(0)], 1, COMPLETE, session=1, deadline=10.0, ideal=IdealSum())


# ------------------------------------------------------------------ bytes against the cost analysis


def _user_bytes(me: int, peers: list[int], length: int, params: SecAggParams, t: int = 4) -> tuple[int, int]:
    """What a user who completes every stage sends and receives, from the paper's message list with k
    neighbours, sized by the real codec: sent = AdvertiseKeys (2 keys) + ShareKeys (k sealed pairs) +
    y (m words) + Unmasking (k + 1 b-shares); received = setup (k indices) + keys (k key pairs) +
    ciphertexts (k) + the survivor list (k)."""
    u, s = _user(me), SERVER
    k = len(peers)
    ids = np.array(peers, dtype=np.int32)
    words = length * params.ring.bits // 8
    sent = (
        wire_size(u, s, Advertise(SESSION, bytes(32), bytes(32)))
        + wire_size(u, s, Shares(SESSION, ids, np.zeros((k, CIPHERTEXT_BYTES), np.uint8)))
        + wire_size(u, s, Masked(SESSION, bytes(words)))
        + wire_size(u, s, Reveal(SESSION, np.zeros(k + 1, np.int32), np.zeros((k + 1, SHARE_BYTES), np.uint8),
                                 np.zeros(0, np.int32), np.zeros((0, SHARE_BYTES), np.uint8)))
    )
    received = (
        wire_size(s, u, Setup(SESSION, params.ring.bits, length, t, ids))
        + wire_size(s, u, Keys(SESSION, ids, np.zeros((k, 32), np.uint8), np.zeros((k, 32), np.uint8)))
        + wire_size(s, u, Ciphertexts(SESSION, ids, np.zeros((k, CIPHERTEXT_BYTES), np.uint8)))
        + wire_size(s, u, Unmask(SESSION, ids))
    )
    return sent, received


@pytest.mark.parametrize(("n", "length"), [(8, 100), (16, 100), (16, 1000)])
def test_bonawitz_bytes_per_user_match_the_cost_analysis(n: int, length: int) -> None:
    x = inputs(n, length, COMPLETE.ring)
    outcome = run_session(x, COMPLETE)
    for me in range(n):
        sent, received = _user_bytes(me, [i for i in range(n) if i != me], length, COMPLETE, t=n // 2 + 1)
        counters = outcome.ledger[_user(me)]
        assert (counters["sent_bytes"], counters["recv_bytes"]) == (sent, received)
        assert (counters["sent_msgs"], counters["recv_msgs"]) == (4, 4)
    server = outcome.ledger[SERVER]
    assert server["recv_bytes"] == sum(outcome.ledger[_user(i)]["sent_bytes"] for i in range(n))


def test_bonawitz_bytes_grow_linearly_in_n_and_m() -> None:
    """O(n + m) per user: each further user adds a sealed pair (90 B + a 4 B index) and a share (33 B +
    4 B) to what a user sends; each further 32-bit word adds 4 B. Framing changes only when a msgpack
    length header grows a size class, so the slopes are exact between such classes."""
    def sent(n: int, length: int) -> int:
        return _user_bytes(0, list(range(1, n)), length, COMPLETE)[0]

    assert sent(40, 500) - sent(30, 500) == 10 * (CIPHERTEXT_BYTES + 4 + SHARE_BYTES + 4)
    assert sent(40, 500) - sent(40, 400) == 100 * 4


def test_secagg_plus_bytes_per_user_depend_on_the_degree_not_on_n() -> None:
    params = SecAggParams(graph="sparse")
    n, length = 40, 50
    outcome = run_session(inputs(n, length, params.ring), params)
    result = outcome.result
    assert isinstance(result, Aggregate) and result.degree == 12  # 2 ceil(log2 40)
    for party, neighbours in result.graph.items():
        assert len(neighbours) == 12
        sent, received = _user_bytes(party.index, [peer.index for peer in neighbours], length, params, t=7)
        assert (outcome.ledger[party]["sent_bytes"], outcome.ledger[party]["recv_bytes"]) == (sent, received)
    # A user pays what it would in a complete graph of k + 1 = 13 users: O(log n + m), not O(n + m).
    assert _user_bytes(0, list(range(1, 13)), length, params)[0] == outcome.ledger[_user(0)]["sent_bytes"]
    assert _user_bytes(0, list(range(1, 40)), length, params)[0] > 2 * outcome.ledger[_user(0)]["sent_bytes"]


# ------------------------------------------------------------------ a user against a misbehaving server


class _Lone(User):
    def __init__(self, party, network, rng, x) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.x = x
        self.error: ProtocolViolation | None = None

    async def run(self) -> None:
        try:
            await participate(self, self.x, COMPLETE, deadline=trio.current_time() + 50.0)
        except ProtocolViolation as error:
            self.error = error


async def _drive(sim, tamper: str):  # type: ignore[no-untyped-def]
    """Play the server by hand against user 0, with user 1's real shares; ``tamper`` says what to break."""
    ring = COMPLETE.ring
    server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
    sim.attach(SERVER, _user(0))
    me = _Lone(_user(0), sim.network, sim.actor_rng(_user(0)), np.zeros(4, dtype=np.uint32))
    peer = RealUser(1, np.random.default_rng(5), SESSION, ring)
    async with trio.open_nursery() as nursery:
        with trio.move_on_after(30):
            nursery.start_soon(me.run)
            try:
                length = 5 if tamper == "length" else 4
                server.send(_user(0), Setup(SESSION, 32, length, 2, np.array([1], dtype=np.int32)))
                advertised = (await server.recv(Advertise, deadline=trio.current_time() + 5)).body
                owner = 2 if tamper == "keys" else 1
                c_pk, s_pk = peer.advertise()
                server.send(_user(0), Keys(SESSION, np.array([owner], np.int32), np.frombuffer(c_pk, np.uint8)[None], np.frombuffer(s_pk, np.uint8)[None]))
                await server.recv(Shares, deadline=trio.current_time() + 5)
                sealed = bytearray(peer.share({0: (advertised.c_public, advertised.s_public)}, 2)[0])
                if tamper == "ciphertext":
                    sealed[40] ^= 0x80
                server.send(_user(0), Ciphertexts(SESSION, np.array([1], np.int32), np.frombuffer(bytes(sealed), np.uint8)[None]))
                await server.recv(Masked, deadline=trio.current_time() + 5)
                server.send(_user(0), Unmask(SESSION, np.array([3], np.int32)))
            except PartyTimeout:
                pass  # the user stopped at the violation
            await trio.sleep(10)
    return str(me.error)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        ("ciphertext", "user:0 could not authenticate the shares user:1 sealed for it in session 7"),
        ("keys", "user:0 received keys of non-neighbours in session 7"),
        ("length", "user:0 holds 4 words of uint32, session 7 sums 5 words of Z_2^32"),
        ("survivors", "user:0 was told of survivors that sent it no shares in session 7"),
    ],
)
async def test_a_user_refuses_what_an_honest_server_never_sends(autojump_clock, tamper, message) -> None:
    async with open_network() as sim:
        assert message in await _drive(sim, tamper)
