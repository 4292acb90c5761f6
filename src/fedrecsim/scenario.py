"""Scenario files: TOML in, a typed and validated `Scenario` out.

A scenario has the tables ``[run]``, ``[data]``, ``[network]``, ``[availability]``, ``[faults]`` and
``[protocol]``. Every key has a default except ``run.protocol``; ``[protocol]`` is validated by the chosen
protocol's own config class. Link faults (loss, duplication, reordering, partitions) are keys of
``[network]``; party faults (crashes, restarts, byzantine and slow parties) are ``[faults]``'s arrays of
tables (docs/faults.md says what each protocol does under each). Overrides (``--set key.path=value`` on the command line) are applied to the raw tables
before validation, values parsed as TOML literals, so an override is checked exactly like the file.
Any problem raises `ConfigError` naming the key path and what is allowed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .config import build, param, to_table
from .errors import ConfigError
from .network.faults import Byzantine, Corruption, Crash, PartyFaults
from .network.availability import (
    AlwaysOnline,
    BernoulliChurn,
    Churn,
    ComputeTime,
    LogNormalCompute,
    MarkovChurn,
    MidRoundDropout,
    NoComputeDelay,
    Trace,
)
from .network.links import LinkSpec, Links, Partition, latency_from_table, link_ends
from .network.party import Party, Role
from .network.wire import registered_kinds
from .protocols import built_in_protocols, protocol_spec

_TABLES = ("run", "data", "network", "availability", "faults", "protocol")


@dataclass(frozen=True)
class RunConfig:
    protocol: str = param(
        doc=f"a registered protocol (built in: {', '.join(built_in_protocols())}; fedrecsim protocols lists them "
        'and the installed ones) or "package.module:ATTRIBUTE" naming a ProtocolSpec'
    )
    name: str = param(
        "run", doc="a label for the run and its result folder: one file-name component (no / or \\, not . or ..)"
    )
    seed: int = param(
        0, ge=0, le=2**64 - 1, doc="every random stream of the run derives from this (a 64-bit unsigned integer)"
    )
    rounds: int = param(100, ge=1, doc="the protocol's unit: iterations, epochs or rounds")
    round_gap_s: float = param(1.0, ge=0, doc="virtual seconds between rounds (joins and leaves land here)")
    round_timeout_s: float = param(60.0, gt=0, doc="how long a round waits for replies before it goes on")
    max_virtual_s: float = param(
        0.0,
        ge=0,
        doc="the run's virtual-time budget: a run still going after this many virtual seconds stops with "
        "PartyTimeout; 0 = (rounds + 2) x (round_gap_s + round_timeout_s) x 4 + 3000, ten minutes before the "
        "horizon at which every party's waits end",
    )

    def __post_init__(self) -> None:
        problem = _file_name_problem(self.name)
        if problem is not None:
            raise ConfigError("run.name", f"{problem}, got {self.name!r} (it names the result folder)")


_MAX_NAME_LENGTH = 200


def _file_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one component of a path on any common file system (None: it can)."""
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return "must not be . or .."
    if "/" in name or "\\" in name:
        return "must not contain a path separator"
    if not name.isprintable():
        return "must be printable (no control characters)"
    if len(name) > _MAX_NAME_LENGTH:
        return f"must be at most {_MAX_NAME_LENGTH} characters"
    return None


