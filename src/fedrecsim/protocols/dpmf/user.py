"""The DP-MF users: in S1 they hand their ratings over; in S2 and S3 they keep u_i and send masked gradients.

A user of S2 or S3 holds its ratings, its profile u_i (eq. (2), kept in the unit ball), its private
generator (the C of every noise piece it draws) and, in S2, its fixed eta-pieces. Each iteration it is
served it receives v_j(t) of its rated items and answers the third party with

    phi_j = grad_j + noise_j + rho~_j(t) + psi_j  (mod P)

where grad_j = -2 e_ij u_i(t-1) (eq. (13)'s local gradient, from the profile before this iteration's
step), noise_j is its eta-piece (S2) or the piece of tau^_j the recommender handed it (S3), rho~_j(t) is a
fresh piece (`noise.pieces` with the public H_j(t) and k'_j), and psi_j is the recommender's mask. In S3
with the normalized step, grad_j + rho~_j is first weighted by k_j / k'_j (``known_raters`` / ``raters``
of the item vectors), so that the served users' sum estimates the sum over all raters without bias. In the
naive variant it sends grad_j + eta-piece_j straight to the recommender.

The ``last_*`` attributes record what the user added in its last contribution (``last_real``: the weighted
grad + rho~ it encoded; ``last_rho``: rho~ before the weight). They are never sent; the simulator's
invariant monitors read them (the simulator is omniscient, the parties are not).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...actors.user import User
from ...errors import PartyTimeout, ProtocolViolation
from ...models.mf import unit_rows
from ...network.party import THIRD_PARTY
from ...network.wire import Envelope
from .central import project_unit_ball
from .messages import (
    Contribution,
    ItemRequest,
    ItemVectors,
    NaiveContribution,
    NoiseSetup,
    PresharingRequest,
    PresharingShare,
    RatingsUpload,
)
from .noise import pieces
from .public import PublicParameters
from .ringops import decode_words, encode_rows, expand_masks, from_words, to_words


class TrustingUser(User):
    """S1: uploads its ratings to the trusted recommender on every (re)join, then waits."""

    def __init__(self, party, network, rng, items: np.ndarray, ratings: np.ndarray) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int32)
        self.ratings = np.asarray(ratings, dtype=np.float64)

    async def run(self) -> None:
        if self.items.size:
            self.send(self.server, RatingsUpload(self.items, self.ratings))

    async def resume(self) -> None:
        """Nothing to carry on with: its task ends with its upload."""


class PrivateUser(User):
    """S2 / S3: keeps u_i and its ratings; contributes masked, noised gradients (see the module docstring).

    Attributes:
        u: the private profile u_i, in the unit ball.
        eta: S2, the ring encodings of its eta-pieces, one row per rated item (None before the setup).
        shared: S3, per pre-sharing attempt it took part in: the items it pre-shared noise for, the ring
            encodings of those pieces and the k each was drawn for.
    """

    def __init__(self, party, network, rng, items: np.ndarray, ratings: np.ndarray, public: PublicParameters) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.items = np.asarray(items, dtype=np.int64)
        self.ratings = np.asarray(ratings, dtype=np.float64)
        self.public = public
        self.u = unit_rows(rng, 1, public.d)[0]
        self.eta: np.ndarray | None = None
        self.shared: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.setup_values = 0
        self.setup_overflow = 0
        self.last_round = -1
        self.last_signal = np.empty((0, public.d), dtype=public.ring.dtype)
        self.last_plain = self.last_signal
        self.last_real = np.empty((0, public.d))
        self.last_rho = self.last_real
        self.last_overflow = 0
        self._request = ItemRequest(self.items.astype(np.int32))
        # Its name in error messages, formatted once (`Party.__str__` reads an enum's value).
        self._name = str(party)
        self.serving: ItemVectors | None = None

    async def run(self) -> None:
        if self.items.size:
            self.send(self.server, self._request)
        await self.resume()

    async def resume(self) -> None:
        if await self.compute_rest():
            self._answer()
        if self.public.scenario == "S2" and self.items.size and self.eta is None:
            self._set_up((await self.recv(NoiseSetup, deadline=self.horizon_s, sender=self.server)).body)
        kinds = (PresharingRequest, ItemVectors) if self.public.scenario == "S3" else (ItemVectors,)
        while True:
            if self._take(await self._recv_first(kinds)):
                return
            if self.serving is not None:
                await self.compute()
                self._answer()

    def _take(self, envelope: Envelope) -> bool:
        """Act on a message from the recommender: pre-share, or hold the iteration's item vectors in
        ``serving`` (a round already answered is dropped); True if the user crashes in that iteration.

        A method of its own so that nothing of the message outlives it in `resume`'s frame: a user waits
        between iterations holding no message (at W3's shape, 1,000 served users a round would otherwise
        each keep its last envelope and item vectors alive until it is served again)."""
        body = envelope.body
        if envelope.kind == PresharingRequest.KIND:  # type: ignore[attr-defined]
            self._preshare(body)
            return False
        if body.round <= self.last_round:
            return False  # a round already answered: a copy the network duplicated, or overtaken by a newer one
        if self.crashes_in(body.round):
            return True
        self.serving = body
        return False

    def _answer(self) -> None:
        """Contribute to the round ``serving`` (after the compute time), then request the next one."""
        request, self.serving = self.serving, None
        self._contribute(request)  # type: ignore[arg-type]
        self.send(self.server, self._request)

    async def _recv_first(self, kinds: Sequence[Any]) -> Envelope:
        """The next message of the first of ``kinds`` that has one (setup before iterations)."""
        mailbox = self.network.mailbox(self.party)
        while True:
            for kind in kinds:
                envelope = mailbox.take(kind.KIND, self.server)
                if envelope is not None:
                    return envelope
            if not await mailbox.wait(self.horizon_s):
                raise PartyTimeout(f"{self.party} waited for the recommender until t={self.horizon_s:.3f}s; nothing came")

    # ------------------------------------------------------------------ setups

    def _set_up(self, setup: NoiseSetup) -> None:
        """S2: fix the eta-pieces of every rated item (eq. (12)) once, with the recommender's H_j and k_j."""
        if setup.h.shape != (self.items.size, self.public.d):
            raise ProtocolViolation(
                f"{self.party} expected H of shape {(self.items.size, self.public.d)}, received {setup.h.shape}"
            )
        noise = pieces(self.rng, setup.h, setup.raters, self.public.scale)
        self.eta, overflow = self.public.ring.encode(noise)
        self.setup_values += noise.size
        self.setup_overflow += overflow

    def _preshare(self, request: PresharingRequest) -> None:
        """S3 pre-sharing: tau_j = eta-piece_j + beta_j (mod P) to the third party, for the request's attempt
        (once: a second request for an attempt it already answered -- a network duplicate -- is ignored, so
        its recorded pieces stay the ones it sent)."""
        if request.attempt in self.shared:
            return
        ring, d = self.public.ring, self.public.d
        if request.h.shape[1] != d or (request.items.size and request.items[-1] >= self.public.n_items):
            raise ProtocolViolation(f"{self.party} received a pre-sharing request for items or H out of range")
        beta = from_words(ring, request.beta, d, f"{self.party} pre-sharing beta")
        encoded, overflow = ring.encode(pieces(self.rng, request.h, request.sharers, self.public.scale))
        self.shared[request.attempt] = (request.items.astype(np.int64), encoded, request.sharers.astype(np.int64))
        self.setup_values += encoded.size
        self.setup_overflow += overflow
        self.send(THIRD_PARTY, PresharingShare(request.attempt, request.items, to_words(ring, ring.add(encoded, beta))))

    # ------------------------------------------------------------------ iterations

    def _contribute(self, request: ItemVectors) -> None:
        """Answer ``request`` (module docstring). Every check of the request comes before any state changes:
        a refused request leaves u_i and the ``last_*`` records as they were."""
        public, ring, d = self.public, self.public.ring, self.public.d
        rows = self.items.size
        where = f"{self._name} round {request.round}"
        if request.vectors.shape[0] != rows:
            raise ProtocolViolation(f"{where}: expected vectors of {rows} items, received {request.vectors.shape[0]}")
        v_rows = decode_words(ring, request.vectors, d, f"{where} vectors")
        noise = self._noise_piece(request, where)
        protected = public.protected
        masks = self._masks(request, where) if protected else None
        real = self._step(v_rows)
        if protected:
            rho = pieces(self.rng, public.coin.h(request.round)[self.items], request.raters, public.scale)
            real += rho
            if request.known_raters is not None:
                real *= (request.known_raters / request.raters)[:, None]
        else:
            rho = np.zeros_like(real)
        signal, overflow = encode_rows(ring, real, v_rows)  # the item vectors are spent: their rows are scratch
        # Ring elements of one dtype: their unsigned addition wraps mod 2^b (what `Ring.add` does for them).
        plain = np.add(signal, noise)
        self.last_round, self.last_signal, self.last_plain = request.round, signal, plain
        self.last_real, self.last_rho, self.last_overflow = real, rho, overflow
        if masks is None:
            self.send(self.server, NaiveContribution(request.round, to_words(ring, plain)))
            return
        self.send(THIRD_PARTY, Contribution(request.round, self._request.items, to_words(ring, np.add(plain, masks))))

    def _step(self, v_rows: np.ndarray) -> np.ndarray:
        """Move u_i by eq. (2) (then back into the unit ball) and return its gradient rows -2 e_ij u_i(t-1).

        Bit for bit `fedrecsim.models.mf.user_step` (the same operations on the same operands, in the same
        order), in fewer numpy calls: each result is computed in place on an array this step allocated. One
        step moves: the errors are scaled by -2 once, before the product that gives grad_u, rather than
        grad_u after it -- a power of two scales every product and partial sum of the gemv exactly, so
        ``(-2 e) . V`` has the bits of ``-2 (e . V)`` (the item vectors are fixed point, multiples of
        2^-f, and a rating error is 0 or far above 2^-1022, so no product lands among the subnormals
        where that could fail).
        """
        u, ratings, hyper = self.u, self.ratings, self.public.hyper
        # ``a.dot(b)`` is ``a @ b`` for these 2-d x 1-d and 1-d x 2-d operands (the same BLAS gemv call),
        # without matmul's generalized-ufunc dispatch.
        errors = v_rows.dot(u)
        np.subtract(ratings, errors, out=errors)
        errors *= -2.0
        grad_u = errors.dot(v_rows)
        if hyper.normalize and ratings.size:
            grad_u /= ratings.size
        new_u = np.multiply(u, 2.0 * hyper.lam)
        new_u += grad_u
        new_u *= hyper.gamma
        np.subtract(u, new_u, out=new_u)
        self.u = project_unit_ball(new_u)
        return np.multiply(errors[:, None], u)

    def _noise_piece(self, request: ItemVectors, where: str) -> np.ndarray:
        if self.public.scenario == "S3":
            if request.eta_pieces is None:
                raise ProtocolViolation(f"{where}: S3 item vectors must carry the pieces of tau^")
            if (request.known_raters is None) == self.public.hyper.normalize:
                raise ProtocolViolation(f"{where}: S3 item vectors carry the known raters k_j exactly when the step is normalized")
            return from_words(self.public.ring, request.eta_pieces, self.public.d, f"{where} eta pieces")
        if self.eta is None:
            raise ProtocolViolation(f"{where}: served before the noise setup")
        return self.eta

    def _masks(self, request: ItemVectors, where: str) -> np.ndarray:
        ring, d = self.public.ring, self.public.d
        if request.masks is not None:
            return from_words(ring, request.masks, d, f"{where} masks")
        if request.mask_seed is not None:
            return expand_masks(ring, request.mask_seed, self.items.size, d)
        raise ProtocolViolation(f"{where}: protected item vectors must carry masks or a mask seed")


__all__ = ["PrivateUser", "TrustingUser"]
