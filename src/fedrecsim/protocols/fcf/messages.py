"""The FCF message set -- the protocol's sequence diagram in code.

    user   -> server  fcf.register        once per (re)join: the items the user rated
    server -> user    fcf.item_vectors    each round, to each selected user: V rows of its items
    user   -> server  fcf.item_gradients  the user's gradient rows for those items
    server -> user    fcf.model           implicit feedback: the whole item matrix V
    user   -> server  fcf.model_gradient  implicit feedback: the user's full M x d gradient

This is the non-private baseline: the server learns each user's rated-item set and per-user gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...network.wire import Array, message


@message("fcf.register")
@dataclass(frozen=True)
class Register:
    """The items this user rated (sorted, unique); the server sends their vectors each round."""

    items: Array("int32", ndim=1)

    def validate(self) -> None:
        if self.items.size and (self.items.min() < 0 or np.any(np.diff(self.items) <= 0)):
            raise ValueError("items must be non-negative, sorted and unique")


@message("fcf.item_vectors")
@dataclass(frozen=True)
class ItemVectors:
    """Round ``round``: the current rows of V for the user's registered items, in registration order."""

    round: int
    vectors: Array("float64", ndim=2)


@message("fcf.item_gradients")
@dataclass(frozen=True)
class ItemGradients:
    """Round ``round``: the user's gradient rows, aligned with the item_vectors it answers."""

    round: int
    gradients: Array("float64", ndim=2)


@message("fcf.model")
@dataclass(frozen=True)
class Model:
    """Round ``round``: the whole item matrix V (implicit feedback: every item enters the loss)."""

    round: int
    item_factors: Array("float64", ndim=2)


@message("fcf.model_gradient")
@dataclass(frozen=True)
class ModelGradient:
    """Round ``round``: the user's gradient with respect to the whole item matrix."""

    round: int
    gradient: Array("float64", ndim=2)