@dataclass(frozen=True)
class DataConfig:
    source: Literal[
        "synthetic",
        "movielens-100k",
        "movielens-1m",
        "npz",
        "lastfm",
        "filmtrust",
        "citeulike-a",
        "lightgcn",
        "gowalla",
        "yelp2018",
    ] = param(
        "synthetic",
        doc="where the data comes from: the synthetic generator or a loader reading data.path (lightgcn, gowalla, "
        "yelp2018: LightGCN's train.txt; lastfm: hetrec-2011 user_artists.dat, play counts; filmtrust: ratings.txt; "
        "citeulike-a: users.dat)",
    )
    path: str = param(
        "",
        doc="the file or folder a loader reads; relative paths are taken from the scenario file's folder; "
        "empty for a registered data set (fedrecsim data list): the copy fetched into the data home "
        "(fedrecsim data fetch NAME)",
    )
    test_path: str = param(
        "",
        doc="a given held-out set in the same format as data.path, which replaces the split (split and "
        "test_fraction are then unused); empty: the split makes one -- except that a LightGCN folder's "
        "test.txt is its given held-out set",
    )
    feedback: Literal["explicit", "implicit", "counts"] = param(
        "explicit",
        doc="explicit ratings, implicit interactions (0/1) or counts (synthetic: Poisson(exp(U V^T)), Ribero et al.)",
    )
    factors: Literal["scaled", "unit-norm"] = param(
        "scaled",
        doc="synthetic counts: how U and V are drawn -- Gaussian entries of variance rank^-1/2 (log-rates of unit "
        "variance), or Gaussian rows scaled to unit length as the Ribero et al. authors' notebooks (log-rates in "
        "[-1, 1] of variance 1/rank)",
    )
    users: int = param(943, ge=1, doc="synthetic: number of users")
    items: int = param(1682, ge=1, doc="synthetic: number of items")
    ratings: int = param(100_000, ge=1, doc="synthetic: number of observed ratings or interactions")
    rank: int = param(10, ge=1, doc="synthetic: rank of the latent preference matrix")
    noise: float = param(0.5, ge=0, doc="synthetic: standard deviation of the rating noise")
    min_per_user: int | None = param(
        None, ge=0, doc="synthetic: entries every user gets at least (default min(20, ratings // users))"
    )
    split: Literal["random", "per_user", "leave_one_out", "users", "heldout_users"] = param(
        "random",
        doc="how test entries are held out: at random, a fraction of each user's, one per user, "
        "test_entries of each of a test_fraction share of the users, or (heldout_users) a test_share of each "
        "of a test_fraction share of the users",
    )
    test_fraction: float = param(
        0.1, gt=0, lt=1, doc="the share of entries held out for testing (split = 'users': the share of users)"
    )
    test_entries: int = param(5, ge=1, doc="split = 'users': entries held out per test user")
    test_share: float = param(
        0.2, gt=0, lt=1, doc="split = 'heldout_users': the share of each held-out user's entries tested; the rest folds in"
    )
    min_rating: float = param(
        0.0, ge=0, doc="keep only entries of at least this value, before binarize (0 = all; MovieLens-1M implicit: 4)"
    )
    rating_range: tuple[float, ...] | None = param(
        None,
        doc="npz: the public scale [min, max] the values come from; unset = the matrix's own smallest and largest "
        "value, which is not public (private protocols that calibrate noise to the scale refuse it)",
    )
    binarize: bool = param(False, doc="turn every positive value into 1 (implicit feedback from ratings)")
    min_user_interactions: int = param(0, ge=0, doc="drop users with fewer entries (0 = keep all)")
    min_item_interactions: int = param(0, ge=0, doc="drop items with fewer entries (0 = keep all)")
    subsample_items: int = param(0, ge=0, doc="keep the most popular items only (0 = all); after the filters")
    subsample_users: int = param(0, ge=0, doc="then keep this many random users among those left (0 = all)")
    silo_partition: Literal["uniform", "dirichlet", "zip"] = param(
        "uniform",
        doc="cross-silo protocols: which silo holds each user -- equal random parts, Dirichlet(silo_alpha) "
        "shares, or the zip code's first digit (MovieLens u.user / users.dat beside the ratings)",
    )
    silos: int = param(10, ge=1, doc="cross-silo protocols: number of silos (uniform, dirichlet)")
    silo_alpha: float = param(1.0, gt=0, doc="cross-silo protocols: the Dirichlet concentration (smaller: more skewed sizes)")

    def __post_init__(self) -> None:
        """The synthetic generators' sizes checked together, so a scenario that cannot be drawn is refused when
        it is read (a sweep's plan, ``fedrecsim inspect``), not after its result folder exists."""
        if self.source != "synthetic":
            return
        cells = self.users * self.items
        if self.ratings > cells:
            raise ConfigError("data.ratings", f"{self.ratings} exceeds data.users * data.items = {cells}")
        if self.min_per_user is not None and (
            self.min_per_user > self.items or self.users * self.min_per_user > self.ratings
        ):
            raise ConfigError(
                "data.min_per_user",
                f"{self.min_per_user} per user needs {self.users * self.min_per_user} entries and at most "
                f"{self.items} items, but there are {self.ratings} entries over {self.items} items",
            )


