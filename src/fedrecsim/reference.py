"""The scenario key reference, generated from the config schema.

Every key a scenario file accepts is a field of a frozen config dataclass declared with `param`: the
common tables (`RunConfig`, `DataConfig`, `NetworkConfig`, `AvailabilityConfig`), the tables nested in
``[network]`` (a latency model, `LATENCY_MODELS`, and the per-link tables) and each protocol's own
``[protocol]`` class. This module walks those classes and renders what it finds -- type, default, range
or choices, and the field's ``doc`` -- so the reference never restates a key by hand and cannot drift
from what `fedrecsim.config.build` accepts. A field without a ``doc`` is listed with an empty meaning.

``fedrecsim keys [PROTOCOL]`` prints `keys_text`; ``docs/scenario-reference.md`` is `reference_markdown`,
regenerated with::

    python -m fedrecsim.reference > docs/scenario-reference.md

and ``tests/test_reference.py`` fails when the committed file differs from what this module generates.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .config import to_table, toml_literal
from .network.links import LATENCY_MODELS
from .network.party import Role
from .protocols import available_protocols, built_in_protocols, protocol_spec
from .scenario import AvailabilityConfig, DataConfig, FaultsConfig, NetworkConfig, RunConfig, _LinkTable

REGENERATE_COMMAND = "python -m fedrecsim.reference > docs/scenario-reference.md"

#: The default of a key that must be given.
REQUIRED = "required"
#: The default of an optional key that has no value unless given (its meaning says what that does).
UNSET = "unset"

_COMMON_TABLES: tuple[tuple[str, type], ...] = (
    ("run", RunConfig),
    ("data", DataConfig),
    ("network", NetworkConfig),
    ("availability", AvailabilityConfig),
    ("faults", FaultsConfig),
)
_LINK_PAIR = "<pair>"
# The key of an entry of an array of tables (``[[faults.crash]]``): ``faults.crash[i].party``.
_ENTRY = "[i]"
# A "<" that CommonMark would read as the start of an HTML tag (as in "<pair>"); "< 1" is text already.
_HTML_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_RANGE_SYMBOLS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


@dataclass(frozen=True)
class KeyRow:
    """One scenario key, every column a ready-to-print string.

    Attributes:
        key: the full key path, as ``--set`` takes it (``network.latency.median_s``); in a per-link table
            ``<pair>`` stands for the table's name (``user-server``, ``user->server``, ...).
        type: the TOML type: ``integer``, ``float``, ``boolean``, ``string``, ``array of T`` or ``table``.
        default: the default as a TOML literal, `REQUIRED` when the key must be given, or `UNSET`.
        allowed: the range or the choices the key accepts beyond its type; empty when any value is.
        meaning: the field's ``doc`` in the schema; empty where the schema has none.
        protocol: the protocol whose ``[protocol]`` table holds the key; None for the common tables.
    """

    key: str
    type: str
    default: str
    allowed: str
    meaning: str
    protocol: str | None = None

    @property
    def table(self) -> str:
        """The table the key sits in (``network.latency`` for ``network.latency.model``)."""
        return self.key.rpartition(".")[0]


def key_rows(protocol: str | None = None) -> list[KeyRow]:
    """Every key of the common tables, then those of ``protocol``'s ``[protocol]`` table.

    Args:
        protocol: anything ``run.protocol`` accepts; None for every protocol `available_protocols` lists
            (built-in and installed), one after another.

    Raises:
        ConfigError: naming ``run.protocol``, when ``protocol`` names no protocol.
    """
    protocols = available_protocols() if protocol is None else (protocol,)
    return _rows_of(protocols)


def keys_text(protocol: str | None = None) -> str:
    """What ``fedrecsim keys [PROTOCOL]`` prints: `key_rows` grouped under their table headings.

    Each key is one line -- path, type, default, allowed values -- and its meaning indented below.

    Raises:
        ConfigError: naming ``run.protocol``, when ``protocol`` names no protocol.
    """
    blocks = []
    for heading, description, rows in _tables(key_rows(protocol)):
        lines = [heading]
        if description:
            lines.append(f"  {description}")
        for row in rows:
            default = REQUIRED if row.default == REQUIRED else f"default {row.default}"
            lines.append(f"  {row.key}: {', '.join(filter(None, (row.type, default, row.allowed)))}")
            if row.meaning:
                lines.append(f"      {row.meaning}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def reference_markdown() -> str:
    """``docs/scenario-reference.md``: the common tables and every built-in protocol's table.

    Built-in protocols only, so the committed file does not depend on what else is installed.
    """
    parts = [
        "# Scenario key reference\n",
        f"Generated by `{REGENERATE_COMMAND}` from the config classes; do not edit: change a key's "
        "`param(doc=...)` and regenerate. `fedrecsim keys [PROTOCOL]` prints the same keys in the terminal.\n",
        "A scenario is one TOML file of the tables below. Every key has a default except `run.protocol`; "
        "the `[protocol]` table holds the keys of the protocol `run.protocol` names. A key path is what "
        "`fedrecsim run FILE --set key.path=value` overrides (the value parsed as a TOML literal). "
        f"Default *{REQUIRED}*: the key must be given; *{UNSET}*: the key has no value unless given.\n",
    ]
    for heading, description, rows in _tables(_rows_of(built_in_protocols())):
        parts.append(f"## {_markdown_text(heading)}\n")
        if description:
            parts.append(f"{_markdown_text(description)}\n")
        lines = ["| Key | Type | Default | Allowed | Meaning |", "|---|---|---|---|---|"]
        for row in rows:
            default = row.default if row.default in (REQUIRED, UNSET) else _markdown_code(row.default)
            cells = (_markdown_code(row.key), row.type, default, row.allowed, row.meaning)
            lines.append("| " + " | ".join((*cells[:3], *map(_markdown_text, cells[3:]))) + " |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _markdown_code(text: str) -> str:
    """``text`` as a code span in a table cell: only the cell separator needs escaping."""
    return "`" + text.replace("|", "\\|") + "`"


def _markdown_text(text: str) -> str:
    """``text`` shown as written in a table cell: no emphasis, no HTML, no cell break."""
    for special in ("\\", "|", "*", "`"):
        text = text.replace(special, "\\" + special)
    return _HTML_TAG_START.sub("&lt;", text)


def _rows_of(protocols: Iterable[str]) -> list[KeyRow]:
    rows = [row for name, config in _COMMON_TABLES for row in _config_rows(config, name, None)]
    for name in protocols:
        rows.extend(_config_rows(protocol_spec(name).config, "protocol", name))
    return rows


def _tables(rows: list[KeyRow]) -> Iterator[tuple[str, str, list[KeyRow]]]:
    """``(heading, description, rows)`` per table, in the order the rows come."""
    grouped: dict[tuple[str | None, str], list[KeyRow]] = {}
    for row in rows:
        grouped.setdefault((row.protocol, row.table), []).append(row)
    for (protocol, table), table_rows in grouped.items():
        if protocol is None and table.endswith(_ENTRY):
            array = table.removesuffix(_ENTRY)
            yield f"[[{array}]]", f"An array of tables: each [[{array}]] entry takes these keys ({table}.KEY).", table_rows
        elif protocol is None:
            yield f"[{table}]", "", table_rows
        else:
            heading = f'[{table}] with run.protocol = "{protocol}"'
            yield heading, protocol_spec(protocol).description, table_rows


def _config_rows(config: type, path: str, protocol: str | None) -> Iterator[KeyRow]:
    """The rows of one config dataclass at key path ``path``, each nested table's rows after its own."""
    hints = typing.get_type_hints(config)
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        annotation = hints[field.name]
        row = KeyRow(
            key=f"{path}.{field.name}",
            type=_type_name(annotation),
            default=_default_text(field),
            allowed=_allowed(annotation, field.metadata),
            meaning=field.metadata.get("doc", ""),
            protocol=protocol,
        )
        expand = _NESTED_TABLES.get((config, field.name))
        if expand is not None:
            yield from expand(row)
            continue
        yield row
        nested_config = _dataclass_of(annotation)
        if nested_config is not None:
            yield from _config_rows(nested_config, row.key, protocol)
        entry_config = _entry_dataclass_of(annotation)
        if entry_config is not None:
            yield from _config_rows(entry_config, f"{row.key}{_ENTRY}", protocol)


