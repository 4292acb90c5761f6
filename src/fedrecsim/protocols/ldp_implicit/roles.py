"""ldp_implicit role behaviours: LDP users, shuffling proxies, and the recommender server.

Users (Minto et al. Sec. 3.1.1) keep their interactions and their profile ``x_u`` to themselves. Each
epoch a user receives V from its home proxy, solves ``x_u`` in closed form (eq. (4)), turns its
gradient with respect to all of V (eq. (5)) into k eps-LDP reports with Algorithm 1
(`fedrecsim.mechanisms.randomized_response`; the gradient is evaluated only at the entries the reports
sample, see `gradient`) and sends them, in one message, to a proxy it draws uniformly from its own
generator for that epoch. A user's only contact is the proxy network: its joins and leaves go to its
home proxy (drawn once, uniformly, from its generator), never to the server.

Every receiver counts what it receives once (the network may duplicate): a user answers each epoch once,
a proxy admits one message of reports per user and epoch, the server counts each numbered batch once.
What a proxy refuses from a user is recorded in the ledger as rejected and changes nothing: reports from
a party that is not a user, a model that does not come from the server, reports of another number than
k or with an index outside V. A proxy or the server that breaks the protocol stops the run.

Proxies (Sec. 3.1.2) relay V from the server to their online members, and anonymize the reports: a
proxy re-sends everything as itself, splits users' messages into single reports, holds them in a
per-epoch `ReportPool` until the pool has reports from ``min_users`` distinct users, and then shuffles
the pool with its own generator and forwards it to the server in batches of ``batch_size`` reports. A
pool still short of ``min_users`` ``wait_s`` virtual seconds after its first report is held for later
reports of its epoch or dropped (``underfull``), never released; see `ShuffleProxy`.

The server (Sec. 3.1.3) only ever talks to proxies. Each epoch it sends V to every proxy, learns from
their ``ldp.relayed`` counts how many reports to expect, collects report batches until it has them all
or the epoch's deadline passes (until the deadline if a count was lost), estimates the mean gradient
by eq. (9) and updates V (`training`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...actors.membership import Join, Leave, update_members
from ...actors.proxy import Proxy
from ...actors.server import Server
from ...actors.user import User
from ...data.ratings import FloatArray
from ...errors import PartyTimeout, ProtocolViolation
from ...mechanisms.randomized_response import estimate_mean_gradient, ldp_reports_lazy
from ...models.implicit_mf import ImplicitHyper, confidence, user_factors
from ...network.ledger import RejectReason
from ...network.party import Party, Role
from ...network.wire import Envelope
from .gradient import gradient_entries
from .messages import Model, Relayed, ReportBatch, Reports
from .pool import ClosedPool, Fate, ReportPool, Underfull
from .training import apply_steps


@dataclass(frozen=True)
class SentReports:
    """What a user sent in one epoch (the simulator's ground truth; it never leaves the user)."""

    epoch: int
    indices: np.ndarray
    signs: np.ndarray


class LDPUser(User):
    """Holds its interactions; its profile ``x`` is solved fresh every epoch and never leaves it.

    Args:
        items, values: The user's interacted items and their values ``r`` (confidence ``1 + alpha r``).
        hyper: The model's hyper-parameters (F, lambda, alpha).
        epsilon: The per-report budget.
        k: Reports per epoch.
        proxies: The proxy network; the home proxy and each epoch's report proxy are drawn from it.
    """

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, items: np.ndarray, values: np.ndarray, *,
        hyper: ImplicitHyper, epsilon: float, k: int, proxies: tuple[Party, ...],
    ) -> None:
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int64)
        # The model must cover the user's items: -1 (no items) accepts any.
        self._last_item = int(self.items.max()) if self.items.size else -1
        self.confidence = confidence(values, hyper.alpha)
        self.hyper = hyper
        self.epsilon = epsilon
        self.k = k
        self.proxies = proxies
        # `User.server` is where joins and leaves go: for this user, its home proxy.
        self.server = proxies[int(rng.integers(len(proxies)))]
        self.x = np.zeros(hyper.d)
        self.sent: SentReports | None = None
        self.answered = 0
        self.reply: tuple[Party, SentReports] | None = None

    async def run(self) -> None:
        await self.resume()

    async def resume(self) -> None:
        if await self.compute_rest():
            self._send_reply()
        while True:
            envelope = await self.recv(Model, deadline=self.horizon_s)
            # A model that waited behind a newer one is stale: answer only the newest.
            newer = self.drain(Model)
            model: Model = (newer[-1] if newer else envelope).body
            if model.epoch <= self.answered:
                continue  # an epoch already answered: a copy the network duplicated, or overtaken
            if self.crashes_in(model.epoch):
                return
            V = model.item_factors
            if V.shape[1] != self.hyper.d or self._last_item >= V.shape[0]:
                raise ProtocolViolation(
                    f"{self.party} expected an item matrix with {self.hyper.d} columns covering item "
                    f"{self._last_item}, received shape {V.shape} in epoch {model.epoch}"
                )
            self.x = user_factors(V, self.items, self.confidence, self.hyper.lam)
            # Algorithm 1 on the gradient of eq. (5), evaluated only at the k entries it samples.
            entries = gradient_entries(V, self.x, self.items, self.confidence)
            indices, signs = ldp_reports_lazy(self.rng, entries, 1, V.shape[0], V.shape[1], self.epsilon, self.k)
            indices, signs = indices[0], signs[0]
            proxy = self.proxies[int(self.rng.integers(len(self.proxies)))]
            self.reply = (proxy, SentReports(model.epoch, indices, signs))
            await self.compute()
            self._send_reply()

    def _send_reply(self) -> None:
        """Send the epoch's reports (``reply``, made before the compute time) to the proxy drawn for them."""
        proxy, sent = self.reply  # type: ignore[misc]
        self.reply = None
        self.answered = sent.epoch
        self.send(proxy, Reports.pack(sent.epoch, sent.indices, sent.signs))
        self.sent = sent


