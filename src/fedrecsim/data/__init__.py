"""Data for fedrecsim: the `Ratings` container, synthetic generators, file loaders, splits, metrics, and
the registry of public data sets with `fetch`, which downloads one into the local data home.

Everything here is pure numpy, draws randomness only from the generator it is given, and reports bad
parameters as `ConfigError` (naming the ``data.*`` key) and bad data as `DatasetError` (naming the
file and line).
"""

from fedrecsim.data.fetch import FETCH_RECORD, DownloadProgress, Fetched, ProgressCallback, fetch, licence_text
from fedrecsim.data.formats import (
    FILMTRUST_RATING_RANGE,
    IMPLICIT_RANGE,
    LASTFM_HEADER,
    lightgcn_test_file,
    load_citeulike,
    load_filmtrust,
    load_lastfm,
    load_lightgcn,
)
from fedrecsim.data.loaders import SOURCES, load, load_with_test
from fedrecsim.data.metrics import (
    error_summary,
    hit_rate_at_k,
    item_mean_predictor_errors,
    mae,
    mean_predictor_errors,
    ndcg_at_k,
    random_ranking_expectation,
    rating_errors,
    recall_at_k,
    rmse,
)
from fedrecsim.data.movielens import MOVIELENS_RATING_RANGE, load_movielens_1m, load_movielens_100k
from fedrecsim.data.npz import load_npz
from fedrecsim.data.poisson import COUNT_CAP, FACTORS, poisson_factors, synthetic_poisson
from fedrecsim.data.prepare import DataSpec, prepare_data
from fedrecsim.data.ranking import chance_ranking_metrics, ranking_metrics
from fedrecsim.data.ratings import Ratings, UserIndex
from fedrecsim.data.registry import (
    DATA_HOME_ENV,
    DATASETS,
    Dataset,
    data_home,
    dataset,
    dataset_text,
    fetch_command,
    fetched_path,
    install_folder,
    registry_text,
    resolve_path,
)
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
    heldout_users_split,
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
    "DATASETS",
    "DATA_HOME_ENV",
    "DataSpec",
    "Dataset",
    "DownloadProgress",
    "FACTORS",
    "FETCH_RECORD",
    "FILMTRUST_RATING_RANGE",
    "Fetched",
    "IMPLICIT_RANGE",
    "LASTFM_HEADER",
    "MOVIELENS_RATING_RANGE",
    "NETFLIX_DENSITY",
    "NON_NUMERIC_ZIP_SILO",
    "ProgressCallback",
    "Ratings",
    "SILO_STREAM_ID",
    "SOURCES",
    "SiloSpec",
    "SyntheticShape",
    "UserIndex",
    "chance_ranking_metrics",
    "data_home",
    "dataset",
    "dataset_text",
    "dirichlet_partition",
    "error_summary",
    "fetch",
    "fetch_command",
    "fetched_path",
    "filter_min_interactions",
    "heldout_users_split",
    "hit_rate_at_k",
    "item_mean_predictor_errors",
    "install_folder",
    "leave_one_out",
    "licence_text",
    "lightgcn_test_file",
    "load",
    "load_citeulike",
    "load_filmtrust",
    "load_lastfm",
    "load_lightgcn",
    "load_movielens_100k",
    "load_movielens_1m",
    "load_npz",
    "load_with_test",
    "mae",
    "mean_predictor_errors",
    "movielens_100k_shape",
    "ndcg_at_k",
    "netflix_shape",
    "per_user_split",
    "poisson_factors",
    "prepare_data",
    "random_ranking_expectation",
    "random_split",
    "ranking_metrics",
    "rating_errors",
    "recall_at_k",
    "registry_text",
    "resolve_path",
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
