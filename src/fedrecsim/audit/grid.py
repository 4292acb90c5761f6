"""A grid of audits: a few claims of one scenario audited, summed up in one claimed-vs-audited table.

A study script (``scenarios/audit_*.py``) audits a protocol's claim at a few settings -- values of eps,
parties, targets, variants: one `AuditRow` each -- and, with data seeds, each row at every seed.
`AuditGrid` builds every `Audit` first, so a bad key, party or target is refused before anything runs;
`AuditGrid.run` then runs them, each into its own folder under the output folder: ``<row.folder>``, or
with data seeds ``<row.folder>-seed<i>`` for the i-th seed (``run.seed`` set to it). Running the grid
again resumes every audit (`Audit.run`); an output folder it cannot resume (audits in the layout without
seeds, a row's folder holding another audit, a file of the user's named as the script's figure) is
refused before anything runs, in one line saying what is there and what to do, and nothing in it changes.

The result (`GridResult`) has one `AuditedRow` per row: its audits over the seeds (mean, least and
largest bound, trials/s over all of them). `GridResult.table` lays the rows out in the script's own
`Column`s; `GridResult.verdict` says what the bounds mean in the words ``fedrecsim audit`` starts its
verdict with (`VIOLATION`, `NO_VIOLATION`, `NO_CLAIM`): a row is a violation when one of its audits is,
"no violation found" is a lower bound and not a proof that the claim holds, and a row with no DP claim
reports its bound as a lower bound on what the view reveals. `GridResult.report` is what a script prints
after its heading: the table, the figure line, its own note and the verdict. A script that audits at a
synthetic data size of its own (full, and smaller with ``--quick``) states it as a `GridSize`.

Invariants: row keys and folders are unique in a grid; the rows keep their order in the table and the
verdict; the overrides of an audit are the row's, then ``run.seed``, then the grid's ``settings`` (the
user's ``--set``, applied last so that they win); with data seeds, ``settings`` hold no ``run.seed`` (it
would make every seed's audit the same one: a caller moves the seeds instead, as `AuditScript` does with
``--set run.seed=X``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, OutputError
from ..scenario import parse_override
from .bounds import cp_lower, cp_upper, epsilon_from
from .runner import NO_CLAIM, NO_VIOLATION, PLAN, VIOLATION, Audit, AuditResult


@dataclass(frozen=True)
class GridSize:
    """The synthetic data every audit of a script's grid runs at, and the trials per world."""

    users: int
    items: int
    ratings: int
    trials: int

    def data(self) -> tuple[str, ...]:
        """The ``data.users``, ``data.items`` and ``data.ratings`` overrides, in that order."""
        return (f"data.users={self.users}", f"data.items={self.items}", f"data.ratings={self.ratings}")


@dataclass(frozen=True)
class AuditRow:
    """One audited claim of a grid.

    Attributes:
        key: the script's handle on the row (e.g. ``("S1 V", 2.0)``), unique in the grid: its columns and
            figure read it back from `AuditedRow.row`.
        name: how the verdict names the row (e.g. ``"S1 V at eps 2"``).
        folder: the name of the row's audit folder under the output folder (unique in the grid).
        overrides: the row's ``key.path=value`` overrides: the scenario's size and the ``audit.*`` keys.
    """

    key: Hashable
    name: str
    folder: str
    overrides: Sequence[str]


@dataclass(frozen=True)
class AuditedRow:
    """A row's audits, one per data seed (one without seeds), in seed order."""

    row: AuditRow
    results: tuple[AuditResult, ...]

    @property
    def document(self) -> dict[str, Any]:
        """The first audit's ``audit.json`` (the claim, the confidence and the trials are the same in all)."""
        return self.results[0].document

    @property
    def claimed(self) -> float | None:
        """The claimed epsilon; None for a protocol with no DP claim."""
        return self.document["claim"]["epsilon"]

    @property
    def bounds(self) -> list[float]:
        """Each audit's lower bound (the best distinguisher's, `AuditResult.epsilon_lower`)."""
        return [result.epsilon_lower for result in self.results]

    @property
    def mean(self) -> float:
        return sum(self.bounds) / len(self.bounds)

    @property
    def least(self) -> float:
        return min(self.bounds)

    @property
    def most(self) -> float:
        return max(self.bounds)

    @property
    def best(self) -> str:
        """The first audit's best distinguisher."""
        return self.document["best"]["distinguisher"]

    @property
    def trials_per_s(self) -> float:
        """Trials run now over their wall time, over every audit of the row (0 when all were resumed)."""
        wall = sum(result.document["wall_s"] for result in self.results)
        return sum(result.document["trials_run"] for result in self.results) / max(wall, 1e-9)

    @property
    def cap(self) -> float:
        """The bound a perfect test (held-out TPR 1, FPR 0) reaches on these held-out trials: where a
        distinguisher is perfect, the audited value is capped by the trials, not by the protocol."""
        held_out = self.document["heldout_per_world"]
        alpha = (1.0 - self.document["confidence"]) / 2
        delta = self.document["claim"]["delta"]
        return float(epsilon_from(cp_lower(held_out, held_out, alpha), cp_upper(0, held_out, alpha), delta))

    def entry(self, distinguisher: str, field: str = "epsilon_lower") -> float:
        """One distinguisher's ``field`` of ``audit.json`` (its bound, ``tpr``, ``fpr``), the mean over the audits."""
        values = [result.document["distinguishers"][distinguisher][field] for result in self.results]
        return sum(values) / len(values)

    @property
    def verdict(self) -> str:
        """`VIOLATION` when an audit's verdict is one, `NO_CLAIM` with no claim, `NO_VIOLATION` otherwise."""
        if any(result.document["verdict"].startswith(VIOLATION) for result in self.results):
            return VIOLATION
        return NO_CLAIM if self.claimed is None else NO_VIOLATION


