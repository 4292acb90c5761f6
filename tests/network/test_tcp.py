"""The TCP transport: placements, the mesh, frames, delivery and the byte counts on the sockets."""

from __future__ import annotations

import re
import socket
import struct
from dataclasses import dataclass

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.errors import ConfigError, PartyTimeout, ProtocolViolation, WireError
from fedrecsim.network.ledger import DropReason, Ledger, RejectReason, Rejection, TranscriptRow
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.tcp import FRAME_HEADER, LOOPBACK, PeerGone, Placement, SocketCounts, TcpNetwork, connect_mesh
from fedrecsim.network.wire import Array, decode, encode, message

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)
ROLES = (Role.SERVER, Role.THIRD_PARTY, Role.USER)
SERVER_AND_USERS = Placement.default((Role.SERVER, Role.USER), n_users=2)


@message("test.tcp_payload")
@dataclass(frozen=True)
class Payload:
    seq: int
    values: Array("float64", ndim=1)


def _links() -> Links:
    return Links(0, LinkSpec(Constant(0.0)))


def _frame(data: bytes) -> bytes:
    return FRAME_HEADER.pack(len(data)) + data


# --------------------------------------------------------------------------- placement


def test_the_default_placement_is_one_process_per_role_and_users_split_in_blocks() -> None:
    default = Placement.default(ROLES, n_users=5)
    assert [group.name for group in default.groups] == ["server", "third_party", "users"]
    assert [default.home(party) for party in (SERVER, THIRD_PARTY, ALICE, Party(Role.USER, 4))] == [0, 1, 2, 2]
    split = Placement.parse("server+third_party, users ,users", ROLES, n_users=5)
    assert [group.users for group in split.groups] == [range(0), range(0, 2), range(2, 5)]
    assert split.groups[0].roles == {Role.SERVER, Role.THIRD_PARTY}
    assert [split.home(Party(Role.USER, index)) for index in range(5)] == [1, 1, 2, 2, 2]


