"""A workload for the placement decision: what a user writes (YAML keys) and its parsed form.

`parse_workload(raw)` reads the mapping (a file, a stack's `spot-eval:workload` block, or
`EXAMPLE_WORKLOAD`) through the config reader into a frozen `Workload`, all times in hours; every
error is a `PlacementError` naming the key path. The model that prices it is spoteval.placement.model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from spoteval.config_reader import Reader, is_number, key_path
from spoteval.grant import Grant, GrantError
from spoteval.placement.policies import POLICY_CHOICES

#: The options in the order they are reported; ties in cost go to the earlier one.
OPTIONS: Final = ("spot", "on_demand", "non_preemptible")
#: What `concurrency` counts episodes in flight on: one node (whatever its GPUs), or one GPU (a node
#: with g GPUs runs g x concurrency; `spoteval.offers` compares instance types with it)
CONCURRENCY_PER: Final = ("node", "gpu")

#: The built-in example workload, as a user would write it.
EXAMPLE_WORKLOAD_YAML: Final = """\
episodes: 2000              # N
episode_minutes: 12         # D; or episode_minutes_samples: [list] from an earlier run
concurrency: 32             # C episodes in flight on one node
lifetime_hours: 6           # tau, mean allocation lifetime from start to preemption
restart:
  wait_minutes: 30          # W: no instance yet (capacity wait), not billed
  boot_minutes: 9           # B: boot, image, weights, warm-up, resume; billed and preemptible
prices:                     # per node-hour, one currency
  spot: 1.20
  on_demand: 3.40
  non_preemptible: 2.10     # optional: a box nobody takes back (reserved, owned, dedicated)
deadline_hours: 24          # optional
deadline_confidence: 0.9    # default 0.9
spot_margin: 0.10           # default 0.10
grant: {price_cap: 2.0, budget: 500}   # optional
"""

#: The same example as the mapping `yaml.safe_load(EXAMPLE_WORKLOAD_YAML)` gives (no YAML needed).
EXAMPLE_WORKLOAD: Final[Mapping[str, Any]] = {
    "episodes": 2000,
    "episode_minutes": 12,
    "concurrency": 32,
    "lifetime_hours": 6,
    "restart": {"wait_minutes": 30, "boot_minutes": 9},
    "prices": {"spot": 1.20, "on_demand": 3.40, "non_preemptible": 2.10},
    "deadline_hours": 24,
    "deadline_confidence": 0.9,
    "spot_margin": 0.10,
    "grant": {"price_cap": 2.0, "budget": 500},
}

WORKLOAD_KEYS: Final = frozenset(
    {
        "episodes",
        "episode_minutes",
        "episode_minutes_samples",
        "concurrency",
        "concurrency_per",
        "lifetime_hours",
        "lifetime_interval_hours",
        "restart",
        "prices",
        "deadline_hours",
        "deadline_confidence",
        "spot_margin",
        "grant",
        "nodes",
        "deadline_policy",
    }
)
RESTART_KEYS: Final = frozenset({"wait_minutes", "boot_minutes"})
PRICE_KEYS: Final = frozenset(OPTIONS)


class PlacementError(ValueError):
    """Bad input for the placement decision (workload, stack, trace). Names the key or file."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.problem = message


# --- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """Price per node-hour of each option; an option without a price is not considered."""

    spot: float
    on_demand: float | None = None
    non_preemptible: float | None = None

    def of(self, option: str) -> float | None:
        value: float | None = getattr(self, option)
        return value

    def to_json(self) -> dict[str, float]:
        return {name: price for name in OPTIONS if (price := self.of(name)) is not None}


