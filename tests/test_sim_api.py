"""fedrecsim.sim: the protocol author's API is complete, and each name is the very object fedrecsim uses."""

from __future__ import annotations

import importlib

import fedrecsim
import fedrecsim.sim as sim

# What the issue promises a protocol author, by the module that defines it.
PROMISED = {
    "fedrecsim.actors.actor": ["Actor", "Replies"],
    "fedrecsim.actors.user": ["User"],
    "fedrecsim.actors.server": ["Server"],
    "fedrecsim.actors.proxy": ["Proxy"],
    "fedrecsim.actors.third_party": ["ThirdParty"],
    "fedrecsim.actors.silo": ["Silo"],
    "fedrecsim.actors.population": ["Population"],
    "fedrecsim.actors.membership": ["Join", "Leave"],
    "fedrecsim.network.wire": ["message", "Array", "ArraySpec", "Envelope", "kind_of"],
    "fedrecsim.network.party": ["Party", "Role", "SERVER", "THIRD_PARTY"],
    "fedrecsim.config": ["param"],
    "fedrecsim.protocols.runtime": ["ProtocolSpec", "RunContext", "Outcome", "PaperFigure", "Distributed", "Cue"],
    "fedrecsim.network.tcp": ["Group"],
    "fedrecsim.seeding": ["Stream", "generator"],
    "fedrecsim.invariants": ["InvariantMonitor"],
    "fedrecsim.errors": ["SimulationError", "ConfigError", "DatasetError", "WireError", "ProtocolViolation", "PartyTimeout"],
}


def test_every_promised_name_is_exported_and_is_the_object_fedrecsim_itself_uses() -> None:
    for module_name, names in PROMISED.items():
        module = importlib.import_module(module_name)
        for name in names:
            assert name in sim.__all__, name
            assert getattr(sim, name) is getattr(module, name), name


def test_the_guide_names_the_pieces_of_a_protocol_and_the_public_modules() -> None:
    guide = sim.__doc__
    for piece in ("@message", "User", "param", "ProtocolSpec", "RunContext", "Outcome", "InvariantMonitor",
                  "fedrecsim.protocols", "package.module:PROTOCOL"):
        assert piece in guide, piece
    for public in ("fedrecsim.sim", "fedrecsim.testing"):
        assert public in fedrecsim.__doc__


def test_run_async_is_exported_from_the_top_level() -> None:
    from fedrecsim.runner import run_async

    assert fedrecsim.run_async is run_async and "run_async" in fedrecsim.__all__


def test_run_tcp_is_exported_from_the_top_level() -> None:
    from fedrecsim.launcher import run_tcp

    assert fedrecsim.run_tcp is run_tcp and "run_tcp" in fedrecsim.__all__
