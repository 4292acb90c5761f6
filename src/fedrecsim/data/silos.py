"""Silo partitions: which data silo holds each user, for the cross-silo protocols.

The ``[data]`` keys ``silo_partition``, ``silos`` and ``silo_alpha`` choose one of:

* ``"uniform"`` -- a uniformly random partition into ``silos`` parts of (nearly) equal size, as in
  Ribero et al.'s synthetic experiments ("distribute the data uniformly across 10 entities");
* ``"dirichlet"`` -- silo shares ``q ~ Dirichlet(silo_alpha, ..., silo_alpha)``, then each user goes to
  silo ``h`` with probability ``q_h``: sizes skewed more the smaller ``silo_alpha``;
* ``"zip"`` -- by the first character of the user's zip code, read from MovieLens ``u.user``
  (ml-100k) or ``users.dat`` (ml-1m) beside the ratings (Ribero et al.'s MovieLens federation): a digit
  ``d`` is silo ``d``, and every zip code that does not start with a digit goes to silo 10. ``silos``
  is ignored.

Users are identified in the zip file by their original id (`Ratings.user_ids`). A silo no user fell
into is simply absent: the labels returned are the silos that exist. Random partitions draw from
``Stream.DATA`` with id `SILO_STREAM_ID`, apart from generation, split and subsampling (ids 0-2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from fedrecsim.data.ratings import IntArray, Ratings
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.seeding import Stream, generator

SILO_STREAM_ID = 3

#: The silo of every zip code that does not start with a digit.
NON_NUMERIC_ZIP_SILO = 10

# The user files of the MovieLens releases the loaders read: (source, file name, separator, zip field).
_USER_FILES = {"movielens-100k": ("u.user", "|", 4), "movielens-1m": ("users.dat", "::", 4)}


class SiloSpec(Protocol):
    """The ``[data]`` keys a silo partition reads."""

    source: str
    path: str
    silo_partition: str
    silos: int
    silo_alpha: float


def silo_assignment(spec: SiloSpec, ratings: Ratings, seed: int) -> IntArray:
    """``int64[n_users]``: the silo label of every user of ``ratings`` (module docstring).

    Raises:
        ConfigError: ``silo_partition = "zip"`` on a source without zip codes (``data.silo_partition``),
            or an unknown partition.
        DatasetError: the user file is missing, malformed or lacks a user of the ratings.
    """
    rng = generator(seed, Stream.DATA, SILO_STREAM_ID)
    if spec.silo_partition == "uniform":
        return uniform_partition(rng, ratings.n_users, spec.silos)
    if spec.silo_partition == "dirichlet":
        return dirichlet_partition(rng, ratings.n_users, spec.silos, spec.silo_alpha)
    if spec.silo_partition == "zip":
        if spec.source not in _USER_FILES:
            raise ConfigError(
                "data.silo_partition",
                f"'zip' partitions users by zip code, and source {spec.source!r} has no zip codes "
                f"(only {', '.join(sorted(_USER_FILES))} do); use 'uniform' or 'dirichlet'",
            )
        return zip_partition(spec.source, Path(spec.path), ratings)
    raise ConfigError("data.silo_partition", f"got {spec.silo_partition!r}; allowed: 'uniform', 'dirichlet', 'zip'")


def uniform_partition(rng: np.random.Generator, n_users: int, silos: int) -> IntArray:
    """A random partition into ``silos`` parts whose sizes differ by at most one."""
    labels = np.empty(n_users, dtype=np.int64)
    labels[rng.permutation(n_users)] = np.arange(n_users) % silos
    return labels


def dirichlet_partition(rng: np.random.Generator, n_users: int, silos: int, alpha: float) -> IntArray:
    """Each user to silo ``h`` with probability ``q_h``, ``q ~ Dirichlet(alpha 1_silos)``."""
    shares = rng.dirichlet(np.full(silos, float(alpha)))
    return rng.choice(silos, size=n_users, p=shares).astype(np.int64)


def zip_partition(source: str, path: Path, ratings: Ratings) -> IntArray:
    """The silo of each user by the first character of its zip code (module docstring)."""
    file_name, separator, field = _USER_FILES[source]
    folder = path if path.is_dir() else path.parent
    user_file = folder / file_name
    try:
        text = user_file.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise DatasetError(user_file, f"cannot read the user file a zip partition needs: {error.strerror or error}") from error
    zips: dict[int, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(separator)
        if len(fields) <= field:
            raise DatasetError(user_file, f"expected at least {field + 1} {separator!r}-separated fields", number)
        try:
            zips[int(fields[0])] = fields[field].strip()
        except ValueError:
            raise DatasetError(user_file, f"user id {fields[0]!r} is not an integer", number) from None
    ids = np.arange(1, ratings.n_users + 1) if ratings.user_ids is None else ratings.user_ids
    labels = np.empty(ratings.n_users, dtype=np.int64)
    for user, user_id in enumerate(ids):
        code = zips.get(int(user_id))
        if code is None:
            raise DatasetError(user_file, f"user {int(user_id)} of the ratings has no line here")
        labels[user] = int(code[0]) if code[:1] and code[0] in "0123456789" else NON_NUMERIC_ZIP_SILO
    return labels


__all__ = [
    "NON_NUMERIC_ZIP_SILO",
    "SILO_STREAM_ID",
    "SiloSpec",
    "dirichlet_partition",
    "silo_assignment",
    "uniform_partition",
    "zip_partition",
]
