"""The FedVAE message set -- Polato's Algorithm 1 as a sequence diagram.

    server -> user    fedvae.model            each round, to each of the R sampled users: the parameters ω
    user   -> server  fedvae.gradient         the user's gradient of its own loss (all of ω's P entries)
    user   -> server  fedvae.sparse_gradient  the same with W1 as rows: only the rows of its kept items

Arrays are float32 (ω has 4.6 million entries at MovieLens-1M's 3,520 items: 18 MB a message).

The gradient messages are deliberately loose on the wire: dtype and ndim are checked, but not lengths,
index ranges or NaN/Inf. A real server cannot trust a client's encoder, so the server validates every
gradient itself (`validation`) and rejects a bad one; a byzantine user's malformed gradient must reach
it to be rejected, not crash its sender.

A gradient's float arrays are declared ``aligned=False``: the server reads each for its check (`numpy.vdot`
of each block) and its sum (elementwise adds), both of which take a misaligned read-only view of the
message's bytes at full speed or nearly, so the trusted decoder hands them over without the aligned
copy it makes otherwise (where the elements start in the message depends on the lengths of the sender's
index and of the round number as msgpack writes them: for most senders not at a multiple of 4). A dense
gradient of 64 KiB or more is aligned in its message all the same: `wire.encode` puts a pad before the
bytes of a message whose one array is that large (`fedrecsim.network.wire`, "Alignment"), so the server's
adds take numpy's aligned loop. ω stays aligned: users multiply it in BLAS.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...network.wire import Array, message


@message("fedvae.model")
@dataclass(frozen=True)
class Model:
    """Round ``round``: the current parameters ω, flat in `fedrecsim.models.multvae.Layout` order."""

    round: int
    weights: Array("float32", ndim=1)


@message("fedvae.gradient")
@dataclass(frozen=True)
class Gradient:
    """Round ``round``: a user's gradient with respect to ω, flat in the same order."""

    round: int
    values: Array("float32", ndim=1, allow_nan=True, aligned=False)


@message("fedvae.sparse_gradient")
@dataclass(frozen=True)
class SparseGradient:
    """Round ``round``: a gradient whose W1 block is zero outside the rows of ``items`` (ascending).

    ``rows[j]`` is the W1 row of item ``items[j]``; ``rest`` is the gradient of b1, W2, ..., b4.
    """

    round: int
    items: Array("int32", ndim=1)
    rows: Array("float32", ndim=2, allow_nan=True, aligned=False)
    rest: Array("float32", ndim=1, allow_nan=True, aligned=False)


__all__ = ["Gradient", "Model", "SparseGradient"]
