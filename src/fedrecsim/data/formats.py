"""Readers for the public implicit- and explicit-feedback files beside MovieLens.

- Last.fm hetrec-2011 ``user_artists.dat``: a header line ``userID<TAB>artistID<TAB>weight``, then one
  ``user artist weight`` line per pair, tab-separated; the weight is a play count (a positive integer),
  kept as the value (``rating_range`` is ``(0, largest count)``): ``data.binarize`` makes it implicit.
- FilmTrust ``ratings.txt``: ``user item rating`` separated by white space, ratings 0.5 to 4.0 in steps
  of 0.5. The published file rates a few pairs twice; the later line wins, as a rating changed later.
- citeulike-a ``users.dat``: line ``u`` (counting from 0) lists user ``u``'s articles as ``count item
  item ...`` with 0-based item ids; every entry is an implicit 1.
- LightGCN's ``train.txt`` / ``test.txt`` (Gowalla, Yelp2018, ...): one line per user, the 0-based user
  id then its 0-based item ids, space-separated; every entry is an implicit 1. A LightGCN folder holds
  both: `load_lightgcn` reads ``train.txt``, `lightgcn_test_file` finds ``test.txt``.

Last.fm and FilmTrust ids are positive integers, remapped to dense 0-based indices in ascending order
of the original id (kept in `Ratings.user_ids` / `Ratings.item_ids`), as the MovieLens readers do.
citeulike-a and LightGCN ids are already dense indices and are kept as they are: ``n_users`` and
``n_items`` are one more than the largest id (citeulike-a: the number of lines), so an id without
entries is a user or item without entries.

A file either loads completely or raises `DatasetError` naming the file and an offending line: a wrong
number of fields, an id or count that is not an integer in range, a value off the scale, a pair given
twice (FilmTrust excepted), a LightGCN user listed twice. Blank lines are skipped, except in citeulike-a,
whose line number is the user id.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrecsim.data.movielens import _read_text, _resolve
from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import DatasetError

LASTFM_HEADER = ("userID", "artistID", "weight")
"""The first line of ``user_artists.dat``, tab-separated."""

FILMTRUST_RATING_RANGE = (0.5, 4.0)
"""FilmTrust's scale; ratings are its multiples of 0.5."""

IMPLICIT_RANGE = (0.0, 1.0)
"""The scale of implicit feedback (every entry is 1), as `Ratings.binarize` makes it."""


def load_lastfm(path: str | Path) -> Ratings:
    """Read Last.fm hetrec-2011's ``user_artists.dat``; ``path`` is the file or the folder holding it."""
    path = _resolve(Path(path), "user_artists.dat")
    lines = _numbered(path)
    header_line, header = lines[0] if lines else (1, "")
    if tuple(field.strip() for field in header.split("\t")) != LASTFM_HEADER:
        raise DatasetError(path, f"expected the header {chr(9).join(LASTFM_HEADER)!r}, got {header!r}", header_line)
    rows = []
    for number, line in lines[1:]:
        fields = _fields(path, number, line.split("\t"), 3, "tab-separated fields (userID artistID weight)")
        user, artist, weight = (_integer(path, number, text, what, 1) for text, what in zip(fields, LASTFM_HEADER))
        rows.append((number, user, artist, float(weight)))
    if not rows:
        raise DatasetError(path, "no user-artist pairs in the file")
    return _relabelled(path, rows, (0.0, max(row[3] for row in rows)), keep_last=False)


def load_filmtrust(path: str | Path) -> Ratings:
    """Read FilmTrust's ``ratings.txt``; ``path`` is the file or the folder holding it."""
    path = _resolve(Path(path), "ratings.txt")
    low, high = FILMTRUST_RATING_RANGE
    rows = []
    for number, line in _numbered(path):
        user_text, item_text, rating_text = _fields(path, number, line.split(), 3, "fields (user item rating)")
        user = _integer(path, number, user_text, "user id", 1)
        item = _integer(path, number, item_text, "item id", 1)
        try:
            rating = float(rating_text)
        except ValueError:
            raise DatasetError(path, f"rating {rating_text!r} is not a number", number) from None
        if not (low <= rating <= high and (2 * rating).is_integer()):
            raise DatasetError(path, f"rating {rating_text} is not a multiple of 0.5 in [{low:g}, {high:g}]", number)
        rows.append((number, user, item, rating))
    if not rows:
        raise DatasetError(path, "no ratings in the file")
    return _relabelled(path, rows, FILMTRUST_RATING_RANGE, keep_last=True)


