"""Reports: a run folder or a sweep folder turned into PNG plots and a ``report.md`` that shows them.

``fedrecsim report DIR [--out REPORT] [--metrics a,b]`` writes the report beside its source, in
``DIR-report`` (never inside a result folder, whose contents `fedrecsim.output` keeps to the files a run
writes):

- a run folder: the final metrics (final value, mean over rounds, non-private baseline), bytes sent and
  received per role (bars), the distribution of bytes per user (histogram), bytes and online users per
  round (lines), the prediction-error CDF of a protocol that records its errors' distribution
  (``distributions`` in result.json: dpmf, Hua et al.'s Fig. 7 shape), for protocols with privacy
  accounting the epsilon spent by each round: per epoch, composed (ldp_implicit's
  ``epsilon_per_user_epoch``), or once (dpmf's ``epsilon_spent``); and ``overview.png``, one panel per
  chosen metric: its value in each round;
- a sweep folder: every measured quantity of ``summary.csv`` with its mean over seeds, its 95% interval
  and n (the complete runs with a value), as a table; ``overview.png``, one panel per chosen quantity
  against the first grid parameter (per grid point for a seeds-only sweep, beside each run's value); and
  with grid parameters one figure per chosen quantity against each parameter, one line per value of the
  other parameters.

What a number is, is said where it is shown: a sweep column ``M.final`` is labelled "final value" and
``M.round_mean`` "mean over rounds" (`fedrecsim.sweep`'s column contract), byte totals "whole run". The
intervals are summary.csv's own, already clipped to the quantity's range, and are drawn as they are
(never widened into a symmetric +-). Where a run names a non-private baseline for a metric
(``metrics.baselines`` in result.json) it is drawn beside the metric. Round axes have whole-number ticks;
byte axes are in B, KiB, MiB or GiB (powers of 1024), named on the axis.

``--metrics`` chooses what the tables and figures show, by the names a user knows: a metric (``hr@10``:
each of its statistics), one statistic (``hr@10.final``), ``privacy.<name>`` or ``<role>.sent_bytes``.
Without it, a run report shows every metric reported per round and a sweep report every quantity that
varies; the baselines are drawn beside their metric rather than on their own.

A report folder is marked by the first line of its ``report.md``; re-running replaces a report of ours
(its ``report.md`` and the PNG files it shows, by name) and refuses anything else -- a report folder
that also holds a file the report did not write (a user's own PNG) included. matplotlib is the optional extra
``plot``.
"""

from __future__ import annotations

import json
import math
import os
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, OutputError
from .metric_reference import describe
from .output import RESULT_FORMAT
from .summary import number
from .sweep import FINAL, MARKER, ROUND_MEAN, RUNS, metric_columns, read_csv, sweep_folder_problem

REPORT_MARKER = "<!-- fedrecsim-report/1 -->"
_SIZE = (6.4, 3.6)
_PANEL = (3.6, 2.7)
_PANEL_COLUMNS = 3
_DPI = 110
_BASELINE_COLOR = "0.35"


def _figure_type() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("", 'fedrecsim report needs matplotlib: pip install "fedrecsim[plot]"') from None
    return Figure


def write_report(source: str | Path, out: str | Path | None = None, metrics: Sequence[str] | None = None) -> Path:
    """Write the report of a run or sweep folder; returns the report folder.

    Args:
        metrics: the names to show (see the module docstring); None shows the default choice.

    Raises:
        ConfigError: ``source`` is neither a run folder nor a sweep folder, a name of ``metrics`` is not
            in it (the message lists the names there are), or matplotlib is missing.
        OutputError: ``out`` exists and is not a report of ours.
    """
    source = Path(os.path.abspath(source))
    kind = _kind(source)
    figure = _figure_type()
    target = Path(os.path.abspath(out)) if out is not None else source.with_name(f"{source.name}-report")
    staging = _prepare(target)
    try:
        if kind == "run":
            markdown = _run_report(source, staging, figure, metrics)
        else:
            markdown = _sweep_report(source, staging, figure, metrics)
        (staging / "report.md").write_text(f"{REPORT_MARKER}\n{markdown}", encoding="utf-8")
        _commit(staging, target)
    except BaseException:
        _discard(staging)
        raise
    return target


def parse_metrics(text: str) -> list[str]:
    """``--metrics a,b`` as its names; an empty name is refused.

    Raises:
        ConfigError: naming ``--metrics``.
    """
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ConfigError("--metrics", f"expected comma-separated names such as hr@10,test_rmse.final, got {text!r}")
    return list(dict.fromkeys(names))


