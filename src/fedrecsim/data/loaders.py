"""`load`: read a data set by the source name a scenario's ``[data]`` table gives.

Each source is a reader function and the options it accepts; options come from the ``[data]`` table,
so a wrong one is reported as a `ConfigError` under ``data.<option>``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from fedrecsim.data.movielens import load_movielens_1m, load_movielens_100k
from fedrecsim.data.npz import load_npz
from fedrecsim.data.ratings import Ratings
from fedrecsim.data.registry import resolve_path
from fedrecsim.errors import ConfigError


class _Source(NamedTuple):
    reader: Callable[..., Ratings]
    options: frozenset[str]


_SOURCES: dict[str, _Source] = {
    "movielens-100k": _Source(load_movielens_100k, frozenset()),
    "movielens-1m": _Source(load_movielens_1m, frozenset()),
    "npz": _Source(load_npz, frozenset({"rating_range"})),
}

SOURCES: tuple[str, ...] = tuple(sorted(_SOURCES))
"""The source names `load` accepts."""


def load(source: str, path: str | Path, **options: Any) -> Ratings:
    """Read the data set at ``path`` with the reader registered as ``source``.

    Args:
        source: One of `SOURCES`: ``"movielens-100k"`` (``u.data`` or its folder), ``"movielens-1m"``
            (``ratings.dat`` or its folder), ``"npz"`` (a ``scipy.sparse.save_npz`` file; option
            ``rating_range``).
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


__all__ = ["SOURCES", "load"]
