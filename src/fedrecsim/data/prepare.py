"""`prepare_data`: from a scenario's ``[data]`` table and the run's seed to a train/test split.

The steps, in order: generate (``source = "synthetic"``) or load the data; binarize it if asked; drop
users and items below the interaction thresholds; keep the ``subsample_items`` most popular items and
``subsample_users`` random users among those left (`subsample`); split. Generation, splitting and
subsampling draw from separate streams of the run's seed (`Stream.DATA` with ids 0, 1 and 2), so
changing the split never changes the data set it splits.
"""

from __future__ import annotations

from typing import Protocol

from fedrecsim.data.loaders import load
from fedrecsim.data.ratings import Ratings
from fedrecsim.data.poisson import synthetic_poisson
from fedrecsim.data.splits import (
    filter_min_interactions,
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
    feedback: str
    users: int
    items: int
    ratings: int
    rank: int
    noise: float
    min_per_user: int | None
    split: str
    test_fraction: float
    test_entries: int
    binarize: bool
    min_user_interactions: int
    min_item_interactions: int
    subsample_users: int
    subsample_items: int


def prepare_data(spec: DataSpec, seed: int) -> tuple[Ratings, Ratings]:
    """The ``(train, test)`` split the ``[data]`` table describes, reproducible from ``seed``.

    ``source = "synthetic"`` draws `synthetic_explicit`, `synthetic_implicit` or `synthetic_poisson` (by ``feedback``) of
    ``users x items`` with ``ratings`` entries; any other source is read by `load` from ``path``.
    ``split`` is ``"random"`` (`random_split`), ``"per_user"`` (`per_user_split`),
    ``"leave_one_out"`` (`leave_one_out`, which ignores ``test_fraction``) or ``"users"``
    (`user_holdout_split`: ``test_entries`` of each of a ``test_fraction`` share of the users).

    Raises:
        ConfigError: a key is out of range or names an unknown choice.
        DatasetError: a data file is missing or malformed.
    """
    ratings = _ratings(spec, seed)
    if spec.binarize:
        ratings = ratings.binarize()
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
    raise ConfigError(
        "data.split", f"got {spec.split!r}; allowed values: 'random', 'per_user', 'leave_one_out', 'users'"
    )


def _ratings(spec: DataSpec, seed: int) -> Ratings:
    if spec.source != "synthetic":
        return load(spec.source, spec.path)
    rng = generator(seed, Stream.DATA, _GENERATE)
    if spec.feedback == "explicit":
        return synthetic_explicit(
            rng, spec.users, spec.items, spec.ratings, rank=spec.rank, noise=spec.noise, min_per_user=spec.min_per_user
        )
    if spec.feedback == "implicit":
        return synthetic_implicit(rng, spec.users, spec.items, spec.ratings, rank=spec.rank, min_per_user=spec.min_per_user)
    if spec.feedback == "counts":
        return synthetic_poisson(rng, spec.users, spec.items, spec.ratings, rank=spec.rank)
    raise ConfigError("data.feedback", f"got {spec.feedback!r}; allowed values: 'explicit', 'implicit', 'counts'")


__all__ = ["DataSpec", "prepare_data"]
