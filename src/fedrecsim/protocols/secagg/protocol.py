"""The stand-alone ``secagg`` protocol: one secure aggregation per round, checked against ground truth.

Each user holds a vector of ``length`` reals, uniform in [-1, 1], drawn from its own seeded stream
(``Stream.PROTOCOL``, 0, its index) and fixed for the run -- or, with ``inputs = "ratings"``, its own
training row over the data's items (zeros where it has no rating), so that the data decides the inputs
and an audit's neighbouring rows (`audit`) change them; it encodes them in Z_{2^bits} with ``frac_bits``
fractional bits (`fedrecsim.mechanisms.ring.Ring`). Each round the server securely sums the vectors of
its online members (session id = round). A user the scenario's mid-round dropout picks crashes at one
of the four stages, drawn uniformly from a stream of its own (``Stream.PROTOCOL``, 1, its index), so
that real and ideal mode crash the same users at the same stages. The sessions' public parameters are
the config's over the data's users (`SecAggParams.population`): a user refuses a setup they do not allow,
among them a session of fewer users than ``min_users`` (0: t of a session of all users), so a round whose
online users are fewer aborts at AdvertiseKeys with a warning, each refusal in the ledger's rejections.

Metrics per round: ``participants`` (|U3|, whose inputs are in the sum), ``u0`` .. ``u5`` (users at the
start and after each stage: AdvertiseKeys U1, ShareKeys U2, MaskedInputCollection U3, Unmasking U5),
``aborted`` (1 when too few remained; the stage is in ``warnings``), ``max_abs_error`` (the decoded sum
against the exact real sum of the U3 users' values, which only the simulator knows: fixed-point rounding,
at most |U3| 2^-(frac_bits+1)), ``wrong_words`` (ring words where the sum differs from the sum of the
encoded inputs: 0 means the masks cancelled exactly), ``threshold`` and ``degree``. Final metrics add
``user_sent_bytes`` / ``user_recv_bytes`` (mean per user per round over the users) and ``server_sent_bytes``
/ ``server_recv_bytes`` (per round), all of the rounds' traffic only: the set-up (round 0, the users' joins) is
left out, so the per-round figures of a 1-round and a 10-round run of the same rounds agree.

Graph parameters (`parameters`, Bell et al. 2020): ``sizing = "log2"`` (the default, unchanged) takes k from
``neighbours`` and t from ``threshold``; ``sizing = "secure"`` takes the smallest k, and its t, whose failure
bounds meet ``security_bits`` and ``correctness_bits`` when ``corrupt_fraction`` of the users collude with
the server and ``dropout_fraction`` drop out. Either way ``privacy.graph_failure`` states the last session's
bounds at those fractions (log2 of each failure probability, null where it cannot happen) and whether they
meet the targets; a run whose graph misses them says so in ``warnings``, as does a ``secure`` run whose
scenario drops more users (``availability.dropout``) than ``dropout_fraction``: its sessions may abort. The log2 rule's default is short of
2^-40 at a few percent (ML-1M's 6,040 users at 5 % and 5 %: 2^-26.0), so it warns there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from ...actors.membership import Join, Leave
from ...actors.server import Server
from ...actors.user import User
from ...config import param
from ...errors import ConfigError, SecAggAborted
from ...invariants import InvariantMonitor
from ...mechanisms.ring import Ring
from ...memory import MemoryContext, MemoryItem
from ...metric_declarations import MetricInfo, count, flag
from ...network.party import SERVER, Party, Role
from ...seeding import Stream
from ..runtime import Outcome, ProtocolSpec, RunContext
from .audit import AUDIT
from .ideal import IdealSum
from .messages import Advertise, Masked, Reveal, Shares
from .params import SecAggParams, Stage
from .roles import STAGE_WAITS, aggregate, participate

_STAGES = tuple(Stage)

@dataclass(frozen=True)
class SecAggConfig:
    mode: Literal["real", "ideal"] = param("real", doc="real: the cryptography | ideal: same bytes, the sum computed directly")
    graph: Literal["complete", "sparse"] = param("complete", doc="complete: Bonawitz et al. 2017 | sparse: SecAgg+ (Bell et al. 2020)")
    neighbours: int = param(0, ge=0, doc="sparse: the degree k; 0 = 2 ceil(log2 n)")
    threshold: float = param(0.5, ge=0, lt=1, doc="t = floor(threshold (k + 1)) + 1 shares of a neighbourhood of k + 1")
    length: int = param(1000, ge=1, doc="values in each user's vector (inputs = random)")
    inputs: Literal["random", "ratings"] = param(
        "random",
        doc="random: uniform [-1, 1] vectors of length values | ratings: each user's training row over the data's items "
        "(data.items values; what an audit's neighbouring rows change)",
    )
    bits: Literal[32, 64] = param(32, doc="the ring Z_{2^bits} the vectors are summed in")
    frac_bits: int = param(16, ge=1, doc="fixed-point fractional bits of the encoding")
    stage_timeout_s: float = param(10.0, gt=0, doc="how long the server waits for one stage's replies (virtual s)")
    min_users: int = param(0, ge=0, doc="users refuse a session of fewer users than this; 0 = t of a session of all users")
    sizing: Literal["log2", "secure"] = param(
        "log2", doc="sparse: log2 = k from neighbours (0: 2 ceil(log2 n)), t from threshold | secure: the smallest k and its t "
        "meeting security_bits and correctness_bits at corrupt_fraction and dropout_fraction (Bell et al. 2020)"
    )
    corrupt_fraction: float = param(0.05, ge=0, lt=1, doc="gamma: the fraction of a session's users colluding with the server")
    dropout_fraction: float = param(0.05, ge=0, lt=1, doc="delta: the fraction of a session's users assumed to drop out")
    security_bits: float = param(40.0, gt=0, doc="sigma: the server and its users learn more than the sum w.p. <= 2^-sigma")
    correctness_bits: float = param(20.0, gt=0, doc="eta: a session aborts for want of shares w.p. <= 2^-eta")


class SecAggUser(User):
    """Holds its vector; takes part in each round's session; may crash at a stage it draws."""

    def __init__(self, party, network, rng, values: np.ndarray, params: SecAggParams, ideal: IdealSum | None, stage_rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.stage_rng = stage_rng  # apart from ``rng``, which real mode's keys consume and ideal mode's do not
        self.values = values
        self.encoded, _ = params.ring.encode(values)
        self.params = params
        self.ideal = ideal
        self._crash_stage: Stage | None = None
        self.session = 0
        """The last session it took part in (`participate`'s ``after``)."""

    def _crash(self, session: int, stage: Stage) -> bool:
        if stage is Stage.ADVERTISE_KEYS:
            self._crash_stage = _STAGES[int(self.stage_rng.integers(len(_STAGES)))]
        return stage is self._crash_stage and self.crashes_in(session)

    async def run(self) -> None:
        await self.resume()

    async def resume(self) -> None:
        await self.compute_rest()
        while True:
            contribution = await participate(
                self, self.encoded, self.params, deadline=self.horizon_s, ideal=self.ideal, crash=self._crash,
                after=self.session, stage_s=STAGE_WAITS * self.params.stage_timeout_s,
            )
            if contribution.outcome == "crashed" or contribution.session is None:
                return
            self.session = contribution.session
            await self.compute()


class SecAggServer(Server):
    """The server of the stand-alone protocol: it receives only the users' stage messages and their joins
    and leaves (anything else is rejected by the network)."""

    receives = (Advertise, Shares, Masked, Reveal, Join, Leave)


def _params(config: SecAggConfig, n_users: int) -> SecAggParams:
    """The sessions' public parameters; a `ConfigError` names the scenario's key (``protocol.*``)."""
    if config.frac_bits >= config.bits - 1:
        raise ConfigError("protocol.frac_bits", f"must be < bits - 1 = {config.bits - 1}, got {config.frac_bits}")
    try:
        return SecAggParams(
            ring=Ring(config.bits, config.frac_bits), graph=config.graph, neighbours=config.neighbours,
            threshold=config.threshold, ideal=config.mode == "ideal", stage_timeout_s=config.stage_timeout_s,
            population=n_users, min_users=config.min_users, sizing=config.sizing,
            corrupt_fraction=config.corrupt_fraction, dropout_fraction=config.dropout_fraction,
            security_bits=config.security_bits, correctness_bits=config.correctness_bits,
        )
    except ConfigError as error:
        key = error.key_path.replace("secagg.", "protocol.", 1)
        key = "protocol.sizing" if key == "protocol.population" else key
        raise ConfigError(key, error.problem) from None


def check(scenario: Any, train: Any) -> tuple[str, ...]:
    """What `run` refuses before it starts (`ProtocolSpec.check`), and with ``sizing = "secure"`` a note of the
    k and t the finder chose for the data's users."""
    params = _params(scenario.protocol, train.n_users)
    found = params.found
    if found is None:
        return ()
    bounds = ", ".join(
        f"{name} {'impossible' if log2 == -math.inf else f'2^{log2:.1f}'}"
        for name, log2 in (("security", found.security_log2), ("correctness", found.correctness_log2))
    )
    return (f'protocol.sizing = "secure": k = {params.degree(found.n)}, t = {params.threshold_for(found.n)} for {found.n} '
            f"users (failure bounds: {bounds})",)


def _inputs(ctx: RunContext, config: SecAggConfig, index: int) -> np.ndarray:
    """User ``index``'s vector: uniform reals from its own stream, or its training row (zeros elsewhere)."""
    if config.inputs == "ratings":
        items, ratings = ctx.train.user_ratings(index)
        row = np.zeros(ctx.train.n_items)
        row[items] = ratings
        return row
    return ctx.rng(Stream.PROTOCOL, 0, index).uniform(-1.0, 1.0, config.length)


async def run(ctx: RunContext) -> Outcome:
    config: SecAggConfig = ctx.config
    params = _params(config, ctx.train.n_users)
    length = ctx.train.n_items if config.inputs == "ratings" else config.length
    ring = params.ring
    ideal = IdealSum() if params.ideal else None
    users = {}
    for index in range(ctx.train.n_users):
        party = Party(Role.USER, index)
        values = _inputs(ctx, config, index)
        users[party] = SecAggUser(
            party, ctx.network, ctx.rng(Stream.ACTOR, Role.USER.code, index), values, params, ideal,
            stage_rng=ctx.rng(Stream.PROTOCOL, 1, index),
        )
    server = SecAggServer(SERVER, ctx.network, ctx.rng(Stream.ACTOR, Role.SERVER.code, 0))
    ctx.network.attach(SERVER)
    population = ctx.population(users)
    objects: dict[str, Any] = {"server": server, "ideal": ideal} if ideal is not None else {"server": server}
    values = ctx.resumed(population, objects) or {
        "rounds": [], "warnings": [], "last": None,
        "cancel": InvariantMonitor("masks_cancel", "the unmasked sum equals the encoded inputs of U3 summed in the ring"),
    }
    rounds: list[dict[str, float]] = values["rounds"]
    warnings: list[str] = values["warnings"]
    cancel: InvariantMonitor = values["cancel"]
    timing = ctx.scenario.run
    async with population.open():
        if not rounds:
            await ctx.network.sleep(timing.round_gap_s)
        for round_index in range(len(rounds) + 1, ctx.rounds + 1):
            population.begin_round(round_index)
            server.update_membership()
            members = sorted(server.members)
            row: dict[str, float] = {"round": round_index, "u0": len(members)}
            try:
                result = await aggregate(
                    server, members, length, params, session=round_index,
                    deadline=ctx.network.now + timing.round_timeout_s, ideal=ideal,
                )
            except SecAggAborted as aborted:
                warnings.append(f"round {round_index}: {aborted}")
                row.update({"participants": 0, "aborted": 1})
            else:
                values["last"] = result
                truth = np.zeros(length, dtype=ring.dtype)
                exact = np.zeros(length)
                for party in result.survivors:  # the simulator is omniscient: it reads the users' inputs
                    truth = ring.add(truth, users[party].encoded)
                    exact += users[party].values
                wrong = int(np.count_nonzero(result.total != truth))
                cancel.check(wrong == 0, f"round {round_index}: {wrong} words off")
                row.update({"participants": len(result.survivors), "aborted": 0})
                row.update({f"u{number}": len(result.stages[stage]) for number, stage in zip((1, 2, 3, 5), _STAGES)})
                row.update({
                    "max_abs_error": float(np.max(np.abs(ring.decode(result.total) - exact))) if result.survivors else 0.0,
                    "wrong_words": wrong, "threshold": result.threshold, "degree": result.degree,
                })
            rounds.append(row)
            population.end_round(round_index)
            ctx.progress(round_index)
            await ctx.network.sleep(timing.round_gap_s)
            await ctx.end_round(round_index, population, objects, values)
    last = values["last"]
    ledger = ctx.network.ledger
    completed = max(len(rounds), 1)
    user_sent, user_recv = _round_bytes(ledger, users)
    server_sent, server_recv = _round_bytes(ledger, [SERVER])
    final = {name: value for name, value in rounds[-1].items() if name != "round"} if rounds else {}
    final.update({
        "rounds_aborted": sum(row["aborted"] for row in rounds),
        "user_sent_bytes": user_sent / max(len(users), 1) / completed,
        "user_recv_bytes": user_recv / max(len(users), 1) / completed,
        "server_sent_bytes": server_sent / completed,
        "server_recv_bytes": server_recv / completed,
    })
    privacy = {
        "mechanism": "SecAgg+ (Bell et al. 2020)" if config.graph == "sparse" else "secure aggregation (Bonawitz et al. 2017)",
        "mode": config.mode,
        "server_learns": "each round, the sum of the inputs of the users in U3 and which users completed each stage; "
        "nothing about a single input, if the server follows the protocol and fewer than t users collude with it",
        "threshold": last.threshold if last else None,
        "degree": last.degree if last else None,
        "adversary": "honest-but-curious server (ConsistencyCheck of the active variant omitted)",
        "graph_failure": params.security_report(last),
    }
    if privacy["graph_failure"] is not None and privacy["graph_failure"].get("meets_targets") is False:
        warnings.append(_shortfall(config, params, last))
    if config.sizing == "secure" and ctx.scenario.availability.dropout > config.dropout_fraction:
        warnings.append(
            f"availability.dropout = {ctx.scenario.availability.dropout:g} exceeds protocol.dropout_fraction = "
            f"{config.dropout_fraction:g}, the dropouts the graph was sized for: sessions may abort for want of shares"
        )
    if config.mode == "ideal":
        privacy["note"] = "ideal mode: bytes as in real mode, the sum computed by the ideal functionality"
    state = {"sum": last.total if last else None, "params": params}
    return Outcome(len(rounds), rounds, final, privacy=privacy, invariants=[cancel], warnings=warnings, state=state)


def _round_bytes(ledger: Any, parties: Iterable[Party]) -> tuple[int, int]:
    """Bytes ``parties`` sent and received in the rounds, the set-up (round 0: the joins) left out, so a
    per-round mean does not depend on how many rounds share the set-up's cost."""
    sent = received = 0
    for party in parties:
        whole, setup = ledger.party(party), ledger.setup_party(party)
        sent += whole["sent_bytes"] - setup["sent_bytes"]
        received += whole["recv_bytes"] - setup["recv_bytes"]
    return sent, received


def _shortfall(config: SecAggConfig, params: SecAggParams, last: Any) -> str:
    """The warning of a run whose last session's graph misses the security or correctness target."""
    level = params.security(len(last.graph), last.degree, last.threshold)
    return (
        f"the last session's graph (k = {last.degree}, t = {last.threshold}, {level.n} users) misses the targets "
        f"2^-{config.security_bits:g} (security) and 2^-{config.correctness_bits:g} (correctness) at corrupt_fraction = "
        f"{config.corrupt_fraction:g} and dropout_fraction = {config.dropout_fraction:g}: its failure bounds are "
        f"2^{level.security_log2:.1f} and 2^{level.correctness_log2:.1f}; sizing = \"secure\" chooses k and t that meet them"
    )


def memory_estimate(ctx: MemoryContext) -> tuple[MemoryItem, ...]:
    """Secure aggregation's arrays (`fedrecsim.memory`): every user's input, masks and masked vector of
    ``length`` ring values, the masked vectors encoded and decoded at the server, and the sum."""
    length = ctx.items if ctx.config.inputs == "ratings" else ctx.config.length
    return (MemoryItem("inputs and masks", 6.0 * ctx.users * length * 8, ("protocol.length", "data.users")),)


#: Every metric secagg reports (`fedrecsim.metric_reference`).
METRICS: tuple[MetricInfo, ...] = (
    count("participants", "users whose inputs are in the round's sum (|U3|; 0 in an aborted round)", "users"),
    count("u0", "members at the start of the round's aggregation", "users"),
    count("u1", "users left after AdvertiseKeys (U1)", "users"),
    count("u2", "users left after ShareKeys (U2)", "users"),
    count("u3", "users left after MaskedInputCollection (U3): their inputs are in the sum", "users"),
    count("u5", "users left after Unmasking (U5)", "users"),
    flag("aborted", "1 when too few users remained for the threshold (the stage is in warnings)"),
    count("rounds_aborted", "rounds that aborted, over the run", "rounds"),
    MetricInfo(
        "max_abs_error",
        "the largest difference between the decoded sum and the exact real sum of the U3 users' values (fixed-point "
        "rounding: at most |U3| 2^-(frac_bits+1))",
        "value", 0.0, better="lower",
    ),
    count("wrong_words", "ring words where the sum differs from the sum of the encoded inputs (0: the masks cancelled)", "words"),
    count("threshold", "t, the shares needed to reconstruct a secret", "shares"),
    count("degree", "k, the neighbours of each user in the masking graph (n - 1 for the complete graph)", "users"),
    MetricInfo("user_sent_bytes", "bytes a user sent per round (the set-up left out), mean over users and rounds", "bytes", 0.0),
    MetricInfo("user_recv_bytes", "bytes a user received per round (the set-up left out), mean over users and rounds", "bytes", 0.0),
    MetricInfo("server_sent_bytes", "bytes the server sent per round (the set-up left out), mean over rounds", "bytes", 0.0),
    MetricInfo("server_recv_bytes", "bytes the server received per round (the set-up left out), mean over rounds", "bytes", 0.0),
)

PROTOCOL = ProtocolSpec(
    "secagg", SecAggConfig, run, "secure aggregation: Bonawitz et al. 2017 and SecAgg+ (Bell et al. 2020)", resumable=True,
    memory=memory_estimate, check=check, metrics=METRICS, audit=AUDIT,
)
