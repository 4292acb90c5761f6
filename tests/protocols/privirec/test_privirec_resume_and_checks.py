"""PriviRec's checks of its configuration (exact messages and boundaries), its server's generator, its
rows and progress, its score-gap monitor, and a run resumed from a checkpoint (issue 18) -- each written
against a surviving mutant of `tools/mutation.py run --module protocols.privirec`."""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import numpy as np
import pytest

import fedrecsim
from fedrecsim.checkpoint import Checkpoints
from fedrecsim.errors import ConfigError, Interrupted
from fedrecsim.protocols.privirec import protocol
from fedrecsim.protocols.privirec.protocol import SCORE_TOLERANCE, PriviRecConfig
from fedrecsim.seeding import Stream, generator
from fedrecsim.testing import InterruptAfter

_TINY: dict[str, Any] = {
    "run": {"protocol": "privirec", "seed": 4, "rounds": 3, "round_timeout_s": 20.0},
    "data": {"feedback": "implicit", "users": 16, "items": 24, "ratings": 200, "split": "per_user", "test_fraction": 0.2},
    "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
    "availability": {"dropout": 0.1},
    "protocol": {"k": 4, "stage_timeout_s": 2.0},
}


def _tiny(**protocol_keys: Any) -> dict[str, Any]:
    tables = copy.deepcopy(_TINY)
    tables["protocol"].update(protocol_keys)
    return tables


def test_the_checks_accept_their_bounds_and_say_exactly_what_they_refuse() -> None:
    protocol._check(PriviRecConfig(k=20, oversample=4), 24)  # k + oversample = the items: accepted
    protocol._check(PriviRecConfig(k=8, ideal_k=8), 24)  # ideal_k = k: accepted
    with pytest.raises(ConfigError) as raised:
        protocol._check(PriviRecConfig(k=21, oversample=4), 24)
    assert str(raised.value) == "protocol.k: k + oversample = 25 exceeds the number of items 24"
    protocol._check(PriviRecConfig(k=8, ideal_k=9), 24)  # ideal_k > k: capped at k (its default 256 is)
    assert protocol.ideal_rank(PriviRecConfig(k=8, ideal_k=9)) == 8
    with pytest.raises(ConfigError) as raised:
        protocol._check(PriviRecConfig(k=8, variant="privirec_k", scorer="turbo_cf", turbo_power=2.0), 24)
    assert str(raised.value) == "protocol.turbo_power: privirec_k's low-rank P~ takes turbo_power = 1 only"


def test_the_server_draws_from_its_own_generator(monkeypatch) -> None:
    """SecAgg+'s communication graph is the server's draw: its generator is (seed, ACTOR, server, 0)."""
    made = []
    monkeypatch.setattr(protocol.PriviRecServer, "__init__", _spy(protocol.PriviRecServer.__init__, made))
    fedrecsim.run(_tiny(secagg="ideal", graph="sparse"))
    expected = generator(4, Stream.ACTOR, fedrecsim.Role.SERVER.code, 0)
    assert made[0].integers(1 << 62, size=4).tolist() == expected.integers(1 << 62, size=4).tolist()


