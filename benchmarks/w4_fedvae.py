"""W4: one FedVAE round with R = 250 users on MovieLens-1M-shaped data, against its numpy floor.

The standard size is Polato's ml-1m setting (Table II): synthetic interactions of 6,034 users x 3,520
items (575,259 of them, 400 users held out), R = 250, Mult-VAE 3,520 -> 600 -> 200 in float32 (ω and
every gradient are 4,589,120 entries, 18.4 MB).

Every figure of the headline is CPU time (`time.process_time`, every thread of the process) measured in
ONE process (`measure`), sides one after the other: a shared machine's load inflates wall times unevenly
between sides run apart (wall ratios once put the round below its "bound"), while the CPU a side spends
is its own. Run it with ``OPENBLAS_NUM_THREADS=1`` so that BLAS threads do not spin.

``sim_s``: `fedrecsim.run` of the scenario for three rounds with zero latency, the CPU of the second
round (from the progress callback): the server encodes ω once, 250 users each decode it, run one
forward/backward pass and encode their gradient, the network hashes every byte into the transcript and
delivers, the server checks each gradient in the pass that sums it in party order as it comes
(`OrderedSum`), keeping no reply (`Actor.gather` with ``keep=False``), and takes one Adam step in place.
Round 1 is left out because it also allocates what later rounds reuse; round 3 is followed by the
held-out users' evaluation. SecureFilter is off (plain averaging), because the floor aggregates nothing
either. The process keeps freed memory mapped, as the ``fedrecsim`` command does
(`fedrecsim.allocator.keep_freed_memory`). ``sim_peak_mb`` is the process's peak resident memory right
after the run (the run comes first, so it is the run's), beside ``messages_mb``, the gradients' bytes of
one round. With zero latency the round's gradients are all in flight at one instant: the peak is about
``messages_mb`` and what the process holds besides. The server reads each gradient in place, a read-only
view of its message's bytes, aligned: each message's bytes are held after a few padding bytes that align
its gradient whatever the sender's index and the round (`fedrecsim.network.wire`, "Alignment"), so no
gradient is copied on delivery and the server's adds take numpy's aligned loop; the bytes are let go once
the gradient is summed.

``floor_s``: the same 250 users' gradients -- each user's own gradient, not their sum -- computed in one
batched numpy pass without actors, messages or validation (`fedrecsim.models.multvae.
dense_user_gradients` over a 250-user batch into a preallocated ``[250, P]`` array), the second of two
passes so that the array's pages are already mapped. ``ratio = sim_s / floor_s``.

``bound``: what a simulator that really carries each gradient as bytes must add to the floor at least,
each term measured on the floor's 250 gradients in the same process: ``fused_s``, one pass that reads
each gradient once and, block by block, feeds it to the gradient's own XXH3-128 digest (the transcript
hashes every byte), checks it (the finiteness and norm dot product of `validation`) and adds it to one
running sum, 16 gradients at a time so that the sum's block stays in cache (`fused_pass`: hash, check
and sum fused per block as the issue's review prototype did them; its digests are checked equal to the
gradients' digests hashed whole, its sum to the separate passes'); and ``adam_s``, the round's Adam step
in place (`aggregation.descend`). ``bound = (floor_s + fused_s + adam_s) / floor_s``. Beside it, the same
work in two passes, each reading every gradient: ``hash_s`` (XXH3-128 of each gradient whole) and
``check_sum_s`` (`fused_check_and_sum`: check and sum without the hashing) -- two reads of 4.6 GB where
the fused pass makes one. ``server_sum_s`` is the server's own validation and ordered sum
(`dense_values`, `OrderedSum`: also one fused pass, on its own blocks and checks, without hashing) on the
same gradients, beside ``check_sum_s``, the pass it is bounded by.

``unbatched_bound``: the same with the users' maths as the simulation must do it. The floor multiplies
the 250 users' rows in one batch, so it reads ω's largest block (W4, 8.4 MB) twice a round; a simulated
user computes its own gradient alone and reads it twice itself, 250 times a round. Batching the users of
one instant would change the last bits of their gradients (BLAS calls of other shapes: about half of the
entries differ, by up to ~1e-6 of a row's largest), and so the transcripts and metrics, so the simulation
does not. ``users_s`` is the floor's 250 gradients computed one user at a time as the simulated users
compute them (`user_by_user`: a batch of one each, from the floor's own draws, each checked against its
floor row), and ``unbatched_bound = (users_s + fused_s + adam_s) / floor_s``: the least ratio a
simulator whose users each compute their own gradient can reach. Batching was tried (commits
4f8275b..a9508fb: the users of one virtual instant computed 16 at a time, each from its own
draws, into arrays of its own) and reverted (ce6caac): their compute fell to about the floor (0.77 s against 0.87-1.04
one at a time), but the round got slower (2.71 s against 2.28, peak 6.0 GB against 4.7) -- a user alone
keeps its 18 MB gradient in this machine's 260 MB L3 from its pass to its encoding, a chunk does not, and
the chunks' arrays fragment the heap -- and a reordering fault then changed the model's last bits (it
changes who is batched with whom).

``stream_bound``: ``unbatched_bound`` with the hash as the simulation must do it. The transcript's content
hash is ONE running XXH3-128 over every delivered message's bytes in delivery order
(`fedrecsim.network.ledger`), so a simulator that keeps it can fuse the hashing into the server's read only
a message at a time, not 16 rows block by block with a digest each as `fused_pass` does. ``stream_s`` is
that pass (`stream_pass`: one hasher fed the rows one after the other, each row checked and added to the
sum block by block, a group of one; its digest checked equal to the rows' bytes hashed in one), and
``stream_bound = (users_s + stream_s + adam_s) / floor_s``: the least ratio a simulator reaches whose users
compute alone and whose transcript is the one pinned, even if it read every gradient once. It reads
2.43 here (session 10, load 4-5: users_s 1.017, stream_s 0.773 against fused_s 0.685), so a ratio of 2.5
is not reachable without batching the users or changing the content hash's definition.

Where the simulation's round goes, and what each lever named in issue 32 measured on this machine
(session 10, CPU seconds, cProfile of round 2: 2.34 s in all). The users' passes 0.55; the copy of each
gradient into its message (`wire.encode`'s join) 0.50; the ledger's hash at delivery 0.42; the server's
check-and-sum 0.81 (its dots 0.39, its adds 0.42). Measured apart on 96-120 messages of 18.4 MB:

- Writing each gradient in place, into its message's bytes, would not pay: filling 120 fresh messages costs
  0.26 s against 0.23 s for the copy from a gradient in cache. The cost is the writes to memory that is not
  in cache, which the floor pays too (its ``[R, P]`` output), not the copy's read of the cached gradient.
- Hashing a message while it is hot would not pay either: XXH3 of a message just written runs at about
  12 GB/s (0.177 s for 120), as cold (0.187 s). It reaches 55 GB/s only on a block in L2 -- fused into the
  pass that writes or reads it -- and 26 GB/s on data re-read from L3. A digest carried with the message
  could stand for its bytes only by changing the content hash's definition, as a broadcast body's does
  (`wire.SharedBody.digest`), which would change every run's content hash.
- Having the server read each group of 4 to 16 messages right after the ledger hashed them is no faster
  than two passes (0.42 s against 0.42 s for 96): this machine's L3 does not keep them for the second read.
- Aligning the gradients pays, and is done: the server's check-and-sum of 96 cold gradients takes 0.26 s
  where they sit misaligned in their messages (as they did for most senders: a bytes object's elements
  start 32 bytes into a 16-aligned block, and the envelope's length before the gradient depends on the
  sender's index) against 0.21 s aligned. `wire.encode` now pads such a message and gives a read-only view
  of its bytes past the pad (same bytes, same transcripts). In the round (3 runs of each tree alternating,
  load 4-5): the server's check-and-sum 0.70-0.72 s before, 0.55-0.61 after; round 2 2.12-2.24 s before,
  1.99-2.11 after.

``krum_round_s`` is the second round again with Krum (m = 1, f = 10 %), and ``krum_filter_s`` Krum's
own cost on the floor's 250 gradients (the 250 x 250 distances and the choice), both CPU: Krum is
O(R^2 P) by definition, so it is reported beside the line, not hidden in it; its round runs in a process
of its own (`run_isolated`), since Krum needs every gradient at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import xxhash

import fedrecsim
from fedrecsim.allocator import keep_freed_memory
from fedrecsim.data import prepare_data
from fedrecsim.errors import SimulationError
from fedrecsim.mechanisms.adam import adam_init
from fedrecsim.mechanisms.krum import krum_select, pairwise_squared_distances
from fedrecsim.models.multvae import Batch, Layout, MultVAEHyper, Noise, dense_user_gradients, draw_noise, init_params
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.fedvae.aggregation import OrderedSum, descend, unfiltered
from fedrecsim.protocols.fedvae.messages import Gradient
from fedrecsim.protocols.fedvae.validation import MAX_NORM, dense_values
from fedrecsim.scenario import parse_scenario

from .common import Options, peak_rss_mb, run_isolated

STANDARD = {"users": 6034, "items": 3520, "ratings": 575_259, "users_per_round": 250, "hidden": 600, "latent": 200}
QUICK = {"users": 300, "items": 300, "ratings": 9_000, "users_per_round": 50, "hidden": 64, "latent": 16}
# Coordinates per block of the fused check-and-sum pass: 256 KB of float32, a core's L2 share.
_BLOCK = 1 << 16
# Rows the fused pass sums at a time: the sum's block is read and written once per group.
_GROUP = 16


def tables(size: dict[str, int], secure_filter: str = "none") -> dict[str, Any]:
    """The W4 scenario at ``size`` (`STANDARD` or `QUICK`), three rounds, evaluation only after the last."""
    return {
        "run": {"protocol": "fedvae", "name": "w4", "seed": 4, "rounds": 3},
        "data": {
            "source": "synthetic", "feedback": "implicit", "users": size["users"], "items": size["items"],
            "ratings": size["ratings"], "split": "heldout_users", "test_fraction": 0.0663,
        },
        "network": {"latency": {"model": "constant", "seconds": 0.0}},
        "availability": {"model": "always"},
        "protocol": {
            "users_per_round": size["users_per_round"], "hidden": size["hidden"], "latent": size["latent"],
            "secure_filter": secure_filter, "krum_m": 1, "krum_f": 0.1, "baseline": False, "eval_every": 1000,
        },
    }


def sim(size: dict[str, int], secure_filter: str = "none") -> dict[str, float]:
    """CPU seconds of round 2 of the W4 scenario (module docstring)."""
    marks: list[float] = []
    result = fedrecsim.run(tables(size, secure_filter), progress=lambda completed, total: marks.append(time.process_time()))
    second = result.rounds[1]
    if second["gradients"] != size["users_per_round"] or not second["updated"]:
        raise SimulationError(f"W4 round 2 did not aggregate {size['users_per_round']} gradients: {second}")
    return {"seconds": marks[1] - marks[0]}


class Floor(NamedTuple):
    """The floor's pass (module docstring) and what it was computed from."""

    gradients: np.ndarray
    """``[R, P]``: each user's gradient."""
    omega: np.ndarray
    seconds: float
    """CPU seconds of the second pass."""
    layout: Layout
    hyper: MultVAEHyper
    batch: Batch
    """The R users' rows."""
    noise: Noise
    """The second pass's draws, the ones ``gradients`` were computed with."""


