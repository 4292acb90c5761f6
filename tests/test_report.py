"""Reports: a run folder and a sweep folder become PNG plots and a report.md that shows them."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.errors import ConfigError, OutputError
from fedrecsim.report import REPORT_MARKER, write_report
from fedrecsim.sweep import Axis, Study, run_sweep

pytest.importorskip("matplotlib")


TINY_FCF = {
    "run": {"protocol": "fcf", "name": "tiny", "seed": 3, "rounds": 5},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1200},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"d": 8},
}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run") / "tiny"
    fedrecsim.run(TINY_FCF, out=folder)
    return folder


def test_a_run_report_draws_traffic_users_and_metrics(run_folder: Path, tmp_path: Path) -> None:
    report = write_report(run_folder, tmp_path / "report")
    names = sorted(path.name for path in report.iterdir())
    assert names == ["bytes_per_role.png", "bytes_per_user.png", "overview.png", "per_round.png", "report.md"]
    markdown = (report / "report.md").read_text()
    assert markdown.startswith(REPORT_MARKER) and "![Bytes per role](bytes_per_role.png)" in markdown
    assert "| test_rmse |" in markdown and "| metric | final value | mean over rounds |" in markdown
    # Re-running replaces our own report; a folder of the user's is refused and left alone.
    assert write_report(run_folder, tmp_path / "report") == report
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="not a fedrecsim report"):
        write_report(run_folder, tmp_path / "mine")
    assert [path.name for path in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_a_sweep_report_plots_each_varying_metric_against_the_grid(tmp_path: Path) -> None:
    study = Study(copy.deepcopy(TINY_FCF), (Axis(("protocol.d",), ((4,), (8,))),), seeds=2)
    run_sweep(study, tmp_path / "sweep", workers=2)
    assert main(["report", str(tmp_path / "sweep")]) == 0
    report = tmp_path / "sweep-report"
    markdown = (report / "report.md").read_text()
    assert "# Sweep report: 2 grid points x 2 seeds" in markdown and "![test_rmse, final value](sweep_test_rmse_final.png)" in markdown
    assert (report / "sweep_test_rmse_final.png").stat().st_size > 10_000 and (report / "sweep_user_sent_bytes.png").exists()
    assert "## Constant over the whole grid" in markdown and "| `participants` | final value | 40 | 2 |" in markdown


def test_the_headers_count_in_the_singular_and_with_thousands_separators(tmp_path: Path) -> None:
    """One round of 1,200 users, one grid point of one seed: '1 round', '1,200 users', '1 grid point x 1 seed'."""
    one = copy.deepcopy(TINY_FCF)
    one["run"]["rounds"] = 1
    one["data"].update(users=1200, ratings=6000)
    run_sweep(Study(one, (), seeds=1), tmp_path / "sweep", workers=1)
    assert main(["report", str(tmp_path / "sweep")]) == 0
    assert "# Sweep report: 1 grid point x 1 seed\n" in (tmp_path / "sweep-report" / "report.md").read_text()
    (run,) = (tmp_path / "sweep" / "runs").iterdir()
    report = write_report(run, tmp_path / "run-report")
    assert "\n1 round, 1,200 users x 60 items, " in (report / "report.md").read_text()


def test_a_folder_that_is_neither_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "neither a fedrecsim run folder" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_extra(run_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match=r'pip install "fedrecsim\[plot\]"'):
        write_report(run_folder, tmp_path / "report")
    assert not (tmp_path / "report").exists()


TINY_DPMF = {
    "run": {"protocol": "dpmf", "name": "tiny-dpmf", "seed": 3, "rounds": 4},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1000},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"scenario": "S2", "d": 4, "epsilon": 0.5, "replay": False},
}


def test_a_dpmf_report_draws_the_error_cdf_and_the_budget_spent_once(tmp_path: Path) -> None:
    import json

    from fedrecsim.protocols.dpmf.central import ERROR_QUANTILES

    folder = tmp_path / "dpmf"
    fedrecsim.run(TINY_DPMF, out=folder)
    document = json.loads((folder / "result.json").read_text())
    cdfs = document["distributions"]
    assert sorted(cdfs) == ["abs_error_test", "abs_error_train", "baseline_abs_error_train"]
    train = cdfs["abs_error_train"]
    assert train["quantiles"] == list(ERROR_QUANTILES) and len(train["values"]) == 21 and train["unit"] == "rating units"
    assert train["values"] == sorted(train["values"])
    # The recorded quartiles are the run's own err_q25, err_q50, err_q75 and err_q90.
    final = document["metrics"]["final"]
    for quantile in (25, 50, 75, 90):
        assert train["values"][quantile // 5] == pytest.approx(final[f"err_q{quantile}"])
    assert document["privacy"]["epsilon_spent"]["total"] == 0.5 and document["privacy"]["epsilon_spent"]["at_round"] == 0
    report = write_report(folder, tmp_path / "report")
    markdown = (report / "report.md").read_text()
    assert "![Prediction error CDF](error_cdf.png)" in markdown and "![Privacy spent per round](epsilon_per_round.png)" in markdown
    assert (report / "error_cdf.png").stat().st_size > 10_000


def test_the_budget_per_round_follows_each_accounting() -> None:
    from fedrecsim.report import _epsilon_by_round

    assert _epsilon_by_round({"epsilon_per_user_epoch": 2.5}, 3) == (
        [0.0, 2.5, 5.0, 7.5], "2.5 per epoch, basic composition", "epsilon spent per user (cumulative)"
    )
    once = _epsilon_by_round({"epsilon_spent": {"total": 0.1, "at_round": 3}}, 3)
    assert once is not None and once[0] == [0.0, 0.0, 0.0, 0.1] and "once, after round 3" in once[1]
    assert _epsilon_by_round({"epsilon_spent": {"total": 0.1, "at_round": 0}}, 2)[0] == [0.1, 0.1, 0.1]
    assert _epsilon_by_round({"epsilon_per_user_epoch": 2.5}, 0) is None
    assert _epsilon_by_round({"epsilon_per_user_epoch": True, "epsilon_spent": "x"}, 3) is None


def test_a_cut_error_axis_keeps_the_bulk_readable() -> None:
    from fedrecsim.report import _interpolate, _is_cdf

    assert _interpolate([0.0, 0.5, 1.0], [0.0, 1.0, 3.0], 0.75) == pytest.approx(2.0)
    assert _interpolate([0.0, 1.0], [1.0, 2.0], 1.0) == 2.0
    assert _is_cdf({"quantiles": [0.0, 1.0], "values": [0.0, 1.0]})
    assert not _is_cdf({"quantiles": [0.0, 1.0], "values": [0.0, None]}) and not _is_cdf({"quantiles": [0.0], "values": [1.0]})


def test_a_grid_whose_first_point_failed_shows_the_complete_points_values(tmp_path: Path) -> None:
    """The constant-quantity table read its value from the first grid point only: when that point's runs
    had all failed, every value in the report was blank although the other point had measured it."""
    markdown = _report_of_a_sweep_whose_first_point_fails(tmp_path, seeds=2)
    assert "**2 runs failed**" in markdown
    assert "| `participants` | final value | 40 | 0 to 2 |" in markdown
    assert "| `user.sent_bytes` | whole run | " in markdown and "| `user.sent_bytes` | whole run |  |" not in markdown


def test_one_failed_run_is_one_run(tmp_path: Path) -> None:
    markdown = _report_of_a_sweep_whose_first_point_fails(tmp_path, seeds=1)
    assert "\n**1 run failed**; see the error column of sweep.csv.\n" in markdown


def _report_of_a_sweep_whose_first_point_fails(tmp_path: Path, seeds: int) -> str:
    """report.md of a sweep over data.source: movielens-100k from a missing file (its runs fail), then synthetic."""
    tables = copy.deepcopy(TINY_FCF)
    tables["data"]["path"] = str(tmp_path / "no-such-u.data")
    axis = Axis(("data.source",), (("movielens-100k",), ("synthetic",)))
    run_sweep(Study(tables, (axis,), seeds=seeds), tmp_path / "sweep", workers=1)
    return write_report(tmp_path / "sweep", tmp_path / "report").joinpath("report.md").read_text()


def test_a_report_folder_holding_a_png_of_the_users_is_refused_and_the_png_kept(
    run_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every PNG in a report folder used to count as the report's: re-running deleted a user's chart."""
    out = str(tmp_path / "report")
    assert main(["report", str(run_folder), "--out", out]) == 0
    (tmp_path / "report" / "my_chart.png").write_bytes(b"the user's")
    before = {path.name: path.read_bytes() for path in (tmp_path / "report").iterdir()}
    capsys.readouterr()
    assert main(["report", str(run_folder), "--out", out]) == 2
    assert "not a fedrecsim report" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in (tmp_path / "report").iterdir()} == before
    (tmp_path / "report" / "my_chart.png").unlink()
    assert main(["report", str(run_folder), "--out", out]) == 0


def test_a_report_out_in_a_missing_folder_makes_it_as_run_does_and_a_file_there_is_refused(
    run_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out new/sub/report`` used to be refused as "is not a folder" where ``run --out`` makes its parents."""
    assert main(["report", str(run_folder), "--out", str(tmp_path / "new" / "sub" / "report")]) == 0
    assert (tmp_path / "new" / "sub" / "report" / "report.md").is_file()
    (tmp_path / "file").write_text("mine")
    assert main(["report", str(run_folder), "--out", str(tmp_path / "file" / "report")]) == 2
    assert f"{tmp_path / 'file'}: is not a folder" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"
