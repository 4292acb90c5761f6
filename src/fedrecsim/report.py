"""Reports: a run folder or a sweep folder turned into PNG plots and a ``report.md`` that shows them.

``fedrecsim report DIR [--out REPORT]`` writes the report beside its source, in ``DIR-report`` (never
inside a result folder, whose contents `fedrecsim.output` keeps to the files a run writes):

- a run folder: bytes sent and received per role (bars), the distribution of bytes per user (histogram),
  bytes and online users per round (lines), every per-round metric, the prediction-error CDF of a
  protocol that records its errors' distribution (``distributions`` in result.json: dpmf, Hua et al.'s
  Fig. 7 shape), and for protocols with privacy accounting the epsilon spent by each round: per epoch,
  composed (ldp_implicit's ``epsilon_per_user_epoch``), or once (dpmf's ``epsilon_spent``);
- a sweep folder: every measured quantity of ``summary.csv`` against each grid parameter, one line per
  value of the other parameters, with the 95% confidence band over seeds.

A report folder is marked by the first line of its ``report.md``; re-running replaces a report of ours
(its ``report.md`` and PNG files, by name) and refuses anything else. matplotlib is the optional extra
``plot``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError, OutputError
from .output import RESULT_FORMAT
from .sweep import MARKER, read_csv, sweep_folder_problem

REPORT_MARKER = "<!-- fedrecsim-report/1 -->"
_SIZE = (6.4, 3.6)
_DPI = 110


def _figure_type() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("", 'fedrecsim report needs matplotlib: pip install "fedrecsim[plot]"') from None
    return Figure


def write_report(source: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of a run or sweep folder; returns the report folder.

    Raises:
        ConfigError: ``source`` is neither a run folder nor a sweep folder, or matplotlib is missing.
        OutputError: ``out`` exists and is not a report of ours.
    """
    source = Path(os.path.abspath(source))
    kind = _kind(source)
    figure = _figure_type()
    target = Path(os.path.abspath(out)) if out is not None else source.with_name(f"{source.name}-report")
    staging = _prepare(target)
    try:
        if kind == "run":
            markdown = _run_report(source, staging, figure)
        else:
            markdown = _sweep_report(source, staging, figure)
        (staging / "report.md").write_text(f"{REPORT_MARKER}\n{markdown}", encoding="utf-8")
        _commit(staging, target)
    except BaseException:
        _discard(staging)
        raise
    return target


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
    """A folder holding a report.md with our marker and nothing but it and PNG files."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        first = (folder / "report.md").read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return False
    files = list(folder.iterdir())
    return first == REPORT_MARKER and all(_report_file(entry) for entry in files)


def _report_file(entry: Path) -> bool:
    return entry.is_file() and not entry.is_symlink() and (entry.name == "report.md" or entry.suffix == ".png")


def _prepare(target: Path) -> Path:
    if os.path.lexists(target) and not _ours(target):
        raise OutputError(target, "exists and is not a fedrecsim report; choose another --out")
    if not target.parent.is_dir():
        raise OutputError(target.parent, "is not a folder, so the report cannot be written there")
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


# -- units ------------------------------------------------------------------------------------------


def _byte_unit(largest: float) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return scale, unit
    return 1.0, "B"


def _save(figure: Any, folder: Path, name: str) -> str:
    figure.savefig(folder / name, dpi=_DPI)
    return name


# -- a run ------------------------------------------------------------------------------------------


def _run_report(source: Path, folder: Path, figure_type: Any) -> str:
    document = json.loads((source / "result.json").read_text(encoding="utf-8"))
    name = document["scenario"]["run"]["name"]
    lines = [
        f"# Run report: {name} ({document['protocol']}, seed {document['seed']})",
        "",
        f"{document['rounds_completed']} rounds, {document['data']['users']} users x {document['data']['items']} items, "
        f"{document['virtual_time_s']:.1f} s virtual time; source `{source}`.",
        "",
        "## Final metrics",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {metric} | {_number(value)} |" for metric, value in document["metrics"]["final"].items()),
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
    for title, image in _run_plots(document, folder, figure_type):
        lines += [f"## {title}", "", f"![{title}]({image})", ""]
    return "\n".join(lines)


def _run_plots(document: Mapping[str, Any], folder: Path, figure_type: Any) -> list[tuple[str, str]]:
    plots = [("Bytes per role", _bytes_per_role(document, folder, figure_type))]
    users = [c["sent_bytes"] + c["recv_bytes"] for party, c in document["ledger"]["parties"].items() if party.startswith("user:")]
    if users:
        plots.append(("Bytes per user", _bytes_per_user(users, folder, figure_type)))
    if document["ledger"]["per_round"]:
        plots.append(("Bytes and online users per round", _per_round(document["ledger"]["per_round"], folder, figure_type)))
    rounds = document["metrics"]["rounds"]
    names = [name for name in dict.fromkeys(key for row in rounds for key in row) if name != "round"]
    if names:
        plots.append(("Metrics per round", _metrics_per_round(rounds, names, folder, figure_type)))
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
    return _save(figure, folder, "per_round.png")


def _metrics_per_round(rounds: Sequence[Mapping[str, Any]], names: Sequence[str], folder: Path, figure_type: Any) -> str:
    columns = 2 if len(names) > 1 else 1
    rows = math.ceil(len(names) / columns)
    figure = figure_type(layout="constrained", figsize=(_SIZE[0] * (1.4 if columns == 2 else 1), 2.2 * rows + 0.6))
    grid = figure.subplots(rows, columns, squeeze=False, sharex=True)
    for index, name in enumerate(names):
        axes = grid[index // columns][index % columns]
        points = [(row["round"], row[name]) for row in rounds if row.get(name) is not None]
        axes.plot([x for x, _ in points], [y for _, y in points], marker="." if len(points) < 30 else None)
        axes.set_title(name, fontsize=9)
        axes.tick_params(labelsize=8)
        if index // columns == rows - 1 or index + columns >= len(names):
            axes.set_xlabel("round", fontsize=8)
    for index in range(len(names), rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    figure.suptitle("Metrics per round (units as named: *_b bytes, *_s seconds, errors in rating units)", fontsize=9)
    return _save(figure, folder, "metrics_per_round.png")


def _epsilon(cumulative: Sequence[float], how: str, of: str, folder: Path, figure_type: Any) -> str:
    from matplotlib.ticker import MaxNLocator  # matplotlib is there: _figure_type checked it

    figure = figure_type(layout="constrained", figsize=_SIZE)
    axes = figure.subplots()
    rounds = len(cumulative) - 1
    axes.plot(range(rounds + 1), cumulative, drawstyle="steps-post", marker="." if rounds < 30 else None)
    axes.set_xlabel("round (0: set-up)")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(of)
    axes.set_title(f"Privacy: {how}", fontsize=10)
    axes.set_ylim(0, max(cumulative) * 1.1 or 1.0)
    return _save(figure, folder, "epsilon_per_round.png")


# -- a sweep ----------------------------------------------------------------------------------------


def _sweep_report(source: Path, folder: Path, figure_type: Any) -> str:
    marker = json.loads((source / MARKER).read_text(encoding="utf-8"))
    parameters = list(marker["parameters"])
    if not (source / "summary.csv").exists():
        raise ConfigError("", f"{source} has no summary.csv yet; run the sweep (it resumes) before the report")
    summary = read_csv(source / "summary.csv")
    measured = [name[: -len(".mean")] for name in summary[0] if name.endswith(".mean")] if summary else []
    lines = [
        f"# Sweep report: {len(summary)} grid points x {marker['seeds']} seeds",
        "",
        f"Parameters: {', '.join(f'`{name}`' for name in parameters) or '(none)'}; source `{source}`. "
        "Values are means over seeds; bands and +- are 95% confidence intervals (Student's t).",
        "",
    ]
    failed = sum(int(line["failed"]) for line in summary)
    if failed:
        lines += [f"**{failed} runs failed**; see the error column of sweep.csv.", ""]
    shown = [name for name in measured if _varies(summary, name)]
    lines += ["## Summary", "", _summary_table(summary, parameters, shown), ""]
    if not parameters:
        return "\n".join(lines)
    for name in shown:
        image = _metric_against_parameters(summary, parameters, name, folder, figure_type)
        lines += [f"## {name}", "", f"![{name}]({image})", ""]
    constant = [name for name in measured if name not in shown]
    if constant:
        lines += ["Constant over the whole grid (not plotted): " + ", ".join(f"`{name}`" for name in constant), ""]
    return "\n".join(lines)


def _varies(summary: Sequence[Mapping[str, str]], name: str) -> bool:
    values = {line[f"{name}.mean"] for line in summary if line[f"{name}.mean"]}
    return len(values) > 1


def _summary_table(summary: Sequence[Mapping[str, str]], parameters: Sequence[str], measured: Sequence[str]) -> str:
    header = [*parameters, "runs", "failed", *measured]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line in summary:
        cells = [line[name] for name in parameters] + [line["runs"], line["failed"]]
        for name in measured:
            mean, low, high = (line[f"{name}.{part}"] for part in ("mean", "ci95_low", "ci95_high"))
            if not mean:
                cells.append("")
            elif low and high:
                cells.append(f"{_number(float(mean))} +- {_number((float(high) - float(low)) / 2)}")
            else:
                cells.append(_number(float(mean)))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _metric_against_parameters(
    summary: Sequence[Mapping[str, str]], parameters: Sequence[str], name: str, folder: Path, figure_type: Any
) -> str:
    figure = figure_type(layout="constrained", figsize=(_SIZE[0] * min(len(parameters), 2) * 0.8 + 1.5, _SIZE[1] * math.ceil(len(parameters) / 2)))
    grid = figure.subplots(math.ceil(len(parameters) / 2), min(len(parameters), 2), squeeze=False)
    unit = _unit(name)
    for index, parameter in enumerate(parameters):
        axes = grid[index // 2][index % 2]
        others = [other for other in parameters if other != parameter]
        lines: dict[tuple[str, ...], list[Mapping[str, str]]] = {}
        for line in summary:
            lines.setdefault(tuple(line[other] for other in others), []).append(line)
        numeric = all(_is_float(line[parameter]) for line in summary)
        categories = list(dict.fromkeys(line[parameter] for line in summary))
        for key, members in lines.items():
            points = sorted(
                ((float(m[parameter]) if numeric else categories.index(m[parameter]), m) for m in members if m[f"{name}.mean"]),
                key=lambda pair: pair[0],
            )
            if not points:
                continue
            xs = [x for x, _ in points]
            label = ", ".join(f"{_short(other)}={value}" for other, value in zip(others, key)) or None
            drawn = axes.plot(xs, [float(m[f"{name}.mean"]) for _, m in points], marker="o", label=label)
            band = [(x, float(m[f"{name}.ci95_low"]), float(m[f"{name}.ci95_high"])) for x, m in points if m[f"{name}.ci95_low"]]
            if band:
                axes.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                                  color=drawn[0].get_color(), alpha=0.2, linewidth=0)
        if not numeric:
            axes.set_xticks(range(len(categories)), categories)
        axes.set_xlabel(parameter)
        axes.set_ylabel(f"{name}{unit}")
        if len(lines) > 1:
            axes.legend(fontsize=7, title_fontsize=7)
    for index in range(len(parameters), grid.shape[0] * grid.shape[1]):
        grid[index // 2][index % 2].set_visible(False)
    figure.suptitle(f"{name}: mean over seeds, 95% confidence band", fontsize=10)
    return _save(figure, folder, f"sweep_{_file_name(name)}.png")


def _unit(name: str) -> str:
    if name.endswith("_bytes") or name.endswith("_b"):
        return " (bytes)"
    if name.endswith("_s"):
        return " (s)"
    return ""


def _short(parameter: str) -> str:
    return parameter.rsplit(".", 1)[-1]


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _file_name(name: str) -> str:
    return "".join(character if character.isalnum() or character in "-_" else "_" for character in name)


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


__all__ = ["REPORT_MARKER", "write_report"]
