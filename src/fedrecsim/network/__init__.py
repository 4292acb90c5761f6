"""Everything between two actors: the wire, links, the network's delay line, the ledger, availability."""

from .ledger import DropReason, Ledger
from .links import Constant, Empirical, LinkSpec, Links, LogNormal, Uniform
from .network import Mailbox, Network
from .party import SERVER, THIRD_PARTY, Party, Role
from .wire import Array, Envelope, decode, encode, message

__all__ = [
    "SERVER",
    "THIRD_PARTY",
    "Array",
    "Constant",
    "DropReason",
    "Empirical",
    "Envelope",
    "Ledger",
    "LinkSpec",
    "Links",
    "LogNormal",
    "Mailbox",
    "Network",
    "Party",
    "Role",
    "Uniform",
    "decode",
    "encode",
    "message",
]
