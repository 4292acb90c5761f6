"""The end-of-run summary a person reads: every number labelled, nothing hidden that result.json holds.

Sections, in order: the run line and transcript hash; a line for each part of the run the protocol timed
(result.json's ``timing``) that took at least half the run's wall time; warnings (what the scenario configured but the run
did not simulate); final metrics, each beside its non-private baseline where the protocol computes one;
who took part; traffic per role (bytes and messages sent and received, messages dropped) over the whole
run, then the set-up (round 0) and the closing phase after the last round (a run that has one) apart from
the mean round; traffic per user, set-up and closing apart from the rounds (a message counts in the round
it was sent in: `fedrecsim.network.ledger`); the paper's own figures beside this run's, where the protocol states them; the privacy accounting; every invariant monitor with its checks and violations.

Counts are printed with thousands separators and never in exponent notation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .network.ledger import CLOSING
from .runner import RunResult


def number(value: Any) -> str:
    """A number for people: integers (and integral floats) as ``1,234,567``, others to six digits; an
    absent value as ``null`` and a flag as ``true`` / ``false``, the words result.json and the texts beside
    it (e.g. a bound's) use."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or (value == value and abs(value) < 1e15 and float(value).is_integer()):
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.1f}"
    if value != 0 and abs(value) < 1e-4:
        return f"{value:.3e}"
    return f"{value:.6g}"


def summary_text(run_result: RunResult) -> str:
    """The summary of one run as printed by ``fedrecsim run``."""
    result = run_result.result
    transport = result.get("transport")
    clock = (
        f"s on the real clock over TCP ({len(transport['processes'])} processes)" if transport is not None else "s virtual time"
    )
    lines = [
        f"run {result['scenario']['run']['name']!r}: protocol {result['protocol']}, seed {result['seed']}, "
        f"{rounds_text(result['rounds_completed'])}, {result['virtual_time_s']:,.1f} {clock} in "
        f"{result['wall_time_s']:,.2f} s wall time",
        f"transcript xxh3_128 {result['transcript_xxh3_128']}" + _structure(result),
    ]
    lines += _dominant_timing(result)
    for warning in result.get("warnings", []):
        lines.append(f"WARNING: {warning}")
    lines += _metrics(result)
    lines += _participation(result)
    lines += _traffic_per_role(result)
    lines += _traffic_per_round(result)
    lines += _traffic_per_user(result)
    lines += _paper_figures(result.get("paper_figures", []))
    lines += _privacy(result["privacy"])
    lines += _invariants(result["invariants"])
    if run_result.path is not None:
        lines += ["", f"results in {run_result.path}"]
    return "\n".join(lines)


def _structure(result: dict[str, Any]) -> str:
    """The structure fingerprint beside the content hash, with the BLAS kernels the content hash holds for
    (README, "Determinism"); nothing for a result written before either existed."""
    structure = result.get("structure_xxh3_128")
    if structure is None:
        return ""
    kernels = sorted({str(library["kernel"]) for library in result.get("platform", {}).get("blas", [])})
    on = f" (bit for bit with BLAS kernel {', '.join(kernels)})" if kernels else ""
    return f"{on}; structure {structure} (on any machine)"


def _dominant_timing(result: Mapping[str, Any]) -> list[str]:
    """A line for each entry of ``timing`` that is at least half of ``wall_time_s``: where the run's time went
    when one part of it dominates (e.g. fedvae's Krum filter, O(R^2 P) per round)."""
    wall = result["wall_time_s"]
    return [
        f"most of the wall time went to {name}: {seconds:,.2f} s of {wall:,.2f} s ({seconds / wall:.0%})"
        for name, seconds in result.get("timing", {}).items()
        if wall > 0 and seconds >= wall / 2
    ]


