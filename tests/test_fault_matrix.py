"""The protocol x fault matrix of docs/faults.md (issue 18), every cell run and its documented outcome
checked.

Each row is a landed protocol at a tiny size; each column a fault of the link or of one party (the
victim: a user, or silo:0 for prototypes). Outcomes, as the document names them:

- identical: the run completes with exactly the fault-free run's model;
- unchanged: a byzantine party cannot change the server's model: it is exactly the model of the run in
  which that party crashes before it first sends the corrupted kind (its corrupted messages count for
  nothing, as if never sent);
- completes: the run completes and the cell's own checks hold (who is missing, what the monitors say);
- n/a: the fault cannot apply to this protocol's messages (the run says so in a warning) and the run is
  the fault-free one;
- refused: the scenario is refused with a ConfigError naming the key;
- stops: the run stops with a PartyTimeout or ProtocolViolation naming what;
- none: no such party in this protocol.

`test_the_document_states_every_tested_outcome` keeps the document and this table in step.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.errors import ConfigError, PartyTimeout
from fedrecsim.protocols.privirec import local as privirec_local
from fedrecsim.protocols.privirec.roles import DEGREES_SESSION, ITEM_ITEM_SESSION, POWER

FAULTS_DOC = Path(__file__).resolve().parents[1] / "docs" / "faults.md"
_CONSTANT = {"model": "constant", "seconds": 0.01}

ROWS: dict[str, dict[str, Any]] = {
    "fcf": {"run": {"protocol": "fcf", "seed": 3, "rounds": 4, "round_timeout_s": 5.0},
            "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _CONSTANT}, "protocol": {"d": 3}},
    "dpmf S1": {"run": {"protocol": "dpmf", "seed": 6, "rounds": 3, "round_timeout_s": 5.0},
                "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _CONSTANT},
                "protocol": {"scenario": "S1", "d": 3, "epsilon": 1.0}},
    "dpmf S2": {"run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
                "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _CONSTANT},
                "protocol": {"scenario": "S2", "d": 3, "epsilon": 1.0}},
    "dpmf S3": {"run": {"protocol": "dpmf", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
                "data": {"users": 20, "items": 30, "ratings": 300}, "network": {"latency": _CONSTANT},
                "protocol": {"scenario": "S3", "d": 3, "epsilon": 1.0, "max_users": 10, "k_presharing": 4}},
    "ldp_implicit": {"run": {"protocol": "ldp_implicit", "seed": 5, "rounds": 3, "round_timeout_s": 5.0},
                     "data": {"feedback": "implicit", "users": 30, "items": 150, "ratings": 300, "split": "leave_one_out"},
                     "network": {"latency": _CONSTANT},
                     "protocol": {"k": 10, "proxies": 2, "min_users": 3, "proxy_wait_s": 1.0}},
    "prototypes": {"run": {"protocol": "prototypes", "seed": 3, "rounds": 2, "round_timeout_s": 5.0},
                   "data": {"feedback": "counts", "users": 60, "items": 40, "ratings": 1200, "rank": 3, "split": "users",
                            "test_fraction": 0.2, "test_entries": 5, "silos": 3},
                   "network": {"latency": _CONSTANT},
                   "protocol": {"k": 3, "rank": 2, "support": 5, "nmf_iterations": 30, "baselines": False}},
    "secagg": {"run": {"protocol": "secagg", "seed": 5, "rounds": 3, "round_timeout_s": 20.0},
               "data": {"users": 8, "items": 50, "ratings": 200}, "network": {"latency": _CONSTANT},
               "protocol": {"mode": "real", "length": 8, "bits": 32, "frac_bits": 16, "stage_timeout_s": 2.0}},
    # R above the 24 training users: every one of them is sent ω every round; Multi-Krum keeps n - f.
    "fedvae": {"run": {"protocol": "fedvae", "seed": 3, "rounds": 4, "round_timeout_s": 5.0},
               "data": {"feedback": "implicit", "users": 30, "items": 40, "ratings": 600, "split": "heldout_users",
                        "test_fraction": 0.2},
               "network": {"latency": _CONSTANT},
               "protocol": {"users_per_round": 100, "hidden": 8, "latent": 4, "krum_m": 0, "baseline": False}},
    # Each secure-aggregation sum (two in the set-up, one per power iteration) has the round timeout.
    "privirec": {"run": {"protocol": "privirec", "seed": 4, "rounds": 2, "round_timeout_s": 20.0},
                 "data": {"feedback": "implicit", "users": 20, "items": 30, "ratings": 300, "split": "per_user",
                          "test_fraction": 0.2},
                 "network": {"latency": _CONSTANT},
                 "protocol": {"k": 4, "secagg": "real", "stage_timeout_s": 2.0}},
}

# The victim of each row's party faults, the kind it sends when it answers (its stage), the round it
# crashes in (None: the first time), and the infrastructure party that can crash (None: none).
VICTIM = {row: "silo:0" if row == "prototypes" else "user:0" for row in ROWS}
STAGE = {"fcf": "fcf.item_gradients", "dpmf S1": "dpmf.ratings", "dpmf S2": "dpmf.contribution",
         "dpmf S3": "dpmf.contribution", "ldp_implicit": "ldp.reports", "prototypes": "prototypes.prototypes",
         "secagg": "secagg.shares", "fedvae": "fedvae.gradient", "privirec": "secagg.shares"}
CRASH_ROUND = {row: None if row in ("dpmf S1", "prototypes") else 2 for row in ROWS}
INFRASTRUCTURE = {"dpmf S2": ("third_party:0", "dpmf.aggregate"), "dpmf S3": ("third_party:0", "dpmf.aggregate"),
                  "ldp_implicit": ("proxy:0", "ldp.report_batch")}
# A partition from here until 9 s cuts every link of the victim (S1 and prototypes send at the start).
PARTITION_FROM = {row: 0.0 if row in ("dpmf S1", "prototypes") else 2.0 for row in ROWS}
CORRUPTIONS = ("nan", "huge", "shape", "dtype", "kind")
# PriviRec's sums are SecAgg+ sessions of 20 users and threshold 6, each user sending and receiving four
# messages per sum: from 2% loss on, a neighbourhood falls below t and the sum aborts (the run ends there).
LOSS = {"prototypes": 0.5, "privirec": 0.01}


def _crash(row: str, **more: Any) -> dict[str, Any]:
    crash: dict[str, Any] = {"party": VICTIM[row], "kind": STAGE[row], **more}
    if CRASH_ROUND[row] is not None:
        crash["round"] = CRASH_ROUND[row]
    return {"faults": {"crash": [crash]}}


def _fault(row: str, fault: str) -> dict[str, Any]:
    victim = VICTIM[row]
    if fault == "none":
        return {}
    if fault == "loss":
        return {"network": {"loss": LOSS.get(row, 0.1)}}
    if fault == "duplicate":
        return {"network": {"duplicate": 0.5}}
    if fault == "reorder":
        return {"network": {"reorder": 0.5, "reorder_delay_s": 0.5}}
    if fault == "partition":
        links = [f"{victim}-{other}" for other in ("server", "third_party", "proxy")]
        return {"network": {"partitions": [{"from_s": PARTITION_FROM[row], "until_s": 9.0, "links": links}]}}
    if fault == "crash":
        return _crash(row)
    if fault == "crash first":
        return {"faults": {"crash": [{"party": victim, "kind": STAGE[row]}]}}
    if fault == "crash infrastructure":
        party, kind = INFRASTRUCTURE[row]
        return {"faults": {"crash": [{"party": party, "kind": kind, "round": 2}]}}
    if fault == "restart kept":
        return _crash(row, restart_after_s=0.5)
    if fault == "restart lost":
        return _crash(row, restart_after_s=0.5, keep_state=False)
    if fault == "slow":
        return {"faults": {"slow": [{"party": victim, "delay_s": 30.0}]}}
    if fault == "slow within the timeout":
        return {"faults": {"slow": [{"party": victim, "delay_s": 0.5}]}}
    if fault.startswith("byzantine "):
        return {"faults": {"byzantine": [{"party": victim, "corrupt": fault.split()[1], "kind": STAGE[row]}]}}
    raise AssertionError(fault)


def _tables(row: str, fault: str) -> dict[str, Any]:
    tables = copy.deepcopy(ROWS[row])
    for name, values in _fault(row, fault).items():
        tables.setdefault(name, {}).update(values)
    return tables


_RUNS: dict[tuple[str, str], fedrecsim.RunResult] = {}


def _run(row: str, fault: str) -> fedrecsim.RunResult:
    """The run of one cell (each run once per session: the byzantine cells compare with the crash runs)."""
    key = (row, fault)
    if key not in _RUNS:
        _RUNS[key] = fedrecsim.run(_tables(row, fault))
    return _RUNS[key]


def _model(result: fedrecsim.RunResult) -> np.ndarray:
    state = result.outcome.state
    for name in ("sum", "omega"):
        if name in state:
            return state[name]
    if "server" in state:
        return state["server"].basis  # privirec: X_L, the basis the filters come from
    return state["item_factors"]


def _violations(result: fedrecsim.RunResult) -> dict[str, int]:
    return {monitor["name"]: monitor["violations"] for monitor in result.result["invariants"]}


def _faults(result: fedrecsim.RunResult) -> dict[str, Any]:
    return result.result["ledger"]["faults"]


def _column(result: fedrecsim.RunResult, name: str) -> list[float]:
    return [row[name] for row in result.rounds]


def _completes(result: fedrecsim.RunResult, row: str) -> None:
    assert result.result["rounds_completed"] == ROWS[row]["run"]["rounds"]
    assert np.all(np.isfinite(np.asarray(_model(result), dtype=float)))


def _monitors_hold(result: fedrecsim.RunResult) -> None:
    assert not any(_violations(result).values()), _violations(result)


def _shortfall_reported(result: fedrecsim.RunResult) -> None:
    """dpmf S2 is not robust to a missing contribution: the missing users' eta pieces are missing from the
    items they rated, and the eta_pieces monitor says so."""
    assert _violations(result)["eta_pieces"] > 0


def _sums_exact(result: fedrecsim.RunResult) -> None:
    """secagg: every session that did not abort summed its survivors' inputs exactly."""
    rows = result.rounds
    assert all(row["wrong_words"] == 0 for row in rows if not row["aborted"])
    assert sum(row["aborted"] for row in rows) == len(result.result["warnings"])


