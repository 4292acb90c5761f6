"""Reports read as a user reads them: every metric of a sweep named with its statistic, mean, interval and n;
``--metrics`` choosing and refusing; one overview figure with a panel per chosen metric; baselines beside
their metric; whole-number round ticks; bytes in KiB / MiB.

The figures are checked on the matplotlib figure objects the report saves (captured at ``savefig``) and on
the report's own description of what it drew, never on pixels.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fedrecsim
from fedrecsim.cli import main
from fedrecsim.sweep import read_csv

pytest.importorskip("matplotlib")

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

TINY_DPMF = {
    "run": {"protocol": "dpmf", "name": "tiny-dpmf", "seed": 3, "rounds": 4},
    "data": {"source": "synthetic", "users": 40, "items": 60, "ratings": 1000},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"scenario": "S2", "d": 4, "epsilon": 0.5, "replay": False},
}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Every figure the report saves, by file name (the figure object itself, saved as usual)."""
    from matplotlib.figure import Figure

    figures: dict[str, Any] = {}
    save = Figure.savefig

    def recording(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        figures[Path(fname).name] = self
        return save(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    yield figures


def _panels(figure: Any) -> list[Any]:
    return [axes for axes in figure.axes if axes.get_visible()]


def _table(markdown: str, first: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table whose header starts with ``first``."""
    lines = markdown.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.fixture(scope="module")
def secagg_seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's seeds-only sweep: scenarios/secagg_small.toml at 3 seeds (shorter vectors)."""
    out = tmp_path_factory.mktemp("secagg") / "sweep"
    assert main(["sweep", str(SCENARIOS / "secagg_small.toml"), "--seeds", "3", "--set", "protocol.length=100",
                 "--workers", "2", "--quiet", "--out", str(out)]) == 0
    return out


def test_a_seeds_only_sweep_report_names_every_metric_with_its_statistic_mean_interval_and_n(
    secagg_seeds: Path, tmp_path: Path
) -> None:
    assert main(["report", str(secagg_seeds), "--out", str(tmp_path / "report")]) == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    rows = {(row[0].strip("`"), row[1]): row for row in _table(markdown, "quantity")}
    summary = read_csv(secagg_seeds / "summary.csv")[0]
    statistics = {".final": "final value", ".round_mean": "mean over rounds"}
    metric_columns = [name[: -len(".mean")] for name in summary if name.endswith((".final.mean", ".round_mean.mean"))]
    assert "participants.round_mean" in metric_columns and "u1.final" in metric_columns
    for column in metric_columns:
        metric, _, statistic = column.rpartition(".")
        _, _, mean, interval, n = rows[(metric, statistics[f".{statistic}"])]
        assert _number(mean) == pytest.approx(float(summary[f"{column}.mean"]), rel=1e-4)
        assert int(n) == int(summary[f"{column}.n"]) == 3
        low, high = (_number(end) for end in re.fullmatch(r"\[(.+), (.+)\]", interval).groups())
        # summary.csv's interval as it is, not a symmetric +- around the mean.
        assert low == pytest.approx(float(summary[f"{column}.ci95_low"]), rel=1e-4)
        assert high == pytest.approx(float(summary[f"{column}.ci95_high"]), rel=1e-4)
    assert rows[("user.sent_bytes", "whole run")][4] == "3"


def test_the_overview_of_a_seeds_only_sweep_has_a_panel_per_chosen_metric_with_its_statistic_interval_and_n(
    secagg_seeds: Path, tmp_path: Path, drawn: dict[str, Any]
) -> None:
    assert main(["report", str(secagg_seeds), "--out", str(tmp_path / "report"),
                 "--metrics", "participants.round_mean,u1,user.sent_bytes"]) == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "![Overview](overview.png)" in markdown and (tmp_path / "report" / "overview.png").stat().st_size > 10_000
    assert "4 panels: `participants.round_mean` (mean over rounds" in markdown
    panels = _panels(drawn["overview.png"])
    summary = read_csv(secagg_seeds / "summary.csv")[0]
    columns = ["participants.round_mean", "u1.final", "u1.round_mean", "user.sent_bytes"]
    # The unit comes from each metric's declaration (fedrecsim metrics secagg), bytes in binary units.
    labels = ["mean over rounds: mean over seeds (users)", "final value: mean over seeds (users)",
              "mean over rounds: mean over seeds (users)", "whole run: mean over seeds (KiB)"]
    assert [axes.get_ylabel() for axes in panels] == labels
    assert [axes.get_title() for axes in panels] == [
        "participants, mean over rounds", "u1, final value", "u1, mean over rounds", "user.sent_bytes, whole run"
    ]
    for axes, column in zip(panels, columns):
        scale = 1024 if column.endswith("bytes") else 1
        (bars,) = [container for container in axes.containers]
        ((_, low), (_, high)), = bars.lines[2][0].get_segments()
        assert low == pytest.approx(float(summary[f"{column}.ci95_low"]) / scale)
        assert high == pytest.approx(float(summary[f"{column}.ci95_high"]) / scale)
        assert "n = 3" in [text.get_text() for text in axes.texts]
        # Each run's own value is drawn beside the mean.
        runs = sorted(float(row[column]) / scale for row in read_csv(secagg_seeds / "sweep.csv"))
        dots = next(line for line in axes.get_lines() if line.get_label() == "one run")
        assert sorted(dots.get_ydata()) == pytest.approx(runs)


def test_metrics_refuses_a_name_the_sweep_lacks_and_lists_the_ones_it_has(
    secagg_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(secagg_seeds), "--out", str(tmp_path / "report"), "--metrics", "u1,hr@10"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--metrics: this sweep has no 'hr@10'" in error
    assert "participants (.final, .round_mean)" in error and "user.sent_bytes" in error and "privacy.threshold" in error
    assert not (tmp_path / "report").exists()
    assert main(["report", str(secagg_seeds), "--out", str(tmp_path / "report"), "--metrics", "u1,,u2"]) == 2
    assert "--metrics: expected comma-separated names" in capsys.readouterr().err


def test_a_summary_written_before_statistics_were_named_is_refused_with_what_to_do(
    secagg_seeds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(secagg_seeds, old)
    lines = (old / "summary.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [index for index, name in enumerate(header) if not name.endswith(".n")]
    (old / "summary.csv").write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n")
    assert main(["report", str(old)]) == 2
    assert "run the same `fedrecsim sweep` command again" in capsys.readouterr().err
    assert not (tmp_path / "old-report").exists()


@pytest.fixture(scope="module")
def dpmf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dpmf") / "run"
    fedrecsim.run(TINY_DPMF, out=folder)
    return folder


def test_a_run_overview_draws_the_chosen_metrics_per_round_with_whole_round_ticks_kib_and_the_baseline(
    dpmf_run: Path, tmp_path: Path, drawn: dict[str, Any]
) -> None:
    assert main(["report", str(dpmf_run), "--out", str(tmp_path / "report"),
                 "--metrics", "err_mean,user_up_max_b,test_rmse.final,err_increase"]) == 0
    document = json.loads((dpmf_run / "result.json").read_text())
    final, rounds = document["metrics"]["final"], document["metrics"]["rounds"]
    assert document["metrics"]["baselines"] == {"err_mean": "baseline_err_mean"}
    panels = _panels(drawn["overview.png"])
    assert [axes.get_title() for axes in panels] == ["err_mean", "user_up_max_b", "test_rmse", "err_increase"]
    for axes in panels:
        ticks = [tick for tick in axes.get_xticks() if axes.get_xlim()[0] <= tick <= axes.get_xlim()[1]]
        assert ticks and all(float(tick).is_integer() for tick in ticks), ticks
        assert axes.get_xlabel() == "round"
    err_mean, up, _, increase = panels
    assert err_mean.get_ylabel() == "value in each round (rating)"
    # err_increase is reported once, at the end: its one point is the final value, labelled so.
    assert increase.get_ylabel() == "final value (not reported per round) (rating)"
    (star,) = increase.get_lines()
    assert list(star.get_xdata()) == [document["rounds_completed"]] and list(star.get_ydata()) == [final["err_increase"]]
    baseline = [line for line in err_mean.get_lines() if "non-private baseline" in str(line.get_label())]
    assert len(baseline) == 1 and list(baseline[0].get_ydata()) == [final["baseline_err_mean"]] * 2
    assert up.get_ylabel() == "value in each round (KiB)"
    assert list(up.get_lines()[0].get_ydata()) == pytest.approx([row["user_up_max_b"] / 1024 for row in rounds])
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "`err_mean` (value in each round; dashed: non-private baseline `baseline_err_mean`, final value; rating)" in markdown
    # The table shows what was chosen: final value, mean over rounds, and the baseline beside err_mean.
    table = {row[0]: row for row in _table(markdown, "metric")}
    assert sorted(table) == ["err_increase", "err_mean", "test_rmse", "user_up_max_b"]
    assert _number(table["err_mean"][3]) == pytest.approx(final["baseline_err_mean"], rel=1e-5)
    mean = sum(row["err_mean"] for row in rounds) / len(rounds)
    assert _number(table["err_mean"][2]) == pytest.approx(mean, rel=1e-5)
    # The traffic per round has whole-round ticks too.
    traffic = _panels(drawn["per_round.png"])[-1]
    assert all(float(tick).is_integer() for tick in traffic.get_xticks())


def test_metrics_refuses_a_name_the_run_lacks(dpmf_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(dpmf_run), "--out", str(tmp_path / "report"), "--metrics", "hr@10"]) == 2
    error = capsys.readouterr().err
    assert "--metrics: this run has no 'hr@10'; it has: selected, participants" in error and "err_mean" in error


@pytest.fixture(scope="module")
def dpmf_grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dpmf (which has a non-private baseline) over a grid of run lengths, 2 seeds each."""
    out = tmp_path_factory.mktemp("dpmf-grid") / "sweep"
    scenario = tmp_path_factory.mktemp("scenario") / "tiny_dpmf.toml"
    scenario.write_text(_toml(TINY_DPMF))
    assert main(["sweep", str(scenario), "--grid", "run.rounds=2,3", "--seeds", "2", "--workers", "2", "--quiet",
                 "--out", str(out)]) == 0
    return out


def _toml(tables: dict[str, Any]) -> str:
    """A scenario's tables as TOML (JSON literals are TOML literals for these values)."""
    lines = []
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        for key, value in keys.items():
            lines.append(f"{key} = {json.dumps(value) if not isinstance(value, dict) else _inline(value)}")
    return "\n".join(lines) + "\n"


def _inline(value: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{key} = {json.dumps(item)}" for key, item in value.items()) + " }"


def test_a_grid_report_draws_the_baseline_beside_the_metric_states_n_and_uses_whole_ticks_and_kib(
    dpmf_grid: Path, tmp_path: Path, drawn: dict[str, Any]
) -> None:
    assert main(["report", str(dpmf_grid), "--out", str(tmp_path / "report"), "--metrics", "err_mean.final,user.sent_bytes"]) == 0
    summary = read_csv(dpmf_grid / "summary.csv")
    overview = _panels(drawn["overview.png"])
    assert [axes.get_title() for axes in overview] == ["err_mean, final value", "user.sent_bytes, whole run"]
    err_mean, sent = overview
    assert err_mean.get_ylabel().startswith("final value: mean over seeds") and err_mean.get_xlabel() == "run.rounds"
    baseline = next(line for line in err_mean.get_lines() if str(line.get_label()).startswith("non-private baseline"))
    assert list(baseline.get_ydata()) == pytest.approx([float(line["baseline_err_mean.final.mean"]) for line in summary])
    assert err_mean.get_legend().get_title().get_text() == "n = 2 per point"
    # The band is summary.csv's interval, drawn as it is.
    (band,) = err_mean.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(min(float(line["err_mean.final.ci95_low"]) for line in summary))
    assert max(ys) == pytest.approx(max(float(line["err_mean.final.ci95_high"]) for line in summary))
    assert sent.get_ylabel() == "whole run: mean over seeds (KiB)"
    assert list(sent.get_lines()[0].get_ydata()) == pytest.approx([float(line["user.sent_bytes.mean"]) / 1024 for line in summary])
    for axes in overview:
        ticks = [tick for tick in axes.get_xticks() if axes.get_xlim()[0] <= tick <= axes.get_xlim()[1]]
        assert ticks and all(float(tick).is_integer() for tick in ticks), ticks
    # One figure per chosen quantity against the grid, and a table of it per grid point with n and baseline.
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "![err_mean, final value](sweep_err_mean_final.png)" in markdown and "sweep_user_sent_bytes.png" in drawn
    rows = _table(markdown, "run.rounds")
    assert [(row[0], row[5]) for row in rows] == [("2", "2"), ("3", "2")]
    for row, line in zip(rows, summary):
        assert _number(row[3]) == pytest.approx(float(line["err_mean.final.mean"]), rel=1e-5)
        assert _number(row[6].split(" ")[0]) == pytest.approx(float(line["baseline_err_mean.final.mean"]), rel=1e-5)


TINY_LDP = {
    "run": {"protocol": "ldp_implicit", "name": "tiny-ldp", "seed": 5, "rounds": 2},
    "data": {"source": "synthetic", "feedback": "implicit", "users": 40, "items": 150, "ratings": 400,
             "split": "leave_one_out"},
    "network": {"latency": {"model": "constant", "seconds": 0.0}},
    "protocol": {"k": 20, "min_users": 40},
}


def test_a_seeds_only_sweep_draws_the_clipped_interval_as_it_is_and_the_baseline_beside_the_metric(
    tmp_path: Path, drawn: dict[str, Any]
) -> None:
    """ldp_implicit's hr@10 at 2 seeds: Student's t reaches below 0, summary.csv clips it at 0 and the
    report keeps it so (no symmetric +- around the mean); hr@10_mf_np is the non-private baseline."""
    scenario = tmp_path / "tiny_ldp.toml"
    scenario.write_text(_toml(copy.deepcopy(TINY_LDP)))
    assert main(["sweep", str(scenario), "--seeds", "2", "--workers", "2", "--quiet", "--out", str(tmp_path / "sweep")]) == 0
    assert main(["report", str(tmp_path / "sweep"), "--metrics", "hr@10.final"]) == 0
    summary = read_csv(tmp_path / "sweep" / "summary.csv")[0]
    mean, low, high = (float(summary[f"hr@10.final.{part}"]) for part in ("mean", "ci95_low", "ci95_high"))
    assert low == 0.0 and mean - low < high - mean  # clipped: the case where a symmetric +- would leave [0, 1]
    (panel,) = _panels(drawn["overview.png"])
    assert [label.get_text() for label in panel.get_xticklabels()] == ["hr@10", "hr@10_mf_np"]
    ours, baseline = panel.containers
    ((_, drawn_low), (_, drawn_high)), = ours.lines[2][0].get_segments()
    assert (drawn_low, drawn_high) == pytest.approx((low, high))
    assert baseline.lines[0].get_ydata()[0] == pytest.approx(float(summary["hr@10_mf_np.final.mean"]))
    markdown = (tmp_path / "sweep-report" / "report.md").read_text()
    (row,) = _table(markdown, "quantity")
    assert row[:2] == ["`hr@10`", "final value"] and row[4] == "2" and row[5].startswith("`hr@10_mf_np.final` ")
    ends = re.fullmatch(r"\[(.+), (.+)\]", row[3]).groups()
    assert [_number(end) for end in ends] == pytest.approx([low, high], rel=1e-5)


def test_every_title_and_label_of_a_grid_report_fits_inside_its_figure(
    dpmf_grid: Path, tmp_path: Path, drawn: dict[str, Any]
) -> None:
    """A one-panel figure against a parameter names its quantity in a title wider than the panel: the
    title must wrap, not run off both edges (which cut "user.sent_bytes, whole run" to "t_bytes, whole run")."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    assert main(["report", str(dpmf_grid), "--out", str(tmp_path / "report"), "--metrics", "err_mean,user.sent_bytes"]) == 0
    assert {"overview.png", "sweep_user_sent_bytes.png", "sweep_err_mean_round_mean.png"} <= set(drawn)
    for name, figure in drawn.items():
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        inked = figure.get_tightbbox(canvas.get_renderer())  # everything drawn, in inches
        paper = figure.bbox_inches
        assert inked.x0 >= paper.x0 - 0.01 and inked.x1 <= paper.x1 + 0.01, (name, inked, paper)
        assert inked.y0 >= paper.y0 - 0.01 and inked.y1 <= paper.y1 + 0.01, (name, inked, paper)
    title = " ".join(drawn["sweep_user_sent_bytes.png"].get_suptitle().split())
    assert title.startswith("user.sent_bytes, whole run")