def _metrics(result: Mapping[str, Any]) -> list[str]:
    """The final metrics, one row each; beside a metric, in columns, the same of its predictions clipped to
    the rating scale (``NAME_clipped``), its trivial predictor's and its non-private baseline's, each where
    the run has one (a metric shown in a column gets no row of its own); then what the model does worse
    than its trivial predictor, and the protocol's reason."""
    metrics = result["metrics"]
    final = metrics["final"]
    baselines = {name: other for name, other in metrics.get("baselines", {}).items() if other in final}
    trivial = {name: other for name, other in metrics.get("trivial", {}).items() if other in final}
    clipped = {name: f"{name}_clipped" for name in final if f"{name}_clipped" in final}
    columns = [
        (title, pairs)
        for title, pairs in (("clipped", clipped), ("trivial predictor", trivial), ("non-private baseline", baselines))
        if pairs
    ]
    beside = {other for _, pairs in columns for other in pairs.values()}
    header = "".join(f"  {title:>{_width(title)}}" for title, _ in columns)
    lines = ["", f"final metrics{'':<18}{'value':>14}{header}" if columns else "final metrics"]
    for name, value in final.items():
        if name in beside or name == "participants":
            continue
        cells = "".join(
            f"  {number(final[pairs[name]]) if name in pairs else '':>{_width(title)}}" for title, pairs in columns
        )
        lines.append(f"  {name:<29}{number(value):>14}{cells}".rstrip())
    if trivial:
        lines.append("  trivial predictor: the training ratings' mean for an error, a random ranking for a ranking metric")
    lines += _references(result["protocol"], final, baselines, beside)
    return lines + _worse_than_trivial(metrics.get("worse_than_trivial", []))


def _references(protocol: str, final: Mapping[str, Any], baselines: Mapping[str, str], beside: set[str]) -> list[str]:
    """What each reference computed beside a metric is, once per kind, by the protocol's declared meaning:
    the non-private baseline's (``NAME_gfcf``) and any other ``NAME_SUFFIX`` in the final metrics of a
    metric ``NAME`` that has a baseline (privirec's centralized twin, ``NAME_twin``) and is not shown in a
    column of its own (a trivial predictor's). Nothing for a protocol that declares none of them."""
    from .errors import ConfigError
    from .metric_declarations import declared
    from .protocols import protocol_spec

    try:
        metrics = protocol_spec(protocol).metrics
    except ConfigError:  # a result of a protocol this installation does not have
        return []
    def kind(name: str, other: str) -> str:
        """``*_SUFFIX`` for ``NAME_SUFFIX``, else the metric's own name."""
        return f"*{other[len(name):]}" if other.startswith(f"{name}_") else other

    kinds: dict[str, str] = {}
    for name, baseline in baselines.items():
        kinds.setdefault(kind(name, baseline), baseline)
        for other in final:
            if other.startswith(f"{name}_") and other not in beside:
                kinds.setdefault(kind(name, other), other)
    lines = []
    for label, example in kinds.items():
        info = declared(metrics, example)
        if info is not None:
            column = " (the non-private baseline column)" if example in baselines.values() else ""
            lines.append(f"  {label}{column}: {info.meaning}")
    return lines


def _width(title: str) -> int:
    return max(len(title), 14)


def _worse_than_trivial(worse: list[Mapping[str, Any]]) -> list[str]:
    if not worse:
        return []
    lines = [f"WORSE THAN THE TRIVIAL PREDICTOR on {', '.join(entry['metric'] for entry in worse)}"]
    for reason in dict.fromkeys(entry["reason"] for entry in worse if entry["reason"]):
        lines.append(f"  why: {reason}")
    return lines


def _participation(result: Mapping[str, Any]) -> list[str]:
    users = result["data"]["users"]
    roles = result["ledger"]["roles"]
    active = roles.get("user", {}).get("parties", 0)
    final = result["metrics"]["final"]
    if "silo" in roles and not active:
        silos = roles["silo"]["parties"]
        sizes = (
            f" (users per silo: min {number(final['users_per_silo_min'])}, mean {number(final['users_per_silo_mean'])}, "
            f"max {number(final['users_per_silo_max'])})" if "users_per_silo_mean" in final else ""
        )
        return [
            "",
            f"parties: {silos:,} silos and the server; the silos hold the {users:,} users of the data{sizes}: "
            "users are no parties of this cross-silo protocol",
        ]
    lines = ["", f"parties: {users:,} users in the data, {active:,} of them ever online (sent or received)"]
    if "participants" in final:
        lines.append(f"participants: {number(final['participants'])} users answered in the last round")
    return lines


def _traffic_per_role(result: Mapping[str, Any]) -> list[str]:
    header = (
        f"  {'role':<12} {'parties':>8} {'bytes sent':>15} {'bytes received':>15} "
        f"{'msgs sent':>11} {'msgs received':>13} {'msgs dropped':>12}"
    )
    lines = ["", "traffic per role (whole run)", header]
    for role, counters in result["ledger"]["roles"].items():
        lines.append(
            f"  {role:<12} {counters['parties']:>8,} {counters['sent_bytes']:>15,} {counters['recv_bytes']:>15,} "
            f"{counters['sent_msgs']:>11,} {counters['recv_msgs']:>13,} {counters['dropped_msgs']:>12,}"
        )
    for party, counts in result["ledger"].get("withheld", {}).items():
        lines.append(f"  {party} withheld: " + ", ".join(f"{count:,} {what}" for what, count in counts.items()))
    return lines


