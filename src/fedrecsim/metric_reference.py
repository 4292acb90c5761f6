"""What each metric name means: its unit and the range of values it can take.

A metric's range is its support -- ``hr@10`` lies in [0, 1], a byte count or an error is never negative --
and whatever summarizes runs (the sweep's confidence intervals, a report's bands) keeps inside it.
Metric names follow the conventions of docs/architecture.md: lower-case snake case, ``name@k`` for
ranking metrics, the same name for the same quantity in every protocol.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricInfo:
    """One metric: its meaning, its unit ("" for a plain number) and its support ``[low, high]``.

    ``low`` and ``high`` are ``-inf`` / ``inf`` where the metric is unbounded on that side.
    """

    name: str
    meaning: str
    unit: str = ""
    low: float = -math.inf
    high: float = math.inf


# Ranking metrics at a cut-off k: the fraction of a user's relevant items (or hits) ranked in the top k,
# averaged over users, is in [0, 1] for every k.
_RANKING = re.compile(r"^(hr|ndcg|recall|precision|map)@([1-9][0-9]*)$")
_RANKING_MEANINGS = {
    "hr": "hit ratio at {k}: share of test users whose held-out item is ranked in the top {k}",
    "ndcg": "normalized discounted cumulative gain of the top {k}, averaged over test users",
    "recall": "recall at {k}: share of a test user's held-out items in the top {k}, averaged over test users",
    "precision": "precision at {k}: share of the top {k} that are held-out items, averaged over test users",
    "map": "mean average precision of the top {k}, averaged over test users",
}

_NON_NEGATIVE = 0.0

_COMMON: dict[str, MetricInfo] = {
    info.name: info
    for info in (
        MetricInfo("train_rmse", "root mean squared error of the predictions on the training ratings", "rating", _NON_NEGATIVE),
        MetricInfo("train_mae", "mean absolute error of the predictions on the training ratings", "rating", _NON_NEGATIVE),
        MetricInfo("test_rmse", "root mean squared error of the predictions on the test ratings", "rating", _NON_NEGATIVE),
        MetricInfo("test_mae", "mean absolute error of the predictions on the test ratings", "rating", _NON_NEGATIVE),
        MetricInfo("rmse", "root mean squared error of the predictions", "rating", _NON_NEGATIVE),
        MetricInfo("mean_rank", "mean rank of a held-out item among the candidates (1 = first)", "rank", 1.0),
    )
}


def describe(name: str) -> MetricInfo | None:
    """The `MetricInfo` of a metric name, or None when fedrecsim does not know the name."""
    if name in _COMMON:
        return _COMMON[name]
    ranking = _RANKING.match(name)
    if ranking is not None:
        family, k = ranking.groups()
        return MetricInfo(name, _RANKING_MEANINGS[family].format(k=k), "", 0.0, 1.0)
    return None


def value_range(name: str) -> tuple[float, float]:
    """The support ``(low, high)`` of a metric name; ``(-inf, inf)`` for a name fedrecsim does not know."""
    info = describe(name)
    if info is None:
        return -math.inf, math.inf
    return info.low, info.high
