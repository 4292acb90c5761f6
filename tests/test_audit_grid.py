"""`fedrecsim.audit.AuditGrid`, the study scripts' claimed-vs-audited table: its folders and seeds, its refusals
before anything runs, the table's cells, and verdicts in ``fedrecsim audit``'s words; and `AuditScript`, the
scripts' shared command -- on the protocol of one's own with a known epsilon (tests/audit_known_mechanism.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from fedrecsim.audit import (
    NO_CLAIM, NO_VIOLATION, VIOLATION, AuditedRow, AuditGrid, AuditResult, AuditRow, AuditScript, Column, GridResult, GridSize,
    ScriptRun, claimed_cell,
)
from fedrecsim.audit.script import first_seed
from fedrecsim.errors import ConfigError, OutputError

HERE = Path(__file__).resolve().parent
BASE: dict[str, Any] = {
    "run": {"protocol": "audit_known_mechanism:PROTOCOL", "rounds": 1, "seed": 3},
    "data": {"source": "synthetic", "users": 4, "items": 10, "ratings": 12},
    "network": {"latency": {"model": "constant", "seconds": 0.01}},
    "availability": {"model": "always"},
    "protocol": {"mechanism": "rr", "epsilon": 1.0},
    "audit": {"party": "server:0", "trials": 4, "chunk": 4},
}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.timeout(300)  # 480 tiny runs: ~6 s of CPU
def test_a_grid_names_the_row_whose_noise_is_below_its_claim_a_violation(tmp_path: Path) -> None:
    """Randomized response claimed at eps = 1, and the same claim with users answering at eps = 4 (the
    deliberate break of tests/test_audit.py): the broken row is a VIOLATION, the honest one is not."""
    trials = ("audit.trials=120", "audit.chunk=60")
    rows = [AuditRow("honest", "the honest users", "honest", trials),
            AuditRow("broken", "the users at eps 4", "broken", (*trials, "protocol.report_epsilon=4.0"))]
    result = AuditGrid(BASE, rows).run(tmp_path / "out", workers=1)
    assert [row.verdict for row in result.rows] == [NO_VIOLATION, VIOLATION]
    assert result["honest"].most <= 1.0 < result["broken"].least
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["broken", "honest"]
    assert result["broken"].bounds == [json.loads((tmp_path / "out" / "broken" / "audit.json").read_text())["best"]["epsilon_lower"]]
    violation, held = result.verdict().splitlines()
    assert violation.startswith(f"{VIOLATION} for the users at eps 4:")
    assert held.startswith(f"{NO_VIOLATION} for the honest users:") and "not a proof" in held


def test_each_seed_is_an_audit_of_its_own_and_the_users_settings_win(tmp_path: Path) -> None:
    rows = [AuditRow(1.0, "eps 1", "eps1", ("protocol.epsilon=1.0",)), AuditRow(2.0, "eps 2", "eps2", ("protocol.epsilon=2.0",))]
    grid = AuditGrid(BASE, rows, seeds=[3, 1_000_003], settings=["data.items=12"])
    assert grid.folders() == ["eps1-seed0", "eps1-seed1", "eps2-seed0", "eps2-seed1"]
    assert [audit.scenario.run.seed for _, audit in grid.audits[2.0]] == [3, 1_000_003]
    assert {audit.scenario.data.items for audits in grid.audits.values() for _, audit in audits} == {12}
    result = grid.run(tmp_path / "out", workers=1)
    assert [row.claimed for row in result.rows] == [1.0, 2.0]
    row = result[2.0]
    assert len(row.results) == 2 and row.least <= row.mean <= row.most
    assert row.trials_per_s > 0
    again = grid.run(tmp_path / "out", workers=1)  # resumed: every trial is there
    assert again[2.0].bounds == row.bounds and again[2.0].trials_per_s == 0.0


def test_a_bad_row_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="protocol.nope"):
        AuditGrid(BASE, [AuditRow("a", "a", "a", ("protocol.nope=1",))])
    with pytest.raises(ConfigError, match="two rows share a folder"):
        AuditGrid(BASE, [AuditRow("a", "a", "same", ()), AuditRow("b", "b", "same", ())])
    with pytest.raises(ConfigError, match="two rows share a key"):
        AuditGrid(BASE, [AuditRow("a", "a", "a", ()), AuditRow("a", "b", "b", ())])
    assert not any(tmp_path.iterdir())


def test_a_folder_with_the_users_file_of_that_name_is_refused_and_the_scripts_own_is_resumed(tmp_path: Path) -> None:
    (tmp_path / "figure.png").write_text("the user's")
    grid = AuditGrid(BASE, [AuditRow("a", "a", "a", ())])
    with pytest.raises(OutputError) as caught:
        grid.run(tmp_path, workers=1, own=["figure.png"])
    assert str(caught.value) == (f"{tmp_path / 'figure.png'}: exists, and {tmp_path} holds no audit of this script (figure.png): "
                                 "it is not this script's file; give another --out (nothing in it is changed)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["figure.png"]
    grid.run(tmp_path / "study", workers=1)
    (tmp_path / "study" / "figure.png").write_text("the script's, from the run before")
    assert grid.run(tmp_path / "study", workers=1, own=["figure.png"]).rows[0].document["trials_run"] == 0


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_folder_of_the_older_layout_is_refused_saying_what_it_holds_and_what_to_do(tmp_path: Path) -> None:
    """Audits written one folder per row (before each data seed had ``<row>-seed<i>``) and their figure: the
    grid with data seeds names the old folders and the new layout, and changes nothing (it once said the
    script's own figure "is not this script's")."""
    rows = [AuditRow(1.0, "eps 1", "eps1", ("protocol.epsilon=1.0",)), AuditRow(2.0, "eps 2", "eps2", ("protocol.epsilon=2.0",))]
    out = tmp_path / "out"
    AuditGrid(BASE, rows).run(out, workers=1)
    (out / "figure.png").write_text("the figure of the older layout")
    before = _contents(out)
    with pytest.raises(OutputError) as caught:
        AuditGrid(BASE, rows, seeds=[3]).run(out, workers=1, own=["figure.png"])
    assert str(caught.value) == (
        f"{out}: holds audits in the older layout, one folder per row (eps1, eps2), from before each data seed had its own "
        "folder; this version writes <row>-seed<i> (eps1-seed0, ...) and its own figure: give another --out, or move this "
        "folder aside (nothing in it is changed)")
    assert _contents(out) == before


def test_another_size_in_the_folder_is_refused_naming_the_row_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--quick`` and then the full size into one ``--out``: one line naming the row's folder and why, before any
    audit runs (it once said "another scenario, party, target or distinguishers" of a folder the user never chose)."""
    script = known_script([])
    out = tmp_path / "out"
    _printed(script, ["--quick", "--out", str(out)], capsys)
    before = _contents(out)
    with pytest.raises(OutputError) as caught:
        script.main(["--out", str(out), "--workers", "1"])
    assert str(caught.value) == (
        f"{out / 'eps1-seed0'}: holds an audit of the row 'eps 1' other than this run's: another size, --set or version of "
        "the script (--quick and the full size are different audits); give another --out (nothing in it is changed)")
    assert _contents(out) == before


def made_up(claimed: float | None, bound: float, verdict: str, heldout: int = 100) -> AuditResult:
    """An audit's result with just what the table and the verdict read."""
    entry = {"epsilon_lower": bound, "tpr": 1.0, "fpr": 0.0}
    document = {
        "claim": {"epsilon": claimed, "delta": 0.0}, "best": {"epsilon_lower": bound, "distinguisher": "d"}, "verdict": verdict,
        "heldout_per_world": heldout, "confidence": 0.95, "trials_run": 10, "wall_s": 2.0, "distinguishers": {"d": entry},
    }
    return AuditResult(Path("x"), document, {})


def test_the_verdict_says_violation_no_violation_and_no_claim_in_the_commands_words() -> None:
    result = GridResult((
        AuditedRow(AuditRow("a", "row a", "a", ()), (made_up(1.0, 0.2, f"{NO_VIOLATION}: ..."), made_up(1.0, 1.5, f"{VIOLATION}: ..."))),
        AuditedRow(AuditRow("b", "row b", "b", ()), (made_up(1.0, 0.5, f"{NO_VIOLATION}: ..."),)),
        AuditedRow(AuditRow("c", "row c", "c", ()), (made_up(None, 0.0, f"{NO_CLAIM} (...)"),)),
        AuditedRow(AuditRow("d", "row d", "d", ()), (made_up(2.0, 0.1, f"{NO_VIOLATION}: ..."),)),
    ))
    assert [row.verdict for row in result.rows] == [VIOLATION, NO_VIOLATION, NO_CLAIM, NO_VIOLATION]
    lines = result.verdict().splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{VIOLATION} for row a", f"{NO_VIOLATION} for row b, row d", f"{NO_CLAIM} for row c"]
    assert "lower bound" in lines[2] and "no evidence of privacy" in lines[2]
    only_held = GridResult(result.rows[1:2])
    assert only_held.verdict().startswith(NO_VIOLATION) and "\n" not in only_held.verdict()


def test_the_table_lays_the_rows_out_in_the_scripts_columns() -> None:
    result = GridResult((
        AuditedRow(AuditRow(0.5, "a", "a", ()), (made_up(0.5, 0.25, NO_VIOLATION), made_up(0.5, 0.75, NO_VIOLATION))),
        AuditedRow(AuditRow(None, "b", "b", ()), (made_up(None, 2.0, NO_CLAIM),)),
    ))
    columns = (Column("key", 6, lambda row: str(row.row.key), left=True), Column("claimed", 8, claimed_cell),
               Column("mean", 7, lambda row: row.mean), Column("fpr", 6, lambda row: row.entry("d", "fpr"), ".1f"),
               Column("speed", 7, lambda row: row.trials_per_s, ".1f"))
    assert result.table(columns).splitlines() == [
        "key    claimed   mean   fpr  speed",
        "0.5        0.5  0.500   0.0    5.0",
        "None      none  2.000   0.0    5.0",
    ]



def test_the_report_is_the_table_the_figure_line_the_note_and_the_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = GridResult((AuditedRow(AuditRow(1.0, "row a", "a", ()), (made_up(1.0, 0.25, NO_VIOLATION),)),))
    columns = (Column("mean", 7, lambda row: row.mean),)
    shown = result.report(columns, tmp_path / "f.png", lambda axes, grid: None, "what it means").splitlines()
    assert shown == [*result.table(columns).splitlines(), "figure skipped: matplotlib is not installed", "what it means",
                     result.verdict()]


def test_a_grid_size_gives_the_data_overrides_in_order() -> None:
    assert GridSize(users=5, items=20, ratings=40, trials=9).data() == ("data.users=5", "data.items=20", "data.ratings=40")


def test_the_cap_is_the_bound_of_a_perfect_test_at_these_held_out_trials() -> None:
    """docs/audit.md: with n held-out trials per world and each Clopper--Pearson side at a = 0.025, a test
    with TPR 1 and FPR 0 reaches log(a^(1/n) / (1 - a^(1/n)))."""
    for n in (15, 100):
        row = AuditedRow(AuditRow("a", "a", "a", ()), (made_up(None, 0.0, NO_CLAIM, heldout=n),))
        root = 0.025 ** (1 / n)
        assert row.cap == pytest.approx(math.log(root / (1 - root)), rel=1e-9)


def known_script(seen: list[ScriptRun], **changes: Any) -> AuditScript:
    """A script auditing the known mechanism at eps 1 and 2: ``size`` users, 6 trials per world (4 with --quick),
    from data seed 3. Its heading records what it is given in ``seen``."""
    def rows(users: int, trials: int) -> list[AuditRow]:
        return [AuditRow(eps, f"eps {eps:g}", f"eps{eps:g}", (f"protocol.epsilon={eps}", f"data.users={users}", f"audit.trials={trials}"))
                for eps in (1.0, 2.0)]

    def heading(run: ScriptRun) -> str:
        seen.append(run)
        return f"{run.size} users, {run.counts}"

    declared: dict[str, Any] = dict(
        scenario=BASE, description="Audit the known mechanism", out="results/known", quick="4 users, 4 trials", sizes=(5, 4),
        trials=(6, 4), rows=rows, heading=heading, columns=(Column("eps", 5, claimed_cell, left=True), Column("audited", 9, lambda row: row.mean)),
        figure="figure.png", paint=lambda axes, result: None, note=lambda result: f"a note on {len(result.rows)} rows", data_seed=3,
    )
    return AuditScript(**(declared | changes))


def _printed(script: AuditScript, argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert script.main([*argv, "--workers", "1"]) == 0
    return capsys.readouterr().out.splitlines()


def _audited(out: Path, folder: str) -> tuple[int, int, int]:
    """An audit folder's (trials per world, data users, run seed), from its audit.json."""
    document = json.loads((out / folder / "audit.json").read_text())
    return document["trials_per_world"], document["scenario"]["data"]["users"], document["scenario"]["run"]["seed"]


def test_a_script_runs_its_full_or_quick_size_and_prints_its_heading_then_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    seen: list[ScriptRun] = []
    script = known_script(seen)
    lines = _printed(script, ["--quick", "--out", str(tmp_path / "quick")], capsys)
    run = seen[-1]
    assert (run.size, run.trials, run.seeds) == (4, 4, 1)
    assert lines == ["4 users, 4 trials per world, 1 audit per row (data seed 3)", *run.result.table(script.columns).splitlines(),
                     "figure skipped: matplotlib is not installed", "a note on 2 rows", *run.result.verdict().splitlines()]
    assert [_audited(tmp_path / "quick", folder) for folder in ("eps1-seed0", "eps2-seed0")] == [(4, 4, 3), (4, 4, 3)]
    assert run.target_users == f"user {json.loads((tmp_path / 'quick' / 'eps1-seed0' / 'audit.json').read_text())['target']['user']}"
    assert _printed(script, ["--out", str(tmp_path / "full")], capsys)[0] == "5 users, 6 trials per world, 1 audit per row (data seed 3)"
    assert _audited(tmp_path / "full", "eps2-seed0") == (6, 5, 3)
    assert _printed(script, ["--quick", "--trials", "8", "--out", str(tmp_path / "more")], capsys)[0].startswith("4 users, 8 trials")
    assert _audited(tmp_path / "more", "eps1-seed0") == (8, 4, 3)


def test_a_script_with_a_data_seed_audits_each_row_at_each_seed_and_the_users_settings_win(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[ScriptRun] = []
    script = known_script(seen, data_seed=11, note="a fixed note")
    lines = _printed(script, ["--quick", "--seeds", "2", "--set", "data.items=12", "--out", str(tmp_path / "out")], capsys)
    assert lines[0] == "4 users, 4 trials per world, 2 audits per row (data seeds 11, 1,000,011)" and "a fixed note" in lines
    folders = ["eps1-seed0", "eps1-seed1", "eps2-seed0", "eps2-seed1"]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [*folders, "figure.png"]
    assert [_audited(tmp_path / "out", folder) for folder in folders] == [(4, 4, 11), (4, 4, 1_000_011)] * 2
    assert json.loads((tmp_path / "out" / "eps1-seed1" / "audit.json").read_text())["scenario"]["data"]["items"] == 12
    assert len(seen[-1].result[2.0].results) == 2


def test_a_users_run_seed_is_where_the_data_seeds_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--set run.seed=40 --seeds 2``: two audits per row at two data seeds, 40 and 1,000,040, each with its
    own data (the ``--set`` once came last and made both audits the seed-40 one)."""
    seen: list[ScriptRun] = []
    out = tmp_path / "out"
    lines = _printed(known_script(seen, data_seed=11), ["--quick", "--seeds", "2", "--set", "run.seed=40", "--out", str(out)], capsys)
    assert lines[0] == "4 users, 4 trials per world, 2 audits per row (data seeds 40, 1,000,040)"  # the heading names them
    assert [_audited(out, folder)[2] for folder in ("eps1-seed0", "eps1-seed1")] == [40, 1_000_040]
    views = [json.loads((out / folder / "audit.json").read_text())["target"] for folder in ("eps1-seed0", "eps1-seed1")]
    assert views[0] != views[1]
    users = [view["user"] for view in views]  # the heading names each world's target, not the first one's alone
    assert seen[-1].target_users == (f"user {users[0]} (in every data seed)" if users[0] == users[1]
                                     else f"users {users[0]}, {users[1]} (one per data seed)")
    assert len(seen[-1].result[1.0].results) == 2


@pytest.mark.parametrize(("settings", "first", "rest"), [
    ([], 11, []), (["data.items=12"], 11, ["data.items=12"]), (["run.seed=5", "data.items=12", "run.seed = 7"], 7, ["data.items=12"]),
])
def test_the_first_data_seed_is_the_users_last_run_seed_else_the_scripts(settings: list[str], first: int, rest: list[str]) -> None:
    assert first_seed(settings, 11) == (first, rest)


@pytest.mark.parametrize("value", ["'x'", "1.5", "true"])
def test_a_run_seed_that_is_no_whole_number_is_refused_naming_it(value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--set run.seed: expected a whole number"):
        known_script([]).main(["--quick", "--set", f"run.seed={value}", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_grid_with_data_seeds_refuses_a_run_seed_setting_that_would_make_them_one(tmp_path: Path) -> None:
    rows = [AuditRow(1.0, "eps 1", "eps1", ("protocol.epsilon=1.0",))]
    with pytest.raises(ConfigError, match=r"^run.seed: set in the grid's settings, it would make its 2 data seeds"):
        AuditGrid(BASE, rows, seeds=[3, 1_000_003], settings=["run.seed=5"])
    assert [audit.scenario.run.seed for _, audit in AuditGrid(BASE, rows, settings=["run.seed=5"]).audits[1.0]] == [5]


def test_a_scripts_help_shows_its_trials_at_both_sizes() -> None:
    shown = known_script([]).parser().format_help()
    assert "Audit the known mechanism" in shown and "trials per world (default 6; 4 with --quick)" in shown
    assert "--quick" in shown and "4 users, 4 trials" in shown and "--seeds" in shown