@dataclass(frozen=True)
class PartitionTable:
    """One entry of ``[[network.partitions]]``."""

    from_s: float = param(ge=0, doc="when the links go down, in virtual seconds from the start of the run")
    until_s: float = param(gt=0, doc="when they come back up (> from_s)")
    links: tuple[str, ...] = param(
        doc='the links it takes down: "A->B" (one direction) or "A-B" (both), A and B a role (user: every '
        "user) or a party (user:3)"
    )


@dataclass(frozen=True)
class NetworkConfig:
    latency: dict[str, Any] = field(
        default_factory=lambda: {"model": "constant", "seconds": 0.0},
        metadata={"doc": "the one-way delay of every link: a latency model table (model = ...)"},
    )
    bandwidth_bps: float = param(0.0, ge=0, doc="bits per second per directed link; 0 = unlimited")
    loss: float = param(0.0, ge=0, lt=1, doc="the chance each message is lost in flight")
    duplicate: float = param(
        0.0, ge=0, le=1, doc="the chance the network delivers a message a second time (the copy with its own latency)"
    )
    reorder: float = param(
        0.0, ge=0, le=1, doc="the chance a message is held back by an extra delay, so that later ones overtake it"
    )
    reorder_delay_s: float = param(0.0, ge=0, doc="reorder: the extra delay is uniform on [0, reorder_delay_s)")
    resolution_s: float = param(0.001, ge=0, doc="delivery times are rounded up to this; 0 = exact")
    max_message_mb: float = param(256.0, gt=0, doc="the wire refuses a message larger than this (MiB)")
    links: dict[str, Any] = field(
        default_factory=dict,
        metadata={"doc": 'per role pair: "user-server" (both directions) or "user->server" (one)'},
    )
    partitions: tuple[PartitionTable, ...] = param(
        (), doc="intervals of virtual time during which sets of links are down ([[network.partitions]])"
    )

    def __post_init__(self) -> None:
        self.link_policy(seed=0)

    def link_policy(self, seed: int, slow: Mapping[Party, float] | None = None) -> Links:
        """The seeded link policy this section describes; ``slow``: the slow parties of ``[faults]``."""
        default = LinkSpec(
            latency_from_table(self.latency, "network.latency"), self.bandwidth_bps, self.loss, self.duplicate,
            self.reorder, self.reorder_delay_s,
        )
        by_roles: dict[tuple[Role, Role], LinkSpec] = {}
        for key, table in self.links.items():
            key_path = f"network.links.{key}"
            pairs = _role_pairs(key, key_path)
            if not isinstance(table, Mapping):
                raise ConfigError(key_path, "expected a table with latency, bandwidth_bps, loss, duplicate, reorder and/or reorder_delay_s")
            spec = build(_LinkTable, table, key_path)
            latency = latency_from_table(spec.latency, f"{key_path}.latency") if spec.latency else default.latency
            values = {
                name: getattr(default, name) if getattr(spec, name) is None else getattr(spec, name)
                for name in ("bandwidth_bps", "loss", "duplicate", "reorder", "reorder_delay_s")
            }
            link = _anchored(lambda: LinkSpec(latency, **values), "network", key_path)
            for pair in pairs:
                by_roles[pair] = link
        return Links(seed, default, by_roles, partitions=self._partitions(), slow=slow or {})

    def _partitions(self) -> list[Partition]:
        partitions = []
        for position, table in enumerate(self.partitions):
            key_path = f"network.partitions[{position}]"
            ends = tuple(
                pair
                for number, text in enumerate(table.links)
                for pair in link_ends(text, f"{key_path}.links[{number}]")
            )
            partitions.append(_anchored(lambda: Partition(table.from_s, table.until_s, ends), "network.partitions", key_path))
        return partitions


def _anchored(make: Any, default_path: str, key_path: str) -> Any:
    """``make()``, its ConfigError's key re-anchored from ``default_path`` (what the class names, e.g.
    ``network.loss``) to ``key_path`` (where the value sits in the file, e.g. ``network.links.user-server``)."""
    try:
        return make()
    except ConfigError as err:
        raise ConfigError(key_path + err.key_path.removeprefix(default_path), err.problem) from err


