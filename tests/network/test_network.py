"""The network: exact byte accounting, virtual-time delivery, quantization, offline drops."""

from __future__ import annotations

import math
import time
import tracemalloc
from dataclasses import dataclass

import numpy as np
import pytest
import trio

from fedrecsim.errors import ProtocolViolation
from fedrecsim.network.ledger import DropReason, Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Array, decode, decode_trusted, encode, message

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)


@message("test.net_payload")
@dataclass(frozen=True)
class Payload:
    seq: int
    values: Array("float64", ndim=1)


def _network(latency_s: float = 0.0, bandwidth_bps: float = 0.0, resolution_s: float = 0.001, loss: float = 0.0,
             transcript: bool = False) -> Network:
    links = Links(1, LinkSpec(Constant(latency_s), bandwidth_bps, loss))
    return Network(links, Ledger(record_transcript=transcript), resolution_s=resolution_s)


async def test_ledger_bytes_equal_the_encoded_sizes_and_sent_equals_received_plus_dropped(autojump_clock) -> None:
    network = _network(latency_s=0.01, transcript=True)
    for party in (ALICE, BOB, SERVER):
        network.attach(party)
    expected_sent = {ALICE: 0, BOB: 0, SERVER: 0}
    async with network.open():
        for seq in range(5):
            for src, dst in ((ALICE, SERVER), (SERVER, BOB), (BOB, ALICE)):
                body = Payload(seq, np.arange(seq + 1, dtype=np.float64))
                size = len(encode(src, dst, trio.current_time(), body))
                assert network.send(src, dst, body) == size
                expected_sent[src] += size
        network.detach(BOB)
        await trio.sleep(1.0)
    ledger = network.ledger
    for party, sent in expected_sent.items():
        assert ledger.party(party)["sent_bytes"] == sent
    totals = ledger.totals()
    assert totals["sent_msgs"] == 15
    assert totals["sent_msgs"] == totals["recv_msgs"] + totals["dropped_msgs"]
    assert totals["dropped_msgs"] == 5  # BOB went offline before the messages addressed to him arrived
    assert ledger.dropped_by_reason[DropReason.OFFLINE.value] == 5
    delivered = [row for row in ledger.transcript if row.status == "delivered"]
    assert sum(row.nbytes for row in delivered) == totals["recv_bytes"]


