"""FedVAE's parties: users that compute their gradient on their own row, attackers, and the server.

A user holds its row r_u and nothing else. Each time it is sampled it receives ω, draws its dropout
flags and eps from its own generator, runs one forward/backward pass of Mult-VAE on r_u (Polato Sec.
IV-A: a single pass) and returns the gradient of its own loss, dense or with W1 as rows
(`fedrecsim.models.multvae`). A user that crashes mid-round is silent for the round. It answers each
round once: a request for a round it already answered (a copy the network duplicated, or one a newer
request overtook) is ignored, so a duplicate costs it no draw.

The server samples ``R`` of the users it knows to be online (uniformly, without replacement; all of
them if fewer), sends each ω (encoded once), waits for their gradients until the round's deadline,
validates every one as it arrives (`validation`; a rejected one is recorded in the ledger and its
sender's reply is spent), and runs GlobalUpdate on the accepted ones in sorted party order
(`aggregation`): without SecureFilter it sums each accepted gradient as it comes, in party order
(`OrderedSum`: the same float32 sum as adding them up after the deadline), and keeps neither a list of
them nor the replies (`Actor.gather` with ``keep=False``): the server holds the sum, at most a group of
gradients ready to add and those waiting for an earlier party's, never the round's R. A dense
gradient's numbers (finite, norm bound) are checked in the same pass over it that adds it to the sum,
a group at a time: the gather learns those verdicts from ``settle`` (`Actor.gather`, `PENDING`) before
it waits again, so a gradient refused there is recorded at the instant it arrived, in the same words,
and leaves no trace in the sum (`OrderedSum`). Krum scores every
gradient against every other, so with Krum the validated gradients are kept until the deadline. ω and Adam's moments are the server's own
arrays, stepped in place: ω is encoded into the round's requests (bytes of their own) before it moves.
It receives only its run's gradient kind and membership messages; any other kind is rejected by the
network. It never learns which users are attackers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...actors.actor import PENDING, Pending
from ...actors.membership import Join, Leave
from ...actors.server import Server
from ...actors.user import User
from ...errors import ProtocolViolation
from ...mechanisms.adam import AdamHyper, adam_init
from ...models.multvae import Batch, Layout, MultVAEHyper, dense_user_gradients, draw_noise, user_gradients
from ...network.party import Party
from .aggregation import FilterSettings, OrderedSum, Selection, descend, global_update, unfiltered
from .byzantine import as_message, forge
from .config import Policy
from .messages import Gradient, Model, SparseGradient
from .validation import DENSE, InvalidGradient, dense_values, validated_gradient, values_fault


class FedVAEUser(User):
    """An honest user: its row (``items``, ``values``) never leaves it; only gradients do."""

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, items: np.ndarray, values: np.ndarray, layout: Layout, hyper: MultVAEHyper, sparse: bool
    ) -> None:
        super().__init__(party, network, rng)
        self.batch = Batch.single(items, values, layout.n_items)
        self.layout = layout
        self.hyper = hyper
        self.sparse = sparse
        self.answered = 0
        self.reply: Gradient | SparseGradient | None = None
        """The round's gradient while the user spends its compute time (straggler model), then None."""

    async def run(self) -> None:
        await self.resume()

    async def resume(self) -> None:
        if await self.compute_rest():
            self._send_reply()
        while await self._answer():
            pass

    def _send_reply(self) -> None:
        reply, self.reply = self.reply, None
        self.send(self.server, reply)

    async def _answer(self) -> bool:
        """Answer one round's request (ignore one for a round already answered); False once crashed. Its ω
        and gradient (18 MB each at ml-1m's size) are dropped when it returns, not kept while the user
        waits for the next round."""
        request = (await self.recv(Model, deadline=self.horizon_s)).body
        if request.round <= self.answered:
            return True
        if self.crashes_in(request.round):
            return False
        if request.weights.shape != (self.layout.size,):
            raise ProtocolViolation(
                f"{self.party} expected parameters of length {self.layout.size}, received {request.weights.size} "
                f"in round {request.round}"
            )
        self.reply = self.contribution(request.round, request.weights)
        self.answered = request.round
        del request
        await self.compute()
        self._send_reply()
        return True

    def contribution(self, round_index: int, weights: np.ndarray) -> Gradient | SparseGradient:
        """LocalGradient(r_u): the gradient of this user's loss at ``weights``, in the run's format."""
        noise = draw_noise(self.rng, self.batch, self.hyper)
        if self.sparse:
            gradients = user_gradients(weights, self.layout, self.batch, noise, self.hyper)
            items, rows = gradients.kept(0)
            return SparseGradient(round_index, items.astype(np.int32), rows, gradients.rest[0])
        (dense,) = dense_user_gradients(weights, self.layout, self.batch, noise, self.hyper)
        return Gradient(round_index, dense)