# ------------------------------------------------------------------ the cells and their outcomes

COLUMNS = (
    "loss", "duplicate", "reorder", "partition", "crash", "crash infrastructure", "restart kept", "restart lost",
    "slow", "slow within the timeout", *(f"byzantine {corruption}" for corruption in CORRUPTIONS),
)
_IDENTICAL_REORDER = {"fcf", "dpmf S1", "dpmf S2", "prototypes", "secagg", "fedvae", "privirec"}  # no outcome follows arrival order
_RING_ONLY = {"dpmf S2", "dpmf S3", "ldp_implicit", "secagg", "privirec"}  # the stage's message holds no float


def outcome(row: str, column: str) -> str:
    """The documented outcome of a cell (docs/faults.md)."""
    if column == "duplicate":
        return "identical"
    if column in ("reorder", "slow within the timeout"):
        return "identical" if row in _IDENTICAL_REORDER else "completes"
    if column == "crash infrastructure":
        return "completes" if row in INFRASTRUCTURE else "none"
    if column.startswith("restart") and row == "prototypes":
        return "refused"
    if column.startswith("byzantine"):
        corruption = column.split()[1]
        if corruption in ("nan", "huge") and row in _RING_ONLY:
            return "n/a"
        return "unchanged" if row in ("fcf", "dpmf S1", "ldp_implicit", "prototypes", "fedvae") else "completes"
    return "completes"


