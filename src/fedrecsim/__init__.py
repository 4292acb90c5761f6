"""fedrecsim: simulate privacy-preserving federated recommendation protocols, byte for byte, in virtual time.

The public API is what this module exports; everything else is internal and may change.
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402 -- the version must exist before the runner imports it
    ConfigError,
    DatasetError,
    PartyTimeout,
    ProtocolViolation,
    SimulationError,
    WireError,
)
from .network.party import Party, Role  # noqa: E402
from .protocols import available_protocols  # noqa: E402
from .runner import RunResult, run  # noqa: E402
from .scenario import Scenario, load_scenario, parse_scenario  # noqa: E402

__all__ = [
    "ConfigError",
    "DatasetError",
    "Party",
    "PartyTimeout",
    "ProtocolViolation",
    "Role",
    "RunResult",
    "Scenario",
    "SimulationError",
    "WireError",
    "__version__",
    "available_protocols",
    "load_scenario",
    "parse_scenario",
    "run",
]
