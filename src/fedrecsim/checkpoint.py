"""Checkpoints: a run's complete state at a round's end, saved atomically, and the run that resumes from it.

``fedrecsim run --checkpoint-every N --out DIR`` saves, every N rounds, everything the simulation holds
between two instants -- every actor's attributes and generator, the population (who is online, whose task
runs, how far the churn timeline went, the restarts due), the network (messages in flight with their
sequence numbers, mailboxes, links' counters, the faults' records), the ledger and the virtual clock --
into ``checkpoint.pkl`` in the work folder ``.DIR.checkpoints`` beside DIR (`work_folder`). The file is
written beside the last one and renamed over it, so a kill at any instant leaves a complete checkpoint or
the previous one. The folder disappears when the run completes; an interrupted run (Ctrl-C, SIGTERM,
SIGKILL) leaves it, and ``fedrecsim run --resume DIR`` carries on from its last checkpoint to the same
``transcript_xxh3_128`` and metrics as a run never interrupted.

What makes that exact:

- A task cannot be saved, only the state it acts on. A checkpoint is taken at a round's end, once every
  task is blocked (`trio.testing.wait_all_tasks_blocked`: nothing more happens at this instant), and only
  if every actor with a task of its own waits at a *resume point* -- for a delivery until its horizon --
  from which `User.resume` (or, for a server-side actor, its ``run``) reaches the same wait again. A
  resumed run rebuilds its world from the scenario and seed, as the first run did, puts the saved state
  into it, and starts those tasks again; the protocol's driver continues with the next round. When some
  user is elsewhere (a straggler still computing after the round ended) the checkpoint is deferred to the
  next round's end.
- The transcript hash is folded at every round's end (`Ledger.fold`), so its state there is a digest.
- Live objects are saved by name, not by value: a saved attribute that refers to the network, the
  ledger, another actor or the data refers, after the resume, to the resumed run's object
  (`_WorldPickler`). The data itself is not saved; its fingerprint is, and a resume refuses data that
  changed.

What keeps the parties isolated across it: a received array is read-only -- a view of immutable bytes,
or a copy marked read-only -- and the receivers of one broadcast hold the same one (`Network.send_many`);
a checkpoint taken while copies sit in mailboxes saves those decoded bodies, and one actor may keep a
view of a body it received. A read-only array is saved as its bytes and restored as a read-only view of
them, whatever its layout (numpy's own pickling gives a writable copy of a non-contiguous one), and the
pickle's memo gives the parties that shared one array one array again: after the resume no party can
write to what another sees. Every other array comes back writable, its own.

The file is a pickle: resume only checkpoints your own runs made (loading a pickle runs code).
"""

from __future__ import annotations

import io
import os
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import trio
import trio.testing
import xxhash

from . import __version__
from .actors.population import Population
from .data.ratings import Ratings
from .errors import CheckpointError, OutputError

CHECKPOINT_FORMAT = "fedrecsim-checkpoint/1"
CHECKPOINT_FILE = "checkpoint.pkl"
_PARTIAL_FILE = ".checkpoint.pkl.partial"


def work_folder(out: Path) -> Path:
    """The folder beside the result folder ``out`` that holds its run's checkpoint: ``.<name>.checkpoints``."""
    return out.with_name(f".{out.name}.checkpoints")


