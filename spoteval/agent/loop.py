"""The agent's loop: start, recover, serve, dispatch, record, stop. Decisions live elsewhere.

One thread (this loop) owns the scheduling state; episode waiter threads, notice watchers and the
uploader only post messages to its queue. The order of a run:

1. watch for notices (SIGTERM and the provider's metadata service), from the first moment;
2. queue what the spool still holds from an earlier incarnation on this disk for upload;
3. start the model server (it warms up while the record is read; agent/health.py keeps its health
   in a thread; it is stopped while the store does not answer, and started again once it does);
4. read the record and apply what `history.plan_recovery` decides from it: start reason, attempts
   an earlier incarnation lost (recorded `interrupted`), results an earlier incarnation recorded as
   attempts but not as results (written now); what the spool holds counts as recorded
   (agent/spooled.py), so it is neither lost nor run again;
5. `start` event, wait for the server, dispatch, `ready` event;
6. every ended attempt goes to the uploader at once (spool first); a heartbeat listing what is in
   flight is durable before new attempts start, and every `heartbeat_s` (agent/attempts.py); a
   pool node runs and records only what its lease holder holds (agent/holding.py); the price is
   re-read at its interval (agent/price.py);
7. a notice or a stop rule ends the run: see spoteval/agent/stopping.py. A notice that comes while
   the record is still being read ends it there; a store that refuses writes for good ends it with
   exit code 1.
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
from datetime import datetime
from typing import Any

from spoteval.agent import claimed, tally
from spoteval.agent import episodes as ep
from spoteval.agent import history as hist
from spoteval.agent.attempts import UPLOAD_THREADS, Attempts
from spoteval.agent.aws_metric import start_publisher
from spoteval.agent.boot import billed_from, boot_times
from spoteval.agent.config import AgentConfig
from spoteval.agent.evalenv import Prepared, Preparing
from spoteval.agent.health import ServerWatch
from spoteval.agent.holding import Holding
from spoteval.agent.notices import (
    SIGTERM_GRACE_S,
    Notice,
    SignalWatcher,
    Watcher,
    provider_watchers,
    start_watcher,
    stderr_log,
)
from spoteval.agent.price import DEFAULT_CURRENCY, Ledger, Price, refresh_interval, reread, resolve_price
from spoteval.agent.rules import RunState, Stop, should_stop
from spoteval.agent.starting import Starting
from spoteval.agent.stopping import NOTICE_WAIT_S, Fatal, Stopping
from spoteval.agent.uploader import EVENT, Item, Uploader
from spoteval.billing import POOL_KEY
from spoteval.manifest import ManifestEntry
from spoteval.record import Event, RunLayout, format_time, utc_now
from spoteval.store import Store


class Agent(Holding, Attempts, Starting, Stopping):
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
        self.stopping_watchers = threading.Event()
        self.health = ServerWatch(self.server, self.stopping_watchers, log)
        self.eval_env = Preparing(config.eval_env, log)  # the eval project's venv, while the server warms up
        self.prepared: Prepared | None = None
        self.ledger = Ledger()  # this incarnation's money at each price it read
        self.spooled: list[Item] = []  # what an earlier incarnation left in the spool
        self.noticed = threading.Event()  # a notice that stops work arrived (checked while starting up)
        # scheduling state (this thread only)
        self.final: set[str] = set()
        self.failures: dict[str, int] = {}
        self.next_n: dict[str, int] = {}
        self.pending = claimed.queue_for(self)
        self.running: dict[str, ep.Running] = {}
        self.doomed: dict[tuple[str, int], ep.Running] = {}  # a pool node's, given up (agent/holding.py)
        self.seen_epoch = 0
        self.settling: list[tuple[ep.Running, ep.Ended]] = []
        self.in_flight: dict[tuple[str, int], datetime] = {}
        self.counts = {"completed": 0, "model_failure": 0, "harness_error": 0, "interrupted": 0, "results": 0}
        self.durations: deque[float] = deque(maxlen=tally.DURATIONS_KEPT)
        self.durable_s: list[float] = []
        self.notice: Notice | None = None
        self.notice_mono = 0.0
        self.deadline_mono = 0.0
        self.stop: Stop | None = None
        self.exit_code = 0
        self.idle_since = time.monotonic()
        self.has_work = True  # the has-work metric (agent/aws_metric.py): starting counts as work
        self.first_dispatch_mono: float | None = None
        self.record_read_s = 0.0
        self.prev = hist.Billed(0.0, 0.0, {})
        self.billed_from = billed_from(config.node.provider, self.boot, started_wall)
        self.watchers: dict[str, Watcher] = {}
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
            details={**details, "incarnation": self.incarnation, **self._holder_detail()},
        )
        item = Item(EVENT, ev.to_json(), key_time=format_time(when), node=node.id, seq=next(self.seq))
        return self.up.submit(item)

    def _holder_detail(self) -> dict[str, str]:
        """A pool node's events name the lease holder they were written under (whose journal it is)."""
        holder = self.pending.holder()
        return {} if holder is None else {"holder": holder}

    def _wait_durable(self, item: Item, timeout: float, *, until_notice: bool = True) -> bool:
        """Wait until the item is in the store; give up early while the store is down (it stays spooled)
        and, unless `until_notice` is False, as soon as a notice that stops work arrives: the notice
        is handled first, whatever the store is doing."""
        deadline = time.monotonic() + timeout
        while not item.done.wait(0.05):
            if self.up.store_down or self.up.fatal is not None or time.monotonic() >= deadline:
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
        """Earlier incarnations from the record, and this one at each price it read."""
        if self.price.per_hour is None or self.prev.cost is None:
            return None
        return self.prev.cost + self.ledger.cost(self.price, self._mine_s())

    # --- the run --------------------------------------------------------------------------------

    def run(self) -> int:
        signals = SignalWatcher(self.config.sigterm_grace_s or SIGTERM_GRACE_S[self.config.node.provider])
        signals.install()
        node = self.config.node
        found = provider_watchers(
            node.provider, self.config.metadata_url, self.config.metadata_poll_s, self.log
        )
        for watcher in [signals, *found]:  # from the first moment: a notice may come at any time
            self.watchers[watcher.name] = watcher
            start_watcher(watcher, self._deliver, self.stopping_watchers, self.log)
        start_publisher(self.config, lambda: self.has_work, self.stopping_watchers, self.log)
        os.makedirs(self.work_dir, exist_ok=True)
        self.uploader = Uploader(
            self.store,
            self.layout,
            self.config.run_spool_dir(),
            workers=UPLOAD_THREADS,
            on_done=self._on_durable,
            log=self.log,
            gate=self.pending.gate(),
            on_given_up=lambda item: self.messages.put(("given_up", item)),
        )
        try:
            return self._run()
        except Fatal as exc:
            self.log(f"the run cannot go on: {exc}; {self.up.outstanding} object(s) stay in the spool")
            return 1
        finally:
            self.stopping_watchers.set()
            self.health.stop()
            self.pending.close()
            self.up.close()

    def _run(self) -> int:
        self.spooled = self.up.load_spool()  # uploaded meanwhile; recovery counts it as recorded
        if self.spooled:
            self.log(f"uploading {len(self.spooled)} object(s) an earlier incarnation left in the spool")
        self.health.start()
        self.eval_env.start()
        t0 = time.monotonic()
        self.price = resolve_price(self.config)
        recovered = self._recover()
        if recovered is None:  # a notice came while the record could not be read: handle it now
            self._pump(0)
            return self._finish()
        reason, reason_details, resolved, recovered_counts = recovered
        self.record_read_s = time.monotonic() - t0
        start_details: dict[str, Any] = {
            **reason_details,
            **self.price.details,
            "heartbeat_s": self.config.heartbeat_s,
            "concurrency": self.config.episodes.concurrency,
            "max_attempts": self.config.episodes.max_attempts,
            "billed_from": format_time(self.billed_from),
            "resolved": resolved,
            "recovered": recovered_counts,
            "record_read_s": round(self.record_read_s, 3),
            "episodes": {"total": len(self.order), "final": len(self.final), "pending": len(self.pending)},
            "pid": os.getpid(),
        }
        if self.config.pool is not None:  # the run-wide rules apply (spoteval/billing.py: POOL_KEY)
            start_details[POOL_KEY] = self.config.pool.claims()
        start = self.event("start", reason, start_details)
        self._wait_durable(start, NOTICE_WAIT_S)
        self.log(
            f"start ({reason}) run {self.config.run_id} node {self.config.node.id}: "
            f"{len(self.pending)} to run, {len(self.final)} final, price {self.price.per_hour} "
            f"{self.price.recorded_currency or ''} ({self.price.source})"
        )
        interval = refresh_interval(self.config)
        if interval is not None and self.price.source == "api":
            args = (self.config, interval, self.stopping_watchers, self.messages, self.log)
            threading.Thread(target=reread, args=args, name="price", daemon=True).start()
        self.pending.fill(self.config.episodes.concurrency)
        if self.pending and not (self._wait_healthy() and self._wait_eval_env()):
            return self._finish()
        self._loop()
        return self._finish()

    # --- waiting for the model server -----------------------------------------------------------

    def _wait_healthy(self) -> bool:
        while not self.health.checked.is_set():
            self._pump(0.1)
            if self.notice is not None:
                return False
            if self.up.fatal is not None:
                raise Fatal("the store refuses writes (above)")
        code = self.server.exit_code()
        if code is not None:
            return self._server_failed(f"model server exited with {code}: {self.server.log_tail()[-300:]}")
        if self.health.healthy_mono is None:
            return self._server_failed(
                f"model server not healthy at {self.config.server.health_url} within "
                f"{self.config.server.ready_timeout_s:g} s"
            )
        return True

    def _wait_eval_env(self) -> bool:
        """The eval environment (agent/evalenv.py) before the first attempt; False on a notice."""
        while not self.eval_env.done.is_set():
            self._pump(0.1)
            if self.notice is not None:
                return False
            if self.up.fatal is not None:
                raise Fatal("the store refuses writes (above)")
        self.prepared = self.eval_env.get()
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
                wake = min([wake, run.timeout_at, *(t for t in (run.term_at, run.kill_at) if t is not None)])
            if self.settling:
                wake = min(wake, self.settling[0][0].ended_mono + ep.SETTLE_S)
            if (
                self.pending
                and self._free_slots() > 0
                and self.stop is None
                and self.notice is None
                and self.pending.startable()
            ):
                wake = now
            self._pump(max(0.0, wake - now))
            now = time.monotonic()
            with self.up.batch():
                self._settle(now)
            self._watch_standing(now)
            self._kill_due(now)
            self._kill_doomed(now)
            if self.up.fatal is not None and self.stop is None:
                self._begin_stop(Stop("store_refused", {"error": str(self.up.fatal)}))
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
                self.has_work = bool(self.running or self.pending)
                uptime_s, cost, own = claimed.figures(self)
                state = RunState(
                    remaining=len(self.order) - len(self.final),
                    running=len(self.running),
                    uptime_s=uptime_s,
                    cost=cost,
                    idle_s=idle,
                    price_per_hour=self.price.per_hour,
                    own_cost=own,
                )
                stop = should_stop(state, self.config.stop_rules)
                if stop is not None:
                    self._begin_stop(stop)
                else:
                    self._dispatch()
            if now >= next_heartbeat:
                self._heartbeat()
                next_heartbeat = now + self.config.heartbeat_s
            if (
                (self.stop is not None or self.notice is not None)
                and not self.running
                and not self.settling
                and not self.doomed
            ):
                return

    def _pump(self, timeout: float) -> None:
        try:
            message = self.messages.get(timeout=timeout) if timeout > 0 else self.messages.get_nowait()
        except queue.Empty:
            return
        with self.up.batch():  # what these messages spool is fsynced once, at the end
            self._handle(message)

    def _handle(self, message: tuple[str, Any]) -> None:
        while True:
            kind, payload = message
            if kind == "exit":
                self._on_ended(payload)
            elif kind == "notice":
                self._on_notice(payload)
            elif kind == "durable":
                self._on_recorded(payload)
            elif kind == "price":
                self._on_price(payload)
            elif kind == "given_up":
                self._on_given_up(payload)
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

    def _on_price(self, price: Price) -> None:
        if (price.per_hour, price.currency) != (self.price.per_hour, self.price.currency):
            self.ledger.change(self.price, self._mine_s())
            self.log(
                f"price now {price.per_hour} {price.recorded_currency or ''} (was {self.price.per_hour})"
            )
            self.price = price
