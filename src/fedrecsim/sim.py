"""What a protocol author imports: the stable API for writing a protocol of your own.

Everything here keeps its name and meaning across fedrecsim releases; the modules it comes from are
internal. A protocol is four small pieces (``docs/writing-a-protocol.md`` builds one step by step):

1. **Messages** -- frozen dataclasses registered with ``@message("myproto.kind")``; fields are ``int``,
   ``float``, ``bool``, ``str``, ``bytes``, `Party`, ``tuple[T, ...]``, ``T | None`` and numpy arrays
   declared with ``Array(dtype, ndim=..., shape=...)``. The wire refuses anything else, and a kind
   another class already holds is refused at import time. Prefix kinds with your protocol's name.
2. **Roles** -- subclasses of `User`, `Server`, `Silo`, `Proxy` or `ThirdParty` (each an `Actor`): each
   owns its state and its generator ``rng``, and talks only through ``send``, ``recv``, ``gather`` and
   ``drain``, every wait bounded by a virtual deadline. A `User` implements ``async run()``; it calls
   ``crashes_in(round)`` after it received a round's request and ``await compute()`` before it replies,
   so that the scenario's dropout and stragglers apply to it.
3. **A config class** -- a frozen dataclass whose fields use `param` (default, range, one-line doc); it
   validates the scenario's ``[protocol]`` table.
4. **A** `ProtocolSpec` ``(name, config, run, description)`` whose ``async run(ctx: RunContext)`` builds
   the actors, opens ``ctx.population(users)``, drives the rounds (calling ``population.begin_round``
   / ``end_round`` and ``ctx.progress``) and returns an `Outcome`. Put it in a module and name it in a
   scenario as ``run.protocol = "package.module:PROTOCOL"``, or register it under the entry-point group
   ``fedrecsim.protocols`` and name it by its entry-point name. Optionally ``plan=``: a function of a
   `PlanContext` returning the protocol's `TrafficPlan` (its `Flow`s per round), from which
   ``fedrecsim inspect`` estimates messages and bytes per round and role without running it. Optionally
   ``memory=``: a function of a `MemoryContext` (the scenario and the data's shape) returning
   `MemoryItem`s -- the protocol's models and the messages a round keeps in flight, in bytes, with the
   keys that drive them -- against which every run is checked before it starts (`fedrecsim.memory`). Optionally
   ``distributed=``: a `Distributed` -- per role an entry ``async (ctx, group, cue)`` that builds the
   actors of the parties its process hosts (a `Group`), ``await cue.ready()``, runs them, and returns
   its part -- and the run can go over real TCP across processes (``fedrecsim run --transport tcp``).
   Optionally ``metrics=``: a `MetricInfo` per metric the protocol reports (meaning, unit, support,
   which way is better), which ``fedrecsim metrics PROTOCOL`` prints; an `Outcome`'s ``trivial`` pairs a
   metric with its trivial predictor's and ``trivial_reason`` says why the model may do worse.
   Optionally ``audit=``: a `fedrecsim.audit.AuditSpec` -- what the privacy claim protects (a neighbouring
   relation), the claim for a scenario, and distinguishers of the protocol's own -- so that
   ``fedrecsim audit`` can bound its epsilon from a party's view (docs/audit.md).

Determinism: draw randomness only from an actor's ``rng``, ``ctx.rng(Stream.PROTOCOL, ...)`` or
``generator(seed, stream, *ids)`` -- never from ``random`` or the global ``np.random`` -- and aggregate
in sorted party order (`Replies` iterates that way). Then the same scenario and seed give the same
transcript hash, bit for bit.

Honesty: record ground truth the parties cannot see with an `InvariantMonitor` in ``Outcome.invariants``
(e.g. "the masks cancelled"); violations are reported in ``result.json``, never raised.

`fedrecsim.testing` is the pytest plugin for testing protocols; `fedrecsim.run_async` runs a whole
scenario inside a pytest-trio test.
"""

from __future__ import annotations

from .actors.actor import Actor, Replies
from .actors.membership import Join, Leave
from .actors.population import Population
from .actors.proxy import Proxy
from .actors.server import Server
from .actors.silo import Silo
from .actors.third_party import ThirdParty
from .actors.user import User
from .config import param
from .data.ratings import Ratings
from .errors import ConfigError, DatasetError, PartyTimeout, ProtocolViolation, SimulationError, WireError
from .invariants import InvariantMonitor
from .memory import MemoryContext, MemoryItem
from .metric_declarations import MetricInfo
from .network.availability import AlwaysOnline, BernoulliChurn, MidRoundDropout
from .network.network import Network
from .network.party import SERVER, THIRD_PARTY, Party, Role
from .network.wire import Array, ArraySpec, Envelope, kind_of, message
from .network.tcp import Group
from .protocols.runtime import Cue, Distributed, Flow, Outcome, PaperFigure, PlanContext, ProtocolSpec, RunContext, TrafficPlan
from .seeding import Stream, generator

__all__ = [
    "SERVER",
    "THIRD_PARTY",
    "Actor",
    "AlwaysOnline",
    "Array",
    "ArraySpec",
    "BernoulliChurn",
    "ConfigError",
    "Cue",
    "DatasetError",
    "Distributed",
    "Envelope",
    "Flow",
    "Group",
    "InvariantMonitor",
    "Join",
    "Leave",
    "MemoryContext",
    "MemoryItem",
    "MetricInfo",
    "MidRoundDropout",
    "Network",
    "Outcome",
    "PaperFigure",
    "Party",
    "PartyTimeout",
    "PlanContext",
    "Population",
    "ProtocolSpec",
    "ProtocolViolation",
    "Proxy",
    "Ratings",
    "Replies",
    "Role",
    "RunContext",
    "Server",
    "Silo",
    "SimulationError",
    "Stream",
    "ThirdParty",
    "TrafficPlan",
    "User",
    "WireError",
    "generator",
    "kind_of",
    "message",
    "param",
]
