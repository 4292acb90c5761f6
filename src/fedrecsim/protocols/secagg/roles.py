"""The two sides of a session as stage-by-stage state machines: `participate` (a user) and `aggregate`
(the server). A calling protocol's own actors call them inside their run: the server awaits `aggregate`
with the users it wants summed, and each of those users awaits `participate` with its input.

Stage by stage (Bonawitz et al. 2017, Fig. 4, without ConsistencyCheck), U_i the users still in:

1. Setup: the server draws the graph and sends each user in U0 its neighbours and t.
2. AdvertiseKeys: users send (c^PK, s^PK); U1 = who did. The server sends each u in U1 the keys of
   N(u) n U1.
3. ShareKeys: users send sealed shares for N(u) n U1; U2 = who did. The server forwards each u in U2 the
   ciphertexts addressed to it by N(u) n U2.
4. MaskedInputCollection: users send y_u; U3 = who did. The server sends each u in U3 the list N(u) n U3.
5. Unmasking: users send their shares of b_v (v in U3 or itself) and of s_v^SK (v in N(u) n U2 \\ U3);
   U5 = who did. The server reconstructs and removes the masks.

What a user sends that the protocol does not allow -- a public key that is not a usable X25519 key (of
another length, or a point of small order, with which no key agreement works), shares for other
recipients than its neighbours that advertised, a masked input of the wrong length, shares of other users
than those asked for -- is rejected by the server (recorded in the ledger) and the user counts as dropped
at that stage: a single user can make itself drop out, never stop the session. Its neighbours never see
a key the server rejected, so they make no pairwise mask with its owner.

A user checks the server's setup against the public parameters (`SecAggParams.setup_problem`: t, and
its neighbours' number and indices) before it sends anything: a setup they do not allow is recorded in
the ledger as the user's rejection of the server's message, and the user takes no part in the session
(``refused``) -- its keys, shares and masked input never leave it.

Abort rule (the server): after each stage, if fewer than t users remain, or some remaining user's
neighbourhood (itself included) holds fewer than t remaining users, or -- at Unmasking -- a secret the
server must reconstruct has fewer than t revealed shares, the session ends with `SecAggAborted` naming
the stage. For the complete graph this is Bonawitz's "|U_i| >= t". A user refuses (stops, sending
nothing more) when its own view has fewer than t users in it -- the user-side check of the paper.

Departures: stages run on virtual deadlines (the server waits at most ``stage_timeout_s`` per stage);
a user excluded by the server (e.g. too slow) waits for the next message until the caller's
``deadline``; users never learn the sum (the calling protocol broadcasts it if it wants to).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...actors.actor import Actor
from ...errors import PartyTimeout, ProtocolViolation, SecAggAborted
from ...network.ledger import RejectReason
from ...network.party import SERVER, Party, Role
from ...network.wire import bytes_field_size
from . import graph as graphs
from .crypto import CIPHERTEXT_BYTES, KEY_BYTES, public_key_problem
from .ideal import IdealServer, IdealSum, IdealUser, RowBlock
from .messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from .params import SecAggParams, Stage
from .real import RealServer, RealUser, x_of
from .shamir import SHARE_BYTES


@dataclass(frozen=True)
class Contribution:
    """How one user's part in a session ended.

    Attributes:
        session: the session it took part in (None if no setup came before the deadline).
        completed: the stages it completed, in order.
        outcome: ``done`` (revealed its shares), ``crashed``, ``timed_out`` (the server moved on
            without it, or never started), ``refused`` (the setup broke the public parameters, or its view
            fell below the threshold) or ``missed``
            (asked for one session, it found a later one set up: the server had set this one up without it).
        held: setups of later sessions taken from the mailbox and left for the user's next call (``held``).
    """

    session: int | None
    completed: tuple[Stage, ...]
    outcome: str
    held: tuple[Setup, ...] = ()


@dataclass(frozen=True)
class Aggregate:
    """The result of a session at the server.

    Attributes:
        session: the session id.
        total: the sum over `survivors` of their inputs, ring elements of length ``length``.
        threshold: t.
        degree: k, the nominal number of neighbours of a user.
        graph: each user's neighbours (as drawn by the server).
        stages: who completed each stage (U1, U2, U3, U5), sorted.
        rejected: who was dropped at each stage for sending what the protocol does not allow (an invalid
            key, shares for the wrong users ...), sorted; the ledger holds each rejection's reason.
    """

    session: int
    total: np.ndarray
    threshold: int
    degree: int
    graph: Mapping[Party, tuple[Party, ...]]
    stages: Mapping[Stage, tuple[Party, ...]] = field(default_factory=dict)
    rejected: Mapping[Stage, tuple[Party, ...]] = field(default_factory=dict)

    @property
    def survivors(self) -> tuple[Party, ...]:
        """U3: the users whose inputs are in `total`."""
        return self.stages[Stage.MASKED_INPUT]


def _user(index: int) -> Party:
    return Party(Role.USER, index)


def _indices(parties: Sequence[Party]) -> np.ndarray:
    return np.array([party.index for party in parties], dtype=np.int32)


def _rows(blobs: Sequence[bytes], width: int) -> np.ndarray:
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), width)


# --------------------------------------------------------------------------------------------- user


async def _next(actor: Actor, kind: type, session: int, deadline: float) -> object:
    """The next ``kind`` of ``session`` from the server until ``deadline``, discarding those of other sessions."""
    server = getattr(actor, "server", SERVER)
    while True:
        envelope = await actor.recv(kind, deadline=deadline, sender=server)
        if envelope.body.session == session:
            return envelope.body


#: A user waits for the server's next message of a session at most this many stage timeouts: the server
#: ends a stage within one, so a user still waiting after two was left behind (its message was lost or
#: late) and gives up on the session in time for the next one.
STAGE_WAITS = 2.0


async def participate(
    actor: Actor,
    x: np.ndarray | RowBlock,
    params: SecAggParams,
    *,
    deadline: float,
    ideal: IdealSum | None = None,
    crash: Callable[[int, Stage], bool] | None = None,
    after: int = 0,
    stage_s: float = math.inf,
    session: int | None = None,
    held: tuple[Setup, ...] = (),
) -> Contribution:
    """Take part, as ``actor``, in the next session the server sets up (or in ``session``), with input ``x``.

    Args:
        actor: the calling protocol's user actor (its ``rng`` draws the keys, seeds and polynomials).
        x: the input, ``length`` ring elements of ``params.ring`` (encode reals with ``ring.encode``), or
            the same as a `RowBlock` of ring elements: deposited as it is in ideal mode, made dense in real.
        params: the session's parameters, as the server's (``ideal`` must agree with it).
        deadline: the virtual time after which the user stops waiting for the server.
        ideal: the ideal functionality, in ideal mode (``params.ideal``).
        crash: called with the session id and the stage before the user sends its message of each stage;
            True means the user has just crashed (the callback detached it, e.g. ``User.crashes_in``) and
            it sends nothing more.
        after: the last session this user took part in: a setup of it or of an earlier one (a copy the
            network duplicated, or one overtaken) is ignored, so a user takes part in a session once.
        stage_s: once set up, the user waits for each of the session's next messages at most this long
            (and never past ``deadline``): a user the server left behind -- its message lost or late --
            gives up on the session (``timed_out``) in time for the next one.
        session: the one session to take part in (a caller whose sessions need different inputs): a setup
            of an earlier one is stale, and a setup of a later one means this one went on without the user
            (its setup was lost): it returns ``missed`` at once, holding the later setups for its next call.
        held: the setups a previous call held (`Contribution.held`), looked at before the mailbox.

    Raises:
        ProtocolViolation: the server sent what the protocol does not allow (a length or ring other than
            the input's, keys or shares from non-neighbours, an invalid key it should have rejected, an
            unknown survivor), or a sealed share failed authentication. A setup whose threshold or
            neighbours the public parameters do not allow is not raised: the user records it in the
            ledger and refuses the session.
    """
    server = getattr(actor, "server", SERVER)
    completed: list[Stage] = []

    def crashed(stage: Stage) -> bool:
        return crash is not None and crash(session, stage)

    # The wanted session's setup, or else the newest; any other is stale (a copy the network duplicated,
    # or overtaken), except, when one session is wanted, the later ones, which the caller holds.
    lowest = after + 1 if session is None else session
    setups = [*held, *(envelope.body for envelope in actor.drain(Setup) if envelope.src == server)]
    setups = [body for body in setups if body.session >= lowest]
    try:
        while not setups:
            body = (await actor.recv(Setup, deadline=deadline, sender=server)).body
            if body.session >= lowest:
                setups.append(body)
    except PartyTimeout:
        return Contribution(None, (), "timed_out")
    later = tuple(body for body in setups if session is not None and body.session > session)
    wanted = [body for body in setups if session is None or body.session == session]
    if not wanted:
        return Contribution(None, (), "missed", later)
    setup: Setup = max(wanted, key=lambda body: body.session)
    session, ring, me = setup.session, params.ring, actor.party.index
    if setup.bits != ring.bits or setup.length != x.size or x.dtype != ring.dtype:
        raise ProtocolViolation(
            f"{actor.party} holds {x.size} words of {x.dtype}, session {session} sums {setup.length} words of "
            f"Z_2^{setup.bits}"
        )

    def outcome(result: str) -> Contribution:
        return Contribution(session, tuple(completed), result, later)

    problem = params.setup_problem(me, setup.neighbours.tolist(), setup.threshold)
    if problem is not None:
        actor.network.ledger.record_rejected(
            actor.now, server, actor.party, Setup.KIND, RejectReason.INVALID,  # type: ignore[attr-defined]
            f"{actor.party} expected a valid {Setup.KIND} from {server}: {problem}",  # type: ignore[attr-defined]
        )
        return outcome("refused")
    neighbours = {int(index) for index in setup.neighbours}
    t = setup.threshold
    backend = IdealUser(me, ideal, session, ring) if ideal is not None else RealUser(me, actor.rng, session, ring)
    if ideal is None and isinstance(x, RowBlock):
        x = x.dense()

    try:
        if crashed(Stage.ADVERTISE_KEYS):
            return outcome("crashed")
        actor.send(server, Advertise(session, *backend.advertise()))
        completed.append(Stage.ADVERTISE_KEYS)

        keys: Keys = await _next(actor, Keys, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        owners = [int(index) for index in keys.owners]
        if not set(owners) <= neighbours or me in owners:
            raise ProtocolViolation(f"{actor.party} received keys of non-neighbours in session {session}")
        if len(owners) + 1 < t:
            return outcome("refused")
        peers = {owner: (bytes(c), bytes(s)) for owner, c, s in zip(owners, keys.c_publics, keys.s_publics)}
        for owner, pair in peers.items() if ideal is None else ():
            problem = next(filter(None, map(public_key_problem, pair)), None)
            if problem is not None:
                raise ProtocolViolation(f"{actor.party} received user:{owner}'s keys in session {session}: {problem}")
        if crashed(Stage.SHARE_KEYS):
            return outcome("crashed")
        sealed = backend.share(peers, t)
        recipients = sorted(sealed)
        actor.send(server, Shares(session, np.array(recipients, dtype=np.int32), _rows([sealed[r] for r in recipients], CIPHERTEXT_BYTES)))
        completed.append(Stage.SHARE_KEYS)

        received: Ciphertexts = await _next(actor, Ciphertexts, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        senders = [int(index) for index in received.senders]
        if not set(senders) <= set(peers):
            raise ProtocolViolation(f"{actor.party} received shares from users it gave no keys to in session {session}")
        backend.receive({sender: bytes(row) for sender, row in zip(senders, received.ciphertexts)})
        if len(senders) + 1 < t:
            return outcome("refused")
        if crashed(Stage.MASKED_INPUT):
            return outcome("crashed")
        y = backend.mask(x, senders)  # ideal mode: nothing (the functionality holds x), booked as padding
        # The input lives on in y's bytes (real) or with the functionality (ideal): this frame lets it go, so
        # a caller that handed it over keeps no copy while the session's last stage runs.
        del x
        masked = y.astype(y.dtype.newbyteorder("<"), copy=False).tobytes()
        del y
        padding = bytes_field_size(setup.length * np.dtype(ring.dtype).itemsize) - bytes_field_size(len(masked))
        actor.send(server, Masked(session, masked), padding=padding)
        completed.append(Stage.MASKED_INPUT)

        unmask: Unmask = await _next(actor, Unmask, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        survivors = {int(index) for index in unmask.survivors}
        if not survivors <= set(senders):
            raise ProtocolViolation(f"{actor.party} was told of survivors that sent it no shares in session {session}")
        if len(survivors) + 1 < t:
            return outcome("refused")
        if crashed(Stage.UNMASKING):
            return outcome("crashed")
        b_owners = sorted(survivors | {me})
        sk_owners = sorted(set(senders) - survivors)
        b_shares, sk_shares = backend.reveal(b_owners, sk_owners)
        actor.send(
            server,
            Reveal(session, np.array(b_owners, dtype=np.int32), _rows(b_shares, SHARE_BYTES),
                   np.array(sk_owners, dtype=np.int32), _rows(sk_shares, SHARE_BYTES)),
        )
        completed.append(Stage.UNMASKING)
        return outcome("done")
    except PartyTimeout:
        return outcome("timed_out")


# --------------------------------------------------------------------------------------------- server


def _check(stage: Stage, alive: Sequence[Party], graph: Mapping[Party, tuple[Party, ...]], t: int) -> None:
    """Abort unless at least t users remain and every remaining user's neighbourhood holds t of them."""
    if len(alive) < t:
        raise SecAggAborted(stage.value, f"{len(alive)} users remain, the threshold is t = {t}")
    remaining = set(alive)
    for party in alive:
        live = 1 + sum(neighbour in remaining for neighbour in graph[party])
        if live < t:
            raise SecAggAborted(
                stage.value,
                f"{live} of the {len(graph[party]) + 1} users of {party}'s neighbourhood remain, the threshold is t = {t}",
            )


