"""Running an audit: trials with and without the target, on the sweep engines, resumable, into a folder.

An `Audit` is a scenario (with an optional ``[audit]`` table, `AuditSettings`) whose protocol declares
what it protects (`ProtocolSpec.audit`). Its data set D is drawn once, from the scenario's ``run.seed``;
the two worlds are D with the target user's row ``present`` ("in") and with its row ``absent`` ("out")
(`fedrecsim.audit.neighbours`). Trial ``j`` of world "in" runs at seed ``run.seed + 1 + 2j``, of world
"out" at ``run.seed + 2 + 2j``: fresh randomness for every run, the same data for all. Each run records
the audited party's view, and each distinguisher turns it into features right there, in the worker.

Trials ``j < trials // 2`` of both worlds are the training half, the rest the held-out half: each
distinguisher learns its score on the first, and its bound is computed on the second
(`fedrecsim.audit.bounds`).

Engines: trials go in chunks (``audit.chunk`` trials of one world) to a local process pool or a Dask
cluster (`fedrecsim.sweep.local_pool`, `fedrecsim.sweep.dask_cluster`); ``workers=1`` runs them in this
process. The folder (``out``):

- ``audit-plan.json`` -- the marker: format, and the identity of the audit (scenario, party, target,
  distinguishers, chunk size; not the number of trials). A folder without it is never written into; one
  holding another audit is refused.
- ``trials/<world>-<first trial>-<hash>.json`` -- each chunk's features, written atomically when it
  completes. Re-running skips the chunks that are there, so an interrupted audit resumes, and one re-run
  with more trials runs only the new ones.
- ``audit.json`` -- the result (`AuditResult.document`), ``trials.csv`` -- one row per trial (world,
  seed, half, one score column per distinguisher), ``roc.png`` -- the held-out ROC curves (matplotlib,
  the optional extra ``plot``; without it the plot is skipped and ``audit.json`` says so).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .. import __version__
from ..config import build
from ..data import prepare_data
from ..errors import ConfigError, OutputError, SimulationError
from ..network.party import Party, Role
from ..protocols import protocol_spec
from ..runner import run_on_data
from ..scenario import Scenario, apply_overrides, parse_scenario, read_tables
from ..sweep import PlannedRun, dask_cluster, local_pool
from .bounds import Bound, audit_scores, roc
from .distinguishers import Distinguisher, TrialView, applicable
from .neighbours import Target, with_row, without_user
from .spec import AuditSettings, AuditSpec, Claim, audit_spec

AUDIT_FORMAT = "fedrecsim-audit/1"
PLAN = "audit-plan.json"
TRIALS = "trials"
WORLDS = ("in", "out")
#: How a verdict starts (`AuditResult.document` ``["verdict"]``, the line ``fedrecsim audit`` prints): the
#: audited lower bound exceeds the claim; it does not; the protocol claims no epsilon.
VIOLATION = "VIOLATION"
NO_VIOLATION = "no violation found"
NO_CLAIM = "no DP claim"


def trial_seed(base: int, world: str, trial: int) -> int:
    """The seed of trial ``trial`` of ``world`` (module docstring)."""
    return base + 1 + 2 * trial + (0 if world == "in" else 1)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Audit:
    """An audit of one party's view of a protocol: what to run, checked before anything runs. ::

        audit = Audit("scenarios/minto_ldp.toml", overrides=["audit.party='proxy:0'", "audit.trials=400", ...])
        done = audit.run("results/audit-minto", workers=2)
        print(done.text())

    Args:
        base: a scenario file (its ``[audit]`` table, if any, gives the settings) or raw tables (an
            ``audit`` table among them is the settings).
        overrides: ``key.path=value`` strings; ``audit.*`` keys set the audit's settings.

    Raises:
        ConfigError: a bad scenario or ``[audit]`` key (named), a protocol without a declaration, a party
            the claim does not cover or that is not in the run, a target the relation refuses.
    """

    base: str | Path | Mapping[str, Any]
    overrides: Sequence[str] = ()
    scenario: Scenario = field(init=False, repr=False)
    settings: AuditSettings = field(init=False, repr=False)
    declaration: AuditSpec = field(init=False, repr=False)
    party: Party = field(init=False, repr=False)
    target: Target = field(init=False, repr=False)
    claim: Claim = field(init=False, repr=False)
    distinguishers: tuple[Distinguisher, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.overrides, str):
            raise ConfigError("overrides", 'expected a list of "key.path=value" strings, got one string')
        tables = copy.deepcopy(dict(self.base)) if isinstance(self.base, Mapping) else read_tables(self.base)
        apply_overrides(tables, self.overrides)
        settings = build(AuditSettings, tables.pop("audit", {}), "audit")
        scenario = parse_scenario(tables)
        declaration = audit_spec(protocol_spec(scenario.run.protocol))
        party = settings.party_of()
        if declaration.parties and party.role not in declaration.parties:
            covered = ", ".join(role.value for role in declaration.parties)
            raise ConfigError("audit.party", f"{scenario.run.protocol}'s claim is about the views of {covered}; {party} is not covered")
        chosen = applicable(declaration.distinguishers, party, settings.distinguishers)
        train, _ = prepare_data(scenario.data, scenario.run.seed)
        if party.role is Role.USER and not 0 <= party.index < train.n_users:
            raise ConfigError("audit.party", f"{party} is not a party of the run: the data has users 0..{train.n_users - 1}")
        target = declaration.neighbouring.target(train, settings)
        for name, value in (("scenario", scenario), ("settings", settings), ("declaration", declaration), ("party", party),
                            ("target", target), ("claim", declaration.claim(scenario)), ("distinguishers", chosen)):
            object.__setattr__(self, name, value)

    @property
    def trials(self) -> int:
        return self.settings.trials

    def identity(self) -> dict[str, Any]:
        """What makes two audits the same (the number of trials aside): the folder's marker holds it."""
        return {
            "scenario": self.scenario.to_table(), "party": str(self.party), "target": self.target.to_table(),
            "distinguishers": [d.name for d in self.distinguishers], "chunk": self.settings.chunk,
        }

    def chunks(self) -> list[dict[str, Any]]:
        """Every task of the audit: ``{"world", "first", "seeds", ...}``, named by a hash of its content."""
        identity = self.identity()
        tasks = []
        for world in WORLDS:
            for first in range(0, self.trials, self.settings.chunk):
                count = min(self.settings.chunk, self.trials - first)
                task = {
                    **identity, "world": world, "first": first,
                    "seeds": [trial_seed(self.scenario.run.seed, world, j) for j in range(first, first + count)],
                    "data_seed": self.scenario.run.seed,
                }
                digest = hashlib.sha256(_canonical(task).encode()).hexdigest()[:16]
                tasks.append({**task, "name": f"{world}-{first:07d}-{digest}"})
        return tasks

    def probe(self) -> None:
        """One run of world "in" at the data's seed, here: the audited party must be one of the run that
        receives messages -- or, when the protocol publishes a release (`AuditSpec.published`), which every
        party sees, one of the run at all. ConfigError naming ``audit.party`` otherwise."""
        train, test = prepare_data(self.scenario.data, self.scenario.run.seed)
        result = run_on_data(self.scenario, with_row(train, self.target.user, self.target.present), test)
        parties = result.result["ledger"]["parties"]
        seen = str(self.party) in parties if self.declaration.published else False
        if not seen and parties.get(str(self.party), {}).get("recv_msgs", 0) == 0:
            same = sorted((name for name in parties if name.startswith(f"{self.party.role.value}:")), key=_party_order)
            shown = f"{same[0]} .. {same[-1]}" if len(same) > 2 else ", ".join(same) or "none"
            raise ConfigError(
                "audit.party",
                f"{self.party} receives nothing in this run (parties of role {self.party.role.value}: {shown}): there is no view to audit",
            )

    def folder_problem(self, out: str | Path) -> str | None:
        """Why `run` would refuse ``out`` (not a folder, not an audit folder, another audit's), or None: it is
        missing or holds this audit, to resume."""
        return _folder_problem(Path(os.path.abspath(out)), self.identity())

    def run(
        self, out: str | Path, *, workers: int | None = None, dask: str | None = None, progress: bool | TextIO | None = None,
    ) -> AuditResult:
        """Run the trials not yet in ``out`` and write the result (module docstring).

        Args:
            out: the audit folder: created if missing, resumed if it holds this audit, refused otherwise.
            workers: local processes (default: the cores); 1 runs the trials in this process.
            dask: the address of an existing Dask scheduler to run on instead.
            progress: True (or a stream) prints the chunks as they complete on stderr (or the stream).

        Raises:
            ConfigError: a bad option or party (before the folder is touched). OutputError: ``out`` is not
            an audit folder of this audit. SimulationError: a trial failed (its error; re-running retries).
        """
        if workers is not None and workers < 1:
            raise ConfigError("--workers", f"expected a whole number >= 1, got {workers}")
        path = Path(os.path.abspath(out))
        _check_folder(path, self.identity(), create=False)
        self.probe()
        _check_folder(path, self.identity(), create=True)
        folder = path / TRIALS
        folder.mkdir(exist_ok=True)
        tasks = self.chunks()
        missing = [task for task in tasks if not (folder / f"{task['name']}.json").exists()]
        stream = sys.stderr if progress is True else progress if progress not in (None, False) else None
        started = time.perf_counter()
        cpu = _run_tasks(missing, folder, workers, dask, self.scenario.run.protocol, stream)
        wall = time.perf_counter() - started
        ran = sum(len(task["seeds"]) for task in missing)
        return _finish(self, path, tasks, ran, wall, cpu)


