"""Distinguishers: from one party's recorded view to a score that tells the audit's two worlds apart.

A distinguisher has two halves:

* ``features(view: TrialView) -> 1-D float array``, computed in the worker right after each trial's run,
  from what the audited party received (`TrialView.envelopes`) and what the threat model lets it know
  (the two candidate rows of the target, the rest of the training data, the scenario). It never sees
  which world the trial was in. Trials may give arrays of different lengths: before fitting they are
  zero-padded to the longest.
* ``fit(features, labels) -> score``: learns, on the training half's features (one row per trial) and
  labels (1 = target in, 0 = out), a function from a feature matrix to one score per trial. The held-out
  half is scored with it; a high or a low score may mean "in" (the direction is learned too,
  `fedrecsim.audit.bounds`). `first_feature` uses a ready score (e.g. a log-likelihood ratio) as it is.

The generic distinguisher, `GENERIC` ("logistic"), works on any view: its features are every number the
party received (`view_numbers`), and its score a logistic regression learned on the training half.
A protocol adds its own through `fedrecsim.audit.AuditSpec.distinguishers`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize

from ..data.ratings import Ratings
from ..errors import ConfigError
from ..network.party import Party, Role
from .neighbours import Target

Score = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class TrialView:
    """What a distinguisher may look at after one trial.

    Attributes:
        party: the audited party.
        envelopes: everything it received in the run, in delivery order (`fedrecsim.network.wire.Envelope`:
            ``kind``, ``src``, ``dst``, ``sent_at``, ``body`` -- the decoded message).
        target: the two candidate rows of the target user (which of the two the run had is not said).
        known: the training data with the target user's row empty: the rest of the data set, which the
            strongest adversary of a DP claim knows.
        scenario: the validated scenario the trial ran (its ``run.seed`` is the trial's own).
        published: what the run released to everyone without a message (`AuditSpec.published`; empty
            when the protocol declares nothing): every party's view includes it.
    """

    party: Party
    envelopes: tuple[Any, ...]
    target: Target
    known: Ratings
    scenario: Any
    published: Mapping[str, Any] = field(default_factory=dict)

    def bodies(self, kind: str, sender: Party | None = None) -> list[Any]:
        """The bodies of the received messages of ``kind`` (from ``sender`` only, if given), in delivery order."""
        return [e.body for e in self.envelopes if e.kind == kind and (sender is None or e.src == sender)]

    def target_bodies(self, kind: str) -> list[Any]:
        """The bodies of the received messages of ``kind`` that the target user sent, in delivery order."""
        return self.bodies(kind, Party(Role.USER, self.target.user))


def first_feature(features: np.ndarray, labels: np.ndarray) -> Score:
    """A `Distinguisher.fit` for features whose first entry is already the score: nothing to learn."""
    return lambda matrix: np.asarray(matrix, dtype=float)[:, 0]


@dataclass(frozen=True)
class Distinguisher:
    """A named way to score a trial (module docstring).

    Attributes:
        name: how ``--set audit.distinguishers=[...]`` and the result name it.
        features: ``features(TrialView) -> float[m]``, run in the worker after each trial.
        fit: ``fit(float[n, m] training features, int[n] labels) -> score function`` (default: the first feature).
        roles: the roles of the parties it applies to (empty: any).
        description: what it uses of the view, in one sentence.
    """

    name: str
    features: Callable[[TrialView], np.ndarray]
    fit: Callable[[np.ndarray, np.ndarray], Score] = first_feature
    roles: tuple[Role, ...] = ()
    description: str = ""

    def applies_to(self, party: Party) -> bool:
        return not self.roles or party.role in self.roles


def view_numbers(view: TrialView) -> np.ndarray:
    """Every number the party received, as one float vector: the messages sorted by (kind, sender, send
    time) so that trials line up, and each body's fields in order (arrays flattened, scalars as they are,
    nested dataclasses, lists and tuples followed)."""
    ordered = sorted(view.envelopes, key=lambda e: (e.kind, e.src.role.value, e.src.index, e.sent_at))
    numbers: list[np.ndarray] = []
    for envelope in ordered:
        _collect(envelope.body, numbers)
    return np.concatenate(numbers) if numbers else np.zeros(0)


def _collect(value: Any, out: list[np.ndarray]) -> None:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            out.append(value.astype(float).ravel())
    elif isinstance(value, (bool, int, float, np.number)):
        out.append(np.array([float(value)]))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _collect(getattr(value, field.name), out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, out)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _collect(value[key], out)


def logistic_fit(features: np.ndarray, labels: np.ndarray, penalty: float = 1.0) -> Score:
    """L2-penalized logistic regression on standardized features (constant columns dropped): the score is
    the fitted log-odds of "in". Deterministic (L-BFGS from zero)."""
    features = np.nan_to_num(np.asarray(features, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
    labels = np.asarray(labels, dtype=float)
    mean, spread = features.mean(axis=0), features.std(axis=0)
    keep = spread > 0
    if not keep.any():
        return lambda matrix: np.zeros(np.asarray(matrix).shape[0])
    mean, spread = mean[keep], spread[keep]
    X = (features[:, keep] - mean) / spread
    X = np.hstack([X, np.ones((X.shape[0], 1))])

    def loss(weights: np.ndarray) -> tuple[float, np.ndarray]:
        margin = X @ weights
        value = np.logaddexp(0.0, margin).sum() - labels @ margin + 0.5 * penalty * weights[:-1] @ weights[:-1]
        probability = 0.5 * (1.0 + np.tanh(0.5 * margin))
        gradient = X.T @ (probability - labels)
        gradient[:-1] += penalty * weights[:-1]
        return float(value), gradient

    weights = optimize.minimize(loss, np.zeros(X.shape[1]), jac=True, method="L-BFGS-B").x

    def score(matrix: np.ndarray) -> np.ndarray:
        matrix = np.nan_to_num(np.asarray(matrix, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
        return ((matrix[:, keep] - mean) / spread) @ weights[:-1] + weights[-1]

    return score


GENERIC = Distinguisher(
    "logistic", view_numbers, logistic_fit, (),
    "logistic regression, learned on the training half, on every number the party received",
)


def applicable(own: tuple[Distinguisher, ...], party: Party, chosen: tuple[str, ...] = ()) -> tuple[Distinguisher, ...]:
    """The generic distinguisher and a protocol's own that apply to ``party``; only those named in ``chosen``
    when it is not empty (a name that is not among them is a ConfigError naming ``audit.distinguishers``)."""
    every = (GENERIC, *own)
    names = [d.name for d in every]
    if len(set(names)) != len(names):
        raise ConfigError("run.protocol", f"the protocol's distinguishers repeat a name: {names}")
    usable = tuple(d for d in every if d.applies_to(party))
    for name in chosen:
        if name not in names:
            raise ConfigError("audit.distinguishers", f"unknown distinguisher {name!r}; this protocol has {', '.join(names)}")
        if name not in [d.name for d in usable]:
            roles = ", ".join(r.value for r in next(d for d in every if d.name == name).roles)
            raise ConfigError("audit.distinguishers", f"{name!r} applies to the roles {roles}, not to {party}")
    return tuple(d for d in usable if not chosen or d.name in chosen)


__all__ = ["GENERIC", "Distinguisher", "Score", "TrialView", "applicable", "first_feature", "logistic_fit", "view_numbers"]
