"""A user checks the server's setup -- the threshold t and its neighbours -- against the public parameters
(issue 29). Before, it took t from the server's `Setup` unchecked: a server that sent t = 1 rebuilt a
chosen user's self-mask seed b_u and mask key s_u^SK from one share each and read its input exactly, in
one session; one that gave a user a single neighbour did the same with that neighbour's help.

The attacks are written here from the protocol's definitions (`_MaliciousServer`): the server runs the
stages with real users (`participate`), lies in the setup and, at Unmasking, tells each holder whatever
makes it reveal the shares the server needs; then it rebuilds the secrets by Lagrange interpolation and
strips the masks off the target's y_u = x_u + PRG(b_u) +- sum PRG(s_uv).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.actors.server import Server
from fedrecsim.errors import ConfigError
from fedrecsim.network.ledger import RejectReason
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import SecAggParams, crypto, graph, prg, shamir
from fedrecsim.protocols.secagg.messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from fedrecsim.protocols.secagg.real import pairwise_mask, x_of
from fedrecsim.testing import open_network

from secagg_harness import SESSION, SummingUser, inputs

LENGTH = 6
TARGET = 0


def _user(index: int) -> Party:
    return Party(Role.USER, index)


def _ids(indices: Sequence[int]) -> np.ndarray:
    return np.array(sorted(indices), dtype=np.int32)


@dataclass
class Lies:
    """What the malicious server tells each user: its t and neighbours in the setup, whose shares it
    forwards to it (``forwarded``; default: every neighbour's) and -- given those -- the survivors at
    Unmasking."""

    t: Callable[[int], int]
    neighbours: Callable[[int], list[int]]
    survivors: Callable[[int, list[int]], list[int]]
    forwarded: Callable[[int], list[int]] | None = None


def _reconstruct(shares: dict[int, bytes], t: int) -> bytes | None:
    """The secret behind ``shares`` if there are t of them (of a t-of-n sharing), else None."""
    if len(shares) < t:
        return None
    value = shamir.reconstruct({x: shamir.from_bytes(share) for x, share in shares.items()}, t)
    return value.to_bytes(32, "big") if value < 2**256 else None


class _MaliciousServer:
    """Runs one session over users 0 .. n-1 as `Lies` says and tries to read the target's input."""

    def __init__(self, server: Server, n: int, params: SecAggParams, lies: Lies) -> None:
        self.server, self.n, self.ring, self.lies = server, n, params.ring, lies

    async def _gather(self, kind: type, parties: Sequence[Party]) -> dict[Party, object]:
        return dict(await self.server.gather(kind, parties, deadline=trio.current_time() + 10.0))

    async def attack(self) -> np.ndarray | None:
        """The target's input as the server rebuilds it, or None where the users left it short."""
        server, lies, ring = self.server, self.lies, self.ring
        everyone = [_user(i) for i in range(self.n)]
        for party in everyone:
            server.send(party, Setup(SESSION, ring.bits, LENGTH, lies.t(party.index), _ids(lies.neighbours(party.index))))
        advertised: dict[Party, Advertise] = await self._gather(Advertise, everyone)  # type: ignore[assignment]
        for party in advertised:
            owners = [v for v in sorted(lies.neighbours(party.index)) if _user(v) in advertised]
            rows = [advertised[_user(v)] for v in owners]
            server.send(party, Keys(SESSION, _ids(owners), _rows([body.c_public for body in rows], 32),
                                    _rows([body.s_public for body in rows], 32)))
        shared: dict[Party, Shares] = await self._gather(Shares, list(advertised))  # type: ignore[assignment]
        inbox: dict[int, list[tuple[int, bytes]]] = {party.index: [] for party in shared}
        for sender, body in sorted(shared.items()):
            for recipient, row in zip(body.recipients.tolist(), body.ciphertexts):
                if recipient in inbox and sender.index in (lies.forwarded or lies.neighbours)(recipient):
                    inbox[recipient].append((sender.index, bytes(row)))
        for index, rows in inbox.items():
            server.send(_user(index), Ciphertexts(SESSION, _ids([s for s, _ in rows]),
                                                  _rows([row for _, row in rows], crypto.CIPHERTEXT_BYTES)))
        masked: dict[Party, Masked] = await self._gather(Masked, list(shared))  # type: ignore[assignment]
        if _user(TARGET) not in masked:
            return None
        for party in masked:
            senders = [s for s, _ in inbox[party.index]]
            server.send(party, Unmask(SESSION, _ids(lies.survivors(party.index, senders))))
        revealed: dict[Party, Reveal] = await self._gather(Reveal, list(masked))  # type: ignore[assignment]
        b: dict[int, dict[int, bytes]] = {}
        sk: dict[int, dict[int, bytes]] = {}
        for holder, body in revealed.items():
            for owner, share in zip(body.b_owners.tolist(), body.b_shares):
                b.setdefault(owner, {})[x_of(holder.index)] = bytes(share)
            for owner, share in zip(body.sk_owners.tolist(), body.sk_shares):
                sk.setdefault(owner, {})[x_of(holder.index)] = bytes(share)
        seed = _reconstruct(b.get(TARGET, {}), lies.t(TARGET))
        if seed is None:
            return None
        x = ring.sub(np.frombuffer(masked[_user(TARGET)].masked, dtype="<u4").astype(ring.dtype), prg.expand(seed, LENGTH, ring.dtype))
        mine = _reconstruct(sk.get(TARGET, {}), lies.t(TARGET))
        for partner in [s for s, _ in inbox[TARGET]]:  # the target masked with each user whose shares it got
            theirs = _reconstruct(sk.get(partner, {}), lies.t(partner))
            if mine is not None:
                mask = pairwise_mask(crypto.KeyPair(mine), advertised[_user(partner)].s_public, SESSION, LENGTH, ring)
            elif theirs is not None:
                mask = pairwise_mask(crypto.KeyPair(theirs), advertised[_user(TARGET)].s_public, SESSION, LENGTH, ring)
            else:
                return None
            x = ring.sub(x, mask) if partner < TARGET else ring.add(x, mask)
        return x


def _rows(blobs: Sequence[bytes], width: int) -> np.ndarray:
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), width)


