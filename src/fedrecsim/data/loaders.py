"""`load`: read a data set by the source name a scenario's ``[data]`` table gives; `load_with_test`:
the same with a given held-out set (``data.test_path``) in the same format, put on common indices.

Each source is a reader function and the options it accepts; options come from the ``[data]`` table,
so a wrong one is reported as a `ConfigError` under ``data.<option>``.

Against Polato's Table II (FedVAE, IJCNN 2021), whose data sets are lastFM, FilmTrust and citeulike-a
with the users of fewer than two entries removed (``data.min_user_interactions = 2``): the user counts
after that filter match the table (lastFM 1,884, FilmTrust 1,400, citeulike-a 5,551), but the item and
rating counts of the files these loaders read differ slightly from it -- lastFM 17,626 items against
16,519, FilmTrust 2,069 items against 1,939, citeulike-a 204,986 ratings against 210,495 (measured on
the files ``fedrecsim data fetch`` gets, in the review of issue 30). The paper does not say what else its
preparation dropped or which copy it read; the loaders read every entry of the file as it is, so results
on these sets are on slightly different data from the paper's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fedrecsim.data.formats import (
    lightgcn_test_file,
    load_citeulike,
    load_filmtrust,
    load_lastfm,
    load_lightgcn,
)
from fedrecsim.data.movielens import load_movielens_1m, load_movielens_100k
from fedrecsim.data.npz import load_npz
from fedrecsim.data.ratings import Ratings
from fedrecsim.data.registry import resolve_path
from fedrecsim.errors import ConfigError, DatasetError


class _Source(NamedTuple):
    reader: Callable[..., Ratings]
    options: frozenset[str]


_SOURCES: dict[str, _Source] = {
    "citeulike-a": _Source(load_citeulike, frozenset()),
    "filmtrust": _Source(load_filmtrust, frozenset()),
    "gowalla": _Source(load_lightgcn, frozenset()),
    "lastfm": _Source(load_lastfm, frozenset()),
    "lightgcn": _Source(load_lightgcn, frozenset()),
    "movielens-100k": _Source(load_movielens_100k, frozenset()),
    "movielens-1m": _Source(load_movielens_1m, frozenset()),
    "npz": _Source(load_npz, frozenset({"rating_range"})),
    "yelp2018": _Source(load_lightgcn, frozenset()),
}

_LIGHTGCN = frozenset({"gowalla", "lightgcn", "yelp2018"})

SOURCES: tuple[str, ...] = tuple(sorted(_SOURCES))
"""The source names `load` accepts."""


def load(source: str, path: str | Path, **options: Any) -> Ratings:
    """Read the data set at ``path`` with the reader registered as ``source``.

    Args:
        source: One of `SOURCES`: ``"movielens-100k"`` (``u.data`` or its folder), ``"movielens-1m"``
            (``ratings.dat`` or its folder), ``"npz"`` (a ``scipy.sparse.save_npz`` file; option
            ``rating_range``), ``"lastfm"`` (``user_artists.dat``), ``"filmtrust"`` (``ratings.txt``),
            ``"citeulike-a"`` (``users.dat``), ``"lightgcn"``, ``"gowalla"``, ``"yelp2018"`` (LightGCN's
            ``train.txt``), each the file or its folder (`fedrecsim.data.formats`).
        path: The file or folder to read; empty for a registered data set (`fedrecsim.data.registry`)
            means its copy fetched into the data home (``fedrecsim data fetch NAME``).
        **options: The source's options.

    Raises:
        ConfigError: unknown source (``data.source``), empty path (``data.path``: for a registered data
            set, one that was not fetched) or an option the source does not take (``data.<option>``).
        DatasetError: the data itself is missing or malformed.
    """
    try:
        chosen = _SOURCES[source]
    except (KeyError, TypeError):
        raise ConfigError("data.source", f"unknown source {source!r}; allowed: {', '.join(SOURCES)}") from None
    path = resolve_path(source, path)
    if not path:
        raise ConfigError("data.path", f"source {source!r} reads a file or folder; data.path is empty")
    unknown = sorted(set(options) - chosen.options)
    if unknown:
        allowed = ", ".join(sorted(chosen.options)) or "none"
        raise ConfigError(f"data.{unknown[0]}", f"not an option of source {source!r}; allowed: {allowed}")
    return chosen.reader(path, **options)


def load_with_test(
    source: str, path: str | Path, test_path: str | Path = "", **options: Any
) -> tuple[Ratings, Ratings | None]:
    """The data set at ``path`` and its given held-out set, on common user and item indices.

    The held-out set is the file ``test_path`` in the same format as ``path`` (read by the same reader);
    for a LightGCN source (``lightgcn``, ``gowalla``, ``yelp2018``) with an empty ``test_path`` and a
    folder, its ``test.txt``. Without one the second value is None: the caller splits. Both sets are
    put on the union of their ids (`Ratings.user_ids`; dense-index sources on ``max id + 1``), so user
    ``u`` and item ``i`` mean the same in both.

    Raises:
        ConfigError: as `load`.
        DatasetError: either file is missing or malformed, or the held-out set repeats a training pair.
    """
    data = load(source, path, **options)
    test_file: str | Path | None = str(test_path) or None
    if test_file is None and source in _LIGHTGCN:
        test_file = lightgcn_test_file(resolve_path(source, path))
    if test_file is None:
        return data, None
    test = load(source, test_file, **options)
    return _aligned(data, test, test_file)


def _aligned(data: Ratings, test: Ratings, test_file: str | Path) -> tuple[Ratings, Ratings]:
    """``data`` and ``test`` re-indexed onto the union of their user ids and of their item ids."""
    user_labels = np.union1d(_labels(data.user_ids, data.n_users), _labels(test.user_ids, test.n_users))
    item_labels = np.union1d(_labels(data.item_ids, data.n_items), _labels(test.item_ids, test.n_items))
    low = min(data.rating_range[0], test.rating_range[0])
    high = max(data.rating_range[1], test.rating_range[1])
    dense = data.user_ids is None and test.user_ids is None

    def moved(ratings: Ratings) -> Ratings:
        users = np.searchsorted(user_labels, _labels(ratings.user_ids, ratings.n_users)[ratings.users])
        items = np.searchsorted(item_labels, _labels(ratings.item_ids, ratings.n_items)[ratings.items])
        return Ratings(
            users,
            items,
            ratings.values,
            user_labels.size,
            item_labels.size,
            (low, high),
            None if dense else user_labels,
            None if dense else item_labels,
        )

    train, held_out = moved(data), moved(test)
    both = np.intersect1d(train.pair_keys(), held_out.pair_keys())
    if both.size:
        user, item = divmod(int(both[0]), item_labels.size)
        raise DatasetError(
            test_file, f"user {user_labels[user]} and item {item_labels[item]} are in the training data too"
        )
    return train, held_out


def _labels(ids: np.ndarray | None, size: int) -> np.ndarray:
    return np.arange(size, dtype=np.int64) if ids is None else ids


__all__ = ["SOURCES", "load", "load_with_test"]
