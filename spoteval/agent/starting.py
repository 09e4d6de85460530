"""The agent's part that starts a run: read the record (waiting for the store with the model server
stopped), see it as it will be once the spool is uploaded, and apply what `history.plan_recovery`
decides from it.

`Starting` is a part of `Agent` (spoteval/agent/loop.py), kept apart so that each file reads as one
phase; the state and steps it shares with the others are declared once, in
spoteval/agent/state.py.

- The record must be read before anything starts. While the store does not answer, the agent waits
  (backing off to 30 s) with the model server stopped, and starts it again once the record is read;
  a notice that comes meanwhile ends the wait (the caller handles it); a permanent store error
  (denied, bad request, missing bucket) ends the run (`Fatal`).
- What an earlier incarnation left in the spool counts as recorded (spoteval/agent/spooled.py): its
  events say what that incarnation had in flight, its attempts are not lost, its results are final.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from spoteval.agent import history as hist
from spoteval.agent.spooled import spooled_events, with_spool
from spoteval.agent.state import AgentState
from spoteval.agent.stopping import Fatal
from spoteval.agent.uploader import ATTEMPT, Item
from spoteval.record import utc_now
from spoteval.store import StoreError


class Starting(AgentState):
    """The agent's starting part (its state and steps: spoteval/agent/state.py)."""

    def _read_history(self) -> tuple[hist.History, datetime] | None:
        """The record as it is now, and as it will be once the spool is uploaded; it must be read
        before anything starts: wait for it, with the model server stopped (an idle, billed GPU).
        None when a notice comes first; a permanent store error ends the run."""
        backoff = 0.5
        while True:
            now = utc_now()
            try:
                with ThreadPoolExecutor(max_workers=16) as pool:
                    history = self.pending.read_history(
                        self.store,
                        self.layout,
                        self.order,
                        node=self.config.node.id,
                        now=now,
                        pool=pool,
                        extra_events=spooled_events(self.spooled),
                    )
                break
            except StoreError as exc:
                if exc.permanent:
                    raise Fatal(f"store refuses {exc}") from None
                if self.noticed.is_set():
                    return None
                if self.health.running:
                    self.log("the store does not answer: stopping the model server until it does")
                    self.health.stop()
                self.log(f"reading the run record: {exc}; retrying in {backoff:.1f} s")
                if self.noticed.wait(backoff):
                    return None
                backoff = min(30.0, backoff * 2)
        if not self.health.running:
            self.health.start()
        # what the spool holds counts as recorded, unless another node took its episode over when
        # the earlier incarnation's lease ended (that node records it: agent/holding.py)
        return with_spool(history, [i for i in self.spooled if self.pending.keeps(i)]), now

    def _recover(self) -> tuple[str, dict[str, Any], list[str], dict[str, int]] | None:
        read = self._read_history()
        if read is None:
            return None
        history, now = read
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
        with self.up.batch():
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
        self.prev = hist.billed(hist.intervals(history, self.price.per_hour))
        return plan.reason, dict(plan.details), list(plan.resolved), recovered
