"""Scenario files: validation names the key path; overrides are checked like the file."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

import fedrecsim
from fedrecsim.errors import ConfigError
from fedrecsim.network.availability import BernoulliChurn, MarkovChurn
from fedrecsim.network.party import Role
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


@pytest.mark.parametrize("table, key", [("run", "rounds"), ("run", "seed"), ("protocol", "d")])
def test_a_boolean_is_not_an_integer(tiny_fcf, table, key) -> None:
    tiny_fcf[table][key] = True
    with pytest.raises(ConfigError, match=f"{table}.{key}: expected an integer, got True"):
        parse_scenario(tiny_fcf)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_round_timeout_must_be_finite(tmp_path, value) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f'[run]\nprotocol = "fcf"\nround_timeout_s = {value}\n')
    with pytest.raises(ConfigError, match="run.round_timeout_s: expected a finite number"):
        load_scenario(path)


def test_an_undirected_link_override_covers_both_directions() -> None:
    network = {"links": {"user-server": {"loss": 0.25, "bandwidth_bps": 8000.0}}}
    links = parse_scenario({"run": {"protocol": "fcf"}, "network": network}).network.link_policy(seed=0)
    for src, dst in ((Role.USER, Role.SERVER), (Role.SERVER, Role.USER)):
        assert (links.spec(src, dst).loss, links.spec(src, dst).bandwidth_bps) == (0.25, 8000.0)
    assert links.spec(Role.USER, Role.PROXY).loss == 0.0


def test_a_directed_link_override_covers_only_its_direction() -> None:
    network = {"loss": 0.1, "links": {"user->server": {"loss": 0.5}}}
    links = parse_scenario({"run": {"protocol": "fcf"}, "network": network}).network.link_policy(seed=0)
    assert links.spec(Role.USER, Role.SERVER).loss == 0.5
    assert links.spec(Role.SERVER, Role.USER).loss == 0.1


def test_a_per_link_loss_override_loses_messages_on_that_link_only(tiny_fcf) -> None:
    tiny_fcf["network"]["links"] = {"user->server": {"loss": 0.5}}
    result = fedrecsim.run(tiny_fcf, transcript=True)
    statuses: dict[tuple[str, str], Counter] = {}
    for row in result.ledger.transcript:
        statuses.setdefault((row.src.role.value, row.dst.role.value), Counter())[row.status] += 1
    up, down = statuses[("user", "server")], statuses[("server", "user")]
    # 5 rounds x 40 replies plus 40 joins and 40 registrations, each lost with probability 1/2.
    assert 0.35 < up["dropped:lost"] / sum(up.values()) < 0.65
    assert down["dropped:lost"] == 0 and down["delivered"] > 0


def test_churn_follows_the_configured_probabilities() -> None:
    availability = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.3, "initial_online": 0.9}
    churn = parse_scenario({"run": {"protocol": "fcf"}, "availability": availability}).availability.churn()
    assert isinstance(churn, BernoulliChurn)
    assert (churn.p_join, churn.p_leave, churn.p_initial) == (0.2, 0.3, 0.9)
    markov = {"model": "markov", "mean_on_s": 10.0, "mean_off_s": 30.0}
    churn = parse_scenario({"run": {"protocol": "fcf"}, "availability": markov}).availability.churn()
    assert isinstance(churn, MarkovChurn) and (churn.mean_on_s, churn.mean_off_s) == (10.0, 30.0)


def test_with_seed_changes_the_seed_and_nothing_else(tiny_fcf) -> None:
    scenario = parse_scenario(tiny_fcf)
    reseeded = scenario.with_seed(9)
    assert reseeded.run.seed == 9 and scenario.run.seed == 3
    assert reseeded == dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, seed=9))
