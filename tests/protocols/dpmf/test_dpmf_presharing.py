"""S3 pre-sharing: no item is used with fewer than k eta pieces; the paper's common sharers and ours per item."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedrecsim
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.dpmf.recommender import Recommender

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
SMALL = ["data.items=60", "data.ratings=3000", "protocol.d=4", "run.rounds=2", "protocol.max_users=20",
         "protocol.eval_every=1000", "protocol.replay=false", 'protocol.sharers="per_item"', "protocol.presharing_attempts=1"]
# Per reproduction, what makes sharers miss at this size: slow links against a 2 s third-party deadline;
# users online and offline for 3 s on average, with more of them asked.
REPRODUCTIONS = {
    "hua_s3_latency": ["data.users=100", "run.round_timeout_s=4"],
    "hua_s3_markov": ["data.users=200"],
}


def _violations(result: fedrecsim.RunResult) -> dict[str, int]:
    return {invariant["name"]: invariant["violations"] for invariant in result.result["invariants"]}


@pytest.mark.parametrize("name", sorted(REPRODUCTIONS))
def test_short_items_are_preshared_again_and_never_used_short(name: str) -> None:
    result = fedrecsim.run(fedrecsim.load_scenario(SCENARIOS / f"{name}.toml", [*SMALL, *REPRODUCTIONS[name]]))
    assert _violations(result) == dict.fromkeys(_violations(result), 0)
    checked = {invariant["name"]: invariant["checked"] for invariant in result.result["invariants"]}
    assert checked["eta_pieces"] > 20
    eta = result.result["privacy"]["eta"]
    attempts = eta["presharing"]
    # The reproduction works: the first attempt came back with items short of their k = 4 pieces ...
    assert attempts[0]["whole"] < attempts[0]["items"] and attempts[0]["pieces_min"] < 4
    # ... and the next attempt pre-shared exactly those again.
    assert attempts[1]["items"] == attempts[0]["items"] - attempts[0]["whole"]
    assert eta["pieces_min"] == 4
    assert sum(row["eta_skipped"] for row in result.rounds) == eta["skipped_updates"]
    if name == "hua_s3_latency":
        # Attempts keep failing here, so some iterations aggregate items whose eta is not whole yet: skipped.
        assert eta["skipped_updates"] > 0


def test_a_wrong_eta_is_counted_for_its_item_only(tiny_dpmf, monkeypatch) -> None:
    """One item's tau^ corrupted after pre-sharing: one violation of the 40 items checked, not 40.

    (The iterations check the aggregates against tau^ - alpha, which the users' pieces of the corrupted
    tau^ match; the check against the pre-shared pieces is the one that catches it, once.)
    """
    tiny_dpmf["protocol"].update({"scenario": "S3", "k_presharing": 4})
    tiny_dpmf["run"]["rounds"] = 1
    preshare = Recommender.preshare
    corrupted: list[int] = []

    async def corrupt_one(self: Recommender, round_timeout_s: float) -> np.ndarray:
        accepted = await preshare(self, round_timeout_s)
        corrupted.append(int(accepted[0]))
        self.tau_hat[accepted[0], 0] += self.tau_hat.dtype.type(1)
        return accepted

    monkeypatch.setattr(Recommender, "preshare", corrupt_one)
    result = fedrecsim.run(tiny_dpmf)
    (_, items, _, _), = result.outcome.state["recent_aggregates"]
    assert corrupted[0] in items, "the corrupted item was used"
    eta = next(invariant for invariant in result.result["invariants"] if invariant["name"] == "eta_invariant")
    assert eta["checked"] > 40
    assert eta["violations"] == 1


@pytest.mark.parametrize("sharers", ["common", "per_item"])
def test_the_paper_picks_one_set_of_k_sharers_for_all_items_ours_k_per_item(tiny_dpmf, sharers: str) -> None:
    tiny_dpmf["protocol"].update({"scenario": "S3", "k_presharing": 4, "sharers": sharers})
    tiny_dpmf["run"]["rounds"] = 1
    parties = [Party(Role.USER, index) for index in range(30)]
    result = fedrecsim.run(tiny_dpmf, record_views=parties)
    requests = {
        party: envelope.body.items for party in parties for envelope in result.views[party] if envelope.kind == "dpmf.presharing_request"
    }
    n_items = 40
    # Either way every item is pre-shared by exactly k = 4 users, in one attempt (everyone is online).
    np.testing.assert_array_equal(np.bincount(np.concatenate(list(requests.values())), minlength=n_items), np.full(n_items, 4))
    assert [attempt["attempt"] for attempt in result.result["privacy"]["eta"]["presharing"]] == [1]
    if sharers == "common":
        assert len(requests) == 4
        assert all(np.array_equal(items, np.arange(n_items)) for items in requests.values())
    else:
        assert len(requests) > 20
        assert all(items.size < n_items for items in requests.values())
    assert result.result["privacy"]["eta"]["sharers"] == sharers
    assert _violations(result) == dict.fromkeys(_violations(result), 0)
