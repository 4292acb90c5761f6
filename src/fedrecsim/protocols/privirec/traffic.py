"""PriviRec's traffic plan: the messages of the set-up and of a power iteration per role, for ``fedrecsim
inspect`` and the communication study.

Each secure sum is one `fedrecsim.protocols.secagg` session over the n users online at the set-up, every
user with k neighbours (k = n - 1 for the complete graph, SecAgg+'s degree for the sparse one): per user
secagg.setup, .keys, .ciphertexts and .unmask from the server, secagg.advertise, .shares, .masked (the
input, ``length`` ring words) and .reveal (k + 1 shares of self-mask seeds) to it. The broadcasts are the
sizes of the arrays they carry. The set-up holds the degree sum (m words) and, for PriviRec, the P' sum
(m (m + 1) / 2 words) with their broadcasts; a round holds X's broadcast (m x p floats) and the sum of
A^(u)T A^(u) X (m p words). The final broadcast of the filters (m x k, and k for PriviRec-k), to the users
online after the last round, is the closing phase's (the ledger's, after round L). Sizes are the wire
codec's, user by user; they are exact with every user online and no dropout (the odd-degree corner of
SecAgg+'s graph aside). With dropout, users that crash at a uniformly drawn stage stop sending from it on:
an expectation.
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


def _broadcast(ctx: PlanContext, body: object, n: float, exact: bool = True) -> Flow:
    sizes = ctx.user_bytes(lambda _: body, SERVER, to_user=True)
    count = int(round(n))
    mean = float(sizes[: max(count, 1)].mean()) if sizes.size else 0.0
    return Flow(type(body).KIND, Role.SERVER, Role.USER, n, n * mean, exact)  # type: ignore[attr-defined]


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
    )
    closing = (_broadcast(ctx, Filters(np.zeros((m, k)), spectrum), ctx.online, exact=exact),)
    assumptions = (
        f"every secure sum runs over the {n} users online at the set-up, each with {degree} neighbours (t = {threshold})",
        f"secure aggregation in {secagg_mode(config, m)} mode (the bytes are the same in both)",
    )
    return TrafficPlan({Role.USER: ctx.train.n_users, Role.SERVER: 1}, tuple(setup), per_round, assumptions, closing)


#: E[d_u^2] / E[d_u]^2 over the users' numbers of items d_u, as `memory` assumes it for the item-item sum
#: (whose inputs hold d_u (d_u + 1) / 2 entries each): MovieLens-1M's is 2.35, MovieLens-100k's 1.9 (80 %
#: training split), the synthetic generator's at ML-1M's shape 1.7.
DEGREE_SPREAD = 2.5

#: Cells of a block of users' scores (`evaluation`) and of a reference's dense SVD (`models.gfcf`).
_SCORE_CELLS, _DENSE_SVD_CELLS = 1 << 22, 1 << 25


def memory(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """PriviRec's arrays (`fedrecsim.memory`), upper-leaning:

    - the secure sums' inputs, each user's alive once while a sum runs (`roles.PriviRecUser._sum_pending`):
      in ideal mode its nonzero rows as the functionality holds them -- n_u x (p + 1) words of a power
      iteration, and for PriviRec d_u (d_u + 1) / 2 x 2 words of the item-item sum, summed over the users
      with E[d_u^2] = `DEGREE_SPREAD` E[d_u]^2 -- and in real mode the dense vector, three times per user
      (upper-leaning: a user makes its input dense and masks it only as it sends it and keeps neither, so
      what stays is the message and the server's view of it; measured at ML-1M's item count, exact
      PriviRec: 40 MB a user, 0.7 of one dense 55 MB input);
    - the server's P~ (the sum, its decoding, P', P~, the broadcast's triangle encoded and decoded and the
      receivers' one shared dense P~: about 6 triangles and 3 m x m) and its bases (the L it sent, the
      broadcast encoded and decoded, the sum, the QR, and the PriviRec-k attack's stacked bases, sums and
      pseudo-inverse: 3 L + 6 of m x p);
    - the evaluation's blocks of scores and, with ``baseline``, the references: GF-CF's exact P~ (and the
      twin's, for PriviRec), a dense SVD of R~ up to 2^25 cells (R~, U and the workspace: 4 copies).

    Measured at ML-1M's shape (6,040 x 3,706, 800,133 training entries, ideal mode, L = 2; peak RSS,
    which adds about 0.12 GB of interpreter and libraries): PriviRec-k without the references 2.48 GB at
    k = 256 (estimated 2.0 GiB = 2.15 GB) and 7.39 GB at k = 1024 (6.8 GiB = 7.3 GB); with them, k = 256
    3.62 GB (2.7 GiB = 2.9 GB) and PriviRec 4.01 GB (3.9 GiB = 4.2 GB). The estimate is within 20 % of a
    measured peak (`fedrecsim.memory`: meant to catch runs that cannot
    fit, not to budget tight ones)."""
    from .protocol import secagg_mode  # the config's helpers; imported here to avoid an import cycle

    config = ctx.config
    m, users, p = float(ctx.items), float(ctx.users), float(config.k + config.oversample)
    entries, mean = float(ctx.train_entries), ctx.entries_per_user
    exact = config.variant == "privirec"
    triangle = m * (m + 1) / 2
    if secagg_mode(config, ctx.items) == "real":
        inputs = 3.0 * users * max(triangle if exact else 0.0, m * p)
    else:
        pairs = min(users * (DEGREE_SPREAD * mean * mean + mean) / 2, entries * (m + 1) / 2) if exact else 0.0
        inputs = max(2.0 * pairs, entries * (p + 1))
    rounds = float(ctx.scenario.run.rounds)
    server = (6.0 * triangle + 3.0 * m * m if exact else 0.0) + (3.0 * rounds + 6.0) * m * p
    evaluation = 4.0 * _SCORE_CELLS
    if config.baseline:
        evaluation += (2.0 if exact else 1.0) * m * m + 4.0 * min(users * m, float(_DENSE_SVD_CELLS))
    return (
        MemoryItem("secure sums' inputs", inputs * 8, ("data.ratings", "protocol.k", "protocol.variant", "protocol.secagg")),
        MemoryItem("server item-item and bases", server * 8, ("data.items", "protocol.variant", "protocol.k", "run.rounds")),
        MemoryItem("evaluation and references", evaluation * 8, ("protocol.baseline", "data.items", "data.users")),
    )


__all__ = ["memory", "plan", "session_flows"]
