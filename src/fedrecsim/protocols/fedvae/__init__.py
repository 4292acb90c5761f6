"""Polato's federated Mult-VAE (FedVAE, FedVAE_dec) with Krum against byzantine users."""

from .config import FedVAEConfig
from .protocol import PROTOCOL

__all__ = ["PROTOCOL", "FedVAEConfig"]
