"""Mutation testing of fedrecsim's core with mutmut 3, one module at a time.

    make mutation                                   # every module below, then the score table
    make mutation MODULE=src/fedrecsim/seeding.py   # one module (a path or a key: seeding, data.splits)
    python tools/mutation.py report                 # the table again, from the last runs
    python tools/mutation.py report --write docs/mutation-baseline.md   # table + survivors' diffs

Each module is mutated against the tests that exercise it (``TARGETS``), not the whole suite: a mutant
of `seeding` runs ``tests/test_seeding.py`` only, so a run takes minutes and its score says how well the
module's own tests pin it down. Within those tests mutmut runs, per mutant, only the tests that call the
mutated function.

Each module has its own work folder ``.mutation/<key>/`` (git-ignored): a fresh copy of ``src/``, links
to the test and data folders, and a generated ``pyproject.toml`` holding that module's ``[tool.mutmut]``
table. mutmut writes its mutants into ``.mutation/<key>/mutants/`` and never into ``src/``; results are
cached there, so a second run re-tests only the functions that changed and the mutants that survived
the last run (so a newly written test shows its kills at once). Because ``src`` is a copy, even
``mutmut apply`` run by hand in a work folder cannot touch the repository's source.

Equivalent mutants (the program behaves identically, so no test can kill them) are listed, one entry
each with a one-line reason, in ``tools/mutation-equivalents/<key>.toml`` (one file per module, so work
on two modules never edits one file); the table counts them apart and leaves them out of the score. An entry records the mutated line as mutmut's diff shows it, so an entry
whose mutant was renumbered by a later edit of the function is reported as stale, never silently
matched to a different mutant. (mutmut's own ``# pragma: no mutate`` comment also works, but it
silences every mutation of its line, not one; prefer the list.)

Three things to know when writing a test to kill a mutant. mutmut switches mutants on at call time, in
workers forked after the tests were collected, so an object a test module builds at import (a
module-level ``RINGS = [Ring(32, 30)]``) is built by the original code: call the constructor inside the
test. mutmut runs against a mutant only the tests whose *call* reached the mutated function when it
collected its stats; a run built in a pytest fixture is not seen, so such a test never runs against
the mutants of what the fixture called: build it in the test body (a plain helper is fine). And the
export tests (``*exports.py``) are left out of mutation runs, because they enumerate a
module's definitions and mutmut adds its mutants to every module.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents"
"""One ``<key>.toml`` per module of ``TARGETS`` with its reviewed equivalent mutants."""
LINKED = ("tests", "scenarios", "examples", "docs", "benchmarks", "README.md")
"""Linked into every work folder and copied by mutmut into its mutants folder: tests read these."""


@dataclass(frozen=True)
class Target:
    """One module of the core and the tests that exercise it."""

    key: str
    source: str
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()
    """Test ids left out: tests that run the package in a child process, where no mutant is ever switched on
    (mutmut switches them on in its own forked workers), so they cost time and kill nothing."""

    @property
    def pattern(self) -> str:
        """mutmut's ``only_mutate`` glob for this module."""
        return self.source if self.source.endswith(".py") else f"{self.source}/*"

    def existing_tests(self) -> list[str]:
        return [test for test in self.tests if (ROOT / test).exists()]