@dataclass
class Attacked:
    recovered: np.ndarray | None
    inputs: np.ndarray
    users: dict[Party, SummingUser]
    rejections: list
    sent: dict[Party, int]


async def _attack(params: SecAggParams, n: int, lies: Lies) -> Attacked:
    x = inputs(n, LENGTH, params.ring)
    async with open_network(seed=0) as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER)
        users = {_user(i): SummingUser(_user(i), sim.network, sim.actor_rng(_user(i)), x[i], params, None) for i in range(n)}
        async with trio.open_nursery() as nursery:
            for party, user in users.items():
                sim.attach(party)
                nursery.start_soon(user.run)
            await trio.sleep(0)
            recovered = await _MaliciousServer(server, n, params, lies).attack()
            nursery.cancel_scope.cancel()
        rejections = list(sim.network.ledger.rejections)
        sent = {party: sim.network.ledger.party(party)["sent_msgs"] for party in users}
    return Attacked(recovered, x, users, rejections, sent)


def _complete(n: int) -> Callable[[int], list[int]]:
    return lambda index: [v for v in range(n) if v != index]


#: t = 1 for everyone, honest neighbourhoods; the target reveals its own share of b_u (= b_u), every other
#: user is told the target dropped and reveals its share of s_u^SK (= s_u^SK).
T_ONE = Lies(t=lambda index: 1, neighbours=_complete(5),
             survivors=lambda index, senders: senders if index == TARGET else [s for s in senders if s != TARGET])


