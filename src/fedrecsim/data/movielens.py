"""Readers for the MovieLens rating files: ml-100k ``u.data`` and ml-1m ``ratings.dat``.

Both files hold one rating per line, ``user item rating timestamp``: tab-separated in ``u.data``,
``::``-separated in ``ratings.dat``. Ids are positive integers (1-based); they are remapped to dense
0-based indices **in ascending order of the original id** — for the official files, whose ids run
1..n without gaps, that is simply ``id - 1`` — and the original ids are kept in `Ratings.user_ids` and
`Ratings.item_ids`. Timestamps must be integers but are not kept.

A file either loads completely or raises `DatasetError` naming the file and an offending line:
a wrong number of fields, an id that is not a positive integer, a rating that is not a number inside
1-5, a timestamp that is not an integer, a (user, item) pair rated twice. Blank lines are skipped.
"""

from __future__ import annotations

import io
from collections.abc import Callable
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
    text = _read_text(path)
    table = _fast_table(text, separator)
    if table is None:
        line_numbers, columns = _columns(path, text, separator)
        user_ids = _integers(path, line_numbers, columns[0], "user id")
        item_ids = _integers(path, line_numbers, columns[1], "item id")
        ratings = _numbers(path, line_numbers, columns[2])
        _integers(path, line_numbers, columns[3], "timestamp")

        def line_of(row: int) -> int:
            return int(line_numbers[row])

    else:
        user_ids, item_ids = table[:, 0], table[:, 1]
        ratings = table[:, 2].astype(np.float64)

        def line_of(row: int) -> int:
            # Only blank lines were skipped (anything else sends a file down the slow path).
            return [number for number, line in enumerate(text.splitlines(), 1) if line.strip()][row]

    for what, ids in (("user id", user_ids), ("item id", item_ids)):
        bad = np.flatnonzero(ids <= 0)
        if bad.size:
            raise DatasetError(path, f"{what} {ids[bad[0]]} is not a positive integer", line_of(int(bad[0])))
    low, high = MOVIELENS_RATING_RANGE
    # NaN fails both comparisons, so it is caught together with out-of-range values.
    bad = np.flatnonzero(~((ratings >= low) & (ratings <= high)))
    if bad.size:
        raise DatasetError(path, f"rating {ratings[bad[0]]:g} is outside [{low:g}, {high:g}]", line_of(int(bad[0])))
    user_labels, users = np.unique(user_ids, return_inverse=True)
    item_labels, items = np.unique(item_ids, return_inverse=True)
    order = _sorted_without_duplicates(path, line_of, users * np.int64(item_labels.size) + items, user_ids, item_ids)
    return Ratings(
        users[order].astype(np.int64),
        items[order].astype(np.int64),
        ratings[order],
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


def _fast_table(text: str, separator: str) -> IntArray | None:
    """``int64[n, 4]`` if every non-blank line is four integer fields, else None (take the slow path).

    numpy's C parser reads a million lines in well under a second but reports problems without the
    file's line numbers, so it only ever accepts; everything it refuses is parsed line by line.
    """
    if not text.strip() or (separator != "\t" and "\t" in text):
        return None
    try:
        table = np.loadtxt(
            io.StringIO(text.replace(separator, "\t")), delimiter="\t", dtype=np.int64, comments=None, ndmin=2
        )
    except ValueError:
        return None
    return table if table.shape[1] == 4 else None


def _columns(path: Path, text: str, separator: str) -> tuple[IntArray, list[list[str]]]:
    """Split into four string columns, remembering the 1-based line number of each row."""
    numbered = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not numbered:
        raise DatasetError(path, "no ratings in the file")
    rows = [line.split(separator) for _, line in numbered]
    for (number, _), row in zip(numbered, rows):
        if len(row) != 4:
            shown = "tab" if separator == "\t" else repr(separator)
            raise DatasetError(
                path, f"expected 4 {shown}-separated fields (user item rating timestamp), got {len(row)}", number
            )
    line_numbers = np.fromiter((number for number, _ in numbered), dtype=np.int64, count=len(numbered))
    return line_numbers, [list(column) for column in zip(*rows)]


def _integers(path: Path, line_numbers: IntArray, column: list[str], what: str) -> IntArray:
    try:
        return np.array(column).astype(np.int64)
    except (ValueError, OverflowError):
        # numpy parses like int(), so the first string int() refuses (or that overflows) is the culprit.
        row = next(row for row, field in enumerate(column) if not _is_int64(field))
        raise DatasetError(path, f"{what} {column[row].strip()!r} is not an integer", int(line_numbers[row])) from None


def _is_int64(text: str) -> bool:
    try:
        value = int(text)
    except ValueError:
        return False
    return -(2**63) <= value < 2**63


def _numbers(path: Path, line_numbers: IntArray, column: list[str]) -> FloatArray:
    try:
        return np.array(column).astype(np.float64)
    except ValueError:
        row = next(row for row, field in enumerate(column) if not _is_float(field))
        raise DatasetError(path, f"rating {column[row].strip()!r} is not a number", int(line_numbers[row])) from None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _sorted_without_duplicates(
    path: Path, line_of: Callable[[int], int], keys: IntArray, user_ids: IntArray, item_ids: IntArray
) -> IntArray:
    """The row order sorting ``keys`` (so `Ratings` need not sort again), refusing a repeated key."""
    order = np.argsort(keys, kind="stable")
    repeats = np.flatnonzero(np.diff(keys[order]) == 0)
    if not repeats.size:
        return order
    # Report the repeat that occurs earliest in the file, pointing back at its first occurrence.
    first_rows, second_rows = order[repeats], order[repeats + 1]
    which = int(np.argmin(second_rows))
    first, second = int(first_rows[which]), int(second_rows[which])
    raise DatasetError(
        path,
        f"user {user_ids[second]} rated item {item_ids[second]} again (first at line {line_of(first)})",
        line_of(second),
    )


__all__ = ["MOVIELENS_RATING_RANGE", "load_movielens_100k", "load_movielens_1m"]
