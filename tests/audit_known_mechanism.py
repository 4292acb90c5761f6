"""A protocol of one's own with a known epsilon, for the audit tests: written only against the public API
(`fedrecsim.sim`, `fedrecsim.audit`), named in a scenario as ``audit_known_mechanism:PROTOCOL``.

Each round the server asks every member for one report; a user answers with a mechanism of its row's
number of ratings ``n`` that is epsilon-DP for one rating added or removed (``n`` changes by one):

* ``mechanism = "rr"``: randomized response on the parity of ``n`` -- the true parity with probability
  e^eps / (1 + e^eps), else the other one;
* ``mechanism = "laplace"``: ``n`` plus Laplace noise of scale 1 / eps (sensitivity 1).

``report_epsilon`` is the epsilon the users actually use (default: the claimed ``epsilon``): a test sets
it above the claim to break the protocol on purpose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedrecsim.audit import AuditSpec, Claim, Distinguisher, TrialView, one_rating
from fedrecsim.sim import SERVER, Outcome, Party, ProtocolSpec, Role, RunContext, Server, Stream, User, message, param


@message("auditknown.ask")
@dataclass(frozen=True)
class Ask:
    round: int


@message("auditknown.report")
@dataclass(frozen=True)
class Report:
    round: int
    value: float


@dataclass(frozen=True)
class Config:
    mechanism: Literal["rr", "laplace"] = param("rr", doc="randomized response on the parity, or Laplace on the count")
    epsilon: float = param(1.0, gt=0, doc="the claimed epsilon per report")
    report_epsilon: float = param(0.0, ge=0, doc="the epsilon the users use (0: the claimed one)")


class Reporter(User):
    def __init__(self, party, network, rng, count: int, config: Config) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.count = count
        self.config = config

    def report(self) -> float:
        eps = self.config.report_epsilon or self.config.epsilon
        if self.config.mechanism == "rr":
            keep = self.rng.random() < math.exp(eps) / (1 + math.exp(eps))
            return float(self.count % 2 if keep else 1 - self.count % 2)
        return float(self.count + self.rng.laplace(0.0, 1.0 / eps))

    async def run(self) -> None:
        while True:
            ask = (await self.recv(Ask, sender=self.server, deadline=self.horizon_s)).body
            if self.crashes_in(ask.round):
                return
            await self.compute()
            self.send(self.server, Report(ask.round, self.report()))


class Collector(Server):
    async def round(self, index: int, deadline: float) -> None:
        self.update_membership()
        cohort = sorted(self.members)
        self.send_many(cohort, Ask(index))
        await self.gather(Report, cohort, deadline=deadline, accept=lambda reply: reply.round == index)


async def run(ctx: RunContext) -> Outcome:
    counts = ctx.train.user_counts()
    users = {
        Party(Role.USER, u): Reporter(Party(Role.USER, u), ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, u), int(counts[u]), ctx.config)
        for u in range(ctx.train.n_users)
    }
    server = Collector(SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0))
    ctx.network.attach(SERVER)
    rows = []
    async with ctx.population(users).open() as population:
        await ctx.network.sleep(ctx.scenario.run.round_gap_s)
        for index in range(1, ctx.rounds + 1):
            population.begin_round(index)
            await server.round(index, ctx.network.now + ctx.scenario.run.round_timeout_s)
            population.end_round(index)
            rows.append({"round": index})
            ctx.progress(index)
    return Outcome(len(rows), rows, {})


def target_report(view: TrialView) -> np.ndarray:
    """The target user's reports, as the server received them (the score a known-mechanism audit needs)."""
    return np.array([body.value for body in view.bodies(Report.KIND, Party(Role.USER, view.target.user))])


def _claim(scenario) -> Claim:  # type: ignore[no-untyped-def]
    eps = scenario.protocol.epsilon * scenario.run.rounds
    return Claim(eps, 0.0, f"each report is {scenario.protocol.epsilon:g}-DP, {scenario.run.rounds} round(s)")


PROTOCOL = ProtocolSpec(
    "audit_known_mechanism", Config, run, "randomized response or Laplace with a known epsilon (audit tests)",
    audit=AuditSpec(
        one_rating(), _claim, (Role.SERVER,),
        (Distinguisher("target_report", target_report, roles=(Role.SERVER,), description="the target's report itself"),),
    ),
)

#: The same protocol without an audit declaration (the refusal test of tests/test_audit.py).
UNDECLARED = ProtocolSpec("audit_undeclared", Config, run, "the known mechanism, declaring nothing to audit")
