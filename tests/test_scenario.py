"""Scenario files: validation names the key path; overrides are checked like the file."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections import Counter

import pytest

import fedrecsim
from fedrecsim.errors import ConfigError
from fedrecsim.network.availability import (
    AlwaysOnline,
    BernoulliChurn,
    LogNormalCompute,
    MarkovChurn,
    MidRoundDropout,
    NoComputeDelay,
    Trace,
)
from fedrecsim.network.links import Constant
from fedrecsim.network.party import Role, user
from fedrecsim.scenario import apply_overrides, load_scenario, parse_override, parse_scenario, read_tables


@pytest.mark.parametrize(
    "table, key, value, fragment",
    [
        ("run", "rounds", 0, "run.rounds: must be >= 1"),
        ("run", "rounds", "ten", "run.rounds: expected an integer"),
        ("run", "protocol", "nope", "run.protocol: unknown protocol 'nope'"),
        ("run", "colour", "red", "run.colour: unknown key"),
        ("data", "source", "netflix-prize", 'data.source: got "netflix-prize"; allowed values'),
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
    with pytest.raises(ConfigError, match=f"{table}.{key}: expected an integer, got true"):
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


def _config_error(call, *args) -> ConfigError:
    with pytest.raises(ConfigError) as excinfo:
        call(*args)
    return excinfo.value


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "must not be empty"),
        (".", "must not be . or .."),
        ("..", "must not be . or .."),
        ("a/b", "must not contain a path separator"),
        ("a\\b", "must not contain a path separator"),
        ("a\tb", "must be printable (no control characters)"),
        ("x" * 201, "must be at most 200 characters"),
    ],
)
def test_a_run_name_that_cannot_name_a_folder_is_refused(name, problem) -> None:
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf", "name": name}})
    assert str(error) == f"run.name: {problem}, got {name!r} (it names the result folder)"


@pytest.mark.parametrize("name", ["x" * 200, "...", "a.b", "study 1", "Übung-2"])
def test_a_run_name_that_can_name_a_folder_is_kept(name) -> None:
    assert parse_scenario({"run": {"protocol": "fcf", "name": name}}).run.name == name


def test_a_scenario_that_is_not_a_table_is_refused() -> None:
    error = _config_error(parse_scenario, ["run"])
    assert (error.key_path, str(error)) == ("", "a scenario must be a table of tables")


def test_errors_about_tables_say_what_is_allowed() -> None:
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "extra": {}})
    assert str(error) == "extra: unknown table; allowed tables: run, data, network, availability, faults, protocol"
    required = "run.protocol: is required (one of the registered protocols)"
    assert str(_config_error(parse_scenario, {"run": {"rounds": 3}})) == required
    assert str(_config_error(parse_scenario, {"data": {}})) == required
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "data": 5})
    assert str(error) == "data: expected a table, got 5"


def test_an_override_reaches_a_nested_table_and_creates_missing_ones() -> None:
    tables = {"network": {"latency": {"model": "constant", "seconds": 0.0}}}
    apply_overrides(tables, ["network.latency.seconds=0.5", "data.users=7"])
    assert tables == {"network": {"latency": {"model": "constant", "seconds": 0.5}}, "data": {"users": 7}}


def test_an_override_cannot_set_a_key_inside_a_value() -> None:
    error = _config_error(apply_overrides, {"run": {"rounds": 3}}, ["run.rounds.limit=4"])
    assert str(error) == "run.rounds: is a value, not a table; cannot set a key in it"
    error = _config_error(apply_overrides, {"run": 5}, ["run.rounds=4"])
    assert str(error) == "run: is a value, not a table; cannot set a key in it"


@pytest.mark.parametrize(
    "text, key",
    [("rounds=3", "rounds"), ("run.rounds", "run.rounds"), ("run..rounds=3", "run..rounds"), (".rounds=3", ".rounds")],
)
def test_a_malformed_override_is_refused(text, key) -> None:
    error = _config_error(parse_override, text)
    assert str(error) == f"{key}: an override must look like table.key=value, got {text!r}"


def test_a_scenario_file_that_cannot_be_read_is_named(tmp_path) -> None:
    cases = [
        (tmp_path / "none.toml", f"scenario file {tmp_path / 'none.toml'} does not exist"),
        (tmp_path, f"scenario file {tmp_path} is a folder, not a TOML file"),
        (tmp_path / ("x" * 300), f"scenario file {tmp_path / ('x' * 300)} cannot be read: File name too long"),
    ]
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"[run]\n\xff\xfe")
    cases.append((binary, f"{binary} is not a UTF-8 text file (byte 6); is it a TOML scenario?"))
    for path, message in cases:
        error = _config_error(read_tables, path)
        assert (error.key_path, str(error)) == ("", message)
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\n")
    error = _config_error(read_tables, bad)
    assert error.key_path == "" and str(error).startswith(f"{bad} is not valid TOML: ")


def test_relative_file_paths_are_taken_from_the_scenario_files_folder(tmp_path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    path = folder / "s.toml"
    path.write_text(
        '[run]\nprotocol = "fcf"\n'
        '[data]\nsource = "npz"\npath = "ratings.npz"\n'
        '[availability]\nmodel = "trace"\ntrace = "sessions/trace.csv"\npath = "not-a-path-key.txt"\n'
        '[network.latency]\nmodel = "empirical"\nfile = "delays.txt"\n'
        '[network.links.user-server.latency]\nmodel = "empirical"\nfile = "up.txt"\n'
        '[network.links.server-user]\nloss = 0.1\n'
    )
    tables = read_tables(path)
    assert tables["data"]["path"] == str(folder / "ratings.npz")
    assert tables["availability"]["trace"] == str(folder / "sessions" / "trace.csv")
    assert tables["network"]["latency"]["file"] == str(folder / "delays.txt")
    assert tables["network"]["links"]["user-server"]["latency"]["file"] == str(folder / "up.txt")
    assert tables["network"]["links"]["server-user"] == {"loss": 0.1}
    assert tables["availability"]["path"] == "not-a-path-key.txt"


@pytest.mark.parametrize("value", ['"/srv/data/ratings.npz"', '""', "5"])
def test_absolute_empty_and_non_string_paths_are_kept_as_written(tmp_path, value) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f'[run]\nprotocol = "fcf"\n[data]\npath = {value}\n[availability]\nmodel = "always"\n')
    assert read_tables(path)["data"]["path"] == tomllib.loads(f"v = {value}")["v"]


def test_a_table_without_its_path_key_reads_fine(tmp_path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[run]\nprotocol = "fcf"\n[data]\nusers = 40\n[network.links.user-server]\nloss = 0.1\n')
    assert read_tables(path)["data"] == {"users": 40}


def test_a_trace_model_needs_a_trace_file(tmp_path) -> None:
    message = "availability.trace: model = 'trace' needs the path of a trace CSV"
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "availability": {"model": "trace"}})
    assert str(error) == message
    path = tmp_path / "s.toml"
    path.write_text('[run]\nprotocol = "fcf"\n[availability]\nmodel = "trace"\ntrace = ""\n')
    assert str(_config_error(load_scenario, path)) == message


def test_a_trace_model_replays_the_trace_file_next_to_the_scenario(tmp_path) -> None:
    (tmp_path / "trace.csv").write_text("party,online_from_s,online_until_s\nuser:0,0,10\nuser:1,5,inf\n")
    path = tmp_path / "s.toml"
    path.write_text('[run]\nprotocol = "fcf"\n[availability]\nmodel = "trace"\ntrace = "trace.csv"\n')
    churn = load_scenario(path).availability.churn()
    assert isinstance(churn, Trace)
    assert churn.intervals(user(0)) == ((0.0, 10.0),) and churn.intervals(user(1)) == ((5.0, math.inf),)


def test_everyone_is_online_by_default() -> None:
    assert isinstance(parse_scenario({"run": {"protocol": "fcf"}}).availability.churn(), AlwaysOnline)


@pytest.mark.parametrize("dropout, p", [(0.0, None), (0.5, 0.5), (1.0, 1.0)])
def test_mid_round_dropout_exists_only_when_its_chance_is_positive(dropout, p) -> None:
    availability = {"dropout": dropout}
    crash = parse_scenario({"run": {"protocol": "fcf"}, "availability": availability}).availability.mid_round_dropout()
    assert (None if crash is None else crash.p) == p
    assert crash is None or isinstance(crash, MidRoundDropout)


def test_compute_time_is_log_normal_with_the_configured_parameters() -> None:
    availability = {"compute_median_s": 0.5, "compute_sigma": 0.25, "slow_fraction": 0.1, "slow_factor": 4.0}
    compute = parse_scenario({"run": {"protocol": "fcf"}, "availability": availability}).availability.compute_time()
    assert isinstance(compute, LogNormalCompute)
    assert (compute.median_s, compute.sigma, compute.slow_fraction, compute.slow_factor) == (0.5, 0.25, 0.1, 4.0)
    default = parse_scenario({"run": {"protocol": "fcf"}}).availability.compute_time()
    assert isinstance(default, NoComputeDelay)


@pytest.mark.parametrize("key", ["moon-user", "user-moon", "userserver", "user=>server", "user->"])
def test_a_link_key_must_name_two_roles(key) -> None:
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "network": {"links": {key: {"loss": 0.1}}}})
    roles = "proxy, server, silo, third_party, user"
    assert str(error) == f"network.links.{key}: expected ROLE-ROLE or ROLE->ROLE with roles among {roles}"


def test_a_link_entry_must_be_a_table() -> None:
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "network": {"links": {"user-server": 0.5}}})
    assert str(error) == "network.links.user-server: expected a table with latency, bandwidth_bps, loss, duplicate, reorder and/or reorder_delay_s"
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "network": {"links": "user-server"}})
    assert str(error) == 'network.links: expected a table, got "user-server"'


def test_a_link_override_sets_its_own_latency_and_inherits_what_it_leaves_unset() -> None:
    network = {
        "latency": {"model": "constant", "seconds": 0.01}, "loss": 0.1, "bandwidth_bps": 1000.0,
        "links": {"user->server": {"latency": {"model": "constant", "seconds": 0.2}}},
    }
    links = parse_scenario({"run": {"protocol": "fcf"}, "network": network}).network.link_policy(seed=0)
    up, down = links.spec(Role.USER, Role.SERVER), links.spec(Role.SERVER, Role.USER)
    assert (up.latency, up.loss, up.bandwidth_bps) == (Constant(0.2), 0.1, 1000.0)
    assert (down.latency, down.loss, down.bandwidth_bps) == (Constant(0.01), 0.1, 1000.0)


def test_a_bad_link_latency_names_its_link() -> None:
    network = {"links": {"user-server": {"latency": {"model": "gaussian"}}}}
    error = _config_error(parse_scenario, {"run": {"protocol": "fcf"}, "network": network})
    assert error.key_path == "network.links.user-server.latency.model"
    assert str(error).startswith("network.links.user-server.latency.model: is \"gaussian\"; allowed models: ")