def _traffic_per_round(result: Mapping[str, Any]) -> list[str]:
    """Each role's set-up (round 0), its mean per round over rounds 1..R and, for a run with one, its
    closing phase (after round R: `fedrecsim.network.ledger`), apart (the ledger's ``rounds_by_role``);
    nothing when the ledger could not tell the rounds apart (a TCP run)."""
    by_round = result["ledger"].get("rounds_by_role") or []
    rounds = [entry for entry in by_round if entry["round"] >= 1 and entry.get("phase") != CLOSING]
    if not rounds:
        return []
    setup = next((entry["roles"] for entry in by_round if entry["round"] == 0), {})
    closing = next((entry for entry in by_round if entry.get("phase") == CLOSING), None)
    count = max(len(rounds), 1)
    header = f"  {'role':<12} {'set-up sent':>12} {'set-up recv':>12} {'sent/round':>14} {'recv/round':>14} {'msgs sent/round':>16}"
    title = "set-up (round 0)" if closing is None else f"set-up (round 0) and closing (after round {closing['round'] - 1:,})"
    if closing is not None:
        header += f" {'closing sent':>13} {'closing recv':>13}"
    lines = ["", f"traffic per role: {title} apart from the rounds (bytes; mean over {rounds_text(len(rounds))})", header]
    zero = {"sent_bytes": 0, "recv_bytes": 0, "sent_msgs": 0}
    for role in result["ledger"]["roles"]:
        before = setup.get(role, zero)
        sent = sum(entry["roles"].get(role, zero)["sent_bytes"] for entry in rounds) / count
        received = sum(entry["roles"].get(role, zero)["recv_bytes"] for entry in rounds) / count
        messages = sum(entry["roles"].get(role, zero)["sent_msgs"] for entry in rounds) / count
        line = f"  {role:<12} {before['sent_bytes']:>12,} {before['recv_bytes']:>12,} {sent:>14,.1f} {received:>14,.1f} {messages:>16,.1f}"
        if closing is not None:
            after = closing["roles"].get(role, zero)
            line += f" {after['sent_bytes']:>13,} {after['recv_bytes']:>13,}"
        lines.append(line)
    return lines


def _traffic_per_user(result: Mapping[str, Any]) -> list[str]:
    """Per user: the set-up's bytes, each round's (rounds 1..R only) and, for a run with one, the closing
    phase's, mean over the users that took part and the heaviest user. Over TCP, where the rounds are not
    told apart, the whole run's bytes divided by the rounds, labelled so."""
    rounds = max(result["rounds_completed"], 1)
    ledger = result["ledger"]
    users = {party: counters for party, counters in ledger["parties"].items() if party.startswith("user:")}
    if not users:
        return []
    if not any(entry["round"] >= 1 for entry in ledger.get("rounds_by_role", [])):
        # A TCP run's ledger, or a protocol that never began a round in the ledger: no set-up to tell apart.
        up = [counters["sent_bytes"] / rounds for counters in users.values()]
        down = [counters["recv_bytes"] / rounds for counters in users.values()]
        return [
            "",
            f"per user per round (bytes; whole run, set-up included, / {rounds_text(rounds)}: the ledger does not tell "
            f"the rounds apart)  {'mean over users':>16} {'heaviest user':>14}",
            f"  upload {'':<35}{_mean(up):>16,.1f} {max(up):>14,.1f}",
            f"  download {'':<33}{_mean(down):>16,.1f} {max(down):>14,.1f}",
        ]
    setup, closing = ledger.get("setup_parties", {}), ledger.get("closing_parties", {})
    zero = {"sent_bytes": 0, "recv_bytes": 0}
    setup_up = [setup.get(party, zero)["sent_bytes"] for party in users]
    setup_down = [setup.get(party, zero)["recv_bytes"] for party in users]
    closing_up = [closing.get(party, zero)["sent_bytes"] for party in users]
    closing_down = [closing.get(party, zero)["recv_bytes"] for party in users]
    up = [
        (counters["sent_bytes"] - before - after) / rounds
        for counters, before, after in zip(users.values(), setup_up, closing_up)
    ]
    down = [
        (counters["recv_bytes"] - before - after) / rounds
        for counters, before, after in zip(users.values(), setup_down, closing_down)
    ]
    has_closing = any(entry.get("phase") == CLOSING for entry in ledger["rounds_by_role"])
    apart = "set-up and closing" if has_closing else "set-up"
    lines = [
        "",
        f"per user (bytes; {len(users):,} users, {apart} apart from the {rounds_text(rounds)})  {'mean over users':>16} {'heaviest user':>14}",
        f"  set-up (round 0) upload {'':<18}{_mean(setup_up):>16,.1f} {max(setup_up):>14,.1f}",
        f"  set-up (round 0) download {'':<16}{_mean(setup_down):>16,.1f} {max(setup_down):>14,.1f}",
        f"  upload per round {'':<25}{_mean(up):>16,.1f} {max(up):>14,.1f}",
        f"  download per round {'':<23}{_mean(down):>16,.1f} {max(down):>14,.1f}",
    ]
    if has_closing:
        lines += [
            f"  closing upload {'':<27}{_mean(closing_up):>16,.1f} {max(closing_up):>14,.1f}",
            f"  closing download {'':<25}{_mean(closing_down):>16,.1f} {max(closing_down):>14,.1f}",
        ]
    return lines


