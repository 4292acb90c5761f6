"""Mult-VAE (Liang et al., WWW 2018) in numpy with hand-written backpropagation, as FedVAE trains it.

The architecture is Polato's (IJCNN 2021, Sec. III-A and V-A), which is Liang et al.'s:

    x~  = dropout(x / |x|_2)                        input L2-normalized, then dropout (training only)
    h1  = tanh(x~ W1 + b1)                          I -> H        (H = hidden, 600)
    [mu, logvar] = h1 W2 + b2                       H -> 2K       (K = latent, 200)
    z   = mu + eps * exp(logvar / 2), eps ~ N(0, I)  reparameterization (training); z = mu to rank
    h3  = tanh(z W3 + b3)                           K -> H
    a   = h3 W4 + b4,  pi = softmax(a)              H -> I
    loss(x) = -sum_i x_i log pi_i + beta KL(N(mu, diag(exp(logvar))) || N(0, I))

``KL = 1/2 sum_k (-logvar_k + exp(logvar_k) + mu_k^2 - 1)``; beta = 0.2, constant (Polato does not
anneal it). The loss of a batch is the mean of its users' losses; a FedVAE user's gradient is the
gradient of its own loss (a batch of one), so the server's mean of users' gradients is the gradient of
the batch loss.

Choices where the papers leave room, each the reference implementation's (Liang et al.'s code):

* Dropout is inverted dropout after the normalization: a kept entry is scaled by ``1 / (1 - p)``, a
  dropped one is 0; it acts only on stored (non-zero) entries, so a draw is one flag per entry. An
  all-zero row stays zero.
* The likelihood uses the raw values ``x`` (the counts, 1 for binary data), not the normalized input.
* Initialization: weights Glorot-uniform, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``;
  biases ``N(0, 0.001^2)`` (Liang et al. truncate that normal at two deviations; at this scale the
  difference is immaterial). Polato's Algorithm 1 writes ``N(0, 1)`` for every parameter; taken
  literally it saturates every tanh and makes logvar of order 10 at I = 3,520, so we keep the
  reference initialization.
* No weight decay (Liang et al. use none for Mult-VAE; Polato mentions none).

The parameters travel as one flat vector ω; `Layout` says where each tensor lives in it, in the
order W1, b1, W2, b2, W3, b3, W4, b4. W1 comes first because it is the only block whose per-user
gradient is sparse: ``dL/dW1 = x~^T delta1`` is non-zero only in the rows of the user's kept items.

Users' rows come as a `Batch` (CSR: row pointer, item indices, values), their random draws as a
`Noise` (one keep flag per stored entry, one eps row per user); with both fixed the loss is a
deterministic function of ω, which is what the gradient check differentiates. Computations run in
ω's dtype (FedVAE uses float32; the gradient check float64).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse

from fedrecsim.data.ratings import IntArray, UserIndex
from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.adam import AdamHyper, adam_init, adam_step
from fedrecsim.models._checks import check_dimension, check_number

Array = npt.NDArray[np.floating]

#: The standard deviation of the biases' initial normal draws (Liang et al.).
BIAS_INIT_STD = 1e-3


@dataclass(frozen=True)
class MultVAEHyper:
    """Hyper-parameters of Mult-VAE (defaults: Polato Sec. V-A, Liang et al.).

    Attributes:
        hidden: Width H of the encoder's and the decoder's hidden layer (600).
        latent: Size K of the latent representation z (200).
        dropout: Input dropout rate p in [0, 1) during training (0.5).
        beta: Weight of the KL term, constant (0.2).
    """

    hidden: int = 600
    latent: int = 200
    dropout: float = 0.5
    beta: float = 0.2

    def __post_init__(self) -> None:
        check_dimension("protocol.hidden", self.hidden)
        check_dimension("protocol.latent", self.latent)
        check_number("protocol.dropout", self.dropout, positive=False)
        if self.dropout >= 1.0:
            raise ConfigError("protocol.dropout", f"must be < 1 (the share of input entries dropped), got {self.dropout!r}")
        check_number("protocol.beta", self.beta, positive=False)


class Params(NamedTuple):
    """The eight tensors of ω, as views into the flat vector (writing to one writes to ω)."""

    W1: Array
    b1: Array
    W2: Array
    b2: Array
    W3: Array
    b3: Array
    W4: Array
    b4: Array


@dataclass(frozen=True)
class Layout:
    """Where each tensor of ω lives in the flat parameter vector, for ``n_items`` items.

    Invariant: the blocks are contiguous, in `Params` order, and cover ``[0, size)`` exactly; W1 is
    ``[0, first_layer_size)`` and the rest of ω follows it.
    """

    n_items: int
    hidden: int
    latent: int

    def __post_init__(self) -> None:
        check_dimension("data.items", self.n_items)
        check_dimension("protocol.hidden", self.hidden)
        check_dimension("protocol.latent", self.latent)

    @classmethod
    def of(cls, n_items: int, hyper: MultVAEHyper) -> Layout:
        return cls(n_items, hyper.hidden, hyper.latent)

    @functools.cached_property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        items, hidden, latent = self.n_items, self.hidden, self.latent
        return (
            (items, hidden), (hidden,), (hidden, 2 * latent), (2 * latent,),
            (latent, hidden), (hidden,), (hidden, items), (items,),
        )

    @functools.cached_property
    def offsets(self) -> tuple[int, ...]:
        """The start of each block, and ``size`` last."""
        starts = [0]
        for shape in self.shapes:
            starts.append(starts[-1] + int(np.prod(shape)))
        return tuple(starts)

    @property
    def size(self) -> int:
        """The number of parameters P."""
        return self.offsets[-1]

    @property
    def first_layer_size(self) -> int:
        """The size of W1, ``n_items * hidden``: where the rest of ω starts."""
        return self.n_items * self.hidden

    def unpack(self, flat: Array) -> Params:
        """The tensors of ``flat`` (a vector of length ``size``) as views."""
        if flat.ndim != 1 or flat.size != self.size:
            raise ValueError(f"expected a parameter vector of length {self.size}, got shape {flat.shape}")
        offsets = self.offsets
        return Params(*(flat[offsets[k] : offsets[k + 1]].reshape(shape) for k, shape in enumerate(self.shapes)))


@dataclass(frozen=True, eq=False)
class Batch:
    """Users' rows in CSR form: user ``b`` has ``values[indptr[b]:indptr[b + 1]]`` at those ``items``.

    Items within a row are distinct; values are the raw counts x (1 for binary data). The arrays are not
    written after construction: what a pass derives from the rows alone (`rows`, `normalized`, `counts`)
    is computed when the batch is made and kept with it (read-only), so a FedVAE user, which holds its own
    batch of one, derives it once rather than every round -- at set-up, so that these small arrays do not
    sit in the heap between a round's large ones (they would keep the freed messages' memory from
    coalescing into a block a later large array can reuse).
    """

    indptr: IntArray
    items: IntArray
    values: npt.NDArray[np.float64]
    n_items: int
    normalized: npt.NDArray[np.float64] = field(init=False, repr=False)
    """Every stored entry divided by its row's L2 norm (``x / |x|_2``, before dropout; an all-zero row
    stays zero)."""
    counts: npt.NDArray[np.float64] = field(init=False, repr=False)
    """``[B]``: each row's sum of values (the softmax likelihood's weight)."""
    _rows: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows = np.repeat(np.arange(self.size), np.diff(self.indptr))
        squares = np.bincount(rows, weights=self.values * self.values, minlength=self.size)
        norms = np.sqrt(squares)
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        derived = {
            "_rows": rows, "normalized": self.values * scale[rows],
            "counts": np.bincount(rows, weights=self.values, minlength=self.size),
        }
        for name, array in derived.items():
            array.flags.writeable = False
            object.__setattr__(self, name, array)

    @classmethod
    def of_users(cls, index: UserIndex, users: npt.ArrayLike, n_items: int) -> Batch:
        """The rows of ``users`` (in the given order) of a `Ratings`' CSR view."""
        chosen = np.asarray(users, dtype=np.int64)
        lengths = index.indptr[chosen + 1] - index.indptr[chosen]
        indptr = np.zeros(chosen.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        positions = index.positions(chosen)
        return cls(indptr, index.items[positions].astype(np.int64), index.values[positions].astype(np.float64), n_items)

    @classmethod
    def single(cls, items: npt.ArrayLike, values: npt.ArrayLike, n_items: int) -> Batch:
        """One user's row."""
        chosen = np.asarray(items, dtype=np.int64)
        return cls(np.array([0, chosen.size], dtype=np.int64), chosen, np.asarray(values, dtype=np.float64), n_items)

    @property
    def size(self) -> int:
        """The number of users (rows)."""
        return self.indptr.size - 1

    def rows(self) -> IntArray:
        """The row of every stored entry (read-only)."""
        return self._rows

    def subset(self, positions: npt.ArrayLike) -> Batch:
        """The rows at ``positions`` of this batch, in that order."""
        index = UserIndex(self.indptr, self.items, self.values)
        return Batch.of_users(index, positions, self.n_items)


class Noise(NamedTuple):
    """The random draws of one training pass: ``keep[j]`` for stored entry j (dropout), ``eps[b]`` per user."""

    keep: npt.NDArray[np.bool_]
    eps: Array


def draw_noise(rng: np.random.Generator, batch: Batch, hyper: MultVAEHyper, dtype: npt.DTypeLike = np.float32) -> Noise:
    """Dropout flags (an entry is kept with probability ``1 - dropout``), then ``eps ~ N(0, I)``, in that order."""
    keep = rng.random(batch.items.size) >= hyper.dropout
    eps = rng.standard_normal((batch.size, hyper.latent)).astype(dtype, copy=False)
    return Noise(keep, eps)


def init_params(rng: np.random.Generator, layout: Layout, dtype: npt.DTypeLike = np.float32) -> Array:
    """A fresh ω: Glorot-uniform weights and ``N(0, BIAS_INIT_STD^2)`` biases, drawn block by block in order."""
    flat = np.empty(layout.size, dtype=dtype)
    for block, shape in zip(layout.unpack(flat), layout.shapes):
        if len(shape) == 2:
            bound = np.sqrt(6.0 / (shape[0] + shape[1]))
            block[...] = rng.uniform(-bound, bound, size=shape)
        else:
            block[...] = rng.normal(0.0, BIAS_INIT_STD, size=shape)
    return flat


class _Pass(NamedTuple):
    """What a forward pass keeps for the backward one (``inputs``: x~ of every stored entry)."""

    inputs: Array
    h1: Array
    mu: Array
    logvar: Array
    std: Array
    z: Array
    h3: Array
    log_pi: Array
    losses: Array


def _csr(inputs: Array, batch: Batch) -> scipy.sparse.csr_matrix:
    """The batch's rows with ``inputs`` as their values, as a sparse ``[B, I]`` matrix."""
    return scipy.sparse.csr_matrix((inputs, batch.items, batch.indptr), shape=(batch.size, batch.n_items))


def _check_batch(batch: Batch, layout: Layout) -> None:
    if batch.n_items != layout.n_items:
        raise ValueError(f"the batch has {batch.n_items} items, the model {layout.n_items}")


def _forward(P: Params, batch: Batch, noise: Noise | None, hyper: MultVAEHyper) -> _Pass:
    """The forward pass; ``noise`` None is the evaluation pass (no dropout, z = mu)."""
    dtype = P.W1.dtype
    rows = batch.rows()
    normalized = batch.normalized
    if noise is not None:
        normalized = np.where(noise.keep, normalized / (1.0 - hyper.dropout), 0.0)
    inputs = normalized.astype(dtype)
    if batch.size == 1:
        # One user (a FedVAE client): its few rows of W1, without building a sparse matrix.
        pre1 = (inputs @ P.W1[batch.items])[None, :]
    else:
        pre1 = _csr(inputs, batch) @ P.W1
    h1 = np.tanh(pre1 + P.b1)
    encoded = h1 @ P.W2 + P.b2
    latent = hyper.latent
    mu, logvar = encoded[:, :latent], encoded[:, latent:]
    std = np.exp(0.5 * logvar)
    z = mu + noise.eps * std if noise is not None else mu
    h3 = np.tanh(z @ P.W3 + P.b3)
    logits = h3 @ P.W4 + P.b4
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_pi = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    picked = np.bincount(rows, weights=batch.values * log_pi[rows, batch.items], minlength=batch.size)
    kl = 0.5 * (-logvar + np.exp(logvar) + mu * mu - 1.0).sum(axis=1)
    losses = (-picked + hyper.beta * kl).astype(dtype)
    return _Pass(inputs, h1, mu, logvar, std, z, h3, log_pi, losses)


class _Deltas(NamedTuple):
    """Per-user gradients of the user's own loss with respect to each layer's pre-activation."""

    logits: Array
    pre3: Array
    encoded: Array
    pre1: Array


def _backward(P: Params, batch: Batch, noise: Noise, hyper: MultVAEHyper, state: _Pass) -> _Deltas:
    """d loss_b / d (pre-activations) for every user b (no 1/B: each row is one user's own loss)."""
    rows = batch.rows()
    counts = batch.counts.astype(P.W1.dtype)
    d_logits = np.exp(state.log_pi)
    d_logits *= counts[:, None]
    # A row holds each item once, so the fancy-indexed subtraction touches every cell at most once.
    d_logits[rows, batch.items] -= batch.values.astype(P.W1.dtype)
    d_pre3 = (d_logits @ P.W4.T) * (1.0 - state.h3 * state.h3)
    d_z = d_pre3 @ P.W3.T
    beta = hyper.beta
    d_mu = d_z + beta * state.mu
    d_logvar = d_z * noise.eps * (0.5 * state.std) + (0.5 * beta) * (np.exp(state.logvar) - 1.0)
    d_encoded = np.concatenate([d_mu, d_logvar], axis=1)
    d_pre1 = (d_encoded @ P.W2.T) * (1.0 - state.h1 * state.h1)
    return _Deltas(d_logits, d_pre3, d_encoded, d_pre1)


def losses(flat: Array, layout: Layout, batch: Batch, noise: Noise | None, hyper: MultVAEHyper) -> Array:
    """Each user's loss ``-log p(x | z) + beta KL`` (``noise`` None: the evaluation pass, z = mu)."""
    _check_batch(batch, layout)
    return _forward(layout.unpack(flat), batch, noise, hyper).losses


def batch_gradient(
    flat: Array, layout: Layout, batch: Batch, noise: Noise, hyper: MultVAEHyper
) -> tuple[float, Array]:
    """The mean loss over the batch's users and its gradient with respect to ω (flat, ω's dtype)."""
    _check_batch(batch, layout)
    P = layout.unpack(flat)
    state = _forward(P, batch, noise, hyper)
    deltas = _backward(P, batch, noise, hyper, state)
    scale = 1.0 / batch.size
    gradient = np.empty_like(flat)
    G = layout.unpack(gradient)
    G.W1[...] = (_csr(state.inputs, batch).T @ deltas.pre1) * scale
    G.b1[...] = deltas.pre1.sum(axis=0) * scale
    G.W2[...] = (state.h1.T @ deltas.encoded) * scale
    G.b2[...] = deltas.encoded.sum(axis=0) * scale
    G.W3[...] = (state.z.T @ deltas.pre3) * scale
    G.b3[...] = deltas.pre3.sum(axis=0) * scale
    G.W4[...] = (state.h3.T @ deltas.logits) * scale
    G.b4[...] = deltas.logits.sum(axis=0) * scale
    return float(state.losses.mean()), gradient


@dataclass(frozen=True)
class UserGradients:
    """Every user's gradient of its own loss, the W1 block kept sparse.

    Attributes:
        losses: ``[B]``, each user's loss.
        rows: ``[nnz, H]``: row ``j`` is the W1-gradient row of stored entry ``j``'s item for its user
            (all zeros for a dropped entry); every other W1 row of a user's gradient is zero.
        rest: ``[B, P - I * H]``: the rest of each user's gradient (b1, W2, ..., b4, in ω's order).
        batch, keep: the users' rows and which stored entries were kept.
    """

    losses: Array
    rows: Array
    rest: Array
    batch: Batch
    keep: npt.NDArray[np.bool_]

    def kept(self, user: int) -> tuple[IntArray, Array]:
        """User ``user``'s non-zero W1 rows: the kept items (ascending) and their gradient rows."""
        start, stop = self.batch.indptr[user], self.batch.indptr[user + 1]
        kept = np.flatnonzero(self.keep[start:stop]) + start
        return self.batch.items[kept], self.rows[kept]


def user_gradients(
    flat: Array, layout: Layout, batch: Batch, noise: Noise, hyper: MultVAEHyper, rest: Array | None = None
) -> UserGradients:
    """Each user's gradient of its own loss (one forward/backward pass for the whole batch).

    The gradient of user b is, layer by layer, the outer product of the layer's input and b's delta:
    this computes every outer product, ``B * P`` numbers in all. A FedVAE user calls it with a batch
    of one. ``rest``, if given, is the ``[B, P - I * H]`` array the non-W1 blocks are written into.
    """
    _check_batch(batch, layout)
    P = layout.unpack(flat)
    state = _forward(P, batch, noise, hyper)
    deltas = _backward(P, batch, noise, hyper, state)
    # One user: every entry's delta is the same row, broadcast rather than gathered.
    first_rows = state.inputs[:, None] * (deltas.pre1 if batch.size == 1 else deltas.pre1[batch.rows()])
    offsets = [offset - layout.first_layer_size for offset in layout.offsets[1:]]
    shape = (batch.size, layout.size - layout.first_layer_size)
    if rest is None:
        rest = np.empty(shape, dtype=flat.dtype)
    elif rest.shape != shape or rest.dtype != flat.dtype:
        raise ValueError(f"rest must be a {flat.dtype} array of shape {shape}, got {rest.dtype} {rest.shape}")
    H, K2, K, I = layout.hidden, 2 * layout.latent, layout.latent, layout.n_items

    def block(k: int, *dims: int) -> Array:
        # A column slice of a row-major array, its last axis split: always a view, never a copy.
        return rest[:, offsets[k] : offsets[k + 1]].reshape(batch.size, *dims)

    block(0, H)[...] = deltas.pre1
    np.multiply(state.h1[:, :, None], deltas.encoded[:, None, :], out=block(1, H, K2))
    block(2, K2)[...] = deltas.encoded
    np.multiply(state.z[:, :, None], deltas.pre3[:, None, :], out=block(3, K, H))
    block(4, H)[...] = deltas.pre3
    np.multiply(state.h3[:, :, None], deltas.logits[:, None, :], out=block(5, H, I))
    block(6, I)[...] = deltas.logits
    return UserGradients(state.losses, first_rows, rest, batch, noise.keep)


def dense_user_gradients(
    flat: Array, layout: Layout, batch: Batch, noise: Noise, hyper: MultVAEHyper, out: Array | None = None
) -> Array:
    """``[B, P]``: every user's whole gradient vector (`user_gradients` with W1 filled in densely).

    ``out``, if given, is the ``[B, P]`` array written (and returned).
    """
    first = layout.first_layer_size
    if out is None:
        out = np.empty((batch.size, layout.size), dtype=flat.dtype)
    elif out.shape != (batch.size, layout.size) or out.dtype != flat.dtype:
        shape = (batch.size, layout.size)
        raise ValueError(f"out must be a {flat.dtype} array of shape {shape}, got {out.dtype} {out.shape}")
    gradients = user_gradients(flat, layout, batch, noise, hyper, rest=out[:, first:])
    W1 = out[:, :first].reshape(batch.size, layout.n_items, layout.hidden)
    W1[...] = 0.0
    W1[batch.rows(), batch.items] = gradients.rows
    return out


def scores(flat: Array, layout: Layout, batch: Batch, hyper: MultVAEHyper) -> Array:
    """``[B, I]``: the evaluation pass's log-probabilities log pi (no dropout, z = mu), the ranking scores."""
    _check_batch(batch, layout)
    P = layout.unpack(flat)
    state = _forward(P, batch, None, hyper)
    return state.log_pi


def train_centralized(
    flat: Array,
    layout: Layout,
    data: Batch,
    hyper: MultVAEHyper,
    adam: AdamHyper,
    *,
    epochs: int,
    batch_size: int,
    rng: np.random.Generator,
) -> Iterator[Array]:
    """The non-federated baseline: Mult-VAE trained on minibatches of users with Adam.

    Each epoch visits the users of ``data`` in a fresh random order, ``batch_size`` at a time (the last
    minibatch may be smaller), draws each minibatch's `Noise` and takes one Adam step on its mean
    gradient. Yields a copy of ω after every epoch; ``flat`` itself is not modified.
    """
    check_dimension("epochs", epochs)
    check_dimension("batch_size", batch_size)
    _check_batch(data, layout)
    params = flat.copy()
    state = adam_init(params)
    for _ in range(epochs):
        order = rng.permutation(data.size)
        for start in range(0, data.size, batch_size):
            minibatch = data.subset(order[start : start + batch_size])
            noise = draw_noise(rng, minibatch, hyper, params.dtype)
            _, gradient = batch_gradient(params, layout, minibatch, noise, hyper)
            params, state = adam_step(params, gradient, state, adam)
        yield params.copy()


__all__ = [
    "BIAS_INIT_STD",
    "Batch",
    "Layout",
    "MultVAEHyper",
    "Noise",
    "Params",
    "UserGradients",
    "batch_gradient",
    "dense_user_gradients",
    "draw_noise",
    "init_params",
    "losses",
    "scores",
    "train_centralized",
    "user_gradients",
]