@dataclass(frozen=True)
class _LinkTable:
    latency: dict[str, Any] = field(
        default_factory=dict, metadata={"doc": "this link's latency model table; unset = network.latency"}
    )
    bandwidth_bps: float | None = param(None, ge=0, doc="unset = network.bandwidth_bps; 0 = unlimited")
    loss: float | None = param(None, ge=0, lt=1, doc="unset = network.loss")
    duplicate: float | None = param(None, ge=0, le=1, doc="unset = network.duplicate")
    reorder: float | None = param(None, ge=0, le=1, doc="unset = network.reorder")
    reorder_delay_s: float | None = param(None, ge=0, doc="unset = network.reorder_delay_s")


def _role_pairs(key: str, key_path: str) -> list[tuple[Role, Role]]:
    directed = "->" in key
    left, sep, right = key.partition("->" if directed else "-")
    roles = {role.value: role for role in Role}
    if not sep or left not in roles or right not in roles:
        raise ConfigError(
            key_path, f"expected ROLE-ROLE or ROLE->ROLE with roles among {', '.join(sorted(roles))}"
        )
    pair = (roles[left], roles[right])
    return [pair] if directed else [pair, (pair[1], pair[0])]


@dataclass(frozen=True)
class AvailabilityConfig:
    model: Literal["always", "bernoulli", "markov", "trace"] = param(
        "always", doc="who is online when: everyone, Bernoulli churn between rounds, Markov on/off, a trace"
    )
    p_join: float = param(0.005, ge=0, le=1, doc="bernoulli: chance an offline user joins between rounds")
    p_leave: float = param(0.01, ge=0, le=1, doc="bernoulli: chance an online user leaves between rounds")
    initial_online: float = param(1.0, ge=0, le=1, doc="bernoulli: fraction online at the start")
    mean_on_s: float = param(3600.0, gt=0, doc="markov: mean online period")
    mean_off_s: float = param(3600.0, gt=0, doc="markov: mean offline period")
    trace: str = param(
        "", doc="trace: CSV with party,online_from_s,online_until_s (relative: from the scenario file's folder)"
    )
    dropout: float = param(0.0, ge=0, le=1, doc="chance an online user crashes mid-round")
    compute_median_s: float = param(0.0, ge=0, doc="median local compute time per round (0 = none)")
    compute_sigma: float = param(0.5, ge=0, doc="the standard deviation of log(compute time)")
    slow_fraction: float = param(0.0, ge=0, le=1, doc="fraction of users that are stragglers")
    slow_factor: float = param(10.0, ge=1, doc="stragglers compute this many times longer")

    def __post_init__(self) -> None:
        if self.model == "trace" and not self.trace:
            raise ConfigError("availability.trace", "model = 'trace' needs the path of a trace CSV")

    def churn(self) -> Churn:
        if self.model == "bernoulli":
            return BernoulliChurn(self.p_join, self.p_leave, self.initial_online)
        if self.model == "markov":
            return MarkovChurn(self.mean_on_s, self.mean_off_s)
        if self.model == "trace":
            return Trace.from_csv(Path(self.trace))
        return AlwaysOnline()

    def mid_round_dropout(self) -> MidRoundDropout | None:
        return MidRoundDropout(self.dropout) if self.dropout > 0 else None

    def compute_time(self) -> ComputeTime:
        if self.compute_median_s > 0:
            return LogNormalCompute(self.compute_median_s, self.compute_sigma, self.slow_fraction, self.slow_factor)
        return NoComputeDelay()


@dataclass(frozen=True)
class CrashTable:
    """One entry of ``[[faults.crash]]``."""

    party: str = param(doc="who crashes: a party such as user:3, silo:1, third_party:0 or proxy:0")
    kind: str = param(
        "", doc="the stage: it crashes just before it would send a message of this kind (e.g. fcf.item_gradients); "
        '"" = before whatever it sends next'
    )
    round: int | None = param(None, ge=0, doc="in this round (the ledger's; 0 = the set-up, R + 1 = a closing phase); unset = the first time")
    restart_after_s: float | None = param(
        None, ge=0, doc="users only: it restarts this many virtual seconds after the crash; unset = never"
    )
    keep_state: bool = param(
        True, doc="a restarted user keeps its state, or (false) restarts from its initial state with a fresh generator"
    )


