"""Real transport: the parties of a run split across OS processes, talking over loopback TCP.

A `Placement` says which process hosts each party: every role in one process of its own (or sharing one
with other roles), the users split over one or more processes in contiguous blocks of indices. The
processes are connected pairwise by one TCP connection each -- a full mesh on 127.0.0.1, set up before
any party starts (`connect_mesh`; the only bytes outside frames are each connection's 4-byte hello
naming the process that connected).

A frame is a 4-byte big-endian length followed by that many payload bytes, and the payload is one
message exactly as `wire.encode` made it: the bytes the ledger counts. So for every process the ledger's
bytes sent by its parties to parties elsewhere equal the payload bytes written to its sockets, and the
bytes received likewise (`SocketCounts`).

`TcpNetwork` is the simulated `Network` with the links to other processes made real. ``send`` encodes
once and records the bytes in the ledger as before; a message for a party of another process is queued
for that process's connection instead of the delay line, and a reader per connection decodes each frame
strictly -- bytes from another process are not trusted -- and delivers it the moment it arrives. Messages
between parties of the same process still go through the delay line (the scenario's link model, which
`run_tcp` requires to be zero latency and fault free). Mailbox deadlines and sleeps are the network's own,
on whatever clock the loop runs: over TCP, `SharedClock`.

Closing is graceful: leaving ``open`` closes each connection's queue; its writer sends what is queued,
then end-of-file, and its reader delivers frames until the peer's end-of-file -- so no message sent is
lost in a socket buffer -- or gives up after `CLOSE_TIMEOUT_S` with `PartyTimeout`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from ..errors import ConfigError, PartyTimeout, ProtocolViolation, WireError
from .ledger import DropReason, Ledger
from .links import Links
from .network import Network
from .party import Party, Role
from .wire import Broadcast, decode

#: A frame's header: the payload's length, 4 bytes big-endian.
FRAME_HEADER = struct.Struct(">I")
#: How long closing waits for a peer's end-of-file after sending its own.
CLOSE_TIMEOUT_S = 10.0
#: The only host the transport listens on and connects to.
LOOPBACK = "127.0.0.1"

_RECEIVE_BYTES = 1 << 16
_USER_GROUP_NAMES = ("user", "users")


@dataclass(frozen=True)
class Group:
    """The parties one process hosts: every party of ``roles``, and of the users those in ``users``.

    Attributes:
        name: the group as written in ``--processes`` (e.g. ``users``, ``server+third_party``).
        roles: the roles whose parties it hosts (the users: only those in ``users``).
        users: the user indices it hosts (empty unless `Role.USER` is in ``roles``).
    """

    name: str
    roles: frozenset[Role]
    users: range = range(0)

    def hosts(self, party: Party) -> bool:
        if party.role is Role.USER:
            return party.index in self.users
        return party.role in self.roles


@dataclass(frozen=True)
class Placement:
    """Which process hosts each party of a run: one `Group` per process, in launch order."""

    groups: tuple[Group, ...]

    @classmethod
    def parse(cls, text: str, roles: Iterable[Role], n_users: int) -> Placement:
        """Groups from ``--processes`` text: comma-separated groups, each one or more roles joined by ``+``
        (``users`` for the user role, which may appear in several groups: the users are split between them
        in contiguous blocks). Every role of the protocol (``roles``) must be placed, the others once.

        Raises:
            ConfigError: naming ``--processes``, for an unknown or missing role, or one placed twice.
        """
        wanted = frozenset(roles)
        groups: list[tuple[str, frozenset[Role]]] = []
        placed: set[Role] = set()
        for name in (part.strip() for part in text.split(",")):
            members = set()
            for role_name in (part.strip() for part in name.split("+")):
                role = _role(role_name, wanted)
                if role in placed and role is not Role.USER:
                    raise ConfigError("--processes", f"{role.value} is placed in two processes; only the users may be split")
                members.add(role)
                placed.add(role)
            groups.append((name, frozenset(members)))
        missing = wanted - placed
        if missing:
            raise ConfigError(
                "--processes", f"no process hosts {', '.join(sorted(role.value for role in missing))}; got {text!r}"
            )
        user_groups = [position for position, (_, members) in enumerate(groups) if Role.USER in members]
        if len(user_groups) > max(1, n_users):
            raise ConfigError("--processes", f"{len(user_groups)} user processes for {n_users} users")
        bounds = [n_users * part // max(1, len(user_groups)) for part in range(len(user_groups) + 1)]
        blocks = {position: range(bounds[part], bounds[part + 1]) for part, position in enumerate(user_groups)}
        return cls(tuple(Group(name, members, blocks.get(position, range(0))) for position, (name, members) in enumerate(groups)))

    @classmethod
    def default(cls, roles: Iterable[Role], n_users: int) -> Placement:
        """One process per role, in the order given."""
        return cls.parse(",".join("users" if role is Role.USER else role.value for role in roles), roles, n_users)

    def home(self, party: Party) -> int:
        """The position of the process that hosts ``party``.

        Raises:
            ProtocolViolation: no process hosts it (a party the protocol does not have).
        """
        for position, group in enumerate(self.groups):
            if group.hosts(party):
                return position
        raise ProtocolViolation(f"no process hosts {party}: the run places {', '.join(group.name for group in self.groups)}")


def _role(name: str, wanted: frozenset[Role]) -> Role:
    if name in _USER_GROUP_NAMES:
        role = Role.USER
    else:
        try:
            role = Role(name)
        except ValueError:
            known = ", ".join(sorted(["users", *(role.value for role in wanted if role is not Role.USER)]))
            raise ConfigError("--processes", f"unknown role {name!r}; this protocol's roles are {known}") from None
    if role not in wanted:
        known = ", ".join(sorted("users" if role is Role.USER else role.value for role in wanted))
        raise ConfigError("--processes", f"this protocol has no {role.value} party; its roles are {known}")
    return role


# --------------------------------------------------------------------------- connections


@dataclass
class SocketCounts:
    """What went through one process's sockets, payload and frame headers counted apart."""

    sent_frames: int = 0
    sent_payload_bytes: int = 0
    recv_frames: int = 0
    recv_payload_bytes: int = 0

    @property
    def header_bytes(self) -> int:
        """The frame headers sent and received: the transport's own overhead, not in the ledger."""
        return FRAME_HEADER.size * (self.sent_frames + self.recv_frames)

    def as_dict(self) -> dict[str, int]:
        return {
            "sent_frames": self.sent_frames,
            "sent_payload_bytes": self.sent_payload_bytes,
            "recv_frames": self.recv_frames,
            "recv_payload_bytes": self.recv_payload_bytes,
            "header_bytes": self.header_bytes,
        }


