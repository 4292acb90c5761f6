"""Minto et al. (RecSys 2021): local-DP federated implicit MF, reports shuffled by a proxy network."""

from .protocol import PROTOCOL, LDPImplicitConfig

__all__ = ["PROTOCOL", "LDPImplicitConfig"]