@dataclass(frozen=True)
class Column:
    """One column of a claimed-vs-audited table.

    Attributes:
        header: its heading.
        width: its width in characters (the heading and every cell are padded to it).
        value: what it shows of a row: a string, shown as it is, or a number, formatted with ``spec``.
        spec: the format spec of a number (``".3f"``, ``"g"``, ``".1f"``).
        left: aligned left (a label column); numbers and other cells are aligned right.
    """

    header: str
    width: int
    value: Callable[[AuditedRow], object]
    spec: str = ".3f"
    left: bool = False

    def cell(self, text: str) -> str:
        return f"{text:<{self.width}}" if self.left else f"{text:>{self.width}}"

    def show(self, row: AuditedRow) -> str:
        value = self.value(row)
        return self.cell(value if isinstance(value, str) else format(value, self.spec))


def claimed_cell(row: AuditedRow) -> str:
    """The claimed epsilon as a table shows it: ``none`` for a protocol with no DP claim."""
    return "none" if row.claimed is None else f"{row.claimed:g}"


@dataclass(frozen=True)
class GridResult:
    """The audited rows of a grid, in the grid's order."""

    rows: tuple[AuditedRow, ...]
    by_key: Mapping[Hashable, AuditedRow] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_key", {audited.row.key: audited for audited in self.rows})

    def __getitem__(self, key: Hashable) -> AuditedRow:
        return self.by_key[key]

    def table(self, columns: Sequence[Column]) -> str:
        """The heading line and one line per row."""
        lines = ["".join(column.cell(column.header) for column in columns)]
        lines += ["".join(column.show(row) for column in columns) for row in self.rows]
        return "\n".join(lines)

    def verdict(self) -> str:
        """What the bounds mean, one line per kind of row present: the violations, the rows with no
        violation found, the rows with no DP claim (in that order)."""
        def names(verdict: str) -> str:
            return ", ".join(row.row.name for row in self.rows if row.verdict == verdict)

        lines = []
        if names(VIOLATION):
            lines.append(f"{VIOLATION} for {names(VIOLATION)}: an audited lower bound exceeds the claimed epsilon (at the "
                         "audits' confidence), so there the claim does not hold for that relation and party.")
        if names(NO_VIOLATION):
            lines.append(f"{NO_VIOLATION} for {names(NO_VIOLATION)}: every audited lower bound is at most the claimed "
                         "epsilon; a lower bound is not a proof that the claim holds.")
        if names(NO_CLAIM):
            lines.append(f"{NO_CLAIM} for {names(NO_CLAIM)}: each audited value is a lower bound on what that view "
                         "demonstrably reveals (the true leak may be larger), and a bound of 0 is no evidence of privacy.")
        return "\n".join(lines)

    def report(self, columns: Sequence[Column], figure: Path, paint: Callable[[Any, GridResult], None], note: str, *,
               size: tuple[float, float] = (5, 4)) -> str:
        """What a script prints after its heading: the `table`, the `figure` line, its own ``note`` on what
        its numbers mean, and the `verdict`, one after the other."""
        return "\n".join((self.table(columns), self.figure(figure, paint, size=size), note, self.verdict()))

    def figure(self, path: Path, paint: Callable[[Any, GridResult], None], *, size: tuple[float, float] = (5, 4)) -> str:
        """Draw a figure of the rows with ``paint(axes, self)`` into ``path``; the line to print: where it
        is, or why it was skipped (matplotlib is the optional extra ``plot``)."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            return "figure skipped: matplotlib is not installed"
        figure = Figure(figsize=size)
        paint(figure.subplots(), self)
        figure.savefig(path, dpi=100)
        return f"figure: {path}"


class AuditGrid:
    """The audits of a grid, built (and so checked) when the grid is.

    Args:
        base: the scenario file (or raw tables) every audit starts from (`Audit`).
        rows: the claims to audit.
        seeds: data seeds: each row is audited at each (``run.seed``); None audits each row once, at the
            seed its overrides give.
        settings: overrides applied last to every audit (the script's ``--set``); with ``seeds``, no
            ``run.seed`` among them.

    Raises:
        ConfigError: two rows with one key or folder, ``run.seed`` in ``settings`` with ``seeds``, or an
        audit `Audit` refuses (named key).
    """

    def __init__(self, base: str | Path | Mapping[str, Any], rows: Sequence[AuditRow], *,
                 seeds: Sequence[int] | None = None, settings: Sequence[str] = ()) -> None:
        for attribute in ("key", "folder"):
            values = [getattr(row, attribute) for row in rows]
            if len(set(values)) != len(values):
                raise ConfigError("audit grid", f"two rows share a {attribute}: {values}")
        if seeds is not None and any(parse_override(text)[0] == ["run", "seed"] for text in settings):
            raise ConfigError("run.seed", f"set in the grid's settings, it would make its {len(seeds)} data seeds (--seeds) "
                              "one and the same audit; start the seeds from it instead")
        self.rows = tuple(rows)
        self.seeds = None if seeds is None else tuple(seeds)
        self.audits: dict[Hashable, list[tuple[str, Audit]]] = {}
        for row in rows:
            runs = [(row.folder, [])] if seeds is None else [
                (f"{row.folder}-seed{index}", [f"run.seed={seed}"]) for index, seed in enumerate(seeds)
            ]
            self.audits[row.key] = [(folder, Audit(base, [*row.overrides, *seed, *settings])) for folder, seed in runs]

    def folders(self) -> list[str]:
        """Every audit's folder name under the output folder."""
        return [folder for audits in self.audits.values() for folder, _ in audits]

    def run(self, out: str | Path, *, workers: int | None = None, dask: str | None = None, own: Sequence[str] = ()) -> GridResult:
        """Run (or resume) every audit into its folder under ``out``.

        Args:
            out: the output folder.
            workers, dask: as `Audit.run`.
            own: the files the script writes into ``out`` beside the audits (its figure). One that exists
                where no audit of this grid has run is the user's: the grid refuses ``out`` before anything runs.

        Raises:
            OutputError: before anything runs, naming what ``out`` holds and what to do: this grid's audits
            in the layout without data seeds (one folder per row, where the grid writes
            ``<row>-seed<i>``), one of ``own`` and no audit of this grid, or a folder of the grid that is not
            its audit's (another size or ``--set``; `Audit.folder_problem`). Nothing in ``out`` is changed.
            SimulationError: a trial failed.
        """
        out = Path(out)
        self._check_out(out, own)
        return GridResult(tuple(
            AuditedRow(row, tuple(audit.run(out / folder, workers=workers, dask=dask) for folder, audit in self.audits[row.key]))
            for row in self.rows
        ))

    def _check_out(self, out: Path, own: Sequence[str]) -> None:
        """Refuse ``out`` before anything runs (`run`), saying what is there and what to do."""
        unseeded = [row.folder for row in self.rows if self.seeds is not None and (out / row.folder / PLAN).exists()]
        if unseeded:
            example = self.folders()[0]
            raise OutputError(out, f"holds audits in the older layout, one folder per row ({', '.join(unseeded)}), from before "
                              f"each data seed had its own folder; this version writes <row>-seed<i> ({example}, ...) and its "
                              "own figure: give another --out, or move this folder aside (nothing in it is changed)")
        if not any((out / folder / PLAN).exists() for folder in self.folders()):
            for name in own:
                if (out / name).exists():
                    names = sorted(path.name for path in out.iterdir())
                    held = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
                    raise OutputError(out / name, f"exists, and {out} holds no audit of this script ({held}): it is not this "
                                      "script's file; give another --out (nothing in it is changed)")
        for row in self.rows:
            for folder, audit in self.audits[row.key]:
                problem = audit.folder_problem(out / folder)
                if problem is not None and (out / folder / PLAN).exists():
                    raise OutputError(out / folder, f"holds an audit of the row {row.name!r} other than this run's: another size, "
                                      "--set or version of the script (--quick and the full size are different audits); give "
                                      "another --out (nothing in it is changed)")
                if problem is not None:
                    raise OutputError(out / folder, problem)


__all__ = ["AuditGrid", "AuditRow", "AuditedRow", "Column", "GridResult", "GridSize", "claimed_cell"]
