"""Prototypes resumed from a checkpoint (`fedrecsim.checkpoint`): the run saves one checkpoint, at the end of
round 1, holding the server's and every silo's state and the driver's values; resumed from it -- with a
silo's prototypes lost and two silos' rejected as byzantine -- the run ends as the run never interrupted."""

from __future__ import annotations

from typing import Any

import numpy as np

import fedrecsim
from fedrecsim.testing import assert_same_run, checkpoint_world, every_checkpoint, resume_from

SILOS = 4

TABLES: dict[str, Any] = {
    # Seed 3: silo:1's prototypes are lost on the way up.
    "run": {"protocol": "prototypes", "seed": 3, "rounds": 2, "round_timeout_s": 5.0},
    "data": {"feedback": "counts", "users": 40, "items": 30, "ratings": 600, "rank": 3, "split": "users",
             "test_fraction": 0.2, "test_entries": 5, "silos": SILOS},
    "network": {"latency": {"model": "constant", "seconds": 0.05}, "links": {"silo->server": {"loss": 0.3}}},
    "faults": {"byzantine": [
        {"party": "silo:0", "corrupt": "shape", "kind": "prototypes.prototypes"},
        {"party": "silo:2", "corrupt": "huge", "kind": "prototypes.prototypes"},
    ]},
    "protocol": {"k": 3, "rank": 2, "support": 5, "nmf_iterations": 20, "baselines": False},
}


def test_the_round_one_checkpoint_holds_the_server_the_silos_and_the_driver_values(tmp_path) -> None:
    result, written = every_checkpoint(TABLES, tmp_path / "checkpointed")
    assert [saved.round for saved in written] == [1]
    world = checkpoint_world(written[0])
    assert sorted(world["objects"]) == ["server", *(f"silo:{h}" for h in range(SILOS))]
    assert [str(party) for party in world["objects"]["server"]["rejected"]] == ["silo:0", "silo:2"]
    values = world["values"]
    assert sorted(values) == ["missing", "rounds", "support"]
    assert values["rounds"] == result.result["metrics"]["rounds"][:1]
    assert values["rounds"] == [{"round": 1, "prototypes_received": 1, "silos_missing": 1, "silos_rejected": 2}]
    assert [str(party) for party in values["missing"]] == ["silo:1"]
    assert values["support"].checked == 1


def test_a_run_resumed_after_round_one_ends_as_the_run_never_interrupted(tmp_path) -> None:
    uninterrupted = fedrecsim.run(TABLES)
    warnings = uninterrupted.result["warnings"]
    assert warnings[:2] == [
        "1 silo sent no prototypes in time: silo:1",
        "2 silos sent prototypes the server rejected (ledger.faults): silo:0, silo:2",
    ]
    # At epsilon = 1 the prototypes are noise, and some clusters empty: the silos' results survive the resume.
    assert warnings[2].startswith("the prototypes are noise-dominated: prototype_snr = ")
    assert warnings[3].endswith(" of 12 clusters are empty in the silos' chosen trials; their prototypes are noise alone (empty_clusters)")
    checkpointed, written = every_checkpoint(TABLES, tmp_path / "checkpointed")
    resumed = resume_from(written[0], tmp_path / "resumed")
    for result in (checkpointed, resumed):
        assert_same_run(result, uninterrupted)  # warnings included
        assert result.outcome.state["prototypes"].keys() == uninterrupted.outcome.state["prototypes"].keys()
        for party, prototypes in uninterrupted.outcome.state["prototypes"].items():
            np.testing.assert_array_equal(result.outcome.state["prototypes"][party], prototypes)
