"""PriviRec's traffic plan: the messages of the set-up and of a power iteration per role, for ``fedrecsim
inspect`` and the communication study.

Each secure sum is one `fedrecsim.protocols.secagg` session over the n users online at the set-up, every
user with k neighbours (k = n - 1 for the complete graph, SecAgg+'s degree for the sparse one): per user
secagg.setup, .keys, .ciphertexts and .unmask from the server, secagg.advertise, .shares, .masked (the
input, ``length`` ring words) and .reveal (k + 1 shares of self-mask seeds) to it. The broadcasts are the
sizes of the arrays they carry. The set-up holds the degree sum (m words) and, for PriviRec, the P' sum
(m (m + 1) / 2 words) with their broadcasts; a round holds X's broadcast (m x p floats) and the sum of
A^(u)T A^(u) X (m p words). The final broadcast of the filters (m x k, and k for PriviRec-k) is counted
in the last round; the plan spreads it evenly over the rounds. Sizes are the wire codec's, user by user;
they are exact with every user online and no dropout (the odd-degree corner of SecAgg+'s graph aside).
With dropout, users that crash at a uniformly drawn stage stop sending from it on: an expectation.
"""

from __future__ import annotations

import numpy as np

from ...mechanisms.ring import Ring
from ...memory import MemoryContext, MemoryItem
from ...network.party import SERVER, Party, Role
from ..runtime import Flow, PlanContext, TrafficPlan
from ..secagg import SecAggParams
from ..secagg.crypto import CIPHERTEXT_BYTES, KEY_BYTES
from ..secagg.messages import Advertise, Ciphertexts, Keys, Masked, Reveal, Setup, Shares, Unmask
from ..secagg.shamir import SHARE_BYTES
from .local import upper_length
from .messages import Basis, Degrees, Filters, ItemItem

_USER = Party(Role.USER, 0)


def session_flows(ctx: PlanContext, n: int, degree: int, threshold: int, length: int, bits: int, session: int = 3) -> tuple[Flow, ...]:
    """The flows of one secure sum of ``length`` words over ``n`` users with ``degree`` neighbours each."""
    word = bits // 8
    d = ctx.dropout
    # A user that crashes does so at one of the four stages, uniformly: the share still sending at each.
    sending = [1.0 - d * stage / 4 for stage in (1, 2, 3, 4)]
    exact = not d and ctx.online >= ctx.train.n_users

    def ids(count: int) -> np.ndarray:
        return np.arange(count, dtype=np.int32)

    def rows(count: int, width: int) -> np.ndarray:
        return np.zeros((count, width), dtype=np.uint8)

    def flow(body: object, to_user: bool, share: float) -> Flow:
        sizes = ctx.user_bytes(lambda _: body, SERVER, to_user=to_user)
        mean = float(sizes[:n].mean()) if n else 0.0
        src, dst = (Role.SERVER, Role.USER) if to_user else (Role.USER, Role.SERVER)
        return Flow(type(body).KIND, src, dst, n * share, n * share * mean, exact)  # type: ignore[attr-defined]

    return (
        flow(Setup(session, bits, length, threshold, ids(degree)), True, 1.0),
        flow(Advertise(session, bytes(KEY_BYTES), bytes(KEY_BYTES)), False, sending[0]),
        flow(Keys(session, ids(degree), rows(degree, KEY_BYTES), rows(degree, KEY_BYTES)), True, sending[0]),
        flow(Shares(session, ids(degree), rows(degree, CIPHERTEXT_BYTES)), False, sending[1]),
        flow(Ciphertexts(session, ids(degree), rows(degree, CIPHERTEXT_BYTES)), True, sending[1]),
        flow(Masked(session, bytes(length * word)), False, sending[2]),
        flow(Unmask(session, ids(degree)), True, sending[2]),
        flow(Reveal(session, ids(degree + 1), rows(degree + 1, SHARE_BYTES), ids(0), rows(0, SHARE_BYTES)), False, sending[3]),
    )


def _broadcast(ctx: PlanContext, body: object, n: float, share: float = 1.0, exact: bool = True) -> Flow:
    sizes = ctx.user_bytes(lambda _: body, SERVER, to_user=True)
    count = int(round(n))
    mean = float(sizes[: max(count, 1)].mean()) if sizes.size else 0.0
    return Flow(type(body).KIND, Role.SERVER, Role.USER, n * share, n * share * mean, exact)  # type: ignore[attr-defined]


def plan(ctx: PlanContext) -> TrafficPlan:
    """PriviRec's `TrafficPlan` (module docstring)."""
    from .protocol import secagg_mode  # the config's helpers; imported here to avoid an import cycle

    config = ctx.config
    m = ctx.train.n_items
    n = int(round(ctx.initial_online))
    p, k = config.k + config.oversample, config.k
    params = SecAggParams(ring=Ring(config.bits, config.frac_bits), graph=config.graph, neighbours=config.neighbours,
                          threshold=config.threshold, ideal=secagg_mode(config, m) == "ideal")
    degree, threshold = params.degree(n), params.threshold_for(n)
    exact = not ctx.dropout and ctx.online >= ctx.train.n_users
    setup = [*ctx.membership(initial=True), *session_flows(ctx, n, degree, threshold, m, config.bits, 1),
             _broadcast(ctx, Degrees(np.zeros(m)), n)]
    if config.variant == "privirec":
        length = upper_length(m)
        setup += [*session_flows(ctx, n, degree, threshold, length, config.bits, 2), _broadcast(ctx, ItemItem(np.zeros(length)), n)]
    spectrum = np.zeros(k if config.variant == "privirec_k" else 0)
    per_round = (
        *ctx.membership(),
        _broadcast(ctx, Basis(1, np.zeros((m, p))), ctx.online, exact=exact),
        *session_flows(ctx, n, degree, threshold, m * p, config.bits, 3),
        _broadcast(ctx, Filters(np.zeros((m, k)), spectrum), ctx.online, 1.0 / max(ctx.rounds, 1), exact=False),
    )
    assumptions = (
        f"every secure sum runs over the {n} users online at the set-up, each with {degree} neighbours (t = {threshold})",
        "the filters' broadcast after the last round is spread evenly over the rounds",
        f"secure aggregation in {secagg_mode(config, m)} mode (the bytes are the same in both)",
    )
    return TrafficPlan({Role.USER: ctx.train.n_users, Role.SERVER: 1}, tuple(setup), per_round, assumptions)


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """PriviRec's arrays (`fedrecsim.memory`): every user's masked input of a secure sum -- PriviRec's
    m(m+1)/2 item-item upper triangle in the set-up, m x p of a power iteration -- encoded and decoded, the
    server's sums and P~ (m x m), and the broadcast basis each user decodes."""
    config = ctx.config
    m, users, p = float(ctx.items), ctx.users, config.k + config.oversample
    item_item = m * (m + 1) / 2 if config.variant == "privirec" else 0.0
    return (
        MemoryItem("secure sums' inputs", 3.0 * users * max(item_item, m * p) * 8, ("data.items", "data.users", "protocol.variant", "protocol.k")),
        MemoryItem("server item-item and basis", (3.0 * item_item * 2 + 4.0 * m * p) * 8, ("data.items", "protocol.k")),
        MemoryItem("broadcasts", 2.0 * users * m * p * 8, ("data.items", "data.users", "protocol.k")),
    )


__all__ = ["memory", "plan", "session_flows"]