@pytest.mark.parametrize(
    ("text", "n_users", "problem"),
    [
        ("servr,third_party,users", 2, "unknown role 'servr'; this protocol's roles are server, third_party, users"),
        ("server,proxy,third_party,users", 2, "this protocol has no proxy party; its roles are server, third_party, users"),
        ("server,users", 2, "no process hosts third_party; got 'server,users'"),
        ("users", 2, "no process hosts server, third_party; got 'users'"),
        ("server,third_party,server,users", 2, "server is placed in two processes; only the users may be split"),
        ("server,third_party,users,users,users", 2, "3 user processes for 2 users"),
        ("server,third_party,users,users", 1, "2 user processes for 1 users"),
    ],
)
def test_a_placement_that_cannot_host_the_protocol_is_refused_naming_processes(text: str, n_users: int, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        Placement.parse(text, ROLES, n_users=n_users)
    assert info.value.key_path == "--processes"
    assert info.value.problem == problem


def test_a_party_no_process_hosts_is_a_protocol_violation() -> None:
    placement = Placement.default((Role.SERVER, Role.USER), n_users=2)
    with pytest.raises(ProtocolViolation, match="^no process hosts user:2: the run places server, users$"):
        placement.home(Party(Role.USER, 2))
    with pytest.raises(ProtocolViolation, match="^no process hosts third_party:0: the run places server, users$"):
        placement.home(THIRD_PARTY)


def test_socket_counts_read_out_with_the_header_overhead() -> None:
    counts = SocketCounts(sent_frames=3, sent_payload_bytes=120, recv_frames=2, recv_payload_bytes=45)
    assert counts.as_dict() == {
        "sent_frames": 3,
        "sent_payload_bytes": 120,
        "recv_frames": 2,
        "recv_payload_bytes": 45,
        "header_bytes": 5 * FRAME_HEADER.size,
    }


# --------------------------------------------------------------------------- two networks over loopback


async def _mesh(placement: Placement) -> list[TcpNetwork]:
    listeners = [(await trio.open_tcp_listeners(0, host=LOOPBACK))[0] for _ in placement.groups]
    ports = [listener.socket.getsockname()[1] for listener in listeners]
    streams: dict[int, dict] = {}

    async def connect(position: int) -> None:
        streams[position] = await connect_mesh(position, ports, listeners[position], 5.0)

    async with trio.open_nursery() as nursery:
        for position in range(len(ports)):
            nursery.start_soon(connect, position)
    for listener in listeners:
        await listener.aclose()
    return [TcpNetwork(_links(), Ledger(), placement, position, streams[position]) for position in range(len(ports))]


async def test_messages_cross_processes_and_the_ledger_counts_the_payload_bytes_on_the_sockets() -> None:
    placement = Placement.default((Role.SERVER, Role.USER), n_users=2)
    server_side, user_side = await _mesh(placement)
    server_side.attach(SERVER)
    for party in (ALICE, BOB):
        user_side.attach(party)
    sizes: list[int] = []
    received: list[Payload] = []

    async def serve() -> None:
        async with server_side.open():
            mailbox = server_side.mailbox(SERVER)
            while len(received) < 20:
                envelope = mailbox.take("test.tcp_payload")
                if envelope is None:
                    assert await mailbox.wait(trio.current_time() + 10.0), "the users' messages did not arrive"
                    continue
                received.append(envelope.body)
            sizes.append(server_side.send(SERVER, ALICE, Payload(-1, np.zeros(3))))

    async def use() -> None:
        async with user_side.open():
            for seq in range(20):
                sender = ALICE if seq % 2 else BOB
                size = user_side.send(sender, SERVER, Payload(seq, np.arange(seq, dtype=np.float64)))
                assert size == len(encode(sender, SERVER, trio.current_time(), Payload(seq, np.arange(seq, dtype=np.float64))))
                sizes.append(size)
            await user_side.mailbox(ALICE).wait(trio.current_time() + 10.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(use)
    # Frames from one process arrive in the order they were sent.
    assert [body.seq for body in received] == list(range(20))
    assert np.array_equal(received[7].values, np.arange(7, dtype=np.float64))
    assert server_side.ledger.party(SERVER)["recv_bytes"] == sum(sizes[:20]) == server_side.counts.recv_payload_bytes
    assert user_side.counts.sent_payload_bytes == sum(sizes[:20]) and user_side.counts.sent_frames == 20
    assert server_side.counts.sent_payload_bytes == sizes[20] == user_side.ledger.party(ALICE)["recv_bytes"]
    assert user_side.counts.recv_frames == server_side.counts.sent_frames == 1
    assert server_side.counts.header_bytes == FRAME_HEADER.size * 21


async def test_closing_delivers_every_frame_already_sent() -> None:
    placement = Placement.default((Role.SERVER, Role.USER), n_users=1)
    server_side, user_side = await _mesh(placement)
    server_side.attach(SERVER)
    user_side.attach(ALICE)

    async def serve() -> None:
        async with server_side.open():
            await trio.lowlevel.checkpoint()

    async def use() -> None:
        async with user_side.open():
            for seq in range(50):
                user_side.send(ALICE, SERVER, Payload(seq, np.ones(100)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(use)
    assert server_side.ledger.party(SERVER)["recv_msgs"] == 50
    assert len(server_side.mailbox(SERVER).take_all("test.tcp_payload")) == 50
    assert server_side.ledger.party(SERVER)["recv_bytes"] == user_side.ledger.party(ALICE)["sent_bytes"]
    assert server_side.counts.recv_payload_bytes == user_side.counts.sent_payload_bytes


async def test_parties_of_one_process_talk_through_the_delay_line_not_the_sockets() -> None:
    placement = Placement.parse("server+users,third_party", ROLES, n_users=1)
    together, apart = await _mesh(placement)
    together.attach(SERVER)
    together.attach(ALICE)

    async def host() -> None:
        async with together.open():
            together.send(ALICE, SERVER, Payload(0, np.ones(2)))
            assert await together.mailbox(SERVER).wait(trio.current_time() + 5.0)

    async def idle() -> None:
        async with apart.open():
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        nursery.start_soon(idle)
    assert together.ledger.party(SERVER)["recv_msgs"] == 1
    assert together.counts.sent_frames == apart.counts.recv_frames == 0


# --------------------------------------------------------------------------- what a reader refuses


async def _read_into(network: TcpNetwork, peer_stream: trio.abc.HalfCloseableStream, raw: bytes) -> None:
    """Open ``network``, write ``raw`` from the peer's side, end the peer's stream and close."""
    async with network.open():
        await peer_stream.send_all(raw)
        await peer_stream.send_eof()
        await trio.sleep(0.05)


def _network_fed_by_a_peer(
    position: int = 0, placement: Placement = SERVER_AND_USERS, **options: int
) -> tuple[TcpNetwork, trio.abc.HalfCloseableStream]:
    """Process ``position`` of a two-process ``placement``, its connection to the other held by the test."""
    ours, theirs = trio.testing.memory_stream_pair()
    network = TcpNetwork(_links(), Ledger(record_transcript=True), placement, position, {1 - position: ours}, **options)
    return network, theirs


async def _read_to_end(stream: trio.abc.ReceiveStream) -> bytes:
    received = bytearray()
    while chunk := await stream.receive_some():
        received += chunk
    return bytes(received)


def _frames_in(raw: bytes) -> list[bytes]:
    """The payloads of the frames ``raw`` holds, in order."""
    frames = []
    while raw:
        (length,) = FRAME_HEADER.unpack_from(raw)
        frames.append(raw[FRAME_HEADER.size:FRAME_HEADER.size + length])
        raw = raw[FRAME_HEADER.size + length:]
    return frames


async def test_a_frame_addressed_to_an_offline_party_is_counted_as_dropped() -> None:
    network, peer = _network_fed_by_a_peer()
    data = encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))
    await _read_into(network, peer, _frame(data))
    assert network.ledger.party(ALICE)["dropped_msgs"] == 1
    assert network.ledger.dropped_by_reason[DropReason.OFFLINE.value] == 1
    assert network.counts.recv_payload_bytes == len(data)


async def test_frames_arriving_together_are_each_recorded_delivered_or_dropped_for_an_offline_party() -> None:
    network, peer = _network_fed_by_a_peer(placement=Placement.parse("server+third_party,users", ROLES, n_users=2))
    network.attach(SERVER)
    to_server = encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))
    to_third_party = encode(BOB, THIRD_PARTY, 0.0, Payload(2, np.ones(9)))
    opened = trio.current_time()
    await _read_into(network, peer, _frame(to_server) + _frame(to_third_party))
    delivered, dropped = network.ledger.transcript
    assert opened < delivered.time <= dropped.time < trio.current_time()
    assert delivered == TranscriptRow(delivered.time, ALICE, SERVER, "test.tcp_payload", len(to_server), "delivered")
    assert dropped == TranscriptRow(dropped.time, BOB, THIRD_PARTY, "test.tcp_payload", len(to_third_party), "dropped:offline")
    assert network.mailbox(SERVER).take("test.tcp_payload").body.seq == 1
    assert network.counts.recv_frames == 2


