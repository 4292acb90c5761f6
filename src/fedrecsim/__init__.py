"""fedrecsim: simulate privacy-preserving federated recommendation protocols, byte for byte, in virtual time.

Four modules are public; everything else (``fedrecsim.network``, ``fedrecsim.actors``,
``fedrecsim.protocols``, ...) is internal and may change between releases:

- ``fedrecsim`` (this module): load and run scenarios -- `run`, `resume` (an interrupted run from its
  checkpoint), `run_async` (inside a running trio loop,
  e.g. a pytest-trio test), `run_tcp` (over real loopback TCP, the parties in several processes),
  `load_scenario`, `parse_scenario`, `RunResult`, `available_protocols`, `keep_freed_memory` (for a
  process that exists to run simulations, as the command is) -- and the errors they raise; `Study`,
  `StudyResult` and `read_study` from ``fedrecsim.study``.
- ``fedrecsim.study``: script a study -- a grid of overrides x seeds run locally or on Dask into a
  resumable sweep folder, its runs and summary as tables pandas takes, the command line the study scripts
  in ``scenarios/`` share; see ``docs/studies.md``.
- ``fedrecsim.sim``: what a protocol author imports to write a protocol of their own (actors, messages,
  config, `ProtocolSpec`, seeding, invariant monitors); see ``docs/writing-a-protocol.md``.
- ``fedrecsim.testing``: the pytest plugin (fixtures for an open network in virtual time, ledger
  assertions, recorders), installed with the ``test`` extra.
"""

__version__ = "0.1.0"

from .errors import (  # noqa: E402 -- the version must exist before the runner imports it
    CheckpointError,
    ConfigError,
    DatasetError,
    PartyTimeout,
    ProtocolViolation,
    SimulationError,
    WireError,
)
from .allocator import keep_freed_memory  # noqa: E402
from .network.party import Party, Role  # noqa: E402
from .protocols import available_protocols  # noqa: E402
from .runner import RunResult, SlowClockWarning, resume, run, run_async  # noqa: E402
from .launcher import run_tcp  # noqa: E402
from .scenario import Scenario, load_scenario, parse_scenario  # noqa: E402
from .study import Study, StudyResult, read_study  # noqa: E402

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "Party",
    "PartyTimeout",
    "ProtocolViolation",
    "Role",
    "RunResult",
    "Scenario",
    "SimulationError",
    "SlowClockWarning",
    "Study",
    "StudyResult",
    "WireError",
    "__version__",
    "available_protocols",
    "keep_freed_memory",
    "load_scenario",
    "parse_scenario",
    "read_study",
    "resume",
    "run",
    "run_async",
    "run_tcp",
]