def _latency_rows(row: KeyRow) -> Iterator[KeyRow]:
    """``network.latency`` and its keys: ``model``, then each model's fields, named after the model."""
    yield dataclasses.replace(row, allowed=f"model and that model's keys ({row.key}.*)")
    yield KeyRow(
        f"{row.key}.model",
        "string",
        REQUIRED,
        _one_of(LATENCY_MODELS),
        "the latency model; each takes the keys marked with its name",
    )
    for name, model in LATENCY_MODELS.items():
        for model_row in _config_rows(model, row.key, None):
            yield dataclasses.replace(model_row, meaning=_for_model(name, model_row.meaning))
        for key, meaning in model.file_keys.items():
            yield KeyRow(f"{row.key}.{key}", "string", UNSET, "a file path", _for_model(name, meaning))


def _for_model(model: str, meaning: str) -> str:
    return f"{model}: {meaning}" if meaning else ""


def _links_rows(row: KeyRow) -> Iterator[KeyRow]:
    """``network.links`` and the keys of one of its per-link tables, named ``<pair>``."""
    roles = ", ".join(sorted(role.value for role in Role))
    allowed = f'tables named "ROLE-ROLE" or "ROLE->ROLE" ({_LINK_PAIR}), ROLE one of {roles}'
    yield dataclasses.replace(row, allowed=allowed)
    yield from _config_rows(_LinkTable, f"{row.key}.{_LINK_PAIR}", None)