async def test_a_kind_the_receiver_never_receives_is_rejected_not_delivered() -> None:
    network, peer = _network_fed_by_a_peer()
    network.attach(SERVER)
    network.expect(SERVER, ["core.join"])
    await _read_into(network, peer, _frame(encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))))
    assert network.ledger.rejected_by_reason[RejectReason.UNEXPECTED.value] == 1
    assert network.mailbox(SERVER).take("test.tcp_payload") is None
    delivered, rejected = network.ledger.transcript
    assert [delivered.status, rejected.status] == ["delivered", "rejected:unexpected"]
    assert network.ledger.rejections == [
        Rejection(delivered.time, ALICE, SERVER, "test.tcp_payload", RejectReason.UNEXPECTED,
                  "server:0 expected one of core.join; received test.tcp_payload from user:0")
    ]


@pytest.mark.parametrize(
    ("raw", "error", "match"),
    [
        (_frame(b"\x93not a message"), WireError, "malformed"),
        (FRAME_HEADER.pack(2**31) + b"x", WireError, "exceeds the limit"),
        (FRAME_HEADER.pack(10) + b"abc", WireError, "ended inside a frame"),
        (_frame(encode(SERVER, ALICE, 0.0, Payload(1, np.ones(1)))), ProtocolViolation, "received test.tcp_payload from server:0 to user:0"),
    ],
)
async def test_bytes_no_peer_process_could_have_sent_stop_the_run(raw: bytes, error: type, match: str) -> None:
    network, peer = _network_fed_by_a_peer()
    network.attach(SERVER)
    with pytest.raises(ExceptionGroup) as info:
        await _read_into(network, peer, raw)
    assert info.group_contains(error, match=match)