TARGETS = (
    Target("mechanisms", "src/fedrecsim/mechanisms", ("tests/mechanisms",)),
    Target("data.splits", "src/fedrecsim/data/splits.py", ("tests/data/test_data_splits.py",)),
    Target("data.metrics", "src/fedrecsim/data/metrics.py", ("tests/data/test_data_metrics.py",)),
    Target("seeding", "src/fedrecsim/seeding.py", ("tests/test_seeding.py",)),
    Target("clock", "src/fedrecsim/clock.py", ("tests/test_clock.py",)),
    Target("config", "src/fedrecsim/config.py", ("tests/test_config.py", "tests/test_scenario.py")),
    Target("scenario", "src/fedrecsim/scenario.py", ("tests/test_scenario.py",)),
    Target("runner", "src/fedrecsim/runner.py", ("tests/test_runner.py", "tests/test_sim_api.py", "tests/test_progress.py",
                                                  "tests/data/test_data_fetch.py", "tests/test_runner_checkpoints.py",
                                                  "tests/test_checkpoint_file.py")),
    Target("output", "src/fedrecsim/output.py", ("tests/test_output.py", "tests/test_output_target.py")),
    Target("checkpoint", "src/fedrecsim/checkpoint.py", ("tests/test_checkpoint_file.py",)),
    Target("allocator", "src/fedrecsim/allocator.py", ("tests/test_allocator.py",)),
    Target("network", "src/fedrecsim/network", ("tests/network",)),
    Target("actors", "src/fedrecsim/actors", ("tests/actors",)),
    Target("protocols.fcf", "src/fedrecsim/protocols/fcf", ("tests/protocols/fcf",)),
    Target("models", "src/fedrecsim/models", ("tests/models",)),
    Target("data.ranking", "src/fedrecsim/data/ranking.py", ("tests/data/test_data_ranking.py",)),
    Target("data.poisson", "src/fedrecsim/data/poisson.py", ("tests/data/test_data_poisson.py",)),
    Target("data.silos", "src/fedrecsim/data/silos.py", ("tests/data/test_data_silos.py",)),
    Target(
        "data.registry",
        "src/fedrecsim/data/registry.py",
        ("tests/data/test_data_registry.py", "tests/data/test_data_fetch.py"),
    ),
    Target(
        "data.fetch", "src/fedrecsim/data/fetch.py", ("tests/data/test_data_fetch.py", "tests/data/test_data_lightgcn.py")
    ),
    Target(
        "data.formats",
        "src/fedrecsim/data/formats.py",
        (
            "tests/data/test_data_lastfm.py",
            "tests/data/test_data_filmtrust.py",
            "tests/data/test_data_citeulike.py",
            "tests/data/test_data_lightgcn.py",
        ),
    ),
    Target(
        "data.loaders",
        "src/fedrecsim/data/loaders.py",
        ("tests/data/test_data_load.py", "tests/data/test_data_lightgcn.py", "tests/data/test_data_registry.py"),
    ),
    Target(
        "protocols.prototypes",
        "src/fedrecsim/protocols/prototypes",
        ("tests/protocols/prototypes",),
    ),
    Target("protocols.secagg", "src/fedrecsim/protocols/secagg", ("tests/protocols/secagg",)),
    Target("protocols.privirec", "src/fedrecsim/protocols/privirec", ("tests/protocols/privirec",)),
    Target("protocols.fedvae", "src/fedrecsim/protocols/fedvae", ("tests/protocols/fedvae",)),
    # Not tests/protocols/dpmf/test_dpmf_scripts.py: it checks the scenario scripts' printed studies, sweeps
    # that run the protocol for seconds per mutant; the protocol's own files pin the protocol down.
    Target(
        "protocols.dpmf",
        "src/fedrecsim/protocols/dpmf",
        tuple(
            path.relative_to(ROOT).as_posix()
            for path in sorted((ROOT / "tests" / "protocols" / "dpmf").glob("test_dpmf_*.py"))
            if path.name != "test_dpmf_scripts.py"
        ),
    ),
    Target(
        "protocols.ldp_implicit",
        "src/fedrecsim/protocols/ldp_implicit",
        ("tests/protocols/ldp_implicit",),
        deselect=(
            "tests/protocols/ldp_implicit/test_ldp_scenarios.py::test_the_quick_tradeoff_study_prints_its_grid_from_a_sweep",
        ),
    ),
    Target("inspect", "src/fedrecsim/inspect.py", ("tests/test_inspect.py",)),
)

DETECTED = ("killed", "timeout", "segfault", "caught by type check")
"""mutmut statuses that mean the tests noticed the mutant (a timeout or a crash is a failing test)."""
LIVE = ("survived", "no tests", "suspicious")
"""mutmut statuses of a mutant the tests did not notice: each needs a test or an equivalence entry."""

