"""Runs over real loopback TCP with the parties in three OS processes (``--transport tcp``).

Each run starts three child processes on 127.0.0.1 and takes a few wall seconds, most of it the children
importing fedrecsim; every run has a wall-clock budget (``run.max_virtual_s``), and every test checks that
no child process outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedrecsim.cli import main
from fedrecsim.errors import ConfigError, PartyTimeout
from fedrecsim.launcher import run_tcp
from fedrecsim.runner import run

# Generous real-clock deadlines: a round ends as soon as every reply is in, so they cost nothing unless a
# process stalls -- and no user may miss a round because the machine is busy.
_TIMING = {"rounds": 3, "round_gap_s": 0.01, "round_timeout_s": 30.0, "max_virtual_s": 120.0}


def _children() -> list[int]:
    """The launcher's children this process started and that still run (Linux /proc); other tests' pool
    workers do not count."""
    return [pid for pid in _pids() if _parent(pid) == os.getpid() and "fedrecsim.launcher" in _cmdline(pid) and _state(pid) != "Z"]


def _fcf() -> dict:
    return {
        "run": {"protocol": "fcf", "seed": 11, **_TIMING},
        "data": {"users": 24, "items": 40, "ratings": 400},
        "protocol": {"d": 4},
    }


def _dpmf_s2() -> dict:
    return {
        "run": {"protocol": "dpmf", "seed": 12, **_TIMING},
        "data": {"users": 24, "items": 40, "ratings": 400},
        "protocol": {"scenario": "S2", "d": 4, "epsilon": 1.0},
    }


def _assert_sockets_carry_the_ledger_bytes(result: dict) -> None:
    """Every message crosses processes here, so each process's ledger bytes are its sockets' payload bytes."""
    processes = result["transport"]["processes"]
    for process in processes:
        assert process["ledger_sent_bytes"] == process["sockets"]["sent_payload_bytes"] > 0
        assert process["ledger_recv_bytes"] == process["sockets"]["recv_payload_bytes"] > 0
    ledger = result["ledger"]["roles"]
    assert sum(process["sockets"]["sent_payload_bytes"] for process in processes) == sum(role["sent_bytes"] for role in ledger.values())
    assert sum(process["sockets"]["recv_payload_bytes"] for process in processes) == sum(role["recv_bytes"] for role in ledger.values())


@pytest.mark.parametrize(
    ("tables", "processes", "model"),
    [
        (_fcf, "server,users,users", ("item_factors", "user_factors")),
        (_dpmf_s2, "server,third_party,users", ("item_factors", "user_factors")),
    ],
    ids=["fcf", "dpmf-S2"],
)
def test_a_run_over_tcp_in_three_processes_ends_with_the_simulated_model(tables, processes: str, model: tuple[str, ...]) -> None:
    tcp = run_tcp(tables(), processes=processes)
    simulated = run(tables())
    for name in model:
        assert np.array_equal(tcp.outcome.state[name], simulated.outcome.state[name]), name
    assert tcp.metrics == {name: value for name, value in simulated.metrics.items() if name in tcp.metrics}
    assert tcp.metrics["participants"] == 24 and tcp.metrics["missing"] == 0
    # The same messages of the same sizes: envelopes carry sent_at as a fixed-size float.
    assert tcp.result["ledger"]["parties"] == simulated.result["ledger"]["parties"]
    assert tcp.result["ledger"]["kinds"] == simulated.result["ledger"]["kinds"]
    assert len(tcp.result["transport"]["processes"]) == 3
    _assert_sockets_carry_the_ledger_bytes(tcp.result)
    assert tcp.result["rounds_completed"] == 3
    assert _children() == []


def test_a_protocol_without_tcp_entries_is_refused_before_anything_starts() -> None:
    tables = {"run": {"protocol": "ldp_implicit", **_TIMING}, "data": {"users": 10, "items": 20, "ratings": 100}}
    with pytest.raises(ConfigError, match="ldp_implicit: TCP is not supported for this protocol yet") as info:
        run_tcp(tables)
    assert info.value.key_path == "run.protocol"
    assert "dpmf, fcf" in str(info.value)
    assert _children() == []


@pytest.mark.parametrize(
    ("override", "key_path", "allowed"),
    [
        (("protocol", "scenario", "S3"), "protocol.scenario", ""),
        (("network", "loss", 0.1), "network.loss", "leave it at 0.0"),
        (("network", "latency", {"model": "constant", "seconds": 0.05}), "network.latency",
         'leave it at { model = "constant", seconds = 0.0 }'),
        (("availability", "model", "bernoulli"), "availability.model", 'got "bernoulli", needs "always"'),
        (("availability", "dropout", 0.1), "availability.dropout", "got 0.1, needs 0.0"),
        (("faults", "crash", [{"party": "user:1"}]), "faults", ""),
    ],
)
def test_what_the_real_network_cannot_do_is_refused_naming_the_key(override: tuple, key_path: str, allowed: str) -> None:
    """The error names the key and, in a scenario file's spelling, the value it must keep."""
    tables = _dpmf_s2()
    table, key, value = override
    tables.setdefault(table, {})[key] = value
    with pytest.raises(ConfigError) as info:
        run_tcp(tables)
    assert info.value.key_path == key_path and allowed in str(info.value)
    assert _children() == []