def rounds_text(count: int) -> str:
    """``1 round``, ``1,000 rounds``: a count of rounds as the summary and `fedrecsim.inspect` print it."""
    return f"{count:,} round{'' if count == 1 else 's'}"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _paper_figures(figures: list[Mapping[str, Any]]) -> list[str]:
    """Each paper figure beside this run's on the paper's own population (`PaperFigure`): its mean and
    largest value there, and the run's heaviest party of any kind only beside it, labelled."""
    if not figures:
        return []
    lines = ["", "the paper's figures beside this run"]
    for figure in figures:
        lines += [f"  {figure['quantity']}", f"    paper: {figure['paper']}"]
        population = figure.get("population", "")
        if figure["measured"] is None:
            lines.append(f"    this run: nothing meets the paper's condition ({population})")
        elif population:
            largest = (
                f", largest {_figure_value(figure['measured_max'], figure['unit'])}" if figure.get("measured_max") is not None else ""
            )
            lines += [
                f"    this run on the paper's population: {population} "
                f"({figure['population_size']:,} meet it, {figure['population_samples']:,} samples)",
                f"      mean {_figure_value(figure['measured'], figure['unit'])}{largest}",
            ]
        else:
            lines.append(f"    this run: {_figure_value(figure['measured'], figure['unit'])}")
        if figure.get("heaviest") is not None:
            lines.append(
                f"    beside it, not the paper's condition -- {figure['heaviest_label']}: "
                f"{_figure_value(figure['heaviest'], figure['unit'])}"
            )
        if figure["setting"]:
            lines.append(f"    setting: {figure['setting']}")
    return lines


def _figure_value(value: float, unit: str) -> str:
    return f"{value:,.0f} B ({value / 1024:,.1f} KiB)" if unit == "B" else f"{number(value)} {unit}"


def _privacy(privacy: Mapping[str, Any]) -> list[str]:
    if not privacy:
        return ["", "privacy: none (this protocol makes no privacy claim)"]
    return ["", "privacy accounting", *_table_lines(privacy, indent=2)]


def _table_lines(table: Mapping[str, Any], indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:")
            lines += _table_lines(value, indent + 2)
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            lines += [f"{pad}  - {_inline(item)}" for item in value]
        else:
            lines.append(f"{pad}{key}: {number(value)}")
    return lines


def _inline(item: Any) -> str:
    if isinstance(item, Mapping):
        return ", ".join(f"{key} {number(value)}" for key, value in item.items())
    return number(item)


def _invariants(invariants: list[Mapping[str, Any]]) -> list[str]:
    if not invariants:
        return ["", "invariant monitors: none registered by this protocol"]
    lines = ["", f"invariant monitors {'':<14}{'checks':>15} {'violations':>11}"]
    for invariant in invariants:
        flag = "  VIOLATED" if invariant["violations"] else ""
        lines.append(f"  {invariant['name']:<30} {invariant['checked']:>15,} {invariant['violations']:>11,}{flag}")
        if invariant["violations"]:
            lines.append(f"    {invariant['detail']}")
    return lines


__all__ = ["number", "rounds_text", "summary_text"]
