"""Config sections: `build` checks every key's type and range and names its key path; `param` declares them."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import pytest

from fedrecsim.config import build, param, to_table
from fedrecsim.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Inner:
    x: int = param(1, ge=0)


@dataclasses.dataclass(frozen=True)
class Section:
    count: int = param(3, ge=1)
    ratio: float = param(0.5, gt=0, lt=1)
    scale: float = param(1.0, ge=0)
    flag: bool = param(False)
    label: str = param("a")
    mode: Literal["fast", "slow"] = param("fast")
    sizes: tuple[int, ...] = param((1, 2))
    maybe: int | None = param(None, ge=0)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    inner: Inner = dataclasses.field(default_factory=Inner)
    parts: tuple[Inner, ...] = param(())


@dataclasses.dataclass(frozen=True)
class Needs:
    name: str = param(doc="no default: the table must give it")
    size: int = param(2)


@dataclasses.dataclass(frozen=True)
class Choices:
    bits: Literal[32, 64] = param(64)
    policy: Literal[0, "auto"] = param("auto")
    only: Literal["fixed"] = param("fixed")


@dataclasses.dataclass(frozen=True)
class Arrays:
    ints: tuple[int, ...] = param(())
    modes: tuple[Literal["a", "b"], ...] = param(())
    labels: tuple[str | None, ...] = param(())


def _error(cls: type, table: Any, path: str = "sec") -> ConfigError:
    with pytest.raises(ConfigError) as excinfo:
        build(cls, table, path)
    return excinfo.value


def test_missing_keys_take_their_declared_defaults() -> None:
    section = build(Section, {}, "sec")
    assert (section.count, section.ratio, section.scale, section.flag, section.label) == (3, 0.5, 1.0, False, "a")
    assert (section.mode, section.sizes, section.maybe) == ("fast", (1, 2), None)
    assert (section.extra, section.inner, section.parts) == ({}, Inner(1), ())


def test_given_values_are_coerced_to_the_declared_types() -> None:
    table = {
        "count": 5, "ratio": 0.25, "scale": 2, "flag": True, "label": "b", "mode": "slow", "sizes": [4, 5, 6],
        "maybe": 7, "extra": {"model": "x"}, "inner": {"x": 9}, "parts": [{"x": 1}, {}],
    }
    section = build(Section, table, "sec")
    parts = (Inner(1), Inner(1))
    assert section == Section(5, 0.25, 2.0, True, "b", "slow", (4, 5, 6), 7, {"model": "x"}, Inner(9), parts)
    assert type(section.scale) is float and type(section.sizes) is tuple


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("count", "3", 'sec.count: expected an integer, got "3"'),
        ("count", True, "sec.count: expected an integer, got true"),
        ("count", 0, "sec.count: must be >= 1, got 0"),
        ("ratio", "0.5", 'sec.ratio: expected a number, got "0.5"'),
        ("ratio", False, "sec.ratio: expected a number, got false"),
        ("ratio", float("nan"), "sec.ratio: expected a finite number, got nan"),
        ("ratio", 1, "sec.ratio: must be > 0 and < 1, got 1.0"),
        ("flag", 1, "sec.flag: expected true or false, got 1"),
        ("label", 5, "sec.label: expected a string, got 5"),
        ("mode", "medium", 'sec.mode: got "medium"; allowed values: "fast", "slow"'),
        ("sizes", 3, "sec.sizes: expected an array of int, got 3"),
        ("sizes", [1, "two"], 'sec.sizes[1]: expected an integer, got "two"'),
        ("maybe", "x", 'sec.maybe: expected an integer, got "x"'),
        ("maybe", -1, "sec.maybe: must be >= 0, got -1"),
        ("extra", 5, "sec.extra: expected a table, got 5"),
        ("inner", 5, "sec.inner: expected a table, got 5"),
        ("inner", {"x": -1}, "sec.inner.x: must be >= 0, got -1"),
        ("inner", {"y": 1}, "sec.inner.y: unknown key; allowed keys here: x"),
        ("parts", [{"x": 1}, {"x": -2}], "sec.parts[1].x: must be >= 0, got -2"),
    ],
)
def test_a_bad_value_names_its_key_path_and_what_is_allowed(key, value, message) -> None:
    error = _error(Section, {key: value})
    assert str(error) == message
    assert error.key_path == message.partition(":")[0]


def test_an_unknown_key_lists_the_allowed_keys() -> None:
    error = _error(Section, {"zeta": 1, "alpha": 2})
    assert str(error) == (
        "sec.alpha: unknown key; allowed keys here: count, extra, flag, inner, label, maybe, mode, parts, ratio, "
        "scale, sizes"
    )


def test_a_top_level_table_names_its_keys_without_a_leading_dot() -> None:
    assert str(_error(Inner, {"y": 1}, path="")) == "y: unknown key; allowed keys here: x"
    assert str(_error(Inner, {"x": "1"}, path="")) == 'x: expected an integer, got "1"'


def test_a_table_that_is_not_a_table_is_refused() -> None:
    assert str(_error(Section, [1, 2])) == "sec: expected a table, got [1, 2]"


def test_a_key_without_default_is_required() -> None:
    error = _error(Needs, {"size": 3}, path="protocol")
    assert (error.key_path, error.problem) == ("protocol.name", "is required")
    assert build(Needs, {"name": "n"}, "protocol") == Needs("n", 2)


def test_a_literal_value_must_match_a_choice_and_its_type() -> None:
    assert build(Choices, {"bits": 32, "policy": 0, "only": "fixed"}, "sec") == Choices(32, 0, "fixed")
    assert build(Choices, {"policy": "auto"}, "sec").policy == "auto"
    assert str(_error(Choices, {"bits": 32.0})) == "sec.bits: got 32.0; allowed values: 32, 64"
    assert str(_error(Choices, {"policy": False})) == 'sec.policy: got false; allowed values: 0, "auto"'
    assert str(_error(Choices, {"only": "other"})) == 'sec.only: got "other"; allowed values: "fixed"'


@pytest.mark.parametrize(
    "key, described",
    [("ints", "int"), ("modes", '"a" | "b"'), ("labels", "str | None")],
)
def test_an_array_key_given_a_single_value_says_what_its_items_must_be(key, described) -> None:
    assert str(_error(Arrays, {key: "a"})) == f'sec.{key}: expected an array of {described}, got "a"'


def test_array_items_are_checked_like_single_values() -> None:
    arrays = build(Arrays, {"ints": [3, 1], "modes": ["b", "a"], "labels": ["x"]}, "sec")
    assert arrays == Arrays((3, 1), ("b", "a"), ("x",))
    assert str(_error(Arrays, {"modes": ["a", "c"]})) == 'sec.modes[1]: got "c"; allowed values: "a", "b"'


def test_an_annotated_field_is_built_as_its_underlying_type() -> None:
    @dataclasses.dataclass(frozen=True)
    class Tagged:
        level: Annotated[int, "decibels"] = param(1, ge=0)

    assert build(Tagged, {"level": 3}, "sec") == Tagged(3)
    assert str(_error(Tagged, {"level": "3"})) == 'sec.level: expected an integer, got "3"'


def test_an_unsupported_field_type_is_a_programming_error_naming_the_key() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        values: set[int] = param(frozenset())

    with pytest.raises(TypeError, match=r"^sec\.values: unsupported config field type set\[int\]$"):
        build(Odd, {"values": [1]}, "sec")


def test_param_gives_the_field_its_default() -> None:
    @dataclasses.dataclass(frozen=True)
    class Knob:
        level: int = param(4)

    assert build(Knob, {}, "knob") == Knob(4)
    assert Knob().level == 4


@pytest.mark.parametrize(
    "bounds, refused, accepted, problem",
    [
        ({"ge": 2}, 1, 2, "must be >= 2, got 1"),
        ({"gt": 2}, 2, 3, "must be > 2, got 2"),
        ({"le": 2}, 3, 2, "must be <= 2, got 3"),
        ({"lt": 2}, 2, 1, "must be < 2, got 2"),
    ],
)
def test_param_ranges_are_enforced_at_their_boundary(bounds, refused, accepted, problem) -> None:
    @dataclasses.dataclass(frozen=True)
    class Bounded:
        value: int = param(**bounds)

    assert build(Bounded, {"value": accepted}, "sec") == Bounded(accepted)
    assert str(_error(Bounded, {"value": refused})) == f"sec.value: {problem}"


def test_param_records_the_description_the_key_reference_shows() -> None:
    @dataclasses.dataclass(frozen=True)
    class Described:
        loud: int = param(1, doc="how loud, in decibels")
        quiet: int = param(0)

    loud, quiet = dataclasses.fields(Described)
    assert loud.metadata["doc"] == "how loud, in decibels"
    assert quiet.metadata["doc"] == ""


@pytest.mark.parametrize("default", [[], {}, set()])
def test_param_refuses_a_mutable_default(default) -> None:
    with pytest.raises(TypeError, match="^mutable defaults are not allowed in config sections; use a tuple$"):
        param(default)


def test_to_table_gives_plain_tables_and_arrays_that_build_back() -> None:
    section = build(Section, {"sizes": [4, 5], "parts": [{"x": 2}], "extra": {"k": [1, 2]}}, "sec")
    table = to_table(section)
    assert table == {
        "count": 3, "ratio": 0.5, "scale": 1.0, "flag": False, "label": "a", "mode": "fast", "sizes": [4, 5],
        "maybe": None, "extra": {"k": [1, 2]}, "inner": {"x": 1}, "parts": [{"x": 2}],
    }
    del table["maybe"]  # TOML has no null: an unset optional key is left out
    assert build(Section, table, "sec") == section
