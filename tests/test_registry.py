"""The protocol registry: built-in names, "module:ATTRIBUTE", installed entry points, and what each
failure says."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim import cli
from fedrecsim.errors import ConfigError
from fedrecsim.protocols import (
    ENTRY_POINT_GROUP,
    ProtocolSpec,
    available_protocols,
    built_in_protocols,
    installed_protocols,
    protocol_spec,
)

BUILT_IN = ("dpmf", "fcf", "fedvae", "ldp_implicit", "privirec", "prototypes", "secagg")

# A protocol written only against the public API: one "round" per scenario round, no messages.
PROTOCOL_SOURCE = '''
from dataclasses import dataclass

from fedrecsim.sim import Outcome, ProtocolSpec, param


@dataclass(frozen=True)
class Config:
    step: float = param(1.0, gt=0, doc="what each round adds")


async def run(ctx):
    rows = [{{"round": r, "value": r * ctx.config.step}} for r in range(1, ctx.rounds + 1)]
    return Outcome(ctx.rounds, rows, {{"value": rows[-1]["value"]}})


PROTOCOL = ProtocolSpec("{name}", Config, run, "a protocol of the user's own")
NOT_A_SPEC = run
'''


def _module(directory: Path, name: str, source: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(source))


def _distribution(directory: Path, dist: str, entries: dict[str, str]) -> None:
    """An installed distribution, as pip leaves it: a dist-info folder with METADATA and entry_points.txt."""
    info = directory / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{name} = {value}" for name, value in entries.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


def _tiny(protocol: str, **protocol_keys: object) -> dict[str, object]:
    return {
        "run": {"protocol": protocol, "rounds": 3},
        "data": {"source": "synthetic", "users": 5, "items": 8, "ratings": 20},
        "protocol": dict(protocol_keys),
    }


def test_built_in_protocols_are_available_with_a_one_line_description() -> None:
    assert built_in_protocols() == BUILT_IN
    assert set(BUILT_IN) <= set(available_protocols())
    for name in BUILT_IN:
        spec = protocol_spec(name)
        assert spec.name == name
        assert spec.description and "\n" not in spec.description


def test_an_unknown_name_lists_the_built_in_and_installed_names_and_the_module_form(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_listed", PROTOCOL_SOURCE.format(name="listed"))
    _distribution(tmp_path, "listed_dist", {"listed": "reg_listed:PROTOCOL"})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(ConfigError) as raised:
        fedrecsim.parse_scenario(_tiny("no_such_protocol"))
    assert raised.value.key_path == "run.protocol"
    message = str(raised.value)
    assert "'no_such_protocol'" in message
    assert f"built-in: {', '.join(BUILT_IN)};" in message
    assert "listed" in message and ENTRY_POINT_GROUP in message
    assert "package.module:ATTRIBUTE" in message


def test_module_attribute_names_a_protocol_spec_that_runs(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_by_path", PROTOCOL_SOURCE.format(name="by_path"))
    monkeypatch.syspath_prepend(tmp_path)
    spec = protocol_spec("reg_by_path:PROTOCOL")
    assert isinstance(spec, ProtocolSpec) and spec.name == "by_path"
    result = fedrecsim.run(_tiny("reg_by_path:PROTOCOL", step=2.5))
    assert result.metrics == {"value": 7.5}
    assert result.result["protocol"] == "reg_by_path:PROTOCOL"


def test_module_attribute_failures_say_which(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_broken", "import math\nRESULT = 1 / 0\n")
    _module(tmp_path, "reg_other", PROTOCOL_SOURCE.format(name="other"))
    monkeypatch.syspath_prepend(tmp_path)
    cases = {
        "reg_absent:PROTOCOL": "importing module 'reg_absent' failed: ModuleNotFoundError",
        "reg_broken:PROTOCOL": "importing module 'reg_broken' failed: ZeroDivisionError",
        "reg_other:MISSING": "module 'reg_other' has no attribute 'MISSING'",
        "reg_other:NOT_A_SPEC": "reg_other:NOT_A_SPEC is a function, not a fedrecsim ProtocolSpec",
        "reg_other:": 'must look like "package.module:ATTRIBUTE"',
    }
    for name, expected in cases.items():
        with pytest.raises(ConfigError, match="run.protocol") as raised:
            protocol_spec(name)
        assert expected in str(raised.value), name
    with pytest.raises(ConfigError) as raised:
        protocol_spec("reg_broken:PROTOCOL")
    assert isinstance(raised.value.__cause__, ZeroDivisionError)  # the original error is kept


def test_an_installed_entry_point_registers_a_protocol_by_name(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_installed", PROTOCOL_SOURCE.format(name="installed_one"))
    _distribution(tmp_path, "installed_dist", {"installed_one": "reg_installed:PROTOCOL"})
    assert "installed_one" not in available_protocols()
    monkeypatch.syspath_prepend(tmp_path)
    assert "installed_one" in installed_protocols()
    assert available_protocols() == tuple(sorted({*BUILT_IN, *installed_protocols()}))
    assert protocol_spec("installed_one").description == "a protocol of the user's own"
    result = fedrecsim.run(_tiny("installed_one"))
    assert result.metrics == {"value": 3.0}


def test_an_installed_package_cannot_shadow_a_built_in(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_shadow", PROTOCOL_SOURCE.format(name="fcf"))
    _distribution(tmp_path, "shadow_dist", {"fcf": "reg_shadow:PROTOCOL"})
    monkeypatch.syspath_prepend(tmp_path)
    assert protocol_spec("fcf") is protocol_spec("fedrecsim.protocols.fcf.protocol:PROTOCOL")
    assert "fcf" not in installed_protocols()


def test_a_name_two_installed_packages_claim_is_refused_naming_both(tmp_path, monkeypatch) -> None:
    _module(tmp_path, "reg_twin_a", PROTOCOL_SOURCE.format(name="twin"))
    _module(tmp_path, "reg_twin_b", PROTOCOL_SOURCE.format(name="twin"))
    _distribution(tmp_path, "twin_a", {"twin": "reg_twin_a:PROTOCOL"})
    _distribution(tmp_path, "twin_b", {"twin": "reg_twin_b:PROTOCOL"})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(ConfigError, match="run.protocol") as raised:
        protocol_spec("twin")
    assert "reg_twin_a:PROTOCOL" in str(raised.value) and "reg_twin_b:PROTOCOL" in str(raised.value)


def test_an_entry_point_that_fails_to_load_is_named(tmp_path, monkeypatch) -> None:
    _distribution(tmp_path, "gone_dist", {"gone": "reg_gone_module:PROTOCOL"})
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(ConfigError, match="run.protocol") as raised:
        protocol_spec("gone")
    message = str(raised.value)
    assert "installed protocol 'gone'" in message and "reg_gone_module" in message


def test_the_protocol_listing_survives_a_broken_installed_protocol(tmp_path, monkeypatch, capsys) -> None:
    _distribution(tmp_path, "broken_dist", {"broken": "no_such_module_here:PROTOCOL"})
    monkeypatch.syspath_prepend(tmp_path)
    assert cli.main(["protocols"]) == 0
    listed = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    assert listed["broken"].startswith("(cannot be loaded:") and "no_such_module_here" in listed["broken"]
    assert listed["fcf"] == protocol_spec("fcf").description
