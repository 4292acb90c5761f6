"""The two roles of Algorithm 1: silos that release private prototypes, a server that factorizes them.

Round 1: every silo computes its prototypes (Algorithm 2) and sends them. The server gathers them until
the round's deadline, in sorted silo order, and learns V. Round 2: the server broadcasts V; each silo fits
its users' factors locally. A silo whose prototypes did not arrive is left out of V (and still gets V);
a silo that does not receive V has no model (the driver reports it). A V without one row per item stops
the run with a `ProtocolViolation` (the server broke the protocol). Prototypes the server refuses -- not
``k`` rows over every item, or an entry beyond ``max_abs`` (or not finite) -- are recorded in the ledger
as rejected and their silo is left out of V like one that sent nothing: no single silo can stop the run
or move V further than an honest silo could. Without a ``shape``, the server only requires every silo's
prototypes to span the same items, and a mismatch stops the run.
"""

from __future__ import annotations

import math

import numpy as np

from ...actors.server import Server
from ...actors.silo import Silo
from ...errors import PartyTimeout, ProtocolViolation
from ...mechanisms.private_kmeans import PrototypeBudget, PrototypeParams, PrototypeResult
from ...models.nmf import NMFHyper
from ...network.network import Network
from ...network.party import SERVER, Party
from .messages import ItemFactors, Prototypes
from .pipeline import SiloData, item_factors, silo_prototypes, user_factors


class PrototypeSilo(Silo):
    """A silo: its users' rows stay here; only the private prototypes leave. ``fill`` is how it fits its
    users to V (`pipeline.user_factors`)."""

    def __init__(
        self,
        party: Party,
        network: Network,
        rng: np.random.Generator,
        data: SiloData,
        params: PrototypeParams,
        budget: PrototypeBudget,
        lam: float,
        fill: str = "observed",
    ) -> None:
        super().__init__(party, network, rng)
        self.data = data
        self.params = params
        self.budget = budget
        self.lam = lam
        self.fill = fill
        self.result: PrototypeResult | None = None
        self.user_factors: np.ndarray | None = None

    def send_prototypes(self) -> PrototypeResult:
        """Round 1: compute P_h and send it to the server."""
        self.result = silo_prototypes(self.rng, self.data.rows, self.params, self.budget)
        self.send(SERVER, Prototypes(self.result.prototypes))
        return self.result

    async def fit(self, deadline: float) -> bool:
        """Round 2: wait for V and fit the users' factors; False when V never came."""
        try:
            envelope = await self.recv(ItemFactors, sender=SERVER, deadline=deadline)
        except PartyTimeout:
            return False
        V = envelope.body.item_factors
        if V.shape[0] != self.data.rows.shape[1]:
            raise ProtocolViolation(
                f"{self.party} expected an item matrix with {self.data.rows.shape[1]} rows, received shape {V.shape}"
            )
        self.user_factors = user_factors(self.data.rows, V, self.lam, self.fill)
        return True


class PrototypeServer(Server):
    """The untrusted server: sees only prototypes, learns and broadcasts V.

    Args:
        shape: ``(k, n_items)``, the shape of every silo's prototypes; None: any shape.
        max_abs: an entry larger in magnitude (or not finite) marks a silo's prototypes invalid.
    """

    receives = (Prototypes,)

    def __init__(
        self, party: Party, network: Network, rng: np.random.Generator, hyper: NMFHyper,
        shape: tuple[int, int] | None = None, max_abs: float = math.inf,
    ) -> None:
        super().__init__(party, network, rng)
        self.hyper = hyper
        self.shape = shape
        self.max_abs = max_abs
        self.item_factors: np.ndarray | None = None
        self.received: dict[Party, np.ndarray] = {}
        self.rejected: list[Party] = []

    def _invalid(self, party: Party, reply: Prototypes) -> str | None:
        prototypes = reply.prototypes
        if self.shape is not None and prototypes.shape != self.shape:
            return f"prototypes of shape {self.shape}, received {prototypes.shape}"
        if prototypes.size and not np.abs(prototypes).max() <= self.max_abs:
            return f"entries finite and at most {self.max_abs:g} in magnitude, received {np.abs(prototypes).max():g}"
        return None

    async def learn(self, silos: list[Party], deadline: float) -> list[Party]:
        """Round 1: gather the prototypes and factorize them; returns the silos that did not answer (those
        whose prototypes it rejected are in ``rejected``)."""
        replies = await self.gather(Prototypes, silos, deadline=deadline, validate=self._invalid)
        self.received = {party: reply.prototypes for party, reply in replies}
        columns = {prototypes.shape[1] for prototypes in self.received.values()}
        if len(columns) > 1:
            shapes = ", ".join(f"{party}: {prototypes.shape}" for party, prototypes in self.received.items())
            raise ProtocolViolation(f"{self.party} received prototypes over different numbers of items ({shapes})")
        self.rejected = replies.rejected
        if self.received:
            self.item_factors = item_factors(self.rng, list(self.received.values()), self.hyper)
        return replies.missing

    def broadcast(self, silos: list[Party]) -> None:
        """Round 2: send V to every silo."""
        if self.item_factors is not None:
            self.send_many(silos, ItemFactors(self.item_factors))


__all__ = ["PrototypeServer", "PrototypeSilo"]
