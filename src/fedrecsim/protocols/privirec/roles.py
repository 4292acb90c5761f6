"""PriviRec's parties: users that hold their rows and compute their inputs to the secure sums, and a
server that coordinates the sums, normalizes, factorizes and broadcasts (Figs. 1, 4 and 5).

A user goes through the phases in order -- degrees, (PriviRec) item-item, power iterations 1..L, the
filters -- and remembers where it is: one that crashed mid-iteration (the scenario's dropout) is started
again at the next round boundary and waits for the next broadcast basis, so it misses exactly the sum it
crashed in. Secure aggregation (`fedrecsim.protocols.secagg`) runs inside each phase with the user's own
actor; its recovery removes a crashed user's masks, so the server gets the sum over the users that sent
their masked inputs (U3).

Memory. Every user's input to a sum is alive at once while the sum runs (each waits for the others), so
it must be alive once: a user encodes its input as soon as it has computed it, keeps only the encoding
(``pending``) and hands that over to secure aggregation (`PriviRecUser._sum_pending`), whose state machine
lets it go once it is deposited with the ideal functionality or masked. The inputs then cost the
functionality's copy, n_u x (p + 1) words per user of a power iteration -- not that and the reals and
their encoding in the user's frames, which tripled PriviRec-k's peak (at ML-1M's shape, k = 256: 5.5 GB
of RSS, now 2.5 GB; `traffic.memory` estimates it).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import trio

from ...actors.server import Server
from ...actors.user import User
from ...errors import PartyTimeout, ProtocolViolation
from ...models.gfcf import GraphFilters, qr_positive
from ...network.party import Party
from ..secagg import STAGE_WAITS, Aggregate, IdealSum, RowBlock, SecAggParams, Stage, aggregate, participate
from ..secagg.messages import Setup
from . import local
from .messages import Basis, Degrees, Filters, ItemItem

#: Secure-aggregation session ids: the degrees, P', and power iteration l is ``POWER + l``.
DEGREES_SESSION, ITEM_ITEM_SESSION, POWER = 1, 2, 2
_STAGES = tuple(Stage)


_SHARED_ITEM_ITEM: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def shared_item_item(upper: np.ndarray, n_items: int) -> np.ndarray:
    """The dense, read-only P~ of the broadcast upper triangle ``upper``: one copy per received body.

    The network decodes a large broadcast's body once and hands every receiver that one read-only body
    (`fedrecsim.network.wire`, Broadcasts); its dense form is a function of it alone, so the receivers
    of one body share one read-only dense m x m matrix too, instead of one per user (ML-1M: 5,949 x 105
    MiB). A writeable ``upper`` (a body of its receiver's own) gets a copy of its own, read-only as well.
    The matrix is a view of immutable bytes, so no receiver can make it writeable again (an array that
    owns its memory can be, whoever set it read-only). The entry lives as long as the body does."""
    key = id(upper)
    entry = _SHARED_ITEM_ITEM.get(key)
    if entry is not None and entry[0]() is upper:
        return entry[1]
    built = local.symmetric_from_upper(upper, n_items)
    dense = np.frombuffer(built.tobytes(), dtype=built.dtype).reshape(built.shape)
    del built
    if not upper.flags.writeable:
        _SHARED_ITEM_ITEM[key] = (weakref.ref(upper), dense)
        weakref.finalize(upper, _SHARED_ITEM_ITEM.pop, key, None)
    return dense


def session_round(session: int) -> int:
    """The run round a session belongs to: 0 (the set-up) for the degrees and P', l for iteration l."""
    return max(session - POWER, 0)


class PriviRecUser(User):
    """Holds its items; takes part in every secure sum; keeps the broadcast results.

    Args:
        items: the user's items (sorted, unique).
        n_items: m.
        params: the sessions' parameters (ring, graph, threshold, ideal).
        ideal: the ideal functionality in ideal mode.
        exact_item_item: PriviRec (True) or PriviRec-k (False).
        iterations: L.
        stage_rng: draws the secure-aggregation stage at which this user crashes when it does.
        crash_stage: that stage, or None to draw it uniformly.
        ideal_k: the leading columns of S_k in the user's F_IDL (0: all).
        alpha: the normalization's exponent (`fedrecsim.models.gfcf`).
    """

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, items: np.ndarray, n_items: int, params: SecAggParams, ideal: IdealSum | None,
        *, exact_item_item: bool, iterations: int, stage_rng: np.random.Generator, crash_stage: Stage | None = None,
        ideal_k: int = 0, alpha: float = 0.5,
    ) -> None:
        super().__init__(party, network, rng)
        self.alpha = alpha
        self.items = np.asarray(items, dtype=np.int64)
        self.n_items = n_items
        self.params = params
        self.ideal = ideal
        self.exact_item_item = exact_item_item
        self.iterations = iterations
        self.stage_rng = stage_rng
        self.crash_stage = crash_stage
        self.ideal_k = ideal_k
        self._drawn: Stage | None = None
        self.phase = "degrees"
        self.next_iteration = 1
        self.degrees: np.ndarray | None = None
        self.weights: np.ndarray | None = None
        """A^(u)'s nonzero entries (`local.row_weights`), once the degrees came."""
        self.item_item: np.ndarray | None = None
        self.filters: GraphFilters | None = None
        self.sessions: dict[int, str] = {}
        """How this user's part in each session ended (`Contribution.outcome`), by session id."""
        self.held: tuple[Setup, ...] = ()
        """Set-ups of later sessions that came while this user waited for the one it missed."""
        self.pending: tuple[int, RowBlock] | None = None
        """A session and this user's input to it, encoded -- A^(u)T A^(u) X while the user computes it
        (straggler time) -- until it is handed to secure aggregation (`_sum_pending`)."""

    def _crash(self, session: int, stage: Stage) -> bool:
        if stage is Stage.ADVERTISE_KEYS:
            drawn = _STAGES[int(self.stage_rng.integers(len(_STAGES)))]
            self._drawn = self.crash_stage or drawn
        return stage is self._drawn and self.crashes_in(session_round(session))

    def _encoded(self, values: RowBlock) -> RowBlock:
        """``values`` (reals) as ring elements: the input a user hands secure aggregation."""
        return RowBlock(values.rows, self.params.ring.encode(values.block)[0], values.n_rows)

    def _hand_over(self) -> RowBlock:
        """The pending input, which this user no longer keeps (`_sum_pending`)."""
        _, encoded = self.pending  # type: ignore[misc]
        self.pending = None
        return encoded

    async def _sum_pending(self) -> bool:
        """Take part in the session of the input computed last (``pending``), handing the input over:
        secure aggregation's state machine holds the one copy of it from here on (and lets it go once it
        is masked or deposited), so no frame of this user keeps another while the session runs (module
        docstring, Memory). False if this user crashed in it."""
        session = self.pending[0]  # type: ignore[index]
        contribution = await participate(
            self, self._hand_over(), self.params, deadline=self.horizon_s, ideal=self.ideal, crash=self._crash,
            stage_s=STAGE_WAITS * self.params.stage_timeout_s, session=session, held=self.held,
        )
        self.held = contribution.held
        self.sessions[session] = contribution.outcome
        return contribution.outcome != "crashed"

    async def run(self) -> None:
        await self.resume()

    async def resume(self) -> None:
        deadline = self.horizon_s
        try:
            if await self.compute_rest() and not await self._sum_pending():
                return
            if self.phase == "degrees":
                self.pending = (DEGREES_SESSION, self._encoded(local.degree_rows(self.items, self.n_items)))
                if not await self._sum_pending():
                    return
                self.degrees = (await self.recv(Degrees, deadline=deadline, sender=self.server)).body.degrees
                self.phase = "item_item" if self.exact_item_item else "power"
            if self.phase == "item_item":
                self.pending = (ITEM_ITEM_SESSION, self._encoded(local.item_item_rows(self.items, self.n_items, self.alpha)))
                if not await self._sum_pending():
                    return
                upper = (await self.recv(ItemItem, deadline=deadline, sender=self.server)).body.upper
                self.item_item = shared_item_item(upper, self.n_items)
                self.phase = "power"
            while self.phase == "power" and self.next_iteration <= self.iterations:
                basis = (await self.recv(Basis, deadline=deadline, sender=self.server)).body
                if basis.iteration < self.next_iteration:
                    continue  # a late basis of an iteration this user already left
                self.next_iteration = basis.iteration + 1
                if basis.basis.shape[0] != self.n_items:
                    raise ProtocolViolation(f"{self.party} received a basis of shape {basis.basis.shape}")
                if self.weights is None:
                    self.weights = local.row_weights(self.items, self.degrees, self.alpha)  # type: ignore[arg-type]
                rows = local.power_rows(self.items, self.degrees, basis.basis, self.alpha, self.weights)  # type: ignore[arg-type]
                self.pending = (POWER + basis.iteration, self._encoded(rows))
                del rows  # the reals: only the encoded input stays while the user computes
                await self.compute()
                if not await self._sum_pending():
                    return
            self.phase = "filters"
            result = (await self.recv(Filters, deadline=deadline, sender=self.server)).body
        except PartyTimeout:
            return
        if self.exact_item_item:
            self.filters = GraphFilters(self.degrees, result.basis, item_item=self.item_item, ideal_rank=self.ideal_k, alpha=self.alpha)  # type: ignore[arg-type]
        else:
            self.filters = GraphFilters(self.degrees, result.basis, spectrum=result.spectrum, ideal_rank=self.ideal_k, alpha=self.alpha)  # type: ignore[arg-type]
        self.phase = "done"