@dataclass(frozen=True)
class Workload:
    """A workload's numbers, normalised to hours. Build it with `parse_workload`."""

    episodes: int
    episode_hours: float
    concurrency: int
    lifetime_hours: float
    wait_hours: float
    boot_hours: float
    prices: Prices
    deadline_hours: float | None = None
    deadline_confidence: float = 0.9
    spot_margin: float = 0.10
    grant: Grant = field(default_factory=Grant)
    #: measured episode lengths; empty when `episode_hours` is a single given length
    episode_samples_hours: tuple[float, ...] = ()
    #: a confidence interval for `lifetime_hours`, when the user knows one (shown on the plot)
    lifetime_interval_hours: tuple[float, float] | None = None
    #: `concurrency` per "node" or per "gpu" (see CONCURRENCY_PER)
    concurrency_per: str = "node"
    #: k nodes sharing one queue of episodes, each preempted independently, each with its own boot
    nodes: int = 1
    #: (option, why) for each option the stack cannot declare: never eligible, the reason given
    #: (spoteval.placement.inputs: a market the stack's provider refuses)
    left_out: tuple[tuple[str, str], ...] = ()
    #: the spot policy under a deadline: "auto" (the cheapest that meets it) or one of POLICIES
    deadline_policy: str = "auto"

    def why_left_out(self, option: str) -> str | None:
        """Why `option` is left out of the decision (None: it is considered)."""
        return dict(self.left_out).get(option)

    @property
    def rounds(self) -> float:
        """n = N / C, the number of rounds of C episodes in flight (fluid: may be fractional)."""
        return self.episodes / self.concurrency

    @property
    def node_rounds(self) -> float:
        """n / k: the rounds each of the k nodes runs (fluid)."""
        return self.rounds / self.nodes

    @property
    def work_hours(self) -> float:
        """The work at on-demand speed on each node: n D / k (fluid, no boot)."""
        return self.node_rounds * self.episode_hours

    @property
    def episode_lengths_hours(self) -> tuple[float, ...]:
        """The episode lengths the model averages over: the samples, or the one given length."""
        return self.episode_samples_hours or (self.episode_hours,)

    def to_json(self) -> dict[str, Any]:
        """The normalised inputs (all times in hours), as the JSON output's `inputs`."""
        return {
            "episodes": self.episodes,
            "episode_hours": self.episode_hours,
            "episode_hours_samples": list(self.episode_samples_hours) or None,
            "concurrency": self.concurrency,
            "concurrency_per": self.concurrency_per,
            "rounds": self.rounds,
            "lifetime_hours": self.lifetime_hours,
            "lifetime_interval_hours": (
                list(self.lifetime_interval_hours) if self.lifetime_interval_hours else None
            ),
            "wait_hours": self.wait_hours,
            "boot_hours": self.boot_hours,
            "prices": self.prices.to_json(),
            "deadline_hours": self.deadline_hours,
            "deadline_confidence": self.deadline_confidence,
            "spot_margin": self.spot_margin,
            "grant": self.grant.to_json(),
            **({"nodes": self.nodes} if self.nodes > 1 else {}),
            **({"left_out": dict(self.left_out)} if self.left_out else {}),
            **({"deadline_policy": self.deadline_policy} if self.deadline_policy != "auto" else {}),
        }


class _WorkloadReader(Reader):
    NOT_INTEGER: ClassVar[str] = "must be a whole number, got {value!r}"


def _samples_hours(read: Reader, key: str) -> tuple[float, ...]:
    value = read.value(key)
    if not isinstance(value, list | tuple) or not value:
        read.fail(key, f"must be a non-empty list of minutes, got {value!r}")
    for i, item in enumerate(value):
        if not is_number(item) or item <= 0:
            read.fail_at(f"{read.path(key)}[{i}]", f"must be a number > 0, got {item!r}")
    return tuple(float(v) / 60.0 for v in value)


