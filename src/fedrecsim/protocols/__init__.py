"""The protocol registry: what a scenario's ``run.protocol`` may name.

``run.protocol`` takes one of three forms, looked up in this order:

1. a built-in protocol (``fcf``, ``dpmf``, ``ldp_implicit``): each package here exposes ``PROTOCOL``, a
   `ProtocolSpec`, from its ``protocol`` module, imported only when a scenario asks for it;
2. ``"package.module:ATTRIBUTE"``: the `ProtocolSpec` bound to ``ATTRIBUTE`` (a dotted path is followed)
   in an importable module -- a protocol of the user's own, nothing to install or register;
3. a name an installed distribution registers under the entry-point group ``fedrecsim.protocols``
   (`ENTRY_POINT_GROUP`), its value in the same ``module:ATTRIBUTE`` form, e.g. in ``pyproject.toml``::

       [project.entry-points."fedrecsim.protocols"]
       secure_sum = "secure_sum.protocol:PROTOCOL"

A built-in name always means the built-in protocol: an installed package cannot shadow it. Every failure
is a `ConfigError` naming ``run.protocol`` and saying what went wrong: an unknown name (listing the
built-in and installed names and the ``module:ATTRIBUTE`` form), a module that fails to import, a missing
attribute, an object that is not a `ProtocolSpec`, a name two installed packages both claim.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from ..errors import ConfigError
from .runtime import Flow, Outcome, PaperFigure, PlanContext, ProtocolSpec, RunContext, TrafficPlan

#: The entry-point group under which installed packages register their protocols.
ENTRY_POINT_GROUP = "fedrecsim.protocols"

_KEY = "run.protocol"

_BUILT_IN = {
    "fcf": "fedrecsim.protocols.fcf.protocol:PROTOCOL",
    "dpmf": "fedrecsim.protocols.dpmf.protocol:PROTOCOL",
    "ldp_implicit": "fedrecsim.protocols.ldp_implicit.protocol:PROTOCOL",
    "prototypes": "fedrecsim.protocols.prototypes.protocol:PROTOCOL",
    "secagg": "fedrecsim.protocols.secagg.protocol:PROTOCOL",
    "privirec": "fedrecsim.protocols.privirec.protocol:PROTOCOL",
    "fedvae": "fedrecsim.protocols.fedvae.protocol:PROTOCOL",
}


def built_in_protocols() -> tuple[str, ...]:
    """The names of the protocols that ship with fedrecsim, sorted."""
    return tuple(sorted(_BUILT_IN))


def installed_protocols() -> tuple[str, ...]:
    """The names installed distributions register under `ENTRY_POINT_GROUP`, sorted, built-ins excluded
    (a built-in name always means the built-in protocol)."""
    return tuple(sorted({entry.name for entry in _entry_points()} - set(_BUILT_IN)))


def available_protocols() -> tuple[str, ...]:
    """Every name ``run.protocol`` accepts without the ``module:ATTRIBUTE`` form: built-in and installed."""
    return tuple(sorted({*_BUILT_IN, *installed_protocols()}))


def protocol_spec(name: str) -> ProtocolSpec:
    """The `ProtocolSpec` that ``name`` -- a built-in, ``module:ATTRIBUTE`` or an installed name -- means.

    Raises:
        ConfigError: naming ``run.protocol``, when ``name`` means no protocol (module docstring).
    """
    reference = _BUILT_IN.get(name)
    if reference is not None:
        return _load(reference, f"built-in protocol {name!r}")
    if ":" in name:
        return _load(name, repr(name))
    entries = sorted({entry.value for entry in _entry_points() if entry.name == name})
    if len(entries) > 1:
        raise ConfigError(
            _KEY,
            f"{name!r} is registered by several installed packages ({', '.join(entries)}); "
            'name the one you mean as "package.module:ATTRIBUTE"',
        )
    if entries:
        return _load(entries[0], f"the installed protocol {name!r} ({entries[0]}, entry point group {ENTRY_POINT_GROUP})")
    installed = installed_protocols()
    raise ConfigError(
        _KEY,
        f"unknown protocol {name!r}; built-in: {', '.join(built_in_protocols())}; "
        f"installed (entry point group {ENTRY_POINT_GROUP}): {', '.join(installed) if installed else 'none'}; "
        'or name a ProtocolSpec of your own as "package.module:ATTRIBUTE"',
    )


def _entry_points() -> importlib.metadata.EntryPoints:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _load(reference: str, what: str) -> ProtocolSpec:
    """Import ``module:ATTRIBUTE`` and check that it is a `ProtocolSpec`; ``what`` names it in errors."""
    module_name, _, attribute = reference.partition(":")
    module_name, attribute = module_name.strip(), attribute.strip()
    if not module_name or not attribute:
        raise ConfigError(_KEY, f'{what} must look like "package.module:ATTRIBUTE", got {reference!r}')
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 -- the user's module may fail in any way; say which and keep it
        raise ConfigError(
            _KEY, f"{what}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(_KEY, f"{what}: module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, ProtocolSpec):
        raise ConfigError(
            _KEY,
            f"{what}: {module_name}:{attribute} is a {type(found).__name__}, not a fedrecsim ProtocolSpec "
            "(build one with fedrecsim.sim.ProtocolSpec(name, config, run, description))",
        )
    return found


__all__ = [
    "ENTRY_POINT_GROUP",
    "Flow",
    "Outcome",
    "PaperFigure",
    "PlanContext",
    "ProtocolSpec",
    "RunContext",
    "TrafficPlan",
    "available_protocols",
    "built_in_protocols",
    "installed_protocols",
    "protocol_spec",
]