async def test_a_server_that_sends_t_one_reads_a_users_input_where_the_users_accept_it(autojump_clock) -> None:
    """The attack is real: with public theta = 0, t = 1 is the honest threshold, every user takes it, and the
    server rebuilds b_u and s_u^SK from one share each and reads the target's input exactly."""
    attacked = await _attack(SecAggParams(threshold=0.0, population=5), 5, T_ONE)
    assert attacked.recovered is not None
    np.testing.assert_array_equal(attacked.recovered, attacked.inputs[TARGET])


async def test_users_refuse_a_lowered_t_and_the_attack_reads_nothing(autojump_clock) -> None:
    """Public theta = 1/2: five users in a complete graph expect t = 3; the server's t = 1 is refused by every
    user before it sends anything -- no key, no share, no masked input -- and recorded in the ledger."""
    attacked = await _attack(SecAggParams(population=5), 5, T_ONE)
    assert attacked.recovered is None
    assert all(user.contribution.outcome == "refused" and user.contribution.completed == () for user in attacked.users.values())
    assert all(sent == 0 for sent in attacked.sent.values())
    assert len(attacked.rejections) == 5
    for index, rejection in enumerate(sorted(attacked.rejections, key=lambda rejection: rejection.dst)):
        assert (rejection.src, rejection.dst, rejection.kind, rejection.reason) == (SERVER, _user(index), "secagg.setup", RejectReason.INVALID)
        assert rejection.problem == f"user:{index} expected a valid secagg.setup from server:0: t = 3 for 4 neighbours, received t = 1"


#: Six users; the target is told its only neighbour is user 1 and t = 2 (what a session of two users has);
#: the others get the complete graph and t = 4. User 1 is told the target survived (it reveals its share
#: of b_u), users 2-5 that user 1 dropped (they reveal their shares of s_1^SK, which unmasks s_01).
SHRUNKEN = Lies(
    t=lambda index: 2 if index == TARGET else 4,
    neighbours=lambda index: [1] if index == TARGET else [v for v in range(6) if v != index],
    survivors=lambda index, senders: senders if index in (TARGET, 1) else [s for s in senders if s != 1],
)


async def test_users_refuse_a_shrunken_neighbourhood_and_the_attack_reads_nothing(autojump_clock) -> None:
    """A neighbourhood of one is a session of two users; with a population of six the smallest session is
    t(6) = 4 users, so the target refuses and sends nothing. The others go on (the server cannot stop them
    summing among themselves), but the target's input never leaves it."""
    attacked = await _attack(SecAggParams(population=6), 6, SHRUNKEN)
    assert attacked.recovered is None
    target = attacked.users[_user(TARGET)].contribution
    assert (target.outcome, target.completed) == ("refused", ())
    assert attacked.sent[_user(TARGET)] == 0
    [rejection] = attacked.rejections
    assert (rejection.src, rejection.dst, rejection.kind) == (SERVER, _user(TARGET), "secagg.setup")
    assert rejection.problem == ("user:0 expected a valid secagg.setup from server:0: the neighbours of a user in a session of "
                                 "4 to 6 users, received 1 neighbours")
    # The others sent their masked inputs; the server, with nothing of the target's, stopped there.
    assert all(attacked.sent[_user(index)] == 3 for index in range(1, 6))


async def test_the_shrunken_neighbourhood_attack_reads_the_input_of_a_user_that_accepts_it(autojump_clock) -> None:
    """The same attack where the public parameters allow a session of two (the population unstated: floor 2):
    the target accepts, and the server reads its input exactly -- the floor is what stops it."""
    attacked = await _attack(SecAggParams(), 6, SHRUNKEN)
    assert attacked.users[_user(TARGET)].contribution.outcome == "done"
    assert attacked.recovered is not None
    np.testing.assert_array_equal(attacked.recovered, attacked.inputs[TARGET])


def _lie_about_survivors(index: int, senders: list[int]) -> list[int]:
    """Ten users, t = 6: the target is told its five partners survived; partner p is told the others of
    6..9 and the target survived (it reveals its shares of b_0 and of the other partners' s^SK); user
    6 + i is told the target, 7..9 but itself, and partner 1 + i survived."""
    if index == TARGET:
        return senders
    if index in PARTNERS:
        return [0, 6, 7, 8, 9]
    return sorted({0, 6, 7, 8, 9, index - 5} - {index})


