"""FedVAE's traffic plan: the messages of a round per role, for ``fedrecsim inspect``.

Only training users are parties (held-out users never train), so the availability model's expectation
over all users of the data is scaled to them. Each round the server sends ω to ``min(R, online)`` of
them (``send_many``: one encoding, one message each) and every one that does not crash answers with one
gradient; a user that crashes sends a join when it recovers. Sizes are the wire codec's lengths of the
messages the protocol sends, for each length of a user's party index on the wire.

ω and a dense gradient have fixed sizes, so with every training user online and sampled each round the
plan is exact. A sparse gradient's size depends on how many of the user's items survive dropout,
Binomial(n_u, 1 - p): its expectation is taken at the mean (interpolated between the two whole counts
around it), and attackers whose forgery fills every W1 row (``gaussian``, ``same_value``) send all I.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ...actors.membership import Join
from ...memory import MemoryContext, MemoryItem
from ...models.multvae import Layout
from ...network.party import SERVER, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan
from .messages import Gradient, Model, SparseGradient

# The lengths of a non-negative int on the msgpack wire change above these values (1, 2, 3, 5 bytes).
_INDEX_CLASSES = (127, 255, 65535)
_FULL_ROWS = ("gaussian", "same_value")


def _sparse(round_index: int, kept: int, hidden: int, rest: int) -> SparseGradient:
    """A sparse gradient of ``kept`` W1 rows of ``hidden`` entries and ``rest`` other entries (zeros)."""
    return SparseGradient(
        round_index, np.zeros(kept, np.int32), np.zeros((kept, hidden), np.float32), np.zeros(rest, np.float32)
    )


def _index_class(users: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.array(_INDEX_CLASSES), users, side="left")


def _mean_over_users(users: np.ndarray, size_for: Callable[[Party], float]) -> float:
    """The mean over ``users`` of ``size_for(party)``, computed once per party-index length (0 if none)."""
    if not users.size:
        return 0.0
    classes = _index_class(users)
    total = 0.0
    for index_class in np.unique(classes):
        members = users[classes == index_class]
        total += members.size * size_for(Party(Role.USER, int(members[0])))
    return total / users.size


def plan(ctx: PlanContext) -> TrafficPlan:
    """FedVAE's `TrafficPlan` (module docstring)."""
    config = ctx.config
    layout = Layout.of(ctx.train.n_items, config.hyper())
    train_counts, test_counts = ctx.train.user_counts(), ctx.test.user_counts()
    training = np.flatnonzero((train_counts > 0) & (test_counts == 0))
    online = ctx.online * training.size / ctx.train.n_users if ctx.train.n_users else 0.0
    selected = min(float(config.users_per_round), online)
    replying = selected * (1.0 - ctx.dropout)
    rnd = max(1, ctx.rounds // 2)
    first = layout.first_layer_size
    model = Model(rnd, np.zeros(layout.size, dtype=np.float32))

    def down(party: Party) -> float:
        return ctx.message_bytes(model, SERVER, party)

    def up_dense(length: int, party: Party) -> float:
        return ctx.message_bytes(Gradient(rnd, np.zeros(length, dtype=np.float32)), party, SERVER)

    @functools.lru_cache(maxsize=None)
    def sparse_head(kept: int, party: Party) -> float:
        """The size of a sparse gradient of ``kept`` rows with an empty rest."""
        return ctx.message_bytes(_sparse(rnd, kept, layout.hidden, 0), party, SERVER)

    def rest_bytes(length: int) -> float:
        empty, full = _sparse(rnd, 0, layout.hidden, 0), _sparse(rnd, 0, layout.hidden, length)
        return ctx.message_bytes(full, _FIRST, SERVER) - ctx.message_bytes(empty, _FIRST, SERVER)

    keep = 1.0 - config.dropout
    attack = config.byzantine_fraction
    if config.sparse:
        rest = rest_bytes(layout.size - first)

        def honest(party: Party) -> float:
            mean = train_counts[training] * keep
            low = np.floor(mean).astype(np.int64)
            fraction = mean - low
            heads = np.array([sparse_head(int(k), party) for k in low])
            nexts = np.array([sparse_head(int(k) + 1, party) for k in low])
            return float(np.mean(heads + fraction * (nexts - heads))) + rest

        def forged(party: Party) -> float:
            if config.byzantine_policy in _FULL_ROWS:
                return sparse_head(layout.n_items, party) + rest
            shortfall = rest - rest_bytes(layout.size - first - 1) if config.byzantine_policy == "wrong_shape" else 0.0
            return honest(party) - shortfall
    else:

        def honest(party: Party) -> float:
            return up_dense(layout.size, party)

        def forged(party: Party) -> float:
            return up_dense(layout.size - (config.byzantine_policy == "wrong_shape"), party)

    def up(party: Party) -> float:
        return (1.0 - attack) * honest(party) + (attack * forged(party) if attack else 0.0)

    everyone = online >= training.size and selected >= training.size
    uniform = not attack or config.byzantine_policy != "wrong_shape"
    exact = everyone and not ctx.joins and not ctx.dropout and not config.sparse and uniform
    per_round = [
        *ctx.membership(users=training),
        Flow(Model.KIND, Role.SERVER, Role.USER, selected, selected * _mean_over_users(training, down), exact),
        Flow(
            (SparseGradient if config.sparse else Gradient).KIND, Role.USER, Role.SERVER, replying,
            replying * _mean_over_users(training, up), exact,
        ),
    ]
    if ctx.dropout:
        per_round.append(ctx.users_flow(Join(), SERVER, selected * ctx.dropout, training))
    setup = ctx.membership(initial=True, users=training)
    parties = {Role.USER: int(training.size), Role.SERVER: 1}
    assumptions = (
        f"the server samples min(R = {config.users_per_round}, online) of the {training.size} training users per round "
        "uniformly at random; held-out users are not parties",
    )
    return TrafficPlan(parties, setup, tuple(per_round), assumptions)


_FIRST = Party(Role.USER, 0)


def parameter_count(items: int, hidden: int, latent: int) -> int:
    """Mult-VAE's parameters: the encoder items -> hidden -> 2 latent, the decoder latent -> hidden -> items."""
    return items * hidden + hidden + hidden * 2 * latent + 2 * latent + latent * hidden + hidden + hidden * items + items


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """FedVAE's arrays (`fedrecsim.memory`): the server's parameters with Adam's moments and the aggregate,
    the gradients of a round -- one from each of R sampled users, kept by the server for its filter, plus
    those still in flight (measured: a run of R = 100 users and 1.2 M parameters peaks at 1.1 GB, 1.2 R P
    floats with the interpreter) -- and the centralized baseline's model and dense minibatch."""
    config = ctx.config
    count = float(parameter_count(ctx.items, config.hidden, config.latent))
    sampled = min(config.users_per_round, ctx.users)
    keys = ("protocol.hidden", "data.items", "protocol.latent")
    baseline = (4.0 * count + 4.0 * config.baseline_batch * ctx.items) * 8 if config.baseline else 0.0
    return (
        MemoryItem("server model", 4.0 * count * 8, keys),
        MemoryItem("gradients of a round", 1.25 * sampled * count * 8, (*keys, "protocol.users_per_round")),
        MemoryItem("baseline", baseline, (*keys, "protocol.baseline_batch")),
    )


__all__ = ["memory", "parameter_count", "plan"]