class ShuffleProxy(Proxy):
    """Relays V to its members and shuffles users' reports before the server sees them.

    A proxy never releases a pool with fewer than ``min_users`` distinct users. A pool is released the
    moment it reaches them. At its deadline (``wait_s`` after its first report) a pool still short of
    them is dropped (`Underfull.DROP`) or held (`Underfull.HOLD`): a held pool keeps taking its epoch's
    reports -- the stragglers that missed the pool before it -- and is released once it reaches
    ``min_users``. A held pool ends with its epoch: it is dropped when the proxy relays a later epoch's
    model (the server has closed the epoch and would discard its reports as late), and a pool whose
    deadline passes after that is dropped rather than held. Whatever a proxy still holds when the run
    ends is dropped (`finish`): it is never released. Every pool's fate is recorded in ``closed``.

    Args:
        server: The recommender.
        min_users: The fewest distinct users a released pool may hold.
        underfull: What to do with a pool short of ``min_users`` at its deadline.
        batch_size: Reports per forwarded ``ldp.report_batch``.
        wait_s: A pool's deadline is this long after its first report arrived.
        horizon_s: The proxy stops after this virtual time (the run's horizon).
        reports_per_user: k, the reports a user sends per epoch (public); 0 = any number.
        entries: M x F, the entries of V a report index may name (public); 0 = any index.

    Attributes:
        members: The users online at this proxy, from their join and leave messages.
        closed: Every pool released or dropped, in the order it left the proxy.
    """

    receives = (Model, Reports, Join, Leave)

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, *, server: Party, min_users: int, underfull: Underfull, batch_size: int,
        wait_s: float, horizon_s: float, reports_per_user: int = 0, entries: int = 0,
    ) -> None:
        super().__init__(party, network, rng)
        self.server = server
        self.min_users = min_users
        self.underfull = underfull
        self.batch_size = batch_size
        self.wait_s = wait_s
        self.horizon_s = horizon_s
        self.reports_per_user = reports_per_user
        self.members: set[Party] = set()
        self._announced: dict[Party, tuple[float, int]] = {}
        self.pools: dict[int, ReportPool] = {}
        self.closed: list[ClosedPool] = []
        # The newest epoch whose model this proxy relayed: every earlier epoch is over at the server.
        self._latest_epoch = 0
        self.entries = entries
        # The users admitted per epoch (kept for the epochs the server may still count: the last two
        # relayed), the epochs relayed, and each epoch's next batch number.
        self._admitted: dict[int, set[Party]] = {}
        self._relayed: set[int] = set()
        self._batches: dict[int, int] = {}

    @property
    def released(self) -> list[tuple[int, int]]:
        """``(epoch, distinct users)`` of every pool released, in release order."""
        return [(pool.epoch, pool.users) for pool in self.closed if pool.fate is Fate.RELEASED]

    async def run(self) -> None:
        mailbox = self.network.mailbox(self.party)
        while self.now < self.horizon_s:
            # Membership first: a user that joined in this delivery gets the model relayed in it.
            update_members(self, self.members, self._announced)
            for envelope in self.drain(Model):
                self._relay(envelope)
            for envelope in self.drain(Reports):
                self._admit(envelope)
            self._past_deadline()
            await mailbox.wait(min([self.horizon_s, *(pool.deadline for pool in self.pools.values())]))

    def at_rest(self) -> bool:
        """Its ``run`` only ever waits at its loop's top, until a deadline it computes from its pools: any
        wait for a delivery is a resume point."""
        return self.mailbox.waits_until is not None

    def finish(self) -> None:
        """The run is over: drop every pool still here, in epoch order; none is released."""
        for epoch in sorted(self.pools):
            self._close(epoch, Fate.DROPPED)

    def _relay(self, envelope: Envelope) -> None:
        model: Model = envelope.body
        if envelope.src != self.server:
            problem = f"{self.party} expected ldp.model from {self.server}, received it from {envelope.src}"
            self.reject(envelope, RejectReason.UNEXPECTED, problem)
            return
        if model.epoch in self._relayed:
            self.reject(envelope, RejectReason.DUPLICATE, f"{self.party} received epoch {model.epoch}'s ldp.model twice; the first counts")
            return
        self._relayed.add(model.epoch)
        recipients = sorted(self.members)
        self.send_many(recipients, model)
        self.send(self.server, Relayed(model.epoch, len(recipients)))
        self._latest_epoch = max(self._latest_epoch, model.epoch)
        for epoch in [epoch for epoch in self._admitted if epoch < self._latest_epoch - 1]:
            del self._admitted[epoch]
        for epoch in sorted(self.pools):
            if self.pools[epoch].held and epoch < self._latest_epoch:
                self._close(epoch, Fate.DROPPED)

    def _admit(self, envelope: Envelope) -> None:
        sender, reports = envelope.src, envelope.body
        admitted = self._admitted.setdefault(reports.epoch, set())
        if sender in admitted:
            problem = f"{self.party} received epoch {reports.epoch}'s ldp.reports twice from {sender}; the first counts"
            self.reject(envelope, RejectReason.DUPLICATE, problem)
            return
        problem = self._refused(sender, reports)
        if problem is not None:
            self.reject(envelope, RejectReason.INVALID, f"{self.party} expected valid ldp.reports from {sender}: {problem}")
            return
        admitted.add(sender)
        pool = self.pools.get(reports.epoch)
        if pool is None:
            pool = self.pools[reports.epoch] = ReportPool(reports.epoch, self.now + self.wait_s)
        indices, signs = reports.unpack()
        pool.add(sender, indices, signs)
        if pool.users >= self.min_users:
            self._close(reports.epoch, Fate.RELEASED)

    def _refused(self, sender: Party, reports: Reports) -> str | None:
        """Why the proxy refuses a user's reports (None: it admits them)."""
        if sender.role is not Role.USER:
            return "reports come from users only"
        if self.reports_per_user and reports.indices.size != self.reports_per_user:
            return f"{self.reports_per_user} reports, received {reports.indices.size}"
        if self.entries and reports.indices.max() >= self.entries:
            return f"report indices below {self.entries} (V's entries), received {reports.indices.max()}"
        return None

    def _past_deadline(self) -> None:
        """Pools at their deadline are short of ``min_users`` (a full pool left on admission): hold or drop."""
        for epoch in sorted(epoch for epoch, pool in self.pools.items() if pool.deadline <= self.now):
            if self.underfull is Underfull.HOLD and epoch >= self._latest_epoch:
                pool = self.pools[epoch]
                pool.held = True
                pool.deadline = math.inf
            else:
                self._close(epoch, Fate.DROPPED)

    def _close(self, epoch: int, fate: Fate) -> None:
        pool = self.pools.pop(epoch)
        if fate is Fate.RELEASED:
            for indices, signs in pool.release(self.rng, self.batch_size):
                batch = self._batches.get(epoch, 0)
                self._batches[epoch] = batch + 1
                self.send(self.server, ReportBatch.pack(epoch, indices, signs, batch=batch))
        if pool.held or fate is Fate.DROPPED:
            self.network.ledger.record_withheld(self.party, "reports", _withheld_fate(pool.held, fate), pool.reports)
        self.closed.append(ClosedPool(epoch, pool.users, pool.reports, fate, pool.held))


