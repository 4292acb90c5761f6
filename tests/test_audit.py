"""``fedrecsim audit`` and `fedrecsim.audit.Audit` end to end, on a protocol of one's own with a known epsilon
(tests/audit_known_mechanism.py): the declaration API, the result folder, resuming, and bad input."""

from __future__ import annotations

import json
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from fedrecsim import cli
from fedrecsim.audit import Audit, AuditSpec, Claim, Distinguisher, Row, Target, TrialView, no_dp_claim, one_user
from fedrecsim.errors import ConfigError, OutputError, SimulationError
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import Envelope
from fedrecsim.protocols import built_in_protocols, protocol_spec

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def tables(mechanism: str = "rr", trials: int = 4, chunk: int = 2, **protocol: object) -> dict[str, object]:
    return {
        "run": {"protocol": "audit_known_mechanism:PROTOCOL", "rounds": 1, "seed": 3},
        "data": {"source": "synthetic", "users": 4, "items": 10, "ratings": 12},
        "network": {"latency": {"model": "constant", "seconds": 0.01}},
        "availability": {"model": "always"},
        "protocol": {"mechanism": mechanism, "epsilon": 1.0, **protocol},
        "audit": {"party": "server:0", "trials": trials, "chunk": chunk},
    }


@pytest.mark.timeout(300)  # 480 tiny runs: ~6 s of CPU
def test_a_known_epsilon_is_audited_below_its_claim_and_a_broken_one_above(tmp_path: Path) -> None:
    """Randomized response claimed at eps = 1: the audit's lower bound is at most 1; the same protocol whose
    users answer at eps = 4 (the deliberate break: flip probability 0.27 -> 0.018) is caught."""
    done = Audit(tables(trials=120, chunk=60)).run(tmp_path / "honest", workers=1)
    assert done.epsilon_lower <= 1.0
    assert done.document["claim"]["epsilon"] == 1.0
    assert done.document["verdict"].startswith("no violation found") and "does not show that the protocol is private" in done.document["verdict"]
    caught = Audit(tables(trials=120, chunk=60, report_epsilon=4.0)).run(tmp_path / "broken", workers=1)
    assert caught.epsilon_lower > 1.0
    assert caught.document["verdict"].startswith("VIOLATION")


def test_the_folder_holds_the_result_the_trials_and_the_plan(tmp_path: Path) -> None:
    done = Audit(tables(trials=6)).run(tmp_path / "a", workers=1)
    document = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert document == done.document
    assert set(document["distinguishers"]) == {"logistic", "target_report"}
    for entry in document["distinguishers"].values():
        assert {"epsilon_lower", "confidence", "tpr", "fpr", "roc"} <= set(entry)
    assert document["relation"] == {"unit": "rating", "kind": "add_remove", "description": "one rating added to or removed from a user's row"}
    assert document["trials_per_world"] == 6 and document["heldout_per_world"] == 3 and document["trials_run"] == 12
    assert document["trials_per_s"] > 0
    rows = (tmp_path / "a" / "trials.csv").read_text().splitlines()
    assert rows[0] == "trial,world,seed,half,score_logistic,score_target_report" and len(rows) == 13
    assert rows[1].startswith("0,in,4,train,") and rows[7].startswith("0,out,5,train,")
    assert "lower bound" in done.text() and "trials/s" in done.text()


def test_the_roc_plot_is_skipped_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    done = Audit(tables()).run(tmp_path / "a", workers=1)
    assert done.document["roc_plot"] is None and "matplotlib is not installed" in done.document["roc_plot_skipped"]
    assert not (tmp_path / "a" / "roc.png").exists()
    assert "ROC plot skipped" in done.text()