CELLS = [(row, column) for row in ROWS for column in COLUMNS]


@pytest.mark.parametrize(("row", "column"), CELLS, ids=[f"{row}-{column}" for row, column in CELLS])
def test_a_cell_has_its_documented_outcome(row: str, column: str) -> None:
    expected = outcome(row, column)
    if expected == "none":
        assert row not in INFRASTRUCTURE
        return
    if expected == "refused":
        with pytest.raises(ConfigError) as caught:
            fedrecsim.run(_tables(row, column))
        assert str(caught.value) == f"faults.crash[0].restart_after_s: only users restart (the population restarts them); {VICTIM[row]} never does"
        return
    result = _run(row, column)
    baseline = _run(row, "none")
    if expected == "identical":
        np.testing.assert_array_equal(_model(result), _model(baseline))
        assert result.result["rounds_completed"] == baseline.result["rounds_completed"]
        assert result.result["warnings"] == baseline.result["warnings"]
    elif expected == "unchanged":
        np.testing.assert_array_equal(_model(result), _model(_run(row, "crash first")))
        assert sum(_faults(result)["rejected"].values()) > 0
    elif expected == "n/a":
        assert result.transcript_xxh3_128 == baseline.transcript_xxh3_128
        assert result.result["warnings"] == [f"[faults] never applied: {VICTIM[row]} sends {STAGE[row]} corrupted ({column.split()[1]})"]
    else:
        _completes(result, row)
        CHECKS[(row, column)](result)
    _CELL_CHECKS[column](result)


