"""Typed, validated configuration built from TOML tables.

A configuration section is a frozen dataclass whose fields carry defaults, types and ranges. `build`
turns a mapping (a TOML table) into that dataclass and refuses, with a `ConfigError` naming the key path
and what is allowed: an unknown key, a value of the wrong type, a value outside ``Literal`` choices, and a
number outside the range declared with `param`. Cross-field checks live in the dataclass's
``__post_init__`` and raise `ConfigError` too.

Supported field types: ``int``, ``float`` (an integer literal is accepted), ``bool``, ``str``,
``Literal[...]``, ``tuple[T, ...]``, ``dict[str, Any]`` (kept as a plain table for a sub-builder), nested
config dataclasses, ``T | None`` and unions of these (``int | Literal["auto"]``: the first that takes the value).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from .errors import ConfigError

T = TypeVar("T")

_RANGE_KEYS = ("ge", "gt", "le", "lt")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_literal(value: Any) -> str:
    """``value`` written the way a scenario file or ``--set`` writes it: ``true``, ``"hold"``, ``[1, 2]``,
    ``{ model = "constant" }``, so what the tool echoes back can be pasted into a scenario. A table's unset
    (None) keys are left out, TOML having no null; any other value TOML cannot write (an object) is given
    as Python shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(toml_literal, value)) + "]"
    if isinstance(value, Mapping):
        items = [f"{toml_key(str(key))} = {toml_literal(item)}" for key, item in value.items() if item is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    return repr(value)


def toml_key(key: str) -> str:
    """A TOML key: bare where TOML allows (letters, digits, - and _), else quoted (``"user->server"``)."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def param(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    doc: str = "",
) -> Any:
    """A config field with a default, an optional numeric range and a one-line description."""
    metadata = {"ge": ge, "gt": gt, "le": le, "lt": lt, "doc": doc}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable defaults are not allowed in config sections; use a tuple")
    return dataclasses.field(default=default, metadata=metadata)


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return " | ".join(map(toml_literal, typing.get_args(annotation)))
    return getattr(annotation, "__name__", str(annotation))


def _coerce(annotation: Any, value: Any, key_path: str) -> Any:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        # The value must equal a choice of its own type: true is not 1, 32.0 is not 32, and a Literal may
        # mix types (Literal[0, "auto"]).
        if not any(type(value) is type(choice) and value == choice for choice in choices):
            raise ConfigError(key_path, f"got {toml_literal(value)}; allowed values: {', '.join(map(toml_literal, choices))}")
        return value
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if value is None:
            return None
        if len(options) == 1:
            return _coerce(options[0], value, key_path)
        # A value of one of several types (e.g. ``int | Literal["auto"]``): the first option that takes it.
        for option in options:
            try:
                return _coerce(option, value, key_path)
            except ConfigError:
                continue
        raise ConfigError(key_path, f"got {toml_literal(value)}; expected {' or '.join(_describe(option) for option in options)}")
    if origin is tuple:
        item_type = typing.get_args(annotation)[0]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key_path, f"expected an array of {_describe(item_type)}, got {toml_literal(value)}")
        return tuple(_coerce(item_type, item, f"{key_path}[{position}]") for position, item in enumerate(value))
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key_path, f"expected a table, got {toml_literal(value)}")
        return dict(value)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, Mapping):
            raise ConfigError(key_path, f"expected a table, got {toml_literal(value)}")
        return build(annotation, value, key_path)
    if annotation is bool:
        if type(value) is not bool:
            raise ConfigError(key_path, f"expected true or false, got {toml_literal(value)}")
        return value
    if annotation is int:
        if type(value) is not int:
            raise ConfigError(key_path, f"expected an integer, got {toml_literal(value)}")
        return value
    if annotation is float:
        if type(value) not in (int, float):
            raise ConfigError(key_path, f"expected a number, got {toml_literal(value)}")
        if not math.isfinite(value):
            raise ConfigError(key_path, f"expected a finite number, got {toml_literal(value)}")
        return float(value)
    if annotation is str:
        if type(value) is not str:
            raise ConfigError(key_path, f"expected a string, got {toml_literal(value)}")
        return value
    raise TypeError(f"{key_path}: unsupported config field type {annotation!r}")


def _check_range(field: dataclasses.Field, value: Any, key_path: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    meta = field.metadata
    bounds = {key: meta.get(key) for key in _RANGE_KEYS if meta.get(key) is not None}
    failed = (
        ("ge" in bounds and value < bounds["ge"])
        or ("gt" in bounds and value <= bounds["gt"])
        or ("le" in bounds and value > bounds["le"])
        or ("lt" in bounds and value >= bounds["lt"])
    )
    if failed:
        symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        allowed = " and ".join(f"{symbols[key]} {bound}" for key, bound in bounds.items())
        raise ConfigError(key_path, f"must be {allowed}, got {toml_literal(value)}")


def build(cls: type[T], table: Mapping[str, Any], path: str) -> T:
    """Build the config dataclass ``cls`` from ``table``; ``path`` is the table's key path (e.g. ``network``).

    Raises:
        ConfigError: naming ``path.key`` for an unknown, missing, mistyped or out-of-range value.
    """
    if not isinstance(table, Mapping):
        raise ConfigError(path, f"expected a table, got {toml_literal(table)}")
    hints = typing.get_type_hints(cls)
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ConfigError(
            f"{path}.{unknown[0]}" if path else unknown[0],
            f"unknown key; allowed keys here: {', '.join(sorted(fields))}",
        )
    values: dict[str, Any] = {}
    for name, field in fields.items():
        key_path = f"{path}.{name}" if path else name
        if name in table:
            value = _coerce(hints[name], table[name], key_path)
        elif field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            raise ConfigError(key_path, "is required")
        _check_range(field, value, key_path)
        values[name] = value
    return cls(**values)


def to_table(config: Any) -> Any:
    """The plain (JSON/TOML-ready) form of a config dataclass, nested tables included."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {field.name: to_table(getattr(config, field.name)) for field in dataclasses.fields(config)}
    if isinstance(config, tuple):
        return [to_table(item) for item in config]
    if isinstance(config, dict):
        return {key: to_table(value) for key, value in config.items()}
    return config


__all__ = ["build", "param", "to_table", "toml_key", "toml_literal"]