@dataclass(frozen=True)
class ByzantineTable:
    """One entry of ``[[faults.byzantine]]``."""

    party: str = param(doc="the byzantine party, e.g. user:3")
    corrupt: Literal["nan", "huge", "shape", "dtype", "kind"] = param(
        doc="nan: every float NaN | huge: every float 1e300 (a float32 array: its largest finite value) | "
        "shape: the first array one row short | dtype: the first array float32 (float64 if it was) | "
        "kind: another kind of the protocol"
    )
    kind: str = param("", doc='the kind it corrupts (e.g. fcf.item_gradients); "" = everything it sends')


@dataclass(frozen=True)
class SlowTable:
    """One entry of ``[[faults.slow]]``."""

    party: str = param(doc="the slow party, e.g. user:3 or third_party:0")
    delay_s: float = param(gt=0, doc="every message it sends leaves this many virtual seconds late")


@dataclass(frozen=True)
class FaultsConfig:
    crash: tuple[CrashTable, ...] = param((), doc="parties that crash at a stage ([[faults.crash]])")
    byzantine: tuple[ByzantineTable, ...] = param(
        (), doc="parties that send corrupted messages ([[faults.byzantine]])"
    )
    slow: tuple[SlowTable, ...] = param((), doc="parties whose every message leaves late ([[faults.slow]])")

    def __post_init__(self) -> None:
        self.party_faults()
        self.slow_parties()

    def party_faults(self) -> PartyFaults:
        """The crash and byzantine rules of this section."""
        crashes = []
        for position, table in enumerate(self.crash):
            key_path = f"faults.crash[{position}]"
            party = _party(table.party, f"{key_path}.party")
            _kind(table.kind, f"{key_path}.kind")
            if table.restart_after_s is not None and party.role is not Role.USER:
                raise ConfigError(
                    f"{key_path}.restart_after_s", f"only users restart (the population restarts them); {party} never does"
                )
            crashes.append(Crash(party, table.kind, table.round, table.restart_after_s, table.keep_state))
        byzantine = []
        for position, table in enumerate(self.byzantine):
            key_path = f"faults.byzantine[{position}]"
            _kind(table.kind, f"{key_path}.kind")
            byzantine.append(Byzantine(_party(table.party, f"{key_path}.party"), Corruption(table.corrupt), table.kind))
        return PartyFaults(crashes, byzantine)

    def slow_parties(self) -> dict[Party, float]:
        """The extra delay of each slow party's messages (one entry per party)."""
        slow: dict[Party, float] = {}
        for position, table in enumerate(self.slow):
            key_path = f"faults.slow[{position}].party"
            party = _party(table.party, key_path)
            if party in slow:
                raise ConfigError(key_path, f"{party} is already slow (an earlier entry); give each party one delay")
            slow[party] = table.delay_s
        return slow


def _party(text: str, key_path: str) -> Party:
    try:
        return Party.parse(text)
    except ValueError:
        roles = ", ".join(sorted(role.value for role in Role))
        raise ConfigError(key_path, f"expected a party ROLE:INDEX (ROLE one of {roles}), e.g. user:3; got {text!r}") from None


def _kind(kind: str, key_path: str) -> None:
    """A fault's message kind must be one the wire knows (registered by the loaded protocols)."""
    if kind and kind not in registered_kinds():
        known = ", ".join(sorted(name for name in registered_kinds() if not name.startswith("test.")))
        raise ConfigError(key_path, f"no message kind {kind!r}; known kinds: {known}")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: the common sections and the protocol's own config object."""

    run: RunConfig
    data: DataConfig
    network: NetworkConfig
    availability: AvailabilityConfig
    protocol: Any
    faults: FaultsConfig = field(default_factory=FaultsConfig)

    def to_table(self) -> dict[str, Any]:
        return {name: to_table(getattr(self, name)) for name in _TABLES}

    def with_seed(self, seed: int) -> Scenario:
        table = self.to_table()
        table["run"]["seed"] = seed
        return parse_scenario(table)


