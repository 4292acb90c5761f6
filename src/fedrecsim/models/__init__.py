"""Pure numpy learners the protocols run inside their parties, and their centralized references.

`mf`: explicit matrix factorization after Hua et al. (per-user and per-item steps, a vectorized
full-batch reference, per-rating SGD). `implicit_mf`: implicit-feedback MF after Ammad-ud-din et al. /
Minto et al. (closed-form user profiles, full item-matrix gradients, a vectorized reference). `nmf`:
non-negative MF with a ridge penalty (Ribero et al. eq. 2) and per-user NNLS. `kmeans`: Lloyd's k-means.
"""

from fedrecsim.models.implicit_mf import (
    ImplicitHyper,
    all_user_factors,
    confidence,
    implicit_loss,
    implicit_round,
    item_gradient,
    server_step,
    user_factors,
)
from fedrecsim.models.kmeans import kmeans
from fedrecsim.models.mf import (
    CentralizedMF,
    MFHyper,
    item_step,
    predict,
    sequential_sgd_epoch,
    unit_rows,
    user_step,
)
from fedrecsim.models.nmf import NMFHyper, initial_factors, nmf_dense, nmf_observed, nnls_users, observed_matrix

__all__ = [
    "CentralizedMF",
    "ImplicitHyper",
    "MFHyper",
    "NMFHyper",
    "all_user_factors",
    "confidence",
    "implicit_loss",
    "implicit_round",
    "initial_factors",
    "item_gradient",
    "item_step",
    "kmeans",
    "nmf_dense",
    "nmf_observed",
    "nnls_users",
    "observed_matrix",
    "predict",
    "sequential_sgd_epoch",
    "server_step",
    "unit_rows",
    "user_factors",
    "user_step",
]