# Runs inside a work folder, so mutmut reads that folder's configuration; prints every mutant of the
# module with mutmut's own status name and, for those asked for, mutmut's own diff.
_COLLECT = """
import json, sys
from pathlib import Path
from mutmut.stats import status_by_exit_code
from mutmut.mutation.diff_apply import get_diff_for_mutant
prefix, diff_statuses, diff_names = sys.argv[1], set(json.loads(sys.argv[2])), set(json.loads(sys.argv[3]))
out = {}
for meta in sorted(Path("mutants").rglob("*.py.meta")):
    path = meta.relative_to("mutants").with_suffix("")
    if not str(path).startswith(prefix):
        continue
    for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
        status = status_by_exit_code[code]
        wanted = status in diff_statuses or name in diff_names
        out[name] = {"path": str(path), "status": status, "diff": get_diff_for_mutant(name, path=path) if wanted else None}
print(json.dumps(out))
"""


def select(module: str | None) -> list[Target]:
    """The targets a ``MODULE=`` value names: a key, a path (file or package) or nothing for all."""
    if not module:
        return list(TARGETS)
    wanted = module.rstrip("/")
    found = [t for t in TARGETS if wanted in (t.key, t.source) or t.source.startswith(wanted + "/")]
    if not found:
        known = ", ".join(t.source for t in TARGETS)
        raise SystemExit(f"mutation: {module!r} is not a configured module; configured: {known}")
    return found


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _pyproject(target: Target) -> str:
    """The work folder's pyproject: this module's mutmut table and the project's pytest settings."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    pytest_options = dict(project.get("tool", {}).get("pytest", {}).get("ini_options", {}))
    pytest_options.pop("testpaths", None)
    mutmut = {
        "source_paths": ["src/fedrecsim"],
        "only_mutate": [target.pattern],
        "pytest_add_cli_args_test_selection": target.existing_tests(),
        # The export tests enumerate a module's definitions, and mutmut adds its mutants to each module.
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "--ignore-glob=*exports.py"]
        + [arg for test in target.deselect for arg in ("--deselect", test)],
        "also_copy": [name for name in LINKED if name != "tests"],
    }
    lines = ["# Generated by tools/mutation.py for one module; edit TARGETS there instead.", "[tool.mutmut]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in mutmut.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in pytest_options.items()]
    return "\n".join(lines) + "\n"


def prepare(target: Target) -> Path:
    """Create or refresh the module's work folder; return it."""
    work = WORK / target.key
    work.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    if (work / "src").exists():
        shutil.rmtree(work / "src")
    shutil.copytree(ROOT / "src", work / "src", ignore=ignore)  # copy2 keeps mtimes: mutmut's cache holds
    for name in LINKED:
        link = work / name
        if not link.is_symlink() and (ROOT / name).exists():
            link.symlink_to(ROOT / name)
    config = work / "pyproject.toml"
    text = _pyproject(target)
    if not config.exists() or config.read_text("utf-8") != text:
        config.write_text(text, "utf-8")
    return work


def retest_survivors(work: Path, target: Target) -> int:
    """Mark the module's live mutants as not checked, so that mutmut tests them again; return how many.

    mutmut re-tests a mutant when its function changes, not when a test is added, so without this a
    new test would never show its kill. Only survivors are reset: a run after writing a test costs one
    test run per survivor.
    """
    reset = 0
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        if not str(meta.relative_to(work / "mutants")).startswith(target.source):
            continue
        data = json.loads(meta.read_text("utf-8"))
        codes = data.get("exit_code_by_key", {})
        live = [name for name, code in codes.items() if code in _LIVE_EXIT_CODES]
        for name in live:
            codes[name] = None
        if live:
            meta.write_text(json.dumps(data), "utf-8")
            reset += len(live)
    return reset


_LIVE_EXIT_CODES = (0, 2, 5, 33, 35)
"""mutmut's exit codes re-tested on the next run: survived (0), no tests (5, 33), suspicious (35) and
interrupted (2: the tests ended in a KeyboardInterrupt -- e.g. a mutant that raises `Interrupted` --
which the table shows as not run until a run judges it); see `mutmut.stats`."""


def mutmut_command() -> Path:
    command = Path(sys.executable).parent / "mutmut"
    if not command.exists():
        raise SystemExit('mutation: mutmut is not installed; run `pip install -e ".[mutation]"` or `make mutation`')
    return command


