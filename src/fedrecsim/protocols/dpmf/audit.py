"""What Hua et al.'s privacy claim protects, for ``fedrecsim audit`` (`fedrecsim.audit`).

The claim (Theorem 1 for S1, Theorem 2 with Lemma 1 for S2/S3): the published item profiles V are
eps-differentially private for one rating of one user, with the sensitivity Delta the rating range; the
noise eta is fixed once and every iteration optimizes the same objective (6), so the whole run spends eps
once (`protocol._epsilon_spent`). The relation is ``one_rating`` (the target rating, of the data's top
value, added to or removed from the target user's row), delta = 0.

Whom the claim covers, and the two distinguishers here:

* **Anyone who sees the published V** (an outside observer: any party's view, V being released to
  everyone; `AuditSpec.published` hands it to the distinguisher). ``published_projection`` is the
  difference attack on V with what such an observer knows -- the rest of the data, the two candidate
  rows, the algorithm, but neither U nor eta nor the random start: it estimates the target user's
  profile from V and the user's other ratings (ridge least squares, ``u = argmin ||r - V_row u||^2 +
  lam ||u||^2``), and scores the run by ``u . v_t``, the prediction of the target item t. The
  target rating, the data's top value, pulls v_t towards the user's profile (objective (6)), so the
  prediction is higher in the world with it; eta of Theorem 1 hides that pull at small eps. It is a
  heuristic test, not the likelihood ratio: V also depends on U and the random start, which the
  observer does not know, so the exact ratio is out of its reach.
* **The recommender and the third party** (S2/S3). The paper claims eps-DP against the untrusted
  recommender too; the project's ``privacy.known_leaks`` say it does not hold: the recommender learns
  each user's rated-item set from its item requests (S1: the ratings themselves, the premise of a
  trusted recommender), and the third party each contributor's from its contributions.
  ``rated_items`` is that leak as a test: 1 when the target item is among the items the target user
  asked for (server) or contributed to (third party), else 0. Under one_rating it tells the two worlds
  apart in every run, so the audited bound is as large as the trials allow (about 3.4 at 100 held-out
  trials per world, 95%) and exceeds any small eps: the known leak, confirmed. (The other known leak --
  the recommender knows H, so eta is Gaussian to it -- is not tested here.)

* **Theorem 1's adversary** (``theorem1_llr``). Theorem 1 proves the refit of V private *given U*; an
  audit of that statement may hand the distinguisher U (`published` adds the recommender's final U; the
  protocol does not release it, and the observer's tests above do not read it). Given U the target
  item's refit solves ``A_w v_t = b_w - eta_t / 2`` in world w (`central.refit_items`), so
  ``eta_w = 2 (b_w - A_w v_t)`` and the score is the exact log-likelihood ratio ``log p(eta_in) + log
  |det A_in| - log p(eta_out) - log |det A_out|`` with Theorem 1's density ``exp(-eps ||eta|| / (2
  Delta))`` (Lemma 1's Laplace for ``noise = "laplace"``). U itself depends on the data, so this view is
  larger than V alone; the bound it gives still counts against the claim only as an audit of Theorem 1.
* ``item_norm``: ``||v_t||`` of the published V, for any party.

Measured (``python scenarios/audit_hua.py --workers 2``: 20 users x 30 items, 150 ratings, d = 2, 5
iterations, the target rating on an item others rated too, 400 trials per world, 95% per distinguisher;
machine loaded, 5-9 trials/s):

    view                 claimed eps   audited lower bound (best)     meaning
    S1, V (given U)      1             0.76  (theorem1_llr)           no violation found
    S1, V (given U)      2             1.19  (theorem1_llr)           no violation found
    S1, V (given U)      4             1.73  (theorem1_llr)           no violation found
    S2, recommender      1             3.98  (rated_items)            above the claim: the known leak
    S2, observer of V    1             0     (projection, item_norm)  no violation found

``published_projection`` (without U) gives 0 / 0.44 / 0.39 at eps = 1 / 2 / 4 (held-out TPR 0.98 against
FPR 0.88-0.92: a weak tail event): the random start of U and V varies V far more than one rating does. With eta scaled by 1/4 the Theorem-1 audit exceeds the claim
(tests/protocols/dpmf/test_dpmf_audit.py).

**Finding: an item no one else rated was published without noise.** `central.refit_items` left an item
without ratings at its start profile (unit norm) -- its system ``mu n_j I`` is singular at n_j = 0 --
where objective (6) gives ``-eta_j / (2 mu)``. So whether an item has a rating at all was released
exactly: with the target rating on an item only the target rated, ``item_norm`` separated the worlds
(``fedrecsim audit scenarios/hua_s1.toml --party user:0 --trials 100 --set run.rounds=5 --set
data.users=20 --set data.items=60 --set data.ratings=150 --set protocol.d=2 --set protocol.replay=false
--set protocol.epsilon=1 --set audit.item=7``: lower bound 2.43 against a claim of 1, held-out TPR 0.92,
FPR 0 at 100 trials per world). `central.refit_items` now publishes such an item as ``-eta_j / (2 mu)``;
the same audit then gives ``item_norm`` 0 and ``published_projection`` 1.50 (at 80 % over the four tests):
the noise's shape still changes with the rating when ``mu`` is small against the data term (docs/audit.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...audit.distinguishers import Distinguisher, TrialView
from ...audit.neighbours import one_rating
from ...audit.spec import AuditSpec, Claim
from ...network.party import Role
from .messages import Contribution, ItemRequest, RatingsUpload


def claim(scenario: Any) -> Claim:
    """eps for the published V, per rating, whole run (objective perturbation: eta fixed once), delta = 0."""
    config = scenario.protocol
    theorem = "Theorem 1" if config.scenario == "S1" else "Theorem 2 with Lemma 1"
    return Claim(
        config.epsilon, 0.0,
        f"the published V is eps = {config.epsilon:g}-DP per rating (Hua et al. {theorem}; {config.scenario}, "
        "eta fixed once, so the iterations do not compose)",
    )


def published(outcome: Any) -> dict[str, Any]:
    """The run's release: the item profiles V (S1: after the perturbed refit; S2/S3: after the last iteration)."""
    return {
        "item_factors": np.asarray(outcome.state["item_factors"], dtype=float),
        "user_factors": np.asarray(outcome.state["user_factors"], dtype=float),
    }