def _duplicated(result: fedrecsim.RunResult) -> None:
    assert _faults(result)["duplicated"] > 0


def _partitioned(result: fedrecsim.RunResult) -> None:
    assert _faults(result)["dropped"]["partitioned"] > 0


def _lost(result: fedrecsim.RunResult) -> None:
    assert _faults(result)["dropped"]["lost"] > 0


def _nothing(result: fedrecsim.RunResult) -> None:
    """No ledger check beyond the cell's own."""


# What every run of a column shows in its ledger, whatever the protocol.
_CELL_CHECKS = {column: _nothing for column in COLUMNS}
_CELL_CHECKS.update({"loss": _lost, "duplicate": _duplicated, "partition": _partitioned})


def _participants(expected: list[int]) -> Any:
    return lambda result: _column(result, "participants") == expected or pytest.fail(
        f"participants {_column(result, 'participants')}, expected {expected}"
    )


def _all(*checks: Any) -> Any:
    def check(result: fedrecsim.RunResult) -> None:
        for one in checks:
            one(result)

    return check


def _missing_somewhere(name: str) -> Any:
    def check(result: fedrecsim.RunResult) -> None:
        assert any(value > 0 for value in _column(result, name)), _column(result, name)

    return check


def _warned(*fragments: str) -> Any:
    def check(result: fedrecsim.RunResult) -> None:
        text = " | ".join(result.result["warnings"])
        assert all(fragment in text for fragment in fragments), text

    return check


def _never_contributes(result: fedrecsim.RunResult) -> None:
    """dpmf: the victim's contribution is in no iteration's aggregate."""
    assert all(0 not in contributors.tolist() for contributors in result.outcome.state["contributors"])


def _no_updates_from_round_2(result: fedrecsim.RunResult) -> None:
    updated = _column(result, "items_updated")
    assert updated[0] > 0 and updated[1:] == [0, 0]


def _missing_rounds(expected: list[int]) -> Any:
    """The victim alone is missing in these rounds (1) and answers in the others (0)."""

    def check(result: fedrecsim.RunResult) -> None:
        assert _column(result, "missing") == expected, _column(result, "missing")
        assert _column(result, "gradients") == [_column(result, "participants")[0] - gone for gone in expected]

    return check


def _fresh_draws_after_restart(result: fedrecsim.RunResult) -> None:
    """fedvae: a user's only state is its generator; restarted from scratch it draws other dropout and eps
    than the user that kept it, so the model differs from the kept run's."""
    kept = _run("fedvae", "restart kept")
    assert not np.array_equal(_model(result), _model(kept))


def _privirec_sums_exact(result: fedrecsim.RunResult) -> None:
    """privirec: every sum is exactly the sum of its survivors' inputs, computed here from their items and
    what the server broadcast (the degrees, then X_(l-1) for power iteration l)."""
    state = result.outcome.state
    server, users, ring = state["server"], state["users"], state["params"].ring
    assert [seen.session for seen in server.sums] == [DEGREES_SESSION, ITEM_ITEM_SESSION, POWER + 1, POWER + 2]
    for seen in server.sums:
        if seen.session == DEGREES_SESSION:
            inputs = [privirec_local.degree_input(users[party].items, 30) for party in seen.result.survivors]
        elif seen.session == ITEM_ITEM_SESSION:
            inputs = [privirec_local.item_item_input(users[party].items, 30) for party in seen.result.survivors]
        else:
            basis = server.bases[seen.session - POWER - 1]
            inputs = [privirec_local.power_input(users[party].items, server.degrees, basis).ravel() for party in seen.result.survivors]
        np.testing.assert_allclose(ring.decode(seen.result.total), sum(inputs), atol=1e-6, err_msg=f"session {seen.session}")


def _column_is(name: str, expected: list[float]) -> Any:
    return lambda result: _column(result, name) == expected or pytest.fail(f"{name} {_column(result, name)}, expected {expected}")


def _lost_state_restarts_fresh(result: fedrecsim.RunResult) -> None:
    """fcf: the user restarted from its initial profile, so it ends elsewhere than the one that kept it."""
    kept = _run("fcf", "restart kept").outcome.state["user_factors"][0]
    assert not np.array_equal(result.outcome.state["user_factors"][0], kept)


