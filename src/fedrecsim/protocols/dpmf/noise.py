"""The noise of DP-MF: eta (objective perturbation) and rho~ (the difference-attack defence), in pieces.

Both are built with Theorem 2 / eq. (12): with H ~ Exp(1) shared by the k parties that add pieces of one
noise element, and each party's own C ~ N(0, 1/k), the pieces ``b sqrt(2H) C`` sum to Laplace(0, b). With
b = 2 Delta sqrt(d) / eps (`fedrecsim.mechanisms.laplace_scale`) the sum is Lemma 1's noise, which makes
the published V eps-differentially private. (The paper says the pieces sum to Theorem 1's density; they
sum to Lemma 1's, which is what the distributed scenarios therefore provide.)

- eta_j: S2 -- the k_j raters of item j each fix one piece before iteration 1 with the recommender's H_j;
  S3 -- the k users chosen in the initialization phase do, and the recommender keeps the masked sum.
- rho~_j(t): every iteration, each of the k'_j users served for item j adds a fresh piece, so that the sum
  over the k'_j has the Laplace scale. Its H_j(t) comes from `PublicCoin`, derived from a per-run public
  seed every party knows: it costs no bytes on the wire.

Normalization (`fedrecsim.protocols.dpmf.protocol` states the choice): the recommender
divides an item's unmasked aggregate -- gradients, eta and rho~ together -- by its number of contributors,
exactly as objective (6) applies its 1/M to the error term and to eta alike; so the noise keeps the
paper's ratio to the gradient.
"""

from __future__ import annotations

import numpy as np

from ...mechanisms.laplace import exponential_h, laplace_noise, theorem1_noise
from ...seeding import Stream, generator

# Sub-stream of Stream.PROTOCOL for the public H_j(t) of rho~ (the first id after the stream tags the use).
_PUBLIC_RHO = 1


def pieces(rng: np.random.Generator, h: np.ndarray, parties: np.ndarray, scale: float) -> np.ndarray:
    """One party's pieces ``scale sqrt(2 h) C`` with ``C ~ N(0, 1/k)``, where row r has its own k = parties[r].

    This is `fedrecsim.mechanisms.laplace_piece` for a different k per row, in the few numpy calls a
    user makes every iteration: folding 1/k into H gives the same distribution for every row at once,
    ``sqrt(2 h / k) N(0, 1) = sqrt(2 h) N(0, 1/k)``. ``h`` and ``parties`` come from messages the wire
    validated (their ``validate`` requires H >= 0 and k >= 1) or from the public coin, so they are not
    checked again.

    Args:
        rng: the party's own generator (C is private to it).
        h: ``float[r, d]``, the shared H of each row.
        parties: ``int[r]``, how many parties add a piece to the row's noise (>= 1).
        scale: the Laplace scale b the k pieces sum to.
    """
    # scale sqrt(2 h / k) N(0, 1), each step in place on one fresh array (the same operations in the same
    # order as the expression, so the same bits). k is converted to float64 (exactly) before it divides:
    # dividing by the integers broadcast along rows would convert them inside the loop, at several times
    # the cost of the division on a user's few rows.
    noise = 2.0 * h
    noise /= parties.astype(np.float64)[:, None]
    np.sqrt(noise, out=noise)
    noise *= scale
    noise *= rng.standard_normal(h.shape)
    return noise


class PublicCoin:
    """H_j(t) ~ Exp(1)^d for the rho~ pieces of iteration t, a function of a public per-run seed only.

    Every party derives the same matrix from ``(seed, t)``; the simulator computes it once per iteration
    and hands all users the same read-only array, which is what each would compute on its own.
    """

    def __init__(self, seed: int, n_items: int, d: int) -> None:
        self.seed = seed
        self.shape = (n_items, d)
        self._round = -1
        self._h = np.empty(self.shape)

    def h(self, round_index: int) -> np.ndarray:
        """``float[n_items, d]``, read-only: the public H of iteration ``round_index``."""
        if round_index != self._round:
            h = exponential_h(generator(self.seed, Stream.PROTOCOL, _PUBLIC_RHO, round_index), self.shape)
            h.setflags(write=False)
            self._h, self._round = h, round_index
        return self._h


def central_noise(rng: np.random.Generator, mechanism: str, n_items: int, d: int, epsilon: float, delta: float) -> np.ndarray:
    """S1: the trusted recommender's eta for every item, per Theorem 1 (``theorem1``) or Lemma 1 (``laplace``)."""
    draw = theorem1_noise if mechanism == "theorem1" else laplace_noise
    return draw(rng, n_items, d, epsilon, delta)


__all__ = ["PublicCoin", "central_noise", "pieces"]