class PeerGone(ProtocolViolation):
    """The connection to another process broke: that process is gone. Its own error, if it reported one,
    says why, and `fedrecsim.launcher` reports that one rather than this consequence."""


class _Connection:
    """One TCP connection to another process: a queue of outgoing frames, its writer and its reader."""

    def __init__(self, peer: int, stream: trio.SocketStream, counts: SocketCounts) -> None:
        self.peer = peer
        self.stream = stream
        self.counts = counts
        self.outgoing, self._queued = trio.open_memory_channel[bytes](math.inf)

    async def write(self) -> None:
        """Send the queued frames in order; after the queue closes, end-of-file."""
        counts = self.counts
        try:
            async with self._queued:
                async for data in self._queued:
                    await self.stream.send_all(FRAME_HEADER.pack(len(data)) + data)
                    counts.sent_frames += 1
                    counts.sent_payload_bytes += len(data)
            await self.stream.send_eof()
        except trio.BrokenResourceError as err:
            raise self.gone(err) from err

    def gone(self, err: trio.BrokenResourceError) -> PeerGone:
        """The error that says this connection broke, with the cause the socket gave."""
        return PeerGone(f"the connection to process {self.peer} broke ({err.__cause__ or err}): that process is gone")

    async def read(self, deliver: Callable[[bytes, int], None], max_bytes: int) -> None:
        """Deliver every frame until the peer's end-of-file.

        Raises:
            WireError: a frame longer than ``max_bytes``, or the stream ends inside a frame.
            PeerGone: the connection broke.
        """
        buffer = bytearray()
        counts = self.counts
        while True:
            try:
                chunk = await self.stream.receive_some(_RECEIVE_BYTES)
            except trio.BrokenResourceError as err:
                raise self.gone(err) from err
            if not chunk:
                if buffer:
                    raise WireError(f"the connection from process {self.peer} ended inside a frame ({len(buffer)} bytes left)")
                return
            buffer += chunk
            start = 0
            while len(buffer) - start >= FRAME_HEADER.size:
                (length,) = FRAME_HEADER.unpack_from(buffer, start)
                if length > max_bytes:
                    raise WireError(f"a frame of {length} bytes from process {self.peer} exceeds the limit of {max_bytes}")
                end = start + FRAME_HEADER.size + length
                if end > len(buffer):
                    break
                data = bytes(buffer[start + FRAME_HEADER.size:end])
                start = end
                counts.recv_frames += 1
                counts.recv_payload_bytes += length
                deliver(data, self.peer)
            del buffer[:start]