def run(targets: list[Target], jobs: int) -> None:
    """Mutate each target in turn; a failure of one module is reported and the others still run."""
    command = mutmut_command()
    for target in targets:
        work = prepare(target)
        retested = retest_survivors(work, target)
        tests = target.existing_tests()
        again = f" (re-testing {retested} survivors of the last run)" if retested else ""
        print(f"mutation: {target.source} against {' '.join(tests) or '(no tests)'}{again} ...", flush=True)
        started = time.monotonic()
        with open(work / "mutmut.log", "w", encoding="utf-8") as log:
            done = subprocess.run([str(command), "run", "--max-children", str(jobs)], cwd=work, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)
        elapsed = time.monotonic() - started
        if done.returncode != 0:
            tail = (work / "mutmut.log").read_text("utf-8", errors="replace").splitlines()[-15:]
            print(f"mutation: mutmut failed on {target.source} (exit {done.returncode}) after {elapsed:.0f} s; "
                  f"log: {work / 'mutmut.log'}\n  " + "\n  ".join(tail), flush=True)
        else:
            print(f"mutation: {target.source} done in {elapsed:.0f} s", flush=True)


def load_equivalents() -> dict[str, dict[str, str]]:
    """Every reviewed equivalent mutant, by mutant name, from the module files in ``EQUIVALENTS``."""
    found: dict[str, dict[str, str]] = {}
    keys = {target.key for target in TARGETS}
    for path in sorted(EQUIVALENTS.glob("*.toml")):
        if path.stem not in keys:
            raise SystemExit(f"mutation: {path.name} names no module of TARGETS; known keys: {', '.join(sorted(keys))}")
        for entry in tomllib.loads(path.read_text("utf-8")).get("equivalent", []):
            missing = {"mutant", "line", "reason"} - entry.keys()
            if missing:
                raise SystemExit(f"mutation: {path.name}: entry {entry} lacks {', '.join(sorted(missing))}")
            if entry["mutant"] in found:
                raise SystemExit(f"mutation: {path.name}: {entry['mutant']} is listed twice")
            found[entry["mutant"]] = entry
    return found


@dataclass
class Score:
    """The outcome of one module's (or one file's) mutants."""

    name: str
    total: int = 0
    detected: int = 0
    survived: int = 0
    no_tests: int = 0
    other_live: int = 0
    equivalent: int = 0
    unchecked: int = 0

    @property
    def live(self) -> int:
        return self.survived + self.no_tests + self.other_live

    @property
    def score(self) -> float | None:
        judged = self.total - self.equivalent - self.unchecked
        return 100.0 * self.detected / judged if judged else None

    def add(self, status: str, equivalent: bool) -> None:
        self.total += 1
        if equivalent:
            self.equivalent += 1
        elif status in DETECTED:
            self.detected += 1
        elif status == "survived":
            self.survived += 1
        elif status == "no tests":
            self.no_tests += 1
        elif status in LIVE:
            self.other_live += 1
        else:  # not checked, skipped, interrupted: the run did not finish them
            self.unchecked += 1

    def row(self) -> str:
        pct = "-" if self.score is None else f"{self.score:.1f}%"
        return (f"| {self.name} | {self.detected} / {self.total - self.equivalent - self.unchecked} | {pct} | "
                f"{self.live} | {self.no_tests} | {self.equivalent} | {self.unchecked} |")


HEADER = ("| module | killed / judged | score | survivors | of which no tests | equivalent | not run |\n"
          "|---|---:|---:|---:|---:|---:|---:|")


@dataclass
class ModuleResult:
    target: Target
    score: Score
    files: list[Score]
    survivors: list[tuple[str, dict]]
    stale: list[str]


def _natural(name: str) -> tuple[str, int]:
    """Sort key: mutmut_2 before mutmut_10."""
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, 0)


