"""Scenario files: validation names the key path; overrides are checked like the file."""

from __future__ import annotations

import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.scenario import apply_overrides, load_scenario, parse_override, parse_scenario


@pytest.mark.parametrize(
    "table, key, value, fragment",
    [
        ("run", "rounds", 0, "run.rounds: must be >= 1"),
        ("run", "rounds", "ten", "run.rounds: expected an integer"),
        ("run", "protocol", "nope", "run.protocol: unknown protocol 'nope'"),
        ("run", "colour", "red", "run.colour: unknown key"),
        ("data", "source", "netflix-prize", "data.source: got 'netflix-prize'; allowed values"),
        ("data", "test_fraction", 1.0, "data.test_fraction: must be > 0 and < 1"),
        ("network", "loss", 1.0, "network.loss"),
        ("network", "latency", {"model": "gaussian"}, "network.latency.model"),
        ("network", "latency", {"model": "lognormal", "median_s": -1.0, "sigma": 0.5}, "network.latency.median_s"),
        ("network", "links", {"user-moon": {"loss": 0.1}}, "network.links.user-moon"),
        ("network", "links", {"user-server": {"loss": 2.0}}, "network.links.user-server.loss"),
        ("availability", "p_join", 1.5, "availability.p_join: must be >= 0 and <= 1"),
        ("availability", "model", "poisson", "availability.model"),
        ("availability", "dropout", -0.1, "availability.dropout"),
        ("availability", "model", "trace", "availability.trace"),
        ("protocol", "d", 0, "protocol.d"),
    ],
)
def test_each_bad_key_names_its_path(tiny_fcf, table, key, value, fragment) -> None:
    tiny_fcf[table][key] = value
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        parse_scenario(tiny_fcf)


def test_unknown_table_and_missing_protocol() -> None:
    with pytest.raises(ConfigError, match="extra: unknown table"):
        parse_scenario({"run": {"protocol": "fcf"}, "extra": {}})
    with pytest.raises(ConfigError, match="run.protocol: is required"):
        parse_scenario({"run": {"rounds": 3}})


def test_defaults_fill_every_key_but_the_protocol() -> None:
    scenario = parse_scenario({"run": {"protocol": "fcf"}})
    table = scenario.to_table()
    assert table["run"]["seed"] == 0 and table["network"]["resolution_s"] == 0.001
    assert table["availability"]["model"] == "always" and table["protocol"]["d"] == 50


def test_overrides_are_toml_literals_and_validated(tmp_path) -> None:
    assert parse_override("run.rounds=12") == (["run", "rounds"], 12)
    assert parse_override("network.latency={model='constant', seconds=0.5}") == (
        ["network", "latency"], {"model": "constant", "seconds": 0.5},
    )
    assert parse_override("run.name=study") == (["run", "name"], "study")
    path = tmp_path / "s.toml"
    path.write_text('[run]\nprotocol = "fcf"\n')
    assert load_scenario(path, ["run.rounds=3", "protocol.max_users=5"]).protocol.max_users == 5
    with pytest.raises(ConfigError, match="availability.p_leave"):
        load_scenario(path, ["availability.p_leave=2"])
    with pytest.raises(ConfigError, match="override must look like"):
        apply_overrides({}, ["rounds"])


def test_missing_and_malformed_files(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\nprotocol = 'fcf'")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(bad)
