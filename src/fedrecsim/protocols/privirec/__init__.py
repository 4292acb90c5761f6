"""PriviRec and PriviRec-k (Nicolas et al.): GF-CF's graph filters computed over secure aggregation."""

from .protocol import PROTOCOL, PriviRecConfig

__all__ = ["PROTOCOL", "PriviRecConfig"]