class _Session:
    """The server's state of one session: who is in after each stage, and what it collected."""

    def __init__(self, server: Actor, params: SecAggParams, session: int, deadline: float) -> None:
        self.server = server
        self.params = params
        self.session = session
        self.deadline = deadline
        self.stages: dict[Stage, tuple[Party, ...]] = {}
        self.rejected: dict[Stage, tuple[Party, ...]] = {}

    async def collect(
        self, stage: Stage, kind: type, expected: Sequence[Party], validate: Callable[[Party, object], str | None] | None = None
    ) -> dict[Party, object]:
        """The stage's replies of ``expected`` users; one that ``validate`` refuses is rejected, its user
        dropped from the stage and listed in ``rejected``."""
        session = self.session
        deadline = min(self.deadline, self.server.now + self.params.stage_timeout_s)
        replies = await self.server.gather(
            kind, expected, deadline=deadline, accept=lambda body: body.session == session, validate=validate
        )
        self.rejected[stage] = tuple(replies.rejected)
        return dict(replies)


async def aggregate(
    server: Actor,
    users: Sequence[Party],
    length: int,
    params: SecAggParams,
    *,
    session: int,
    deadline: float,
    ideal: IdealSum | None = None,
) -> Aggregate:
    """Run one session as ``server`` over ``users``: the sum of the inputs of the users that stay (U3).

    Args:
        server: the calling protocol's server actor (its ``rng`` draws the sparse graph).
        users: the users to sum (they must be awaiting `participate`).
        length: the number of ring elements in each input.
        params: the session's parameters.
        session: an id distinct from every other session of the run (messages carry it).
        deadline: the virtual time by which the session must end; each stage waits at most
            ``params.stage_timeout_s`` and never past it.
        ideal: the ideal functionality, in ideal mode (``params.ideal``).

    Raises:
        SecAggAborted: after a stage too few users remain (module docstring); names the stage. A user that
            sent what the protocol does not allow is rejected and dropped from its stage (module docstring).
    """
    if params.ideal != (ideal is not None):
        raise ValueError("ideal mode needs the IdealSum functionality, and real mode must not have one")
    ring = params.ring
    state = _Session(server, params, session, deadline)
    everyone = sorted(set(users))
    n = len(everyone)
    degree = params.degree(n)
    t = params.threshold_for(n)
    graph = graphs.complete(everyone) if params.graph == "complete" else graphs.harary(everyone, degree, server.rng)
    for party in everyone:
        server.send(party, Setup(session, ring.bits, length, t, _indices(graph[party])))

    # AdvertiseKeys
    def keys_problem(party: Party, body: Advertise) -> str | None:
        sizes = (len(body.c_public), len(body.s_public))
        if sizes != (KEY_BYTES, KEY_BYTES):
            return f"two {KEY_BYTES}-byte public keys, received {sizes}"
        if ideal is not None:
            return None  # ideal mode's keys are zeros of the real size: nothing agrees on them
        return next(filter(None, map(public_key_problem, (body.c_public, body.s_public))), None)

    advertised: dict[Party, Advertise] = await state.collect(Stage.ADVERTISE_KEYS, Advertise, everyone, keys_problem)  # type: ignore[assignment]
    u1 = tuple(sorted(advertised))
    state.stages[Stage.ADVERTISE_KEYS] = u1
    _check(Stage.ADVERTISE_KEYS, u1, graph, t)
    for party in u1:
        owners = [peer for peer in graph[party] if peer in advertised]
        server.send(party, Keys(
            session, _indices(owners),
            _rows([advertised[peer].c_public for peer in owners], 32),
            _rows([advertised[peer].s_public for peer in owners], 32),
        ))

    # ShareKeys
    def recipients_of(party: Party) -> list[int]:
        return [peer.index for peer in graph[party] if peer in advertised]

    def shares_problem(party: Party, body: Shares) -> str | None:
        expected = recipients_of(party)
        received = body.recipients.tolist()
        return None if received == expected else f"shares for users {expected}, received them for {received}"

    shared: dict[Party, Shares] = await state.collect(Stage.SHARE_KEYS, Shares, u1, shares_problem)  # type: ignore[assignment]
    u2 = tuple(sorted(shared))
    state.stages[Stage.SHARE_KEYS] = u2
    _check(Stage.SHARE_KEYS, u2, graph, t)
    inbox: dict[Party, list[tuple[int, np.ndarray]]] = {party: [] for party in u2}
    for sender in u2:
        for recipient, row in zip(recipients_of(sender), shared[sender].ciphertexts):
            if _user(recipient) in inbox:
                inbox[_user(recipient)].append((sender.index, row))
    for party in u2:
        rows = inbox[party]  # in sorted sender order: u2 is sorted
        server.send(party, Ciphertexts(
            session, np.array([sender for sender, _ in rows], dtype=np.int32),
            np.stack([row for _, row in rows]) if rows else np.zeros((0, CIPHERTEXT_BYTES), dtype=np.uint8),
        ))

    # MaskedInputCollection
    word = np.dtype(ring.dtype).newbyteorder("<")

    expected_bytes = 0 if ideal is not None else length * word.itemsize  # ideal: the functionality holds y

    def masked_problem(party: Party, body: Masked) -> str | None:
        size = len(body.masked)
        return None if size == expected_bytes else f"{length} words, received {size} bytes"

    masked: dict[Party, Masked] = await state.collect(Stage.MASKED_INPUT, Masked, u2, masked_problem)  # type: ignore[assignment]
    u3 = tuple(sorted(masked))
    state.stages[Stage.MASKED_INPUT] = u3
    _check(Stage.MASKED_INPUT, u3, graph, t)
    total = np.zeros(length, dtype=ring.dtype)
    for party in u3 if ideal is None else ():
        total = ring.add(total, np.frombuffer(masked[party].masked, dtype=word).astype(ring.dtype))
    in_u2, in_u3 = set(u2), set(u3)
    for party in u3:
        server.send(party, Unmask(session, _indices([peer for peer in graph[party] if peer in in_u3])))

    # Unmasking
    def wanted(holder: Party) -> tuple[list[int], list[int]]:
        """The owners whose shares of b, and of s^SK, the server asks ``holder`` for."""
        want_b = sorted({peer.index for peer in graph[holder] if peer in in_u3} | {holder.index})
        want_sk = [peer.index for peer in graph[holder] if peer in in_u2 and peer not in in_u3]
        return want_b, want_sk

    def reveal_problem(holder: Party, body: Reveal) -> str | None:
        want_b, want_sk = wanted(holder)
        received = (body.b_owners.tolist(), body.sk_owners.tolist())
        if received == (want_b, want_sk):
            return None
        return f"shares of b of {want_b} and of s^SK of {want_sk}, received them of {received[0]} and {received[1]}"

    revealed: dict[Party, Reveal] = await state.collect(Stage.UNMASKING, Reveal, u3, reveal_problem)  # type: ignore[assignment]
    u5 = tuple(sorted(revealed))
    state.stages[Stage.UNMASKING] = u5
    if len(u5) < t:
        raise SecAggAborted(Stage.UNMASKING.value, f"{len(u5)} users revealed shares, the threshold is t = {t}")
    dropped = sorted(in_u2 - in_u3)
    partners = {v.index: [u.index for u in graph[v] if u in in_u3] for v in dropped}
    b_shares: dict[int, dict[int, bytes]] = {party.index: {} for party in u3}
    sk_shares: dict[int, dict[int, bytes]] = {v: {} for v, survivors in partners.items() if survivors}
    for holder in u5:
        message = revealed[holder]
        want_b, want_sk = wanted(holder)
        for owner, row in zip(want_b, message.b_shares):
            b_shares[owner][x_of(holder.index)] = bytes(row)
        for owner, row in zip(want_sk, message.sk_shares):
            if owner in sk_shares:
                sk_shares[owner][x_of(holder.index)] = bytes(row)
    for what, shares in (("b", b_shares), ("s^SK", sk_shares)):
        for owner, held in sorted(shares.items()):
            if len(held) < t:
                raise SecAggAborted(
                    Stage.UNMASKING.value,
                    f"{len(held)} shares of {what} of user:{owner} were revealed, the threshold is t = {t}",
                )
    backend = IdealServer(ideal, session, ring) if ideal is not None else RealServer(session, ring)
    s_publics = {party.index: advertised[party].s_public for party in u1}
    total = backend.unmask(total, s_publics, b_shares, sk_shares, partners, t)
    return Aggregate(session, total, t, degree, graph, dict(state.stages), dict(state.rejected))


__all__ = ["Aggregate", "Contribution", "aggregate", "participate"]