def target_item(view: TrialView) -> int:
    """The item of the target rating: the one item of the present row not in the absent row."""
    (item,) = view.target.added
    return item


def published_projection(view: TrialView) -> np.ndarray:
    """``[u . v_t]``: the target item's prediction for the user's profile estimated from V (module docstring)."""
    V = view.published["item_factors"]
    own = np.asarray(view.target.absent.items, dtype=np.int64)
    ratings = np.asarray(view.target.absent.values, dtype=float)
    rows = V[own]
    lam = max(view.scenario.protocol.lam, 1e-6)
    u = np.linalg.solve(rows.T @ rows + lam * np.eye(V.shape[1]), rows.T @ ratings)
    return np.array([float(u @ V[target_item(view)])])


def _refit_system(view: TrialView, U: np.ndarray, present: bool) -> tuple[np.ndarray, np.ndarray]:
    """The target item's refit system of `central.refit_items` in one world: ``A v_t = b - eta_t / 2``."""
    item, known = target_item(view), view.known
    raters = known.users[known.items == item]
    values = known.values[known.items == item]
    if present:
        raters = np.append(raters, view.target.user)
        values = np.append(values, view.known.rating_range[1])
    rows = U[raters]
    hyper = view.scenario.protocol
    weight = raters.size if hyper.normalize else 1
    return rows.T @ rows + hyper.mu * weight * np.eye(U.shape[1]), values @ rows


def _log_density(eta: np.ndarray, mechanism: str, epsilon: float, delta: float, d: int) -> float:
    """The log density of one item's eta up to a constant: Theorem 1's ``-eps ||eta|| / (2 Delta)`` or
    Lemma 1's ``-|eta|_1 / b`` with ``b = 2 Delta sqrt(d) / eps``."""
    if mechanism == "theorem1":
        return -epsilon * float(np.linalg.norm(eta)) / (2 * delta)
    return -float(np.abs(eta).sum()) * epsilon / (2 * delta * np.sqrt(d))


def theorem1_llr(view: TrialView) -> np.ndarray:
    """``[log p(v_t | U, in) - log p(v_t | U, out)]``: S1's refit given U (module docstring); ``[0]`` in S2/S3,
    whose V is not one refit."""
    V, U = view.published["item_factors"], view.published["user_factors"]
    config = view.scenario.protocol
    if config.scenario != "S1":
        return np.array([0.0])
    low, high = view.known.rating_range
    v = V[target_item(view)]
    total = 0.0
    for present, sign in ((True, 1.0), (False, -1.0)):
        A, b = _refit_system(view, U, present)
        if not np.linalg.matrix_rank(A) == A.shape[0]:
            return np.array([0.0])  # no other rater: without the target the item is not refit (``item_norm``)
        eta = 2.0 * (b - A @ v)
        total += sign * (_log_density(eta, config.mechanism, config.epsilon, high - low, V.shape[1]) + np.linalg.slogdet(A)[1])
    return np.array([total])


def item_norm(view: TrialView) -> np.ndarray:
    """``[||v_t||]``: the norm of the target item's published profile."""
    return np.array([float(np.linalg.norm(view.published["item_factors"][target_item(view)]))])


def rated_items(view: TrialView) -> np.ndarray:
    """``[1.0]`` when the target item is among the items the target user named to this party, else ``[0.0]``."""
    named: set[int] = set()
    for kind in (ItemRequest.KIND, RatingsUpload.KIND, Contribution.KIND):
        for body in view.target_bodies(kind):
            named.update(int(item) for item in body.items)
    return np.array([1.0 if target_item(view) in named else 0.0])


AUDIT = AuditSpec(
    neighbouring=one_rating("one rating (of the data's top value) added to or removed from one user's row"),
    claim=claim,
    distinguishers=(
        Distinguisher(
            "published_projection", published_projection,
            description="the published V: the target item's prediction for the user's profile fitted to V on its other ratings",
        ),
        Distinguisher(
            "theorem1_llr", theorem1_llr,
            description="S1, given U (Theorem 1's condition): the likelihood ratio of the target item's published profile",
        ),
        Distinguisher(
            "item_norm", item_norm,
            description="the published V: the norm of the target item's profile (an item no one else rated is not refit without it)",
        ),
        Distinguisher(
            "rated_items", rated_items, roles=(Role.SERVER, Role.THIRD_PARTY),
            description="whether the target item is among the items the target user requested or contributed to (known leak)",
        ),
    ),
    published=published,
)

__all__ = ["AUDIT", "claim", "item_norm", "published", "published_projection", "rated_items", "target_item", "theorem1_llr"]