def floor_gradients(size: dict[str, int]) -> Floor:
    """The floor (module docstring): the R users' gradients in one batched pass, timed on its second pass."""
    scenario = parse_scenario(tables(size))
    train, test = prepare_data(scenario.data, scenario.run.seed)
    hyper = scenario.protocol.hyper()
    layout = Layout.of(train.n_items, hyper)
    rng = np.random.default_rng(4)
    omega = init_params(rng, layout)
    training = np.flatnonzero((train.user_counts() > 0) & (test.user_counts() == 0))
    users = np.sort(rng.choice(training, size["users_per_round"], replace=False))
    batch = Batch.of_users(train.by_user(), users, train.n_items)
    out = np.empty((users.size, layout.size), dtype=np.float32)
    seconds = math.inf
    for _ in range(2):
        noise = draw_noise(rng, batch, hyper)
        start = time.process_time()
        dense_user_gradients(omega, layout, batch, noise, hyper, out=out)
        seconds = time.process_time() - start
    return Floor(out, omega, seconds, layout, hyper, batch, noise)


def user_by_user(floor: Floor, tolerance: float = 1e-4) -> float:
    """``users_s`` (module docstring): CPU seconds of the floor's R gradients computed one user at a time, as
    the simulated users compute theirs (`FedVAEUser.contribution`: a batch of one, a fresh gradient), each
    from its own rows and its own slice of the floor's draws, and dropped. Raises unless every one equals
    its floor row to within ``tolerance`` times the row's largest entry (a batch of one multiplies in BLAS
    calls of other shapes than the batch's, so the last bits differ; a wrong user or draw differs by far
    more)."""
    batch, noise, indptr = floor.batch, floor.noise, floor.batch.indptr
    users = [
        (Batch.single(batch.items[start:stop], batch.values[start:stop], batch.n_items),
         Noise(noise.keep[start:stop], noise.eps[user : user + 1]))
        for user, (start, stop) in enumerate(zip(indptr[:-1], indptr[1:]))
    ]
    seconds = 0.0
    for user, (rows, draws) in enumerate(users):
        start = time.process_time()
        (gradient,) = dense_user_gradients(floor.omega, floor.layout, rows, draws, floor.hyper)
        seconds += time.process_time() - start
        expected = floor.gradients[user]
        if not np.max(np.abs(gradient - expected)) <= tolerance * np.max(np.abs(expected)):
            raise SimulationError(f"W4's user {user} computed alone differs from its row of the batched floor")
    return seconds


