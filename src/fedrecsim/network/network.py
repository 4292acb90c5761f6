"""The network: attach and detach parties, one delay line, delivery into draining mailboxes.

``send`` is synchronous: it encodes the message once (`wire.encode`), records the bytes in the ledger,
asks the link policy for the arrival time (latency + size / bandwidth, or loss) and files
``(src role, src index, dst role, dst index, seq, ...)`` under its arrival time: one bucket per distinct
arrival time, the times on a heap. A single task -- owned by ``async with network.open():`` -- sleeps until
the earliest arrival and delivers every due message in one pass, decoding each exactly once into the
destination's mailbox (under `VirtualClock` the task stays parked and the clock's jump has the instant
served in its own call, `Network.wake`: one pass of trio's loop per instant, not two).
Arrival times are rounded *up* to the network's resolution so that messages due together are delivered
together (one bucket, one heap entry), and never in the instant they were sent (a zero delay arrives one
tick later). Ties break by sender, then receiver, then the message's sequence number -- a counter of
sends: concurrent senders may be scheduled in any order, but the messages of one link are sent one after
another by one party, so among messages with the same sender and receiver the counter gives the order in
which they were sent on that link, whatever trio's (deliberately non-deterministic) scheduling did -- so
delivery order, and with it the transcript hash, is a function of the seed alone. A bucket holds each
party's role and index apart, in the order a party compares them: its sort then compares those fields
one by one instead of two parties, each a tuple of them.

Why both rules make a run independent of that scheduling: under the autojumping mock clock every task
runnable at an instant runs before time moves, so a message sent at t -- arriving strictly after t --
is on the heap before its delivery instant, whichever of the concurrent senders ran first. And every
wait of the simulation -- a mailbox deadline or `sleep_until` -- is served by the delay line after the
deliveries due at the same instant, so a task waking at t sees exactly the messages due by t.

Time is the run's, counted from ``origin`` on the loop's clock: arrival times, deadlines, the times the
ledger records and the ``sent_at`` of every envelope are seconds since the run started, so a run computes
the same numbers whatever the loop's clock read when it started. How that time moves (`Network.now`):

- *loop time* (the default, for networks driven by hand in tests): the loop's clock less ``origin``, so a
  test's own ``trio.sleep`` moves it too;
- *event time* (``event_time=True``, every run of `fedrecsim.runner`): the instant the delay line last
  served, exactly as the heap holds it. The loop's clock only paces the run: under a clock that jumps
  (`VirtualClock`, trio's ``MockClock(autojump_threshold=0)``) the next instant comes as soon as every task
  is blocked; under any other (trio's default, real time) the delay line waits until the loop's clock
  reaches it *and* every task is blocked (`trio.testing.wait_all_tasks_blocked`), then serves that one
  instant. Either way every party sees the instants, messages and deadlines a `VirtualClock` run sees, so
  the run's transcript is the same on any clock and at any offset.

Delivery decodes with `wire.decode_trusted` (the kind's reader itself, `wire.TRUSTED_READERS`): the bytes
were produced and fully validated by `wire.encode` in this process, so the receiver gets a message rebuilt
from them without the checks running twice; its arrays are read-only (views of the received bytes where
aligned, else of an aligned copy), so no receiver can change another's view.
The copies of one broadcast (`send_many`) carry the same body: the first delivered is decoded, and every
other receiver gets that body, read-only, in an envelope of its own (`_SharedDecoding`); the bytes are
still each copy's own, counted and hashed whole.

A message whose destination is not attached at delivery time is dropped and counted (`DropReason.OFFLINE`);
messages still in flight when the network closes are counted as `DropReason.UNFINISHED`; a message sent
on a link a partition took down, as `DropReason.PARTITIONED`.

Faults (`fedrecsim.network.faults`, and the link policy's duplication, reordering and partitions): a copy
the link makes is scheduled like the original and counted as duplicated; a crashed party is detached and
whatever it still sends goes nowhere, uncounted, until `recover`; a byzantine party's messages are forged
on the wire and decoded *strictly* at delivery, so malformed bytes are rejected at the receiver
(`RejectReason.MALFORMED`) instead of trusted. A party whose actor declared the kinds it receives
(`expect`) rejects any other kind (`RejectReason.UNEXPECTED`). A rejected message was delivered -- the
ledger counts its bytes as received -- but never reaches the mailbox.
"""

from __future__ import annotations

import heapq
import math
import types
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import outcome
import trio
import trio.testing

from ..clock import VirtualClock
from ..errors import ProtocolViolation, WireError
from ..trio_internals import GLOBAL_RUN_CONTEXT, WaitTaskRescheduled
from .faults import Crash, PartyFaults
from .ledger import DropReason, Ledger, RejectReason
from .links import Links
from .party import Party
from .wire import (
    DEFAULT_MAX_MESSAGE_BYTES, TRUSTED_READERS, Broadcast, Envelope, decode, decode_broadcast, encode, encode_many,
)
from .wire import _envelope

