"""W7: one secure aggregation in real mode -- fedrecsim's Bonawitz et al. 2017 and SecAgg+ beside Flower's SecAgg+.

n = 200 users, each with a vector of 10,000 values in Z_2^32; 5% of them (10, drawn from a seeded
generator) drop after they sent their masked input, so the server must reconstruct the survivors' self
masks from the others' shares. Real cryptography: X25519, HKDF, AES-GCM, Shamir, ChaCha20 masks
(`fedrecsim.protocols.secagg`). ``ours_s`` is the wall time of one session -- every user's and the
server's work, every message encoded, carried and decoded, in one process, zero latency -- best of the
repeats, once for the complete graph (Bonawitz) and once for SecAgg+ (k = 2 ceil(log2 n) = 16). Each
session runs in a fresh interpreter (`benchmarks.common.run_isolated`); ``peak_rss_mb`` is the largest
peak resident set of a graph's sessions, the inputs and every party's state included.
``ours_client_bytes`` is the mean over users of the bytes a user sent and received; ``analytic`` is the
same count from the protocol's payloads alone (keys, sealed shares, the masked vector, revealed shares,
neighbour lists), without msgpack's envelopes, and ``vs_analytic`` their ratio. The sum is checked against
the survivors' inputs.

The peer, when installed (``pip install -e .[peers]``): Flower's SecAgg+ -- ``SecAggPlusWorkflow`` on the
server, ``secaggplus_mod`` on the clients -- in its simulation engine, on the same n and vector length,
num_shares = 17 (the SecAgg+ neighbourhood of k = 16 neighbours and the user itself), reconstruction
threshold 9, modulus 2^32; the same 10 clients fail in the unmask stage (a client mod raises there).
``flower_s`` is the wall time of the SecAgg+ fit workflow (setup to the aggregate), ``flower_client_bytes``
the mean over clients of the protobuf sizes of the messages' contents in and out (measured by a client
mod: Flower's transport adds its own framing, so this is a lower bound). It runs in a fresh interpreter
(Ray owns the process); its memory lives in Ray's workers, so no peak is printed for it. ``ratio`` is
Flower's seconds over ours for SecAgg+ (> 1: fedrecsim is faster).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import trio

from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.clock import VirtualClock
from fedrecsim.errors import SimulationError
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import SecAggParams, Stage, aggregate, participate
from fedrecsim.protocols.secagg.crypto import CIPHERTEXT_BYTES, KEY_BYTES
from fedrecsim.protocols.secagg.shamir import SHARE_BYTES
from fedrecsim.seeding import Stream, generator

from .common import Options, run_isolated

USERS, LENGTH, DROP = 200, 10_000, 0.05
QUICK_USERS, QUICK_LENGTH = 20, 500
SEED, SESSION = 7, 1


class _User(User):
    def __init__(self, party, network, rng, x: np.ndarray, params: SecAggParams, drops: bool) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.x, self.params, self.drops = x, params, drops

    def _crash(self, session: int, stage: Stage) -> bool:
        if self.drops and stage is Stage.UNMASKING:
            self.network.detach(self.party)
            return True
        return False

    async def run(self) -> None:
        await participate(self, self.x, self.params, deadline=trio.current_time() + 1000.0, crash=self._crash)


def dropping(users: int, fraction: float = DROP, seed: int = SEED) -> set[int]:
    """The users that drop after their masked input: round(fraction n) of them, drawn from a seeded stream."""
    count = int(round(fraction * users))
    return set(generator(seed, Stream.PROTOCOL, 7).choice(users, size=count, replace=False).tolist())


def session(users: int, length: int, graph: str, seed: int = SEED) -> dict[str, Any]:
    """One real session; its wall seconds, the users' mean bytes (sent + received) and the check of the sum."""
    ring = Ring(32, 16)
    params = SecAggParams(ring=ring, graph=graph, stage_timeout_s=50.0)  # type: ignore[arg-type]
    inputs = ring.uniform(generator(seed, Stream.PROTOCOL, 8), (users, length))
    drops = dropping(users, seed=seed)

    async def main() -> dict[str, Any]:
        ledger = Ledger()
        network = Network(Links(seed, LinkSpec()), ledger, resolution_s=0.001)
        async with network.open():
            server = Server(SERVER, network, generator(seed, Stream.ACTOR, Role.SERVER.code, 0))
            network.attach(SERVER)
            parties = [Party(Role.USER, index) for index in range(users)]
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for party in parties:
                    user = _User(party, network, generator(seed, Stream.ACTOR, Role.USER.code, party.index),
                                 inputs[party.index], params, party.index in drops)
                    network.attach(party)
                    nursery.start_soon(user.run)
                result = await aggregate(server, parties, length, params, session=SESSION,
                                         deadline=trio.current_time() + 1000.0)
            seconds = time.perf_counter() - start
        survivors = [party.index for party in result.survivors]
        expected = np.zeros(length, dtype=ring.dtype)
        for index in survivors:
            expected = ring.add(expected, inputs[index])
        if not np.array_equal(result.total, expected) or len(result.stages[Stage.UNMASKING]) != users - len(drops):
            raise SimulationError(f"W7: the {graph} session's sum is wrong")
        client = [ledger.party(party)["sent_bytes"] + ledger.party(party)["recv_bytes"] for party in parties]
        return {"seconds": seconds, "client_bytes": float(np.mean(client)), "degree": result.degree,
                "threshold": result.threshold, "survivors": len(survivors)}

    return trio.run(main, clock=VirtualClock())


