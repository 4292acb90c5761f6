"""Non-private federated matrix factorization, the baseline of every private protocol."""

from .protocol import PROTOCOL, FCFConfig

__all__ = ["PROTOCOL", "FCFConfig"]
