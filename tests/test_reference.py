"""The scenario key reference: generated from the schema, agreeing with the validator, and committed fresh."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.network.links import LATENCY_MODELS, latency_from_table
from fedrecsim.protocols import ENTRY_POINT_GROUP, available_protocols, built_in_protocols
from fedrecsim.reference import REGENERATE_COMMAND, REQUIRED, UNSET, key_rows, keys_text, reference_markdown
from fedrecsim.scenario import apply_overrides, parse_scenario

REFERENCE_FILE = Path(__file__).resolve().parents[1] / "docs" / "scenario-reference.md"


def _row(key: str, protocol: str = "fcf"):
    (row,) = [row for row in key_rows(protocol) if row.key == key]
    return row


def test_committed_reference_is_what_the_generator_writes():
    committed = REFERENCE_FILE.read_text(encoding="utf-8")
    assert committed == reference_markdown(), f"docs/scenario-reference.md is stale; regenerate: {REGENERATE_COMMAND}"


def test_the_regenerate_command_prints_the_reference():
    printed = subprocess.run(
        [sys.executable, "-m", "fedrecsim.reference"], check=True, capture_output=True
    ).stdout.decode("utf-8")
    assert printed == reference_markdown()


def test_every_key_has_a_doc():
    """A key without a doc is listed with an empty meaning: every one here needs a param(doc=...)."""
    undocumented = sorted(
        {row.key if row.protocol is None else f"{row.key} ({row.protocol})"
         for name in built_in_protocols() for row in key_rows(name) if not row.meaning}
    )
    assert not undocumented, "keys without a doc: " + ", ".join(undocumented)


def test_keys_text_shows_type_default_range_and_meaning():
    text = keys_text("fcf").splitlines()
    bandwidth = text.index("  network.bandwidth_bps: float, default 0.0, >= 0")
    assert "0 = unlimited" in text[bandwidth + 1]
    latent = text.index("  protocol.d: integer, default 50, >= 1")
    assert text[latent + 1] == "      latent dimension"
    assert "  run.protocol: string, required" in text
    assert '  data.split: string, default "random", one of "random", "per_user", "leave_one_out", "users", "heldout_users"' in text


def test_keys_text_for_one_protocol_holds_the_common_tables_and_only_that_protocol():
    text = keys_text("fcf")
    headings = [line for line in text.splitlines() if line.startswith("[")]
    assert headings == [
        "[run]",
        "[data]",
        "[network]",
        "[network.latency]",
        "[network.links.<pair>]",
        "[[network.partitions]]",
        "[availability]",
        "[faults]",
        "[[faults.crash]]",
        "[[faults.byzantine]]",
        "[[faults.slow]]",
        '[protocol] with run.protocol = "fcf"',
    ]
    assert "protocol.k_presharing" not in text


def test_keys_text_without_a_protocol_holds_every_protocol():
    """Every protocol ``run.protocol`` accepts by name: the built-in ones and any a plugin installed (as the
    tutorial installs ``examples/secure_sum``; issue 29), whatever is installed where the suite runs."""
    headings = [line for line in keys_text().splitlines() if line.startswith("[protocol]")]
    assert headings == [f'[protocol] with run.protocol = "{name}"' for name in available_protocols()]
    assert set(built_in_protocols()) <= set(available_protocols())
    assert "  protocol.k_presharing: integer, default 10, >= 1" in keys_text()


def test_an_installed_plugin_is_in_keys_text_and_never_in_the_generated_reference(tmp_path, monkeypatch):
    """``fedrecsim keys`` shows the protocols installed here, a plugin's among them; docs/scenario-reference.md
    is generated from the built-in protocols only, so it is the same on every machine."""
    (tmp_path / "keys_plugin.py").write_text(
        "from dataclasses import dataclass\n"
        "from fedrecsim.sim import ProtocolSpec, param\n\n"
        "@dataclass(frozen=True)\n"
        "class Config:\n"
        "    shards: int = param(4, ge=1, doc='how many shards')\n\n"
        "async def run(ctx):\n"
        "    raise NotImplementedError\n\n"
        "PROTOCOL = ProtocolSpec('keys_plugin', Config, run, 'a plugin of the tests')\n"
    )
    info = tmp_path / "keys_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keys_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nkeys_plugin = keys_plugin:PROTOCOL\n")
    monkeypatch.syspath_prepend(tmp_path)
    assert "keys_plugin" in available_protocols()
    text = keys_text()
    assert '[protocol] with run.protocol = "keys_plugin"' in text
    assert "  protocol.shards: integer, default 4, >= 1" in text
    assert "keys_plugin" not in reference_markdown()


def test_an_unknown_protocol_is_a_config_error_naming_run_protocol():
    with pytest.raises(ConfigError) as caught:
        keys_text("no_such_protocol")
    assert caught.value.key_path == "run.protocol"
    assert "no_such_protocol" in str(caught.value)


def test_required_and_unset_defaults_are_named():
    assert _row("run.protocol").default == REQUIRED
    assert _row("data.min_per_user").default == UNSET
    assert _row("protocol.frac_bits", "dpmf").default == UNSET


def test_every_shown_default_is_accepted_for_its_key_and_means_the_default():
    """Setting each key of the common tables and fcf's table to the default shown changes nothing."""
    plain = parse_scenario({"run": {"protocol": "fcf"}}).to_table()
    checked = 0
    for row in key_rows("fcf"):
        if row.default in (REQUIRED, UNSET) or "<pair>" in row.key or "[i]" in row.key or row.key.startswith("network.latency."):
            continue
        tables = apply_overrides({"run": {"protocol": "fcf"}}, [f"{row.key}={row.default}"])
        table, key = row.key.split(".")
        assert parse_scenario(tables).to_table() == plain, row.key
        assert plain[table][key] == tomllib.loads(f"value = {row.default}")["value"], row.key
        checked += 1
    assert checked > 40


@pytest.mark.parametrize("model", sorted(LATENCY_MODELS))
def test_a_latency_table_with_the_keys_marked_for_its_model_is_accepted(model):
    example_values = {"float": 0.25, "array of float": [0.25]}
    table: dict[str, object] = {"model": model}
    for row in key_rows("fcf"):
        if row.table == "network.latency" and row.meaning.startswith(f"{model}:") and row.default == REQUIRED:
            table[row.key.rpartition(".")[2]] = example_values[row.type]
    assert len(table) > 1
    assert latency_from_table(table, "network.latency").model == model


def test_latency_model_choices_are_the_models_latency_from_table_knows():
    allowed = _row("network.latency.model").allowed
    assert allowed == "one of " + ", ".join(f'"{name}"' for name in LATENCY_MODELS)


def test_markdown_table_rows_keep_five_cells_when_a_meaning_holds_a_pipe():
    markdown = reference_markdown()
    assert r"S1 trusted recommender \| S2 static users" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    assert rows
    for line in rows:
        cells = re.split(r"(?<!\\)\|", line)[1:-1]
        assert len(cells) == 5, line


def test_markdown_names_the_generator_and_says_not_to_edit():
    first_lines = reference_markdown().splitlines()[:3]
    assert any(REGENERATE_COMMAND in line and "do not edit" in line for line in first_lines)


def test_run_protocol_names_every_built_in_protocol():
    """Its meaning listed four of the seven built-in protocols (no fedvae, privirec or secagg)."""
    meaning = _row("run.protocol").meaning
    assert all(re.search(rf"\b{name}\b", meaning) for name in built_in_protocols()), meaning
