"""Everything between two actors: the wire, links, the network's delay line, the ledger, availability."""

from .faults import Byzantine, Corruption, Crash, PartyFaults
from .ledger import DropReason, Ledger, RejectReason
from .links import Constant, Empirical, LinkSpec, Links, LogNormal, Partition, Uniform
from .network import Mailbox, Network
from .party import SERVER, THIRD_PARTY, Party, Role
from .wire import Array, Envelope, decode, encode, message

__all__ = [
    "SERVER",
    "THIRD_PARTY",
    "Array",
    "Byzantine",
    "Constant",
    "Corruption",
    "Crash",
    "DropReason",
    "Empirical",
    "Envelope",
    "Ledger",
    "LinkSpec",
    "Links",
    "LogNormal",
    "Mailbox",
    "Network",
    "Partition",
    "Party",
    "PartyFaults",
    "RejectReason",
    "Role",
    "Uniform",
    "decode",
    "encode",
    "message",
]