def fused_check_and_sum(gradients: np.ndarray, block: int = _BLOCK, group: int = _GROUP) -> np.ndarray:
    """The sum of ``gradients`` (rows, added in row order), checking each on the way, in one pass over
    each (`fused_pass` without the hashing): the least a server that validates and sums every gradient
    reads."""
    total, _ = fused_pass(gradients, block, group, hashing="none")
    return total


def stream_pass(gradients: np.ndarray, block: int = _BLOCK) -> tuple[np.ndarray, bytes]:
    """``stream_s`` (module docstring): every row of ``gradients`` fed to ONE running XXH3-128 in row
    order, checked and added to the sum, one row after the other, each read once block by block
    (`fused_pass` with ``hashing="stream"``, a group of one). Returns the sum and the stream's digest --
    that of the rows' bytes one after the other, as the transcript hashes the messages it delivers."""
    total, (digest,) = fused_pass(gradients, block, 1, hashing="stream")
    return total, digest


def fused_pass(
    gradients: np.ndarray, block: int = _BLOCK, group: int = _GROUP, *, hashing: str = "each"
) -> tuple[np.ndarray, list[bytes]]:
    """Every row of ``gradients`` hashed (XXH3-128), checked and added to one running sum (in row order),
    reading each row once: ``group`` rows at a time, block by block, each row's block is fed to the row's
    own digest, has its squared norm added to the row's (NaN or Inf if any entry is) and is added to the
    sum's block, which stays in cache meanwhile; a row whose squared norm is not finite or above `MAX_NORM`
    squared fails. Returns the sum and, with ``hashing`` "each", each row's digest (that of the row's
    bytes hashed whole); with "stream", one digest: every row is fed to one running hasher, which needs a
    ``group`` of 1 (a stream cannot take the rows' blocks in turn); with "none", no digest. What a
    simulator that hashes every message's bytes and validates and sums every gradient must do at least,
    done in one read of each gradient as the issue's review prototype did it: the bound's one term beyond
    the floor and Adam."""
    if hashing not in ("each", "stream", "none"):
        raise ValueError(f"hashing must be 'each', 'stream' or 'none', got {hashing!r}")
    if hashing == "stream" and group != 1:
        raise ValueError(f"a stream hashes whole rows one after the other: group must be 1, got {group}")
    total = np.empty_like(gradients[0])
    limit = MAX_NORM * MAX_NORM
    stream = xxhash.xxh3_128()
    digests: list[bytes] = []
    for first in range(0, len(gradients), group):
        rows = gradients[first : first + group]
        squared = [0.0] * len(rows)
        states = [stream] if hashing == "stream" else [xxhash.xxh3_128() for _ in rows] if hashing == "each" else []
        for start in range(0, total.size, block):
            part = total[start : start + block]
            for row, gradient in enumerate(rows):
                piece = gradient[start : start + block]
                if states:
                    states[row].update(piece)
                squared[row] += float(piece @ piece)
                if first or row:
                    part += piece
                else:
                    part[...] = piece
        for row, value in enumerate(squared):
            if not value <= limit:
                raise SimulationError(
                    f"W4's floor gradient {first + row} is not finite, or its norm exceeds {MAX_NORM:.0e}"
                )
        if hashing == "each":
            digests.extend(state.digest() for state in states)
    return total, [stream.digest()] if hashing == "stream" else digests