# The functions called once or more per message, looked up once.
_ceil = math.ceil
_heappush = heapq.heappush
_Error = outcome.Error


# Parking and waking tasks. Every wait of the network (a mailbox's, a sleep's, the delay line's) is
# `trio.lowlevel.wait_task_rescheduled` and every wake `trio.lowlevel.reschedule`, minus what those cost
# per call beyond trio's own scheduling: the wait yields a trap made once per waiter instead of building
# one and two coroutine frames per wait, and the network wakes its waiters with a plain bool instead of
# an `outcome.Value` to build and unwrap (`GLOBAL_RUN_CONTEXT.runner` is what `trio.lowlevel.reschedule`
# calls), and does what that `reschedule` does itself (`_wake`): it fills in the task's next send and
# appends it to the run queue, without the call, its asserts and its look-up of instruments through
# a `UserDict` subclass (a Python-level ``__contains__``: together most of what a wake cost) -- unless
# the run is a guest run or an instrument watches tasks being scheduled, where `reschedule` does it.
# Anything else that ends such a wait -- trio cancelling it through the waiter's abort function,
# `Network.interrupt` -- sends an `outcome.Error`, which the parked task raises, as trio's own wait does.


@types.coroutine
def _park(trap: WaitTaskRescheduled) -> Generator[WaitTaskRescheduled, Any, Any]:
    """``await _park(trap)``: ``await trio.lowlevel.wait_task_rescheduled(trap.abort_func)``, returning the
    bool the network woke the task with."""
    woken = yield trap
    if woken.__class__ is bool:
        return woken
    try:
        return woken.unwrap()
    finally:
        del woken  # the error's traceback holds this frame: without this, a cycle per interrupted wait


def _run_queue() -> deque[trio.lowlevel.Task] | None:
    """The running loop's queue of runnable tasks, for `_wake` to append a woken task to; None when trio's
    own `reschedule` must wake it (a guest run, or an instrument hooked on ``task_scheduled``)."""
    runner = GLOBAL_RUN_CONTEXT.runner
    if runner.is_guest or "task_scheduled" in runner.instruments.data:
        return None
    return runner.runq  # type: ignore[no-any-return]


def _wake(task: trio.lowlevel.Task, value: bool, run_queue: deque[trio.lowlevel.Task] | None) -> None:
    """Reschedule ``task``, parked in `_park` (or `Mailbox.wait`), to return ``value``: what
    ``trio.lowlevel.reschedule(task, value)`` does, appending it to ``run_queue`` (`_run_queue`) directly."""
    if run_queue is None:
        GLOBAL_RUN_CONTEXT.runner.reschedule(task, value)
        return
    task._next_send_fn = task.coro.send
    task._next_send = value
    task._abort_func = None
    task.custom_sleep_data = None
    run_queue.append(task)


