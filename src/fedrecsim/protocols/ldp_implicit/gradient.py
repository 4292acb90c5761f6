"""A user's item gradient (Minto et al. eq. (5)), read only at the entries Algorithm 1 samples.

Algorithm 1 looks at one entry of the M x F gradient per report, so a user sending k reports needs k
entries, not all M*F. `fedrecsim.models.implicit_mf.item_gradient` is the outer product of a per-item
coefficient and the user's profile,

    grad[i, f] = coefficient[i] * x_f,   coefficient[i] = -2 c_ui (1 - x . v_i) for the user's items,
                                         coefficient[i] =  2 (x . v_i)          for every other item,

so `gradient_entries` computes the same M coefficients the same way and multiplies out only the
sampled entries: O(M) instead of O(M F) work and memory, and bit-for-bit the entries of
``item_gradient``. With the same generator state, `fedrecsim.mechanisms.ldp_reports_lazy` on these
entries gives exactly the reports `ldp_reports` gives on the dense gradient (both draw the flat
indices first and the signs second).
"""

from __future__ import annotations

import numpy as np

from ...data.ratings import FloatArray, IntArray
from ...mechanisms.randomized_response import EntryFunction


def gradient_entries(V: FloatArray, x: FloatArray, items: IntArray, conf: FloatArray) -> EntryFunction:
    """The entry function of one user's gradient: ``entries(items[..], factors[..]) -> float[..]``.

    Args:
        V: ``float64[M, F]``, the item matrix the user received.
        x: ``float64[F]``, the user's profile solved for ``V``.
        items: ``int64[m]``, the user's interacted items, distinct.
        conf: ``float64[m]``, their confidences ``1 + alpha r``.
    """
    scores = V @ x
    coefficient = 2.0 * scores
    coefficient[items] = -2.0 * conf * (1.0 - scores[items])

    def entries(sampled_items: np.ndarray, factors: np.ndarray) -> np.ndarray:
        return coefficient[sampled_items] * x[factors]

    return entries


__all__ = ["gradient_entries"]