def _kind(source: Path) -> str:
    if (source / MARKER).exists() and sweep_folder_problem(source) is None:
        return "sweep"
    try:
        document = json.loads((source / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = None
    if isinstance(document, dict) and document.get("format") == RESULT_FORMAT:
        return "run"
    raise ConfigError("", f"{source} is neither a fedrecsim run folder (result.json) nor a sweep folder ({MARKER})")


# -- the report folder ------------------------------------------------------------------------------


def _ours(folder: Path) -> bool:
    """A folder holding a report.md with our marker and nothing but it and the PNG files it shows: a PNG
    the report does not link (a user's chart put beside it) makes the folder not ours, never removed."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        markdown = (folder / "report.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    shown = set(_LINKED.findall(markdown))
    return markdown.split("\n", 1)[0] == REPORT_MARKER and all(
        _report_file(entry) and (entry.name == "report.md" or entry.name in shown) for entry in folder.iterdir()
    )


_LINKED = re.compile(r"!\[[^\]]*\]\(([^)\s/]+\.png)\)")


def _report_file(entry: Path) -> bool:
    return entry.is_file() and not entry.is_symlink() and (entry.name == "report.md" or entry.suffix == ".png")


def _prepare(target: Path) -> Path:
    if os.path.lexists(target) and not _ours(target):
        raise OutputError(target, "exists and is not a fedrecsim report; choose another --out")
    if os.path.lexists(target.parent) and not target.parent.is_dir():
        raise OutputError(target.parent, "is not a folder, so the report cannot be written there")
    try:
        os.makedirs(target.parent, exist_ok=True)  # as a run's --out makes its missing parents
    except OSError as exc:
        raise OutputError(exc.filename or target.parent, f"cannot create the report's folder: {exc.strerror}") from None
    staging = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        os.mkdir(staging)
    except OSError as exc:
        raise OutputError(staging, f"cannot create the report folder: {exc.strerror}") from None
    return staging


def _discard(folder: Path) -> None:
    """Remove a report folder we wrote: its report files by name, then the folder (rmdir)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if _report_file(entry):
            entry.unlink()
    folder.rmdir()


def _commit(staging: Path, target: Path) -> None:
    if os.path.lexists(target):
        if not _ours(target):
            raise OutputError(target, f"appeared while the report was drawn; not replacing it (the report is in {staging})")
        retired = target.with_name(f".{target.name}.replaced-{os.getpid()}")
        os.rename(target, retired)
        os.rename(staging, target)
        _discard(retired)
        return
    os.rename(staging, target)


# -- what a number is -------------------------------------------------------------------------------

_BYTE_COLUMNS = (".sent_bytes", ".recv_bytes")
_STATISTICS = {FINAL: "final value", ROUND_MEAN: "mean over rounds"}


@dataclass(frozen=True)
class Quantity:
    """One measured quantity a report shows, labelled with the statistic it is.

    ``column`` is its name in sweep.csv / summary.csv (``hr@10.final``) or, in a run report, the metric's
    name; ``metric`` the name a user knows it by (``hr@10``, ``privacy.epsilon``, ``user.sent_bytes``);
    ``statistic`` what one run contributes: "final value", "mean over rounds", "whole run" (byte totals),
    "value in each round" (a run's per-round curve) or "" (a privacy figure, a number the run states).
    """

    column: str
    metric: str
    statistic: str

    @property
    def label(self) -> str:
        return f"{self.metric}, {self.statistic}" if self.statistic else self.metric

    @property
    def unit(self) -> str:
        """"bytes", "s", the metric reference's unit ("rating", "rank", ...) or "" for a plain number."""
        if self.metric.endswith(_BYTE_COLUMNS) or self.metric.endswith(("_bytes", "_b")):
            return "bytes"
        info = describe(self.metric)
        if info is not None and info.unit:
            return "bytes" if info.unit in ("B", "byte", "bytes") else info.unit
        return "s" if self.metric.endswith("_s") else ""


def _sweep_quantity(column: str) -> Quantity:
    """The quantity of a measured summary.csv column, by the column contract of `fedrecsim.sweep`."""
    if column.startswith("privacy."):
        return Quantity(column, column, "")
    if column.endswith(_BYTE_COLUMNS):
        return Quantity(column, column, "whole run")
    for suffix, statistic in _STATISTICS.items():
        if column.endswith(suffix):
            return Quantity(column, column[: -len(suffix)], statistic)
    raise ConfigError("", f"summary.csv has a column {column!r} that is no metric statistic, privacy figure or byte count")


def _choose(available: Sequence[Quantity], requested: Sequence[str] | None, default: Sequence[Quantity], where: str) -> list[Quantity]:
    """The quantities ``requested`` names (a metric: each of its statistics; a column: itself), in the
    order asked; ``default`` without a request.

    Raises:
        ConfigError: a name matches nothing; the message lists every name ``where`` has.
    """
    if requested is None:
        return list(default)
    chosen: list[Quantity] = []
    for name in requested:
        matches = [quantity for quantity in available if name in (quantity.column, quantity.metric)]
        if not matches:
            raise ConfigError("--metrics", f"{where} has no {name!r}; it has: {_names(available)}")
        chosen.extend(quantity for quantity in matches if quantity not in chosen)
    return chosen


def _names(available: Sequence[Quantity]) -> str:
    """Each metric once, with the suffixes of its columns (``hr@10 (.final, .round_mean)``) where it has any."""
    suffixes: dict[str, list[str]] = {}
    for quantity in available:
        suffixes.setdefault(quantity.metric, []).append(quantity.column[len(quantity.metric):])
    return ", ".join(
        f"{metric} ({', '.join(ends)})" if any(ends) else metric for metric, ends in suffixes.items()
    )


def _byte_unit(largest: float) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return scale, unit
    return 1.0, "B"


def _axis_unit(quantity: Quantity, values: Sequence[float]) -> tuple[float, str]:
    """The divisor and the unit named on an axis of ``values``: bytes in B / KiB / MiB / GiB by the
    largest magnitude, anything else as it is."""
    if quantity.unit == "bytes":
        return _byte_unit(max((abs(value) for value in values), default=0.0))
    return 1.0, quantity.unit


def _with_unit(text: str, unit: str) -> str:
    return f"{text} ({unit})" if unit else text


def _fitted(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines at spaces so that each fits ``width_in`` inches at ``fontsize`` points (a
    title wider than its figure would run off both edges and lose its first and last words)."""
    characters = max(16, int(0.9 * width_in * 72 / (0.6 * fontsize)))
    return textwrap.fill(text, characters, break_long_words=False, break_on_hyphens=False)


def _integer_ticks(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator  # matplotlib is there: _figure_type checked it

    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def _panels(figure_type: Any, count: int) -> tuple[Any, list[Any]]:
    """A figure of ``count`` panels, up to three a row, and its axes in reading order (the rest hidden)."""
    columns = min(count, _PANEL_COLUMNS)
    rows = math.ceil(count / columns)
    figure = figure_type(layout="constrained", figsize=(_PANEL[0] * columns, _PANEL[1] * rows + 0.4))
    grid = figure.subplots(rows, columns, squeeze=False)
    axes = [grid[index // columns][index % columns] for index in range(rows * columns)]
    for spare in axes[count:]:
        spare.set_visible(False)
    return figure, axes[:count]


def _save(figure: Any, folder: Path, name: str) -> str:
    figure.savefig(folder / name, dpi=_DPI)
    return name


# -- a run ------------------------------------------------------------------------------------------


def _run_report(source: Path, folder: Path, figure_type: Any, requested: Sequence[str] | None) -> str:
    document = json.loads((source / "result.json").read_text(encoding="utf-8"))
    metrics = document["metrics"]
    baselines = {name: baseline for name, baseline in metrics.get("baselines", {}).items() if baseline in metrics["final"]}
    per_round = [name for name in dict.fromkeys(key for row in metrics["rounds"] for key in row) if name != "round"]
    names = list(dict.fromkeys([*metrics["final"], *per_round]))
    available = [Quantity(name, name, "value in each round") for name in names]
    # A statistic's suffix names the metric in a run too: the run has its rounds and its final value.
    asked = None if requested is None else [_without_statistic(name, names) for name in requested]
    shown_as_baseline = set(baselines.values())
    chosen = _choose(
        available, asked, [q for q in available if q.metric in per_round and q.metric not in shown_as_baseline], "this run"
    )
    name = document["scenario"]["run"]["name"]
    lines = [
        f"# Run report: {name} ({document['protocol']}, seed {document['seed']})",
        "",
        f"{count_text(document['rounds_completed'], 'round')}, {count_text(document['data']['users'], 'user')} x "
        f"{count_text(document['data']['items'], 'item')}, "
        f"{document['virtual_time_s']:.1f} s virtual time; source `{source}`.",
        "",
        "## Metrics",
        "",
        *_run_metric_table(metrics, baselines, [q.metric for q in chosen] if requested is not None else names),
        "",
    ]
    roles = document["ledger"]["roles"]
    lines += [
        "## Bytes per role",
        "",
        "| role | parties | sent bytes | received bytes | messages sent |",
        "|---|---|---|---|---|",
        *(f"| {role} | {c['parties']:,} | {c['sent_bytes']:,} | {c['recv_bytes']:,} | {c['sent_msgs']:,} |" for role, c in roles.items()),
        "",
    ]
    if chosen:
        image, described = _run_overview(metrics, baselines, chosen, document["rounds_completed"], folder, figure_type)
        lines += ["## Overview", "", f"![Overview]({image})", "", described, ""]
    for title, image in _run_plots(document, folder, figure_type):
        lines += [f"## {title}", "", f"![{title}]({image})", ""]
    return "\n".join(lines)


def _without_statistic(name: str, metrics: Sequence[str]) -> str:
    """``hr@10.final`` / ``hr@10.round_mean`` as ``hr@10`` where the run has ``hr@10``; else ``name``."""
    for suffix in _STATISTICS:
        if name.endswith(suffix) and name[: -len(suffix)] in metrics:
            return name[: -len(suffix)]
    return name


def _run_metric_table(metrics: Mapping[str, Any], baselines: Mapping[str, str], names: Sequence[str]) -> list[str]:
    """One row per metric: its final value, its mean over the rounds that report it (as sweep.csv's
    ``M.round_mean``) and its non-private baseline's final value; a baseline shown beside its metric has
    no row of its own."""
    means = {column[: -len(ROUND_MEAN)]: value for column, value in metric_columns(metrics).items() if column.endswith(ROUND_MEAN)}
    shown_beside = {baselines[name] for name in names if name in baselines}
    header = ["metric", "final value", "mean over rounds"] + (["non-private baseline (final value)"] if baselines else [])
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        if name in shown_beside:
            continue
        cells = [name, _cell(metrics["final"].get(name)), _cell(means.get(name))]
        if baselines:
            cells.append(_cell(metrics["final"].get(baselines.get(name, ""))))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _cell(value: Any) -> str:
    return "" if value is None else number(value)


def _run_overview(
    metrics: Mapping[str, Any],
    baselines: Mapping[str, str],
    chosen: Sequence[Quantity],
    rounds_completed: int,
    folder: Path,
    figure_type: Any,
) -> tuple[str, str]:
    """One panel per chosen metric: its value in each round, its final value where that is not the last
    round's, and its non-private baseline (per round where the run reports it so, else its final value).
    Returns the image and the report's description of the panels."""
    figure, panels = _panels(figure_type, len(chosen))
    described = []
    for axes, quantity in zip(panels, chosen):
        name = quantity.metric
        points = [(row["round"], row[name]) for row in metrics["rounds"] if row.get(name) is not None]
        final = metrics["final"].get(name)
        baseline = baselines.get(name)
        baseline_points = [(row["round"], row[baseline]) for row in metrics["rounds"] if baseline and row.get(baseline) is not None]
        baseline_final = metrics["final"].get(baseline) if baseline else None
        values = [y for _, y in points] + [v for v in (final, baseline_final) if v is not None] + [y for _, y in baseline_points]
        scale, unit = _axis_unit(quantity, values)
        parts = []
        if points:
            axes.plot([x for x, _ in points], [y / scale for _, y in points], marker="." if len(points) < 30 else None, label="each round")
            parts.append("value in each round")
        last = points[-1][1] if points else None
        if final is not None and (last is None or not math.isclose(final, last, rel_tol=1e-9, abs_tol=0.0)):
            axes.plot([rounds_completed], [final / scale], marker="*", markersize=10, linestyle="none", color="tab:red", label="final value")
            parts.append("final value (star)")
        if baseline_points:
            axes.plot([x for x, _ in baseline_points], [y / scale for _, y in baseline_points], linestyle="--",
                      color=_BASELINE_COLOR, label=f"non-private baseline ({baseline})")
            parts.append(f"dashed: non-private baseline `{baseline}` in each round")
        elif baseline_final is not None:
            axes.axhline(baseline_final / scale, linestyle="--", color=_BASELINE_COLOR, label=f"non-private baseline ({baseline})")
            parts.append(f"dashed: non-private baseline `{baseline}`, final value")
        axes.set_title(_fitted(name, _PANEL[0], 9), fontsize=9, pad=12)
        axes.set_xlabel("round", fontsize=8)
        shown = "value in each round" if points else "final value (not reported per round)"
        axes.set_ylabel(_with_unit(shown, unit), fontsize=8)
        rounds = [x for x, _ in points] + ([rounds_completed] if final is not None else [])
        if rounds and max(rounds) == min(rounds):
            # One round alone: half a round either side, so the whole-number tick has room.
            axes.set_xlim(min(rounds) - 0.5, max(rounds) + 0.5)
        _integer_ticks(axes.xaxis)
        axes.tick_params(labelsize=7)
        if len(parts) > 1:
            axes.legend(fontsize=6)
        described.append(f"`{name}` ({'; '.join(parts)}{'; ' + unit if unit else ''})")
    figure.suptitle(_fitted("Metrics of the run, round by round", figure.get_figwidth(), 10), fontsize=10)
    return _save(figure, folder, "overview.png"), f"{len(chosen)} panels: " + ", ".join(described) + "."


def _run_plots(document: Mapping[str, Any], folder: Path, figure_type: Any) -> list[tuple[str, str]]:
    plots = [("Bytes per role", _bytes_per_role(document, folder, figure_type))]
    users = [c["sent_bytes"] + c["recv_bytes"] for party, c in document["ledger"]["parties"].items() if party.startswith("user:")]
    if users:
        plots.append(("Bytes per user", _bytes_per_user(users, folder, figure_type)))
    if document["ledger"]["per_round"]:
        plots.append(("Bytes and online users per round", _per_round(document["ledger"]["per_round"], folder, figure_type)))
    cdfs = {name: value for name, value in document.get("distributions", {}).items() if _is_cdf(value)}
    if cdfs:
        plots.append(("Prediction error CDF", _error_cdf(cdfs, folder, figure_type)))
    spent = _epsilon_by_round(document["privacy"], document["rounds_completed"])
    if spent is not None:
        plots.append(("Privacy spent per round", _epsilon(*spent, folder, figure_type)))
    return plots


def _is_cdf(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("quantiles"), list)
        and isinstance(value.get("values"), list)
        and len(value["quantiles"]) == len(value["values"]) >= 2
        and None not in value["values"]
    )


def _error_cdf(cdfs: Mapping[str, Mapping[str, Any]], folder: Path, figure_type: Any) -> str:
    """Each distribution's CDF: the fraction of ratings (y) whose absolute error is at most x."""
    figure = figure_type(layout="constrained", figsize=_SIZE)
    axes = figure.subplots()
    units = sorted({str(cdf.get("unit", "")) for cdf in cdfs.values()})
    for name, cdf in cdfs.items():
        style = "--" if name.startswith("baseline") else ":" if name.endswith("test") else "-"
        axes.plot(cdf["values"], [100 * q for q in cdf["quantiles"]], style, marker=".", label=cdf.get("of", name))
    # The largest errors would squeeze the curves against the axis: cut at the 95th percentile, and say so.
    cut = max(_interpolate(cdf["quantiles"], cdf["values"], 0.95) for cdf in cdfs.values())
    largest = max(cdf["values"][-1] for cdf in cdfs.values())
    if largest > 1.5 * cut > 0:
        axes.set_xlim(0, 1.1 * cut)
        axes.annotate(f"axis cut at the 95th percentile;\nthe largest error is {largest:,.4g}", (0.98, 0.45),
                      xycoords="axes fraction", ha="right", fontsize=8, color="0.3")
    else:
        axes.set_xlim(left=0)
    axes.set_xlabel(f"absolute prediction error ({', '.join(units) or 'value units'})")
    axes.set_ylabel("ratings with at most this error (%)")
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)
    axes.set_title("Prediction error CDF (cf. Hua et al., Fig. 7)")
    axes.legend(fontsize=7, loc="lower right")
    return _save(figure, folder, "error_cdf.png")


def _interpolate(quantiles: Sequence[float], values: Sequence[float], at: float) -> float:
    """The ``at``-quantile, linearly interpolated between the recorded ones."""
    for (q0, v0), (q1, v1) in zip(zip(quantiles, values), zip(quantiles[1:], values[1:])):
        if q0 <= at <= q1:
            return v0 if q1 == q0 else v0 + (v1 - v0) * (at - q0) / (q1 - q0)
    return values[-1]


def _epsilon_by_round(privacy: Mapping[str, Any], rounds: int) -> tuple[list[float], str, str] | None:
    """Cumulative epsilon after each round 0..R, how it is accounted, and of what; None without accounting.

    ``epsilon_per_user_epoch`` (ldp_implicit): spent every epoch, composed additively (basic composition).
    ``epsilon_spent`` (dpmf): ``total`` spent once, at round ``at_round``, and never again.
    """
    if not rounds:
        return None
    per_epoch = privacy.get("epsilon_per_user_epoch")
    if isinstance(per_epoch, (int, float)) and not isinstance(per_epoch, bool):
        cumulative = [per_epoch * index for index in range(rounds + 1)]
        return cumulative, f"{per_epoch:g} per epoch, basic composition", "epsilon spent per user (cumulative)"
    spent = privacy.get("epsilon_spent")
    if isinstance(spent, Mapping) and isinstance(spent.get("total"), (int, float)) and isinstance(spent.get("at_round"), int):
        total, at = spent["total"], spent["at_round"]
        where = "before round 1" if at == 0 else f"after round {at}"
        cumulative = [total if index >= at else 0.0 for index in range(rounds + 1)]
        return cumulative, f"{total:g} once, {where}; iterations do not compose", "epsilon of the published V (cumulative)"
    return None


def _bytes_per_role(document: Mapping[str, Any], folder: Path, figure_type: Any) -> str:
    roles = document["ledger"]["roles"]
    names = list(roles)
    sent = [roles[role]["sent_bytes"] for role in names]
    received = [roles[role]["recv_bytes"] for role in names]
    scale, unit = _byte_unit(max(sent + received + [1]))
    figure = figure_type(layout="constrained", figsize=_SIZE)
    axes = figure.subplots()
    positions = range(len(names))
    axes.bar([p - 0.2 for p in positions], [v / scale for v in sent], width=0.4, label="sent")
    axes.bar([p + 0.2 for p in positions], [v / scale for v in received], width=0.4, label="received")
    axes.set_xticks(list(positions), [f"{role}\n({roles[role]['parties']:,} parties)" for role in names])
    axes.set_ylabel(f"total bytes ({unit})")
    axes.set_title("Bytes per role over the whole run")
    axes.legend()
    return _save(figure, folder, "bytes_per_role.png")


def _bytes_per_user(users: Sequence[int], folder: Path, figure_type: Any) -> str:
    scale, unit = _byte_unit(max(users))
    figure = figure_type(layout="constrained", figsize=_SIZE)
    axes = figure.subplots()
    axes.hist([value / scale for value in users], bins=min(40, max(5, len(users) // 5)))
    axes.set_xlabel(f"bytes sent + received per user ({unit})")
    axes.set_ylabel("users")
    axes.set_title(f"Bytes per user ({len(users):,} users)")
    return _save(figure, folder, "bytes_per_user.png")


def _per_round(per_round: Sequence[Mapping[str, Any]], folder: Path, figure_type: Any) -> str:
    rounds = [row["round"] for row in per_round]
    scale, unit = _byte_unit(max(row["bytes"] for row in per_round))
    figure = figure_type(layout="constrained", figsize=(_SIZE[0], _SIZE[1] * 1.4))
    top, bottom = figure.subplots(2, 1, sharex=True)
    top.plot(rounds, [row["bytes"] / scale for row in per_round], drawstyle="steps-mid")
    top.set_ylabel(f"bytes sent ({unit})")
    top.set_title("Traffic and online users per round (round 0: set-up)")
    bottom.plot(rounds, [row["online"] for row in per_round], drawstyle="steps-mid", color="tab:green")
    bottom.set_ylabel("online users")
    bottom.set_xlabel("round")
    bottom.set_ylim(bottom=0)
    _integer_ticks(bottom.xaxis)
    return _save(figure, folder, "per_round.png")


def _epsilon(cumulative: Sequence[float], how: str, of: str, folder: Path, figure_type: Any) -> str:
    figure = figure_type(layout="constrained", figsize=_SIZE)
    axes = figure.subplots()
    rounds = len(cumulative) - 1
    axes.plot(range(rounds + 1), cumulative, drawstyle="steps-post", marker="." if rounds < 30 else None)
    axes.set_xlabel("round (0: set-up)")
    _integer_ticks(axes.xaxis)
    axes.set_ylabel(of)
    axes.set_title(_fitted(f"Privacy: {how}", _SIZE[0], 10), fontsize=10)
    axes.set_ylim(0, max(cumulative) * 1.1 or 1.0)
    return _save(figure, folder, "epsilon_per_round.png")


# -- a sweep ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sweep:
    """A sweep folder as the report reads it: summary.csv's and sweep.csv's rows, the measured quantities
    in summary.csv's order, and each metric column's non-private baseline column."""

    parameters: list[str]
    seeds: int
    summary: list[dict[str, str]]
    runs: list[dict[str, str]]
    quantities: list[Quantity]
    baselines: dict[str, str]


@dataclass(frozen=True)
class _Statistic:
    """One quantity at one grid point, as summary.csv holds it (None where the cell is empty)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int


def _statistic(line: Mapping[str, str], column: str) -> _Statistic:
    mean, low, high, n = (line.get(f"{column}.{part}", "") for part in ("mean", "ci95_low", "ci95_high", "n"))
    return _Statistic(float(mean) if mean else None, float(low) if low else None, float(high) if high else None, int(n or 0))


def count_text(count: int, noun: str) -> str:
    """``1 grid point``, ``1,000 users``: a count and its noun as the report and the sweep command print them."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _read_sweep(source: Path) -> _Sweep:
    """Raises ConfigError: no summary.csv yet, or one written before summary.csv named its statistics."""
    marker = json.loads((source / MARKER).read_text(encoding="utf-8"))
    summary_path = source / "summary.csv"
    if not summary_path.exists():
        raise ConfigError("", f"{source} has no summary.csv yet; run the sweep (it resumes) before the report")
    summary = read_csv(summary_path)
    if not summary:
        raise ConfigError("", f"{summary_path} has no grid point; run the sweep (it resumes) before the report")
    header = list(summary[0])
    columns = [name[: -len(".mean")] for name in header if name.endswith(".mean")]
    if any(f"{column}.n" not in header for column in columns):
        raise ConfigError("", (
            f"{summary_path} was written by an older fedrecsim that did not say which statistic each column is; "
            "run the same `fedrecsim sweep` command again to rewrite sweep.csv and summary.csv (complete runs are kept)"
        ))
    quantities = [_sweep_quantity(column) for column in columns]
    parameters = list(marker["parameters"])
    runs = read_csv(source / "sweep.csv")
    return _Sweep(parameters, marker["seeds"], summary, runs, quantities, _baseline_columns(source, runs, parameters, quantities))


def _baseline_columns(
    source: Path, runs: Sequence[Mapping[str, str]], parameters: Sequence[str], quantities: Sequence[Quantity]
) -> dict[str, str]:
    """Each metric column's baseline column: the same statistic of the metric the runs' result.json names
    as its non-private baseline (``metrics.baselines``), else that metric's final value.

    The pairs are a protocol's, so one complete run per grid point is read (a grid may sweep the protocol).
    """
    pairs: dict[str, str] = {}
    points: set[tuple[str, ...]] = set()
    for row in runs:
        point = tuple(row[parameter] for parameter in parameters)
        if row["status"] != "complete" or point in points:
            continue
        points.add(point)
        try:
            document = json.loads((source / RUNS / row["run"] / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        named = document.get("metrics", {}).get("baselines", {}) if isinstance(document, dict) else {}
        for metric, baseline in named.items():
            pairs.setdefault(metric, baseline)
    columns = {quantity.column for quantity in quantities}
    baselines: dict[str, str] = {}
    for quantity in quantities:
        baseline = pairs.get(quantity.metric)
        if baseline is None or quantity.column == quantity.metric:
            continue
        suffix = quantity.column[len(quantity.metric):]
        found = next((name for name in (f"{baseline}{suffix}", f"{baseline}{FINAL}") if name in columns), None)
        if found is not None:
            baselines[quantity.column] = found
    return baselines


def _sweep_report(source: Path, folder: Path, figure_type: Any, requested: Sequence[str] | None) -> str:
    sweep = _read_sweep(source)
    varying = [quantity for quantity in sweep.quantities if _varies(sweep.summary, quantity.column)]
    beside = {sweep.baselines[quantity.column] for quantity in varying if quantity.column in sweep.baselines}
    chosen = _choose(sweep.quantities, requested, [quantity for quantity in varying if quantity.column not in beside], "this sweep")
    parameters = sweep.parameters
    lines = [
        f"# Sweep report: {count_text(len(sweep.summary), 'grid point')} x {count_text(sweep.seeds, 'seed')}",
        "",
        f"Parameters: {', '.join(f'`{name}`' for name in parameters) or '(none: seeds only)'}; source `{source}`.",
        "",
        "Each value is the mean over a grid point's complete runs, n of them (summary.csv's `.mean` and `.n`); "
        "the interval is summary.csv's 95% confidence interval of that mean (Student's t), clipped to the values "
        "the quantity can take (ranking metrics in [0, 1], errors and byte counts at least 0), and none with n = 1. "
        "What one run contributes is named beside each number: *final value* (the run's final metric, "
        "`M.final`), *mean over rounds* (the mean of a per-round metric over the run's rounds, `M.round_mean`), "
        "*whole run* (bytes over the whole run, `<role>.sent_bytes` / `.recv_bytes`); `privacy.*` are the "
        "run's privacy figures.",
        "",
    ]
    failed = sum(int(line["failed"]) for line in sweep.summary)
    if failed:
        lines += [f"**{count_text(failed, 'run')} failed**; see the error column of sweep.csv.", ""]
    if chosen:
        image, described = _sweep_overview(sweep, chosen, folder, figure_type)
        lines += ["## Overview", "", f"![Overview]({image})", "", described, ""]
    else:
        lines += ["Every quantity has the same value in every complete run: no figure is drawn.", ""]
    if not parameters:
        tabled = chosen if requested is not None else sweep.quantities
        lines += ["## Summary", "", *_seeds_table(sweep, tabled, beside if requested is None else set()), ""]
        return "\n".join(lines)
    names: set[str] = set()
    for quantity in chosen:
        image = _against_parameters(sweep, quantity, folder, figure_type, _file_name(quantity.column, names))
        lines += [f"## {quantity.label}", "", *_grid_table(sweep, quantity), "", f"![{quantity.label}]({image})", ""]
    if requested is None:
        constant = [quantity for quantity in sweep.quantities if quantity not in varying]
        if constant:
            lines += ["## Constant over the whole grid", "", *_constant_table(sweep, constant), ""]
    return "\n".join(lines)


def _varies(summary: Sequence[Mapping[str, str]], column: str) -> bool:
    """Whether the column takes more than one value: means differing between grid points, or a
    grid point's runs differing (an interval of some width)."""
    values = {
        float(line[f"{column}.{part}"]) for line in summary for part in ("mean", "ci95_low", "ci95_high") if line[f"{column}.{part}"]
    }
    return len(values) > 1


def _interval(statistic: _Statistic) -> str:
    if statistic.low is None or statistic.high is None:
        return "none (n = 1)" if statistic.n == 1 else ""
    return f"[{number(statistic.low)}, {number(statistic.high)}]"


def _with_interval(statistic: _Statistic) -> str:
    if statistic.mean is None:
        return ""
    interval = _interval(statistic)
    return f"{number(statistic.mean)} {interval}" if interval.startswith("[") else number(statistic.mean)


def _seeds_table(sweep: _Sweep, quantities: Sequence[Quantity], beside: set[str]) -> list[str]:
    """A seeds-only sweep: one row per quantity (a baseline shown beside its metric has no row)."""
    with_baseline = any(quantity.column in sweep.baselines for quantity in quantities)
    header = ["quantity", "statistic (one run's)", "mean over seeds", "95% interval", "n"]
    header += ["non-private baseline: mean [95% interval]"] if with_baseline else []
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    line = sweep.summary[0]
    for quantity in quantities:
        if quantity.column in beside:
            continue
        statistic = _statistic(line, quantity.column)
        cells = [f"`{quantity.metric}`", quantity.statistic or "privacy figure", _cell(statistic.mean), _interval(statistic), str(statistic.n)]
        if with_baseline:
            baseline = sweep.baselines.get(quantity.column)
            cells.append(f"`{baseline}` {_with_interval(_statistic(line, baseline))}" if baseline else "")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _grid_table(sweep: _Sweep, quantity: Quantity) -> list[str]:
    """One row per grid point: the parameters, the quantity's mean, interval and n, and its baseline."""
    baseline = sweep.baselines.get(quantity.column)
    header = [*sweep.parameters, "runs", "failed", f"{quantity.label}: mean over seeds", "95% interval", "n"]
    header += [f"non-private baseline `{baseline}`: mean [95% interval]"] if baseline else []
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line in sweep.summary:
        statistic = _statistic(line, quantity.column)
        cells = [line[name] for name in sweep.parameters] + [line["runs"], line["failed"]]
        cells += [_cell(statistic.mean), _interval(statistic), str(statistic.n)]
        if baseline:
            cells.append(_with_interval(_statistic(line, baseline)))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _constant_table(sweep: _Sweep, quantities: Sequence[Quantity]) -> list[str]:
    """The quantities that take one value: that value, from whichever grid points measured it (a point
    whose runs all failed has none), and the range of n over the points."""
    rows = ["| quantity | statistic (one run's) | value in every complete run | n per point |", "|---|---|---|---|"]
    for quantity in quantities:
        statistics = [_statistic(line, quantity.column) for line in sweep.summary]
        counts = sorted({statistic.n for statistic in statistics})
        shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
        measured = [statistic.mean for statistic in statistics if statistic.mean is not None]
        value = _cell(measured[0]) if measured else "none (no run measured it)"
        rows.append(f"| `{quantity.metric}` | {quantity.statistic or 'privacy figure'} | {value} | {shown} |")
    return rows


def _sweep_values(sweep: _Sweep, quantity: Quantity) -> list[float]:
    """Every number an axis of ``quantity`` shows (means, interval ends, its baseline's), for its unit."""
    columns = [quantity.column] + ([sweep.baselines[quantity.column]] if quantity.column in sweep.baselines else [])
    statistics = [_statistic(line, column) for line in sweep.summary for column in columns]
    return [value for s in statistics for value in (s.mean, s.low, s.high) if value is not None]


def _sweep_ylabel(quantity: Quantity, unit: str) -> str:
    return _with_unit(f"{quantity.statistic}: mean over seeds" if quantity.statistic else "mean over seeds", unit)


def _sweep_overview(sweep: _Sweep, chosen: Sequence[Quantity], folder: Path, figure_type: Any) -> tuple[str, str]:
    """One panel per chosen quantity: against the first grid parameter, or for a seeds-only sweep its
    mean and interval beside each run's value (and the baseline's). Returns the image and the report's
    description of the panels."""
    figure, panels = _panels(figure_type, len(chosen))
    described = []
    for axes, quantity in zip(panels, chosen):
        scale, unit = _axis_unit(quantity, _sweep_values(sweep, quantity))
        if sweep.parameters:
            _parameter_panel(axes, sweep, quantity, sweep.parameters[0], scale)
            where = f"against `{sweep.parameters[0]}`"
        else:
            _point_panel(axes, sweep, quantity, scale)
            where = "each run's value beside the mean"
            if axes is panels[0]:
                axes.legend(fontsize=6)
        baseline = sweep.baselines.get(quantity.column)
        axes.set_title(_fitted(quantity.label, _PANEL[0], 9), fontsize=9, pad=12)
        axes.set_ylabel(_sweep_ylabel(quantity, unit), fontsize=8)
        axes.tick_params(labelsize=7)
        extra = f"; non-private baseline `{baseline}` beside it" if baseline else ""
        described.append(f"`{quantity.column}` ({quantity.statistic or 'privacy figure'}, {where}{extra}{'; ' + unit if unit else ''})")
    title = "Mean over seeds with its 95% confidence interval; n = complete runs"
    figure.suptitle(_fitted(title, figure.get_figwidth(), 10), fontsize=10)
    return _save(figure, folder, "overview.png"), f"{len(chosen)} panels: " + ", ".join(described) + "."


def _point_panel(axes: Any, sweep: _Sweep, quantity: Quantity, scale: float) -> None:
    """A seeds-only sweep's quantity: each run's value (grey dots), the mean with its interval and n,
    and the non-private baseline's mean and interval beside it."""
    runs = [float(row[quantity.column]) / scale for row in sweep.runs if row["status"] == "complete" and row.get(quantity.column)]
    axes.plot([-0.2] * len(runs), runs, linestyle="none", marker="o", markersize=3, color="0.6", label="one run")
    line = sweep.summary[0]
    _interval_point(axes, 0.0, _statistic(line, quantity.column), scale, "tab:blue", "mean, 95% interval")
    ticks, labels = [0.0], [quantity.metric]
    baseline = sweep.baselines.get(quantity.column)
    if baseline is not None and _statistic(line, baseline).mean is not None:
        _interval_point(axes, 0.6, _statistic(line, baseline), scale, _BASELINE_COLOR, "non-private baseline")
        ticks.append(0.6)
        beside = _sweep_quantity(baseline)
        labels.append(beside.metric if beside.statistic == quantity.statistic else f"{beside.metric}\n({beside.statistic})")
    axes.set_xticks(ticks, labels)
    axes.set_xlim(-0.5, ticks[-1] + 0.5)


def _interval_point(axes: Any, x: float, statistic: _Statistic, scale: float, color: str, label: str) -> None:
    """The mean as a point, its interval (summary.csv's ends, as they are) as the error bar, n beside."""
    if statistic.mean is None:
        return
    mean = statistic.mean / scale
    error = None
    if statistic.low is not None and statistic.high is not None:
        error = [[mean - statistic.low / scale], [statistic.high / scale - mean]]
    axes.errorbar([x], [mean], yerr=error, marker="o", color=color, capsize=4, label=label)
    axes.annotate(f"n = {statistic.n}", (x, mean), xytext=(7, 0), textcoords="offset points", va="center", fontsize=7)


def _parameter_panel(axes: Any, sweep: _Sweep, quantity: Quantity, parameter: str, scale: float) -> None:
    """The quantity's mean against ``parameter`` with its interval as a band, one line per value of the
    other parameters, the baseline dashed in the line's colour, and n stated: in the legend's title when
    every point has the same n, else beside each point."""
    others = [other for other in sweep.parameters if other != parameter]
    groups: dict[tuple[str, ...], list[Mapping[str, str]]] = {}
    for line in sweep.summary:
        groups.setdefault(tuple(line[other] for other in others), []).append(line)
    numeric = all(_is_float(line[parameter]) for line in sweep.summary)
    categories = list(dict.fromkeys(line[parameter] for line in sweep.summary))
    baseline = sweep.baselines.get(quantity.column)
    counted: list[tuple[float, float, int]] = []
    baseline_label = "non-private baseline (dashed, x)"
    for key, members in groups.items():
        points = sorted(
            ((float(m[parameter]) if numeric else float(categories.index(m[parameter])), m) for m in members),
            key=lambda pair: pair[0],
        )
        shown = [(x, _statistic(m, quantity.column), m) for x, m in points if _statistic(m, quantity.column).mean is not None]
        if not shown:
            continue
        label = ", ".join(f"{_short(other)}={value}" for other, value in zip(others, key)) or "mean over seeds"
        xs = [x for x, _, _ in shown]
        drawn = axes.plot(xs, [s.mean / scale for _, s, _ in shown], marker="o", label=label)
        color = drawn[0].get_color()
        if any(s.low is not None for _, s, _ in shown):
            axes.fill_between(xs, [s.low / scale if s.low is not None else math.nan for _, s, _ in shown],
                              [s.high / scale if s.high is not None else math.nan for _, s, _ in shown],
                              color=color, alpha=0.2, linewidth=0)
        if baseline is not None:
            base = [(x, _statistic(m, baseline)) for x, _, m in shown if _statistic(m, baseline).mean is not None]
            if base:
                axes.plot([x for x, _ in base], [s.mean / scale for _, s in base], linestyle="--", marker="x", color=color,
                          label=baseline_label)
                baseline_label = "_"  # one legend entry says what the dashed lines are; their colour says whose
        counted.extend((x, s.mean / scale, s.n) for x, s, _ in shown)
    counts = {n for _, _, n in counted}
    if len(counts) > 1:
        for x, y, n in counted:
            axes.annotate(f"n = {n}", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=6)
    if counted:
        axes.legend(fontsize=6, title=f"n = {counts.pop()} per point" if len(counts) == 1 else None, title_fontsize=6)
    if not numeric:
        axes.set_xticks(range(len(categories)), categories)
    elif all(_is_int(line[parameter]) for line in sweep.summary):
        _integer_ticks(axes.xaxis)
    axes.set_xlabel(parameter, fontsize=8)


def _against_parameters(sweep: _Sweep, quantity: Quantity, folder: Path, figure_type: Any, name: str) -> str:
    """The quantity against each grid parameter, one panel each."""
    scale, unit = _axis_unit(quantity, _sweep_values(sweep, quantity))
    figure, panels = _panels(figure_type, len(sweep.parameters))
    for axes, parameter in zip(panels, sweep.parameters):
        _parameter_panel(axes, sweep, quantity, parameter, scale)
        axes.set_ylabel(_sweep_ylabel(quantity, unit), fontsize=8)
        axes.tick_params(labelsize=7)
    title = f"{quantity.label}: mean over seeds, 95% confidence band"
    figure.suptitle(_fitted(title, figure.get_figwidth(), 10), fontsize=10)
    return _save(figure, folder, name)


def _short(parameter: str) -> str:
    return parameter.rsplit(".", 1)[-1]


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _file_name(column: str, taken: set[str]) -> str:
    """``sweep_<column>.png`` with anything but letters, digits, - and _ as _, made unique in ``taken``."""
    stem = "sweep_" + "".join(character if character.isalnum() or character in "-_" else "_" for character in column)
    name, index = f"{stem}.png", 2
    while name in taken:
        name, index = f"{stem}_{index}.png", index + 1
    taken.add(name)
    return name


__all__ = ["REPORT_MARKER", "count_text", "parse_metrics", "write_report"]