def test_the_roc_plot_is_drawn_with_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    done = Audit(tables()).run(tmp_path / "a", workers=1)
    assert done.document["roc_plot"] == "roc.png"
    assert (tmp_path / "a" / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_interrupted_audit_resumes_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the third chunk keeps the two finished ones; the same audit again runs only the rest,
    and gives the result of an uninterrupted audit."""
    from fedrecsim.audit import runner

    real = runner.run_chunk
    calls: list[str] = []

    def interrupted(task: dict) -> dict:
        calls.append(task["name"])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(runner, "run_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Audit(tables(trials=4)).run(tmp_path / "a", workers=1)
    assert len(list((tmp_path / "a" / "trials").glob("*.json"))) == 2
    monkeypatch.setattr(runner, "run_chunk", real)
    resumed = Audit(tables(trials=4)).run(tmp_path / "a", workers=1)
    assert resumed.document["trials_run"] == 4
    whole = Audit(tables(trials=4)).run(tmp_path / "b", workers=1)
    assert resumed.document["distinguishers"] == whole.document["distinguishers"]


@pytest.mark.timeout(300)
def test_a_killed_audit_command_resumes_where_it_stopped(tmp_path: Path) -> None:
    """``fedrecsim audit`` killed (SIGKILL) once some chunks are written: the same command again runs only
    the trials that are missing."""
    import os
    import signal
    import subprocess
    import time

    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), str(HERE)])}
    command = [sys.executable, "-c", "import sys; from fedrecsim import cli; sys.exit(cli.main())", "audit",
               str(_scenario_file(tmp_path)), "--party", "server:0", "--trials", "60", "--workers", "1",
               "--out", str(tmp_path / "out"), "--quiet"]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 200
        while len(list((tmp_path / "out" / "trials").glob("*.json"))) < 3 and time.monotonic() < deadline:
            assert process.poll() is None, "the audit ended before it was killed"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    kept = len(list((tmp_path / "out" / "trials").glob("*.json")))
    assert 3 <= kept < 60
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    assert "trials/s" in done.stdout
    document = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert document["trials_run"] == 120 - 2 * kept


def test_more_trials_reuse_the_ones_done(tmp_path: Path) -> None:
    Audit(tables(trials=4)).run(tmp_path / "a", workers=1)
    again = Audit(tables(trials=6)).run(tmp_path / "a", workers=1)
    assert again.document["trials_run"] == 4 and again.document["trials_per_world"] == 6


@pytest.mark.timeout(300)  # starts a process pool
def test_the_trials_run_on_a_local_pool_as_in_this_process(tmp_path: Path) -> None:
    pooled = Audit(tables(trials=4)).run(tmp_path / "pool", workers=2)
    inline = Audit(tables(trials=4)).run(tmp_path / "inline", workers=1)
    assert pooled.document["distinguishers"] == inline.document["distinguishers"]


@pytest.mark.timeout(300)  # starts a Dask cluster
def test_the_trials_run_on_a_dask_cluster_as_in_this_process(tmp_path: Path) -> None:
    """The protocol of one's own is shipped to the workers (`fedrecsim.sweep.ship_protocol`)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        remote = Audit(tables(trials=4)).run(tmp_path / "dask", dask=cluster.scheduler_address)
    inline = Audit(tables(trials=4)).run(tmp_path / "inline", workers=1)
    assert remote.document["trials_run"] == 8
    assert remote.document["distinguishers"] == inline.document["distinguishers"]


def test_a_folder_of_something_else_or_of_another_audit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="not a fedrecsim audit folder"):
        Audit(tables()).run(tmp_path / "mine", workers=1)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    Audit(tables()).run(tmp_path / "a", workers=1)
    with pytest.raises(OutputError, match="holds another audit"):
        Audit(tables("laplace")).run(tmp_path / "a", workers=1)


