"""The study scripts in ``scenarios/``: they import only the public API and share one command line
(`fedrecsim.study.ScriptParser`). Each script's ``--quick`` run and the numbers it prints are tested beside
its protocol (tests/protocols/*/test_*_scripts.py, test_*_scenarios.py, test_prototypes.py)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fedrecsim.audit.script import SEED_STEP
from fedrecsim.errors import ConfigError
from fedrecsim.study import ScriptParser, run_script

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SCRIPTS = sorted(SCENARIOS.glob("*.py"))
#: What a study script may import from fedrecsim: the package itself and its public modules.
PUBLIC = {"fedrecsim", "fedrecsim.study", "fedrecsim.sim", "fedrecsim.audit"}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module the file imports (``from a.b import c`` counts as ``a.b``), wherever the import is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, "." * node.level + (node.module or "")))
            else:
                found.append((node.lineno, node.module or ""))
                found.extend(
                    (node.lineno, f"{node.module}.{alias.name}") for alias in node.names if node.module == "fedrecsim"
                )
    return found


def _load(path: Path) -> ModuleType:
    """The script as a module (registered, as its dataclasses need, under a name no package has)."""
    name = f"scenario_script_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_there_are_study_scripts() -> None:
    assert {path.name for path in SCRIPTS} >= {"hua_churn_study.py", "minto_comm_cost.py", "fedvae_decay.py"}


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_a_script_imports_only_the_public_api(path: Path) -> None:
    internal = [
        f"line {line}: {name}" for line, name in _imported_modules(path)
        if name.startswith(".") or (name.split(".")[0] == "fedrecsim" and name not in PUBLIC and not _public_name(name))
    ]
    assert internal == [], f"{path.name} imports internals: {internal}"


def _public_name(name: str) -> bool:
    """``fedrecsim.X`` where X is a name the package exports (``from fedrecsim import run``)."""
    import fedrecsim

    head, _, attribute = name.rpartition(".")
    return head == "fedrecsim" and attribute in fedrecsim.__all__


def test_the_import_check_sees_an_internal_import(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text(
        "import fedrecsim\nfrom fedrecsim import run\nfrom fedrecsim.study import Study\n"
        "def f():\n    from fedrecsim.scenario import read_tables\n    import fedrecsim.sweep\n    from fedrecsim import data\n"
    )
    names = [name for _, name in _imported_modules(script)]
    flagged = [name for name in names if name.split(".")[0] == "fedrecsim" and name not in PUBLIC and not _public_name(name)]
    assert flagged == ["fedrecsim.scenario", "fedrecsim.sweep", "fedrecsim.data"]


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_every_script_takes_the_shared_options(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _load(path).main(["--help"])
    assert caught.value.code == 0
    shown = capsys.readouterr().out
    for option in ("--quick", "--seeds", "--set KEY=VALUE", "--out OUT", "--workers", "--dask ADDRESS"):
        assert option in shown, f"{path.name} --help lacks {option}"


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_every_script_refuses_no_seeds_with_one_line(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        _load(path).main(["--quick", "--seeds", "0"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("error: --seeds must be >= 1, got 0")


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_a_bad_key_is_one_line_and_exit_2_before_anything_runs(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the fedrecsim command: no traceback, no sweep folder."""
    argv = ["--quick", "--set", "protocol.nope=1", "--out", str(tmp_path / "out")]
    assert run_script(_load(path).main, argv) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and ": error: protocol.nope: unknown key" in captured.err
    assert captured.out == "" and not (tmp_path / "out").exists()


#: The scripts that read a real data set with ``--data PATH``.
DATA_SCRIPTS = [SCENARIOS / "fedvae_convergence.py", SCENARIOS / "ribero_acceptance.py"]


