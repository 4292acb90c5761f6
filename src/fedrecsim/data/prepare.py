"""`prepare_data`: from a scenario's ``[data]`` table and the run's seed to a train/test split.

The steps, in order: generate (``source = "synthetic"``) or load the data; keep the entries of value at
least ``min_rating`` if set (MovieLens-1M as implicit data: ratings >= 4, Polato Sec. V-A); binarize it
if asked; drop users and items below the interaction thresholds; keep the ``subsample_items`` most popular items and
``subsample_users`` random users among those left (`subsample`); split. A given held-out set
(``test_path``, or a LightGCN folder's ``test.txt``: `load_with_test`) replaces the split; it is
binarized with the data, and the thresholds and subsampling, which would have to cut both sets alike,
are refused with it. ``rating_range`` declares the public scale of a loaded source that takes it (npz,
whose scale is otherwise the matrix's own extremes); synthetic data and the other sources set their own.
Generation, splitting and
subsampling draw from separate streams of the run's seed (`Stream.DATA` with ids 0, 1 and 2), so
changing the split never changes the data set it splits.
"""

from __future__ import annotations

from typing import Protocol

from fedrecsim.data.loaders import load_with_test
from fedrecsim.data.ratings import Ratings
from fedrecsim.data.poisson import synthetic_poisson
from fedrecsim.data.splits import (
    filter_min_interactions,
    heldout_users_split,
    leave_one_out,
    per_user_split,
    random_split,
    subsample,
    user_holdout_split,
)
from fedrecsim.data.synthetic import synthetic_explicit, synthetic_implicit
from fedrecsim.errors import ConfigError
from fedrecsim.seeding import Stream, generator

_GENERATE, _SPLIT, _SUBSAMPLE = 0, 1, 2


class DataSpec(Protocol):
    """The ``[data]`` keys `prepare_data` reads (the scenario's ``DataConfig`` has them all)."""

    source: str
    path: str
    test_path: str
    feedback: str
    factors: str
    users: int
    items: int
    ratings: int
    rank: int
    noise: float
    min_per_user: int | None
    split: str
    test_fraction: float
    test_entries: int
    test_share: float
    rating_range: tuple[float, ...] | None
    min_rating: float
    binarize: bool
    min_user_interactions: int
    min_item_interactions: int
    subsample_users: int
    subsample_items: int


def prepare_data(spec: DataSpec, seed: int) -> tuple[Ratings, Ratings]:
    """The ``(train, test)`` split the ``[data]`` table describes, reproducible from ``seed``.

    ``source = "synthetic"`` draws `synthetic_explicit`, `synthetic_implicit` or `synthetic_poisson` (by ``feedback``;
    counts with ``factors``) of ``users x items`` with ``ratings`` entries; any other source is read by `load` from
    ``path``.
    ``split`` is ``"random"`` (`random_split`), ``"per_user"`` (`per_user_split`),
    ``"leave_one_out"`` (`leave_one_out`, which ignores ``test_fraction``), ``"users"``
    (`user_holdout_split`: ``test_entries`` of each of a ``test_fraction`` share of the users) or
    ``"heldout_users"`` (`heldout_users_split`: a ``test_share`` of each of a ``test_fraction`` share
    of the users).

    Raises:
        ConfigError: a key is out of range or names an unknown choice.
        DatasetError: a data file is missing or malformed.
    """
    ratings, given_test = _ratings(spec, seed)
    if spec.min_rating:
        ratings = _at_least(ratings, spec.min_rating)
        given_test = _at_least(given_test, spec.min_rating) if given_test is not None else None
    if spec.binarize:
        ratings = ratings.binarize()
    if given_test is not None:
        return _with_given_test(spec, ratings, given_test)
    if spec.min_user_interactions or spec.min_item_interactions:
        ratings = filter_min_interactions(ratings, spec.min_user_interactions, spec.min_item_interactions)
    if spec.subsample_users or spec.subsample_items:
        ratings = subsample(
            ratings,
            spec.subsample_users or ratings.n_users,
            spec.subsample_items or ratings.n_items,
            generator(seed, Stream.DATA, _SUBSAMPLE),
        )
    if not len(ratings):
        raise ConfigError("data", "no entries are left to split (check the source and the interaction thresholds)")
    rng = generator(seed, Stream.DATA, _SPLIT)
    if spec.split == "random":
        return random_split(ratings, spec.test_fraction, rng)
    if spec.split == "per_user":
        return per_user_split(ratings, spec.test_fraction, rng)
    if spec.split == "leave_one_out":
        return leave_one_out(ratings, rng)
    if spec.split == "users":
        return user_holdout_split(ratings, spec.test_fraction, spec.test_entries, rng)
    if spec.split == "heldout_users":
        return heldout_users_split(ratings, spec.test_fraction, spec.test_share, rng)
    raise ConfigError(
        "data.split",
        f"got {spec.split!r}; allowed values: 'random', 'per_user', 'leave_one_out', 'users', 'heldout_users'",
    )


def _at_least(ratings: Ratings, min_rating: float) -> Ratings:
    """The entries of value >= ``min_rating``; users and items left without entries keep their indices."""
    return ratings.subset(ratings.values >= min_rating)


def _with_given_test(spec: DataSpec, train: Ratings, test: Ratings) -> tuple[Ratings, Ratings]:
    cutting = [
        key
        for key in ("min_user_interactions", "min_item_interactions", "subsample_users", "subsample_items")
        if getattr(spec, key)
    ]
    if cutting:
        raise ConfigError(
            f"data.{cutting[0]}", "cannot be combined with a given held-out set (data.test_path or a LightGCN test.txt)"
        )
    if spec.binarize:
        test = test.binarize()
    if not len(train) or not len(test):
        raise ConfigError("data", "the training data or the given held-out set has no entries")
    return train, test


def _ratings(spec: DataSpec, seed: int) -> tuple[Ratings, Ratings | None]:
    if spec.source != "synthetic":
        # Only a source that takes the option gets it; `load` names data.rating_range for any other.
        options = {} if spec.rating_range is None else {"rating_range": spec.rating_range}
        return load_with_test(spec.source, spec.path, spec.test_path, **options)
    if spec.rating_range is not None:
        raise ConfigError("data.rating_range", "synthetic data sets its own scale; only source 'npz' takes it")
    if spec.test_path:
        raise ConfigError("data.test_path", "synthetic data has no files; the split makes the held-out set")
    if spec.factors != "scaled" and spec.feedback != "counts":
        raise ConfigError("data.factors", f"{spec.factors!r} draws Poisson counts' factors; it needs data.feedback = 'counts'")
    rng = generator(seed, Stream.DATA, _GENERATE)
    if spec.feedback == "explicit":
        return synthetic_explicit(
            rng, spec.users, spec.items, spec.ratings, rank=spec.rank, noise=spec.noise, min_per_user=spec.min_per_user
        ), None
    if spec.feedback == "implicit":
        return synthetic_implicit(
            rng, spec.users, spec.items, spec.ratings, rank=spec.rank, min_per_user=spec.min_per_user
        ), None
    if spec.feedback == "counts":
        return synthetic_poisson(rng, spec.users, spec.items, spec.ratings, rank=spec.rank, factors=spec.factors), None
    raise ConfigError("data.feedback", f"got {spec.feedback!r}; allowed values: 'explicit', 'implicit', 'counts'")


__all__ = ["DataSpec", "prepare_data"]