def collect(target: Target, equivalents: dict[str, dict[str, str]]) -> ModuleResult | None:
    """Read a module's results from its work folder, or None if it was never run."""
    work = WORK / target.key
    if not (work / "mutants").exists():
        return None
    done = subprocess.run(
        [sys.executable, "-c", _COLLECT, target.source, json.dumps(LIVE), json.dumps(sorted(equivalents))],
        cwd=work, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mutation: could not read the results of {target.source}:\n{done.stderr}")
    mutants = json.loads(done.stdout)
    score, files, survivors, stale = Score(target.source), {}, [], []
    for name, mutant in sorted(mutants.items(), key=lambda item: _natural(item[0])):
        entry = equivalents.get(name)
        equivalent = False
        if entry is not None:
            added = [line[1:].strip() for line in (mutant["diff"] or "").splitlines()
                     if line.startswith("+") and not line.startswith("+++")]
            equivalent = entry["line"].strip() in added
            if not equivalent:
                stale.append(name)
        if mutant["status"] in LIVE and not equivalent:
            survivors.append((name, mutant))
        score.add(mutant["status"], equivalent)
        files.setdefault(mutant["path"], Score(mutant["path"])).add(mutant["status"], equivalent)
    return ModuleResult(target, score, [files[p] for p in sorted(files)], survivors, stale)


def report(targets: list[Target], write: Path | None) -> None:
    equivalents = load_equivalents()
    results = [(target, collect(target, equivalents)) for target in targets]
    lines = [HEADER]
    for target, result in results:
        if result is None:
            lines.append(f"| {target.source} | not run | | | | | |")
            continue
        lines.append(result.score.row())
        if len(result.files) > 1:
            lines += [f.row().replace(f"| {f.name} ", f"| &nbsp;&nbsp;{Path(f.name).name} ", 1) for f in result.files]
    table = "\n".join(lines)
    print(table)
    stale = [name for _, result in results if result for name in result.stale]
    for name in stale:
        print(f"mutation: stale entry in {EQUIVALENTS.name}/: {name} no longer makes the recorded change; "
              "re-review it", file=sys.stderr)
    if write is not None:
        write.write_text(_markdown(table, results, stale), "utf-8")
        print(f"mutation: wrote {write.relative_to(ROOT) if write.is_relative_to(ROOT) else write}")


def _markdown(table: str, results: list[tuple[Target, ModuleResult | None]], stale: list[str]) -> str:
    version = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('mutmut'))"],
                             capture_output=True, text=True, check=False).stdout.strip() or "?"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip() or "?"
    out = [
        "# Mutation-testing baseline",
        "",
        f"Written by `python tools/mutation.py report --write` (mutmut {version}; the runs mutated the working "
        f"tree as it was when each module ran, at or before commit {commit}). Reproduce with "
        "`make mutation` (all modules) or `make mutation MODULE=src/fedrecsim/seeding.py` (one); "
        "how it works, and how to mark an equivalent mutant, is in the docstring of `tools/mutation.py`.",
        "",
        "*killed / judged*: mutants the module's tests detect (failed, timed out or crashed) over all its "
        "mutants less the equivalent ones and those the run did not reach. *no tests*: the mutated "
        "function is not called by the module's tests at all.",
        "",
        "Tests per module: " + "; ".join(f"`{t.key}`: {', '.join(t.existing_tests())}" for t, _ in results) + ".",
        "",
        table,
        "",
    ]
    if stale:
        out += ["Stale equivalence entries (re-review): " + ", ".join(f"`{n}`" for n in stale), ""]
    out += ["## Surviving mutants", ""]
    for target, result in results:
        if result is None or not result.survivors:
            continue
        out += [f"### {target.source} ({len(result.survivors)})", ""]
        for name, mutant in result.survivors:
            out += [f"`{name}` ({mutant['status']})", "", "```diff", (mutant["diff"] or "").strip(), "```", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="mutate the module(s), then print the score table")
    report_parser = sub.add_parser("report", help="print the score table of the last runs")
    for p in (run_parser, report_parser):
        p.add_argument("--module", default=os.environ.get("MODULE") or None,
                       help="a module path or key (default: all configured modules)")
        p.add_argument("--write", type=Path, help="also write the table and survivors' diffs to this Markdown file")
    run_parser.add_argument("--jobs", type=int, default=2, help="mutants tested in parallel (default 2)")
    args = parser.parse_args(argv)
    targets = select(args.module)
    write = None if args.write is None else args.write.resolve()
    if args.command == "run":
        os.nice(max(0, 19 - os.nice(0)))  # a shared machine: mutation runs yield to everything else
        run(targets, args.jobs)
    report(targets, write)


if __name__ == "__main__":
    main()
