"""The TCP transport: placements, the mesh, frames, delivery and the byte counts on the sockets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.errors import ConfigError, PartyTimeout, ProtocolViolation, WireError
from fedrecsim.network.ledger import DropReason, Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.network.tcp import FRAME_HEADER, LOOPBACK, PeerGone, Placement, TcpNetwork, connect_mesh
from fedrecsim.network.wire import Array, encode, message

ALICE = Party(Role.USER, 0)
BOB = Party(Role.USER, 1)
ROLES = (Role.SERVER, Role.THIRD_PARTY, Role.USER)


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
    ("text", "problem"),
    [
        ("servr,third_party,users", "unknown role 'servr'; this protocol.s roles are server, third_party, users"),
        ("server,proxy,third_party,users", "this protocol has no proxy party"),
        ("server,users", "no process hosts third_party"),
        ("server,third_party,server,users", "server is placed in two processes"),
        ("server,third_party,users,users,users", "3 user processes for 2 users"),
    ],
)
def test_a_placement_that_cannot_host_the_protocol_is_refused_naming_processes(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        Placement.parse(text, ROLES, n_users=2)
    assert info.value.key_path == "--processes"


def test_a_party_no_process_hosts_is_a_protocol_violation() -> None:
    placement = Placement.default((Role.SERVER, Role.USER), n_users=2)
    with pytest.raises(ProtocolViolation, match="no process hosts user:2"):
        placement.home(Party(Role.USER, 2))
    with pytest.raises(ProtocolViolation, match="no process hosts third_party:0"):
        placement.home(THIRD_PARTY)


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


def _network_fed_by_a_peer(position: int = 0) -> tuple[TcpNetwork, trio.abc.HalfCloseableStream]:
    ours, theirs = trio.testing.memory_stream_pair()
    placement = Placement.default((Role.SERVER, Role.USER), n_users=2)
    network = TcpNetwork(_links(), Ledger(), placement, position, {1 - position: ours})
    return network, theirs


async def test_a_frame_addressed_to_an_offline_party_is_counted_as_dropped() -> None:
    network, peer = _network_fed_by_a_peer()
    data = encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))
    await _read_into(network, peer, _frame(data))
    assert network.ledger.party(ALICE)["dropped_msgs"] == 1
    assert network.ledger.dropped_by_reason[DropReason.OFFLINE.value] == 1
    assert network.counts.recv_payload_bytes == len(data)


async def test_a_kind_the_receiver_never_receives_is_rejected_not_delivered() -> None:
    network, peer = _network_fed_by_a_peer()
    network.attach(SERVER)
    network.expect(SERVER, ["core.join"])
    await _read_into(network, peer, _frame(encode(ALICE, SERVER, 0.0, Payload(1, np.ones(4)))))
    assert network.ledger.rejected_by_reason[RejectReason.UNEXPECTED.value] == 1
    assert network.mailbox(SERVER).take("test.tcp_payload") is None


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
