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

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...actors.actor import Actor
from ...errors import PartyTimeout, ProtocolViolation, SecAggAborted
from ...network.ledger import RejectReason
from ...network.party import SERVER, Party
from ...network.wire import bytes_field_size
from . import graph as graphs
from .crypto import KEY_BYTES, public_key_problem
from .ideal import IdealSum, IdealUser, RowBlock
from .messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from .params import SecAggParams, Stage
from .real import RealServer, RealUser, rows_of, x_of


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

    problem = params.setup_problem(me, setup.neighbours, setup.threshold)
    if problem is not None:
        actor.network.ledger.record_rejected(
            actor.now, server, actor.party, Setup.KIND, RejectReason.INVALID,  # type: ignore[attr-defined]
            f"{actor.party} expected a valid {Setup.KIND} from {server}: {problem}",  # type: ignore[attr-defined]
        )
        return outcome("refused")
    neighbours = set(setup.neighbours.tolist())
    t = setup.threshold
    backend = IdealUser(me, ideal, session, ring) if ideal is not None else RealUser(me, actor.rng, session, ring)

    try:
        if crashed(Stage.ADVERTISE_KEYS):
            return outcome("crashed")
        actor.send(server, Advertise(session, *backend.advertise()))
        completed.append(Stage.ADVERTISE_KEYS)

        keys: Keys = await _next(actor, Keys, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        owners = keys.owners.tolist()
        if not neighbours.issuperset(owners) or me in owners:
            raise ProtocolViolation(f"{actor.party} received keys of non-neighbours in session {session}")
        if len(owners) + 1 < t:
            return outcome("refused")
        if ideal is None:
            peers = {owner: (bytes(c), bytes(s)) for owner, c, s in zip(owners, keys.c_publics, keys.s_publics)}
            for owner, pair in peers.items():
                problem = next(filter(None, map(public_key_problem, pair)), None)
                if problem is not None:
                    raise ProtocolViolation(f"{actor.party} received user:{owner}'s keys in session {session}: {problem}")
        else:
            peers = dict.fromkeys(owners)  # ideal mode's keys are zeros: nothing agrees on them
        if crashed(Stage.SHARE_KEYS):
            return outcome("crashed")
        recipients, sealed = backend.share_rows(peers, t)
        actor.send(server, Shares(session, np.array(recipients, dtype=np.int32), sealed))
        del sealed
        completed.append(Stage.SHARE_KEYS)

        received: Ciphertexts = await _next(actor, Ciphertexts, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        senders = received.senders.tolist()
        sender_set = set(senders)
        if not peers.keys() >= sender_set:
            raise ProtocolViolation(f"{actor.party} received shares from users it gave no keys to in session {session}")
        backend.receive_rows(senders, received.ciphertexts)
        if len(senders) + 1 < t:
            return outcome("refused")
        if crashed(Stage.MASKED_INPUT):
            return outcome("crashed")
        # Real mode makes a sparse input dense only here, with no wait before it is masked and sent: every
        # user of a session waits at the stages before, and a dense copy held across them would cost each
        # user its whole input (m (m + 1) / 2 words for PriviRec's item-item sum) for the session's length.
        dense = x.dense() if ideal is None and isinstance(x, RowBlock) else x
        y = backend.mask(dense, senders)  # ideal mode: nothing (the functionality holds x), booked as padding
        # The input lives on in y's bytes (real) or with the functionality (ideal): this frame lets it go, so
        # a caller that handed it over keeps no copy while the session's last stage runs.
        del x, dense
        masked = y.astype(y.dtype.newbyteorder("<"), copy=False).tobytes()
        del y
        padding = bytes_field_size(setup.length * np.dtype(ring.dtype).itemsize) - bytes_field_size(len(masked))
        actor.send(server, Masked(session, masked), padding=padding)
        del masked  # the network holds the message's own encoding from here on
        completed.append(Stage.MASKED_INPUT)

        unmask: Unmask = await _next(actor, Unmask, session, min(deadline, actor.now + stage_s))  # type: ignore[assignment]
        survivors = set(unmask.survivors.tolist())
        if not survivors <= sender_set:
            raise ProtocolViolation(f"{actor.party} was told of survivors that sent it no shares in session {session}")
        if len(survivors) + 1 < t:
            return outcome("refused")
        if crashed(Stage.UNMASKING):
            return outcome("crashed")
        b_owners = sorted(survivors | {me})
        sk_owners = sorted(sender_set - survivors)
        b_shares, sk_shares = backend.reveal_rows(b_owners, sk_owners)
        actor.send(
            server,
            Reveal(session, np.array(b_owners, dtype=np.int32), b_shares, np.array(sk_owners, dtype=np.int32), sk_shares),
        )
        completed.append(Stage.UNMASKING)
        return outcome("done")
    except PartyTimeout:
        return outcome("timed_out")


# --------------------------------------------------------------------------------------------- server


class _Lists:
    """One list of positions per user of a session (`_Graph.among`), held as slices of one array: the user
    at place p has ``places[span(p)]`` and, as party indices, ``ids[span(p)]``. A message that carries a
    user's list carries a view of ``ids``, so the server's per-user work at each stage is a slice, not an
    array operation."""

    __slots__ = ("bounds", "ids", "places", "starts")

    def __init__(self, starts: np.ndarray, places: np.ndarray, index: np.ndarray) -> None:
        self.starts = starts
        self.bounds = starts.tolist()
        self.places = places
        self.ids = index[places]

    def span(self, place: int) -> slice:
        return slice(self.bounds[place], self.bounds[place + 1])


def _same(received: np.ndarray, expected: np.ndarray) -> bool:
    """``np.array_equal`` of a message's index array and the one the server expects, compared by bytes when
    both are integers of one dtype and shape (equal bytes then mean equal indices)."""
    if received.dtype == expected.dtype and received.dtype.kind in "iu" and received.shape == expected.shape:
        return received.tobytes() == expected.tobytes()
    return bool(np.array_equal(received, expected))


class _Neighbours(Mapping[Party, tuple[Party, ...]]):
    """A session's graph as `Aggregate.graph` gives it: each user's neighbours, ascending, made from the
    graph's places (`graphs.harary_places`) when asked for -- not one tuple per user per session, which the
    server built before and nobody read but the user that fell short of the threshold (`_Graph.check`)."""

    __slots__ = ("everyone", "places", "position")

    def __init__(self, everyone: Sequence[Party], position: Mapping[Party, int], places: Sequence[Sequence[int]]) -> None:
        self.everyone = everyone
        self.position = position
        self.places = places

    def __getitem__(self, party: Party) -> tuple[Party, ...]:
        return tuple(map(self.everyone.__getitem__, self.places[self.position[party]]))

    def __iter__(self) -> Iterator[Party]:
        return iter(self.everyone)

    def __len__(self) -> int:
        return len(self.everyone)


class _Graph:
    """A session's graph over the sorted users ``everyone``, given by ``places`` (`graphs.harary_places`:
    each user's neighbours by their positions): each user's neighbours as a slice of one array (ascending),
    so that the server's per-stage questions -- which neighbours are still in, how many -- are array
    operations, not loops over parties; ``graph`` is the same by party."""

    def __init__(self, everyone: Sequence[Party], places: Sequence[Sequence[int]]) -> None:
        self.everyone = everyone
        self.position = {party: place for place, party in enumerate(everyone)}
        self.graph = _Neighbours(everyone, self.position, places)
        sizes = np.fromiter(map(len, places), dtype=np.int64, count=len(everyone))
        self.starts = np.zeros(len(everyone) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.starts[1:])
        self.columns = np.fromiter(itertools.chain.from_iterable(places), dtype=np.int64, count=int(self.starts[-1]))
        self.rows = np.repeat(np.arange(len(everyone)), sizes)
        self.index = np.fromiter((party.index for party in everyone), dtype=np.int32, count=len(everyone))

    def among(self, mask: np.ndarray, *, itself: bool = False) -> _Lists:
        """Every user's neighbours in ``mask`` (with ``itself``: and the user itself), ascending, at once."""
        n = len(self.everyone)
        keep = mask[self.columns]
        rows, places = self.rows[keep], self.columns[keep]
        if itself:
            own = np.arange(n)
            keys = np.concatenate([rows * n + places, own * n + own])
            keys.sort()
            rows, places = np.divmod(keys, n)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=starts[1:])
        return _Lists(starts, places, self.index)

    def mask(self, parties: Sequence[Party]) -> np.ndarray:
        """The positions of ``parties`` as a boolean mask."""
        mask = np.zeros(len(self.everyone), dtype=bool)
        mask[[self.position[party] for party in parties]] = True
        return mask

    def around(self, party: Party) -> np.ndarray:
        """The positions of ``party``'s neighbours, ascending."""
        place = self.position[party]
        return self.columns[self.starts[place] : self.starts[place + 1]]

    def neighbours_in(self, party: Party, mask: np.ndarray) -> np.ndarray:
        """The positions of ``party``'s neighbours in ``mask``, ascending."""
        around = self.around(party)
        return around[mask[around]]

    def live(self, mask: np.ndarray) -> np.ndarray:
        """For each user, the users of its neighbourhood (itself included) in ``mask``."""
        return 1 + np.bincount(self.rows, weights=mask[self.columns], minlength=len(self.everyone)).astype(np.int64)

    def check(self, stage: Stage, alive: Sequence[Party], t: int) -> None:
        """Abort unless at least t users remain and every remaining user's neighbourhood holds t of them."""
        if len(alive) < t:
            raise SecAggAborted(stage.value, f"{len(alive)} users remain, the threshold is t = {t}")
        mask = self.mask(alive)
        live = self.live(mask)
        short = np.flatnonzero(mask & (live < t))
        if short.size:
            party = self.everyone[int(short[0])]  # the first of ``alive`` (sorted) that falls short
            raise SecAggAborted(
                stage.value,
                f"{live[short[0]]} of the {len(self.graph[party]) + 1} users of {party}'s neighbourhood remain, the "
                f"threshold is t = {t}",
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


def _route(
    graph: _Graph, u2: Sequence[Party], advertisers: _Lists, shared: Mapping[Party, Shares]
) -> dict[Party, tuple[np.ndarray, np.ndarray]]:
    """Each user of ``u2``'s sealed pairs from the others of ``u2``: (senders ascending, one row each).

    ``shared[u]`` holds one row per position of u's list in ``advertisers`` (u's neighbours that
    advertised, ascending: the server checked it); the rows addressed to users outside U2 stay with the
    server."""
    if not u2:
        return {}
    senders = np.fromiter(map(graph.position.__getitem__, u2), dtype=np.int64, count=len(u2))
    firsts, counts = advertisers.starts[senders], np.diff(advertisers.starts)[senders]
    # The senders' lists one after the other: list i is places[firsts[i] : firsts[i] + counts[i]].
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    recipients = advertisers.places[np.repeat(firsts, counts) + within]
    origin = np.repeat(graph.index[senders], counts)
    rows = np.concatenate([shared[party].ciphertexts for party in u2])
    in_u2 = np.zeros(len(graph.everyone), dtype=bool)
    in_u2[senders] = True
    kept = np.flatnonzero(in_u2[recipients])
    # The positions in the narrowest unsigned type: numpy sorts integers of up to 16 bits (fewer than 65,536 users)
    # stably by radix, in linear time. Stable, and u2 is sorted: senders stay ascending within each recipient.
    keys = recipients[kept].astype(np.min_scalar_type(len(graph.everyone)))
    order = kept[np.argsort(keys, kind="stable")]  # one gather of the rows (80 MB at Gowalla's 29,858 users)
    recipients, origin, rows = recipients[order], origin[order], rows[order]
    starts = np.searchsorted(recipients, senders, side="left").tolist()
    stops = np.searchsorted(recipients, senders, side="right").tolist()
    return {party: (origin[start:stop], rows[start:stop]) for party, start, stop in zip(u2, starts, stops)}


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
    places = graphs.complete_places(n) if params.graph == "complete" else graphs.harary_places(n, degree, server.rng)
    net = _Graph(everyone, places)
    index = net.index
    every = _Lists(net.starts, net.columns, index)
    for place, party in enumerate(everyone):
        server.send(party, Setup(session, ring.bits, length, t, every.ids[every.span(place)]))

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
    net.check(Stage.ADVERTISE_KEYS, u1, t)
    in_u1 = net.mask(u1)
    c_publics = np.zeros((n, KEY_BYTES), dtype=np.uint8)
    s_publics = np.zeros((n, KEY_BYTES), dtype=np.uint8)
    if u1:
        places = [net.position[party] for party in u1]
        c_publics[places] = rows_of([advertised[party].c_public for party in u1], KEY_BYTES)
        s_publics[places] = rows_of([advertised[party].s_public for party in u1], KEY_BYTES)
    advertisers = net.among(in_u1)  # each user's neighbours that advertised, and their keys in that order
    c_rows, s_rows = c_publics.take(advertisers.places, axis=0), s_publics.take(advertisers.places, axis=0)
    for party in u1:
        span = advertisers.span(net.position[party])
        server.send(party, Keys(session, advertisers.ids[span], c_rows[span], s_rows[span]))
    del c_rows, s_rows

    # ShareKeys
    def shares_problem(party: Party, body: Shares) -> str | None:
        expected = advertisers.ids[advertisers.span(net.position[party])]
        if _same(body.recipients, expected):
            return None
        return f"shares for users {expected.tolist()}, received them for {body.recipients.tolist()}"

    shared: dict[Party, Shares] = await state.collect(Stage.SHARE_KEYS, Shares, u1, shares_problem)  # type: ignore[assignment]
    u2 = tuple(sorted(shared))
    state.stages[Stage.SHARE_KEYS] = u2
    net.check(Stage.SHARE_KEYS, u2, t)
    routed = _route(net, u2, advertisers, shared)
    for party in u2:
        server.send(party, Ciphertexts(session, *routed.pop(party)))  # views of every sealed pair: none stays
    del shared, advertisers

    # MaskedInputCollection
    word = np.dtype(ring.dtype).newbyteorder("<")

    expected_bytes = 0 if ideal is not None else length * word.itemsize  # ideal: the functionality holds y

    def masked_problem(party: Party, body: Masked) -> str | None:
        size = len(body.masked)
        return None if size == expected_bytes else f"{length} words, received {size} bytes"

    masked: dict[Party, Masked] = await state.collect(Stage.MASKED_INPUT, Masked, u2, masked_problem)  # type: ignore[assignment]
    u3 = tuple(sorted(masked))
    state.stages[Stage.MASKED_INPUT] = u3
    net.check(Stage.MASKED_INPUT, u3, t)
    total = np.zeros(length, dtype=ring.dtype)
    for party in u3 if ideal is None else ():
        np.add(total, np.frombuffer(masked[party].masked, dtype=word), out=total)  # mod 2^b, in place
    del masked
    in_u2, in_u3 = net.mask(u2), net.mask(u3)
    survivors = net.among(in_u3)
    for party in u3:
        server.send(party, Unmask(session, survivors.ids[survivors.span(net.position[party])]))

    # Unmasking: each holder is asked for its shares of b of its neighbours in U3 and itself, and of s^SK of
    # its neighbours in U2 \ U3 (positions, ascending).
    dropped = in_u2 & ~in_u3
    b_lists, sk_lists = net.among(in_u3, itself=True), net.among(dropped)

    # What each holder whose reply was checked was asked for (a gather checks one reply per sender).
    asked: dict[Party, tuple[np.ndarray, np.ndarray]] = {}

    def reveal_problem(holder: Party, body: Reveal) -> str | None:
        place = net.position[holder]
        b_span, sk_span = b_lists.span(place), sk_lists.span(place)
        asked[holder] = (b_lists.places[b_span], sk_lists.places[sk_span])
        want_b, want_sk = b_lists.ids[b_span], sk_lists.ids[sk_span]
        if _same(body.b_owners, want_b) and _same(body.sk_owners, want_sk):
            return None
        return (f"shares of b of {want_b.tolist()} and of s^SK of {want_sk.tolist()}, received them of "
                f"{body.b_owners.tolist()} and {body.sk_owners.tolist()}")

    revealed: dict[Party, Reveal] = await state.collect(Stage.UNMASKING, Reveal, u3, reveal_problem)  # type: ignore[assignment]
    u5 = tuple(sorted(revealed))
    state.stages[Stage.UNMASKING] = u5
    if len(u5) < t:
        raise SecAggAborted(Stage.UNMASKING.value, f"{len(u5)} users revealed shares, the threshold is t = {t}")
    asked = {holder: asked[holder] for holder in u5}
    none = np.zeros(0, dtype=np.int64)
    b_count = np.bincount(np.concatenate([none, *(b for b, _ in asked.values())]), minlength=n)
    sk_count = np.bincount(np.concatenate([none, *(sk for _, sk in asked.values())]), minlength=n)
    # The secrets to rebuild: b of each user in U3; s^SK of each user in U2 \ U3 with a neighbour in U3.
    partnered = np.flatnonzero(dropped & (net.live(in_u3) > 1))
    for what, owners, count in (("b", np.flatnonzero(in_u3), b_count), ("s^SK", partnered, sk_count)):
        short = owners[count[owners] < t]
        if short.size:
            raise SecAggAborted(
                Stage.UNMASKING.value,
                f"{count[short[0]]} shares of {what} of user:{index[short[0]]} were revealed, the threshold is t = {t}",
            )
    if ideal is not None:
        total = ideal.release(session, index[in_u3].tolist(), ring, length)
    else:
        total = _unmask_real(session, ring, total, net, advertised, revealed, asked, partnered, in_u3, t)
    return Aggregate(session, total, t, degree, net.graph, dict(state.stages), dict(state.rejected))


def _unmask_real(  # type: ignore[no-untyped-def]
    session: int, ring, total: np.ndarray, net: _Graph, advertised, revealed, asked, partnered: np.ndarray,
    in_u3: np.ndarray, t: int,
) -> np.ndarray:
    """Real mode: the revealed shares by secret (x-coordinate -> share) and `RealServer.unmask`."""
    index = net.index
    b_shares: dict[int, dict[int, bytes]] = {int(owner): {} for owner in index[in_u3]}
    partners = {int(index[place]): index[net.neighbours_in(net.everyone[place], in_u3)].tolist() for place in partnered}
    sk_shares: dict[int, dict[int, bytes]] = {owner: {} for owner in partners}
    for holder, message in revealed.items():
        want_b, want_sk = asked[holder]
        for owner, row in zip(index[want_b].tolist(), message.b_shares):
            b_shares[owner][x_of(holder.index)] = bytes(row)
        for owner, row in zip(index[want_sk].tolist(), message.sk_shares):
            if owner in sk_shares:
                sk_shares[owner][x_of(holder.index)] = bytes(row)
    s_publics = {party.index: advertised[party].s_public for party in advertised}
    return RealServer(session, ring).unmask(total, s_publics, b_shares, sk_shares, partners, t)


__all__ = ["Aggregate", "Contribution", "aggregate", "participate"]