def test_a_process_that_fails_stops_the_run_with_its_typed_error_and_no_process_is_left() -> None:
    tables = _fcf()
    # A deadline no real network can meet: the server gives up waiting for the users' joins.
    tables["run"]["round_timeout_s"] = 1e-6
    with pytest.raises(PartyTimeout, match=r"process 0 \(server\): server:0 waited for every user's join"):
        run_tcp(tables, processes="server,users")
    assert _children() == []


def test_the_cli_runs_over_tcp_and_writes_the_transport_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "fcf.toml"
    scenario.write_text(
        '[run]\nprotocol = "fcf"\nname = "tcp"\nseed = 3\nrounds = 2\nround_gap_s = 0.01\nround_timeout_s = 30.0\n'
        'max_virtual_s = 120.0\n[data]\nusers = 12\nitems = 20\nratings = 150\n[protocol]\nd = 3\n'
    )
    out = tmp_path / "result"
    assert main(["run", str(scenario), "--transport", "tcp", "--processes", "server,users", "--out", str(out), "--quiet"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert [process["group"] for process in result["transport"]["processes"]] == ["server", "users"]
    assert result["transport"]["host"] == "127.0.0.1"
    _assert_sockets_carry_the_ledger_bytes(result)
    assert "s on the real clock over TCP (2 processes)" in capsys.readouterr().out
    assert _children() == []


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--processes", "server,users"], "--processes: places parties in processes only with --transport tcp"),
        (["--transport", "tcp", "--transcript"], "--transcript: not available with --transport tcp"),
        (["--transport", "tcp", "--processes", "server,third_party,users"], "--processes: this protocol has no third_party party"),
    ],
)
def test_the_cli_refuses_transport_flags_that_do_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], problem: str) -> None:
    scenario = tmp_path / "fcf.toml"
    scenario.write_text('[run]\nprotocol = "fcf"\n[data]\nusers = 12\nitems = 20\nratings = 150\n')
    out = tmp_path / "result"
    assert main(["run", str(scenario), *flags, "--out", str(out), "--quiet"]) == 2
    assert problem in capsys.readouterr().err
    assert not out.exists()
    assert _children() == []


def _state(pid: int) -> str | None:
    """A process's state letter (Z: exited, not yet reaped), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_children_stop_when_their_launcher_is_killed(tmp_path: Path) -> None:
    tables = _fcf()
    tables["run"].update(rounds=100_000, round_gap_s=0.01)
    script = (
        "from fedrecsim.launcher import run_tcp\n"
        f"run_tcp({tables!r}, processes='server,users', progress=lambda done, total: print(done, flush=True))\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    children: list[int] = []
    try:
        # Well into the run: the rounds go on, every child past its start-up.
        assert launcher.stdout is not None and int(launcher.stdout.readline() or 0) == 1
        children = [pid for pid in _pids() if _parent(pid) == launcher.pid and "fedrecsim.launcher" in _cmdline(pid)]
        assert len(children) == 2
        launcher.kill()
        launcher.wait(10.0)
        deadline = time.monotonic() + 30.0
        while any(_state(pid) not in (None, "Z") for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [_state(pid) for pid in children if _state(pid) not in (None, "Z")] == []
    finally:
        launcher.kill()
        launcher.wait(10.0)
        for pid in children:
            if _state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