def _withheld_fate(held: bool, fate: Fate) -> str:
    """What became of a pool the proxy did not release at once, as the ledger's ``withheld`` counts it:
    each report under exactly one fate, so a proxy's withheld counts add up to the reports it withheld."""
    return f"held then {fate.value}" if held else fate.value


@dataclass(frozen=True)
class EpochReport:
    """What the server saw of one epoch.

    Attributes:
        relayed: Users the proxies forwarded V to.
        silent_proxies: Proxies whose ``ldp.relayed`` count did not arrive; while any is silent the
            server cannot know how many reports to expect and collects until the deadline.
        expected: Reports the server waited for: ``k * relayed``.
        received: Reports of this epoch aggregated (``expected`` if none was lost or late).
        late: Reports of earlier epochs that arrived during this one and were discarded.
        senders: Every party the server received a message from this epoch.
        indices, signs: The aggregated reports, in arrival order.
        estimate: The eq. (9) estimate of the mean gradient; None if no report arrived.
    """

    epoch: int
    relayed: int
    silent_proxies: int
    expected: int
    received: int
    late: int
    senders: frozenset[Party]
    indices: np.ndarray
    signs: np.ndarray
    estimate: FloatArray | None

    @property
    def missing(self) -> int:
        """Reports awaited but not received by the deadline (crashed users, lost or slow messages)."""
        return max(0, self.expected - self.received)