@pytest.mark.parametrize(("src", "dst"), [(ALICE, BOB), (SERVER, SERVER)])
async def test_a_frame_must_be_from_a_party_of_its_peer_to_a_party_of_this_process(src: Party, dst: Party) -> None:
    network, peer = _network_fed_by_a_peer()
    network.attach(SERVER)
    with pytest.raises(ExceptionGroup) as info:
        await _read_into(network, peer, _frame(encode(src, dst, 0.0, Payload(1, np.ones(1)))))
    assert info.group_contains(
        ProtocolViolation,
        match=f"^process 0 expected messages from parties of process 1 to its own parties; received test.tcp_payload from {src} to {dst}$",
    )


async def test_a_frame_as_long_as_the_message_limit_is_delivered() -> None:
    data = encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))
    network, peer = _network_fed_by_a_peer(max_message_bytes=len(data))
    network.attach(SERVER)
    await _read_into(network, peer, _frame(data))
    assert network.mailbox(SERVER).take("test.tcp_payload").body.seq == 1


async def test_a_frame_longer_than_the_networks_message_limit_is_refused_naming_both() -> None:
    data = encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))
    network, peer = _network_fed_by_a_peer(max_message_bytes=len(data) - 1)
    network.attach(SERVER)
    with pytest.raises(ExceptionGroup) as info:
        await _read_into(network, peer, _frame(data))
    assert info.group_contains(WireError, match=f"^a frame of {len(data)} bytes from process 1 exceeds the limit of {len(data) - 1}$")
    assert network.ledger.party(SERVER)["recv_msgs"] == 0


async def test_an_empty_frame_is_counted_and_refused_as_a_malformed_message() -> None:
    network, peer = _network_fed_by_a_peer()
    with pytest.raises(ExceptionGroup) as info:
        await _read_into(network, peer, FRAME_HEADER.pack(0))
    (error,) = _leaves(info.value.subgroup(WireError))
    assert str(error).startswith("malformed message bytes: ")
    assert error.__notes__ == ["in a frame from process 1 (users) to process 0"]
    assert (network.counts.recv_frames, network.counts.recv_payload_bytes) == (1, 0)


async def test_a_malformed_frame_names_the_process_it_came_from() -> None:
    network, peer = _network_fed_by_a_peer()
    with pytest.raises(ExceptionGroup) as info:
        await _read_into(network, peer, _frame(b"\xc1"))
    wire_errors = info.value.subgroup(WireError)
    notes = [note for leaf in _leaves(wire_errors) for note in getattr(leaf, "__notes__", [])]
    assert notes == ["in a frame from process 1 (users) to process 0"]


def _leaves(group: BaseExceptionGroup | None) -> list[BaseException]:
    if group is None:
        return []
    return [leaf for item in group.exceptions for leaf in (_leaves(item) if isinstance(item, BaseExceptionGroup) else [item])]


