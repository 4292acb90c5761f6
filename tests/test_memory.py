"""A run's memory is estimated before it starts: a run that cannot fit is refused with one line naming the
keys that drive it, ``--memory-limit`` overrides the check, and an allocation that fails anyway is one line."""

from __future__ import annotations

import csv
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedrecsim.memory as memory
from fedrecsim.cli import main
from fedrecsim.errors import MemoryLimitError
from fedrecsim.memory import LIMIT_ENV, check_memory, estimate_memory
from fedrecsim.protocols import built_in_protocols, protocol_spec
from fedrecsim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
[run]
protocol = "fcf"
name = "memory"
rounds = 2
[data]
users = 30
items = 40
ratings = 700
[protocol]
d = 4
"""

MIB = 1 << 20


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture(autouse=True)
def no_limit_set() -> Iterator[None]:
    """``--memory-limit`` sets the variable for the process and its children: none before or after a test."""
    os.environ.pop(LIMIT_ENV, None)
    yield
    os.environ.pop(LIMIT_ENV, None)


@pytest.fixture
def small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with 64 MiB available: the tiny scenario fits (about 21 MiB), d = 100,000 does not."""
    monkeypatch.setattr(memory, "available_memory", lambda: (64.0 * MIB, "a test's small machine"))


def test_a_run_that_cannot_fit_is_refused_before_its_data_exists(scenario_file, tmp_path, capsys, monkeypatch, small_machine) -> None:
    import fedrecsim.runner as runner

    drawn: list[object] = []
    real_prepare = runner.prepare_data
    monkeypatch.setattr(runner, "prepare_data", lambda *args: drawn.append(args) or real_prepare(*args))
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", "--set", "protocol.d=100000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedrecsim: error: the run needs about ")
    assert "protocol.d = 100000" in err[0] and "a test's small machine" in err[0]
    assert "; --memory-limit GIB or off (env " in err[0]  # the limit is in GiB, as the estimate is
    assert drawn == [] and not out.exists() and list(tmp_path.iterdir()) == [scenario_file]
    # The same run at its own size fits, and runs (the check measured it, it did not refuse everything).
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0 and len(drawn) == 1


def test_memory_limit_overrides_the_check(scenario_file, tmp_path, monkeypatch, small_machine) -> None:
    # 1.2 GiB by the estimate (messages of a round: every user gets its rows of a 1.5 M-wide V): refused on
    # the small machine; --memory-limit 2 lets it start, and off lets it start too. Its rounds are cut to
    # nothing by the data: 2 users, 2 items.
    overrides = ["--set", "protocol.d=1500000", "--set", "data.users=2", "--set", "data.items=2", "--set", "data.ratings=4",
                 "--set", "run.rounds=1", "--set", "data.test_fraction=0.25", "--quiet"]
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "a"), *overrides]) == 2
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "b"), "--memory-limit", "2", *overrides]) == 0
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "c"), "--memory-limit", "off", *overrides]) == 0
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "d"), "--memory-limit", "0.001", *overrides]) == 2


def test_a_bad_memory_limit_is_one_line(scenario_file, tmp_path, capsys) -> None:
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "a"), "--memory-limit", "lots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fedrecsim: error: {LIMIT_ENV} (--memory-limit): expected GiB > 0 or off, got 'lots'"]