def test_a_failing_trial_is_a_simulation_error_and_the_audit_can_be_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedrecsim.audit import runner

    monkeypatch.setattr(runner, "TrialView", lambda *args: 1 / 0)
    with pytest.raises(SimulationError, match="ZeroDivisionError"):
        Audit(tables()).run(tmp_path / "a", workers=1)
    monkeypatch.undo()
    assert Audit(tables()).run(tmp_path / "a", workers=1).document["trials_run"] == 8


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"audit": {"party": "server:0", "trials": 1}}, "audit.trials", "must be >= 2"),
    ({"audit": {"party": "nobody", "trials": 4}}, "audit.party", "expected ROLE:INDEX"),
    ({"audit": {"trials": 4}}, "audit.party", "is required"),
    ({"audit": {"party": "user:0", "trials": 4}}, "audit.party", "claim is about the views of server"),
    ({"audit": {"party": "server:0", "bogus": 1}}, "audit.bogus", "unknown key"),
    ({"audit": {"party": "server:0", "distinguishers": ["nope"]}}, "audit.distinguishers", "unknown distinguisher 'nope'"),
    ({"audit": {"party": "server:0", "user": 99}}, "audit.user", "must be a user of the data"),
    ({"audit": {"party": "server:0", "in_items": [1, 2], "out_items": [5]}}, "audit.in_items", "plus one item"),
    ({"run": {"protocol": "audit_known_mechanism:UNDECLARED", "rounds": 1}}, "run.protocol", "declares no neighbouring relation"),
])
def test_bad_input_is_a_config_error_naming_the_key_before_anything_runs(
    tmp_path: Path, change: dict, key: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        Audit(tables() | change)
    assert caught.value.key_path == key


def test_a_party_that_is_not_in_the_run_is_refused_before_the_folder_is_made(tmp_path: Path) -> None:
    audit = Audit(tables() | {"audit": {"party": "server:3", "trials": 4}})
    with pytest.raises(ConfigError, match="server:3 receives nothing in this run"):
        audit.run(tmp_path / "a", workers=1)
    assert not (tmp_path / "a").exists()


def test_a_protocol_of_ones_own_declares_its_relation_and_claim() -> None:
    spec = AuditSpec(one_user(), lambda scenario: Claim(2.0, 0.0, "made up"))
    assert spec.neighbouring.kind == "add_remove" and spec.neighbouring.unit == "user"
    assert spec.claim(None).epsilon == 2.0 and spec.distinguishers == ()


def test_one_observers_claim_covers_that_role_and_its_distinguishers_apply_to_it_alone() -> None:
    own = Distinguisher("mine", lambda view: np.zeros(1), roles=(Role.USER,))
    spec = AuditSpec.for_observer(Role.SERVER, one_user(), no_dp_claim("baseline"), own)
    assert spec.parties == (Role.SERVER,) and spec.published is None
    assert [(d.name, d.roles) for d in spec.distinguishers] == [("mine", (Role.SERVER,))]
    claim = spec.claim(None)
    assert (claim.epsilon, claim.delta, claim.statement) == (math.inf, 0.0, "baseline")
    assert pickle.loads(pickle.dumps(spec.claim))(None) == claim  # as a module function's: a ProtocolSpec pickles


def test_a_view_gives_the_targets_own_messages_and_the_target_its_added_items_and_dense_rows() -> None:
    target = Target(1, Row((0, 2, 3), (5.0, 4.0, 1.0)), Row((0,), (5.0,)))
    assert target.added == (2, 3)
    assert target.present.dense(5).tolist() == [5.0, 0.0, 4.0, 1.0, 0.0]
    assert target.absent.dense(3, 1.0).tolist() == [1.0, 0.0, 0.0]
    user, other = Party(Role.USER, 1), Party(Role.USER, 0)
    envelopes = tuple(Envelope(kind, src, SERVER, 0.0, body) for kind, src, body in
                      (("k", user, "a"), ("k", other, "b"), ("j", user, "c"), ("k", user, "d")))
    view = TrialView(SERVER, envelopes, target, None, None)  # type: ignore[arg-type]
    assert view.target_bodies("k") == ["a", "d"] and view.target_bodies("j") == ["c"]


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "known.toml"
    path.write_text(
        '[run]\nprotocol = "audit_known_mechanism:PROTOCOL"\nrounds = 1\nseed = 3\n'
        '[data]\nsource = "synthetic"\nusers = 4\nitems = 10\nratings = 12\n'
        '[availability]\nmodel = "always"\n[audit]\nchunk = 2\n'
    )
    return path


def test_the_command_prints_the_claim_the_bound_and_the_speed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["audit", str(_scenario_file(tmp_path)), "--party", "server:0", "--trials", "4", "--workers", "1",
                     "--out", str(tmp_path / "out"), "--quiet"])
    shown = capsys.readouterr().out
    assert code == 0
    assert "claimed: epsilon = 1, delta = 0" in shown and "audited epsilon lower bound" in shown and "trials/s" in shown
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["party"] == "server:0"


@pytest.mark.parametrize(("argv", "message"), [
    (["--party", "server:0", "--trials", "1"], "--trials: expected a whole number >= 2"),
    (["--party", "robot:0", "--trials", "4"], "audit.party: expected ROLE:INDEX"),
    (["--party", "server:0", "--trials", "4", "--set", "protocol.epsilon=-1"], "protocol.epsilon: must be > 0"),
    (["--party", "server:0", "--trials", "4", "--set", "nonsense"], "nonsense"),
])
def test_the_command_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = cli.main(["audit", str(_scenario_file(tmp_path)), *argv, "--workers", "1", "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert code == 2 and len(error.splitlines()) == 1 and message in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", built_in_protocols())
def test_every_built_in_protocol_declares_what_an_audit_needs(name: str) -> None:
    """`fedrecsim audit` runs on every built-in protocol (issue 31): each declares its relation, its claim and
    at least one distinguisher of its own beside the generic one."""
    spec = protocol_spec(name).audit
    assert isinstance(spec, AuditSpec)
    assert spec.neighbouring.unit and spec.neighbouring.description
    assert spec.distinguishers and all(distinguisher.name != "logistic" for distinguisher in spec.distinguishers)