def _server_sum(gradients: np.ndarray, layout: Layout) -> np.ndarray | None:
    """The server's validation and ordered sum (`OrderedSum`) of ``gradients``, as its round runs them:
    each length checked on arrival, the numbers in the pass that sums them."""
    parties = [Party(Role.USER, index) for index in range(len(gradients))]
    total = OrderedSum(parties)
    for party, gradient in zip(parties, gradients):
        total.add(party, dense_values(party, 2, Gradient(2, gradient), layout), checked=False)
    if total.settle(True):
        raise SimulationError("the server refused one of W4's floor gradients")
    return total.mean()


def _cpu(function: Any, *args: Any) -> tuple[Any, float]:
    start = time.process_time()
    result = function(*args)
    return result, time.process_time() - start


def measure(size: dict[str, int]) -> dict[str, float]:
    """Every side of the headline in this one process, in CPU seconds (module docstring): the run first
    (so that the peak resident memory read after it is the run's), then the floor and the bound's terms."""
    keep_freed_memory()
    sim_s = sim(size)["seconds"]
    sim_peak = peak_rss_mb()
    floor = floor_gradients(size)
    gradients, omega, floor_s, layout = floor.gradients, floor.omega, floor.seconds, floor.layout
    users_s = user_by_user(floor)

    def hash_each() -> list[bytes]:
        return [xxhash.xxh3_128(memoryview(gradient).cast("B")).digest() for gradient in gradients]

    digests, hash_s = _cpu(hash_each)
    total, check_sum_s = _cpu(fused_check_and_sum, gradients)
    (fused_total, fused_digests), fused_s = _cpu(fused_pass, gradients)
    if fused_digests != digests or not np.array_equal(fused_total, total):
        raise SimulationError("the fused pass's digests or sum differ from the separate passes' on W4's floor gradients")
    (stream_total, stream_digest), stream_s = _cpu(stream_pass, gradients)
    if stream_digest != xxhash.xxh3_128(gradients.tobytes()).digest() or not np.array_equal(stream_total, total):
        raise SimulationError("the stream pass's digest or sum differ from the rows' bytes hashed in one or the sum")
    mean, server_sum_s = _cpu(_server_sum, gradients, layout)
    if mean is None or not np.array_equal(mean, total / np.float32(len(gradients))):
        raise SimulationError("the server's ordered sum and the fused pass disagree on W4's floor gradients")
    config = parse_scenario(tables(size)).protocol
    _, adam_s = _cpu(descend, omega, mean, adam_init(omega), config.adam(), unfiltered(len(gradients)), 0.0)
    return {
        "sim_s": sim_s, "floor_s": floor_s, "users_s": users_s, "fused_s": fused_s, "stream_s": stream_s, "hash_s": hash_s,
        "check_sum_s": check_sum_s, "adam_s": adam_s,
        "server_sum_s": server_sum_s, "params": float(layout.size), "sim_peak_mb": sim_peak,
        "messages_mb": gradients.nbytes / 2**20,
    }


