"""The command of an audit study script (``scenarios/audit_*.py``): one `main` for all of them.

A script audits a protocol's claim at a few settings (`fedrecsim.audit.grid`) and declares only what is its
own in an `AuditScript`: the scenario it starts from, its sizes at full size and with ``--quick``, its trials
per world, the rows those give, the heading it prints, its table's columns, its figure and its note.
`AuditScript.main` is the rest, the same for every script:

1. the command line: the study scripts' shared options (`fedrecsim.study.ScriptParser`; ``--seeds``
   defaults to 1 with or without ``--quick``) and ``--trials``, whose default is the script's, or its quick
   one with ``--quick``. ``--trials`` has no minimum of its own: a count the audit refuses is the audit's
   one-line error (``audit.trials: must be >= 2, got 0``).
2. the grid: ``rows(size, trials)``, each audited at ``--seeds`` data seeds ``first + 1,000,000 i``
   (``run.seed``, into ``<folder>-seed<i>``), where ``first`` is the script's ``data_seed``, or X with
   ``--set run.seed=X`` (`first_seed`): as in ``fedrecsim sweep`` and `fedrecsim.study.Study`, the user's
   ``run.seed`` is where the seeds start, so N seeds are N worlds whatever ``--set`` says. The rest of
   ``--set`` comes last. Every audit is built, and so checked, before any runs: a bad key or count writes
   nothing.
3. the run into ``--out`` (resumed when the script runs again; the figure is the script's own file there),
   then what it prints: the heading, and `GridResult.report` -- the table, the figure line, the note, the
   verdict.

What a seed is: an audit draws its data set once, from ``run.seed``, and its target (the user, the rating,
the neighbouring row) from that data (`fedrecsim.audit.runner`); its trials only redraw the protocol's
randomness. So a data seed is another audited world -- the scripts' synthetic data drawn anew and the
target found in it -- and ``--seeds N`` audits each row in N of them (`AuditedRow`: the mean, least and
largest bound). Every script declares a
``data_seed``: every audit has data to seed, so ``--seeds`` means the same in every script, and no script
can ignore it.

It returns 0; errors are raised for `fedrecsim.study.run_script` to print in one line with their exit
status. A script ends::

    SCRIPT = AuditScript(...)
    main = SCRIPT.main

    if __name__ == "__main__":
        sys.exit(run_script(main))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..scenario import parse_override
from ..study import ScriptParser
from .grid import AuditGrid, AuditRow, Column, GridResult

#: The distance between a script's data seeds (``run.seed``): the i-th is ``data_seed + SEED_STEP * i``.
SEED_STEP = 1_000_000
#: What ``--out`` is in an audit script's ``--help``.
OUT_HELP = "the audits' folder: one folder per row and data seed, and the figure"


@dataclass(frozen=True)
class ScriptRun:
    """What a script's heading reads once its grid has run.

    Attributes:
        size: the script's size the grid ran at (its full one, or its quick one with ``--quick``).
        trials: the trials per world.
        data_seeds: the data seeds (``run.seed`` of each audited world), ``--seeds`` of them.
        grid: the audits (``grid.audits[key]``: each row's, one per data seed, with its target).
        result: their result.
    """

    size: Any
    trials: int
    data_seeds: tuple[int, ...]
    grid: AuditGrid
    result: GridResult

    @property
    def seeds(self) -> int:
        """``--seeds``: the data seeds (audited worlds) per row."""
        return len(self.data_seeds)

    @property
    def target_users(self) -> str:
        """The first row's target user, as a heading names it: ``user 15``; with several data seeds, each
        seed's (a seed draws its own data and finds its own target): ``users 15, 3, 8 (one per data seed)``."""
        users = [audit.target.user for _, audit in self.grid.audits[self.grid.rows[0].key]]
        if len(set(users)) == 1:
            return f"user {users[0]}" + (" (in every data seed)" if len(users) > 1 else "")
        return f"users {', '.join(map(str, users))} (one per data seed)"

    @property
    def counts(self) -> str:
        """What every row was audited on, as a heading says it: ``20 trials per world, 2 audits per row (data
        seeds 7, 1,000,007)``."""
        audits = "1 audit" if self.seeds == 1 else f"{self.seeds} audits"
        named = ", ".join(f"{seed:,}" for seed in self.data_seeds)
        return f"{self.trials:,} trials per world, {audits} per row (data seed{'s' if self.seeds > 1 else ''} {named})"


@dataclass(frozen=True)
class AuditScript:
    """An audit study script: what it declares of its own; `main` is its command.

    Attributes:
        scenario: the scenario file (or raw tables) every audit starts from (`AuditGrid`).
        description: what ``--help`` says the script does.
        out: the default ``--out``.
        quick: what ``--help`` says ``--quick`` runs.
        sizes: (full, quick): what the script runs at, without and with ``--quick`` (a `GridSize`, the
            rows' settings, the values audited: anything its ``rows`` reads).
        trials: (full, quick): the default trials per world, without and with ``--quick``.
        rows: ``rows(size, trials)``: the grid's rows.
        heading: ``heading(run)``: the lines printed before the table.
        columns: the table's columns.
        figure: the figure's file name in ``--out``.
        paint: ``paint(axes, result)`` draws the figure.
        note: the script's sentence on what its numbers mean, or ``note(result)`` when it depends on them.
        data_seed: the first data seed (``run.seed``): each row is audited at ``--seeds`` data seeds from
            it (``SEED_STEP`` apart), into ``<folder>-seed<i>``; it wins over a ``run.seed`` of the rows'
            settings, and the user's ``--set run.seed=X`` replaces it (the seeds start from X).
        figure_size: the figure's size in inches.
    """

    scenario: str | Path | Mapping[str, Any]
    description: str
    out: str
    quick: str
    sizes: tuple[Any, Any]
    trials: tuple[int, int]
    rows: Callable[[Any, int], Sequence[AuditRow]]
    heading: Callable[[ScriptRun], str]
    columns: Sequence[Column]
    figure: str
    paint: Callable[[Any, GridResult], None]
    note: str | Callable[[GridResult], str]
    data_seed: int
    figure_size: tuple[float, float] = (5, 4)

    def parser(self) -> ScriptParser:
        """The script's command line: the shared options and ``--trials``."""
        parser = ScriptParser(self.description, out=self.out, quick=self.quick, seeds=1, quick_seeds=1,
                              seeds_help=seeds_help(self.data_seed), out_help=OUT_HELP)
        parser.add_size("size", full=self.sizes[0], quick=self.sizes[1])
        parser.add_sized_argument("--trials", full=self.trials[0], quick=self.trials[1], type=int, help="trials per world")
        return parser

    def main(self, argv: list[str] | None = None) -> int:
        """Parse ``argv``, build the grid, run it into ``--out`` and print the heading and the report: 0.

        Raises:
            ConfigError: a bad ``--set`` or trial count (nothing written). OutputError: ``--out`` refused
            (`AuditGrid.run`). SimulationError: a trial failed. SystemExit: ``--help``, a usage error.
        """
        args = self.parser().parse_args(argv)
        first, settings = first_seed(args.set, self.data_seed)
        seeds = [first + SEED_STEP * index for index in range(args.seeds)]
        grid = AuditGrid(self.scenario, self.rows(args.size, args.trials), seeds=seeds, settings=settings)
        result = grid.run(args.out, workers=args.workers, dask=args.dask, own=[self.figure])
        print(self.heading(ScriptRun(args.size, args.trials, tuple(seeds), grid, result)))
        note = self.note if isinstance(self.note, str) else self.note(result)
        print(result.report(self.columns, args.out / self.figure, self.paint, note, size=self.figure_size))
        return 0


def seeds_help(data_seed: int) -> str:
    """What ``--seeds`` is in an audit script's ``--help``: what `AuditScript.main` does with it."""
    return (f"data worlds each row is audited in, a data set and its target each, at run.seed {data_seed:,}, "
            f"{data_seed + SEED_STEP:,}, ... (--set run.seed=X: X, X + {SEED_STEP:,}, ...), into <row>-seed<i>; "
            "the table shows the mean bound")


def first_seed(settings: Sequence[str], data_seed: int) -> tuple[int, list[str]]:
    """The first data seed and the other ``--set`` overrides: X with ``--set run.seed=X`` (the last one
    given), else ``data_seed``. The seeds count from the user's ``run.seed`` rather than one ``run.seed``
    overriding them all, which would make every seed's audit the same.

    Raises:
        ConfigError: a malformed override, or a ``run.seed`` that is not a whole number (``--set run.seed``).
    """
    first, rest = data_seed, []
    for text in settings:
        keys, value = parse_override(text)
        if keys != ["run", "seed"]:
            rest.append(text)
        elif isinstance(value, int) and not isinstance(value, bool):
            first = value
        else:
            raise ConfigError("--set run.seed", f"expected a whole number, the first data seed, got {value!r}")
    return first, rest


__all__ = ["SEED_STEP", "AuditScript", "ScriptRun", "first_seed"]