class Mailbox:
    """The delivered, not yet taken messages of one party, queued per kind in delivery order.

    One task at a time (the party's own) may wait on a mailbox; it is woken by the next delivery or by
    its virtual deadline, whichever comes first. A woken receiver takes everything already delivered that
    it wants before it waits again (mailboxes drain).

    Waiting costs no cancel scope: the waiter parks (`_park`, trio's `wait_task_rescheduled`) and its
    deadline goes on the network's timer heap, which the delay line serves together with deliveries. A
    delivery and a deadline due at the same instant resolve as a delivery.
    """

    __slots__ = ("party", "receives", "view", "_by_kind", "_waiter", "_timer_at", "_timers", "_trap")

    def __init__(
        self, party: Party, timers: _Timers, record_view: bool = False, receives: frozenset[str] | None = None
    ) -> None:
        self.party = party
        #: The kinds this party's role receives (`Network.expect`); None: any kind.
        self.receives = receives
        self.view: list[Envelope] | None = [] if record_view else None
        # A queue per kind, made when first used (and kept: `queue`).
        self._by_kind: defaultdict[str, deque[Envelope]] = defaultdict(deque)
        self._waiter: trio.lowlevel.Task | None = None
        self._timer_at: float | None = None
        self._timers = timers
        self._trap = WaitTaskRescheduled(self._abort_wait)

    def put(self, envelope: Envelope) -> None:
        self._by_kind[envelope.kind].append(envelope)
        if self.view is not None:
            self.view.append(envelope)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            _wake(waiter, True, _run_queue())

    def queue(self, kind: str) -> deque[Envelope]:
        """The delivered, not yet taken messages of ``kind``, oldest first: the mailbox's own queue, which
        its receiver may pop from directly (`Actor.gather`) and which stays this kind's queue for good."""
        return self._by_kind[kind]

    def take(self, kind: str, sender: Party | None = None) -> Envelope | None:
        """Remove and return the oldest message of ``kind`` (from ``sender`` if given), or None."""
        queue = self._by_kind.get(kind)
        if not queue:
            return None
        if sender is None or queue[0].src == sender:
            return queue.popleft()
        for position, envelope in enumerate(queue):
            if envelope.src == sender:
                del queue[position]
                return envelope
        return None

    def take_all(self, kind: str) -> list[Envelope]:
        """Remove and return every delivered message of ``kind``, oldest first."""
        queue = self._by_kind.get(kind)
        if not queue:
            return []
        taken = list(queue)
        queue.clear()
        return taken

    def clear(self) -> None:
        for queue in self._by_kind.values():
            queue.clear()

    @property
    def waits_until(self) -> float | None:
        """The deadline its task waits for a delivery until (None: no task waits on this mailbox now)."""
        return self._timer_at if self._waiter is not None else None

    @types.coroutine
    def wait(self, deadline: float) -> Generator[WaitTaskRescheduled, Any, bool]:
        """``await mailbox.wait(deadline)``: park until the next delivery (True) or until the virtual
        ``deadline`` passes (False). `_park`'s body, inline: one generator per wait, not a call and a
        generator."""
        if self._waiter is not None:
            raise ProtocolViolation(f"two tasks wait on the mailbox of {self.party}; only its own actor may")
        if not self._timers.running:
            raise ProtocolViolation(
                f"{self.party} waits for messages outside `async with network.open()`: nothing could arrive "
                "and no deadline could fire"
            )
        # A deadline already past needs no special case: its timer is due at once. Waits that repeat the
        # deadline already on the heap (a user waiting for its next request until the run's horizon)
        # reuse that entry instead of pushing another.
        self._waiter = GLOBAL_RUN_CONTEXT.task
        if self._timer_at != deadline:
            self._timer_at = deadline
            self._timers.add(deadline, self)
        woken = yield self._trap
        if woken.__class__ is bool:
            return woken
        try:
            return woken.unwrap()
        finally:
            del woken  # as in `_park`

    def _abort_wait(self, raise_cancel: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _interrupt(self, task: trio.lowlevel.Task, error: BaseException) -> bool:
        """End ``task``'s wait on this mailbox by raising ``error`` in it (as a cancel would end it: the
        deadline's heap entry goes stale); False, and nothing done, if ``task`` is not parked here."""
        if self._waiter is not task:
            return False
        self._waiter = None
        trio.lowlevel.reschedule(task, _Error(error))
        return True

    def _expire(self, deadline: float) -> None:
        """The timer for ``deadline`` is due: end the current wait if that is the deadline it waits for."""
        if deadline != self._timer_at:
            return
        self._timer_at = None
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            _wake(waiter, False, _run_queue())


class _Timers:
    """The deadlines of mailbox waits and sleeps: a heap served by the delay line, stale entries dropped.

    A waiter (`Mailbox` or `_Alarm`) has at most one current deadline (``_timer_at``); an entry whose
    deadline is no longer its waiter's current one is stale, skipped when due and purged whenever stale
    entries outnumber live ones, so memory stays proportional to the number of waiters.
    """

    def __init__(self, on_earlier_deadline: Callable[[float], None]) -> None:
        self._heap: list[tuple[float, int, Mailbox | _Alarm]] = []
        self._seq = 0
        self.running = False
        self._purge_at = 1024
        self._on_earlier_deadline = on_earlier_deadline

    def add(self, deadline: float, waiter: Mailbox | _Alarm) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, waiter))
        self._on_earlier_deadline(deadline)
        if len(self._heap) > self._purge_at:
            self._heap = [entry for entry in self._heap if entry[2]._timer_at == entry[0]]
            heapq.heapify(self._heap)
            self._purge_at = max(1024, 2 * len(self._heap))

    @property
    def next_deadline(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def expire_due(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, waiter = heapq.heappop(heap)
            waiter._expire(deadline)


class _Alarm:
    """One `Network.sleep_until`: the sleeping task, woken when the delay line expires the deadline."""

    __slots__ = ("_timer_at", "_task")

    def __init__(self, deadline: float) -> None:
        self._timer_at: float | None = deadline
        self._task: trio.lowlevel.Task | None = trio.lowlevel.current_task()

    def _expire(self, deadline: float) -> None:
        task = self._task
        if task is not None and deadline == self._timer_at:
            self._task = self._timer_at = None
            _wake(task, True, _run_queue())

    def _abort(self, raise_cancel: object) -> trio.lowlevel.Abort:
        # A cancelled sleep leaves a stale heap entry, dropped when due or purged (`_Timers`).
        self._task = self._timer_at = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _interrupt(self, task: trio.lowlevel.Task, error: BaseException) -> bool:
        """End ``task``'s sleep by raising ``error`` in it; False, and nothing done, if it does not sleep here."""
        if self._task is not task:
            return False
        self._task = self._timer_at = None
        trio.lowlevel.reschedule(task, _Error(error))
        return True


class _SharedDecoding:
    """The decoding the copies of one broadcast share (`Network.send_many`): its copies differ only in
    their destination, so the first copy delivered is decoded and every other receiver gets its body --
    frozen, its arrays read-only, so no receiver can change what another sees -- in an envelope naming
    that receiver. A checkpoint saves none of it: a resumed run decodes the first copy it delivers."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: Envelope | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_SharedDecoding, ())


class Network:
    """Carries encoded messages between attached parties in virtual time.

    Args:
        links: the link policy (latency, bandwidth, loss), its draws counter-based per link.
        ledger: where every byte is counted.
        resolution_s: delivery times are rounded up to a multiple of this (0 = exact times).
        max_message_bytes: larger messages are refused by the wire.
        record_views: parties whose mailboxes keep a copy of everything they received.
        faults: the run's party faults (crashes, byzantine parties); none by default.
        origin: the loop-clock time at which the run's time is 0 (module docstring).
        event_time: time moves from one served instant to the next, whatever the loop's clock reads
            between them (module docstring); False: time is the loop's clock less ``origin``.
        started_at: in event time, the run's time when the network opens (a resumed run's: the time of its
            checkpoint).

    Attributes:
        crash_listeners: called with each `Crash` as it fires (the population restarts its users).
    """

    def __init__(
        self,
        links: Links,
        ledger: Ledger,
        *,
        resolution_s: float = 0.001,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        record_views: Iterable[Party] = (),
        faults: PartyFaults | None = None,
        origin: float = 0.0,
        event_time: bool = False,
        started_at: float = 0.0,
    ) -> None:
        if not (resolution_s >= 0 and math.isfinite(resolution_s)):
            raise ValueError(f"resolution_s must be a finite number >= 0, got {resolution_s}")
        self.links = links
        self.ledger = ledger
        self.resolution_s = resolution_s
        self.max_message_bytes = max_message_bytes
        self._record_views = frozenset(record_views)
        self.faults = faults if faults is not None else PartyFaults()
        self._crash_rules = bool(self.faults.crashes)
        self._forging = self.faults.forging
        self._crashed: set[Party] = set()
        # Sequence numbers of forged messages in flight: decoded strictly at delivery.
        self._forged: set[int] = set()
        self._receives: dict[Party, frozenset[str]] = {}
        self.crash_listeners: list[Callable[[Crash], None]] = []
        self._mailboxes: dict[Party, Mailbox] = {}
        self._timers = _Timers(self._wake_by)
        # The attached parties, each with its mailbox (one look-up per delivery).
        self._attached: dict[Party, Mailbox] = {}
        # Arrival times on a heap, each once; the messages due then in a bucket (unsorted until delivery).
        self._arrivals: list[float] = []
        # Each delivery: (src's role and index, dst's role and index, seq, src, dst, kind, data, padding, the
        # round it was sent in: `Ledger`'s rounds, the `_SharedDecoding` of its broadcast or None).
        self._buckets: dict[float, list[tuple[Any, ...]]] = {}
        # While `send_many` transmits the copies of a broadcast: the decoding they share (`_transmit` files it).
        self._sharing: _SharedDecoding | None = None
        self._seq = 0
        self._sleep: trio.CancelScope | None = None
        self._parked: trio.lowlevel.Task | None = None
        self._open = False
        self.origin = float(origin)
        self.event_time = event_time
        self.started_at = float(started_at)
        # Event time: the instant the delay line last served.
        self._served = self.started_at
        # Loop time: the loop's clock -- while open, that clock's own `current_time`, which is what
        # `trio.current_time` returns after two more calls.
        self._loop_time: Callable[[], float] = trio.current_time

    # ------------------------------------------------------------------ membership

    def attach(self, party: Party) -> Mailbox:
        """Bring ``party`` online; returns its (emptied) mailbox. Attaching twice is a no-op, and so is
        attaching a crashed party: it stays offline until `recover`."""
        mailbox = self._mailboxes.get(party)
        if mailbox is None:
            mailbox = self._mailboxes[party] = Mailbox(
                party, self._timers, party in self._record_views, self._receives.get(party)
            )
        if party not in self._attached and party not in self._crashed:
            mailbox.clear()
            self._attached[party] = mailbox
        return mailbox

    def expect(self, party: Party, kinds: Iterable[str]) -> None:
        """Declare the kinds ``party`` receives: any other kind delivered to it is rejected
        (`RejectReason.UNEXPECTED`), never put in its mailbox."""
        receives = self._receives[party] = frozenset(kinds)
        mailbox = self._mailboxes.get(party)
        if mailbox is not None:
            mailbox.receives = receives

    def is_crashed(self, party: Party) -> bool:
        """Whether ``party`` crashed (`PartyFaults`) and has not recovered."""
        return party in self._crashed

    def recover(self, party: Party) -> None:
        """A crashed ``party`` may come back: `attach` brings it online again (nothing else changes)."""
        self._crashed.discard(party)

    def _crash(self, crash: Crash) -> None:
        self._crashed.add(crash.party)
        self._attached.pop(crash.party, None)
        for listener in list(self.crash_listeners):
            listener(crash)

    def interrupt(self, party: Party, task: trio.lowlevel.Task, error: BaseException) -> bool:
        """Raise ``error`` in ``task`` -- ``party``'s task -- where it waits now, if that is one of the
        network's waits: for a delivery to ``party``'s mailbox, or in `sleep_until`. The wait ends as a
        cancel would end it (stale deadline, nothing taken from the mailbox), without a cancel scope's
        cost. False, and nothing done, when ``task`` is not parked in such a wait (it runs, is about to, or
        waits on something else): the caller then cancels it instead.
        """
        mailbox = self._mailboxes.get(party)
        if mailbox is not None and mailbox._interrupt(task, error):
            return True
        sleep = task.custom_sleep_data
        return type(sleep) is _Alarm and sleep._interrupt(task, error)

    def detach(self, party: Party) -> None:
        """Take ``party`` offline: messages to it are dropped until it attaches again."""
        self._attached.pop(party, None)

    def is_attached(self, party: Party) -> bool:
        return party in self._attached

    @property
    def attached(self) -> frozenset[Party]:
        return frozenset(self._attached)

    def mailbox(self, party: Party) -> Mailbox:
        """The mailbox of a party that has been attached at least once."""
        try:
            return self._mailboxes[party]
        except KeyError:
            raise ProtocolViolation(f"{party} was never attached to the network") from None

    def view(self, party: Party) -> list[Envelope]:
        """Everything ``party`` received, if the network was asked to record its view."""
        mailbox = self._mailboxes.get(party)
        if mailbox is None or mailbox.view is None:
            raise ValueError(f"the view of {party} was not recorded (pass it in record_views)")
        return mailbox.view

    # ------------------------------------------------------------------ time

    @property
    def now(self) -> float:
        """The run's time, in seconds since ``origin`` (module docstring): parties read it (`Actor.now`)
        and compute their deadlines from it."""
        if self.event_time:
            return self._served
        return self._loop_time() - self.origin

    # ------------------------------------------------------------------ sending and delivery

    def send(self, src: Party, dst: Party, body: Any, *, padding: int = 0) -> int:
        """Encode ``body`` and put it on the wire from ``src`` to ``dst``; returns its size in bytes (0 when
        ``src`` has crashed: nothing is sent).

        ``padding``: bytes the message stands for beyond its encoding, which this run leaves out -- an
        ideal functionality's payload (`fedrecsim.protocols.secagg.ideal`). The ledger, the size limit and
        the links' bandwidth count them as if carried; the transcript hashes the size with the bytes.
        """
        if (src not in self._attached or self._crash_rules) and not self._may_send(src, body):
            return 0
        now = self._served if self.event_time else self._loop_time() - self.origin
        data = encode(src, dst, now, body, self.max_message_bytes)
        if padding:
            if padding < 0:
                raise ValueError(f"padding must be >= 0, got {padding}")
            if len(data) + padding > self.max_message_bytes:
                raise WireError(
                    f"{body.KIND}: message of {len(data) + padding} bytes with its padding exceeds the limit of "
                    f"{self.max_message_bytes}"
                )
        return self._transmit(src, dst, body.KIND, data, now, padding)

    def send_many(self, src: Party, dsts: Iterable[Party], body: Any) -> int:
        """Send the same ``body`` to each of ``dsts`` (one message each); returns the total bytes.

        Equivalent to calling `send` for each destination in order -- the same bytes, the same ledger
        counters, the same link draws -- but the body is validated and packed once (`wire.encode_many`)
        and the copies are counted as sent in one `Ledger.record_sent`, once all are on their links (a
        subclass that carries some copies its own way, overriding `_transmit` -- `TcpNetwork` -- counts
        each copy there instead).
        """
        if (src not in self._attached or self._crash_rules) and not self._may_send(src, body):
            return 0
        now = self._served if self.event_time else self._loop_time() - self.origin
        dsts = list(dsts)
        encoded = encode_many(src, dsts, now, body, self.max_message_bytes)
        kind = body.KIND
        transmit = self._transmit
        total = 0
        # Copies in a `Broadcast` share their decoding already (`wire.SharedBody`).
        self._sharing = _SharedDecoding() if len(encoded) > 1 and type(encoded[0]) is bytes else None
        try:
            if type(self)._transmit is not Network._transmit:
                for dst, data in zip(dsts, encoded):
                    total += transmit(src, dst, kind, data, now)
                return total
            for dst, data in zip(dsts, encoded):
                total += transmit(src, dst, kind, data, now, 0, False)
        finally:
            self._sharing = None
        if encoded:
            self.ledger.record_sent(src, kind, total, len(encoded))
        return total

    def _may_send(self, src: Party, body: Any) -> bool:
        """False when ``src`` is crashed, or crashes now (a `Crash` rule fires): its message goes nowhere.

        Raises:
            ProtocolViolation: ``src`` is offline without having crashed.
        """
        if src not in self._attached:
            if src in self._crashed:
                return False
            raise ProtocolViolation(f"{src} is offline and cannot send {type(body).__qualname__}")
        if self._crash_rules:
            crash = self.faults.crash_now(src, body.KIND, self.ledger.round)
            if crash is not None:
                self._crash(crash)
                return False
        return True

    def _transmit(
        self, src: Party, dst: Party, kind: str, data: bytes | Broadcast, now: float, padding: int = 0,
        count: bool = True,
    ) -> int:
        """Count ``data`` as sent (unless ``count`` is False: the caller counts it, `send_many`), put it
        on the link and file each delivery the link makes of it (the original, and a duplicate) under its
        arrival time rounded up to the resolution, never at ``now``. Returns the bytes it counts for."""
        forged = False
        if self._forging:
            forgery = self.faults.forge(src, kind, data)
            if forgery is not None:
                data, forged = forgery, True
        nbytes = len(data) + padding
        ledger = self.ledger
        if count:
            ledger.record_sent(src, kind, nbytes)
        links = self.links
        arrival = links.transit(src, dst, nbytes, now)
        if arrival is None:
            reason = DropReason.PARTITIONED if links.is_down(src, dst, now) else DropReason.LOST
            ledger.record_dropped(now, src, dst, kind, nbytes, reason)
            return nbytes
        resolution = self.resolution_s
        sent_round = ledger.round
        sharing = self._sharing
        buckets = self._buckets
        while True:  # the message, then the copy the link made of it, if it made one
            if resolution > 0:
                arrival = _ceil(arrival / resolution - 1e-9) * resolution
                if arrival <= now:
                    arrival += resolution
            elif arrival <= now:
                arrival = math.nextafter(now, math.inf)
            self._seq = seq = self._seq + 1
            if forged:
                self._forged.add(seq)
            bucket = buckets.get(arrival)
            if bucket is None:
                bucket = buckets[arrival] = []
                _heappush(self._arrivals, arrival)
                self._wake_by(arrival)
            bucket.append((src[0], src[1], dst[0], dst[1], seq, src, dst, kind, data, padding, sent_round, sharing))
            arrival = links.copy_at
            if arrival is None:
                return nbytes
            links.copy_at = None
            ledger.record_duplicated(now, src, dst, kind, nbytes)

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until the virtual ``deadline``, woken after the messages due by then are delivered.

        Parties and protocol loops sleep with this rather than `trio.sleep_until`, which would race with
        the delay line at the same instant (module docstring).
        """
        if not self._timers.running:
            raise ProtocolViolation("sleep_until outside `async with network.open()`: no deadline could fire")
        alarm = _Alarm(deadline)
        self._timers.add(deadline, alarm)
        # So that `interrupt` finds the sleep (trio leaves this attribute to code that parks tasks).
        alarm._task.custom_sleep_data = alarm  # type: ignore[union-attr]
        await _park(WaitTaskRescheduled(alarm._abort))

    async def sleep(self, seconds: float) -> None:
        """`sleep_until` ``seconds`` from now."""
        await self.sleep_until(self.now + seconds)

    def _wake_by(self, when: float) -> None:
        """Make the delay line wake no later than ``when``."""
        sleeper = self._sleep
        if sleeper is not None and self.origin + when < sleeper.deadline:
            sleeper.deadline = self.origin + when

    def _deliver_due(self, now: float) -> None:
        """Deliver every message due by ``now`` (run time), then end the waits and sleeps due by then."""
        arrivals = self._arrivals
        record_delivered = self.ledger.record_delivered
        read = TRUSTED_READERS
        attached = self._attached
        forged = self._forged
        buckets = self._buckets
        # `_wake` inline: no task runs while an instant is delivered, so neither the loop nor its
        # instruments change meanwhile.
        run_queue = _run_queue()
        reschedule = GLOBAL_RUN_CONTEXT.runner.reschedule
        while arrivals and arrivals[0] <= now:
            arrival = heapq.heappop(arrivals)
            bucket = buckets.pop(arrival)
            # Delivered in (src, dst, seq) order -- seq is unique, so nothing after it is compared --
            # popped from the end of the reversed bucket: the bucket lets go of each message's bytes once
            # it is delivered (what the receiver keeps is its decoded message), so an instant that carries
            # many large messages never holds all their bytes and all their decoded copies at once.
            bucket.sort(reverse=True)
            while bucket:
                _, _, _, _, seq, src, dst, kind, data, padding, sent_round, sharing = bucket.pop()
                mailbox = attached.get(dst)
                if mailbox is None:
                    if forged:
                        forged.discard(seq)
                    self.ledger.record_dropped(
                        arrival, src, dst, kind, len(data) + padding, DropReason.OFFLINE, sent_round
                    )
                    continue
                record_delivered(arrival, src, dst, kind, data, padding, sent_round)
                if forged and seq in forged:
                    forged.discard(seq)
                    envelope = self._decode_forged(arrival, src, dst, kind, data)
                    if envelope is not None:
                        self._accept(arrival, src, dst, mailbox, envelope)
                    continue
                # Trusted bytes, filed beside their kind: its reader is `wire.decode_trusted`'s for them.
                if sharing is None:
                    envelope = read[kind](data) if type(data) is not Broadcast else decode_broadcast(kind, src, dst, data)
                else:
                    first = sharing.first
                    if first is None:
                        envelope = sharing.first = read[kind](data)
                    else:
                        envelope = _envelope(kind, src, dst, first.sent_at, first.body)
                receives = mailbox.receives
                if receives is not None and kind not in receives:
                    self._accept(arrival, src, dst, mailbox, envelope)
                    continue
                # `Mailbox.put`, inline: once per delivery.
                mailbox._by_kind[kind].append(envelope)
                if mailbox.view is not None:
                    mailbox.view.append(envelope)
                waiter = mailbox._waiter
                if waiter is not None:
                    mailbox._waiter = None
                    if run_queue is None:
                        reschedule(waiter, True)
                    else:
                        waiter._next_send_fn = waiter.coro.send
                        waiter._next_send = True
                        waiter._abort_func = None
                        waiter.custom_sleep_data = None
                        run_queue.append(waiter)
        self._timers.expire_due(now)

    def _accept(self, arrival: float, src: Party, dst: Party, mailbox: Mailbox, envelope: Envelope) -> None:
        """Put ``envelope``, delivered from ``src`` to ``dst``, in ``dst``'s ``mailbox``, or reject it: a kind
        ``dst``'s role never receives."""
        receives = mailbox.receives
        if receives is not None and envelope.kind not in receives:
            problem = f"{dst} expected one of {', '.join(sorted(receives))}; received {envelope.kind} from {src}"
            self.ledger.record_rejected(arrival, src, dst, envelope.kind, RejectReason.UNEXPECTED, problem)
            return
        mailbox.put(envelope)

    def _decode_forged(self, arrival: float, src: Party, dst: Party, kind: str, data: bytes) -> Envelope | None:
        """A forged message through the strict decoder; None (and a rejection) when it does not decode."""
        try:
            return decode(data, self.max_message_bytes)
        except WireError as err:
            problem = f"{dst} expected a valid {kind} from {src}; received bytes that do not decode: {err}"
            self.ledger.record_rejected(arrival, src, dst, kind, RejectReason.MALFORMED, problem)
            return None

    def _next_due(self) -> float:
        """The earliest arrival or deadline (inf: none)."""
        due = self._timers.next_deadline
        arrivals = self._arrivals
        return arrivals[0] if arrivals and arrivals[0] < due else due

    def _serve_due(self) -> None:
        """Deliver what is due now: in loop time, everything due by the loop's clock; in event time, the
        earliest instant on the heap once the loop's clock has reached it (never one before the instant
        last served: a deadline already past is served at that instant)."""
        if not self.event_time:
            # `_loop_time` is the loop's clock's own `current_time` while the network is open.
            self._deliver_due(self._loop_time() - self.origin)
            return
        due = self._next_due()
        if self.origin + due > self._loop_time():
            return
        self._served = served = max(due, self._served)
        self._deliver_due(served)

    async def _delay_line(self) -> None:
        clock = trio.lowlevel.current_clock()
        if isinstance(clock, VirtualClock):
            await self._delay_line_woken_by(clock)
        elif self.event_time:
            await self._delay_line_paced()
        else:
            while True:
                await self._sleep_until_due()
                self._serve_due()

    async def _sleep_until_due(self) -> None:
        """Sleep on the loop's clock until the earliest arrival or deadline (`_wake_by` makes it earlier)."""
        with trio.CancelScope(deadline=self.origin + self._next_due()) as scope:
            self._sleep = scope
            await trio.sleep_forever()
        self._sleep = None

    async def _delay_line_paced(self) -> None:
        """The delay line in event time on a clock of the loop's that does not jump to it (module
        docstring): one instant at a time, each once the loop's clock reached it and every task is blocked
        -- so the tasks the previous instant woke have sent what they send at that instant, as they
        would have under a jumping clock, however long their computation took in the loop's time."""
        while True:
            if self.origin + self._next_due() > trio.current_time():
                await self._sleep_until_due()
                continue
            await trio.testing.wait_all_tasks_blocked()
            self._serve_due()

    async def _delay_line_woken_by(self, clock: VirtualClock) -> None:
        """The delay line under `VirtualClock`: parked for the whole run, without a deadline; the clock
        serves each instant through it (`wake`) when it jumps.

        A cancel scope per wake is most of what a wake costs in trio (a busy run wakes hundreds of times
        per round), and a task switch per instant most of the rest; the clock instead asks `next_wake`
        whenever nothing can run and has the instant served (`wake`). The task wakes only to raise what
        serving raised, or to be cancelled when the network closes.
        """
        clock.add_source(self)
        try:
            self._serve_due()
            self._parked = trio.lowlevel.current_task()
            await _park(WaitTaskRescheduled(self._unpark))
        finally:
            clock.remove_source(self)

    def next_wake(self) -> float:
        """For `VirtualClock`: when (on its clock) the parked delay line must serve next (inf while it is not parked)."""
        return self.origin + self._next_due() if self._parked is not None else math.inf

    def wake(self) -> None:
        """For `VirtualClock`: serve the instant the clock jumped to (time already stands at `next_wake`),
        here, in the clock's call, while the delay line stays parked: the receivers the deliveries wake
        run in trio's next batch, one pass of its loop per instant instead of one to run the delay line
        and one to run them. Should serving raise, the delay line is woken with the error, which it raises
        where it is parked, as it would have raised serving the instant itself."""
        task = self._parked
        if task is None:
            return
        try:
            self._serve_due()
        except BaseException as error:
            self._parked = None
            trio.lowlevel.reschedule(task, _Error(error))

    def _unpark(self, raise_cancel: object) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    @property
    def in_flight(self) -> int:
        """How many deliveries are filed and not yet due (a copy the link made counts as one more)."""
        return sum(map(len, self._buckets.values()))

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything the network holds between two instants of a run (`fedrecsim.checkpoint`): who is
        attached or crashed, the messages in flight with their sequence numbers, every mailbox's
        undelivered-to-its-task messages (and recorded view), the links' counters and the faults' records.

        Waits and sleeps are not in it: they belong to tasks, which a resumed run starts again.
        """
        return {
            "attached": set(self._attached),
            "crashed": set(self._crashed),
            "forged": set(self._forged),
            "seq": self._seq,
            "in_flight": self.in_flight,  # what the buckets hold: for whoever reads a checkpoint
            "arrivals": list(self._arrivals),
            # Each delivery as (src, dst, seq, kind, data, padding, sent round, shared decoding).
            "buckets": {
                arrival: [delivery[5:7] + delivery[4:5] + delivery[7:] for delivery in bucket]
                for arrival, bucket in self._buckets.items()
            },
            "mailboxes": {
                party: ({kind: list(queue) for kind, queue in mailbox._by_kind.items() if queue}, mailbox.view)
                for party, mailbox in self._mailboxes.items()
            },
            "links": self.links.checkpoint_state(),
            "faults": vars(self.faults),
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        """Carry on from `checkpoint_state`'s ``state``, on a network built from the same scenario and seed
        whose parties have declared what they receive (`expect`)."""
        self._crashed = set(state["crashed"])
        self._forged = set(state["forged"])
        self._seq = state["seq"]
        self._arrivals = list(state["arrivals"])  # saved as the heap it was
        self._buckets = {
            arrival: [(src[0], src[1], dst[0], dst[1], seq, src, dst, *rest) for src, dst, seq, *rest in bucket]
            for arrival, bucket in state["buckets"].items()
        }
        for party, (by_kind, view) in state["mailboxes"].items():
            mailbox = self._mailboxes.get(party)
            if mailbox is None:
                mailbox = self._mailboxes[party] = Mailbox(party, self._timers, receives=self._receives.get(party))
            mailbox._by_kind = defaultdict(deque, {kind: deque(queue) for kind, queue in by_kind.items()})
            mailbox.view = view
        self._attached = {party: self._mailboxes[party] for party in state["attached"]}
        self.links.restore_state(state["links"])
        vars(self.faults).update(state["faults"])

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Network]:
        """Run the delay line for the duration of the block; undelivered messages are counted at exit."""
        if self._open:
            raise ProtocolViolation("this network is already open")
        self._open = True
        self._timers.running = True
        self._served = self.started_at
        self._loop_time = trio.lowlevel.current_clock().current_time
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._delay_line)
                try:
                    yield self
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self._open = False
            self._timers.running = False
            self._loop_time = trio.current_time
            self._sleep = None
            now = self.now
            for arrival in sorted(self._buckets):
                for *_, src, dst, kind, data, padding, sent_round, _ in sorted(self._buckets[arrival]):
                    self.ledger.record_dropped(now, src, dst, kind, len(data) + padding, DropReason.UNFINISHED, sent_round)
            self._buckets.clear()
            self._arrivals.clear()
            self._forged.clear()


__all__ = ["Mailbox", "Network"]