def krum(size: dict[str, int]) -> dict[str, float]:
    """CPU seconds of round 2 with Krum, and of Krum on the floor's gradients (a process of its own)."""
    keep_freed_memory()
    round_s = sim(size, secure_filter="krum")["seconds"]
    gradients = floor_gradients(size).gradients
    _, filter_s = _cpu(lambda: krum_select(pairwise_squared_distances(gradients), math.floor(0.1 * len(gradients)), 1))
    return {"round_s": round_s, "filter_s": filter_s}


def run(options: Options) -> Iterator[str]:
    """``W4 fedvae sim_s=... floor_s=... ratio=... bound=...``, the bound's terms, peak memory and Krum's
    round and filter beside it."""
    size = QUICK if options.quick else STANDARD
    repeats = options.repeats or 1
    runs = [run_isolated(__name__, "measure", size=size) for _ in range(repeats)]
    krums = [run_isolated(__name__, "krum", size=size) for _ in range(repeats)]

    def best(name: str) -> float:
        return min(result[name] for result in runs)

    sim_s, floor_s = best("sim_s"), best("floor_s")
    terms = ("users_s", "fused_s", "stream_s", "adam_s", "hash_s", "check_sum_s")
    bound = (floor_s + best("fused_s") + best("adam_s")) / floor_s
    unbatched = (best("users_s") + best("fused_s") + best("adam_s")) / floor_s
    stream = (best("users_s") + best("stream_s") + best("adam_s")) / floor_s
    yield (
        f"W4 fedvae sim_s={sim_s:.3f} floor_s={floor_s:.3f} ratio={sim_s / floor_s:.2f} bound={bound:.2f} "
        f"unbatched_bound={unbatched:.2f} stream_bound={stream:.2f} "
        + " ".join(f"{term}={best(term):.3f}" for term in terms)
        + f" server_sum_s={best('server_sum_s'):.3f} cpu=process_time "
        f"krum_round_s={min(result['round_s'] for result in krums):.3f} "
        f"krum_filter_s={min(result['filter_s'] for result in krums):.3f} users_per_round={size['users_per_round']} "
        f"items={size['items']} params={int(runs[0]['params'])} "
        f"sim_peak_mb={max(result['sim_peak_mb'] for result in runs):.0f} "
        f"messages_mb={runs[0]['messages_mb']:.0f} krum_peak_mb={max(result['peak_rss_mb'] for result in krums):.0f}"
    )


__all__ = [
    "QUICK", "STANDARD", "Floor", "floor_gradients", "fused_check_and_sum", "fused_pass", "krum", "measure", "run", "sim",
    "stream_pass", "tables", "user_by_user",
]
