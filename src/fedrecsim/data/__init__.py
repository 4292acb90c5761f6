"""Data for fedrecsim: the `Ratings` container, synthetic generators, file loaders, splits, metrics.

Everything here is pure numpy, draws randomness only from the generator it is given, and reports bad
parameters as `ConfigError` (naming the ``data.*`` key) and bad data as `DatasetError` (naming the
file and line).
"""

from fedrecsim.data.loaders import SOURCES, load
from fedrecsim.data.metrics import error_summary, hit_rate_at_k, mae, ndcg_at_k, recall_at_k, rmse
from fedrecsim.data.movielens import MOVIELENS_RATING_RANGE, load_movielens_1m, load_movielens_100k
from fedrecsim.data.npz import load_npz
from fedrecsim.data.prepare import DataSpec, prepare_data
from fedrecsim.data.ratings import Ratings, UserIndex
from fedrecsim.data.splits import (
    filter_min_interactions,
    leave_one_out,
    per_user_split,
    random_split,
    subsample,
)
from fedrecsim.data.synthetic import (
    NETFLIX_DENSITY,
    SyntheticShape,
    movielens_100k_shape,
    netflix_shape,
    synthetic_explicit,
    synthetic_implicit,
)

__all__ = [
    "MOVIELENS_RATING_RANGE",
    "NETFLIX_DENSITY",
    "SOURCES",
    "DataSpec",
    "Ratings",
    "SyntheticShape",
    "UserIndex",
    "error_summary",
    "filter_min_interactions",
    "hit_rate_at_k",
    "leave_one_out",
    "load",
    "load_movielens_100k",
    "load_movielens_1m",
    "load_npz",
    "mae",
    "movielens_100k_shape",
    "ndcg_at_k",
    "netflix_shape",
    "per_user_split",
    "prepare_data",
    "random_split",
    "recall_at_k",
    "rmse",
    "subsample",
    "synthetic_explicit",
    "synthetic_implicit",
]