CHECKS: dict[tuple[str, str], Any] = {
    # loss
    ("fcf", "loss"): _missing_somewhere("missing"),
    ("dpmf S1", "loss"): lambda result: _column(result, "participants")[-1] < 20 or pytest.fail("no upload lost"),
    ("dpmf S2", "loss"): _shortfall_reported,
    ("dpmf S3", "loss"): _all(_monitors_hold, _missing_somewhere("missing")),
    ("ldp_implicit", "loss"): _all(_monitors_hold, _missing_somewhere("reports_missing")),
    ("prototypes", "loss"): _warned("received no item matrix"),
    ("secagg", "loss"): _all(_sums_exact, _missing_somewhere("aborted")),
    # reorder / slow within the timeout, where arrival order decides who is served or pooled
    ("dpmf S3", "reorder"): _monitors_hold,
    ("ldp_implicit", "reorder"): _monitors_hold,
    ("dpmf S3", "slow within the timeout"): _monitors_hold,
    ("ldp_implicit", "slow within the timeout"): _monitors_hold,
    # partition
    ("fcf", "partition"): _participants([20, 19, 19, 20]),
    ("dpmf S1", "partition"): _participants([19, 19, 19]),
    ("dpmf S2", "partition"): _shortfall_reported,
    ("dpmf S3", "partition"): _all(_monitors_hold, _missing_somewhere("missing")),
    ("ldp_implicit", "partition"): _monitors_hold,
    ("prototypes", "partition"): _warned("1 silo sent no prototypes in time: silo:0"),
    ("secagg", "partition"): _all(_sums_exact, _participants([8, 7, 7])),
    # crash at the stage
    ("fcf", "crash"): _all(_participants([20, 19, 19, 19]), lambda result: _column(result, "missing")[1] == 1 or pytest.fail()),
    ("dpmf S1", "crash"): _participants([19, 19, 19]),
    ("dpmf S2", "crash"): _shortfall_reported,
    ("dpmf S3", "crash"): _all(_monitors_hold, lambda result: _column(result, "missing")[1] == 1 or pytest.fail()),
    ("ldp_implicit", "crash"): _monitors_hold,
    ("prototypes", "crash"): _warned("sent no prototypes in time: silo:0", "received no item matrix"),
    ("secagg", "crash"): _all(_sums_exact, _participants([8, 7, 7])),
    # crash of the third party / a proxy
    ("dpmf S2", "crash infrastructure"): _no_updates_from_round_2,
    ("dpmf S3", "crash infrastructure"): _no_updates_from_round_2,
    ("ldp_implicit", "crash infrastructure"): _all(_monitors_hold, _missing_somewhere("reports_missing")),
    # crash and restart with the state kept
    ("fcf", "restart kept"): _participants([20, 19, 20, 20]),
    ("dpmf S1", "restart kept"): _participants([20, 20, 20]),
    ("dpmf S2", "restart kept"): _shortfall_reported,
    ("dpmf S3", "restart kept"): _monitors_hold,
    ("ldp_implicit", "restart kept"): _monitors_hold,
    ("secagg", "restart kept"): _all(_sums_exact, _participants([8, 7, 8])),
    # crash and restart with the state lost
    ("fcf", "restart lost"): _all(_participants([20, 19, 20, 20]), _lost_state_restarts_fresh),
    ("dpmf S1", "restart lost"): _participants([20, 20, 20]),
    ("dpmf S2", "restart lost"): _all(_shortfall_reported, _participants([20, 19, 19])),
    ("dpmf S3", "restart lost"): _monitors_hold,
    ("ldp_implicit", "restart lost"): _monitors_hold,
    ("secagg", "restart lost"): _all(_sums_exact, _participants([8, 7, 8])),
    # slow beyond the round's timeout
    ("fcf", "slow"): _participants([19, 19, 19, 19]),
    ("dpmf S1", "slow"): _participants([19, 19, 19]),
    ("dpmf S2", "slow"): _all(_monitors_hold, _never_contributes),
    ("dpmf S3", "slow"): _monitors_hold,
    ("ldp_implicit", "slow"): _monitors_hold,
    ("prototypes", "slow"): _warned("1 silo sent no prototypes in time: silo:0"),
    ("secagg", "slow"): _all(_sums_exact, _participants([7, 7, 7])),
    # fedvae: the server sends ω to every training user it knows to be online (24) each round; who did not
    # answer is `missing`
    ("fedvae", "loss"): _all(_monitors_hold, _missing_somewhere("missing")),
    ("fedvae", "partition"): _all(_monitors_hold, _missing_rounds([0, 1, 1, 0])),
    ("fedvae", "crash"): _all(_monitors_hold, _missing_rounds([0, 1, 1, 1])),
    ("fedvae", "restart kept"): _all(_monitors_hold, _missing_rounds([0, 1, 0, 0])),
    ("fedvae", "restart lost"): _all(_monitors_hold, _missing_rounds([0, 1, 0, 0]), _fresh_draws_after_restart),
    ("fedvae", "slow"): _all(_monitors_hold, _participants([23, 23, 23, 23]), _missing_rounds([0, 0, 0, 0])),
    # privirec: a user missing from a power iteration's sum but counted in P~ is exposed (PriviRec's leak)
    ("privirec", "loss"): _all(_privirec_sums_exact, _missing_somewhere("dropped"), _missing_somewhere("exposed_users")),
    ("privirec", "partition"): _all(_privirec_sums_exact, _column_is("dropped", [0, 1]), _column_is("exposed_users", [0, 1])),
    ("privirec", "crash"): _all(_privirec_sums_exact, _column_is("dropped", [0, 1]), _column_is("exposed_users", [0, 1]),
                                _warned("1 users did not receive the filters")),
    ("privirec", "restart kept"): _all(_privirec_sums_exact, _column_is("dropped", [0, 1]),
                                       lambda result: result.result["warnings"] == [] or pytest.fail(str(result.result["warnings"]))),
    ("privirec", "restart lost"): _all(_privirec_sums_exact, _column_is("dropped", [0, 1]), _warned("1 users did not receive the filters")),
    ("privirec", "slow"): _all(_privirec_sums_exact, _participants([19, 19]), _column_is("dropped", [0, 0]),
                               _warned("1 users did not receive the filters")),
}
for _corruption in ("shape", "dtype", "kind"):
    CHECKS[("dpmf S2", f"byzantine {_corruption}")] = _all(_shortfall_reported, _never_contributes)
    CHECKS[("dpmf S3", f"byzantine {_corruption}")] = _all(_monitors_hold, _never_contributes)
    CHECKS[("secagg", f"byzantine {_corruption}")] = _all(_sums_exact, _participants([7, 7, 7]))
    # In no sum, not even P': nothing of the victim is in P~, so nothing is exposed.
    CHECKS[("privirec", f"byzantine {_corruption}")] = _all(
        _privirec_sums_exact, _column_is("dropped", [1, 1]), _column_is("exposed_users", [0, 0])
    )


