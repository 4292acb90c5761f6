"""Inspecting a scenario before running it: ``fedrecsim inspect FILE [--set KEY=VALUE ...]``.

`inspect_scenario` validates a scenario and prepares its data without running it, then reports

- the resolved scenario, every default filled in;
- the parties that will exist per role, and how many users the availability model expects online;
- an estimate of messages and bytes per round and per role, the set-up (round 0) and the closing phase
  after the last round (privirec's filters: `fedrecsim.network.ledger`) apart from the rounds, whose
  estimate covers rounds 1..R only. A protocol that declares a traffic plan
  (`ProtocolSpec.plan`, a `TrafficPlan` of `Flow`s) is estimated from it: every size is the real wire
  codec's length of a message of the shape the protocol sends, so fixed-size messages are exact and the
  rest are expectations over the data and the availability model. Sizes are checked against the
  scenario's own limit (``network.max_message_mb``), as the run's network checks them: a planned message
  above it is refused with a `ConfigError` naming the key. A protocol without a plan is estimated from
  what its calibration run measured;
- how long the whole run should take, from a short calibration: the scenario run for a few rounds at
  its full size (nothing is scaled; the output says so), timed round by round and extrapolated.

The expected availability (`expected_availability`) is the availability model's own expectation:
everyone (``always``); the Bernoulli chain from the exact initial draw towards its stationary share
p_join / (p_join + p_leave), averaged over the run's rounds (``bernoulli``); the stationary share of the
on/off process with transitions over a round's virtual length (``markov``); the trace's initial
online set, with its joins and leaves not estimated (``trace``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import trio

from .config import toml_key, toml_literal
from .data import prepare_data
from .data.ratings import Ratings
from .errors import ConfigError, WireError
from .memory import check_memory
from .network.availability import PartyList
from .network.ledger import CLOSING
from .network.party import Party, Role
from .protocols import PlanContext, protocol_spec
from .protocols.runtime import Flow, TrafficPlan
from .scenario import Scenario, parse_scenario
from .summary import rounds_text

#: Rounds the calibration runs by default: the first holds the set-up, the others time a round.
CALIBRATION_ROUNDS = 3


_COUNTERS = ("sent_msgs", "sent_bytes", "recv_msgs", "recv_bytes")


@dataclass(frozen=True)
class Availability:
    """Users expected online at the start (``initial``) and per round (``online``), and joins, leaves
    per round; ``note`` says how they were derived."""

    initial: float
    online: float
    joins: float
    leaves: float
    note: str


def expected_availability(scenario: Scenario, n_users: int, round_s: float | None = None) -> Availability:
    """The ``[availability]`` model's expectation for ``n_users`` users over ``scenario.run.rounds`` rounds.

    Args:
        round_s: the virtual length of a round (for ``markov``); default ``round_gap_s + round_timeout_s``.
    """
    config = scenario.availability
    churn = config.churn()
    initial = float(len(churn.initial_online(scenario.run.seed, PartyList(Party(Role.USER, i) for i in range(n_users)))))
    rounds = scenario.run.rounds
    if config.model == "bernoulli":
        p_join, p_leave = config.p_join, config.p_leave
        rate = p_join + p_leave
        start = initial / n_users if n_users else 0.0
        stationary = p_join / rate if rate else start
        decay = 1.0 - rate
        # E[share online at the start of round t] = stationary + (start - stationary) decay^(t-1), averaged.
        mean_power = (1.0 - decay**rounds) / (rounds * rate) if rate else 1.0
        share = stationary + (start - stationary) * mean_power
        online = share * n_users
        note = f"bernoulli: {initial:.0f} online at the start, tending to {stationary:.1%} of {n_users}"
        return Availability(initial, online, p_join * (n_users - online), p_leave * online, note)
    if config.model == "markov":
        length = round_s if round_s is not None else scenario.run.round_gap_s + scenario.run.round_timeout_s
        share = config.mean_on_s / (config.mean_on_s + config.mean_off_s)
        online = share * n_users
        per_round = online * min(1.0, length / config.mean_on_s)
        note = f"markov: stationary {share:.1%} online; transitions over {length:g} virtual s per round"
        return Availability(initial, online, per_round, per_round, note)
    if config.model == "trace":
        return Availability(initial, initial, 0.0, 0.0, "trace: the initial online set; its joins and leaves are not estimated")
    return Availability(initial, initial, 0.0, 0.0, "always: every user online")


# --------------------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Traffic:
    """Messages and bytes sent and received, per role (role name -> counter -> value)."""

    roles: Mapping[str, Mapping[str, float]]

    @classmethod
    def of(cls, flows: Iterable[Flow]) -> Traffic:
        roles: dict[str, dict[str, float]] = {}
        for flow in flows:
            sender = roles.setdefault(flow.src.value, dict.fromkeys(_COUNTERS, 0.0))
            receiver = roles.setdefault(flow.dst.value, dict.fromkeys(_COUNTERS, 0.0))
            sender["sent_msgs"] += flow.messages
            sender["sent_bytes"] += flow.bytes
            receiver["recv_msgs"] += flow.messages
            receiver["recv_bytes"] += flow.bytes
        return cls({role: roles[role] for role in sorted(roles)})

    def total(self, counter: str) -> float:
        return sum(counters[counter] for counters in self.roles.values())

    def plus(self, other: Traffic, times: float = 1.0) -> Traffic:
        """This traffic plus ``times`` x ``other``."""
        names = sorted({*self.roles, *other.roles})
        zero = dict.fromkeys(_COUNTERS, 0.0)
        return Traffic({
            role: {c: self.roles.get(role, zero)[c] + times * other.roles.get(role, zero)[c] for c in _COUNTERS}
            for role in names
        })


@dataclass(frozen=True)
class Estimate:
    """Traffic of the set-up (round 0), of one round and of the closing phase after the last round, and
    what it rests on.

    Attributes:
        source: ``plan`` (the protocol's `TrafficPlan`) or ``calibration`` (measured).
        setup, per_round, closing: the traffic (``closing`` empty for a protocol that sends nothing after
            its last round).
        rounds: the run's rounds.
        flows: the per-round flows of a plan (empty for a measured estimate).
        exact: whether every per-round size is exact (given the counts).
        assumptions: what the estimate assumes.
    """

    source: str
    setup: Traffic
    per_round: Traffic
    rounds: int
    flows: tuple[Flow, ...] = ()
    setup_flows: tuple[Flow, ...] = ()
    exact: bool = False
    assumptions: tuple[str, ...] = ()
    closing: Traffic = field(default_factory=lambda: Traffic({}))

    def run_total(self) -> Traffic:
        """The whole run: the set-up, every round and the closing phase."""
        return self.setup.plus(self.per_round, self.rounds).plus(self.closing)


def plan_estimate(plan: TrafficPlan, rounds: int) -> Estimate:
    return Estimate(
        "plan", Traffic.of(plan.setup), Traffic.of(plan.per_round), rounds, tuple(plan.per_round), tuple(plan.setup),
        all(flow.exact for flow in plan.per_round), tuple(plan.assumptions), Traffic.of(plan.closing),
    )


# --------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """A short run at full size, timed round by round.

    Attributes:
        rounds: rounds the calibration ran.
        first_s: wall seconds from the start to the end of round 1 (data, set-up and round 1).
        round_s: wall seconds per round after the first (rounds that measure metrics excluded when
            there are others).
        evaluation_s: extra wall seconds of a round that measures metrics (0 if not measured).
        tail_s: wall seconds after the last round (final metrics, baselines, the result document).
        virtual_round_s: virtual seconds per round.
        setup, per_round, closing: the traffic it measured: round 0 (the set-up), the mean of rounds 1..R
            (each message in the round it was sent in, `fedrecsim.network.ledger`), and the closing phase
            after round R (empty for a protocol without one).
        online: users online at the start of its rounds, on average.
        evaluation_period: metrics are measured every this many rounds (and after the last); None: the
            protocol's ``eval_every`` (1 without one).
    """

    rounds: int
    first_s: float
    round_s: float
    evaluation_s: float
    tail_s: float
    virtual_round_s: float
    setup: Traffic
    per_round: Traffic
    online: float
    evaluation_period: int | None = None
    closing: Traffic = field(default_factory=lambda: Traffic({}))

    def projected_s(self, rounds: int, evaluating: int) -> float:
        """Wall seconds of a run of ``rounds`` rounds, ``evaluating`` of rounds 2..R measuring metrics."""
        return self.first_s + (rounds - 1) * self.round_s + evaluating * self.evaluation_s + self.tail_s


class _Recorder:
    """A run's progress callback that times each round."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.ended: list[float] = []
        self.virtual: list[float] = []

    def __call__(self, completed: int, total: int) -> None:
        self.ended.append(time.perf_counter())
        self.virtual.append(trio.current_time())  # called from the protocol's task, in the run's virtual time


def _mean_traffic(entries: list[Mapping[str, Any]]) -> Traffic:
    """The mean over ``entries`` (the ledger's ``rounds_by_role`` entries) of each role's counters."""
    roles = sorted({role for entry in entries for role in entry["roles"]})
    zero = dict.fromkeys(_COUNTERS, 0)
    return Traffic({
        role: {c: _mean([entry["roles"].get(role, zero)[c] for entry in entries]) for c in _COUNTERS} for role in roles
    })


def evaluation_period(scenario: Scenario, train: Ratings, test: Ratings) -> int:
    """Every how many rounds the protocol measures its metrics (besides after the last round).

    A protocol's ``eval_every`` >= 1 is the period; ``eval_every = 0`` (fedvae) means at every epoch's
    end, an epoch being ceil(training users / ``users_per_round``) rounds, the training users those with
    training entries and no test entries; a protocol without ``eval_every`` measures every round.
    """
    every = getattr(scenario.protocol, "eval_every", 1)
    if every >= 1:
        return every
    training = int(np.count_nonzero((train.user_counts() > 0) & (test.user_counts() == 0)))
    per_round = getattr(scenario.protocol, "users_per_round", 1)
    return max(1, math.ceil(training / per_round))


def _evaluates(period: int, round_index: int, rounds: int) -> bool:
    return round_index % period == 0 or round_index == rounds


def calibrate(scenario: Scenario, rounds: int = CALIBRATION_ROUNDS, period: int | None = None) -> Calibration:
    """Run ``scenario`` for ``rounds`` rounds (at least 2) at its full size and time it (`Calibration`).

    ``period``: every how many rounds metrics are measured (`evaluation_period`; default the protocol's
    ``eval_every``, 1 without one).
    """
    from .runner import run  # the runner imports every protocol's machinery; only calibration needs it

    rounds = max(2, min(rounds, scenario.run.rounds)) if scenario.run.rounds >= 2 else 1
    if period is None:
        period = max(1, getattr(scenario.protocol, "eval_every", 1))
    table = scenario.to_table()
    table["run"]["rounds"] = rounds
    recorder = _Recorder()
    result = run(parse_scenario(table), progress=recorder)
    finished = time.perf_counter()
    ends = recorder.ended
    first = ends[0] - recorder.started
    deltas = [(index + 1, ends[index] - ends[index - 1]) for index in range(1, len(ends))]
    plain = [seconds for index, seconds in deltas if not _evaluates(period, index, rounds)]
    evaluating = [seconds for index, seconds in deltas if _evaluates(period, index, rounds)]
    round_s = _mean(plain) if plain else _mean(evaluating)
    evaluation_s = max(0.0, _mean(evaluating) - round_s) if plain and evaluating else 0.0
    per_round_rows = [row for row in result.result["ledger"]["per_round"] if _in_rounds(row)]
    # The ledger counts each message in the round it was sent in: the set-up is round 0 and the closing
    # phase after the last round, each the same however many rounds the calibration runs, and a round's
    # traffic is the mean of rounds 1..R.
    by_round = result.result["ledger"]["rounds_by_role"]
    setup = _mean_traffic([entry for entry in by_round if entry["round"] == 0])
    per_round = _mean_traffic([entry for entry in by_round if _in_rounds(entry)])
    closing = _mean_traffic([entry for entry in by_round if entry.get("phase") == CLOSING])
    if not any(_in_rounds(entry) for entry in by_round):
        # A protocol that never begins a round in the ledger: its traffic spread over its rounds.
        per_round, setup = Traffic({}).plus(setup, 1.0 / rounds), Traffic({})
    virtual = recorder.virtual
    virtual_round_s = (virtual[-1] - virtual[0]) / (len(virtual) - 1) if len(virtual) >= 2 else result.result["virtual_time_s"]
    return Calibration(
        rounds, first, round_s, evaluation_s, finished - ends[-1], virtual_round_s, setup, per_round,
        _mean([row["online"] for row in per_round_rows]) if per_round_rows else 0.0, period, closing,
    )


def _in_rounds(entry: Mapping[str, Any]) -> bool:
    """Whether an entry of the ledger's ``rounds_by_role`` or ``per_round`` is one of rounds 1..R: neither
    the set-up (round 0) nor the closing phase."""
    return entry["round"] >= 1 and entry.get("phase") != CLOSING


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# --------------------------------------------------------------------------- inspection


@dataclass(frozen=True)
class Inspection:
    """Everything ``fedrecsim inspect`` reports about a scenario (module docstring)."""

    scenario: Scenario
    data: Mapping[str, int]
    parties: Mapping[str, int]
    availability: Availability
    estimate: Estimate
    calibration: Calibration | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def projected_s(self) -> float | None:
        """Wall seconds the whole run should take, from the calibration (None without one)."""
        if self.calibration is None:
            return None
        rounds = self.scenario.run.rounds
        period = self.calibration.evaluation_period or max(1, getattr(self.scenario.protocol, "eval_every", 1))
        # Rounds 2..R that measure: the multiples of the period among them, and R itself if it is none.
        evaluating = rounds // period - (period == 1) + (rounds >= 2 and rounds % period != 0)
        return self.calibration.projected_s(rounds, evaluating)


def inspect_scenario(scenario: Scenario, *, calibration_rounds: int = CALIBRATION_ROUNDS) -> Inspection:
    """Validate ``scenario``, prepare its data and estimate its run (module docstring).

    ``calibration_rounds`` 0 skips the calibration run (no time estimate; a protocol without a traffic
    plan then has no traffic estimate either).

    Raises:
        ConfigError: the scenario is invalid, or the protocol refuses it on its data (`ProtocolSpec.check`,
            as a run would before it starts).
        DatasetError: the data cannot be read.
    """
    check_memory(scenario)  # nothing is drawn, planned or calibrated past a run that cannot fit
    train, test = prepare_data(scenario.data, scenario.run.seed)
    check_memory(scenario, (train.n_users, train.n_items, len(train), len(test)))
    spec = protocol_spec(scenario.run.protocol)
    # What a run refuses before it starts (`ProtocolSpec.check`), refused here before anything is estimated.
    notes: list[str] = list(spec.check(scenario, train)) if spec.check is not None else []
    period = evaluation_period(scenario, train, test)
    calibration = calibrate(scenario, calibration_rounds, period) if calibration_rounds > 0 else None
    round_s = calibration.virtual_round_s if calibration is not None else None
    availability = expected_availability(scenario, train.n_users, round_s)
    data = {"users": train.n_users, "items": train.n_items, "train_entries": len(train), "test_entries": len(test)}
    if spec.plan is not None:
        plan = _plan(spec.plan, _plan_context(scenario, train, test, availability))
        estimate = plan_estimate(plan, scenario.run.rounds)
        parties = {role.value: count for role, count in sorted(plan.parties.items(), key=lambda item: item[0].code)}
    else:
        notes.append(f"protocol {spec.name} declares no traffic plan (ProtocolSpec.plan): traffic as its calibration measured it")
        parties = {"user": train.n_users}
        if calibration is None:
            estimate = Estimate("none", Traffic({}), Traffic({}), scenario.run.rounds)
        else:
            estimate = Estimate(
                "calibration", calibration.setup, calibration.per_round, scenario.run.rounds, closing=calibration.closing
            )
            parties.update({role: 1 for role in calibration.per_round.roles if role != "user"})
    return Inspection(scenario, data, parties, availability, estimate, calibration, tuple(notes))


def _plan(plan: Callable[[PlanContext], TrafficPlan], context: PlanContext) -> TrafficPlan:
    """The protocol's traffic plan, its messages sized under the scenario's ``network.max_message_mb``.

    Raises:
        ConfigError: a message of the plan exceeds that limit (the run would refuse to send it).
    """
    try:
        return plan(context)
    except WireError as error:
        limit = context.scenario.network.max_message_mb
        raise ConfigError("network.max_message_mb", f"{error} (= {limit:g} MiB): the run would refuse the message") from None


def _plan_context(scenario: Scenario, train: Ratings, test: Ratings, availability: Availability) -> PlanContext:
    return PlanContext(
        scenario, train, test, availability.initial, availability.online, availability.joins, availability.leaves,
        scenario.availability.dropout,
    )


# --------------------------------------------------------------------------- text


def inspection_text(inspection: Inspection) -> str:
    """The report ``fedrecsim inspect`` prints."""
    scenario = inspection.scenario
    lines = ["# resolved scenario (defaults filled in)", *_toml_lines(scenario.to_table()), ""]
    data = inspection.data
    lines.append(
        f"data: {data['users']:,} users, {data['items']:,} items, {data['train_entries']:,} training and "
        f"{data['test_entries']:,} test entries"
    )
    lines.append("parties: " + ", ".join(f"{role} {count:,}" for role, count in inspection.parties.items()))
    availability = inspection.availability
    lines.append(
        f"online: {availability.initial:,.0f} at the start, {availability.online:,.1f} per round on average; "
        f"{availability.joins:.2f} joins and {availability.leaves:.2f} leaves per round ({availability.note})"
    )
    lines.extend(f"note: {note}" for note in inspection.notes)
    lines.append("")
    lines.extend(_estimate_lines(inspection.estimate))
    lines.append("")
    lines.extend(_calibration_lines(inspection))
    return "\n".join(lines)


def _estimate_lines(estimate: Estimate) -> list[str]:
    if estimate.source == "none":
        return ["traffic: not estimated (no traffic plan and no calibration)"]
    how = (
        "from the protocol's traffic plan: sizes from the wire codec, " + ("exact" if estimate.exact else "some expected")
        if estimate.source == "plan"
        else "as measured in the calibration run"
    )
    lines = [f"traffic per round ({how}):", _row("role", "sent msgs", "sent bytes", "recv msgs", "recv bytes")]
    for role, counters in estimate.per_round.roles.items():
        lines.append(_row(role, *_counter_cells(counters)))
    per_round = estimate.per_round
    lines.append(_row("all", f"{per_round.total('sent_msgs'):,.1f}", _bytes(per_round.total("sent_bytes")), "", ""))
    if estimate.flows:
        lines.append("  per kind (per round):")
        for flow in sorted(_per_kind(estimate.flows), key=lambda flow: -flow.bytes):
            if flow.messages > 0:
                size = "exact" if flow.exact else "expected"
                lines.append(
                    f"    {flow.kind:<28} {flow.src.value:>11} -> {flow.dst.value:<11} {flow.messages:>10,.2f} msgs "
                    f"{_bytes(flow.bytes):>12} ({_bytes(flow.bytes / flow.messages)} each, {size})"
                )
    setup, closing, total = estimate.setup, estimate.closing, estimate.run_total()
    lines.append(f"set-up (round 0): {setup.total('sent_msgs'):,.1f} msgs, {_bytes(setup.total('sent_bytes'))}")
    if closing.roles:
        lines.append(
            f"closing (after the last round): {closing.total('sent_msgs'):,.1f} msgs, {_bytes(closing.total('sent_bytes'))}"
        )
    lines.append(f"whole run ({rounds_text(estimate.rounds)}):")
    for role, counters in total.roles.items():
        lines.append(_row(role, *_counter_cells(counters)))
    lines.extend(f"  assumes: {text}" for text in estimate.assumptions)
    return lines


def _per_kind(flows: Iterable[Flow]) -> list[Flow]:
    """One flow per (kind, sender role, receiver role): a plan may count one kind in several flows (dpmf's
    ``core.join``: users joining, and crashed users announcing themselves again), which the table would
    otherwise list twice with nothing to tell them apart."""
    merged: dict[tuple[str, Role, Role], Flow] = {}
    for flow in flows:
        key = (flow.kind, flow.src, flow.dst)
        before = merged.get(key)
        merged[key] = flow if before is None else Flow(
            flow.kind, flow.src, flow.dst, before.messages + flow.messages, before.bytes + flow.bytes, before.exact and flow.exact
        )
    return list(merged.values())


def _calibration_lines(inspection: Inspection) -> list[str]:
    calibration = inspection.calibration
    if calibration is None:
        return ["time: not estimated (calibration skipped)"]
    scenario = inspection.scenario
    projected = inspection.projected_s or 0.0
    measured = calibration.per_round
    lines = [
        f"calibration: {rounds_text(calibration.rounds)} at full size (nothing scaled): first round (with data and set-up) "
        f"{calibration.first_s:.2f} s, then {calibration.round_s:.3f} s per round"
        + (f" (+{calibration.evaluation_s:.3f} s when metrics are measured)" if calibration.evaluation_s else "")
        + f", {calibration.tail_s:.2f} s after the last; {calibration.virtual_round_s:.2f} virtual s per round",
        f"  measured per round: {measured.total('sent_msgs'):,.1f} msgs, {_bytes(measured.total('sent_bytes'))}, "
        f"{calibration.online:,.1f} online",
        f"time: about {_duration(projected)} for {rounds_text(scenario.run.rounds)} (extrapolated from the calibration; "
        f"about {_duration(scenario.run.rounds * calibration.virtual_round_s)} of virtual time)",
    ]
    return lines


def _counter_cells(counters: Mapping[str, float]) -> tuple[str, str, str, str]:
    return (
        f"{counters['sent_msgs']:,.1f}",
        _bytes(counters["sent_bytes"]),
        f"{counters['recv_msgs']:,.1f}",
        _bytes(counters["recv_bytes"]),
    )


def _row(*cells: str) -> str:
    return f"  {cells[0]:<12}" + "".join(f"{cell:>16}" for cell in cells[1:])


def _bytes(value: float) -> str:
    """Bytes with a binary unit: 512 B, 1.5 KiB, 3.2 MiB, 4.0 GiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:,.1f} {unit}"
    return f"{value:,.0f} B"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def _toml_lines(table: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for name, section in table.items():
        lines.append(f"[{name}]")
        lines.extend(f"{toml_key(key)} = {toml_literal(value)}" for key, value in section.items() if value is not None)
        unset = [key for key, value in section.items() if value is None]
        if unset:
            lines.append(f"# unset: {', '.join(unset)}")
    return lines


__all__ = [
    "CALIBRATION_ROUNDS",
    "Availability",
    "Calibration",
    "Estimate",
    "Inspection",
    "Traffic",
    "calibrate",
    "evaluation_period",
    "expected_availability",
    "inspect_scenario",
    "inspection_text",
    "plan_estimate",
]
