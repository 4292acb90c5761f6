"""Neighbouring relations: the unit a protocol's privacy claim protects, and the target an audit moves.

Every relation is expressed on one user's row of the training data: an audit's two worlds are the same
data set except that the target user holds the row ``present`` (world "in") or the row ``absent`` (world
"out"). The three relations a protocol may declare:

* ``one_rating`` -- add/remove one rating (central DP over ratings, e.g. Hua et al.): ``absent`` is the
  user's row, ``present`` the same row plus the target rating.
* ``one_user`` -- add/remove one user's row (user-level DP): ``present`` is the row, ``absent`` is empty.
  The user stays a party of the run with no data (the party count is public in every protocol here),
  so the relation is "a user's data", not "a user's participation".
* ``user_replaced`` -- replace one user's row by another (local DP, e.g. Minto et al.'s reports: any
  two inputs of one user): ``present`` is the target's row, ``absent`` another user's row.

A protocol declares one of them with the unit its claim counts (``"rating"``, ``"user"``, ``"report"``,
...) in its `fedrecsim.audit.AuditSpec`. The ``[audit]`` table picks the target (`AuditSettings`):
``user`` (default the user with the most ratings), ``item`` for ``one_rating`` (default an item the
user did not rate; the rating's value is the data's top rating), ``neighbour`` for ``user_replaced``
(default the next user with a rating), or the two rows outright with ``in_items`` / ``out_items``
(checked against the relation: rows that differ in more than the relation allows are refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..data.ratings import Ratings
from ..errors import ConfigError

Kind = Literal["add_remove", "replace"]


@dataclass(frozen=True)
class Row:
    """One user's entries: items ascending, one value each."""

    items: tuple[int, ...]
    values: tuple[float, ...]

    @staticmethod
    def of(items: Sequence[int], values: Sequence[float]) -> Row:
        order = np.argsort(np.asarray(items, dtype=np.int64), kind="stable")
        return Row(tuple(int(items[i]) for i in order), tuple(float(values[i]) for i in order))

    def dense(self, n_items: int, value: float | None = None) -> np.ndarray:
        """The row as a float vector over ``n_items`` items: its values (or ``value`` at each: 1.0 gives the
        row's indicator) at its items, zero elsewhere."""
        x = np.zeros(n_items)
        x[list(self.items)] = self.values if value is None else value
        return x

    def to_table(self) -> dict[str, list[Any]]:
        return {"items": list(self.items), "values": list(self.values)}

    @staticmethod
    def from_table(table: Mapping[str, Sequence[Any]]) -> Row:
        return Row(tuple(int(i) for i in table["items"]), tuple(float(v) for v in table["values"]))


@dataclass(frozen=True)
class Target:
    """What the two worlds of an audit differ in: user ``user`` holds ``present`` (in) or ``absent`` (out)."""

    user: int
    present: Row
    absent: Row

    def row(self, present: bool) -> Row:
        return self.present if present else self.absent

    @property
    def added(self) -> tuple[int, ...]:
        """The items of ``present`` that ``absent`` lacks, ascending (under ``one_rating``: the target rating's item)."""
        return tuple(sorted(set(self.present.items) - set(self.absent.items)))

    def describe(self) -> str:
        return (
            f"user {self.user}: {len(self.present.items)} entries (in) vs {len(self.absent.items)} (out), "
            f"{len(set(self.present.items) ^ set(self.absent.items))} items differ"
        )

    def to_table(self) -> dict[str, Any]:
        return {"user": self.user, "present": self.present.to_table(), "absent": self.absent.to_table()}

    @staticmethod
    def from_table(table: Mapping[str, Any]) -> Target:
        return Target(int(table["user"]), Row.from_table(table["present"]), Row.from_table(table["absent"]))


def with_row(train: Ratings, user: int, row: Row) -> Ratings:
    """``train`` with ``user``'s entries replaced by ``row`` (every other entry as it was)."""
    keep = train.users != user
    return train.with_entries(
        np.concatenate([train.users[keep], np.full(len(row.items), user, dtype=np.int64)]),
        np.concatenate([train.items[keep], np.asarray(row.items, dtype=np.int64)]),
        np.concatenate([train.values[keep], np.asarray(row.values, dtype=np.float64)]),
    )


def without_user(train: Ratings, user: int) -> Ratings:
    """``train`` with ``user``'s row emptied: what the strongest adversary is assumed to know."""
    return with_row(train, user, Row((), ()))


Choose = Callable[[Ratings, Any], Target]


