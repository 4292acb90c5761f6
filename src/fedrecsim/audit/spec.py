"""What a protocol declares to be audited (`AuditSpec`, on `ProtocolSpec.audit`) and the ``[audit]`` table.

A protocol's declaration says what its claim protects (a `Neighbouring` relation), what the claim is for a
scenario (`Claim`: epsilon and delta for that relation, over the whole run), which parties' views the
claim covers, and the distinguishers its paper's threat model gives a party beside the generic one.
Two declarations recur and are written once here: no DP claim at all (`no_dp_claim`), and a claim whose
threat model is the view of one role (`AuditSpec.for_observer`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import param
from ..errors import ConfigError
from ..network.party import Party, Role
from .distinguishers import Distinguisher
from .neighbours import Neighbouring


@dataclass(frozen=True)
class Claim:
    """A protocol's privacy claim for one scenario: (epsilon, delta)-DP for its neighbouring relation.

    Attributes:
        epsilon, delta: the claimed guarantee for the whole run, against the parties of `AuditSpec.parties`.
            ``epsilon = math.inf`` says the protocol makes no DP claim for the relation (e.g. a non-private
            baseline): the audit then reports the lower bound as the leak it measures, with no verdict,
            and ``audit.json`` holds ``"epsilon": null``.
        statement: where the claim comes from, e.g. "each report is eps0-LDP (Minto et al. Thm 3), k = 1".
    """

    epsilon: float
    delta: float
    statement: str


def no_dp_claim(statement: str) -> Callable[[Any], Claim]:
    """The ``claim`` of a protocol that makes no DP claim for its relation, whatever the scenario:
    ``Claim(math.inf, 0.0, statement)``, the statement saying what the protocol promises instead. It pickles
    (a partial of a module function), as a protocol's own ``claim`` function does."""
    return functools.partial(_no_claim, statement)


def _no_claim(statement: str, scenario: Any) -> Claim:
    return Claim(math.inf, 0.0, statement)


@dataclass(frozen=True)
class AuditSpec:
    """A protocol's audit declaration (`ProtocolSpec.audit`).

    Attributes:
        neighbouring: the unit the claim protects and how a target is chosen (`fedrecsim.audit.neighbours`).
        claim: ``claim(scenario) -> Claim``.
        parties: the roles whose view the claim covers (the threat model's observers); an audit of a
            party of another role is refused. Empty: any role.
        distinguishers: the protocol's own distinguishers (each names the roles it applies to), beside
            the generic one every audit has.
        published: ``published(outcome) -> {name: value}``: what the run releases to everyone without a
            message (e.g. Hua et al.'s published V), from the protocol's `Outcome`; a distinguisher reads
            it as `TrialView.published`. None: the protocol publishes nothing beyond its messages.
    """

    neighbouring: Neighbouring
    claim: Callable[[Any], Claim]
    parties: tuple[Role, ...] = ()
    distinguishers: tuple[Distinguisher, ...] = ()
    published: Callable[[Any], Mapping[str, Any]] | None = None

    @classmethod
    def for_observer(cls, role: Role, neighbouring: Neighbouring, claim: Callable[[Any], Claim],
                     *own: Distinguisher) -> AuditSpec:
        """A claim whose threat model is one role's view (e.g. the honest-but-curious server): the claim
        covers that role's parties only, and each of the protocol's own distinguishers applies to that role."""
        return cls(neighbouring, claim, (role,), tuple(dataclasses.replace(d, roles=(role,)) for d in own))


def audit_spec(spec: Any) -> AuditSpec:
    """The audit declaration of a `ProtocolSpec`; ConfigError naming ``run.protocol`` when it has none."""
    declared = getattr(spec, "audit", None)
    if declared is None:
        raise ConfigError(
            "run.protocol",
            f"{spec.name}: this protocol declares no neighbouring relation to audit (ProtocolSpec.audit is None); "
            "see docs/audit.md for how a protocol declares one",
        )
    if not isinstance(declared, AuditSpec):
        raise ConfigError("run.protocol", f"{spec.name}: ProtocolSpec.audit must be a fedrecsim.audit.AuditSpec, got {type(declared).__name__}")
    return declared


@dataclass(frozen=True)
class AuditSettings:
    """The ``[audit]`` table of a scenario (every key may also be given with ``--set audit.KEY=VALUE``)."""

    party: str = param("", doc="the party whose recorded view is audited, ROLE:INDEX (e.g. proxy:0)")
    trials: int = param(200, ge=2, doc="runs per world (with and without the target), half to train, half held out")
    user: int = param(-1, ge=-1, doc="the target user (-1: the user with the most ratings)")
    item: int = param(-1, ge=-1, doc="one_rating relations: the target item (-1: the first item the user did not rate)")
    neighbour: int = param(-1, ge=-1, doc="user_replaced relations: whose row replaces the target's (-1: the next user)")
    in_items: tuple[int, ...] | None = param(None, doc="the target user's items in the world with the target (default: by the relation)")
    out_items: tuple[int, ...] | None = param(None, doc="the target user's items in the world without it (default: by the relation)")
    confidence: float = param(0.95, gt=0, lt=1, doc="the confidence level of the audited lower bound")
    distinguishers: tuple[str, ...] = param((), doc="the distinguishers to run (default: every one that applies)")
    chunk: int = param(25, ge=1, doc="trials per task sent to a worker (a resumed audit redoes at most one chunk per worker)")

    def party_of(self) -> Party:
        """The audited party; ConfigError naming ``audit.party`` for anything but ROLE:INDEX."""
        if not self.party:
            raise ConfigError("audit.party", "is required: the party whose view is audited, ROLE:INDEX (e.g. server:0)")
        try:
            return Party.parse(self.party)
        except ValueError:
            roles = ", ".join(role.value for role in Role)
            raise ConfigError("audit.party", f"expected ROLE:INDEX with ROLE one of {roles}, got {self.party!r}") from None


__all__ = ["AuditSettings", "AuditSpec", "Claim", "audit_spec", "no_dp_claim"]