async def test_a_one_hour_latency_run_takes_virtual_not_wall_time(autojump_clock) -> None:
    network = _network(latency_s=3600.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    wall = time.perf_counter()
    async with network.open():
        start = trio.current_time()
        for seq in range(20):
            network.send(ALICE, SERVER, Payload(seq, np.zeros(3)))
            await trio.sleep(3600.0)
        assert trio.current_time() - start == 20 * 3600.0
        await trio.sleep(1.0)  # the last message is due exactly when the loop ends
    assert time.perf_counter() - wall < 1.0
    assert len(mailbox.take_all(Payload.KIND)) == 20


async def test_delivery_respects_latency_plus_size_over_bandwidth_to_the_resolution(autojump_clock) -> None:
    bandwidth = 80_000.0  # bits per second: 10 bytes per millisecond
    network = _network(latency_s=0.0505, bandwidth_bps=bandwidth, resolution_s=0.001)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    async with network.open():
        start = trio.current_time()
        body = Payload(0, np.zeros(100))
        size = network.send(ALICE, SERVER, body)
        arrivals = []
        while len(arrivals) < 1:
            await mailbox.wait(start + 60)
            arrivals += [(trio.current_time(), env) for env in mailbox.take_all(Payload.KIND)]
    arrived_at, envelope = arrivals[0]
    exact = 0.0505 + 8 * size / bandwidth
    assert exact <= arrived_at - start < exact + 0.001 + 1e-9
    assert math.isclose(envelope.sent_at, start)


async def test_messages_due_in_one_tick_arrive_together_in_send_order(autojump_clock) -> None:
    network = Network(Links(1, LinkSpec(Constant(0.0))), Ledger(), resolution_s=0.01)
    for index in range(5):
        network.attach(Party(Role.USER, index))
    mailbox = network.attach(SERVER)
    async with network.open():
        start = trio.current_time()
        for index in range(5):
            network.send(Party(Role.USER, index), SERVER, Payload(index, np.zeros(1)))
            await trio.sleep(0.001)
        assert await mailbox.wait(start + 1)
        batch = mailbox.take_all(Payload.KIND)
    assert [envelope.body.seq for envelope in batch] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("resolution_s", [0.001, 0.0])
async def test_a_zero_delay_message_arrives_after_the_instant_it_was_sent(autojump_clock, resolution_s: float) -> None:
    network = _network(latency_s=0.0, resolution_s=resolution_s)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    async with network.open():
        sent_at = trio.current_time()
        network.send(ALICE, SERVER, Payload(0, np.zeros(1)))
        await trio.lowlevel.checkpoint()
        assert mailbox.take(Payload.KIND) is None
        assert await mailbox.wait(sent_at + 1)
        arrived_at = trio.current_time()
    assert sent_at < arrived_at <= sent_at + max(resolution_s, 1e-9)


async def test_a_sleep_ending_with_a_delivery_sees_the_message(autojump_clock) -> None:
    """The delay line delivers what is due at an instant before it wakes the sleepers of that instant."""
    network = _network(latency_s=0.25, resolution_s=0.0)
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    seen = []
    async with network.open():
        start = trio.current_time()
        network.send(ALICE, SERVER, Payload(0, np.zeros(1)))
        for _ in range(20):
            await network.sleep_until(start + 0.25)
            seen.append(mailbox.take(Payload.KIND) is not None)
            network.send(ALICE, SERVER, Payload(0, np.zeros(1)))
            start = trio.current_time()
        with pytest.raises(trio.TooSlowError), trio.fail_after(0.1):
            await network.sleep(1.0)
    assert all(seen)


async def test_sleeping_outside_an_open_network_is_refused(autojump_clock) -> None:
    with pytest.raises(ProtocolViolation, match="network.open"):
        await _network().sleep(1.0)


async def test_loss_drops_and_counts(autojump_clock) -> None:
    network = _network(loss=0.5)
    network.attach(ALICE)
    network.attach(SERVER)
    async with network.open():
        for seq in range(400):
            network.send(ALICE, SERVER, Payload(seq, np.zeros(1)))
        await trio.sleep(1)
    lost = network.ledger.dropped_by_reason["lost"]
    # Binomial(400, 0.5): 4 standard deviations is 40.
    assert abs(lost - 200) <= 40
    assert network.ledger.party(SERVER)["recv_msgs"] == 400 - lost


async def test_messages_in_flight_at_close_are_counted_unfinished(autojump_clock) -> None:
    network = _network(latency_s=10.0)
    network.attach(ALICE)
    network.attach(SERVER)
    async with network.open():
        network.send(ALICE, SERVER, Payload(0, np.zeros(1)))
    assert network.ledger.dropped_by_reason["unfinished"] == 1
    assert network.in_flight == 0


async def test_an_offline_party_cannot_send(autojump_clock) -> None:
    from fedrecsim.errors import ProtocolViolation

    network = _network()
    network.attach(SERVER)
    async with network.open():
        with pytest.raises(ProtocolViolation, match="offline"):
            network.send(ALICE, SERVER, Payload(0, np.zeros(1)))


async def test_the_receiver_gets_a_decoded_copy(autojump_clock) -> None:
    network = _network()
    network.attach(ALICE)
    mailbox = network.attach(SERVER)
    values = np.arange(3.0)
    async with network.open():
        network.send(ALICE, SERVER, Payload(0, values))
        values[:] = -1
        assert await mailbox.wait(trio.current_time() + 1)
        received = mailbox.take(Payload.KIND).body.values
    np.testing.assert_array_equal(received, [0.0, 1.0, 2.0])
    assert decode(encode(ALICE, SERVER, 0.0, Payload(0, received))).body.seq == 0


async def test_send_many_equals_sending_one_by_one(autojump_clock) -> None:
    from fedrecsim.network.links import LogNormal

    receivers = [Party(Role.USER, index) for index in range(6)]

    async def deliver(broadcast: bool) -> tuple[list, dict]:
        network = Network(Links(9, LinkSpec(LogNormal(0.05, 0.5))), Ledger(record_transcript=True), resolution_s=0.001)
        for party in (SERVER, *receivers):
            network.attach(party)
        async with network.open():
            start = trio.current_time()
            body = Payload(1, np.arange(5.0))
            if broadcast:
                total = network.send_many(SERVER, receivers, body)
            else:
                total = sum(network.send(SERVER, party, body) for party in receivers)
            await trio.sleep(10)
        assert total == network.ledger.party(SERVER)["sent_bytes"]
        # The two runs start at different virtual times; compare what happened relative to the start.
        fates = [(round(row.time - start, 6), row.dst, row.nbytes) for row in network.ledger.transcript]
        return fates, network.ledger.summary()

    one_by_one, broadcast = await deliver(False), await deliver(True)
    assert one_by_one == broadcast


async def test_same_instant_deliveries_are_ordered_by_sender_then_receiver_then_link_sequence(autojump_clock) -> None:
    """The documented tie-break, where a receiver-first order (and the order of the sends) would differ."""
    network = _network(latency_s=0.0, resolution_s=0.01, transcript=True)
    u0, u1, u2 = (Party(Role.USER, index) for index in range(3))
    for party in (u0, u1, u2):
        network.attach(party)
    async with network.open():
        # All sent at one instant, so all arrive at the same tick.
        for seq, (src, dst) in enumerate([(u1, u0), (u0, u2), (u0, u1), (u0, u1), (u2, u0)]):
            network.send(src, dst, Payload(seq, np.zeros(1)))
        await trio.sleep(1.0)
    rows = network.ledger.transcript
    assert len({row.time for row in rows}) == 1 and all(row.status == "delivered" for row in rows)
    assert [(row.src.index, row.dst.index) for row in rows] == [(0, 1), (0, 1), (0, 2), (1, 0), (2, 0)]
    # And on one link, its own sequence: u1's mailbox holds seq 2 before seq 3.
    assert [envelope.body.seq for envelope in network.mailbox(u1).take_all(Payload.KIND)] == [2, 3]


async def test_same_instant_deliveries_from_parties_of_several_roles_are_ordered_as_the_parties_sort(autojump_clock) -> None:
    """Parties sort by role name, then index: an order that neither the roles' wire codes nor the indices
    alone give (user:0 has the smallest index and the role with code 0, and sorts last)."""
    network = _network(latency_s=0.0, resolution_s=0.01, transcript=True)
    senders = [Party(Role.USER, 0), Party(Role.SERVER, 2), Party(Role.PROXY, 5), Party(Role.SILO, 1)]
    receivers = [Party(Role.USER, 9), Party(Role.PROXY, 7)]
    for party in (*senders, *receivers):
        network.attach(party)
    async with network.open():
        for dst in receivers:
            for src in senders:
                network.send(src, dst, Payload(0, np.zeros(1)))
        await trio.sleep(1.0)
    rows = network.ledger.transcript
    assert len({row.time for row in rows}) == 1
    assert [(row.src, row.dst) for row in rows] == sorted((src, dst) for src in senders for dst in receivers)
    assert [str(row.src) for row in rows[::2]] == ["proxy:5", "server:2", "silo:1", "user:0"]


async def test_a_delivered_envelope_names_its_addressee_as_dst(autojump_clock) -> None:
    network = _network(latency_s=0.01)
    network.attach(ALICE)
    network.attach(BOB)
    server_mailbox = network.attach(SERVER)
    async with network.open():
        network.send(ALICE, SERVER, Payload(0, np.zeros(1)))
        network.send_many(SERVER, [ALICE, BOB], Payload(1, np.zeros(1)))
        await trio.sleep(1.0)
    (to_server,) = server_mailbox.take_all(Payload.KIND)
    assert (to_server.src, to_server.dst) == (ALICE, SERVER)
    for party in (ALICE, BOB):
        (envelope,) = network.mailbox(party).take_all(Payload.KIND)
        assert (envelope.src, envelope.dst) == (SERVER, party)


async def test_the_receivers_of_a_broadcast_share_one_read_only_body_in_envelopes_of_their_own(autojump_clock) -> None:
    """`send_many` of a small body (one the wire does not share already): the first copy delivered is
    decoded and every receiver gets that body -- its arrays views of immutable bytes, so nobody can write
    to them -- in an envelope naming itself; what it holds is what each copy's own bytes decode to."""
    receivers = [Party(Role.USER, index) for index in (0, 1, 300)]  # party bytes of two lengths: aligned or not
    network = Network(Links(4, LinkSpec(Constant(0.01))), Ledger())
    for party in (SERVER, *receivers):
        network.attach(party)
    body = Payload(7, np.arange(4.0))
    async with network.open():
        network.send_many(SERVER, receivers, body)
        sent_at = trio.current_time()
        await trio.sleep(1.0)
    envelopes = [network.mailbox(party).take(Payload.KIND) for party in receivers]
    assert [(envelope.src, envelope.dst, envelope.sent_at) for envelope in envelopes] == [(SERVER, party, sent_at) for party in receivers]
    shared = envelopes[0].body
    assert all(envelope.body is shared for envelope in envelopes)
    expected = decode_trusted(encode(SERVER, receivers[2], sent_at, body)).body
    assert shared.seq == expected.seq == 7
    np.testing.assert_array_equal(shared.values, expected.values)
    assert not shared.values.flags.writeable
    with pytest.raises(ValueError):
        shared.values.flags.writeable = True


# What main (3638dea) recorded for the instant of the test below.
PINNED_ROWS = [
    (0.0, "user:0", "server:0", "test.net_payload", 65, "duplicated", 1),
    (0.01, "server:0", "user:0", "test.net_payload", 49, "delivered", 1),
    (0.01, "server:0", "user:1", "test.net_other", 30, "delivered", 1),
    (0.01, "server:0", "user:1", "test.net_other", 0, "rejected:unexpected", 1),
    (0.01, "server:0", "user:1", "test.net_payload", 49, "delivered", 1),
    (0.01, "server:0", "user:2", "test.net_payload", 57, "dropped:offline", 1),
    (0.01, "user:0", "server:0", "test.net_payload", 65, "delivered", 1),
    (0.01, "user:0", "server:0", "test.net_payload", 65, "delivered", 1),
]
PINNED_ROUNDS_BY_ROLE = [{"round": 1, "roles": {
    "server": {"sent_bytes": 185, "recv_bytes": 130, "sent_msgs": 4, "recv_msgs": 2, "dropped_msgs": 1},
    "user": {"sent_bytes": 65, "recv_bytes": 128, "sent_msgs": 1, "recv_msgs": 3, "dropped_msgs": 0},
}}]
PINNED_HASHES = ("0468c90c34049a95456d26ec224246d6", "6ec35ab09d11a2aa97133c72c09236f7")


@message("test.net_other")
@dataclass(frozen=True)
class Other:
    seq: int


async def test_one_instant_of_duplicates_drops_and_rejections_keeps_its_ledger_rows_and_hashes(autojump_clock) -> None:
    """Issue 32's delivery path (a send files each copy a link makes itself; a receiver's mailbox is found
    with whether it is online): an instant mixing duplicated, offline-dropped, rejected and plain deliveries
    gives the rows, counters and hashes the engine gave before the change (pinned from main at 3638dea)."""
    links = Links(3, LinkSpec(Constant(0.01)), {(Role.USER, Role.SERVER): LinkSpec(Constant(0.01), duplicate=1.0)})
    ledger = Ledger(record_transcript=True)
    network = Network(links, ledger, resolution_s=0.001)
    carol = Party(Role.USER, 2)
    for party in (ALICE, BOB, carol, SERVER):
        network.attach(party)
    network.expect(BOB, [Payload.KIND])
    async with network.open():
        ledger.begin_round(1, 4)
        network.send(ALICE, SERVER, Payload(1, np.arange(3.0)))  # duplicated: two deliveries
        network.send(SERVER, BOB, Other(2))  # a kind BOB never receives: rejected
        network.send(SERVER, carol, Payload(3, np.arange(2.0)))  # carol goes offline: dropped
        network.send_many(SERVER, [ALICE, BOB], Payload(4, np.arange(1.0)))
        network.detach(carol)
        await network.sleep(0.05)
    rows = [(row.time, str(row.src), str(row.dst), row.kind, row.nbytes, row.status, row.round) for row in ledger.transcript]
    assert rows == PINNED_ROWS
    assert ledger.summary()["rounds_by_role"] == PINNED_ROUNDS_BY_ROLE
    assert (ledger.transcript_xxh3_128, ledger.structure_xxh3_128) == PINNED_HASHES
    assert [envelope.body.seq for envelope in network.mailbox(SERVER).take_all(Payload.KIND)] == [1, 1]


@message("test.net_optional_payload")
@dataclass(frozen=True)
class OptionalPayload:
    """An optional array: `wire.encode` aligns only a message whose one array field is a plain array, so
    this one's ``values`` sit wherever the envelope before them ends."""

    seq: int
    values: Array("float64", ndim=1) | None  # type: ignore[valid-type]


async def test_an_instant_of_large_messages_lets_go_of_each_ones_bytes_once_it_is_delivered(autojump_clock) -> None:
    """Sixteen 2 MB messages due at one instant whose arrays decode to copies (their elements are not aligned
    in the bytes): the delay line frees each message's bytes as it delivers it, so the instant's peak is the
    received copies plus about one message -- never every message's bytes and every copy at once (2 x 16)."""
    values = np.zeros(250_000)
    size = values.nbytes
    senders = [Party(Role.USER, index) for index in range(16)]
    # A seq whose encoding puts the array off its 8-byte alignment: decoding copies it.
    seq = next(
        seq for seq in range(1, 300)
        if not np.shares_memory(
            decode_trusted(data := encode(senders[0], SERVER, 0.0, OptionalPayload(seq, values))).body.values,
            np.frombuffer(data, np.uint8),
        )
    )
    network = _network(latency_s=0.01)
    mailbox = network.attach(SERVER)
    for party in senders:
        network.attach(party)
    async with network.open():
        tracemalloc.start()
        try:
            for party in senders:
                network.send(party, SERVER, OptionalPayload(seq, values))
            assert await mailbox.wait(math.inf)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        received = mailbox.take_all(OptionalPayload.KIND)
    assert len(received) == 16 and all(not envelope.body.values.flags.writeable for envelope in received)
    assert peak < 18 * size, f"peak {peak / size:.1f} messages during the instant"


class _Stop(Exception):
    pass


async def test_interrupt_raises_in_a_mailbox_wait_or_a_sleep_and_nowhere_else(autojump_clock) -> None:
    """`Network.interrupt` ends a party's mailbox wait or `sleep_until` with the error, at once; a task
    parked elsewhere, or running, is left alone (False); the interrupted wait's deadline never fires."""
    network = _network(latency_s=0.5)
    network.attach(ALICE)
    mailbox = network.attach(BOB)
    outcomes: list[str] = []
    tasks: dict[str, trio.lowlevel.Task] = {}

    async def waits(name: str, wait) -> None:  # type: ignore[no-untyped-def]
        tasks[name] = trio.lowlevel.current_task()
        try:
            await wait()
            outcomes.append(f"{name} woke")
        except _Stop:
            outcomes.append(f"{name} stopped at {trio.current_time():g}")

    event = trio.Event()
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(waits, "mailbox", lambda: mailbox.wait(10.0))
        nursery.start_soon(waits, "sleep", lambda: network.sleep_until(10.0))
        nursery.start_soon(waits, "event", event.wait)
        await network.sleep_until(1.0)
        assert not network.interrupt(BOB, trio.lowlevel.current_task(), _Stop())  # running, not parked
        assert not network.interrupt(BOB, tasks["event"], _Stop())  # parked, but not in a network wait
        assert network.interrupt(BOB, tasks["mailbox"], _Stop())
        assert network.interrupt(ALICE, tasks["sleep"], _Stop())
        assert not network.interrupt(BOB, tasks["mailbox"], _Stop())  # its wait is over already
        await network.sleep_until(2.0)
        assert sorted(outcomes) == ["mailbox stopped at 1", "sleep stopped at 1"]
        assert mailbox.waits_until is None
        network.send(ALICE, BOB, Payload(0, np.zeros(1)))
        assert await mailbox.wait(20.0)  # the mailbox serves a new wait; the stale deadline at 10 stays silent
        assert trio.current_time() == pytest.approx(2.5)
        assert not await mailbox.wait(11.0)
        assert trio.current_time() == pytest.approx(11.0)
        event.set()
    assert sorted(outcomes) == ["event woke", "mailbox stopped at 1", "sleep stopped at 1"]


async def test_a_kinds_queue_stays_the_mailbox_queue_across_detach_and_attach(autojump_clock) -> None:
    network = _network()
    network.attach(ALICE)
    mailbox = network.attach(BOB)
    queue = mailbox.queue(Payload.KIND)
    async with network.open():
        network.send(ALICE, BOB, Payload(0, np.zeros(1)))
        await network.sleep(0.01)
        assert [envelope.body.seq for envelope in queue] == [0]
        network.detach(BOB)
        assert network.attach(BOB) is mailbox and mailbox.queue(Payload.KIND) is queue and not queue  # emptied
        network.send(ALICE, BOB, Payload(1, np.zeros(1)))
        await network.sleep(0.01)
    assert [envelope.body.seq for envelope in queue] == [1] and mailbox.take(Payload.KIND).body.seq == 1
