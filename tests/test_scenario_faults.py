"""Fault keys of a scenario (issue 18): [network]'s duplication, reordering and partitions, [faults]'s
crashes, byzantine and slow parties, run.max_virtual_s -- what each builds, and every malformed value
refused with the key path that holds it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fedrecsim.errors import ConfigError
from fedrecsim.network.faults import Byzantine, Corruption, Crash
from fedrecsim.network.links import Constant, LinkEnds, LinkSpec, Partition
from fedrecsim.network.party import SERVER, Party, Role, user
from fedrecsim.scenario import load_scenario, parse_scenario


def _tables(**tables: dict[str, Any]) -> dict[str, Any]:
    return {"run": {"protocol": "fcf"}, **tables}


def _error(tables: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(tables)
    return str(caught.value)


def test_without_fault_keys_nothing_is_faulty() -> None:
    scenario = parse_scenario(_tables())
    assert scenario.run.max_virtual_s == 0.0
    assert (scenario.network.duplicate, scenario.network.reorder, scenario.network.reorder_delay_s) == (0.0, 0.0, 0.0)
    assert scenario.network.partitions == () and scenario.faults.slow_parties() == {}
    faults = scenario.faults.party_faults()
    assert faults.crashes == () and faults.byzantine == ()
    assert scenario.to_table()["faults"] == {"crash": [], "byzantine": [], "slow": []}


def test_link_faults_reach_every_link_and_a_role_pair_may_set_its_own() -> None:
    scenario = parse_scenario(_tables(network={
        "duplicate": 0.25, "reorder": 0.5, "reorder_delay_s": 2.0,
        "links": {"user->server": {"duplicate": 1.0}, "server-third_party": {"reorder": 0.0}},
    }))
    links = scenario.network.link_policy(seed=1)
    assert links.spec(Role.SERVER, Role.USER) == LinkSpec(Constant(0.0), duplicate=0.25, reorder=0.5, reorder_delay_s=2.0)
    assert links.spec(Role.USER, Role.SERVER) == LinkSpec(Constant(0.0), duplicate=1.0, reorder=0.5, reorder_delay_s=2.0)
    assert links.spec(Role.THIRD_PARTY, Role.SERVER).reorder == 0.0


def test_partitions_are_read_with_their_links() -> None:
    tables = _tables(network={"partitions": [
        {"from_s": 1, "until_s": 3.5, "links": ["user:2-server", "third_party->server"]},
        {"from_s": 10.0, "until_s": 11.0, "links": ["user-server"]},
    ]})
    links = parse_scenario(tables).network.link_policy(seed=1)
    assert links._partitions == (
        Partition(1.0, 3.5, (LinkEnds(user(2), Role.SERVER), LinkEnds(Role.SERVER, user(2)), LinkEnds(Role.THIRD_PARTY, Role.SERVER))),
        Partition(10.0, 11.0, (LinkEnds(Role.USER, Role.SERVER), LinkEnds(Role.SERVER, Role.USER))),
    )
    assert links.is_down(user(2), SERVER, 2.0) and not links.is_down(user(3), SERVER, 2.0)
    assert links.is_down(user(3), SERVER, 10.5)


def test_party_faults_are_read_into_rules() -> None:
    scenario = parse_scenario(_tables(faults={
        "crash": [{"party": "user:3", "kind": "fcf.item_gradients", "round": 2, "restart_after_s": 5, "keep_state": False},
                  {"party": "server:0"}],
        "byzantine": [{"party": "user:4", "corrupt": "huge", "kind": "fcf.item_gradients"}],
        "slow": [{"party": "user:5", "delay_s": 2}, {"party": "third_party:0", "delay_s": 0.5}],
    }))
    faults = scenario.faults.party_faults()
    assert faults.crashes == (Crash(user(3), "fcf.item_gradients", 2, 5.0, False), Crash(SERVER))
    assert faults.byzantine == (Byzantine(user(4), Corruption.HUGE, "fcf.item_gradients"),)
    assert scenario.faults.slow_parties() == {user(5): 2.0, Party(Role.THIRD_PARTY, 0): 0.5}
    links = scenario.network.link_policy(seed=1, slow=scenario.faults.slow_parties())
    assert links.transit(user(5), SERVER, 0, 1.0) == 3.0


def test_the_fault_tables_read_from_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "faulty.toml"
    path.write_text(
        '[run]\nprotocol = "fcf"\nmax_virtual_s = 100.0\n'
        '[network]\nduplicate = 0.1\n'
        '[[network.partitions]]\nfrom_s = 0.0\nuntil_s = 5.0\nlinks = ["user-server"]\n'
        '[[faults.crash]]\nparty = "user:1"\nkind = "fcf.register"\n'
        '[[faults.slow]]\nparty = "user:2"\ndelay_s = 1.5\n'
    )
    scenario = load_scenario(path)
    assert scenario.run.max_virtual_s == 100.0 and scenario.network.duplicate == 0.1
    assert scenario.faults.party_faults().crashes == (Crash(user(1), "fcf.register"),)
    assert scenario.faults.slow_parties() == {user(2): 1.5}
    assert load_scenario(path, ["run.max_virtual_s=50"]).run.max_virtual_s == 50.0


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (_tables(run={"protocol": "fcf", "max_virtual_s": -1.0}), "run.max_virtual_s: must be >= 0, got -1.0"),
        (_tables(network={"duplicate": 1.5}), "network.duplicate: must be >= 0 and <= 1, got 1.5"),
        (_tables(network={"reorder": 0.5}), "network.reorder_delay_s: must be > 0 seconds when reorder = 0.5 > 0"),
        (_tables(network={"links": {"user-server": {"reorder": 0.5}}}),
         "network.links.user-server.reorder_delay_s: must be > 0 seconds when reorder = 0.5 > 0"),
        (_tables(network={"links": {"user-server": {"duplicate": 2.0}}}),
         "network.links.user-server.duplicate: must be >= 0 and <= 1, got 2.0"),
        (_tables(network={"partitions": [{"from_s": 0.0, "until_s": 1.0}]}), "network.partitions[0].links: is required"),
        (_tables(network={"partitions": [{"from_s": 2.0, "until_s": 1.0, "links": ["user-server"]}]}),
         "network.partitions[0].until_s: must be > from_s = 2.0, got 1.0"),
        (_tables(network={"partitions": [{"from_s": 0.0, "until_s": 1.0, "links": []}]}),
         "network.partitions[0].links: must name at least one link (A->B or A-B), got ()"),
        (_tables(network={"partitions": [{"from_s": 0.0, "until_s": 1.0, "links": ["user-server", "user=server"]}]}),
         "network.partitions[0].links[1]: expected A->B or A-B, each a role (proxy, server, silo, third_party, user) "
         "or a party such as user:3, got 'user=server'"),
        (_tables(network={"partitions": [{"from_s": -1.0, "until_s": 1.0, "links": ["user-server"]}]}),
         "network.partitions[0].from_s: must be >= 0, got -1.0"),
        (_tables(network={"partitions": {"from_s": 0.0}}), "network.partitions: expected an array of PartitionTable, got { from_s = 0.0 }"),
        (_tables(faults={"crash": [{"party": "user3"}]}),
         "faults.crash[0].party: expected a party ROLE:INDEX (ROLE one of proxy, server, silo, third_party, user), e.g. user:3; got 'user3'"),
        (_tables(faults={"crash": [{"party": "user:3", "round": -1}]}), "faults.crash[0].round: must be >= 0, got -1"),
        (_tables(faults={"crash": [{"party": "user:3", "restart_after_s": -1.0}]}), "faults.crash[0].restart_after_s: must be >= 0, got -1.0"),
        (_tables(faults={"crash": [{"party": "user:3"}, {"party": "third_party:0", "restart_after_s": 1.0}]}),
         "faults.crash[1].restart_after_s: only users restart (the population restarts them); third_party:0 never does"),
        (_tables(faults={"crash": [{"party": "user:3", "colour": "red"}]}),
         "faults.crash[0].colour: unknown key; allowed keys here: keep_state, kind, party, restart_after_s, round"),
        (_tables(faults={"byzantine": [{"party": "user:3", "corrupt": "noise"}]}),
         'faults.byzantine[0].corrupt: got "noise"; allowed values: "nan", "huge", "shape", "dtype", "kind"'),
        (_tables(faults={"byzantine": [{"party": "user:3"}]}), "faults.byzantine[0].corrupt: is required"),
        (_tables(faults={"byzantine": [{"party": "u:3", "corrupt": "nan"}]}),
         "faults.byzantine[0].party: expected a party ROLE:INDEX (ROLE one of proxy, server, silo, third_party, user), e.g. user:3; got 'u:3'"),
        (_tables(faults={"slow": [{"party": "user:3", "delay_s": 0.0}]}), "faults.slow[0].delay_s: must be > 0, got 0.0"),
        (_tables(faults={"slow": [{"party": "user:3", "delay_s": 1.0}, {"party": "user:3", "delay_s": 2.0}]}),
         "faults.slow[1].party: user:3 is already slow (an earlier entry); give each party one delay"),
        (_tables(faults={"slow": [{"party": "nobody", "delay_s": 1.0}]}),
         "faults.slow[0].party: expected a party ROLE:INDEX (ROLE one of proxy, server, silo, third_party, user), e.g. user:3; got 'nobody'"),
        (_tables(faults={"loss": 0.1}), "faults.loss: unknown key; allowed keys here: byzantine, crash, slow"),
    ],
)
def test_each_malformed_fault_value_names_its_key(tables: dict[str, Any], message: str) -> None:
    assert _error(tables) == message


@pytest.mark.parametrize("table", ["crash", "byzantine"])
def test_a_fault_kind_must_be_a_kind_the_wire_knows(table: str) -> None:
    entry = {"party": "user:3", "kind": "fcf.gradient"} | ({"corrupt": "nan"} if table == "byzantine" else {})
    message = _error(_tables(faults={table: [entry]}))
    assert re.match(rf"^faults\.{table}\[0\]\.kind: no message kind 'fcf\.gradient'; known kinds: .*fcf\.item_gradients", message)
    assert not [kind for kind in message.partition("known kinds: ")[2].split(", ") if kind.startswith("test.")]


def test_a_scenario_file_that_is_not_toml_is_named_with_the_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "broken.toml"
    path.write_text('[run]\nprotocol = "fcf"\n[[faults.crash]\nparty = "user:1"\n')
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path} is not valid TOML: ") and "line 3" in str(caught.value)