@dataclass
class Iteration:
    """What the server saw of one power iteration (or set-up sum)."""

    session: int
    members: tuple[Party, ...]
    result: Aggregate
    T: np.ndarray | None = None


@dataclass
class ServerState:
    degrees: np.ndarray | None = None
    item_item: np.ndarray | None = None
    basis: np.ndarray | None = None
    T: np.ndarray | None = None
    sums: list[Iteration] = field(default_factory=list)
    bases: list[np.ndarray] = field(default_factory=list)
    """X_(l-1), the basis broadcast in power iteration l, for l = 1, 2, ..."""


class PriviRecServer(Server):
    """Coordinates the sums; computes V, P~, the QR factorizations; broadcasts.

    Args:
        n_items: m.
        k, p: the rank of the filters and of the iterations.
        start: X_0 (m x p, orthonormal), the QR of the seeded Gaussian start.
        alpha: the normalization's exponent, P~ = V^{alpha-1} P' V^{alpha-1}.
    """

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, n_items: int, params: SecAggParams, ideal: IdealSum | None,
        *, exact_item_item: bool, k: int, start: np.ndarray, alpha: float = 0.5,
    ) -> None:
        super().__init__(party, network, rng)
        self.alpha = alpha
        self.n_items = n_items
        self.params = params
        self.ideal = ideal
        self.exact_item_item = exact_item_item
        self.k = k
        self.state = ServerState(basis=start)

    async def _sum(self, session: int, length: int, deadline: float) -> tuple[np.ndarray, Iteration]:
        members = tuple(sorted(self.members))
        result = await aggregate(
            self, members, length, self.params, session=session, deadline=deadline, ideal=self.ideal
        )
        seen = Iteration(session, members, result)
        self.state.sums.append(seen)
        return self.params.ring.decode(result.total), seen

    def _broadcast(self, message: object) -> None:
        self.send_many(sorted(self.members), message)

    async def setup(self, session_s: float) -> None:
        """The item degrees and, for PriviRec, P~ (Fig. 4 / 5, before the power method); each sum has
        ``session_s`` virtual seconds from its start."""
        self.update_membership()
        total, _ = await self._sum(DEGREES_SESSION, self.n_items, self.now + session_s)
        degrees = np.rint(total)
        self.state.degrees = degrees
        self.update_membership()
        self._broadcast(Degrees(degrees))
        if self.exact_item_item:
            upper, _ = await self._sum(ITEM_ITEM_SESSION, local.upper_length(self.n_items), self.now + session_s)
            p_prime = local.symmetric_from_upper(upper, self.n_items)
            item_item = local.normalize_item_item(p_prime, degrees, self.alpha)
            self.state.item_item = item_item
            self.update_membership()
            rows, columns = np.triu_indices(self.n_items)
            self._broadcast(ItemItem(np.ascontiguousarray(item_item[rows, columns])))

    async def iterate(self, iteration: int, deadline: float) -> Iteration:
        """Power iteration ``iteration``: broadcast X, securely sum A^(u)T A^(u) X, QR at the server."""
        self.update_membership()
        basis = self.state.basis
        assert basis is not None
        self.state.bases.append(basis)
        self._broadcast(Basis(iteration, basis))
        await trio.lowlevel.checkpoint()
        total, seen = await self._sum(POWER + iteration, basis.size, deadline)
        X, T = qr_positive(total.reshape(basis.shape))
        self.state.basis, self.state.T = X, T
        seen.T = T
        return seen

    def publish(self) -> None:
        """Broadcast S_k and, for PriviRec-k, diag(T_L)[:k]."""
        self.update_membership()
        basis, T = self.state.basis, self.state.T
        assert basis is not None and T is not None
        spectrum = np.empty(0) if self.exact_item_item else np.ascontiguousarray(np.diag(T)[: self.k])
        self._broadcast(Filters(np.ascontiguousarray(basis[:, : self.k]), spectrum))


def members_missing(expected: Sequence[Party], seen: Iteration) -> tuple[Party, ...]:
    """The users of ``expected`` whose input is not in the sum ``seen`` (not in U3)."""
    survivors = set(seen.result.survivors)
    return tuple(party for party in expected if party not in survivors)


__all__ = [
    "DEGREES_SESSION", "ITEM_ITEM_SESSION", "POWER", "PriviRecServer", "PriviRecUser", "members_missing", "session_round",
    "shared_item_item",
]
