"""The protocol registry: a scenario's ``run.protocol`` names one of these.

Each protocol package exposes ``PROTOCOL``, a `ProtocolSpec`, from its ``protocol`` module; the registry
imports it only when a scenario asks for it.
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .runtime import Outcome, ProtocolSpec, RunContext

_MODULES = {
    "fcf": "fedrecsim.protocols.fcf.protocol",
    "dpmf": "fedrecsim.protocols.dpmf.protocol",
    "ldp_implicit": "fedrecsim.protocols.ldp_implicit.protocol",
}


def available_protocols() -> tuple[str, ...]:
    return tuple(sorted(_MODULES))


def protocol_spec(name: str) -> ProtocolSpec:
    """The spec of protocol ``name``; ConfigError naming ``run.protocol`` if there is none."""
    module_name = _MODULES.get(name)
    if module_name is None:
        raise ConfigError("run.protocol", f"unknown protocol {name!r}; available: {', '.join(available_protocols())}")
    return importlib.import_module(module_name).PROTOCOL


__all__ = ["Outcome", "ProtocolSpec", "RunContext", "available_protocols", "protocol_spec"]