async def test_a_peer_that_never_closes_is_a_party_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedrecsim.network.tcp.CLOSE_TIMEOUT_S", 0.2)
    network, peer = _network_fed_by_a_peer()
    with pytest.raises(ExceptionGroup) as info:
        async with network.open():
            await trio.lowlevel.checkpoint()
    assert info.group_contains(PartyTimeout, match="process 0: a peer did not close its connection within 0.2 s")
    await peer.aclose()


async def test_a_mesh_missing_a_process_times_out_naming_it() -> None:
    listener = (await trio.open_tcp_listeners(0, host=LOOPBACK))[0]
    ports = [listener.socket.getsockname()[1], 1]
    with pytest.raises(PartyTimeout, match=r"process 0: no connection to processes \[1\] within 0.2 s"):
        await connect_mesh(0, ports, listener, 0.2)
    await listener.aclose()


async def test_a_hello_from_an_unexpected_process_is_refused() -> None:
    listener = (await trio.open_tcp_listeners(0, host=LOOPBACK))[0]
    port = listener.socket.getsockname()[1]

    async def impostor() -> None:
        stream = await trio.open_tcp_stream(LOOPBACK, port)
        await stream.send_all(FRAME_HEADER.pack(0))
        await trio.sleep(1.0)

    with pytest.raises(ExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(impostor)
            await connect_mesh(0, [port, 0], listener, 5.0)
    assert info.group_contains(ProtocolViolation, match="expected a hello from one of processes 1..1, received 0")
    await listener.aclose()


class _OneConnection:
    """A listener with one connection, which delivers ``pieces`` one per read (as TCP segments may arrive),
    then ends."""

    def __init__(self, *pieces: bytes) -> None:
        self.stream = trio.testing.MemoryReceiveStream(self._next_piece)
        self._pieces = list(pieces)

    async def _next_piece(self) -> None:
        if self._pieces:
            self.stream.put_data(self._pieces.pop(0))
        else:
            self.stream.put_eof()

    async def accept(self) -> trio.testing.MemoryReceiveStream:
        return self.stream


async def test_a_hello_split_across_segments_names_its_process_and_leaves_the_bytes_behind_it_unread() -> None:
    listener = _OneConnection(b"\x00\x00", b"\x00\x01" + b"the first frame")
    streams = await connect_mesh(0, [0, 0], listener, 5.0)
    assert streams == {1: listener.stream}
    assert await _read_to_end(listener.stream) == b"the first frame"


@pytest.mark.parametrize(
    ("pieces", "problem"),
    [
        ((), "process 0: a connection closed before it said which process it is"),
        ((b"\x00\x00",), "process 0: a connection closed before it said which process it is"),
        ((FRAME_HEADER.pack(2),), "process 0: expected a hello from one of processes 1..1, received 2"),
    ],
)
async def test_a_connection_that_does_not_name_a_later_process_is_refused(pieces: tuple[bytes, ...], problem: str) -> None:
    with pytest.raises(ProtocolViolation, match=f"^{re.escape(problem)}$"):
        await connect_mesh(0, [0, 0], _OneConnection(*pieces), 5.0)


async def test_padding_never_crosses_a_socket() -> None:
    """A padded message (an ideal functionality's booked bytes) stands for bytes it does not hold: a
    socket carries real bytes only, so sending one to another process is refused before it leaves."""
    network, _ = _network_fed_by_a_peer()
    network.attach(SERVER)
    with pytest.raises(ProtocolViolation, match="^server:0 sent test.tcp_payload to user:0 with 8 bytes of padding: a socket carries real bytes only$"):
        network.send(SERVER, ALICE, Payload(0, np.ones(2)), padding=8)
    assert network.ledger.party(SERVER)["sent_msgs"] == 0


async def test_a_connection_that_breaks_says_its_peer_is_gone() -> None:
    ours, theirs = trio.socket.socketpair()
    placement = Placement.default((Role.SERVER, Role.USER), n_users=1)
    network = TcpNetwork(_links(), Ledger(), placement, 1, {0: trio.SocketStream(ours)})
    network.attach(ALICE)
    theirs.close()
    with pytest.raises(ExceptionGroup) as info:
        async with network.open():
            for seq in range(100):
                network.send(ALICE, SERVER, Payload(seq, np.ones(1000)))
                await trio.sleep(0.01)
    assert info.group_contains(PeerGone, match="the connection to process 0 broke .*: that process is gone")
    assert issubclass(PeerGone, ProtocolViolation)


async def test_a_send_after_the_writer_stopped_says_the_peer_is_gone() -> None:
    """A party may send between its connection's writer failing and the cancellation reaching it (seen under
    load): the send says the peer is gone, not trio's BrokenResourceError of the writer's closed queue."""
    ours, theirs = trio.socket.socketpair()
    placement = Placement.default((Role.SERVER, Role.USER), n_users=1)
    network = TcpNetwork(_links(), Ledger(), placement, 1, {0: trio.SocketStream(ours)})
    network.attach(ALICE)
    theirs.close()
    network._connections[0]._queued.close()  # the writer's end of the queue, as a stopped writer leaves it
    with pytest.raises(PeerGone, match="the connection to process 0 broke .*: that process is gone"):
        network.send(ALICE, SERVER, Payload(0, np.ones(10)))


async def test_a_connection_reset_by_its_peer_says_the_peer_is_gone_with_the_os_error() -> None:
    listener = (await trio.open_tcp_listeners(0, host=LOOPBACK))[0]
    ours = await trio.open_tcp_stream(LOOPBACK, listener.socket.getsockname()[1])
    theirs = await listener.accept()
    await listener.aclose()
    # Closing with a zero linger time resets the connection instead of ending it.
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await theirs.aclose()
    network = TcpNetwork(_links(), Ledger(), Placement.default((Role.SERVER, Role.USER), n_users=1), 1, {0: ours})
    with pytest.raises(ExceptionGroup) as info:
        async with network.open():
            await trio.sleep(5.0)
    assert info.group_contains(
        PeerGone, match=r"^the connection to process 0 broke \(\[Errno \d+\] Connection reset by peer\): that process is gone$"
    )


async def test_a_message_for_parties_of_another_process_is_one_frame_each_counted_by_kind() -> None:
    network, peer = _network_fed_by_a_peer()
    network.attach(SERVER)
    async with network.open():
        total = network.send_many(SERVER, [ALICE, BOB], Payload(3, np.ones(2)))
        await peer.send_eof()
    frames = _frames_in(await _read_to_end(peer))
    await peer.aclose()
    assert [(envelope.src, envelope.dst, envelope.body.seq) for envelope in map(decode, frames)] == [(SERVER, ALICE, 3), (SERVER, BOB, 3)]
    assert total == sum(map(len, frames)) == network.counts.sent_payload_bytes
    assert network.ledger.summary()["kinds"] == {"test.tcp_payload": {"msgs": 2, "bytes": total}}


async def test_parties_of_one_process_may_pad_their_messages_and_the_ledger_counts_the_padding() -> None:
    network, peer = _network_fed_by_a_peer(placement=Placement.parse("server+users,third_party", ROLES, n_users=1))
    network.attach(SERVER)
    network.attach(ALICE)
    async with network.open():
        sent_at = trio.current_time()
        size = network.send(ALICE, SERVER, Payload(0, np.ones(2)), padding=8)
        assert await network.mailbox(SERVER).wait(sent_at + 5.0)
        await peer.send_eof()
    assert size == len(encode(ALICE, SERVER, sent_at, Payload(0, np.ones(2)))) + 8
    (row,) = network.ledger.transcript
    assert row == TranscriptRow(row.time, ALICE, SERVER, "test.tcp_payload", size, "delivered")
    assert sent_at < row.time < sent_at + 5.0
    assert network.ledger.summary()["kinds"] == {"test.tcp_payload": {"msgs": 1, "bytes": size}}
    assert network.counts.sent_frames == 0