@pytest.mark.parametrize("path", DATA_SCRIPTS, ids=[path.stem for path in DATA_SCRIPTS])
def test_a_missing_data_path_is_one_line_and_exit_2_before_anything_runs(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ribero_acceptance once ran its whole synthetic study first, then failed every MovieLens run with the same
    DatasetError: exit 1 and a folder of failed runs."""
    missing = tmp_path / "no-such-copy"
    assert run_script(_load(path).main, ["--quick", "--data", str(missing), "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{Path(sys.argv[0]).name}: error: {missing}: no such file or folder"]
    assert captured.out == "" and not (tmp_path / "out").exists()


AUDIT_SCRIPTS = [path for path in SCRIPTS if path.stem.startswith("audit_")]


@pytest.mark.parametrize("path", AUDIT_SCRIPTS, ids=[path.stem for path in AUDIT_SCRIPTS])
def test_an_audit_script_refuses_zero_trials_in_one_line_before_anything_runs(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--trials 0`` is the audit's own error (it once fell back to the script's default and ran)."""
    assert run_script(_load(path).main, ["--quick", "--trials", "0", "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and "audit.trials: must be >= 2, got 0" in captured.err
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(300)  # each row audited twice at 2 trials per world: a few dozen tiny runs
@pytest.mark.parametrize("path", AUDIT_SCRIPTS, ids=[path.stem for path in AUDIT_SCRIPTS])
def test_an_audit_script_audits_each_row_in_as_many_worlds_as_seeds(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--seeds 2 --set run.seed=7``: every row is audited twice, on two data sets (seeds 7 and 1,000,007) and the
    target found in each, and the heading says so (three scripts once ran one audit per row whatever ``--seeds``
    said; all six once ran both audits at seed 7, ``--set`` coming after the seeds)."""
    out = tmp_path / "out"
    argv = ["--quick", "--seeds", "2", "--set", "run.seed=7", "--trials", "2", "--workers", "1", "--out", str(out)]
    assert run_script(_load(path).main, argv) == 0
    assert "2 audits per row (data seeds 7, 1,000,007)" in capsys.readouterr().out
    folders = sorted(folder.name for folder in out.iterdir() if folder.is_dir())
    rows = sorted({folder.rsplit("-seed", 1)[0] for folder in folders})
    assert rows and folders == [f"{row}-seed{index}" for row in rows for index in (0, 1)]
    for row in rows:
        first, second = (json.loads((out / f"{row}-seed{index}" / "audit.json").read_text()) for index in (0, 1))
        assert (first["scenario"]["run"]["seed"], second["scenario"]["run"]["seed"]) == (7, 1_000_007)
        assert (first["target"]["present"], first["target"]["absent"]) != (second["target"]["present"], second["target"]["absent"])


def parse(argv: list[str], **options) -> object:
    parser = ScriptParser("a study", out="results/the_study", quick="tiny", **options)
    return parser.parse_args(argv)


def test_defaults() -> None:
    args = parse([])
    assert (args.quick, args.seeds, args.set, args.out, args.workers, args.dask) == (
        False, 3, [], Path("results/the_study"), None, None
    )


def test_quick_runs_its_own_seed_count_unless_told() -> None:
    assert parse(["--quick"]).seeds == 2
    assert parse(["--quick", "--seeds", "5"]).seeds == 5
    assert parse(["--quick"], seeds=1, quick_seeds=1).seeds == 1
    assert parse([], seeds=4, quick_seeds=1).seeds == 4


def test_every_option_reaches_the_script(tmp_path: Path) -> None:
    args = parse(["--seeds", "1", "--set", "run.rounds=4", "--set", "data.users=9", "--out", str(tmp_path),
                  "--workers", "2", "--dask", "tcp://h:8786"])
    assert (args.seeds, args.set, args.out, args.workers, args.dask) == (
        1, ["run.rounds=4", "data.users=9"], tmp_path, 2, "tcp://h:8786"
    )


def test_a_script_adds_its_own_options() -> None:
    parser = ScriptParser("a study", out="o", quick="tiny")
    parser.add_argument("--items", type=int, default=7)
    assert parser.parse_args(["--items", "9", "--quick"]).items == 9


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--workers", "0"], "--workers must be >= 1, got 0"),
])
def test_counts_below_one_are_a_usage_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


FULL_GRID = {"protocol.epsilon": [0.5, 1.0, 2.0]}
QUICK_GRID = {"protocol.epsilon": [0.5, 2.0]}


def sized_parser() -> ScriptParser:
    """A parser declaring a size and two sized options, as the scripts in scenarios/ do."""
    parser = ScriptParser("a study", out="o", quick="tiny")
    parser.add_size("grid", full=FULL_GRID, quick=QUICK_GRID)
    parser.add_sized_argument("--trials", full=1000, quick=20, type=int, minimum=2, help="trials per world")
    parser.add_sized_argument("--items", full=(1000, 9781), quick=(300,), type=int, nargs="+", help="item counts")
    return parser


def test_a_size_is_the_full_value_or_with_quick_the_quick_one() -> None:
    assert sized_parser().parse_args([]).grid is FULL_GRID
    assert sized_parser().parse_args(["--quick"]).grid is QUICK_GRID


def test_a_sized_option_defaults_to_full_or_quick_and_a_given_value_wins() -> None:
    full, quick = sized_parser().parse_args([]), sized_parser().parse_args(["--quick"])
    assert (full.trials, full.items) == (1000, (1000, 9781))
    assert (quick.trials, quick.items) == (20, (300,))
    for argv in ([], ["--quick"]):
        given = sized_parser().parse_args([*argv, "--trials", "7", "--items", "5", "6"])
        assert (given.trials, given.items) == (7, [5, 6])


def test_a_sized_options_help_shows_both_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    parser = sized_parser()
    parser.add_sized_argument("--users", full=None, quick=30, type=int, help="users")
    parser.print_help()
    shown = " ".join(capsys.readouterr().out.split())
    assert "trials per world (default 1,000; 20 with --quick)" in shown
    assert "item counts (default 1,000 9,781; 300 with --quick)" in shown
    assert "users (default the scenario's; 30 with --quick)" in shown
    assert "runs per grid point, at seeds run.seed, run.seed + 1, ... (default 3; 2 with --quick)" in shown
    assert "the sweep folder (default o; re-running resumes it)" in shown


def test_a_script_says_what_its_seeds_and_its_folder_are(capsys: pytest.CaptureFixture[str]) -> None:
    ScriptParser("a study", out="o", quick="tiny", seeds=2, seeds_help="data worlds per row",
                 out_help="the folder of two sweep folders").print_help()
    shown = " ".join(capsys.readouterr().out.split())
    assert "--seeds SEEDS data worlds per row (default 2; 2 with --quick)" in shown
    assert "--out OUT the folder of two sweep folders (default o; re-running resumes it)" in shown
    assert "runs per grid point" not in shown and "the sweep folder" not in shown


def _option_help(path: Path, option: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``path --help`` says of ``option`` (``--seeds``), on one line."""
    with pytest.raises(SystemExit):
        _load(path).main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    return re.split(r" --[a-z]+ [A-Z]", shown.split(f" {option} {option.strip('-').upper()} ", 1)[1], maxsplit=1)[0]


@pytest.mark.parametrize("path", AUDIT_SCRIPTS, ids=[path.stem for path in AUDIT_SCRIPTS])
def test_an_audit_scripts_help_says_seeds_are_data_worlds_and_out_the_audits_folder(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each seed is another data world in its own folder ``<row>-seed<i>`` (the help once said "runs per grid
    point", and "the sweep folder" for a folder of audits); the seeds it names are the ones the script runs."""
    script = _load(path).SCRIPT
    first = script.data_seed
    seeds = _option_help(path, "--seeds", capsys)
    assert seeds.startswith(f"data worlds each row is audited in, a data set and its target each, at run.seed {first:,}, "
                            f"{first + SEED_STEP:,}, ... (--set run.seed=X: X, X + {SEED_STEP:,}, ...), into <row>-seed<i>;")
    assert seeds.endswith("(default 1; 1 with --quick)")
    out = _option_help(path, "--out", capsys)
    assert out == f"the audits' folder: one folder per row and data seed, and the figure (default {script.out}; re-running resumes it)"


STUDY_SCRIPTS = [path for path in SCRIPTS if not path.stem.startswith("audit_")]


@pytest.mark.parametrize("path", STUDY_SCRIPTS, ids=[path.stem for path in STUDY_SCRIPTS])
def test_a_study_scripts_help_says_what_its_numbers_are_over_the_seeds(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not only "runs per grid point": what the printed numbers are over the seeds (a mean, the largest, paired)."""
    seeds = _option_help(path, "--seeds", capsys)
    assert "run.seed, run.seed + 1, ..." in seeds
    assert any(word in seeds for word in ("their mean", "the largest", "paired by seed")), seeds


@pytest.mark.parametrize("argv, message", [
    (["--trials", "1"], "--trials must be >= 2, got 1"),
    (["--quick", "--trials", "0"], "--trials must be >= 2, got 0"),
])
def test_a_sized_option_below_its_minimum_is_a_usage_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        sized_parser().parse_args(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")


def test_each_value_of_a_listed_option_meets_its_minimum(capsys: pytest.CaptureFixture[str]) -> None:
    parser = ScriptParser("a study", out="o", quick="tiny")
    parser.add_sized_argument("--items", full=(10, 20), quick=(5,), type=int, nargs="+", minimum=1, help="item counts")
    assert parser.parse_args(["--items", "3", "4"]).items == [3, 4]
    with pytest.raises(SystemExit):
        parser.parse_args(["--items", "3", "0"])
    assert capsys.readouterr().err.splitlines()[-1].endswith("error: --items must be >= 1, got 0")


@pytest.mark.parametrize("declare, message", [
    (lambda parser: parser.add_size("the grid", full=1, quick=2), "ScriptParser.add_size('the grid'): expected a Python identifier"),
    (lambda parser: parser.add_size("seeds", full=1, quick=2), "ScriptParser.add_size('seeds'): 'seeds' is already the name"),
    (lambda parser: [parser.add_size("grid", full=1, quick=2), parser.add_size("grid", full=3, quick=4)],
     "ScriptParser.add_size('grid'): 'grid' is already the name"),
    (lambda parser: parser.add_sized_argument("trials", full=9, quick=2, type=int, help="t"),
     "ScriptParser.add_sized_argument('trials'): expected an option's flag"),
    (lambda parser: parser.add_sized_argument("--trials", full=9, quick=2, type=int, default=9, help="t"),
     "ScriptParser.add_sized_argument('--trials'): the default is full="),
    (lambda parser: parser.add_sized_argument("--trials", full=9, quick=2, help="t"),
     "ScriptParser.add_sized_argument('--trials'): a number is declared: give type="),
    (lambda parser: parser.add_sized_argument("--trials", full=9, quick=0, type=int, minimum=1, help="t"),
     "ScriptParser.add_sized_argument('--trials'): full= and quick= must be >= 1 (minimum=), got 0"),
])
def test_a_bad_declaration_is_a_config_error_naming_it(declare, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as caught:
        declare(ScriptParser("a study", out="o", quick="tiny"))
    assert str(caught.value).startswith(message)


def test_a_size_named_as_an_option_added_after_it_is_refused_at_parse_time() -> None:
    parser = ScriptParser("a study", out="o", quick="tiny")
    parser.add_size("users", full=1000, quick=150)
    parser.add_argument("--users", type=int, default=None)
    with pytest.raises(ConfigError, match=r"^ScriptParser.add_size\('users'\): 'users' is also the name of an option$"):
        parser.parse_args([])


def test_a_seed_count_below_one_is_a_bad_declaration() -> None:
    with pytest.raises(ConfigError, match=r"^ScriptParser.add_sized_argument\('--seeds'\): full= and quick= must be >= 1"):
        ScriptParser("a study", out="o", quick="tiny", seeds=3, quick_seeds=0)


def test_a_script_with_a_bad_declaration_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    def main(argv: list[str] | None) -> int:
        ScriptParser("a study", out="o", quick="tiny").add_size("--grid", full=1, quick=2)
        return 0

    assert run_script(main, []) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{Path(sys.argv[0]).name}: error: ScriptParser.add_size('--grid'): expected a Python identifier, "
        "the attribute the parsed arguments carry"
    ]


#: A study script of the shape of scenarios/*.py, at a tiny size: ``main`` runs a study of fcf_static.toml.
TINY_STUDY = (
    "import sys\n"
    "from fedrecsim.study import ScriptParser, Study, run_script\n"
    "def main(argv=None):\n"
    "    parser = ScriptParser('a tiny study', out='results/tiny', quick='tiny')\n"
    "    args = parser.parse_args(argv)\n"
    f"    done = Study({str(SCENARIOS / 'fcf_static.toml')!r}, seeds=args.seeds, overrides=[\n"
    "        'run.rounds=1', 'data.users=20', 'data.items=30', 'data.ratings=200', *args.set]).run(args.out, workers=1)\n"
    "    for row in done.runs:\n"
    "        print(row['seed'], row['transcript'])\n"
    "    return 0\n"
)


@pytest.mark.timeout(300)  # two tiny runs, in a pool of one worker process
def test_a_study_scripts_seeds_start_from_the_users_run_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--seeds 2 --set run.seed=40``: two runs at seeds 40 and 41 with two transcripts, as ``fedrecsim sweep``
    counts them (docs/studies.md), never two runs of seed 40."""
    script = tmp_path / "tiny_study.py"
    script.write_text(TINY_STUDY)
    assert run_script(_load(script).main, ["--seeds", "2", "--set", "run.seed=40", "--out", str(tmp_path / "out")]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [seed for seed, _ in printed] == ["40", "41"] and len({transcript for _, transcript in printed}) == 2


@pytest.mark.timeout(120)
def test_a_closed_standard_output_ends_a_script_quietly_with_141(tmp_path: Path) -> None:
    """``script.py | head -1``: the reader takes one line and closes the pipe while the script still prints;
    the script ends with 141 and nothing on stderr (it once ended in a BrokenPipeError traceback)."""
    script = tmp_path / "chatty.py"
    script.write_text(
        "import sys\n"
        "from fedrecsim.study import run_script\n"
        "def main(argv=None):\n"
        "    for line in range(200_000):\n"
        "        print('line', line)\n"
        "    return 0\n"
        "sys.exit(run_script(main))\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(SCENARIOS.parent / "src"))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.readline() == "line 0\n"
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=100) == 141, err
    assert err == ""


def _summary_line(mean: float, low: float, high: float, **grid: float) -> dict[str, float]:
    """A summary.csv row of ribero_epsilon_k's study: its mean_rank interval and the columns its table reads."""
    baselines = {f"{metric}_{name}.final.mean": 0.5 for metric in ("mean_rank", "test_rmse") for name in _load(SCENARIOS / "ribero_epsilon_k.py").BASELINES}
    return {**grid, "mean_rank.final.mean": mean, "mean_rank.final.ci95_low": low, "mean_rank.final.ci95_high": high,
            "test_rmse.final.mean": 1.0, **baselines}


def test_a_clipped_interval_is_printed_as_its_two_ends_not_as_plus_minus_a_half_width() -> None:
    render = _load(SCENARIOS / "ribero_epsilon_k.py").render
    # mean_rank lives in [0, 1]: an interval 0.02 +- 0.05 is clipped to [0, 0.07], which is no 0.02 +- 0.035.
    clipped, open_interval = _summary_line(0.02, 0.0, 0.07, **{"protocol.k": 1, "protocol.epsilon": 0.5}), _summary_line(
        0.40, 0.35, 0.45, **{"protocol.k": 1, "protocol.epsilon": 1.0})
    rows = render([clipped, open_interval], seeds=2).splitlines()
    assert "95% CI" in rows[1] and "+-" not in rows[1]
    assert rows[3].split()[:3] == ["0.5", "0.020", "[0.000,"] and "0.070]" in rows[3], rows[3]
    assert rows[4].split()[:3] == ["1", "0.400", "+-0.050"], rows[4]


def test_the_epsilon_sweeps_table_says_its_figures_are_a_mean_over_the_seeds() -> None:
    render = _load(SCENARIOS / "hua_epsilon_sweep.py").render
    table = {name: {0.1: (0.5, 0.4, 0.6), 8.0: (0.1, 0.05, 0.2)} for name in ("S1", "S2", "S3")}
    assert render(table, 3).splitlines()[0] == "each figure: the mean over 3 seeds (the same seeds at every eps)"
    assert render(table, 1).splitlines()[0] == "each figure: one seed's value (--seeds N: the mean over N)"
    assert render(table, 3).splitlines()[1].split()[:2] == ["eps", "S1"]


@pytest.mark.parametrize(("script", "last"), [
    ("hua_epsilon_sweep.py", "S3"), ("privirec_comm_scaling.py", "fcf"), ("ribero_acceptance.py", "synthetic"),
])
def test_a_script_of_several_studies_checks_every_folder_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: str, last: str
) -> None:
    """The last study's folder is a user's: refused at once, nothing run (before: after the other studies ran)."""
    (tmp_path / last).mkdir()
    (tmp_path / last / "notes.txt").write_text("mine")
    assert run_script(_load(SCENARIOS / script).main, ["--quick", "--out", str(tmp_path)]) == 2
    assert f"{tmp_path / last}: exists and is not a fedrecsim sweep folder" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == [last]
    assert [path.name for path in (tmp_path / last).iterdir()] == ["notes.txt"]