def load_citeulike(path: str | Path) -> Ratings:
    """Read citeulike-a's ``users.dat``; ``path`` is the file or the folder holding it."""
    path = _resolve(Path(path), "users.dat")
    lists = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        fields = line.split()
        if not fields:
            raise DatasetError(path, "a blank line: line u must list user u's items as 'count item item ...'", number)
        count = _integer(path, number, fields[0], "item count", 0)
        if count != len(fields) - 1:
            raise DatasetError(path, f"the line says {count} items but lists {len(fields) - 1}", number)
        lists.append((number, number - 1, fields[1:]))
    if not lists:
        raise DatasetError(path, "no users in the file")
    return _from_lists(path, lists, len(lists))


def load_lightgcn(path: str | Path) -> Ratings:
    """Read a LightGCN ``train.txt`` (or ``test.txt``); ``path`` is the file or the folder holding ``train.txt``."""
    path = _resolve(Path(path), "train.txt")
    lists = []
    for number, line in _numbered(path):
        fields = line.split()
        lists.append((number, _integer(path, number, fields[0], "user id", 0), fields[1:]))
    if not lists:
        raise DatasetError(path, "no users in the file")
    return _from_lists(path, lists, None)


def lightgcn_test_file(path: str | Path) -> Path | None:
    """The held-out ``test.txt`` beside a LightGCN folder's ``train.txt``: for a folder ``path`` holding
    one, that file; else None (a file ``path`` names the training data alone)."""
    path = Path(path)
    test = path / "test.txt"
    return test if path.is_dir() and test.is_file() else None


def _numbered(path: Path) -> list[tuple[int, str]]:
    """The file's non-blank lines with their 1-based numbers."""
    return [(number, line) for number, line in enumerate(_read_text(path).splitlines(), 1) if line.strip()]


def _fields(path: Path, number: int, fields: list[str], expected: int, what: str) -> list[str]:
    if len(fields) != expected:
        raise DatasetError(path, f"expected {expected} {what}, got {len(fields)}", number)
    return fields


def _integer(path: Path, number: int, text: str, what: str, minimum: int) -> int:
    """``text`` as an integer of at least ``minimum`` (and below 2**62, so pair keys cannot overflow)."""
    try:
        value = int(text)
    except ValueError:
        raise DatasetError(path, f"{what} {text.strip()!r} is not an integer", number) from None
    if not minimum <= value < 2**62:
        kind = "a positive" if minimum else "a non-negative"
        raise DatasetError(path, f"{what} {value} is not {kind} integer", number)
    return value


def _relabelled(
    path: Path, rows: list[tuple[int, int, int, float]], rating_range: tuple[float, float], keep_last: bool
) -> Ratings:
    """`Ratings` from ``(line, user id, item id, value)`` rows, ids remapped in ascending order."""
    seen: dict[tuple[int, int], int] = {}
    values: dict[tuple[int, int], float] = {}
    for number, user, item, value in rows:
        pair = (user, item)
        if pair in seen and not keep_last:
            raise DatasetError(path, f"user {user} and item {item} again (first at line {seen[pair]})", number)
        seen.setdefault(pair, number)
        values[pair] = value
    pairs = np.array(list(values), dtype=np.int64).reshape(-1, 2)
    user_labels, users = np.unique(pairs[:, 0], return_inverse=True)
    item_labels, items = np.unique(pairs[:, 1], return_inverse=True)
    return Ratings(
        users,
        items,
        np.array(list(values.values())),
        user_labels.size,
        item_labels.size,
        rating_range,
        user_labels,
        item_labels,
    )


def _from_lists(path: Path, lists: list[tuple[int, int, list[str]]], n_users: int | None) -> Ratings:
    """Implicit `Ratings` from ``(line, user index, item id texts)``, the ids taken as dense indices."""
    users: list[int] = []
    items: list[int] = []
    lines: dict[int, int] = {}
    for number, user, texts in lists:
        if user in lines:
            raise DatasetError(path, f"user {user} is listed again (first at line {lines[user]})", number)
        lines[user] = number
        listed = [_integer(path, number, text, "item id", 0) for text in texts]
        if len(set(listed)) != len(listed):
            repeated = next(item for position, item in enumerate(listed) if item in listed[:position])
            raise DatasetError(path, f"item {repeated} is listed twice for user {user}", number)
        users.extend([user] * len(listed))
        items.extend(listed)
    if not items:
        raise DatasetError(path, "no user lists any item")
    return Ratings(
        np.array(users, dtype=np.int64),
        np.array(items, dtype=np.int64),
        np.ones(len(items)),
        max(lines) + 1 if n_users is None else n_users,
        max(items) + 1,
        IMPLICIT_RANGE,
    )


__all__ = [
    "FILMTRUST_RATING_RANGE",
    "IMPLICIT_RANGE",
    "LASTFM_HEADER",
    "lightgcn_test_file",
    "load_citeulike",
    "load_filmtrust",
    "load_lightgcn",
    "load_lastfm",
]