def analytic_client_bytes(users: int, length: int, degree: int, dropped: int) -> float:
    """A user's payload bytes in one session, without envelopes: keys, sealed shares, the masked vector,
    the revealed shares (survivors only) and the neighbour lists (int32), averaged over users."""
    index = 4
    received = degree * index + degree * (index + 2 * KEY_BYTES) + degree * (index + CIPHERTEXT_BYTES) + degree * index
    sent = 2 * KEY_BYTES + degree * (index + CIPHERTEXT_BYTES) + length * 4
    reveal = (degree + 1) * (index + SHARE_BYTES)
    return received + sent + reveal * (users - dropped) / users


def flower(users: int, length: int, drops: list[int], num_shares: int, threshold: int) -> dict[str, float]:
    """Flower's SecAgg+ on the same shape (run in a fresh interpreter by `run`)."""
    import logging

    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Context, serde
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.ERROR)
    folder = tempfile.mkdtemp(prefix="w7-flower-")
    dropping_ids = set(drops)
    timing: dict[str, float] = {}

    class Echo(NumPyClient):
        def __init__(self, seed: int) -> None:
            self.vector = np.random.default_rng(seed).uniform(-1.0, 1.0, length)

        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            return [self.vector], 1, {}

    def measure(msg, ctxt, call_next):  # type: ignore[no-untyped-def]
        partition = int(ctxt.node_config.get("partition-id", 0))
        stage = ""
        records = msg.content.config_records.get("secaggplus_configs")
        if records is not None:
            stage = str(records.get("stage", ""))
        if partition in dropping_ids and stage == "unmask":
            raise RuntimeError("W7: this client drops after its masked input")
        inbound = serde.recorddict_to_proto(msg.content).ByteSize()
        reply = call_next(msg, ctxt)
        outbound = serde.recorddict_to_proto(reply.content).ByteSize()
        with open(os.path.join(folder, f"{partition}.log"), "a", encoding="utf-8") as log:
            log.write(f"{inbound} {outbound}\n")
        return reply

    class TimedSecAggPlus(SecAggPlusWorkflow):
        def __call__(self, grid, context):  # type: ignore[no-untyped-def]
            start = time.perf_counter()
            super().__call__(grid, context)
            timing["seconds"] = time.perf_counter() - start

    app = ServerApp()

    @app.main()
    def main(grid, context: Context) -> None:  # type: ignore[no-untyped-def]
        strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=users, min_available_clients=users)
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy)
        workflow = DefaultWorkflow(fit_workflow=TimedSecAggPlus(num_shares=num_shares, reconstruction_threshold=threshold,
                                                                 modulus_range=2**32, timeout=600.0))
        workflow(grid, legacy)

    def client_fn(context: Context):  # type: ignore[no-untyped-def]
        return Echo(int(context.node_config.get("partition-id", 0))).to_client()

    run_simulation(server_app=app, client_app=ClientApp(client_fn=client_fn, mods=[measure, secaggplus_mod]),
                   num_supernodes=users, backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "seconds" not in timing:
        raise RuntimeError("Flower's SecAgg+ workflow did not finish")
    totals = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), encoding="utf-8") as log:
            totals.append(sum(int(a) + int(b) for a, b in (line.split() for line in log if line.strip())))
    return {"seconds": timing["seconds"], "client_bytes": float(np.mean(totals)) if totals else math.nan,
            "clients": len(totals)}


def run(options: Options) -> Iterator[str]:
    """``W7 secagg ours_s=... flower_s=... ratio=... ours_client_bytes=... flower_client_bytes=...``."""
    users, length = (QUICK_USERS, QUICK_LENGTH) if options.quick else (USERS, LENGTH)
    repeats = options.repeats or (1 if options.quick else 3)
    dropped = len(dropping(users))
    results = {}
    for graph in ("complete", "sparse"):
        runs = [run_isolated(__name__, "session", users=users, length=length, graph=graph) for _ in range(repeats)]
        best = min(runs, key=lambda result: result["seconds"])
        best["peak_rss_mb"] = max(result["peak_rss_mb"] for result in runs)
        results[graph] = best
        analytic = analytic_client_bytes(users, length, best["degree"], dropped)
        name = "bonawitz" if graph == "complete" else "secagg+"
        yield (
            f"W7 secagg {name} n={users} length={length} dropped={dropped} k={best['degree']} t={best['threshold']} "
            f"ours_s={best['seconds']:.3f} ours_client_bytes={best['client_bytes']:.0f} "
            f"analytic_client_bytes={analytic:.0f} vs_analytic={best['client_bytes'] / analytic:.3f} "
            f"peak_rss_mb={best['peak_rss_mb']:.0f}"
        )
    ours = results["sparse"]
    line = f"W7 secagg ours_s={ours['seconds']:.3f}"
    if importlib.util.find_spec("flwr") is None or options.quick:
        reason = "not-installed (pip install -e .[peers])" if importlib.util.find_spec("flwr") is None else "skipped-in-quick"
        yield (
            f"{line} flower={reason} ours_client_bytes={ours['client_bytes']:.0f} "
            f"peak_rss_mb={ours['peak_rss_mb']:.0f}"
        )
        return
    # One Flower session: it starts Ray and 200 actors, minutes on a shared machine.
    peer = run_isolated(__name__, "flower", users=users, length=length, drops=sorted(dropping(users)),
                        num_shares=ours["degree"] + 1, threshold=ours["threshold"])
    yield (
        f"{line} flower_s={peer['seconds']:.3f} ratio={peer['seconds'] / ours['seconds']:.1f} "
        f"ours_client_bytes={ours['client_bytes']:.0f} flower_client_bytes={peer['client_bytes']:.0f} "
        f"n={users} length={length} dropped={dropped} peak_rss_mb={ours['peak_rss_mb']:.0f}"
    )


__all__ = ["analytic_client_bytes", "dropping", "flower", "run", "session"]

if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(session(QUICK_USERS, QUICK_LENGTH, "sparse")))
