"""Ribero et al. (Pattern Recognition 2022): DP prototypes across silos, two communication rounds."""

from .protocol import PROTOCOL, PrototypesConfig

__all__ = ["PROTOCOL", "PrototypesConfig"]