PARTNERS = (1, 2, 3, 4, 5)
#: The honest setup of ten users (complete graph, t = 6); the server forwards the target the shares of
#: five partners only -- the t - 1 its check asks -- and tells each user a different U3.
SURVIVORS = Lies(t=lambda index: 6, neighbours=_complete(10), survivors=_lie_about_survivors,
                 forwarded=lambda index: list(PARTNERS) if index == TARGET else _complete(10)(index))


async def test_without_the_consistency_check_a_server_that_lies_about_the_survivors_still_reads_an_input(autojump_clock) -> None:
    """What the users' checks do not stop (docs/faults.md): the setup is honest, so every user takes part,
    but each is told another U3. Each holder reveals one share per owner, b_v's or s_v^SK's, as its own U3
    says; with t = floor(n / 2) + 1 the server gathers t of b_0 and t of each partner's s^SK and reads the
    target's input. Bonawitz et al.'s ConsistencyCheck (users sign U3) and t > 2n/3 stop it; both are
    left out here, as the module says (an honest-but-curious server)."""
    attacked = await _attack(SecAggParams(population=10), 10, SURVIVORS)
    assert not attacked.rejections and all(user.contribution.outcome == "done" for user in attacked.users.values())
    assert attacked.recovered is not None
    np.testing.assert_array_equal(attacked.recovered, attacked.inputs[TARGET])


# ------------------------------------------------------------------------------ setup_problem, unit by unit


def _honest_setups(params: SecAggParams, n: int, seed: int) -> dict[int, tuple[list[int], int]]:
    parties = [_user(i) for i in range(n)]
    if params.graph == "complete":
        drawn = graph.complete(parties)
    else:
        drawn = graph.harary(parties, params.degree(n), np.random.default_rng(seed))
    return {party.index: ([v.index for v in drawn[party]], params.threshold_for(n)) for party in parties}


@pytest.mark.parametrize("params", [
    SecAggParams(population=12), SecAggParams(population=12, threshold=0.7), SecAggParams(population=12, min_users=9),
    SecAggParams(population=12, min_users=3),
    SecAggParams(graph="sparse", population=40), SecAggParams(graph="sparse", neighbours=5, population=17),
    SecAggParams(graph="sparse", neighbours=4, threshold=0.2, population=30), SecAggParams(), SecAggParams(graph="sparse", neighbours=3),
], ids=["complete", "theta 0.7", "min 9", "min 3", "sparse default k", "sparse k 5", "sparse k 4 theta 0.2", "unstated", "unstated sparse k 3"])
def test_every_setup_an_honest_server_sends_passes(params: SecAggParams) -> None:
    """Every session size from the floor to the population (or 60), every user of it: no false refusal."""
    top = params.population or 60
    for n in range(params.session_floor(), top + 1):
        for me, (neighbours, t) in _honest_setups(params, n, seed=n).items():
            assert params.setup_problem(me, neighbours, t) is None, (n, me, neighbours, t)


