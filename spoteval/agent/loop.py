"""The agent's loop: start, recover, serve, dispatch, record, stop. Decisions live elsewhere.

One thread (this loop) owns the scheduling state; episode waiter threads, notice watchers and the
uploader only post messages to its queue. The order of a run:

1. upload what the spool still holds from an earlier incarnation on this disk;
2. start the model server (it warms up while the record is read);
3. read the record: start reason, attempts an earlier incarnation lost (recorded `interrupted`),
   results an earlier incarnation recorded as attempts but not as results (written now);
4. `start` event, then watch for notices, wait for the server, dispatch, `ready` event;
5. every ended attempt goes to the uploader at once (spool first); a heartbeat listing what is in
   flight is durable before new attempts start, and every `heartbeat_s`;
6. a notice or a stop rule ends the run: see `_on_notice` and `_begin_stop`.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import resource
import shutil
import signal
import statistics
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from spoteval.agent import episodes as ep
from spoteval.agent import history as hist
from spoteval.agent.config import AgentConfig
from spoteval.agent.notices import (
    SIGTERM_GRACE_S,
    Notice,
    SignalWatcher,
    Watcher,
    provider_watcher,
    start_watcher,
    stderr_log,
)
from spoteval.agent.price import DEFAULT_CURRENCY, Price, resolve_price
from spoteval.agent.rules import RunState, Stop, should_stop
from spoteval.agent.uploader import ATTEMPT, EVENT, Item, Uploader
from spoteval.record import (
    Attempt,
    Event,
    ManifestEntry,
    RecordError,
    RunLayout,
    format_time,
    parse_time,
    utc_now,
)
from spoteval.store import Store, StoreError

JOURNAL_WAIT_S: Final = 5.0  # longest wait for the in-flight heartbeat before starting attempts anyway
NOTICE_WAIT_S: Final = 5.0  # longest wait for the notice event before killing attempts anyway
DURATIONS_KEPT: Final = 256
SHUTDOWN_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})
UPLOAD_THREADS: Final = 16
BACKLOG: Final = 2 * UPLOAD_THREADS  # objects allowed to wait for the store before dispatch holds back
#: Providers whose VMs bill from machine boot (the agent counts boot -> agent start as billed).
BILLED_FROM_BOOT: Final = frozenset({"aws", "gcp", "azure", "nebius"})


@dataclass(frozen=True)
class BootTimes:
    """Where the OS tells it: machine boot -> agent process start."""

    boot_to_agent_s: float | None
    source: str | None
    extra: Mapping[str, float] = field(default_factory=dict)
    boot_time: datetime | None = None


def boot_times(boot_file: str, agent_started: datetime) -> BootTimes:
    """From the startup script's boot file, else from /proc (process start time since boot)."""
    try:
        with open(boot_file, encoding="utf-8") as f:
            doc = json.load(f)
        boot = parse_time(doc["boot_time"])
        extra: dict[str, float] = {}
        if isinstance(doc.get("startup_script_started"), str):
            script = parse_time(doc["startup_script_started"])
            extra["boot_to_startup_script_s"] = round((script - boot).total_seconds(), 3)
            extra["startup_script_to_agent_s"] = round((agent_started - script).total_seconds(), 3)
        return BootTimes(round((agent_started - boot).total_seconds(), 3), "boot_file", extra, boot)
    except (OSError, ValueError, KeyError, TypeError, RecordError):
        pass
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22: process start time, in clock ticks after boot
        seconds = ticks / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        # boot = now - uptime; the process started `seconds` after boot
        boot = utc_now() - timedelta(seconds=uptime)
        return BootTimes(round(seconds, 3), "proc", {}, boot)
    except (OSError, ValueError, IndexError):
        return BootTimes(None, None)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        store: Store,
        manifest: Sequence[ManifestEntry],
        *,
        started_wall: datetime,
        started_mono: float,
        log: Callable[[str], None] = stderr_log,
    ) -> None:
        self.config = config
        self.store = store
        self.layout = RunLayout(config.run_id)
        self.manifest = {m.id: m for m in manifest}
        self.order = [m.id for m in manifest]
        self.log = log
        self.started_wall, self.started_mono = started_wall, started_mono
        self.incarnation = uuid.uuid4().hex[:16]
        self.messages: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.seq = itertools.count()
        self.dispatches = itertools.count(1)
        self.price = Price(None, DEFAULT_CURRENCY, "unknown")
        self.boot = boot_times(config.boot_file, started_wall)
        self.work_dir = config.run_work_dir()
        self.model_url = config.server.url
        self.server = ep.ModelServer(config.server, os.path.join(self.work_dir, "server.log"), os.environ)
        # scheduling state (this thread only)
        self.pending: deque[str] = deque()
        self.running: dict[str, ep.Running] = {}
        self.settling: list[tuple[ep.Running, ep.Ended]] = []
        self.final: set[str] = set()
        self.failures: dict[str, int] = {}
        self.next_n: dict[str, int] = {}
        self.in_flight: dict[tuple[str, int], datetime] = {}
        self.counts = {"completed": 0, "model_failure": 0, "interrupted": 0, "results": 0}
        self.durations: deque[float] = deque(maxlen=DURATIONS_KEPT)
        self.durable_s: list[float] = []
        self.notice: Notice | None = None
        self.notice_mono = 0.0
        self.deadline_mono = 0.0
        self.stop: Stop | None = None
        self.exit_code = 0
        self.idle_since = time.monotonic()
        self.first_dispatch_mono: float | None = None
        self.healthy_mono: float | None = None
        self.health_checked = threading.Event()
        self.record_read_s = 0.0
        self.prev = hist.Billed(0.0, 0.0, {})
        self.billed_from = self._billed_from()
        self.noticed = threading.Event()  # a notice that stops work arrived (checked while starting up)
        self.watchers: dict[str, Watcher] = {}
        self.stopping_watchers = threading.Event()
        self.uploader: Uploader | None = None

    # --- plumbing -------------------------------------------------------------------------------

    def _deliver(self, notice: Notice) -> None:
        if notice.stops_work:
            self.noticed.set()
        self.messages.put(("notice", notice))

    def _on_exit(self, run: ep.Running) -> None:
        self.messages.put(("exit", run))

    def _on_durable(self, item: Item) -> None:
        self.messages.put(("durable", item))

    @property
    def up(self) -> Uploader:
        assert self.uploader is not None
        return self.uploader

    def event(
        self, kind: str, reason: str | None, details: Mapping[str, Any], when: datetime | None = None
    ) -> Item:
        """Build, check and submit an event (spooled before this returns)."""
        when = when or utc_now()
        node = self.config.node
        ev = Event(
            time=when,
            run_id=self.config.run_id,
            node=node.id,
            kind=kind,
            reason=reason,
            provider=node.provider,
            region=node.region,
            zone=node.zone,
            instance_type=node.instance_type,
            market=node.market,
            price_per_hour=self.price.per_hour,
            currency=self.price.recorded_currency,
            price_source=self.price.source,
            details={**details, "incarnation": self.incarnation},
        )
        item = Item(EVENT, ev.to_json(), key_time=format_time(when), node=node.id, seq=next(self.seq))
        return self.up.submit(item)

    def _wait_durable(self, item: Item, timeout: float, *, until_notice: bool = True) -> bool:
        """Wait until the item is in the store; give up early while the store is down (it stays spooled)
        and, unless `until_notice` is False, as soon as a notice that stops work arrives: the notice
        is handled first, whatever the store is doing."""
        deadline = time.monotonic() + timeout
        while not item.done.wait(0.05):
            if self.up.store_down or time.monotonic() >= deadline:
                return False
            if until_notice and self.noticed.is_set():
                return False
        return True

    def _in_flight_detail(self) -> list[list[Any]]:
        return [[e, d, format_time(t)] for (e, d), t in sorted(self.in_flight.items())]

    def _counts(self) -> dict[str, int]:
        return {
            **self.counts,
            "episodes": len(self.order),
            "final": len(self.final),
            "pending": len(self.pending),
            "running": len(self.running),
        }

    def _billed_from(self) -> datetime:
        """Machine boot on VM providers (billed from boot), else this agent's start."""
        if self.config.node.provider in BILLED_FROM_BOOT and self.boot.boot_time is not None:
            return min(self.boot.boot_time, self.started_wall)
        return self.started_wall

    def _mine_s(self) -> float:
        """This incarnation's billed seconds so far (not counting time an earlier one already billed)."""
        covered = self.prev.covered_until.get(self.config.node.id)
        begin = self.billed_from if covered is None else max(self.billed_from, covered)
        offset = (begin - self.started_wall).total_seconds()  # negative: billed before the agent started
        return max(0.0, time.monotonic() - self.started_mono - offset)

    def _uptime_s(self) -> float:
        return self.prev.seconds + self._mine_s()

    def _cost(self) -> float | None:
        if self.price.per_hour is None or self.prev.cost is None:
            return None
        return self.prev.cost + self.price.per_hour * self._mine_s() / 3600.0

    # --- the run --------------------------------------------------------------------------------

    def run(self) -> int:
        signals = SignalWatcher(self.config.sigterm_grace_s or SIGTERM_GRACE_S[self.config.node.provider])
        signals.install()
        start_watcher(signals, self._deliver, self.stopping_watchers)
        self.watchers[signals.name] = signals
        os.makedirs(self.work_dir, exist_ok=True)
        self.uploader = Uploader(
            self.store,
            self.layout,
            self.config.run_spool_dir(),
            workers=UPLOAD_THREADS,
            on_done=self._on_durable,
            log=self.log,
        )
        leftovers = self.up.load_spool()
        if leftovers:
            self.log(f"uploading {len(leftovers)} object(s) an earlier incarnation left in the spool")
            if not self._flush_starting():
                self.log("the store did not take the spooled objects yet; they stay spooled")
        self.server.start()
        threading.Thread(target=self._probe_health, name="health", daemon=True).start()
        t0 = time.monotonic()
        self.price = resolve_price(self.config)
        reason, reason_details, resolved, recovered = self._recover()
        self.record_read_s = time.monotonic() - t0
        start_details: dict[str, Any] = {
            **reason_details,
            **self.price.details,
            "heartbeat_s": self.config.heartbeat_s,
            "concurrency": self.config.episodes.concurrency,
            "max_attempts": self.config.episodes.max_attempts,
            "billed_from": format_time(self.billed_from),
            "resolved": resolved,
            "recovered": recovered,
            "record_read_s": round(self.record_read_s, 3),
            "episodes": {"total": len(self.order), "final": len(self.final), "pending": len(self.pending)},
            "pid": os.getpid(),
        }
        start = self.event("start", reason, start_details)
        self._wait_durable(start, NOTICE_WAIT_S)
        self.log(
            f"start ({reason}) run {self.config.run_id} node {self.config.node.id}: "
            f"{len(self.pending)} to run, {len(self.final)} final, price {self.price.per_hour} "
            f"{self.price.recorded_currency or ''} ({self.price.source})"
        )
        watcher = provider_watcher(
            self.config.node.provider, self.config.metadata_url, self.config.metadata_poll_s, self.log
        )
        if watcher is not None:
            self.watchers[watcher.name] = watcher
            start_watcher(watcher, self._deliver, self.stopping_watchers)
        try:
            if self.pending and not self._wait_healthy():
                return self._finish()
            self._loop()
            return self._finish()
        finally:
            self.stopping_watchers.set()
            self.server.stop()
            self.up.close()

    # --- start: recovery from the record --------------------------------------------------------

    def _recover(self) -> tuple[str, dict[str, Any], list[str], dict[str, int]]:
        backoff = 0.5
        while True:
            now = utc_now()
            try:
                with ThreadPoolExecutor(max_workers=16) as pool:
                    history = hist.read_history(
                        self.store, self.layout, self.order, node=self.config.node.id, now=now, pool=pool
                    )
                break
            except StoreError as exc:  # the record must be read before anything starts: wait for it
                if self.noticed.is_set():
                    raise
                self.log(f"reading the run record: {exc}; retrying in {backoff:.1f} s")
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)
        for problem in history.problems[:5]:
            self.log(f"record: {problem}")
        reason, details = hist.start_reason(history, self.config.node.id, now)
        incs = hist.unresolved(history, self.config.node.id, now)
        lost = hist.lost_attempts(hist.lost_candidates(incs), history.attempts)
        for episode, numbers in history.attempt_numbers.items():
            self.next_n[episode] = max(numbers) + 1
        recovered = {"lost_attempts": 0, "results": 0}
        for item in lost:
            if item.episode_id not in self.manifest:
                continue
            n = self._take_number(item.episode_id)
            attempt = Attempt(
                episode_id=item.episode_id,
                outcome="interrupted",
                attempt=n,
                node=item.node,
                started=item.started,
                ended=item.last_seen,
                error=f"node lost: incarnation {item.incarnation} recorded no end for this attempt",
                details={
                    "incarnation": item.incarnation,
                    "dispatch": item.dispatch,
                    "recorded_by": self.incarnation,
                    "lost": True,
                },
            )
            self.up.submit(Item(ATTEMPT, attempt.to_json()))
            recovered["lost_attempts"] += 1
        max_attempts = self.config.episodes.max_attempts
        for episode in self.order:
            if episode in history.results:
                self.final.add(episode)
                continue
            attempts = history.attempts.get(episode, ())
            failures = [a for a in attempts if a.outcome == "model_failure"]
            completed = [a for a in attempts if a.outcome == "completed"]
            self.failures[episode] = len(failures)
            final = completed[-1] if completed else (failures[-1] if len(failures) >= max_attempts else None)
            if final is not None:  # the attempt is recorded, its result is not: write it now
                self.up.submit(Item(ATTEMPT, final.to_json(), write_result=True))
                self.final.add(episode)
                recovered["results"] += 1
            else:
                self.pending.append(episode)
        if lost or recovered["results"]:
            self.log(
                f"recorded {recovered['lost_attempts']} attempt(s) lost with an earlier incarnation as "
                f"interrupted; {recovered['results']} result(s) recovered from attempts"
            )
        if not self._flush_starting():
            self.log("the store did not take the recovered attempts yet; they stay spooled")
        self.prev = hist.billed(hist.intervals(history, self.price.per_hour))
        return reason, details, sorted(i.id for i in incs), recovered

    def _flush_starting(self) -> bool:
        """Wait for the uploads of start-up, but not past a notice (it is handled next)."""
        deadline = time.monotonic() + self.config.flush_timeout_s
        while time.monotonic() < deadline and not self.noticed.is_set():
            if self.up.flush(0.2):
                return True
        return self.up.flush(0)

    def _take_number(self, episode: str) -> int:
        n = self.next_n.get(episode, 1)
        self.next_n[episode] = n + 1
        return n

    # --- waiting for the model server -----------------------------------------------------------

    def _probe_health(self) -> None:
        """From server start: note when the health URL first answers (runs in a thread)."""
        deadline = time.monotonic() + self.config.server.ready_timeout_s
        while time.monotonic() < deadline and not self.stopping_watchers.is_set():
            if self.server.healthy():
                self.healthy_mono = time.monotonic()
                break
            if self.server.exit_code() is not None:
                break
            time.sleep(0.1)
        self.health_checked.set()

    def _wait_healthy(self) -> bool:
        while not self.health_checked.is_set():
            self._pump(0.1)
            if self.notice is not None:
                return False
        code = self.server.exit_code()
        if code is not None:
            return self._server_failed(f"model server exited with {code}: {self.server.log_tail()[-300:]}")
        if self.healthy_mono is None:
            return self._server_failed(
                f"model server not healthy at {self.config.server.health_url} within "
                f"{self.config.server.ready_timeout_s:g} s"
            )
        return True

    def _server_failed(self, message: str) -> bool:
        self.log(message)
        self.exit_code = 1
        self._begin_stop(Stop("stop_rule:idle", {"error": message}))
        return False

    # --- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_heartbeat = time.monotonic() + self.config.heartbeat_s
        while True:
            now = time.monotonic()
            wake = min(next_heartbeat, now + 0.5)
            for run in self.running.values():
                wake = min(wake, run.kill_at if run.kill_at is not None else run.timeout_at)
            if self.settling:
                wake = min(wake, self.settling[0][0].ended_mono + ep.SETTLE_S)
            if self.pending and self._free_slots() > 0 and self.stop is None and self.notice is None:
                wake = now
            self._pump(max(0.0, wake - now))
            now = time.monotonic()
            self._settle(now)
            self._kill_due(now)
            if self.stop is None and self.notice is None:
                code = self.server.exit_code()
                if code is not None:
                    self._server_failed(f"model server exited with {code}: {self.server.log_tail()[-300:]}")
            if self.stop is None and self.notice is None:
                idle = 0.0
                if self.running or self.pending:
                    self.idle_since = now
                else:
                    idle = now - self.idle_since
                state = RunState(
                    remaining=len(self.order) - len(self.final),
                    running=len(self.running),
                    uptime_s=self._uptime_s(),
                    cost=self._cost(),
                    idle_s=idle,
                )
                stop = should_stop(state, self.config.stop_rules)
                if stop is not None:
                    self._begin_stop(stop)
                else:
                    self._dispatch()
            if now >= next_heartbeat:
                self._heartbeat()
                next_heartbeat = now + self.config.heartbeat_s
            if (self.stop is not None or self.notice is not None) and not self.running and not self.settling:
                return

    def _pump(self, timeout: float) -> None:
        try:
            message = self.messages.get(timeout=timeout) if timeout > 0 else self.messages.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, payload = message
            if kind == "exit":
                self._on_ended(payload)
            elif kind == "notice":
                self._on_notice(payload)
            elif kind == "durable":
                self._on_recorded(payload)
            if self.notice is not None and kind == "notice":
                return  # handled: the caller decides what comes next
            try:
                message = self.messages.get_nowait()
            except queue.Empty:
                return

    def _heartbeat(self) -> None:
        self.event(
            "heartbeat",
            None,
            {
                "in_flight": self._in_flight_detail(),
                "counts": self._counts(),
                "uptime_s": round(self._uptime_s(), 3),
                "spooled": self.up.outstanding,
                "store_down": self.up.store_down,
            },
        )

    # --- dispatch -------------------------------------------------------------------------------

    def _free_slots(self) -> int:
        """Free episode slots, held back while the store falls behind (so results stay live).

        While uploads lag, at most `BACKLOG` objects wait for the store (twice the upload threads:
        enough to keep them busy); beyond that new attempts wait. During an outage (the store does
        not answer at all) work goes on and the spool absorbs it.
        """
        free = self.config.episodes.concurrency - len(self.running)
        if free > 0 and not self.up.store_down:
            free = min(free, BACKLOG - self.up.outstanding)
        return max(0, free)

    def _dispatch(self) -> None:
        free = self._free_slots()
        batch: list[ep.Running] = []
        while free > 0 and self.pending:
            episode = self.pending.popleft()
            if episode in self.final or episode in self.running:
                continue
            dispatch = next(self.dispatches)
            now = utc_now()
            stem = os.path.join(self.work_dir, f"{episode}.{self.incarnation}.{dispatch}")
            run = ep.Running(
                episode_id=episode,
                dispatch=dispatch,
                started=now,
                started_mono=time.monotonic(),
                output_path=stem + ".json",
                log_path=stem + ".log",
                timeout_at=0.0,
            )
            self.in_flight[(episode, dispatch)] = now
            batch.append(run)
            free -= 1
        if not batch:
            return
        journal = self.event(
            "heartbeat",
            None,
            {
                "in_flight": self._in_flight_detail(),
                "dispatched": [r.episode_id for r in batch],
                "counts": self._counts(),
            },
        )
        self._wait_durable(journal, JOURNAL_WAIT_S)
        base_env = dict(os.environ)
        for index, run in enumerate(batch):
            if self.noticed.is_set():
                # A notice arrived while the journal was written: start nothing more; the
                # episodes go back to the queue for the next incarnation.
                for held in reversed(batch[index:]):
                    self.in_flight.pop((held.episode_id, held.dispatch), None)
                    self.pending.appendleft(held.episode_id)
                break
            entry = self.manifest[run.episode_id]
            env = {
                **base_env,
                "SPOTEVAL_RUN_ID": self.config.run_id,
                "SPOTEVAL_EPISODE_ID": run.episode_id,
                "SPOTEVAL_EPISODE_PARAMS": json.dumps(dict(entry.params), sort_keys=True),
                "SPOTEVAL_MODEL_URL": self.model_url,
                "SPOTEVAL_OUTPUT": run.output_path,
            }
            run.started, run.started_mono = utc_now(), time.monotonic()
            run.timeout_at = run.started_mono + self.config.episodes.timeout_s
            self.running[run.episode_id] = run
            ep.spawn(self.config.episodes, run, self.model_url, env, self._on_exit)
        if self.first_dispatch_mono is None:
            self.first_dispatch_mono = time.monotonic()
            self._ready()

    def _ready(self) -> None:
        def since_start(mono: float | None) -> float | None:
            return None if mono is None else round(mono - self.started_mono, 3)

        details: dict[str, Any] = {
            "boot_to_agent_s": self.boot.boot_to_agent_s,
            "boot_source": self.boot.source,
            **self.boot.extra,
            "agent_to_server_healthy_s": since_start(self.healthy_mono),
            "agent_to_first_dispatch_s": since_start(self.first_dispatch_mono),
            "server_healthy_to_first_dispatch_s": (
                None
                if self.healthy_mono is None or self.first_dispatch_mono is None
                else round(self.first_dispatch_mono - self.healthy_mono, 3)
            ),
            "record_read_s": round(self.record_read_s, 3),
            "server_started_by_agent": bool(self.config.server.command),
        }
        self.event("ready", None, details)
        self.log(
            f"ready: server healthy {details['agent_to_server_healthy_s']} s after agent start, "
            f"first episode at {details['agent_to_first_dispatch_s']} s"
        )

    # --- ended attempts -------------------------------------------------------------------------

    def _on_ended(self, run: ep.Running) -> None:
        self.running.pop(run.episode_id, None)
        ended = ep.classify(run, self.config.episodes.timeout_s)
        if ended.settle:
            if self.notice is not None:
                self._finalize(run, self._during_shutdown(run, ended))
            else:
                self.settling.append((run, ended))
            return
        self._finalize(run, ended)

    def _during_shutdown(self, run: ep.Running, ended: ep.Ended) -> ep.Ended:
        """A failure seen around a notice: the shutdown's doing, or the episode's own?

        Interrupted when the episode died by a signal the agent did not send (or exited 128+N for
        SIGTERM, SIGKILL, SIGINT, SIGHUP, as shells report it): the OS stopping every process;
        or when the model server is gone or not answering. A plain failure of an episode that
        ran on after the notice stays a model failure.
        """
        code = run.returncode
        by_signal = code is not None and (code < 0 or code - 128 in SHUTDOWN_SIGNALS)
        if by_signal or self.server.exit_code() is not None or not self.server.healthy():
            return ep.Ended("interrupted", error=f"ended during shutdown: {ended.error}")
        return ended

    def _settle(self, now: float) -> None:
        while self.settling and now - self.settling[0][0].ended_mono >= ep.SETTLE_S:
            run, ended = self.settling.pop(0)
            self._finalize(run, ended)

    def _finalize(self, run: ep.Running, ended: ep.Ended) -> None:
        episode = run.episode_id
        assert run.ended is not None
        n = self._take_number(episode)
        final = ended.outcome == "completed"
        if ended.outcome == "model_failure":
            self.failures[episode] = self.failures.get(episode, 0) + 1
            final = self.failures[episode] >= self.config.episodes.max_attempts
        seconds = round(run.ended_mono - run.started_mono, 3)
        attempt = Attempt(
            episode_id=episode,
            outcome=ended.outcome,
            attempt=n,
            node=self.config.node.id,
            started=run.started,
            ended=max(run.ended, run.started),
            output=ended.output,
            error=ended.error,
            details={
                "incarnation": self.incarnation,
                "dispatch": run.dispatch,
                "seconds": seconds,
                "returncode": run.returncode,
            },
        )
        item = Item(ATTEMPT, attempt.to_json(), write_result=final)
        item.submitted = run.ended_mono
        self.up.submit(item)
        self.counts[ended.outcome] += 1
        if ended.outcome == "completed":
            self.durations.append(seconds)
        if final:
            self.final.add(episode)
        elif self.notice is None and self.stop is None:
            self.pending.append(episode)
        ep.cleanup(run)

    def _on_recorded(self, item: Item) -> None:
        if item.kind != ATTEMPT:
            return
        details = item.payload.get("details") or {}
        if details.get("incarnation") == self.incarnation:
            self.in_flight.pop((str(item.payload["episode_id"]), int(details.get("dispatch", 0))), None)
            if item.write_result:
                self.counts["results"] += 1
                if item.payload.get("outcome") == "completed":
                    self.durable_s.append(time.monotonic() - item.submitted)

    def _kill_due(self, now: float) -> None:
        for run in list(self.running.values()):
            if run.kill_at is not None and now >= run.kill_at:
                ep.kill(run, ep.KILL_CAPACITY)
            elif run.kill_reason is None and now >= run.timeout_at:
                ep.kill(run, ep.KILL_TIMEOUT)

    # --- notices and stops ----------------------------------------------------------------------

    def _on_notice(self, notice: Notice) -> None:
        left = notice.seconds_left()
        details = {
            **notice.details,
            "deadline": format_time(notice.deadline),
            "seconds_left": round(left, 3),
            "in_flight": self._in_flight_detail(),
            "counts": self._counts(),
        }
        if not notice.stops_work:
            self.event("notice", notice.reason, details)
            self.log(f"notice {notice.reason}: recorded, work continues")
            return
        if self.notice is not None:  # a second notice: record it, and hurry if it is sooner
            self.event("notice", notice.reason, {**details, "while_stopping": True})
            self.deadline_mono = min(self.deadline_mono, time.monotonic() + left)
            if notice.reason == "sigterm" and self.notice.reason == "sigterm":
                for run in self.running.values():
                    ep.kill(run, ep.KILL_CAPACITY)
            self._plan_kills()
            return
        self.notice = notice
        self.notice_mono = time.monotonic()
        self.deadline_mono = self.notice_mono + left
        self.pending.clear()
        item = self.event("notice", notice.reason, details)
        durable = self._wait_durable(item, min(NOTICE_WAIT_S, max(0.5, left / 3)), until_notice=False)
        took = time.monotonic() - self.notice_mono
        self.log(
            f"notice {notice.reason}: {left:.1f} s left, {len(self.running)} in flight; notice event "
            + (f"durable after {took:.3f} s" if durable else f"still spooled after {took:.3f} s")
        )
        for run, ended in self.settling:  # they ended within SETTLE_S before the notice
            self._finalize(run, self._during_shutdown(run, ended))
        self.settling.clear()
        self._plan_kills()

    def _finish_by(self) -> float:
        window = max(0.0, self.deadline_mono - self.notice_mono)
        margin = min(15.0, max(1.0, 0.25 * window))
        return self.deadline_mono - margin

    def _plan_kills(self) -> None:
        """Let an attempt run on only if it should end (median duration) before the deadline."""
        finish_by = self._finish_by()
        estimate = _median(self.durations)
        for run in self.running.values():
            if estimate is not None and run.started_mono + estimate <= finish_by:
                run.kill_at = finish_by
            else:
                ep.kill(run, ep.KILL_CAPACITY)

    def _begin_stop(self, stop: Stop) -> None:
        if self.stop is not None:
            return
        self.stop = stop
        self.pending.clear()
        for run in self.running.values():
            ep.kill(run, ep.KILL_CAPACITY)
        if stop.reason != "done":
            self.log(f"stop ({stop.reason}): {len(self.running)} attempt(s) ended early")

    # --- the end --------------------------------------------------------------------------------

    def _summary(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cost = self._cost()
        return {
            "counts": self._counts(),
            "uptime_s": round(self._uptime_s(), 3),
            "cost": None if cost is None else round(cost, 6),
            "agent_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "agent_max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "result_durable_s": {
                "n": len(self.durable_s),
                "p50": _percentile(self.durable_s, 0.5),
                "p99": _percentile(self.durable_s, 0.99),
                "max": max(self.durable_s) if self.durable_s else None,
            },
        }

    def _finish(self) -> int:
        if self.notice is not None:
            left = self.deadline_mono - time.monotonic()
            flushed = self.up.flush(max(0.5, left - 0.5))
            self._pump(0)
            recorded_s = time.monotonic() - self.notice_mono
            source = self.watchers.get(self.notice.source)
            if source is not None:
                try:
                    source.acknowledge(self.notice)
                except OSError as exc:
                    self.log(f"acknowledging the notice failed: {exc}")
            summary = self._summary()
            state = f"all recorded {recorded_s:.3f} s after the notice"
            if not flushed:
                state = f"{self.up.outstanding} object(s) still spooled"
            self.log(
                f"notice handled: {self.counts['interrupted']} interrupted, {state}; "
                f"summary {json.dumps(summary, sort_keys=True)}"
            )
            self.server.stop(grace_s=min(5.0, max(0.5, left - 1.0)))
            return 0
        stop = self.stop or Stop("done")
        flushed = self.up.flush(self.config.flush_timeout_s)
        self._pump(0)
        self.server.stop()
        details = {**stop.details, **self._summary(), "in_flight": self._in_flight_detail()}
        if not flushed:
            details["spooled"] = self.up.outstanding
        self.event("stop", stop.reason, details)
        self.up.flush(self.config.flush_timeout_s)
        self.log(f"stop ({stop.reason}): summary {json.dumps(details, sort_keys=True)}")
        if self.config.stop_rules.on_done == "poweroff":
            return self._poweroff()
        return self.exit_code

    def _poweroff(self) -> int:
        commands = [list(self.config.stop_rules.poweroff_command)]
        if tuple(commands[0]) == ("systemctl", "poweroff"):
            commands.append(["shutdown", "-h", "now"])
        for argv in commands:
            if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
                continue
            try:
                done = subprocess.run(argv, check=False, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.log(f"power off with {' '.join(argv)} failed: {exc}")
                continue
            if done.returncode == 0:
                self.log(f"powering off ({' '.join(argv)})")
                return self.exit_code
            self.log(f"power off with {' '.join(argv)} exited with {done.returncode}")
        self.log("could not power off: no power-off command worked")
        return 1
