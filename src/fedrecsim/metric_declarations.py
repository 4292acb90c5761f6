"""Metric declarations: `MetricInfo` (a metric's meaning, unit, support and direction), the shared
declarations (`COMMON`), and the judgement of a model against its trivial predictor.

Protocols import from here to declare their metrics; `fedrecsim.metric_reference` builds the reference
(``fedrecsim metrics``, docs/metrics-reference.md) and `value_range` on top. A declared name may hold the
cut-off placeholder ``@K`` (``map@K`` declares ``map@10``, ``map@20``, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Better = Literal["lower", "higher", ""]

#: The placeholder of a cut-off in a declared name: ``map@K`` declares ``map@10``, ``map@20``, ...
CUTOFF = "@K"


@dataclass(frozen=True)
class MetricInfo:
    """One metric: its meaning, its unit ("" for a plain number) and its support ``[low, high]``.

    ``low`` and ``high`` are ``-inf`` / ``inf`` where the metric is unbounded on that side. ``better`` says
    which way is an improvement ("lower" for an error, "higher" for a hit rate, "" where neither is, as
    for a count of messages); it decides whether a model is worse than its trivial predictor.
    """

    name: str
    meaning: str
    unit: str = ""
    low: float = -math.inf
    high: float = math.inf
    better: Better = ""

    def matches(self, name: str) -> bool:
        """Whether ``name`` is this metric (``map@10`` is ``map@K``'s)."""
        if CUTOFF not in self.name:
            return name == self.name
        pattern = "".join(
            "@[1-9][0-9]*" if part == CUTOFF else re.escape(part) for part in re.split(f"({re.escape(CUTOFF)})", self.name)
        )
        return re.fullmatch(pattern, name) is not None

    @property
    def support(self) -> str:
        """The support as people write it: ``[0, 1]``, ``>= 0``, or ``any``."""
        low, high = self.low, self.high
        if math.isinf(low) and math.isinf(high):
            return "any"
        if math.isinf(high):
            return f">= {_bound(low)}"
        if math.isinf(low):
            return f"<= {_bound(high)}"
        return f"[{_bound(low)}, {_bound(high)}]"


def _bound(value: float) -> str:
    return f"{value:g}"


def fraction(name: str, meaning: str, better: Better = "") -> MetricInfo:
    """A share in [0, 1]."""
    return MetricInfo(name, meaning, "fraction", 0.0, 1.0, better)


def count(name: str, meaning: str, unit: str = "count") -> MetricInfo:
    """A number of things (users, messages, items, rounds), never negative."""
    return MetricInfo(name, meaning, unit, 0.0)


def byte_count(name: str, meaning: str) -> MetricInfo:
    """A number of bytes on the wire, never negative."""
    return MetricInfo(name, meaning, "bytes", 0.0)


def flag(name: str, meaning: str) -> MetricInfo:
    """0 or 1."""
    return MetricInfo(name, meaning, "0 or 1", 0.0, 1.0)


def error(name: str, meaning: str, unit: str = "rating") -> MetricInfo:
    """A non-negative error, lower is better."""
    return MetricInfo(name, meaning, unit, 0.0, better="lower")


RANKING_MEANINGS = {
    "hr": "hit ratio at {k}: share of test entries whose held-out item is ranked in the top {k} of its candidates",
    "ndcg": "normalized discounted cumulative gain of the top {k}, averaged over test users",
    "recall": "recall at {k}: share of a test user's held-out items in the top {k}, averaged over test users",
    "precision": "precision at {k}: share of the top {k} that are held-out items, averaged over test users",
    "map": "mean average precision of the top {k}, averaged over test users with a relevant item",
}
RANKING_PATTERN = re.compile(r"^(hr|ndcg|recall|precision|map)@([1-9][0-9]*)$")

_RATING_ERRORS = (
    error("train_rmse", "root mean squared error of the predictions on the training ratings"),
    error("train_mae", "mean absolute error of the predictions on the training ratings"),
    error("test_rmse", "root mean squared error of the predictions on the test ratings"),
    error("test_mae", "mean absolute error of the predictions on the test ratings"),
    error(
        "train_rmse_clipped",
        "train_rmse of the predictions clipped to the data's rating scale (post-processing: no privacy cost)",
    ),
    error(
        "train_mae_clipped",
        "train_mae of the predictions clipped to the data's rating scale (post-processing: no privacy cost)",
    ),
    error(
        "test_rmse_clipped",
        "test_rmse of the predictions clipped to the data's rating scale (post-processing: no privacy cost)",
    ),
    error(
        "test_mae_clipped",
        "test_mae of the predictions clipped to the data's rating scale (post-processing: no privacy cost)",
    ),
    error(
        "train_rmse_mean_predictor",
        "train_rmse of the trivial predictor that predicts the training ratings' mean for every pair "
        "(the training ratings' standard deviation)",
    ),
    error("train_mae_mean_predictor", "train_mae of the trivial predictor of the training ratings' mean"),
    error("test_rmse_mean_predictor", "test_rmse of the trivial predictor of the training ratings' mean"),
    error("test_mae_mean_predictor", "test_mae of the trivial predictor of the training ratings' mean"),
    fraction(
        "ndcg@K_random",
        "ndcg@K of a uniformly random ranking of each test user's candidates, its exact expectation",
    ),
    fraction(
        "recall@K_random",
        "recall@K of a uniformly random ranking of each test user's candidates, its exact expectation",
    ),
    fraction(
        "hr@K_random",
        "hr@K of a random ranking, its exact expectation over the same candidates: K / (sampled negatives + 1)",
    ),
)

#: The metrics with one meaning in every protocol that reports them; protocols pick them with `common`.
COMMON: dict[str, MetricInfo] = {info.name: info for info in _RATING_ERRORS}


def common(*names: str) -> tuple[MetricInfo, ...]:
    """The `COMMON` declarations of ``names``, for a protocol's ``metrics``; a ranking name (``hr@K``,
    ``ndcg@10``) is declared from its family's meaning.

    Raises:
        KeyError: a name that is neither common nor a ranking metric.
    """
    declared = []
    for name in names:
        if name in COMMON:
            declared.append(COMMON[name])
            continue
        family, _, k = name.partition("@")
        if family not in RANKING_MEANINGS or not k:
            raise KeyError(f"{name!r} is not a common metric; declare it in the protocol")
        shown = "K" if k == "K" else k
        declared.append(fraction(name, RANKING_MEANINGS[family].format(k=shown), "higher"))
    return tuple(declared)


def declared(metrics: Iterable[MetricInfo], name: str) -> MetricInfo | None:
    """The declaration of ``name`` among ``metrics`` (a protocol's), or None."""
    return next((info for info in metrics if info.matches(name)), None)


def undeclared(metrics: Sequence[MetricInfo], names: Iterable[str]) -> list[str]:
    """The names (sorted, once each) that ``metrics`` does not declare."""
    return sorted({name for name in names if declared(metrics, name) is None})


def worse_than_trivial(
    metrics: Sequence[MetricInfo], final: Mapping[str, Any], trivial: Mapping[str, str], reason: str
) -> list[dict[str, Any]]:
    """The final metrics on which the model does worse than its trivial predictor.

    Args:
        metrics: the protocol's declarations (each metric's ``better`` direction).
        final: the run's final metrics.
        trivial: each final metric's trivial reference, a final metric too (``test_rmse`` ->
            ``test_rmse_mean_predictor``, ``hr@10`` -> ``hr@10_random``).
        reason: the protocol's explanation (e.g. its noise scale against the data's spread).

    Returns:
        ``[{"metric", "value", "trivial", "trivial_value", "reason"}, ...]`` in ``trivial``'s order: a pair
        is listed when both values are finite numbers and the model's is worse in the metric's direction.
    """
    worse = []
    for name, reference in trivial.items():
        value, trivial_value = final.get(name), final.get(reference)
        info = declared(metrics, name)
        if info is None or not info.better or not _finite(value) or not _finite(trivial_value):
            continue
        if (value > trivial_value) if info.better == "lower" else (value < trivial_value):
            worse.append({"metric": name, "value": value, "trivial": reference, "trivial_value": trivial_value, "reason": reason})
    return worse


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


__all__ = [
    "COMMON", "CUTOFF", "RANKING_MEANINGS", "RANKING_PATTERN", "MetricInfo", "byte_count", "common", "count", "declared", "error", "flag", "fraction",
    "undeclared", "worse_than_trivial",
]