def parse_scenario(tables: Mapping[str, Any]) -> Scenario:
    """Validate raw tables (as read from TOML) into a `Scenario`."""
    if not isinstance(tables, Mapping):
        raise ConfigError("", "a scenario must be a table of tables")
    unknown = sorted(set(tables) - set(_TABLES))
    if "sweep" in unknown:
        raise ConfigError("sweep", "this is a study file (a grid x seeds): run it with fedrecsim sweep FILE --out DIR; "
                          f"a scenario holds only the tables {', '.join(_TABLES)}")
    if unknown:
        raise ConfigError(unknown[0], f"unknown table; allowed tables: {', '.join(_TABLES)}")
    run_table = tables.get("run", {})
    if not isinstance(run_table, Mapping) or "protocol" not in run_table:
        raise ConfigError("run.protocol", "is required (one of the registered protocols)")
    run = build(RunConfig, run_table, "run")
    spec = protocol_spec(run.protocol)
    return Scenario(
        run=run,
        data=build(DataConfig, tables.get("data", {}), "data"),
        network=build(NetworkConfig, tables.get("network", {}), "network"),
        availability=build(AvailabilityConfig, tables.get("availability", {}), "availability"),
        protocol=build(spec.config, tables.get("protocol", {}), "protocol"),
        faults=build(FaultsConfig, tables.get("faults", {}), "faults"),
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``key.path=value`` into the key path and the value parsed as a TOML literal.

    A value that is not a TOML literal is taken as a bare string, so ``--set run.name=study`` works.
    """
    key, sep, raw = text.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(keys) or len(keys) < 2:
        raise ConfigError(key.strip(), f"an override must look like table.key=value, got {text!r}")
    try:
        value = tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return keys, value


def apply_overrides(tables: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides to raw scenario tables (in place; returned for chaining)."""
    for text in overrides:
        keys, value = parse_override(text)
        target = tables
        for position, key in enumerate(keys[:-1]):
            node = target.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(".".join(keys[: position + 1]), "is a value, not a table; cannot set a key in it")
            target = node
        target[keys[-1]] = value
    return tables


# The keys whose values are file paths ("*" stands for any table name): relative ones in a scenario file
# are taken from the file's folder.
_PATH_KEYS = (
    ("data", "path"),
    ("data", "test_path"),
    ("availability", "trace"),
    ("network", "latency", "file"),
    ("network", "links", "*", "latency", "file"),
)


def _resolve_relative_paths(table: dict[str, Any], keys: tuple[str, ...], folder: Path) -> None:
    """Make the relative path at ``keys`` under ``table`` ("*" matches every key) start at ``folder``."""
    head, rest = keys[0], keys[1:]
    if not rest:
        value = table.get(head)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            table[head] = str(folder / value)
        return
    for child in list(table.values()) if head == "*" else [table.get(head)]:
        if isinstance(child, dict):
            _resolve_relative_paths(child, rest, folder)


def read_tables(path: str | Path) -> dict[str, Any]:
    """Read a scenario TOML file into raw tables; ConfigError on a missing, unreadable or malformed file.

    A relative file path in the file (``data.path``, ``availability.trace``, a latency model's ``file``)
    is resolved against the file's folder, so a scenario and its data can move together; overrides applied afterwards (`apply_overrides`, the
    CLI's ``--set``) stay relative to the current folder.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            tables = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("", f"scenario file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError("", f"scenario file {path} is a folder, not a TOML file") from None
    except OSError as exc:
        raise ConfigError("", f"scenario file {path} cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{path} is not a UTF-8 text file (byte {exc.start}); is it a TOML scenario?") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"{path} is not valid TOML: {exc}") from None
    for keys in _PATH_KEYS:
        _resolve_relative_paths(tables, keys, path.parent)
    return tables


def load_scenario(path: str | Path, overrides: Iterable[str] = ()) -> Scenario:
    """Read, override and validate a scenario file."""
    return parse_scenario(apply_overrides(read_tables(path), overrides))


__all__ = [
    "AvailabilityConfig",
    "ByzantineTable",
    "CrashTable",
    "DataConfig",
    "FaultsConfig",
    "NetworkConfig",
    "PartitionTable",
    "RunConfig",
    "Scenario",
    "SlowTable",
    "apply_overrides",
    "load_scenario",
    "parse_override",
    "parse_scenario",
    "read_tables",
]