class ByzantineUser(FedVAEUser):
    """An attacker: computes its honest gradient, then sends what its policy forges from it (`byzantine`)."""

    def __init__(self, *args, policy: Policy, scale: float, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.policy = policy
        self.scale = scale

    def contribution(self, round_index: int, weights: np.ndarray) -> Gradient | SparseGradient:
        noise = draw_noise(self.rng, self.batch, self.hyper)
        (honest,) = dense_user_gradients(weights, self.layout, self.batch, noise, self.hyper)
        return as_message(round_index, forge(self.policy, honest, self.scale, self.rng), self.layout, self.sparse)


@dataclass(frozen=True)
class RoundReport:
    """What the server saw and did in one round.

    Attributes:
        selected: the users sent ω; ``accepted`` those whose gradient passed validation (sorted);
            ``missing`` those that did not answer by the deadline; ``rejected`` why the others failed.
        kept: the accepted users whose gradients SecureFilter kept (empty when no update was applied).
        selection: SecureFilter's outcome (n, f, kept positions).
    """

    selected: tuple[Party, ...]
    accepted: tuple[Party, ...]
    missing: tuple[Party, ...]
    rejected: tuple[InvalidGradient, ...]
    kept: tuple[Party, ...]
    selection: Selection

    @property
    def applied(self) -> bool:
        return self.selection.kept is not None


class FedVAEServer(Server):
    """Holds ω and Adam's state; samples, validates, filters, averages, steps.

    ``filter_s`` is the wall time SecureFilter's Krum took over every round so far (`Selection.seconds`);
    it is an attribute, so a checkpoint carries it into the resumed run.

    Args:
        omega: ω_0; the server owns it from here on.
        users_per_round: R.
        settings: SecureFilter's configuration.
        sparse: whether users send `SparseGradient` (else `Gradient`); the server receives only that kind
            (and membership messages).
    """

    receives = (Gradient, SparseGradient, Join, Leave)

    def __init__(  # type: ignore[no-untyped-def]
        self, party, network, rng, layout: Layout, omega: np.ndarray, *, users_per_round: int, adam: AdamHyper,
        settings: FilterSettings, sparse: bool,
    ) -> None:
        super().__init__(party, network, rng)
        self.layout = layout
        self.omega = omega
        self.adam = adam_init(omega)
        self.adam_hyper = adam
        self.users_per_round = users_per_round
        self.settings = settings
        self.filter_s = 0.0
        self.kind = SparseGradient if sparse else Gradient
        network.expect(party, (kind.KIND for kind in (self.kind, Join, Leave)))

    def select(self, candidates: list[Party]) -> list[Party]:
        """``R`` of ``candidates`` (sorted), uniformly without replacement; all of them if there are fewer."""
        if len(candidates) <= self.users_per_round:
            return candidates
        chosen = self.rng.choice(len(candidates), size=self.users_per_round, replace=False)
        return sorted(candidates[position] for position in chosen)

    async def round(self, round_index: int, gamma_t: float, deadline: float) -> RoundReport:
        self.update_membership()
        selected = self.select(sorted(self.members))
        self.send_many(selected, Model(round_index, self.omega))
        # Each reply is validated as it arrives (the gather keeps none). Without a filter it is summed then
        # too, in party order (`OrderedSum`), and dropped; a dense gradient's numbers are checked in the pass
        # that sums them, so its verdict comes from `settle`. Krum needs every gradient at once: kept for it.
        krum = self.settings.kind == "krum"
        total = OrderedSum(selected)
        valid: dict[Party, np.ndarray] = {}
        faults: dict[Party, InvalidGradient] = {}
        pending: list[Party] = []

        def invalid(party: Party, body: Gradient | SparseGradient) -> str | Pending | None:
            try:
                if krum:
                    valid[party] = validated_gradient(party, round_index, body, self.layout)
                elif isinstance(body, Gradient):
                    total.add(party, dense_values(party, round_index, body, self.layout), checked=False)
                    pending.append(party)
                    return PENDING
                else:
                    total.add(party, validated_gradient(party, round_index, body, self.layout))
            except InvalidGradient as fault:
                faults[party] = fault
                total.skip(party)
                return fault.problem
            return None

        def settle(final: bool) -> list[tuple[Party, str | None]]:
            refused = dict(total.settle(final))
            verdicts: list[tuple[Party, str | None]] = []
            for party in pending:
                gradient = refused.get(party)
                if gradient is not None:
                    faults[party] = values_fault(party, round_index, gradient, DENSE)
                verdicts.append((party, None if gradient is None else faults[party].problem))
            pending.clear()
            return verdicts

        replies = await self.gather(
            self.kind, selected, deadline=deadline, accept=lambda reply: reply.round == round_index, validate=invalid,
            settle=settle, keep=False,
        )
        accepted = replies.accepted
        rejected = tuple(faults[party] for party in sorted(faults))
        if krum:
            gradients = [valid.pop(party) for party in accepted]
            update = global_update(self.omega, gradients, self.adam, self.adam_hyper, self.settings, gamma_t)
        else:
            update = descend(self.omega, total.mean(), self.adam, self.adam_hyper, unfiltered(total.count), gamma_t)
        self.omega, self.adam = update.omega, update.adam
        self.filter_s += update.selection.seconds
        kept = () if update.selection.kept is None else tuple(accepted[int(p)] for p in update.selection.kept)
        return RoundReport(tuple(selected), tuple(accepted), tuple(replies.missing), rejected, kept, update.selection)


__all__ = ["ByzantineUser", "FedVAEServer", "FedVAEUser", "RoundReport"]