async def connect_mesh(
    position: int, ports: list[int], listener: trio.SocketListener, timeout_s: float
) -> dict[int, trio.SocketStream]:
    """Connect process ``position`` to every other: it connects to the listeners of the processes before
    it (saying who it is in a 4-byte hello) and accepts one connection from each process after it.

    Raises:
        PartyTimeout: the mesh was not complete within ``timeout_s``.
        ProtocolViolation: a hello named a process that is not expected to connect here.
    """
    streams: dict[int, trio.SocketStream] = {}
    with trio.move_on_after(timeout_s) as scope:
        for peer in range(position):
            stream = await trio.open_tcp_stream(LOOPBACK, ports[peer])
            await stream.send_all(FRAME_HEADER.pack(position))
            streams[peer] = stream
        for _ in range(position + 1, len(ports)):
            stream = await listener.accept()
            hello = b""
            while len(hello) < FRAME_HEADER.size:
                chunk = await stream.receive_some(FRAME_HEADER.size - len(hello))
                if not chunk:
                    raise ProtocolViolation(f"process {position}: a connection closed before it said which process it is")
                hello += chunk
            (peer,) = FRAME_HEADER.unpack(hello)
            if not position < peer < len(ports) or peer in streams:
                raise ProtocolViolation(f"process {position}: expected a hello from one of processes {position + 1}..{len(ports) - 1}, received {peer}")
            streams[peer] = stream
    if scope.cancelled_caught:
        missing = sorted(set(range(len(ports))) - streams.keys() - {position})
        raise PartyTimeout(f"process {position}: no connection to processes {missing} within {timeout_s:g} s")
    return streams


# --------------------------------------------------------------------------- the network


class TcpNetwork(Network):
    """A `Network` whose parties in other processes are reached over TCP (module docstring).

    Args:
        links: the link policy of messages between parties of this process.
        ledger: counts the bytes of this process's parties.
        placement: which process hosts each party.
        position: this process's position in ``placement``.
        streams: the connection to every other process (`connect_mesh`).
        **options: as `Network` (resolution, message limit, views).
    """

    def __init__(
        self,
        links: Links,
        ledger: Ledger,
        placement: Placement,
        position: int,
        streams: Mapping[int, trio.SocketStream],
        **options: Any,
    ) -> None:
        super().__init__(links, ledger, **options)
        self.placement = placement
        self.position = position
        self.counts = SocketCounts()
        self._connections = {peer: _Connection(peer, stream, self.counts) for peer, stream in sorted(streams.items())}
        self._home: dict[Party, int] = {}

    def _where(self, party: Party) -> int:
        home = self._home.get(party)
        if home is None:
            home = self._home[party] = self.placement.home(party)
        return home

    def _transmit(self, src: Party, dst: Party, kind: str, data: bytes | Broadcast, now: float, padding: int = 0) -> int:
        home = self._where(dst)
        if home == self.position:
            return super()._transmit(src, dst, kind, data, now, padding)
        if padding:
            raise ProtocolViolation(f"{src} sent {kind} to {dst} with {padding} bytes of padding: a socket carries real bytes only")
        self.ledger.record_sent(src, kind, len(data))
        connection = self._connections[home]
        try:
            connection.outgoing.send_nowait(bytes(data))
        except trio.BrokenResourceError as err:  # its writer has stopped: the socket broke before this send
            raise connection.gone(err) from err
        return len(data)

    def _receive(self, data: bytes, peer: int) -> None:
        """A frame from process ``peer``: decoded strictly, then delivered now (or dropped: dst offline)."""
        try:
            envelope = decode(data, self.max_message_bytes)
        except WireError as err:
            err.add_note(f"in a frame from process {peer} ({self.placement.groups[peer].name}) to process {self.position}")
            raise
        src, dst, kind = envelope.src, envelope.dst, envelope.kind
        if self._where(src) != peer or self._where(dst) != self.position:
            raise ProtocolViolation(
                f"process {self.position} expected messages from parties of process {peer} to its own parties; "
                f"received {kind} from {src} to {dst}"
            )
        now = trio.current_time()
        if dst not in self._attached:
            self.ledger.record_dropped(now, src, dst, kind, len(data), DropReason.OFFLINE)
            return
        self.ledger.record_delivered(now, src, dst, kind, data)
        self._accept(now, src, dst, self._mailboxes[dst], envelope)

    @asynccontextmanager
    async def open(self) -> AsyncIterator[TcpNetwork]:
        """The delay line and every connection's writer and reader for the duration of the block; then
        the graceful close of the module docstring (on an error: at once)."""
        async with super().open():
            try:
                with trio.CancelScope() as closing:
                    async with trio.open_nursery() as nursery:
                        for connection in self._connections.values():
                            nursery.start_soon(connection.write)
                            nursery.start_soon(connection.read, self._receive, self.max_message_bytes)
                        failed = True
                        try:
                            yield self
                            failed = False
                        finally:
                            for connection in self._connections.values():
                                connection.outgoing.close()
                            if failed:
                                nursery.cancel_scope.cancel()
                            closing.deadline = trio.current_time() + CLOSE_TIMEOUT_S
            finally:
                for connection in self._connections.values():
                    await connection.stream.aclose()
            if closing.cancelled_caught:
                raise PartyTimeout(f"process {self.position}: a peer did not close its connection within {CLOSE_TIMEOUT_S:g} s")


__all__ = [
    "CLOSE_TIMEOUT_S", "FRAME_HEADER", "LOOPBACK", "Group", "PeerGone", "Placement", "SocketCounts", "TcpNetwork", "connect_mesh",
]
