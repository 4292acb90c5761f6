"""The ``[protocol]`` table of fedvae; defaults are Polato's (Sec. V-A, Table II for ml-1m) where it gives them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...config import param
from ...errors import ConfigError
from ...mechanisms.adam import AdamHyper
from ...models.multvae import MultVAEHyper

Policy = Literal["scaled_negative", "gaussian", "same_value", "non_finite", "wrong_shape"]


@dataclass(frozen=True)
class FedVAEConfig:
    """FedVAE's keys: the model, Adam, the decay schedule, SecureFilter, attackers, evaluation."""

    users_per_round: int = param(250, ge=1, doc="R: users the server samples each round among the online ones")
    hidden: int = param(600, ge=1, doc="width of the encoder's and the decoder's hidden layer")
    latent: int = param(200, ge=1, doc="size of the latent representation z")
    dropout: float = param(0.5, ge=0, lt=1, doc="input dropout rate while training")
    beta: float = param(0.2, ge=0, doc="weight of the KL term (constant, not annealed)")
    eta: float = param(1e-3, gt=0, doc="Adam's learning rate")
    adam_beta1: float = param(0.9, ge=0, lt=1, doc="Adam's first-moment decay")
    adam_beta2: float = param(0.999, ge=0, lt=1, doc="Adam's second-moment decay")
    adam_epsilon: float = param(1e-8, gt=0, doc="Adam's epsilon")
    gamma: float = param(0.0, ge=0, doc="FedVAE_dec's learning rate multiplier (0 = plain FedVAE)")
    delta: float = param(0.9, ge=0, le=1, doc="FedVAE_dec's decay factor: gamma_t = gamma delta^t, t the epoch")
    secure_filter: Literal["krum", "none"] = param(
        "krum", doc="SecureFilter before averaging: Krum / Multi-Krum, or none (plain averaging)"
    )
    krum_f: float = param(
        0.1, ge=0, lt=0.5, doc="Krum tolerates f = floor(krum_f n) byzantine gradients of the n a round received"
    )
    krum_m: int = param(
        0, ge=0,
        doc="gradients SecureFilter keeps and averages (Algorithm 2): 0 = n - f, Multi-Krum (the default); 1 = single "
        "Krum, one user's gradient per round, which costs accuracy (NDCG@100 0.16-0.19 against 0.39 on ML-1M, "
        "0.33 against 0.39 at 1,200 x 700: the fedvae module docstring); m = Multi-Krum keeping m (at most n - f)",
    )
    sparse: bool = param(False, doc="send W1's gradient as the rows of the kept items and their indices")
    byzantine_fraction: float = param(0.0, ge=0, lt=1, doc="share of the training users that are attackers")
    byzantine_policy: Policy = param(
        "scaled_negative",
        doc="attackers send: -scale x their gradient | N(0, scale^2) noise | scale in every entry (all alike) | "
        "their gradient with a NaN | their gradient one entry short",
    )
    byzantine_scale: float = param(10.0, ge=0, doc="the attack's magnitude (see byzantine_policy)")
    eval_every: int = param(0, ge=0, doc="measure ndcg / recall every this many rounds; 0 = at every epoch's end")
    cutoffs: tuple[int, ...] = param((20, 100), doc="K of ndcg@K and recall@K (Polato: 100, 20 for FilmTrust)")
    baseline: bool = param(True, doc="also train centralized Mult-VAE for as many epochs: the *_multvae metrics")
    baseline_batch: int = param(500, ge=1, doc="the centralized baseline's minibatch of users")

    def __post_init__(self) -> None:
        if not self.cutoffs or any(k < 1 for k in self.cutoffs):
            raise ConfigError("protocol.cutoffs", f"must be a non-empty list of positive integers, got {list(self.cutoffs)}")

    def hyper(self) -> MultVAEHyper:
        return MultVAEHyper(hidden=self.hidden, latent=self.latent, dropout=self.dropout, beta=self.beta)

    def adam(self) -> AdamHyper:
        return AdamHyper(eta=self.eta, beta1=self.adam_beta1, beta2=self.adam_beta2, epsilon=self.adam_epsilon)


__all__ = ["FedVAEConfig", "Policy"]