def data_fingerprint(train: Ratings, test: Ratings) -> str:
    """XXH3-128 of the split a run uses: a resumed run must see the data its checkpoint was taken on."""
    digest = xxhash.xxh3_128()
    for ratings in (train, test):
        digest.update(f"{ratings.n_users},{ratings.n_items},{len(ratings)};".encode())
        for array in (ratings.users, ratings.items, ratings.values):
            digest.update(array.tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Saved:
    """One checkpoint file: the run it belongs to, where it stood, and its pickled world.

    Attributes:
        scenario: the run's validated `Scenario`; transcript: whether it records its transcript.
        data: `data_fingerprint` of its split.
        every: its checkpoint interval in rounds.
        round: the rounds completed; time: the virtual time then; start: the virtual time it started at.
        wall_s: the wall seconds the run had taken so far.
        world: the state (`_WorldPickler`), loaded only into a rebuilt run (`Checkpoints.restore`).
    """

    format: str
    version: str
    scenario: Any
    transcript: bool
    data: str
    every: int
    round: int
    time: float
    start: float
    wall_s: float
    world: bytes


def load(folder: Path) -> Saved:
    """The checkpoint in the work ``folder``.

    Raises:
        CheckpointError: there is none, it does not read as one, or another fedrecsim version wrote it.
    """
    path = folder / CHECKPOINT_FILE
    try:
        with open(path, "rb") as handle:
            saved = pickle.load(handle)
    except FileNotFoundError:
        raise CheckpointError(path, "no checkpoint here: the run was not started with --checkpoint-every, or it completed") from None
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError) as exc:
        raise CheckpointError(path, f"does not read as a fedrecsim checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(saved, Saved) or saved.format != CHECKPOINT_FORMAT:
        raise CheckpointError(path, f"is not a {CHECKPOINT_FORMAT} checkpoint")
    if saved.version != __version__:
        raise CheckpointError(path, f"was written by fedrecsim {saved.version}; this is {__version__}, which cannot resume it")
    return saved


def _frozen_array(data: bytes, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The read-only array a checkpoint saved as its bytes (`_WorldPickler`): a view of ``data``, which
    cannot be made writable."""
    return np.frombuffer(data, dtype).reshape(shape)


class _WorldPickler(pickle.Pickler):
    """Pickles state, writing the run's live objects (`Checkpoints.live`) as their names, every
    read-only array as its bytes (module docstring: isolation) and every read-only memoryview -- a message
    `fedrecsim.network.wire.encode` gave as a view past its aligning pad, in flight -- as a bytes object of
    its bytes (a writable one is refused, as pickle refuses it)."""

    def __init__(self, file: Any, live: Mapping[str, Any]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(obj): name for name, obj in live.items()}

    def persistent_id(self, obj: Any) -> str | None:
        return self._names.get(id(obj))

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is np.ndarray and not obj.flags.writeable and not obj.dtype.hasobject and obj.dtype.itemsize:
            return _frozen_array, (obj.tobytes(), obj.dtype, obj.shape)
        if type(obj) is memoryview and obj.readonly:
            return bytes, (obj.tobytes(),)
        return NotImplemented


class _WorldUnpickler(pickle.Unpickler):
    """Loads what `_WorldPickler` wrote, a live object's name becoming the resumed run's object."""

    def __init__(self, file: Any, live: Mapping[str, Any]) -> None:
        super().__init__(file)
        self._live = live

    def persistent_load(self, name: str) -> Any:
        try:
            return self._live[name]
        except KeyError:
            raise CheckpointError(name, "the checkpoint refers to a party or object this run does not have") from None


def _attributes(obj: Any) -> dict[str, Any]:
    """An object's saved attributes: all but its cached mailbox (fetched again from the resumed network)."""
    return {name: value for name, value in vars(obj).items() if name != "_mailbox"}


def _set_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    state = vars(obj)
    state.clear()
    state.update(attributes)
    if hasattr(type(obj), "mailbox"):
        state["_mailbox"] = None


class Checkpoints:
    """The checkpointing of one run: its work folder and interval, and the checkpoint it resumes from.

    Args:
        folder: the work folder (`work_folder`); it exists.
        every: save at the end of every ``every``-th round; one due while some party is not at rest is put
            off to the next round's end (counted in ``deferred``).
        scenario, transcript: the run's, saved with each checkpoint.
        resumed: the checkpoint this run resumes from (None: a new run).
    """

    def __init__(self, folder: Path, every: int, scenario: Any, transcript: bool, resumed: Saved | None = None) -> None:
        self.folder = folder
        self.every = every
        self.scenario = scenario
        self.transcript = transcript
        self.resumed = resumed
        self.last_saved = resumed.round if resumed is not None else 0
        self.wall_before_s = resumed.wall_s if resumed is not None else 0.0
        self.deferred = 0
        self.data = ""
        self.start = 0.0
        self.wall_start = 0.0

    @classmethod
    def create(cls, out: Path, every: int, scenario: Any, transcript: bool) -> Checkpoints:
        """Make the work folder of a new run whose result goes to ``out``; OutputError if one is there
        already (an interrupted run's, which ``--resume`` continues: nothing of it is removed)."""
        folder = work_folder(out)
        try:
            os.mkdir(folder)
        except FileExistsError:
            if (folder / CHECKPOINT_FILE).is_file():
                raise OutputError(
                    folder, f"holds the checkpoints of an interrupted run of {out}: resume it (fedrecsim run --resume {out}) "
                    "or remove this folder"
                ) from None
            raise OutputError(
                folder, f"exists and holds no checkpoint (the checkpoints of a run into {out} go here): move it away, "
                "or choose another --out"
            ) from None
        except OSError as exc:
            raise OutputError(folder, f"cannot create the checkpoint folder: {exc.strerror}") from None
        return cls(folder, every, scenario, transcript)

    @property
    def saved(self) -> bool:
        """Whether the work folder holds a checkpoint (this run's, or the one it resumed from)."""
        return (self.folder / CHECKPOINT_FILE).exists()

    def discard(self) -> None:
        """Remove the work folder and what this module wrote into it (a run that completed, or failed)."""
        for name in (CHECKPOINT_FILE, _PARTIAL_FILE):
            path = self.folder / name
            if path.exists():
                path.unlink()
        if self.folder.exists():
            self.folder.rmdir()

    @staticmethod
    def live(ctx: Any, population: Population | None, objects: Mapping[str, Any]) -> dict[str, Any]:
        """The run's live objects by name: what a checkpoint refers to instead of saving."""
        network = ctx.network
        live: dict[str, Any] = {
            "context": ctx, "network": network, "ledger": network.ledger, "faults": network.faults, "links": network.links,
            "model_use": ctx.model_use, "train": ctx.train, "test": ctx.test,
        }
        if population is not None:
            live["population"] = population
            live.update((f"user {party}", user) for party, user in population.users.items())
        live.update((f"object {name}", obj) for name, obj in objects.items())
        return live

    def restore(self, ctx: Any, population: Population | None, objects: Mapping[str, Any]) -> dict[str, Any]:
        """Put the resumed checkpoint's world into this rebuilt run; returns the driver's saved values."""
        if self.resumed is None:
            raise RuntimeError("this run does not resume from a checkpoint")
        live = self.live(ctx, population, objects)
        world = _WorldUnpickler(io.BytesIO(self.resumed.world), live).load()
        ctx.network.restore_state(world["network"])
        ctx.network.ledger.restore_state(world["ledger"])
        vars(ctx.model_use).update(world["model_use"])
        if population is not None:
            for party, attributes in world["users"].items():
                _set_attributes(population.users[party], attributes)
            population.restore_state(world["population"])
        for name, attributes in world["objects"].items():
            _set_attributes(objects[name], attributes)
        return world["values"]

    def due(self, round_index: int, rounds: int) -> bool:
        """Whether a checkpoint is to be saved at the end of ``round_index`` (never after the last round)."""
        return round_index < rounds and round_index - self.last_saved >= self.every

    async def save(
        self, ctx: Any, round_index: int, population: Population | None, objects: Mapping[str, Any],
        values: dict[str, Any], resting: tuple[Any, ...],
    ) -> None:
        """Save the world at the end of ``round_index`` once every task is blocked, unless an actor with a
        task is not at its resume point: then the checkpoint is put off to a later round's end (`due`
        stays true) and counted in ``deferred``."""
        await trio.testing.wait_all_tasks_blocked()
        restless = population.not_at_rest() if population is not None else []
        restless += [actor.party for actor in resting if not actor.at_rest()]
        if restless:
            self.deferred += 1
            return
        live = self.live(ctx, population, objects)
        world = {
            "network": ctx.network.checkpoint_state(),
            "ledger": ctx.network.ledger.checkpoint_state(),
            "model_use": vars(ctx.model_use),
            "users": {party: _attributes(user) for party, user in population.users.items()} if population is not None else {},
            "population": population.checkpoint_state() if population is not None else None,
            "objects": {name: _attributes(obj) for name, obj in objects.items()},
            "values": values,
        }
        buffer = io.BytesIO()
        _WorldPickler(buffer, live).dump(world)
        saved = Saved(
            CHECKPOINT_FORMAT, __version__, self.scenario, self.transcript, self.data, self.every, round_index,
            trio.current_time(), self.start, self.wall_before_s + (time.perf_counter() - self.wall_start), buffer.getvalue(),
        )
        self._write(saved)
        self.last_saved = round_index

    def _write(self, saved: Saved) -> None:
        partial = self.folder / _PARTIAL_FILE
        with open(partial, "wb") as handle:
            pickle.dump(saved, handle, protocol=pickle.HIGHEST_PROTOCOL)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.folder / CHECKPOINT_FILE)
        directory = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


__all__ = ["CHECKPOINT_FILE", "CHECKPOINT_FORMAT", "Checkpoints", "Saved", "data_fingerprint", "load", "work_folder"]
