"""The two roles of Algorithm 1: silos that release private prototypes, a server that factorizes them.

Round 1: every silo computes its prototypes (Algorithm 2) and sends them. The server gathers them until
the round's deadline, in sorted silo order, and learns V. Round 2: the server broadcasts V; each silo fits
its users' factors locally. A silo whose prototypes did not arrive is left out of V (and still gets V);
a silo that does not receive V has no model (the driver reports it). A message of the wrong shape (V
without one row per item, prototypes without one column per item) is a `ProtocolViolation`.
"""

from __future__ import annotations

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
    """A silo: its users' rows stay here; only the private prototypes leave."""

    def __init__(
        self,
        party: Party,
        network: Network,
        rng: np.random.Generator,
        data: SiloData,
        params: PrototypeParams,
        budget: PrototypeBudget,
        lam: float,
    ) -> None:
        super().__init__(party, network, rng)
        self.data = data
        self.params = params
        self.budget = budget
        self.lam = lam
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
        self.user_factors = user_factors(self.data.rows, V, self.lam)
        return True


class PrototypeServer(Server):
    """The untrusted server: sees only prototypes, learns and broadcasts V."""

    def __init__(self, party: Party, network: Network, rng: np.random.Generator, hyper: NMFHyper) -> None:
        super().__init__(party, network, rng)
        self.hyper = hyper
        self.item_factors: np.ndarray | None = None
        self.received: dict[Party, np.ndarray] = {}

    async def learn(self, silos: list[Party], deadline: float) -> list[Party]:
        """Round 1: gather the prototypes and factorize them; returns the silos that did not answer."""
        replies = await self.gather(Prototypes, silos, deadline=deadline)
        self.received = {party: reply.prototypes for party, reply in replies}
        columns = {prototypes.shape[1] for prototypes in self.received.values()}
        if len(columns) > 1:
            shapes = ", ".join(f"{party}: {prototypes.shape}" for party, prototypes in self.received.items())
            raise ProtocolViolation(f"{self.party} received prototypes over different numbers of items ({shapes})")
        if self.received:
            self.item_factors = item_factors(self.rng, list(self.received.values()), self.hyper)
        return replies.missing

    def broadcast(self, silos: list[Party]) -> None:
        """Round 2: send V to every silo."""
        if self.item_factors is not None:
            self.send_many(silos, ItemFactors(self.item_factors))


__all__ = ["PrototypeServer", "PrototypeSilo"]
