"""Readers for the MovieLens rating files: ml-100k ``u.data`` and ml-1m ``ratings.dat``.

Both files hold one rating per line, ``user item rating timestamp``: tab-separated in ``u.data``,
``::``-separated in ``ratings.dat``. Ids are positive integers (1-based); they are remapped to dense
0-based indices **in ascending order of the original id** — for the official files, whose ids run
1..n without gaps, that is simply ``id - 1`` — and the original ids are kept in `Ratings.user_ids` and
`Ratings.item_ids`. Timestamps must be integers but are not kept.

A file either loads completely or raises `DatasetError` naming the file and the first offending line:
a wrong number of fields, an id that is not a positive integer, a rating that is not a number inside
1-5, a timestamp that is not an integer, a (user, item) pair rated twice. Blank lines are skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrecsim.data.ratings import FloatArray, IntArray, Ratings
from fedrecsim.errors import DatasetError

MOVIELENS_RATING_RANGE = (1.0, 5.0)


def load_movielens_100k(path: str | Path) -> Ratings:
    """Read ml-100k's ``u.data``; ``path`` is the file or the ``ml-100k`` folder holding it."""
    return _load(_resolve(Path(path), "u.data"), "\t")


def load_movielens_1m(path: str | Path) -> Ratings:
    """Read ml-1m's ``ratings.dat``; ``path`` is the file or the ``ml-1m`` folder holding it."""
    return _load(_resolve(Path(path), "ratings.dat"), "::")


def _resolve(path: Path, file_name: str) -> Path:
    if path.is_dir():
        path = path / file_name
        if not path.is_file():
            raise DatasetError(path, f"the folder has no {file_name}")
    elif not path.is_file():
        raise DatasetError(path, "no such file or folder")
    return path


def _load(path: Path, separator: str) -> Ratings:
    line_numbers, columns = _columns(path, _read_text(path), separator)
    user_ids = _integers(path, line_numbers, columns[0], "user id", positive=True)
    item_ids = _integers(path, line_numbers, columns[1], "item id", positive=True)
    ratings = _ratings(path, line_numbers, columns[2])
    _integers(path, line_numbers, columns[3], "timestamp", positive=False)
    user_labels, users = np.unique(user_ids, return_inverse=True)
    item_labels, items = np.unique(item_ids, return_inverse=True)
    _refuse_duplicates(path, line_numbers, users, items, item_labels.size, user_ids, item_ids)
    return Ratings(
        users.astype(np.int64),
        items.astype(np.int64),
        ratings,
        user_labels.size,
        item_labels.size,
        MOVIELENS_RATING_RANGE,
        user_labels,
        item_labels,
    )


def _read_text(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DatasetError(path, f"cannot read: {error.strerror or error}") from error
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise DatasetError(path, f"not UTF-8 text ({error.reason})", line) from error


def _columns(path: Path, text: str, separator: str) -> tuple[IntArray, list[list[str]]]:
    """Split into four string columns, remembering the 1-based line number of each row."""
    numbered = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not numbered:
        raise DatasetError(path, "no ratings in the file")
    rows = [line.split(separator) for _, line in numbered]
    for (number, line), row in zip(numbered, rows):
        if len(row) != 4:
            shown = "tab" if separator == "\t" else repr(separator)
            raise DatasetError(
                path, f"expected 4 {shown}-separated fields (user item rating timestamp), got {len(row)}", number
            )
    line_numbers = np.fromiter((number for number, _ in numbered), dtype=np.int64, count=len(numbered))
    return line_numbers, [list(column) for column in zip(*rows)]


def _integers(path: Path, line_numbers: IntArray, column: list[str], what: str, *, positive: bool) -> IntArray:
    try:
        values = np.array(column).astype(np.int64)
    except (ValueError, OverflowError):
        values = None
    if values is not None:
        bad = np.flatnonzero(values <= 0) if positive else np.array([], dtype=np.int64)
        if not bad.size:
            return values
        index = int(bad[0])
    else:
        index = next(i for i, text in enumerate(column) if not _is_integer(text))
    kind = "a positive integer" if positive else "an integer"
    raise DatasetError(path, f"{what} {column[index].strip()!r} is not {kind}", int(line_numbers[index]))


def _is_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return -(2**63) <= int(text) < 2**63


def _ratings(path: Path, line_numbers: IntArray, column: list[str]) -> FloatArray:
    try:
        values = np.array(column).astype(np.float64)
    except ValueError:
        index = next(i for i, text in enumerate(column) if not _is_number(text))
        raise DatasetError(path, f"rating {column[index].strip()!r} is not a number", int(line_numbers[index])) from None
    low, high = MOVIELENS_RATING_RANGE
    # NaN fails both comparisons, so it is caught here together with out-of-range values.
    bad = np.flatnonzero(~((values >= low) & (values <= high)))
    if bad.size:
        index = int(bad[0])
        raise DatasetError(
            path, f"rating {column[index].strip()!r} is outside [{low:g}, {high:g}]", int(line_numbers[index])
        )
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _refuse_duplicates(
    path: Path,
    line_numbers: IntArray,
    users: IntArray,
    items: IntArray,
    n_items: int,
    user_ids: IntArray,
    item_ids: IntArray,
) -> None:
    keys = users.astype(np.int64) * n_items + items
    order = np.argsort(keys, kind="stable")
    repeats = np.flatnonzero(np.diff(keys[order]) == 0)
    if not repeats.size:
        return
    # Report the repeat that occurs earliest in the file, pointing back at its first occurrence.
    first_rows, second_rows = order[repeats], order[repeats + 1]
    which = int(np.argmin(second_rows))
    first, second = int(first_rows[which]), int(second_rows[which])
    raise DatasetError(
        path,
        f"user {user_ids[second]} rated item {item_ids[second]} again "
        f"(first at line {line_numbers[first]})",
        int(line_numbers[second]),
    )


__all__ = ["MOVIELENS_RATING_RANGE", "load_movielens_100k", "load_movielens_1m"]
