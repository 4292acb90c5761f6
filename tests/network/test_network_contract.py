"""The network's delay line, mailboxes and timers against their documented rules (issue 13).

Every scenario runs under both clocks the simulator meets: trio's autojumping `MockClock` (the delay line
sleeps in a cancel scope) and fedrecsim's `VirtualClock` (the delay line parks and the clock wakes it).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.clock import VirtualClock
from fedrecsim.errors import ProtocolViolation, WireError
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import LATENCY_DRAW, Constant, LinkSpec, Links, Uniform, draw_bits, uniforms
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, encode, message

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)
CAROL = Party(Role.USER, 2)


@message("test.contract_note")
@dataclass(frozen=True)
class Note:
    seq: int
    values: Array("float64", ndim=1)


def note(seq: int, size: int = 1) -> Note:
    return Note(seq, np.zeros(size))


CLOCKS = {
    "mock": lambda: trio.testing.MockClock(autojump_threshold=0),
    "virtual": VirtualClock,
}


@pytest.fixture(params=sorted(CLOCKS))
def run(request) -> Callable[[Callable[[], Awaitable[object]]], object]:  # type: ignore[no-untyped-def]
    """Run an async scenario under one of the two clocks (virtual time starts at 0 under both)."""
    make_clock = CLOCKS[request.param]
    return lambda scenario: trio.run(scenario, clock=make_clock())


def _network(latency_s: float = 0.0, resolution_s: float = 0.001, transcript: bool = True, **kwargs) -> Network:  # type: ignore[no-untyped-def]
    return Network(Links(1, LinkSpec(Constant(latency_s))), Ledger(record_transcript=transcript),
                   resolution_s=resolution_s, **kwargs)


# ------------------------------------------------------------------ delivery times


@pytest.mark.parametrize(
    ("latency_s", "resolution_s", "expected"),
    [
        (0.25, 0.0, 0.25),  # exact times
        (0.25, 0.1, 0.30000000000000004),  # rounded up to the next multiple: ceil(2.5) * 0.1
        (0.3, 0.1, 0.30000000000000004),  # 0.3 / 0.1 = 2.9999999999999996: within 1e-9 of 3, not rounded to 4
        (0.0, 0.5, 0.5),  # a zero delay arrives one tick later, never in the sending instant
        (0.20000001, 0.1, 0.30000000000000004),  # 1e-7 of a tick over a tick is rounded up to the next
        (0.0, 0.0, 5e-324),  # with exact times, the next float after 0
    ],
)
def test_delivery_time_is_the_arrival_rounded_up_to_the_resolution(run, latency_s, resolution_s, expected) -> None:  # type: ignore[no-untyped-def]
    network = _network(latency_s, resolution_s)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            assert trio.current_time() == 0.0
            network.send(ALICE, SERVER, note(0))
            assert network.in_flight == 1
            assert await mailbox.wait(100.0)
            assert trio.current_time() == expected
            assert network.in_flight == 0

    run(scenario)
    (row,) = network.ledger.transcript
    assert (row.time, row.status) == (expected, "delivered")


def test_a_delivery_time_already_on_the_grid_stays_there(run) -> None:  # type: ignore[no-untyped-def]
    # Sent at t = 0.5 with latency 0.25 and resolution 0.25: due at exactly 0.75.
    network = _network(0.25, 0.25)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            await network.sleep(0.5)
            network.send(ALICE, SERVER, note(0))
            assert await mailbox.wait(100.0)
            assert trio.current_time() == 0.75

    run(scenario)


def test_an_earlier_arrival_sent_later_wakes_the_delay_line_in_time(run) -> None:  # type: ignore[no-untyped-def]
    # BOB's message is due at 10 s; ALICE's, sent later, at 1.5 s: the delay line must not sleep to 10.
    links = Links(1, LinkSpec(Constant(10.0)), {(Role.USER, Role.USER): LinkSpec(Constant(1.0))})
    network = Network(links, Ledger(record_transcript=True), resolution_s=0.0)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    seen: list[tuple[float, Party]] = []

    async def scenario() -> None:
        async with network.open():
            network.send(BOB, SERVER, note(0))
            await network.sleep(0.5)
            network.send(BOB, ALICE, note(1))
            mailbox = network.mailbox(ALICE)
            assert await mailbox.wait(100.0)
            seen.append((trio.current_time(), mailbox.take(Note.KIND).src))
            await network.sleep_until(20.0)

    run(scenario)
    assert seen == [(1.5, BOB)]
    assert [(row.time, row.dst) for row in network.ledger.transcript] == [(1.5, ALICE), (10.0, SERVER)]


def test_an_idle_delay_line_is_woken_by_a_new_send(run) -> None:  # type: ignore[no-untyped-def]
    # Nothing is in flight while the delay line waits; a send must schedule its delivery.
    network = _network(2.0, 0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    times: list[float] = []

    async def scenario() -> None:
        async with network.open():
            await network.sleep(3.0)
            network.send(ALICE, SERVER, note(0))
            assert await mailbox.wait(50.0)
            times.append(trio.current_time())

    run(scenario)
    assert times == [5.0]


# ------------------------------------------------------------------ mailboxes


def test_a_mailbox_deadline_passes_without_a_delivery(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(5.0, 0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    results: list[tuple[bool, float]] = []

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, note(0))
            results.append((await mailbox.wait(2.0), trio.current_time()))
            results.append((await mailbox.wait(2.0), trio.current_time()))  # the same deadline, past: at once
            results.append((await mailbox.wait(10.0), trio.current_time()))  # the delivery at 5 comes first
            results.append((await mailbox.wait(3.0), trio.current_time()))  # a past deadline, anew

    run(scenario)
    assert results == [(False, 2.0), (False, 2.0), (True, 5.0), (False, 5.0)]


def test_a_stale_deadline_does_not_end_a_later_wait(run) -> None:  # type: ignore[no-untyped-def]
    # The first wait (deadline 10) ends with a delivery at 1; the second waits for deadline 20. When the
    # stale timer of 10 fires, the second wait must go on until the delivery at 15.
    links = Links(1, LinkSpec(Constant(1.0)))
    network = Network(links, Ledger(), resolution_s=0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    results: list[tuple[bool, float]] = []

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, note(0))
            results.append((await mailbox.wait(10.0), trio.current_time()))
            await network.sleep_until(14.0)
            network.send(ALICE, SERVER, note(1))
            results.append((await mailbox.wait(20.0), trio.current_time()))

    run(scenario)
    assert results == [(True, 1.0), (True, 15.0)]


def test_take_by_sender_removes_only_that_senders_oldest_message(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(0.0, 0.0)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    mailbox = network.mailbox(SERVER)

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, note(1))
            network.send(BOB, SERVER, note(2))
            network.send(ALICE, SERVER, note(3))
            network.send(BOB, SERVER, note(4))
            await network.sleep(1.0)

    run(scenario)
    assert mailbox.take("test.nothing") is None
    assert mailbox.take(Note.KIND, CAROL) is None
    assert mailbox.take(Note.KIND, BOB).body.seq == 2
    assert mailbox.take(Note.KIND, BOB).body.seq == 4
    assert mailbox.take(Note.KIND, BOB) is None
    assert mailbox.take(Note.KIND).body.seq == 1
    assert [envelope.body.seq for envelope in mailbox.take_all(Note.KIND)] == [3]
    assert mailbox.take_all(Note.KIND) == []
    assert mailbox.take(Note.KIND) is None
    assert mailbox.take_all("test.nothing") == []


def test_reattaching_empties_the_mailbox_but_attaching_twice_does_not(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(0.0, 0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, note(1))
            network.send(ALICE, SERVER, note(2))
            await network.sleep(1.0)

    run(scenario)
    assert network.attach(SERVER) is mailbox
    assert mailbox.take(Note.KIND).body.seq == 1  # still there: attaching an attached party is a no-op
    assert network.is_attached(SERVER) and network.attached == frozenset({ALICE, SERVER})
    network.detach(SERVER)
    assert not network.is_attached(SERVER) and network.attached == frozenset({ALICE})
    assert network.mailbox(SERVER) is mailbox
    assert network.attach(SERVER) is mailbox
    assert mailbox.take(Note.KIND) is None  # emptied on coming back online
    network.detach(SERVER)
    network.detach(SERVER)  # detaching twice is harmless
    assert network.attached == frozenset({ALICE})


def test_recorded_views_keep_everything_received_and_only_for_the_parties_asked(run) -> None:  # type: ignore[no-untyped-def]
    network = Network(Links(1, LinkSpec(Constant(0.0))), Ledger(), resolution_s=0.0, record_views=[SERVER])
    for party in (ALICE, BOB, SERVER):
        network.attach(party)

    async def scenario() -> None:
        async with network.open():
            network.send(ALICE, SERVER, note(1))
            network.send(SERVER, BOB, note(2))
            await network.sleep(1.0)

    run(scenario)
    network.mailbox(SERVER).take_all(Note.KIND)  # taking does not remove a message from the view
    assert [(envelope.src, envelope.body.seq) for envelope in network.view(SERVER)] == [(ALICE, 1)]
    with pytest.raises(ValueError, match="the view of user:1 was not recorded"):
        network.view(BOB)
    with pytest.raises(ValueError, match="the view of user:2 was not recorded"):
        network.view(CAROL)


def test_asking_for_the_mailbox_of_a_party_never_attached_is_a_protocol_violation() -> None:
    network = _network()
    with pytest.raises(ProtocolViolation, match="^user:2 was never attached to the network$"):
        network.mailbox(CAROL)


def test_two_tasks_waiting_on_one_mailbox_is_a_protocol_violation(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    mailbox = network.attach(SERVER)
    errors: list[str] = []

    async def waiter() -> None:
        try:
            await mailbox.wait(5.0)
        except ProtocolViolation as error:
            errors.append(str(error))

    async def scenario() -> None:
        async with network.open():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                nursery.start_soon(waiter)
            assert trio.current_time() == 5.0

    run(scenario)
    assert errors == ["two tasks wait on the mailbox of server:0; only its own actor may"]


def test_a_cancelled_wait_frees_the_mailbox_for_the_next(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(3.0, 0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    results: list[tuple[bool, float]] = []

    async def scenario() -> None:
        async with network.open():
            with trio.move_on_after(1.0):
                await mailbox.wait(50.0)
            network.send(ALICE, SERVER, note(0))
            results.append((await mailbox.wait(50.0), trio.current_time()))

    run(scenario)
    assert results == [(True, 4.0)]


def test_waiting_outside_an_open_network_is_refused(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    mailbox = network.attach(SERVER)
    errors: list[str] = []

    async def scenario() -> None:
        for wait in (lambda: mailbox.wait(1.0), lambda: network.sleep_until(1.0)):
            try:
                await wait()
            except ProtocolViolation as error:
                errors.append(str(error))
        async with network.open():
            pass
        try:
            await mailbox.wait(1.0)  # closed again
        except ProtocolViolation as error:
            errors.append(str(error))

    run(scenario)
    assert errors == [
        "server:0 waits for messages outside `async with network.open()`: nothing could arrive and no "
        "deadline could fire",
        "sleep_until outside `async with network.open()`: no deadline could fire",
        "server:0 waits for messages outside `async with network.open()`: nothing could arrive and no "
        "deadline could fire",
    ]


def test_a_network_opened_twice_at_once_is_refused_and_reopens_after_closing(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    errors: list[str] = []

    async def scenario() -> None:
        async with network.open() as opened:
            assert opened is network
            try:
                async with network.open():
                    pass
            except ProtocolViolation as error:
                errors.append(str(error))
        async with network.open():
            await network.sleep(1.0)
        assert trio.current_time() == 1.0

    run(scenario)
    assert errors == ["this network is already open"]


# ------------------------------------------------------------------ sleeps and timers


def test_sleeps_end_at_their_deadlines_and_a_cancelled_sleep_leaves_nothing_behind(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    times: list[float] = []

    async def scenario() -> None:
        async with network.open():
            with trio.move_on_after(1.0):
                await network.sleep_until(3.0)  # cancelled at 1; its timer still fires at 3, harmlessly
            times.append(trio.current_time())
            await network.sleep(0.5)
            times.append(trio.current_time())
            await network.sleep_until(4.0)  # past the stale timer of 3
            times.append(trio.current_time())
            await network.sleep_until(2.0)  # already past: returns at once
            times.append(trio.current_time())

    run(scenario)
    assert times == [1.0, 1.5, 4.0, 4.0]


def test_many_stale_timers_are_purged_without_losing_live_deadlines(run) -> None:  # type: ignore[no-untyped-def]
    # Every wait here has its own deadline and ends with a delivery, leaving its timer stale: 1500 of them,
    # past the purge threshold of 1024. The live deadlines (a sleeper at 100, a mailbox at 200) survive.
    network = _network(0.0, 0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    woke: list[float] = []

    async def sleeper() -> None:
        await network.sleep_until(100.0)
        woke.append(trio.current_time())

    async def scenario() -> None:
        async with network.open():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sleeper)
                for seq in range(1500):
                    network.send(ALICE, SERVER, note(seq))
                    assert await mailbox.wait(1000.0 + seq)
                    mailbox.take(Note.KIND)
                assert len(network._timers._heap) < 1500
                assert not await mailbox.wait(200.0)
                woke.append(trio.current_time())

    run(scenario)
    assert woke == [100.0, 200.0]


# ------------------------------------------------------------------ sends, drops and the ledger


def test_messages_in_flight_at_close_are_counted_in_order_of_arrival_then_sender(run) -> None:  # type: ignore[no-untyped-def]
    links = Links(1, LinkSpec(Constant(10.0)), {(Role.USER, Role.SERVER): LinkSpec(Constant(5.0))})
    network = Network(links, Ledger(record_transcript=True), resolution_s=0.0)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)

    async def scenario() -> None:
        async with network.open():
            network.send(SERVER, ALICE, note(1))  # due at 10
            network.send(BOB, SERVER, note(2))  # due at 5
            network.send(ALICE, SERVER, note(3))  # due at 5
            await network.sleep(1.0)
            assert network.in_flight == 3

    run(scenario)
    assert network.in_flight == 0
    rows = [(row.time, row.src, row.dst, row.status) for row in network.ledger.transcript]
    assert rows == [
        (1.0, ALICE, SERVER, "dropped:unfinished"),
        (1.0, BOB, SERVER, "dropped:unfinished"),
        (1.0, SERVER, ALICE, "dropped:unfinished"),
    ]
    assert network.ledger.dropped_by_reason == {"lost": 0, "offline": 0, "unfinished": 3, "partitioned": 0}


def test_a_message_to_an_offline_party_is_dropped_at_its_arrival_time(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(2.0, 0.0)
    network.attach(ALICE)
    network.attach(BOB)

    async def scenario() -> None:
        async with network.open():
            sizes.append(network.send(ALICE, BOB, note(0, 3)))
            network.detach(BOB)
            await network.sleep(5.0)

    sizes: list[int] = []
    run(scenario)
    (row,) = network.ledger.transcript
    assert (row.time, row.src, row.dst, row.kind, row.nbytes, row.status) == (2.0, ALICE, BOB, Note.KIND, sizes[0], "dropped:offline")
    assert network.ledger.party(ALICE)["dropped_msgs"] == 1 and network.ledger.party(BOB)["recv_msgs"] == 0


def test_a_lost_message_is_counted_when_sent_and_its_size_returned(run) -> None:  # type: ignore[no-untyped-def]
    links = Links(1, LinkSpec(Constant(0.0), loss=0.999999))
    network = Network(links, Ledger(record_transcript=True), resolution_s=0.0)
    network.attach(ALICE)
    network.attach(SERVER)
    sizes: list[int] = []

    async def scenario() -> None:
        async with network.open():
            await network.sleep(1.0)
            body = note(0, 4)
            sizes.append(len(encode(ALICE, SERVER, trio.current_time(), body)))
            sizes.append(network.send(ALICE, SERVER, body))
            assert network.in_flight == 0
            await network.sleep(1.0)

    run(scenario)
    assert sizes[0] == sizes[1]
    (row,) = network.ledger.transcript
    assert (row.time, row.nbytes, row.status) == (1.0, sizes[0], "dropped:lost")
    assert network.ledger.party(ALICE)["sent_bytes"] == sizes[0]


def test_send_many_returns_the_total_and_applies_the_size_limit(run) -> None:  # type: ignore[no-untyped-def]
    limit = len(encode(SERVER, ALICE, 0.0, note(0, 4)))
    network = _network(1.0, 0.0, max_message_bytes=limit)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    totals: list[int] = []

    async def scenario() -> None:
        async with network.open():
            totals.append(network.send_many(SERVER, iter([ALICE, BOB]), note(0, 4)))
            totals.append(network.send(SERVER, ALICE, note(1, 4)))
            with pytest.raises(WireError, match="exceeds the limit"):
                network.send(SERVER, ALICE, note(2, 5))
            with pytest.raises(WireError, match="exceeds the limit"):
                network.send_many(SERVER, [ALICE], note(3, 5))
            await network.sleep(2.0)

    run(scenario)
    assert totals == [2 * limit, limit]
    assert network.ledger.party(SERVER)["sent_msgs"] == 3
    assert [envelope.body.seq for envelope in network.mailbox(ALICE).take_all(Note.KIND)] == [0, 1]
    assert [envelope.body.seq for envelope in network.mailbox(BOB).take_all(Note.KIND)] == [0]


def test_an_offline_sender_cannot_send_many(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            with pytest.raises(ProtocolViolation, match="^user:0 is offline and cannot send Note$"):
                network.send_many(ALICE, [SERVER], note(0))

    run(scenario)


def test_the_default_resolution_is_a_millisecond() -> None:
    network = Network(Links(1, LinkSpec()), Ledger())
    assert network.resolution_s == 0.001
    assert network.max_message_bytes == 256 * 1024 * 1024


@pytest.mark.parametrize("resolution_s", [-0.001, math.inf, math.nan])
def test_a_resolution_that_is_not_finite_and_non_negative_is_refused(resolution_s: float) -> None:
    with pytest.raises(ValueError, match="resolution_s must be a finite number >= 0"):
        Network(Links(1, LinkSpec()), Ledger(), resolution_s=resolution_s)


def test_deliveries_of_one_instant_across_many_links_follow_sender_receiver_sequence(run) -> None:  # type: ignore[no-untyped-def]
    # Uniform latencies on a 1 s grid: many messages share arrival ticks; within a tick the order is
    # (sender, receiver, send sequence), across ticks it is time.
    links = Links(4, LinkSpec(Uniform(0.0, 3.0)))
    network = Network(links, Ledger(record_transcript=True), resolution_s=1.0)
    parties = [Party(Role.USER, index) for index in range(4)]
    for party in parties:
        network.attach(party)
    sent: list[tuple[Party, Party, int]] = []

    async def scenario() -> None:
        async with network.open():
            for seq in range(40):
                src, dst = parties[(seq * 7) % 4], parties[(seq * 3 + 1) % 4]
                network.send(src, dst, note(seq))
                sent.append((src, dst, seq))
            await network.sleep(10.0)

    run(scenario)
    # The documented rule, by hand: message n of a link draws latency 3 * u from its own bits; the arrival
    # is rounded up to the 1 s grid (a zero delay to the next tick); ties break by sender, receiver, send.
    counts: dict[tuple[Party, Party], int] = {}
    expected = []
    for src, dst, seq in sent:
        n = counts[(src, dst)] = counts.get((src, dst), -1) + 1
        latency = 3.0 * uniforms(draw_bits(4, src, dst, n, LATENCY_DRAW))[0]
        arrival = max(math.ceil(latency - 1e-9), 1.0)
        expected.append((arrival, src, dst, seq))
    expected.sort()
    assert len({arrival for arrival, *_ in expected}) == 3  # ticks 1, 2 and 3, each shared by many messages
    rows = network.ledger.transcript
    assert [(row.time, row.src, row.dst) for row in rows] == [(arrival, src, dst) for arrival, src, dst, _ in expected]
    for party in parties:
        seqs = [envelope.body.seq for envelope in network.mailbox(party).take_all(Note.KIND)]
        assert seqs == [seq for _, _, dst, seq in expected if dst == party]


def test_waiters_sharing_one_deadline_all_wake_at_it(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    mailboxes = [network.attach(party) for party in (ALICE, BOB, CAROL)]
    woke: list[tuple[str, object, float]] = []

    async def waiter(name: str, mailbox) -> None:  # type: ignore[no-untyped-def]
        woke.append((name, await mailbox.wait(5.0), trio.current_time()))

    async def sleeper() -> None:
        await network.sleep_until(5.0)
        woke.append(("sleeper", None, trio.current_time()))

    async def scenario() -> None:
        async with network.open():
            async with trio.open_nursery() as nursery:
                for name, mailbox in zip("abc", mailboxes):
                    nursery.start_soon(waiter, name, mailbox)
                nursery.start_soon(sleeper)
                nursery.start_soon(sleeper)

    run(scenario)
    assert sorted(woke, key=str) == sorted(
        [("a", False, 5.0), ("b", False, 5.0), ("c", False, 5.0), ("sleeper", None, 5.0), ("sleeper", None, 5.0)], key=str
    )


def test_every_fate_is_recorded_with_its_time_ends_kind_and_size(run) -> None:  # type: ignore[no-untyped-def]
    links = Links(1, LinkSpec(Constant(1.0)), {(Role.USER, Role.SERVER): LinkSpec(Constant(1.0), loss=0.999999)})
    network = Network(links, Ledger(record_transcript=True), resolution_s=0.0)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    sizes: dict[str, int] = {}

    async def scenario() -> None:
        async with network.open():
            await network.sleep(2.0)
            sizes["lost"] = network.send(ALICE, SERVER, note(1, 2))
            sizes["delivered"] = network.send(SERVER, ALICE, note(2, 3))
            sizes["offline"] = network.send(SERVER, BOB, note(3, 4))
            network.detach(BOB)
            await network.sleep(2.0)

    run(scenario)
    rows = [(row.time, row.src, row.dst, row.kind, row.nbytes, row.status) for row in network.ledger.transcript]
    assert rows == [
        (2.0, ALICE, SERVER, Note.KIND, sizes["lost"], "dropped:lost"),
        (3.0, SERVER, ALICE, Note.KIND, sizes["delivered"], "delivered"),
        (3.0, SERVER, BOB, Note.KIND, sizes["offline"], "dropped:offline"),
    ]
    assert network.ledger.summary()["kinds"] == {Note.KIND: {"msgs": 3, "bytes": sum(sizes.values())}}


def test_a_zero_delay_message_sent_late_arrives_one_tick_after_its_send(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(0.0, 0.5)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    times: list[float] = []

    async def scenario() -> None:
        async with network.open():
            await network.sleep(3.0)
            network.send(ALICE, SERVER, note(0))
            assert await mailbox.wait(100.0)
            times.append(trio.current_time())

    run(scenario)
    assert times == [3.5]


def test_messages_of_one_link_due_in_one_tick_arrive_in_send_order_whatever_their_bytes(run) -> None:  # type: ignore[no-untyped-def]
    network = _network(0.0, 1.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            for seq in (9, 5, 7, 1):
                network.send(ALICE, SERVER, note(seq))
            await network.sleep(2.0)

    run(scenario)
    assert [envelope.body.seq for envelope in mailbox.take_all(Note.KIND)] == [9, 5, 7, 1]


def test_an_offline_sender_cannot_send(run) -> None:  # type: ignore[no-untyped-def]
    network = _network()
    network.attach(SERVER)

    async def scenario() -> None:
        async with network.open():
            with pytest.raises(ProtocolViolation, match="^user:0 is offline and cannot send Note$"):
                network.send(ALICE, SERVER, note(0))

    run(scenario)
    assert network.ledger.totals()["sent_msgs"] == 0