class LDPServer(Server):
    """Owns V; talks only to proxies; estimates the mean gradient from anonymous reports.

    A report index outside V in a proxy's batch is a `ProtocolViolation` that stops the run: the proxies
    check users' indices, so only a proxy that breaks the protocol can send one.

    Args:
        n_items: M.
        hyper: F, gamma, lambda (alpha is the users').
        steps: Updates per epoch with the epoch's estimate (see `training`).
        epsilon, k: The users' per-report budget and reports per epoch (public parameters).
        init_scale: V starts with independent N(0, init_scale^2) entries.
        proxies: The proxy network.
    """

    receives = (Relayed, ReportBatch)

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, *, n_items: int, hyper: ImplicitHyper, steps: int, epsilon: float, k: int,
        init_scale: float, proxies: tuple[Party, ...],
    ) -> None:
        super().__init__(party, network, rng)
        self.hyper = hyper
        self.steps = steps
        self.epsilon = epsilon
        self.k = k
        self.proxies = proxies
        self.item_factors = init_scale * rng.standard_normal((n_items, hyper.d))
        # Every (proxy, epoch, batch) counted, so that a batch the network duplicated counts once.
        self._counted: set[tuple[Party, int, int]] = set()

    async def epoch(self, epoch: int, deadline: float) -> EpochReport:
        """Broadcast V, collect the epoch's reports until all are in or ``deadline``, update V."""
        model = Model(epoch, self.item_factors)
        for proxy in self.proxies:
            self.send(proxy, model)
        relayed = await self.gather(Relayed, self.proxies, deadline=deadline, accept=lambda reply: reply.epoch == epoch)
        senders = set(relayed.by_party)
        users = sum(reply.users for _, reply in relayed)
        expected = users * self.k
        n_items, n_factors = self.item_factors.shape
        indices: list[np.ndarray] = []
        signs: list[np.ndarray] = []
        received = late = 0
        while relayed.missing or received < expected:
            try:
                first = await self.recv(ReportBatch, deadline=deadline)
            except PartyTimeout:
                break
            for envelope in (first, *self.drain(ReportBatch)):
                senders.add(envelope.src)
                batch: ReportBatch = envelope.body
                key = (envelope.src, batch.epoch, batch.batch)
                if key in self._counted:
                    self.reject(envelope, RejectReason.DUPLICATE, f"{self.party} received batch {batch.batch} of epoch {batch.epoch} twice from {envelope.src}; the first counts")
                    continue
                self._counted.add(key)
                if batch.epoch != epoch:
                    late += batch.indices.size
                    continue
                batch_indices, batch_signs = batch.unpack()
                if batch_indices.max() >= n_items * n_factors:
                    raise ProtocolViolation(
                        f"{self.party} received a report index {batch_indices.max()} from {envelope.src}; "
                        f"V has {n_items} x {n_factors} entries"
                    )
                indices.append(batch_indices)
                signs.append(batch_signs)
                received += batch_indices.size
        all_indices = np.concatenate(indices) if indices else np.empty(0, dtype=np.int32)
        all_signs = np.concatenate(signs) if signs else np.empty(0, dtype=np.int8)
        estimate = None
        if received:
            estimate = estimate_mean_gradient(all_indices, all_signs, received, n_items, n_factors, self.epsilon)
            self.item_factors = apply_steps(self.item_factors, estimate, self.hyper, self.steps)
        return EpochReport(
            epoch, users, len(relayed.missing), expected, received, late, frozenset(senders), all_indices, all_signs,
            estimate,
        )


__all__ = ["EpochReport", "LDPServer", "LDPUser", "SentReports", "ShuffleProxy"]
