"""Hua, Xia and Zhong's differentially private matrix factorization (IJCAI 2015): S1, S2 and S3."""

from .config import DPMFConfig
from .protocol import PROTOCOL

__all__ = ["PROTOCOL", "DPMFConfig"]