@pytest.mark.parametrize(("neighbours", "t", "problem"), [
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], 4, "t = 6 for 9 neighbours, received t = 4"),
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], 7, "t = 6 for 9 neighbours, received t = 7"),
    ([1, 2, 3], 3, "the neighbours of a user in a session of 6 to 10 users, received 3 neighbours"),
    ([], 1, "the neighbours of a user in a session of 6 to 10 users, received 0 neighbours"),
    ([2, 1, 3, 4, 5, 6], 4, "neighbours in ascending order, each once, received [2, 1, 3, 4, 5, 6]"),
    ([1, 2, 2, 3, 4, 5], 4, "neighbours in ascending order, each once, received [1, 2, 2, 3, 4, 5]"),
    ([0, 1, 2, 3, 4, 5], 4, "neighbours other than user:0 itself, received [0, 1, 2, 3, 4, 5]"),
    ([1, 2, 3, 4, 5, 10, 11], 5, "neighbours among users 0 to 9, received [10, 11]"),
    ([-1, 1, 2, 3, 4, 5], 4, "neighbours among users 0 to 9, received [-1]"),
], ids=["t lowered", "t raised", "shrunken", "alone", "unsorted", "repeated", "itself", "strangers", "negative"])
def test_a_complete_graph_setup_the_parameters_do_not_allow_is_named(neighbours: list[int], t: int, problem: str) -> None:
    params = SecAggParams(population=10)  # t(10) = 6: no session of fewer than 6 users
    assert params.session_floor() == 6
    assert params.setup_problem(0, neighbours, t) == problem


def test_a_sparse_setup_is_checked_against_the_degree_k() -> None:
    params = SecAggParams(graph="sparse", neighbours=4, population=20)  # k = 4, t = 3; sessions of >= 3 users
    assert params.setup_problem(0, [1, 2, 3, 4], 3) is None
    assert params.setup_problem(0, [1, 2, 3, 4], 2) == "t = 3 for 4 neighbours, received t = 2"
    assert params.setup_problem(0, [1, 2, 3, 4, 5], 3) == "the neighbours of a user in a session of 3 to 20 users, received 5 neighbours"
    assert params.setup_problem(0, [1], 2) == "the neighbours of a user in a session of 3 to 20 users, received 1 neighbours"
    assert params.setup_problem(0, [1, 2], 2) is None  # a complete session of three: as small as t(20) = 3 allows
    odd = SecAggParams(graph="sparse", neighbours=3, population=9)  # odd k, odd n: some users have k + 1 neighbours
    assert odd.setup_problem(0, [1, 2, 3, 4], 3) is None  # t of the nominal degree 3
    assert odd.setup_problem(0, [1, 2, 3, 4], 4) == "t = 3 for 4 neighbours, received t = 4"
    assert odd.setup_problem(0, [1, 2, 3, 4, 5], 3) is not None


def test_without_a_stated_population_the_floor_is_min_users_and_any_index_is_a_user() -> None:
    assert SecAggParams().session_floor() == 2
    params = SecAggParams(min_users=3)
    assert params.session_floor() == 3 and params.sessions_of_degree(1) is None
    assert params.setup_problem(5, [1000, 2000], 2) is None
    assert params.setup_problem(5, [1000], 2) == "the neighbours of a user in a session of at least 3 users, received 1 neighbours"
    assert params.setup_problem(5, [-3, 1], 2) == "neighbours with indices >= 0, received [-3]"


def test_the_floor_is_min_users_or_the_populations_threshold_and_at_most_the_population() -> None:
    assert SecAggParams(population=10).session_floor() == 6  # t(10)
    assert SecAggParams(population=10, min_users=8).session_floor() == 8
    assert SecAggParams(population=10, min_users=3).session_floor() == 3  # a deployment that accepts small sessions
    assert SecAggParams(population=10, min_users=50).session_floor() == 10
    assert SecAggParams(population=1).session_floor() == 1  # a population of one: its sessions hold one user
    assert SecAggParams().session_floor() == 2
    assert SecAggParams(graph="sparse", population=16).session_floor() == 5  # k = 8: t = 5
    assert SecAggParams(population=10).sessions_of_degree(7) == (8, 8)
    assert SecAggParams(graph="sparse", neighbours=4, population=20).sessions_of_degree(4) == (5, 20)
    assert SecAggParams(graph="sparse", population=64).sessions_of_degree(10) == (17, 32)  # 2 ceil(log2 n) = 10


@pytest.mark.parametrize(("field", "value", "key"), [("population", -1, "secagg.population"), ("min_users", -1, "secagg.min_users")])
def test_the_public_parameters_are_validated(field: str, value: int, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        SecAggParams(**{field: value})
    assert raised.value.key_path == key
