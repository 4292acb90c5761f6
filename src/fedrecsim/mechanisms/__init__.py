"""Pure, vectorized building blocks of the private protocols: noise, randomized response, ring arithmetic.

Nothing here owns state or randomness: every random function takes the caller's
`numpy.random.Generator`, and bad parameters raise `fedrecsim.errors.ConfigError` naming the function
and the argument.

* `Ring` -- fixed-point arithmetic in Z_{2^b} for masking (Hua et al., "mod P").
* `theorem1_noise`, `laplace_noise`, `laplace_scale`, `exponential_h`, `laplace_piece` -- Hua et al.'s
  objective-perturbation noise (Theorem 1, Lemma 1, Theorem 2 / eq. (12)).
* `bit_probability`, `report_magnitude`, `ldp_reports`, `ldp_reports_batch`, `ldp_reports_lazy`,
  `estimate_mean_gradient`, `likelihood_ratio_bound`, `output_distribution` -- Minto et al.'s
  Algorithm 1 and eq. (9).
* `shuffle_epsilon`, `ShuffleBound`, `compose_pure`, `compose_approximate` -- privacy accounting.
* `AdamHyper`, `AdamState`, `adam_init`, `adam_step` -- Adam, as FedVAE's server steps (Polato, Alg. 2).
* `pairwise_squared_distances`, `krum_scores`, `krum_select` -- Krum and Multi-Krum (Blanchard et al.).
"""

from fedrecsim.mechanisms.adam import AdamHyper, AdamState, adam_init, adam_step
from fedrecsim.mechanisms.krum import krum_scores, krum_select, pairwise_squared_distances
from fedrecsim.mechanisms.laplace import (
    exponential_h,
    laplace_noise,
    laplace_piece,
    laplace_scale,
    theorem1_noise,
)
from fedrecsim.mechanisms.randomized_response import (
    EntryFunction,
    bit_probability,
    estimate_mean_gradient,
    ldp_reports,
    ldp_reports_batch,
    ldp_reports_lazy,
    likelihood_ratio_bound,
    output_distribution,
    report_magnitude,
)
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.mechanisms.shuffle import (
    ShuffleBound,
    compose_approximate,
    compose_pure,
    shuffle_epsilon,
)

__all__ = [
    "AdamHyper",
    "AdamState",
    "EntryFunction",
    "Ring",
    "ShuffleBound",
    "adam_init",
    "adam_step",
    "bit_probability",
    "compose_approximate",
    "compose_pure",
    "estimate_mean_gradient",
    "exponential_h",
    "krum_scores",
    "krum_select",
    "laplace_noise",
    "laplace_piece",
    "laplace_scale",
    "ldp_reports",
    "ldp_reports_batch",
    "ldp_reports_lazy",
    "likelihood_ratio_bound",
    "output_distribution",
    "pairwise_squared_distances",
    "report_magnitude",
    "shuffle_epsilon",
    "theorem1_noise",
]