def parse_workload(raw: object, where: str = "workload") -> Workload:
    """Parse and validate a workload mapping (see `EXAMPLE_WORKLOAD_YAML` for the keys).

    Pure: no files, no YAML. Keys in errors are dotted paths prefixed with `where` (for a stack:
    `spot-eval:workload.restart.boot_minutes`); pass `where=""` for bare key paths. Raises
    `PlacementError` on a missing or unknown key, a wrong type, a negative time or price, or a zero
    episode length, lifetime, episode count or concurrency.
    """
    read = _WorkloadReader(raw, where, error=PlacementError, known=WORKLOAD_KEYS, label="workload")

    episodes = read.integer("episodes", positive=True, whole_floats=True)
    has_length = read.has("episode_minutes")
    has_samples = read.has("episode_minutes_samples")
    if has_length and has_samples:
        read.fail("episode_minutes_samples", "give episode_minutes or episode_minutes_samples, not both")
    if has_samples:
        samples = _samples_hours(read, "episode_minutes_samples")
        episode_hours = math.fsum(samples) / len(samples)
    else:
        if not has_length:
            read.fail("episode_minutes", "missing (required, or give episode_minutes_samples)")
        samples = ()
        episode_hours = read.number("episode_minutes", positive=True) / 60.0
    concurrency = read.integer("concurrency", positive=True, whole_floats=True)
    per = read.value("concurrency_per") or "node"
    if per not in CONCURRENCY_PER:
        read.fail("concurrency_per", f"must be one of {', '.join(CONCURRENCY_PER)}, got {per!r}")
    nodes = read.integer("nodes", 1, positive=True, whole_floats=True)
    lifetime = read.number("lifetime_hours", positive=True)

    restart = read.section("restart", RESTART_KEYS)
    wait_hours = restart.number("wait_minutes") / 60.0
    boot_hours = restart.number("boot_minutes") / 60.0

    prices_read = read.section("prices", PRICE_KEYS)
    prices = Prices(
        spot=prices_read.number("spot"),
        on_demand=prices_read.opt_number("on_demand"),
        non_preemptible=prices_read.opt_number("non_preemptible"),
    )

    deadline = read.opt_number("deadline_hours", positive=True)
    confidence = read.number("deadline_confidence", 0.9, positive=True)
    if confidence > 1:
        read.fail("deadline_confidence", f"must be <= 1, got {confidence!r}")
    margin = read.number("spot_margin", 0.10)
    if margin >= 1:
        read.fail("spot_margin", f"must be < 1, got {margin!r}")

    try:
        grant = Grant.parse(read.value("grant"), where=key_path(where, "grant"))
    except GrantError as err:
        raise PlacementError(err.key, str(err).removeprefix(f"{err.key}: ")) from err

    policy = read.value("deadline_policy") or "auto"
    if policy not in POLICY_CHOICES:
        read.fail("deadline_policy", f"must be one of {', '.join(POLICY_CHOICES)}, got {policy!r}")
    if deadline is not None and per == "node":  # per GPU: the node's GPUs decide (see `check_deadline`)
        problem = deadline_problem(deadline, episodes, concurrency, nodes, episode_hours)
        if problem:
            read.fail("deadline_hours", problem)

    interval = _interval(read, "lifetime_interval_hours", lifetime)
    return Workload(
        episodes=episodes,
        episode_hours=episode_hours,
        concurrency=concurrency,
        lifetime_hours=lifetime,
        wait_hours=wait_hours,
        boot_hours=boot_hours,
        prices=prices,
        deadline_hours=deadline,
        deadline_confidence=confidence,
        spot_margin=margin,
        grant=grant,
        episode_samples_hours=samples,
        lifetime_interval_hours=interval,
        concurrency_per=per,
        nodes=nodes,
        deadline_policy=policy,
    )


def deadline_problem(
    deadline: float, episodes: int, concurrency: int, nodes: int, episode_hours: float
) -> str | None:
    """Why no market can meet `deadline` (the work at on-demand speed, N D / (C k), is longer), or None."""
    rounds = episodes / concurrency / nodes
    work = rounds * episode_hours
    if deadline >= work:
        return None
    fewest = math.ceil(episodes * episode_hours / concurrency / deadline - 1e-9)
    per = "N/C/k" if nodes > 1 else "N/C"
    return (
        f"{deadline:g} h is shorter than the work at on-demand speed, {work:.4g} h ({per} = {rounds:g} "
        f"rounds of {episode_hours:.4g} h): no market can meet it (the work fits by then only on {fewest} "
        "or more nodes)"
    )


def check_deadline(workload: Workload) -> None:
    """Refuse a deadline shorter than the work at on-demand speed (a PlacementError on deadline_hours)."""
    w, deadline = workload, workload.deadline_hours
    if deadline is None:
        return
    problem = deadline_problem(deadline, w.episodes, w.concurrency, w.nodes, w.episode_hours)
    if problem:
        raise PlacementError("deadline_hours", problem)


def _interval(read: Reader, key: str, tau: float) -> tuple[float, float] | None:
    value = read.value(key)
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(is_number(v) and v > 0 for v in value)
    ):
        read.fail(key, f"must be [low, high] in hours, both > 0, got {value!r}")
    low, high = float(value[0]), float(value[1])
    if not low <= tau <= high:
        read.fail(key, f"must contain lifetime_hours {tau:g}, got [{low:g}, {high:g}]")
    return (low, high)