def test_inspect_refuses_before_it_plans_or_calibrates(scenario_file, capsys, monkeypatch, small_machine) -> None:
    import fedrecsim.inspect as inspect

    monkeypatch.setattr(inspect, "calibrate", lambda *args: pytest.fail("calibrated past the check"))
    monkeypatch.setattr(inspect, "prepare_data", lambda *args: pytest.fail("drew the data past the check"))
    assert main(["inspect", str(scenario_file), "--set", "protocol.d=100000000", "--set", 'protocol.feedback="implicit"']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "protocol.d = 100000000" in err[0] and "data.items = 40" in err[0]


def _scenario(protocol: str, **keys: object) -> object:
    table: dict[str, dict[str, object]] = {"run": {"protocol": protocol}, "data": {}, "protocol": {}}
    for key, value in keys.items():
        section, name = key.split("__")
        table[section][name] = value
    return parse_scenario(table)


@pytest.mark.parametrize("protocol", built_in_protocols())
def test_every_protocol_declares_its_memory_and_it_grows_with_the_data(protocol) -> None:
    """Metamorphic: ten times the items or the users never shrinks an estimate, and grows it (every built-in
    protocol; a plugin's, like examples/secure_sum, may declare none and is checked on its data alone)."""
    assert protocol_spec(protocol).memory is not None
    base = _scenario(protocol)
    shape = (200, 100, 2000, 200)
    estimate = estimate_memory(base, shape)
    assert estimate.declared and estimate.total > 0
    assert [item.bytes for item in estimate.items] == sorted((item.bytes for item in estimate.items), reverse=True)
    for bigger in ((2000, 100, 20000, 2000), (200, 1000, 2000, 200)):
        assert estimate_memory(base, bigger).total > estimate.total


@pytest.mark.parametrize("protocol, key, value", [
    ("fcf", "protocol__d", 10**6), ("dpmf", "protocol__d", 10**6), ("fedvae", "protocol__hidden", 60000),
    ("ldp_implicit", "protocol__k", 100000), ("privirec", "protocol__k", 100000), ("secagg", "protocol__length", 10**9),
])
def test_the_key_that_grows_the_estimate_is_named(protocol, key, value, monkeypatch) -> None:
    monkeypatch.setenv(LIMIT_ENV, "1")
    scenario = _scenario(protocol, **{key: value})
    with pytest.raises(MemoryLimitError) as raised:
        check_memory(scenario, (200, 100, 2000, 200))
    assert f"{key.replace('__', '.')} = {value}" in str(raised.value)
    assert check_memory(_scenario(protocol), (200, 100, 2000, 200)) is not None  # the default fits in 1 GiB


def test_the_memory_available_is_the_least_of_what_limits_it() -> None:
    """In a child under RLIMIT_AS: the address-space limit is the figure, once below MemAvailable."""
    code = (
        "import resource; import fedrecsim.memory as m; before = m.available_memory(); "
        "resource.setrlimit(resource.RLIMIT_AS, (int(m._status_bytes('VmSize')) + 2**30, resource.RLIM_INFINITY)); "
        "after = m.available_memory(); print(before[1]); print(after[1]); print(int(after[0]))"
    )
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")
    assert lines[1] == "the address-space limit (RLIMIT_AS, ulimit -v)"
    assert 0.9 * 2**30 < int(lines[2]) <= 2**30


def _limited(gib: float) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (int(gib * 2**30), resource.RLIM_INFINITY))


@pytest.mark.timeout(120)
def test_an_allocation_that_fails_anyway_is_one_line(scenario_file, tmp_path) -> None:
    """With the check off, under a 3 GiB address-space limit, d = 100,000,000 fails in numpy: exit 2, one line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), LIMIT_ENV: "off"}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "fedrecsim_entry", "run", str(scenario_file), "--out", str(out), "--quiet",
         "--set", "protocol.d=100000000"],
        capture_output=True, text=True, env=env, timeout=100, preexec_fn=lambda: _limited(3),
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedrecsim: error: out of memory while running: Unable to allocate")
    assert not out.exists() and list(tmp_path.iterdir()) == [scenario_file]


@pytest.mark.timeout(120)
def test_a_sweep_does_not_allocate_past_the_check(scenario_file, tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), LIMIT_ENV: "0.05"}
    done = subprocess.run(
        [sys.executable, "-m", "fedrecsim_entry", "sweep", str(scenario_file), "--grid", "protocol.d=4,100000",
         "--workers", "1", "--quiet", "--out", str(tmp_path / "sweep")],
        capture_output=True, text=True, env=env, timeout=100,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    with open(tmp_path / "sweep" / "sweep.csv", newline="") as handle:
        rows = {row["protocol.d"]: row for row in csv.DictReader(handle)}
    assert rows["4"]["status"] == "complete"
    assert rows["100000"]["error"].startswith("MemoryLimitError: the run needs about ")