def test_every_completing_cell_has_its_own_checks() -> None:
    completing = {cell for cell in CELLS if outcome(*cell) == "completes"}
    assert completing == set(CHECKS)


# ------------------------------------------------------------------ no cell may hang


@pytest.mark.parametrize("row", list(ROWS))
def test_a_run_over_its_virtual_time_budget_stops_with_party_timeout(row: str) -> None:
    budget = _run(row, "none").result["virtual_time_s"] / 2
    tables = _tables(row, "none")
    tables["run"]["max_virtual_s"] = budget
    with pytest.raises(PartyTimeout, match=rf"^the run did not finish within its virtual-time budget of {budget:g} s \(run\.max_virtual_s\): stopped in round \d+ of {tables['run']['rounds']}$"):
        fedrecsim.run(tables)


# ------------------------------------------------------------------ the document


def _documented() -> dict[tuple[str, str], str]:
    """The outcome word of every cell of the matrix in docs/faults.md."""
    lines = FAULTS_DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("<!-- matrix -->")
    header = [cell.strip() for cell in lines[start + 1].strip("|").split("|")]
    cells = {}
    for line in lines[start + 3:]:
        if not line.startswith("|"):
            break
        values = [cell.strip() for cell in line.strip("|").split("|")]
        for column, value in zip(header[1:], values[1:], strict=True):
            word = re.match(r"\*\*([a-z/]+)\*\*", value)
            cells[(values[0], column)] = word.group(1) if word else value
    return cells


def test_the_document_states_every_tested_outcome() -> None:
    documented = _documented()
    assert {key for key in documented} == set(CELLS)
    wrong = {cell: (documented[cell], outcome(*cell)) for cell in CELLS if documented[cell] != outcome(*cell)}
    assert not wrong, wrong
