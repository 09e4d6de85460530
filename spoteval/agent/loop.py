"""The agent's loop: start, recover, serve, dispatch, record, stop. Decisions live elsewhere.

One thread (this loop) owns the scheduling state; episode waiter threads, notice watchers and the
uploader only post messages to its queue. The order of a run:

1. upload what the spool still holds from an earlier incarnation on this disk;
2. start the model server (it warms up while the record is read);
3. read the record and apply what `history.plan_recovery` decides from it: start reason, attempts
   an earlier incarnation lost (recorded `interrupted`), results an earlier incarnation recorded as
   attempts but not as results (written now);
4. `start` event, then watch for notices, wait for the server, dispatch, `ready` event;
5. every ended attempt goes to the uploader at once (spool first); a heartbeat listing what is in
   flight is durable before new attempts start, and every `heartbeat_s`;
6. a notice or a stop rule ends the run: see spoteval/agent/stopping.py.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Final

from spoteval.agent import claimed, tally
from spoteval.agent import episodes as ep
from spoteval.agent import history as hist
from spoteval.agent.boot import billed_from, boot_times, ready_details
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
from spoteval.agent.stopping import NOTICE_WAIT_S, Stopping
from spoteval.agent.uploader import ATTEMPT, EVENT, Item, Uploader
from spoteval.manifest import ManifestEntry
from spoteval.record import Attempt, Event, RunLayout, format_time, utc_now
from spoteval.store import Store, StoreError

JOURNAL_WAIT_S: Final = 5.0  # longest wait for the in-flight heartbeat before starting attempts anyway
UPLOAD_THREADS: Final = 16
BACKLOG: Final = 2 * UPLOAD_THREADS  # objects allowed to wait for the store before dispatch holds back


class Agent(Stopping):
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
        self.noticed = threading.Event()  # a notice that stops work arrived (checked while starting up)
        # scheduling state (this thread only)
        self.final: set[str] = set()
        self.pending = claimed.queue_for(self)
        self.running: dict[str, ep.Running] = {}
        self.settling: list[tuple[ep.Running, ep.Ended]] = []
        self.failures: dict[str, int] = {}
        self.next_n: dict[str, int] = {}
        self.in_flight: dict[tuple[str, int], datetime] = {}
        self.counts = {"completed": 0, "model_failure": 0, "interrupted": 0, "results": 0}
        self.durations: deque[float] = deque(maxlen=tally.DURATIONS_KEPT)
        self.durable_s: list[float] = []
        self.notice: Notice | None = None
        self.notice_mono = 0.0
        self.deadline_mono = 0.0
        self.stop: Stop | None = None
        self.exit_code = 0
        self.idle_since = time.monotonic()
        self.first_dispatch_mono: float | None = None
        self.record_read_s = 0.0
        self.prev = hist.Billed(0.0, 0.0, {})
        self.billed_from = billed_from(config.node.provider, self.boot, started_wall)
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
        self.server.probe(self.stopping_watchers)
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
            self.pending.fill(self.config.episodes.concurrency)
            if self.pending and not self._wait_healthy():
                return self._finish()
            self._loop()
            return self._finish()
        finally:
            self.stopping_watchers.set()
            self.server.stop()
            self.pending.close()
            self.up.close()

    # --- start: recovery from the record --------------------------------------------------------

    def _read_history(self) -> tuple[hist.History, datetime]:
        """The record as it is now; the record must be read before anything starts: wait for it."""
        backoff = 0.5
        while True:
            now = utc_now()
            try:
                with ThreadPoolExecutor(max_workers=16) as pool:
                    history = self.pending.read_history(
                        self.store, self.layout, self.order, node=self.config.node.id, now=now, pool=pool
                    )
                return history, now
            except StoreError as exc:
                if self.noticed.is_set():
                    raise
                self.log(f"reading the run record: {exc}; retrying in {backoff:.1f} s")
                time.sleep(backoff)
                backoff = min(30.0, backoff * 2)

    def _recover(self) -> tuple[str, dict[str, Any], list[str], dict[str, int]]:
        history, now = self._read_history()
        for problem in history.problems[:5]:
            self.log(f"record: {problem}")
        plan = hist.plan_recovery(
            history,
            self.config.node.id,
            now,
            self.order,
            max_attempts=self.config.episodes.max_attempts,
            incarnation=self.incarnation,
        )
        self.next_n.update(plan.next_n)
        self.failures.update(plan.failures)
        self.final.update(plan.final)
        self.pending.extend(plan.pending)
        for attempt in plan.interrupted:
            self.up.submit(Item(ATTEMPT, attempt.to_json()))
        for attempt in plan.results:
            self.up.submit(Item(ATTEMPT, attempt.to_json(), write_result=True))
        recovered = {"lost_attempts": len(plan.interrupted), "results": len(plan.results)}
        if plan.lost or plan.results:
            self.log(
                f"recorded {recovered['lost_attempts']} attempt(s) lost with an earlier incarnation as "
                f"interrupted; {recovered['results']} result(s) recovered from attempts"
            )
        if not self._flush_starting():
            self.log("the store did not take the recovered attempts yet; they stay spooled")
        self.prev = hist.billed(hist.intervals(history, self.price.per_hour))
        return plan.reason, dict(plan.details), list(plan.resolved), recovered

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

    def _wait_healthy(self) -> bool:
        while not self.server.probed.is_set():
            self._pump(0.1)
            if self.notice is not None:
                return False
        code = self.server.exit_code()
        if code is not None:
            return self._server_failed(f"model server exited with {code}: {self.server.log_tail()[-300:]}")
        if self.server.healthy_mono is None:
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
                uptime_s, cost = claimed.figures(self)
                state = RunState(
                    remaining=len(self.order) - len(self.final),
                    running=len(self.running),
                    uptime_s=uptime_s,
                    cost=cost,
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
        self.pending.fill(free)
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
            env = ep.episode_env(
                base_env, self.config.run_id, run, self.manifest[run.episode_id], self.model_url
            )
            run.started, run.started_mono = utc_now(), time.monotonic()
            run.timeout_at = run.started_mono + self.config.episodes.timeout_s
            self.running[run.episode_id] = run
            ep.spawn(self.config.episodes, run, self.model_url, env, self._on_exit)
        if self.first_dispatch_mono is None:
            self.first_dispatch_mono = time.monotonic()
            self._ready()

    def _ready(self) -> None:
        details = ready_details(
            self.boot,
            self.started_mono,
            healthy_mono=self.server.healthy_mono,
            first_dispatch_mono=self.first_dispatch_mono,
            record_read_s=self.record_read_s,
            server_started_by_agent=bool(self.config.server.command),
        )
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
        server_gone = self.server.exit_code() is not None or not self.server.healthy()
        return ep.during_shutdown(run, ended, server_gone=server_gone)

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
        if item.write_result and item.outcome != "refused":
            self.pending.finished(str(item.payload["episode_id"]))
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