@dataclass(frozen=True)
class Neighbouring:
    """A protocol's neighbouring relation.

    Attributes:
        unit: what one claim protects, in the claim's words ("rating", "user", "report", ...).
        kind: ``add_remove`` (the target is there or not) or ``replace`` (one input for another).
        description: the relation in one sentence, as the audit report prints it.
        choose: ``choose(train, settings) -> Target``: the target the ``[audit]`` settings name in the data.
    """

    unit: str
    kind: Kind
    description: str
    choose: Choose

    def target(self, train: Ratings, settings: Any) -> Target:
        """The target of this audit; ``in_items`` / ``out_items`` of the settings, when given, are checked
        against the relation."""
        if settings.in_items is None and settings.out_items is None:
            return self.choose(train, settings)
        user = _user(train, settings)
        top = float(train.rating_range[1])
        given = {"in": settings.in_items, "out": settings.out_items}
        own = tuple(int(i) for i in train.user_items(user))
        rows = {}
        for world, items in given.items():
            chosen = own if items is None else items
            bad = [item for item in chosen if not 0 <= item < train.n_items]
            if bad or len(set(chosen)) != len(chosen):
                raise ConfigError(f"audit.{world}_items", f"expected distinct items in [0, {train.n_items}), got {list(chosen)}")
            rows[world] = Row.of(chosen, [top] * len(chosen))
        target = Target(user, rows["in"], rows["out"])
        changed = set(target.present.items) ^ set(target.absent.items)
        if self.unit == "rating" and self.kind == "add_remove" and (
            len(changed) != 1 or not set(target.absent.items) <= set(target.present.items)
        ):
            raise ConfigError("audit.in_items", "one rating added/removed: in_items must be out_items plus one item")
        if self.kind == "add_remove" and self.unit == "user" and target.absent.items:
            raise ConfigError("audit.out_items", "one user's row added/removed: out_items must be empty")
        return target


def _user(train: Ratings, settings: Any) -> int:
    counts = train.user_counts()
    user = int(np.argmax(counts)) if settings.user < 0 else settings.user
    if not 0 <= user < train.n_users:
        raise ConfigError("audit.user", f"must be a user of the data, in [0, {train.n_users}), got {user}")
    return user


def _own_row(train: Ratings, user: int) -> Row:
    items, values = train.user_ratings(user)
    return Row.of(items.tolist(), values.tolist())


def _choose_rating(train: Ratings, settings: Any) -> Target:
    user = _user(train, settings)
    own = _own_row(train, user)
    item = settings.item
    if item < 0:
        unrated = np.setdiff1d(np.arange(train.n_items), np.asarray(own.items, dtype=np.int64))
        if unrated.size == 0:
            raise ConfigError("audit.item", f"user {user} rated every item; name another audit.user")
        item = int(unrated[0])
    if not 0 <= item < train.n_items or item in own.items:
        raise ConfigError("audit.item", f"must be an item user {user} did not rate, in [0, {train.n_items}), got {item}")
    present = Row.of([*own.items, item], [*own.values, float(train.rating_range[1])])
    return Target(user, present, own)


def _choose_user(train: Ratings, settings: Any) -> Target:
    user = _user(train, settings)
    own = _own_row(train, user)
    if not own.items:
        raise ConfigError("audit.user", f"user {user} has no ratings in the training data: nothing to add or remove")
    return Target(user, own, Row((), ()))


def _choose_replacement(train: Ratings, settings: Any) -> Target:
    user = _user(train, settings)
    counts = train.user_counts()
    neighbour = settings.neighbour
    if neighbour < 0:
        order = [(user + step) % train.n_users for step in range(1, train.n_users)]
        neighbour = next((other for other in order if counts[other]), -1)
    if not 0 <= neighbour < train.n_users or neighbour == user:
        raise ConfigError("audit.neighbour", f"must be another user of the data, in [0, {train.n_users}), got {neighbour}")
    return Target(user, _own_row(train, user), _own_row(train, neighbour))


def one_rating(description: str = "one rating added to or removed from a user's row", unit: str = "rating") -> Neighbouring:
    return Neighbouring(unit, "add_remove", description, _choose_rating)


def one_user(description: str = "one user's whole row added or removed", unit: str = "user") -> Neighbouring:
    return Neighbouring(unit, "add_remove", description, _choose_user)


def user_replaced(description: str = "one user's whole row replaced by another's (local DP)", unit: str = "user") -> Neighbouring:
    return Neighbouring(unit, "replace", description, _choose_replacement)


__all__ = ["Neighbouring", "Row", "Target", "one_rating", "one_user", "user_replaced", "with_row", "without_user"]
