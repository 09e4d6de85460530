"""The agent's part that runs attempts: dispatch (each attempt journaled as in flight before it
starts), the end of each attempt, and its record.

`Attempts` is a part of `Agent` (spoteval/agent/loop.py), kept apart so that each file reads as one
phase; the state and steps it shares with the others are declared once, in
spoteval/agent/state.py.

- Free slots are held back while the store falls behind (`BACKLOG` objects waiting), or, during an
  outage, once the spool holds `outage_backlog` objects; a spool disk without room stops dispatch.
- Before attempts start, a heartbeat listing every attempt in flight is made durable (waiting at
  most `JOURNAL_WAIT_S`), so a node lost without a word still says what it had started
  (spoteval/agent/history.py); a pool node starts only what its lease holder holds
  (spoteval/agent/holding.py), asked again once the journal is durable.
- An ended attempt is classified (spoteval/agent/episodes.py), a failure held `SETTLE_S` in case a
  notice explains it, then submitted to the uploader under the next attempt number, with its result
  when it is final; its in-flight entry goes once the store holds it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Final

from spoteval.agent import episodes as ep
from spoteval.agent.boot import ready_details
from spoteval.agent.rules import outage_backlog
from spoteval.agent.state import AgentState
from spoteval.agent.uploader import ATTEMPT, Item
from spoteval.claims.takeover import LOST, OWN, WAIT
from spoteval.record import Attempt, format_time, utc_now

JOURNAL_WAIT_S: Final = 5.0  # longest wait for the in-flight heartbeat before starting attempts anyway
UPLOAD_THREADS: Final = 16
BACKLOG: Final = 2 * UPLOAD_THREADS  # objects allowed to wait for the store before dispatch holds back


class Attempts(AgentState):
    """The agent's attempts part (its state and steps: spoteval/agent/state.py)."""

    def _take_number(self, episode: str) -> int:
        n = self.next_n.get(episode, 1)
        self.next_n[episode] = n + 1
        return n

    # --- dispatch -------------------------------------------------------------------------------

    def _free_slots(self) -> int:
        """Free episode slots, held back while the store falls behind (so results stay live).

        While uploads lag, at most `BACKLOG` objects wait for the store (twice the upload threads:
        enough to keep them busy); beyond that new attempts wait. During an outage (the store does
        not answer at all) work goes on and the spool absorbs it, up to `outage_backlog` objects.
        """
        free = self.config.episodes.concurrency - len(self.running)
        if self.up.disk_full:  # a spool disk without room: nothing new until it has some
            return 0
        if free > 0 and self.up.store_down:  # up to `outage_backlog` objects (running ones to come)
            waiting = self.up.backlog + len(self.running)
            free = min(free, outage_backlog(self.config.episodes.concurrency) - waiting)
        elif free > 0:
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
            standing, holder = self._standing(episode)
            if standing == LOST:  # another node took it over (this node's lease had ended)
                continue
            if standing == WAIT:  # the lease is overdue: nothing starts until it is renewed
                self.pending.appendleft(episode)
                break
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
                extra={"holder": holder},
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
        if self.prepared is None:
            self.prepared = self.eval_env.get()
        prepared = self.prepared
        base_env = {**os.environ, **prepared.env}
        place = {
            "SPOTEVAL_STORE": self.config.store,
            "SPOTEVAL_STORE_OPTIONS": json.dumps(
                dict(self.config.store_options_with_defaults()), sort_keys=True
            ),
            "SPOTEVAL_NODE": self.config.node.id,
            "SPOTEVAL_WORK_DIR": self.work_dir,
        }
        for index, run in enumerate(batch):
            standing = self.pending.standing(run.episode_id, run.extra["holder"])
            if self.noticed.is_set() or standing != OWN:
                # A notice arrived while the journal was written, or the lease lapsed or was
                # ended meanwhile: start nothing more; the episodes go back to the queue (for the
                # next incarnation, or until the lease is renewed), except those another node took.
                for held in reversed(batch[index:]):
                    self.in_flight.pop((held.episode_id, held.dispatch), None)
                    if self.pending.standing(held.episode_id, held.extra["holder"]) != LOST:
                        self.pending.appendleft(held.episode_id)
                break
            env = ep.episode_env(
                base_env, self.config.run_id, run, self.manifest[run.episode_id], self.model_url, place=place
            )
            run.started, run.started_mono = utc_now(), time.monotonic()
            run.timeout_at = run.started_mono + self.config.episodes.timeout_s
            self.running[run.episode_id] = run
            ep.spawn(self.config.episodes, run, self.model_url, env, self._on_exit, **prepared.spawn_args())
        if self.first_dispatch_mono is None:
            self.first_dispatch_mono = time.monotonic()
            self._ready()

    def _ready(self) -> None:
        details = ready_details(
            self.boot,
            self.started_mono,
            healthy_mono=self.health.healthy_mono,
            first_dispatch_mono=self.first_dispatch_mono,
            record_read_s=self.record_read_s,
            server_started_by_agent=bool(self.config.server.command),
        )
        details.update(self.health.phases())  # the server's own start-up phases, where its log tells
        details.update(self.eval_env.ready_details(self.started_mono))
        self.event("ready", None, details)
        phases = details.get("server_phases") or {}
        self.log(
            f"ready: server healthy {details['agent_to_server_healthy_s']} s after agent start, "
            f"first episode at {details['agent_to_first_dispatch_s']} s"
            + ("; server phases " + ", ".join(f"{k} {v} s" for k, v in phases.items()) if phases else "")
        )

    # --- ended attempts -------------------------------------------------------------------------

    def _on_ended(self, run: ep.Running) -> None:
        if self._doomed_exit(run):
            return
        if self.running.get(run.episode_id) is run:
            del self.running[run.episode_id]
        ended = ep.classify(run, self.config.episodes.timeout_s)
        if ended.settle:
            if self.notice is not None:
                self._finalize(run, self._during_shutdown(run, ended))
            else:
                self.settling.append((run, ended))
            return
        self._finalize(run, ended)

    def _during_shutdown(self, run: ep.Running, ended: ep.Ended) -> ep.Ended:
        server_gone = self.server.exit_code() is not None or not self.health.ok  # (kept by a thread)
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
        if ended.outcome in ep.FAILURES:
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
                # between `started` and this, the process was being made (a snapshot of the
                # node's processes may miss it); absent when it never ran
                **({} if run.spawned is None else {"spawned": format_time(run.spawned)}),
            },
        )
        item = Item(ATTEMPT, attempt.to_json(), write_result=final, holder=run.extra.get("holder") or "")
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
        if item.write_result and item.outcome not in ("refused", "result_given_up"):
            self.pending.finished(str(item.payload["episode_id"]))
        details = item.payload.get("details") or {}
        if details.get("incarnation") == self.incarnation:
            self.in_flight.pop((str(item.payload["episode_id"]), int(details.get("dispatch", 0))), None)
            if item.write_result and item.result_written:  # the result stored is this one
                self.counts["results"] += 1
                if item.payload.get("outcome") == "completed":
                    self.durable_s.append(time.monotonic() - item.submitted)