def _spy(init: Any, made: list) -> Any:
    """``init``, also keeping a copy of the generator each server is given, as it is before any draw."""

    def spying(self, party, network, rng, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(copy.deepcopy(rng))
        init(self, party, network, rng, *args, **kwargs)

    return spying


def test_each_round_has_its_row_and_its_progress() -> None:
    seen: list[tuple[int, int]] = []
    result = fedrecsim.run(_tiny(secagg="ideal"), progress=lambda completed, total: seen.append((completed, total)))
    assert [row["round"] for row in result.rounds] == [1, 2, 3]
    assert seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("gap, holds", [(SCORE_TOLERANCE, True), (np.nextafter(SCORE_TOLERANCE, 1.0), False), (1.0, False)])
def test_the_match_monitor_holds_up_to_the_tolerance_and_no_further(monkeypatch, gap, holds) -> None:
    tables = _tiny(secagg="ideal")
    tables["availability"] = {}
    monkeypatch.setattr(protocol, "max_gap", lambda *args: gap)
    [monitor] = [report for report in fedrecsim.run(tables).result["invariants"] if report["name"] == "matches_centralized"]
    assert (monitor["violations"] == 0) is holds and monitor["checked"] == 1


@pytest.mark.parametrize("mode", ["ideal", "real"])
def test_a_run_resumed_from_its_checkpoint_ends_as_the_run_never_interrupted(tmp_path, mode) -> None:
    tables = _tiny(secagg=mode)
    uninterrupted = fedrecsim.run(tables)
    with pytest.raises(Interrupted):
        fedrecsim.run(tables, out=tmp_path / "run", checkpoint_every=1, progress=InterruptAfter(2))
    resumed = fedrecsim.resume(tmp_path / "run")
    for key in ("transcript_xxh3_128", "metrics", "ledger", "privacy", "invariants", "warnings"):
        assert resumed.result[key] == uninterrupted.result[key], key


def test_a_user_computing_its_power_input_at_a_checkpoint_takes_part_after_the_resume(tmp_path, monkeypatch) -> None:
    """Heavy-tailed stragglers: some user is still computing A^(u)T A^(u) X when round 1 ends."""
    tables = _tiny(secagg="ideal", k=4)
    tables["run"].update({"round_timeout_s": 300.0, "round_gap_s": 30.0})
    tables["availability"] = {"compute_median_s": 4.0, "compute_sigma": 1.5}
    tables["protocol"]["stage_timeout_s"] = 20.0
    uninterrupted = fedrecsim.run(tables)
    written: list[Any] = []
    write = Checkpoints._write
    monkeypatch.setattr(Checkpoints, "_write", lambda self, saved: (written.append(saved), write(self, saved)))
    fedrecsim.run(tables, out=tmp_path / "all", checkpoint_every=1)
    monkeypatch.undo()
    assert written, "no checkpoint was taken"
    computing = [saved for saved in written if _computing(saved)]
    assert computing, "no checkpoint found a user computing"
    for position, saved in enumerate(computing):
        folder = tmp_path / f"run-{position}"
        (tmp_path / f".run-{position}.checkpoints").mkdir()
        (tmp_path / f".run-{position}.checkpoints" / "checkpoint.pkl").write_bytes(pickle.dumps(saved))
        resumed = fedrecsim.resume(folder)
        assert resumed.result["transcript_xxh3_128"] == uninterrupted.result["transcript_xxh3_128"]
        assert resumed.result["metrics"] == uninterrupted.result["metrics"]


def _computing(saved: Any) -> bool:
    """Whether some user of the checkpoint ``saved`` is computing its power-iteration input."""

    class Names(pickle.Unpickler):
        def persistent_load(self, name: str) -> str:
            return name

    users = Names(io.BytesIO(saved.world)).load()["users"].values()
    return any(user["pending"] is not None and user["computing_until"] is not None for user in users)


def _churning(seed: int, **availability: Any) -> dict[str, Any]:
    """PriviRec-k over 16 users that leave (0.3) and join (0.2) between rounds, ideal secure aggregation."""
    tables = _tiny(variant="privirec_k", secagg="ideal")
    tables["run"].update({"seed": seed, "rounds": 4})
    tables["availability"] = {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.3, **availability}
    return tables


def test_the_privacy_report_gives_the_last_sums_threshold_and_degree() -> None:
    """With churn the sums have different sizes; the report's t and k are those of the last, by the formula
    (complete graph: k = n - 1, t = floor(theta (k + 1)) + 1 with theta = 0.5)."""
    tables = _churning(1)
    tables["protocol"]["graph"] = "complete"
    result = fedrecsim.run(tables)
    sizes = [len(seen.members) for seen in result.outcome.state["server"].sums]
    assert sizes[-1] not in (sizes[1], sizes[-2])  # so no other sum's figures would do
    n = sizes[-1]
    reported = result.result["privacy"]["secure_aggregation"]
    assert (reported["degree"], reported["threshold"]) == (n - 1, min(n, n // 2 + 1))


def test_a_round_that_aborts_under_churn_ends_the_run_with_its_warning() -> None:
    result = fedrecsim.run(_churning(1, dropout=0.3))
    assert result.result["rounds_completed"] == 1
    assert [warning.split(":")[0] for warning in result.result["warnings"] if "aborted" in warning] == ["round 2"]