def _link_latency_rows(row: KeyRow) -> Iterator[KeyRow]:
    yield dataclasses.replace(row, allowed="a table with the keys of network.latency")


# Tables whose keys are not fields of a config dataclass: their builders validate them (see each).
_NESTED_TABLES = {
    (NetworkConfig, "latency"): _latency_rows,
    (NetworkConfig, "links"): _links_rows,
    (_LinkTable, "latency"): _link_latency_rows,
}


def _optional_of(annotation: Any) -> Any:
    """``T`` for ``T | None``, else ``annotation`` itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return options[0]
    return annotation


def _dataclass_of(annotation: Any) -> type | None:
    inner = _optional_of(annotation)
    return inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None


def _entry_dataclass_of(annotation: Any) -> type | None:
    """``T`` for ``tuple[T, ...]`` when ``T`` is a config dataclass (an array of tables), else None."""
    if typing.get_origin(annotation) is tuple:
        return _dataclass_of(typing.get_args(annotation)[0])
    return None


def _type_name(annotation: Any) -> str:
    annotation = _optional_of(annotation)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return _type_name(type(typing.get_args(annotation)[0]))
    if origin is tuple:
        return f"array of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict or annotation is dict or _dataclass_of(annotation) is not None:
        return "table"
    return {bool: "boolean", int: "integer", float: "float", str: "string"}[annotation]


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        default = field.default
    elif field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        return REQUIRED
    return UNSET if default is None else toml_literal(to_table(default))


def _one_of(choices: Iterable[Any]) -> str:
    return "one of " + ", ".join(map(toml_literal, choices))


def _allowed(annotation: Any, metadata: Mapping[str, Any]) -> str:
    """The choices of a ``Literal`` and the range declared with `param`, joined."""
    inner = _optional_of(annotation)
    constraints = []
    if typing.get_origin(inner) is Literal:
        constraints.append(_one_of(typing.get_args(inner)))
    bounds = [
        f"{symbol} {metadata[name]!r}" for name, symbol in _RANGE_SYMBOLS.items() if metadata.get(name) is not None
    ]
    if bounds:
        constraints.append(" and ".join(bounds))
    return "; ".join(constraints)


__all__ = ["REGENERATE_COMMAND", "REQUIRED", "UNSET", "KeyRow", "key_rows", "keys_text", "reference_markdown"]


if __name__ == "__main__":
    sys.stdout.buffer.write(reference_markdown().encode("utf-8"))