def _party_order(name: str) -> tuple[str, int]:
    role, _, index = name.partition(":")
    return role, int(index) if index.isdigit() else 0


def _folder_problem(path: Path, identity: dict[str, Any]) -> str | None:
    """Why the audit of ``identity`` cannot run into ``path``: it is not a folder, not an audit folder, or
    another audit's; None when it is missing or holds this audit (to resume)."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_dir():
        return "exists and is not a folder"
    try:
        document = json.loads((path / PLAN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        document = None
    if not isinstance(document, dict) or document.get("format") != AUDIT_FORMAT:
        return f"exists and is not a fedrecsim audit folder (no {PLAN}); choose a new location"
    if document.get("identity") != json.loads(_canonical(identity)):
        return "holds another audit (another scenario, party, target or distinguishers); choose a new location"
    return None


def _check_folder(path: Path, identity: dict[str, Any], *, create: bool) -> None:
    problem = _folder_problem(path, identity)
    if problem is not None:
        raise OutputError(path, problem)
    if create and not os.path.lexists(path):
        try:
            os.makedirs(path)
        except OSError as exc:
            raise OutputError(path, f"cannot create the audit folder: {exc.strerror}") from None
        _write_atomically(path / PLAN, json.dumps({"format": AUDIT_FORMAT, "identity": identity}, indent=2, allow_nan=False) + "\n")


def _write_atomically(path: Path, text: str | bytes) -> None:
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    partial.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    os.replace(partial, path)


# -- the trials (in a worker) ------------------------------------------------------------------------


def run_chunk(task: dict[str, Any]) -> dict[str, Any]:
    """A worker's job: the chunk's runs and each distinguisher's features of each run's view.

    Returns ``{"features": {name: [[float, ...] per trial]}, "cpu_s": float}`` or ``{"error": "Type: message"}``
    (any exception of a run is the chunk's recorded failure, as a sweep records a failed run).
    """
    started = time.process_time()
    try:
        scenario = parse_scenario(task["scenario"])
        party = Party.parse(task["party"])
        target = Target.from_table(task["target"])
        declaration = audit_spec(protocol_spec(scenario.run.protocol))
        chosen = applicable(declaration.distinguishers, party, tuple(task["distinguishers"]))
        train, test = prepare_data(scenario.data, task["data_seed"])
        world = with_row(train, target.user, target.row(task["world"] == "in"))
        known = without_user(train, target.user)
        features: dict[str, list[list[float]]] = {d.name: [] for d in chosen}
        for seed in task["seeds"]:
            trial = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, seed=seed))
            result = run_on_data(trial, world, test, record_views=[party])
            published = declaration.published(result.outcome) if declaration.published else {}
            view = TrialView(party, tuple(result.views[party]), target, known, trial, published)
            for distinguisher in chosen:
                values = np.asarray(distinguisher.features(view), dtype=float).ravel()
                features[distinguisher.name].append([float(v) for v in np.nan_to_num(values, nan=0.0, posinf=1e300, neginf=-1e300)])
    except Exception as exc:  # noqa: BLE001 -- recorded, see the docstring
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"features": features, "cpu_s": time.process_time() - started}


def _run_tasks(
    tasks: list[dict[str, Any]], folder: Path, workers: int | None, dask: str | None, protocol: str, stream: TextIO | None,
) -> float:
    """Run the tasks on the chosen engine, writing each chunk's file as it completes; the CPU seconds."""
    cpu = 0.0
    done = 0

    def store(task: dict[str, Any], outcome: dict[str, Any]) -> None:
        nonlocal cpu, done
        if "error" in outcome:
            raise SimulationError(f"audit trial chunk {task['name']} (seeds {task['seeds'][0]}..{task['seeds'][-1]}) failed: {outcome['error']}")
        cpu += outcome["cpu_s"]
        done += 1
        record = {"world": task["world"], "first": task["first"], "seeds": task["seeds"], "features": outcome["features"]}
        _write_atomically(folder / f"{task['name']}.json", json.dumps(record, allow_nan=False))
        if stream is not None:
            stream.write(f"\raudit: {done}/{len(tasks)} chunks of trials done")
            stream.flush()

    if not tasks:
        return 0.0
    if dask is None and (workers or os.cpu_count() or 1) == 1:
        for task in tasks:
            store(task, run_chunk(task))
    else:
        engine = dask_cluster(dask, [protocol], task=run_chunk) if dask is not None else local_pool(workers or os.cpu_count() or 1, task=run_chunk)
        with engine as (submit, wait_any, _):
            pending = {submit(PlannedRun((), task["seeds"][0], task, task["name"])): task for task in tasks}
            while pending:
                for future in wait_any(set(pending)):
                    task = pending.pop(future)
                    try:
                        outcome = future.result()
                    except Exception as exc:  # noqa: BLE001 -- a lost worker fails its chunk
                        outcome = {"error": f"{type(exc).__name__}: {exc}"}
                    store(task, outcome)
    if stream is not None:
        stream.write("\n")
    return cpu


# -- the result ----------------------------------------------------------------------------------------


@dataclass
class AuditResult:
    """An audit's outcome.

    Attributes:
        path: the audit folder.
        document: ``audit.json`` (plain JSON types).
        bounds: each distinguisher's `Bound`.
    """

    path: Path
    document: dict[str, Any]
    bounds: dict[str, Bound]

    @property
    def claim(self) -> dict[str, Any]:
        return self.document["claim"]

    @property
    def epsilon_lower(self) -> float:
        """The largest audited lower bound over the distinguishers (at `best_confidence`)."""
        return self.document["best"]["epsilon_lower"]

    def text(self) -> str:
        """The result in a few lines, as ``fedrecsim audit`` prints it."""
        doc = self.document
        claim = doc["claim"]
        lines = [
            f"audit of {doc['protocol']}, view of {doc['party']}: {doc['relation']['unit']} ({doc['relation']['kind']}: "
            f"{doc['relation']['description']}); target {doc['target']['described']}",
            f"claimed: epsilon = {claim['epsilon']:g}, delta = {claim['delta']:g} ({claim['statement']})"
            if claim["epsilon"] is not None else f"claimed: no DP claim ({claim['statement']})",
            f"trials: {doc['trials_per_world']} per world ({doc['heldout_per_world']} held out), "
            f"{doc['trials_run']} run now at {doc['trials_per_s']:.1f} trials/s ({doc['wall_s']:.1f} s wall)",
        ]
        for name, entry in doc["distinguishers"].items():
            point = "inf" if entry["epsilon_point"] is None else f"{entry['epsilon_point']:.3f}"
            lines.append(
                f"  {name:<14} audited epsilon lower bound {entry['epsilon_lower']:.3f} at {entry['confidence']:.0%} confidence "
                f"(held out: TPR {entry['tpr']:.3f}, FPR {entry['fpr']:.3f}; point estimate {point})"
            )
        best = doc["best"]
        lines.append(
            f"lower bound: epsilon >= {best['epsilon_lower']:.3f} at {best['confidence']:.0%} confidence "
            f"({best['distinguisher']}; over {len(doc['distinguishers'])} distinguisher(s), union bound)"
        )
        lines.append(doc["verdict"])
        lines.append(f"ROC plot: {doc['roc_plot']}" if doc["roc_plot"] else f"ROC plot skipped: {doc['roc_plot_skipped']}")
        lines.append(f"-> {self.path / 'audit.json'}")
        return "\n".join(lines)


def _load_chunks(folder: Path, tasks: list[dict[str, Any]]) -> dict[str, dict[str, list[list[float]]]]:
    """Per world, per distinguisher, the features of every trial in trial order."""
    by_world: dict[str, dict[str, list[list[float]]]] = {world: {} for world in WORLDS}
    for task in tasks:
        record = json.loads((folder / f"{task['name']}.json").read_text(encoding="utf-8"))
        for name, rows in record["features"].items():
            by_world[task["world"]].setdefault(name, []).extend(rows)
    return by_world


def _matrix(rows: list[list[float]], width: int) -> np.ndarray:
    matrix = np.zeros((len(rows), width))
    for position, row in enumerate(rows):
        matrix[position, : len(row)] = row
    return matrix


def _finish(audit: Audit, path: Path, tasks: list[dict[str, Any]], ran: int, wall: float, cpu: float) -> AuditResult:
    features = _load_chunks(path / TRIALS, tasks)
    trials = audit.trials
    half = trials // 2
    labels = np.concatenate([np.ones(half), np.zeros(half)])
    confidence, delta = audit.settings.confidence, audit.claim.delta
    bounds: dict[str, Bound] = {}
    scores: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    entries: dict[str, Any] = {}
    for distinguisher in audit.distinguishers:
        rows_in, rows_out = features["in"][distinguisher.name], features["out"][distinguisher.name]
        width = max(len(row) for row in [*rows_in, *rows_out, [0.0]])
        in_matrix, out_matrix = _matrix(rows_in, width), _matrix(rows_out, width)
        score = distinguisher.fit(np.vstack([in_matrix[:half], out_matrix[:half]]), labels)
        all_in, all_out = np.asarray(score(in_matrix), float), np.asarray(score(out_matrix), float)
        scores[distinguisher.name] = (all_in, all_out)
        bound = audit_scores(all_in[:half], all_out[:half], all_in[half:], all_out[half:], delta=delta, confidence=confidence)
        bounds[distinguisher.name] = bound
        fpr, tpr = roc(all_in[half:], all_out[half:])
        rule = bound.rule
        entries[distinguisher.name] = {
            "description": distinguisher.description,
            "epsilon_lower": bound.epsilon_lower,
            "confidence": bound.confidence,
            "tpr": bound.tpr,
            "fpr": bound.fpr,
            "epsilon_point": bound.epsilon_point if math.isfinite(bound.epsilon_point) else None,
            "rule": None if rule is None else {"threshold": rule.threshold, "event": f"score {rule.event} threshold", "ordering": rule.ordering},
            "heldout_hits": {"in": bound.hits_in, "out": bound.hits_out},
            "features": width,
            "roc": {"fpr": fpr.tolist(), "tpr": tpr.tolist()},
        }
    best_name = max(bounds, key=lambda name: bounds[name].epsilon_lower)
    alpha = 1.0 - confidence
    best = {
        "distinguisher": best_name,
        "epsilon_lower": bounds[best_name].epsilon_lower,
        "confidence": max(0.0, 1.0 - alpha * len(bounds)),
    }
    claimed = audit.claim.epsilon
    if not math.isfinite(claimed):
        verdict = (
            f"{NO_CLAIM} ({audit.claim.statement}): the audited lower bound {best['epsilon_lower']:.3f} "
            f"(at {best['confidence']:.0%} confidence) measures how much this view demonstrably reveals about the "
            "target; the true leak may be larger"
        )
    elif best["epsilon_lower"] > claimed:
        verdict = (
            f"{VIOLATION}: the audited lower bound {best['epsilon_lower']:.3f} exceeds the claimed epsilon {claimed:g} "
            f"(at {best['confidence']:.0%} confidence): the claim does not hold for this relation and party"
        )
    else:
        verdict = (
            f"{NO_VIOLATION}: the audited lower bound {best['epsilon_lower']:.3f} does not exceed the claimed "
            f"epsilon {claimed:g}. This is a lower bound from {trials} trials per world and these distinguishers; "
            "it does not show that the protocol is private"
        )
    plot, skipped = _plot(path, audit, entries)
    document = {
        "format": AUDIT_FORMAT,
        "fedrecsim_version": __version__,
        "protocol": audit.scenario.run.protocol,
        "scenario": audit.scenario.to_table(),
        "party": str(audit.party),
        "relation": {
            "unit": audit.declaration.neighbouring.unit, "kind": audit.declaration.neighbouring.kind,
            "description": audit.declaration.neighbouring.description,
        },
        "target": {**audit.target.to_table(), "described": audit.target.describe()},
        "claim": {"epsilon": claimed if math.isfinite(claimed) else None, "delta": delta, "statement": audit.claim.statement},
        "method": (
            "distinguisher scores; threshold, direction and ordering chosen on the training half; on the held-out half "
            "eps >= log((P[E|a] - delta) / P[E|b]) with one-sided Clopper-Pearson bounds at (1 - confidence)/2 each "
            "(Jagielski et al. 2020; Nasr et al. 2021, 2023)"
        ),
        "trials_per_world": trials,
        "heldout_per_world": trials - half,
        "confidence": confidence,
        "distinguishers": entries,
        "best": best,
        "verdict": verdict,
        "trials_run": ran,
        "wall_s": wall,
        "cpu_s": cpu,
        "trials_per_s": (ran / wall) if ran and wall > 0 else 0.0,
        "roc_plot": plot,
        "roc_plot_skipped": skipped,
    }
    _write_atomically(path / "trials.csv", _trials_csv(audit, scores, half))
    _write_atomically(path / "audit.json", json.dumps(document, indent=2, allow_nan=False) + "\n")
    return AuditResult(path, document, bounds)


def _trials_csv(audit: Audit, scores: dict[str, tuple[np.ndarray, np.ndarray]], half: int) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    names = list(scores)
    writer.writerow(["trial", "world", "seed", "half", *(f"score_{name}" for name in names)])
    for world_position, world in enumerate(WORLDS):
        for j in range(audit.trials):
            row = [j, world, trial_seed(audit.scenario.run.seed, world, j), "train" if j < half else "heldout"]
            writer.writerow([*row, *(repr(float(scores[name][world_position][j])) for name in names)])
    return buffer.getvalue()


def _plot(path: Path, audit: Audit, entries: dict[str, Any]) -> tuple[str | None, str | None]:
    """``roc.png`` of the held-out ROC curves: (its file name, None), or (None, why it was skipped)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None, 'matplotlib is not installed (pip install "fedrecsim[plot]"); audit.json holds the ROC points'
    figure = Figure(figsize=(5, 5))
    axes = figure.subplots()
    for name, entry in entries.items():
        axes.plot(entry["roc"]["fpr"], entry["roc"]["tpr"], label=f"{name} (eps >= {entry['epsilon_lower']:.2f})")
    claimed = audit.claim.epsilon
    grid = np.linspace(0, 1, 201)
    if math.isfinite(claimed):
        # The largest TPR an (eps, delta)-DP mechanism allows at each FPR (both orderings of the pair).
        limit = np.minimum.reduce([np.minimum(1.0, math.exp(min(claimed, 700)) * grid + audit.claim.delta),
                                   1.0 - np.maximum(0.0, (1.0 - audit.claim.delta - grid) * math.exp(-min(claimed, 700)))])
        axes.plot(grid, limit, "k--", linewidth=1, label=f"claimed eps = {claimed:g} limit")
    axes.plot([0, 1], [0, 1], color="0.7", linewidth=0.8)
    axes.set_xlabel("false-positive rate (held out)")
    axes.set_ylabel("true-positive rate (held out)")
    axes.set_title(f"{audit.scenario.run.protocol}: view of {audit.party}")
    axes.legend(loc="lower right", fontsize=8)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    _write_atomically(path / "roc.png", buffer.getvalue())
    return "roc.png", None


__all__ = ["AUDIT_FORMAT", "Audit", "AuditResult", "run_chunk", "trial_seed"]
