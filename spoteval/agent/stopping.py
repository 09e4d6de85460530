"""The agent's part that ends work: a notice, a stop rule, and the end of the run.

`Stopping` is a part of `Agent` (spoteval/agent/loop.py), kept apart so that each file reads as one
phase; the state and steps it shares with the others are declared once, in
spoteval/agent/state.py.

- A notice that does not stop work (a rebalance recommendation) is recorded, nothing more.
- The first notice that stops work: the pending queue is emptied, the notice event is made durable
  (waiting at most `NOTICE_WAIT_S`), attempts that ended just before it are judged as part of the
  shutdown, and each attempt in flight runs on only if it should end before `rules.finish_by` (see
  `rules.runs_on`); the others get SIGTERM now and SIGKILL a grace later (`rules.term_grace_s`),
  and are recorded `interrupted`. A second notice is recorded and can only bring the deadline
  nearer; a second SIGTERM kills everything at once. The flush, the acknowledgement and the model
  server's stop all fit before the deadline; the exit code is 0, or 1 if something is still only in
  the spool (a Kubernetes Job index must not count as completed then).
- A run that ends with every episode's result a harness error exits 3 (agent/verdict.py).
- A stop rule stops what runs (SIGTERM, SIGKILL after `STOP_TERM_GRACE_S`) and empties the queue;
  the model server is stopped; once the store holds everything the run ends with a `stop` event and,
  with `on_done: poweroff`, the power-off command. If the store has not taken everything within
  `flush_timeout_s`, no `stop` is written, nothing powers off, and the exit code is 1.
- A store that refuses writes for good (`Uploader.fatal`) ends the run: attempts are stopped, the
  model server too, and the exit code is 1 with the store's reason (`Fatal`).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final

from spoteval.agent import episodes as ep
from spoteval.agent import exits, rules, tally
from spoteval.agent.notices import Notice
from spoteval.agent.power import power_off
from spoteval.agent.rules import Stop
from spoteval.agent.scale_zero import scale_to_zero
from spoteval.agent.state import AgentState
from spoteval.agent.verdict import every_episode_harness_error
from spoteval.record import RunLayout, format_time

NOTICE_WAIT_S: Final = 5.0  # longest wait for the notice event before killing attempts anyway
STOP_TERM_GRACE_S: Final = 5.0  # a stop rule: SIGTERM to each attempt, SIGKILL this long after


class Fatal(Exception):
    """The run cannot go on (the store refuses it for good); the message says why."""


class Stopping(AgentState):
    """The agent's stopping part (its state and steps: spoteval/agent/state.py)."""

    # --- notices and stops ----------------------------------------------------------------------

    def _on_notice(self, notice: Notice) -> None:
        left = notice.seconds_left()
        details = {
            **notice.details,
            "received": format_time(notice.received),
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
                for run in self.running.values():  # a second SIGTERM: no more grace
                    ep.kill(run, ep.KILL_CAPACITY)
            self._plan_kills()
            return
        self.notice = notice
        self.notice_mono = time.monotonic()
        self.deadline_mono = self.notice_mono + left
        self.pending.clear()
        item = self.event("notice", notice.reason, details)
        self.up.sync()  # on local disk before anything else happens
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

    def _server_serving(self) -> bool:
        """The model server is running and its last health check answered (kept by a thread)."""
        return self.server.exit_code() is None and self.health.ok

    def _term_grace(self) -> float:
        if self.notice is None:
            return STOP_TERM_GRACE_S
        return rules.term_grace_s(self.deadline_mono - self.notice_mono)

    def _plan_kills(self) -> None:
        """Let an attempt run on only if it should end (median duration) before `finish_by`, then
        SIGTERM it; the rest get SIGTERM now; each is SIGKILLed its grace later."""
        finish_by = rules.finish_by(self.notice_mono, self.deadline_mono)
        grace = self._term_grace()
        estimate = tally.median(self.durations)
        now = time.monotonic()
        for run in self.running.values():
            if run.kill_reason is not None:  # stopping already: no later than this notice allows
                run.kill_at = min(run.kill_at or finish_by + grace, finish_by + grace)
            elif rules.runs_on(run.started_mono, estimate, finish_by):
                run.term_at = finish_by
            else:
                ep.terminate(run, ep.KILL_CAPACITY, min(grace, max(0.0, finish_by + grace - now)), now)

    def _kill_due(self, now: float) -> None:
        if self.notice is not None and self.server.config.command and not self._server_serving():
            # the model server is gone (the shutdown reached it): no attempt can finish, and one
            # waiting on a request would wait for its client's timeout; end them all now
            ending = [r for r in self.running.values() if r.kill_reason is None or r.term_at is not None]
            if ending:
                self.log(f"notice: the model server is gone; ending {len(ending)} attempt(s) now")
            for run in ending:
                ep.terminate(run, ep.KILL_CAPACITY, min(self._term_grace(), 1.0), now)
        for run in list(self.running.values()):
            if run.term_at is not None and now >= run.term_at:
                ep.terminate(run, ep.KILL_CAPACITY, self._term_grace(), now)
            if run.kill_at is not None and now >= run.kill_at:
                ep.kill(run, ep.KILL_CAPACITY)
            elif run.kill_reason is None and now >= run.timeout_at:
                ep.kill(run, ep.KILL_TIMEOUT)

    def _begin_stop(self, stop: Stop) -> None:
        if self.stop is not None:
            return
        self.stop = stop
        self.pending.clear()
        now = time.monotonic()
        for run in self.running.values():
            ep.terminate(run, ep.KILL_CAPACITY, STOP_TERM_GRACE_S, now)
        if stop.reason != "done":
            self.log(f"stop ({stop.reason}): {len(self.running)} attempt(s) ended early")

    # --- the end --------------------------------------------------------------------------------

    def _summary(self) -> dict[str, Any]:
        return tally.summary(self._counts(), self._uptime_s(), self._cost(), self.durable_s)

    def _finish(self) -> int:
        if self.notice is not None:
            return self._finish_notice()
        stop = self.stop or Stop("done")
        self.health.stop()  # not needed now: waiting for the store with it running is a billed idle GPU
        if self.up.fatal is not None:
            raise Fatal("the store refuses writes (above)")
        flushed = self.up.flush(self.config.flush_timeout_s)
        self._pump(0)
        details = {**stop.details, **self._summary(), "in_flight": self._in_flight_detail()}
        if stop.reason == "done" and flushed and self.counts["harness_error"]:
            why = every_episode_harness_error(self.store, RunLayout(self.config.run_id), len(self.order))
            if why is not None:
                self.log(f"every episode ended in a harness error: the run measured nothing ({why})")
                details.update(harness_errors="every episode", harness_error=why)
                self.exit_code = exits.HARNESS_ERRORS
        if flushed:
            self.event("stop", stop.reason, details)
            flushed = self.up.flush(self.config.flush_timeout_s)
        if not flushed:
            self.log(
                f"{self.up.outstanding} object(s) only in the spool at {self.config.run_spool_dir()}: the "
                f"store did not take them within {self.config.flush_timeout_s:g} s ({self.up.last_error}); "
                "no stop is recorded and the node is not powered off: the next start uploads them"
            )
            return 1
        self.log(f"stop ({stop.reason}): summary {json.dumps(details, sort_keys=True)}")
        pool = self.config.pool
        if stop.reason == "done" and pool is not None and pool.scale_to_zero is not None:
            try:  # the pool's engine would replace a node that powers itself off: no node at all
                self.log(scale_to_zero(pool.scale_to_zero, metadata_url=self.config.metadata_url))
            except OSError as exc:
                self.log(f"scaling the pool to zero failed: {exc}; the operator or a person must do it")
        if self.config.stop_rules.on_done == "poweroff":
            return self.exit_code if power_off(self.config.stop_rules.poweroff_command, self.log) else 1
        return self.exit_code

    def _finish_notice(self) -> int:
        """Within the notice: flush, acknowledge, stop the model server, all before the deadline."""
        assert self.notice is not None
        reserve = min(2.0, max(0.3, 0.1 * (self.deadline_mono - self.notice_mono)))  # the server's stop
        flushed = self.up.flush(max(0.2, self.deadline_mono - time.monotonic() - reserve))
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
        self.health.stop(grace_s=min(5.0, max(0.1, self.deadline_mono - time.monotonic() - 0.3)))
        return 0 if flushed else 1  # never 0 while something is only in the spool
