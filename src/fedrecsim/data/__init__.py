"""Data for fedrecsim: the `Ratings` container, synthetic generators, file loaders, splits, metrics.

Everything here is pure numpy, draws randomness only from the generator it is given, and reports bad
parameters as `ConfigError` (naming the ``data.*`` key) and bad data as `DatasetError` (naming the
file and line).
"""

from fedrecsim.data.loaders import SOURCES, load
from fedrecsim.data.metrics import error_summary, hit_rate_at_k, mae, ndcg_at_k, recall_at_k, rmse
from fedrecsim.data.movielens import MOVIELENS_RATING_RANGE, load_movielens_1m, load_movielens_100k
from fedrecsim.data.npz import load_npz
from fedrecsim.data.poisson import COUNT_CAP, synthetic_poisson
from fedrecsim.data.prepare import DataSpec, prepare_data
from fedrecsim.data.ranking import ranking_metrics
from fedrecsim.data.ratings import Ratings, UserIndex
from fedrecsim.data.silos import (
    NON_NUMERIC_ZIP_SILO,
    SILO_STREAM_ID,
    SiloSpec,
    dirichlet_partition,
    silo_assignment,
    uniform_partition,
    zip_partition,
)
from fedrecsim.data.splits import (
    filter_min_interactions,
    leave_one_out,
    per_user_split,
    random_split,
    subsample,
    user_holdout_split,
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
    "COUNT_CAP",
    "DataSpec",
    "MOVIELENS_RATING_RANGE",
    "NETFLIX_DENSITY",
    "NON_NUMERIC_ZIP_SILO",
    "Ratings",
    "SILO_STREAM_ID",
    "SOURCES",
    "SiloSpec",
    "SyntheticShape",
    "UserIndex",
    "dirichlet_partition",
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
    "ranking_metrics",
    "recall_at_k",
    "rmse",
    "silo_assignment",
    "subsample",
    "synthetic_explicit",
    "synthetic_implicit",
    "synthetic_poisson",
    "uniform_partition",
    "user_holdout_split",
    "zip_partition",
]
