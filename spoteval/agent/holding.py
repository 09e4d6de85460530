"""The agent's part that keeps a pool node's work its own: an attempt runs and is recorded only while
the episode is its lease holder's (spoteval/claims/takeover.py: OWN, WAIT, LOST).

`Holding` is a part of `Agent` (spoteval/agent/loop.py), kept apart so that each file reads as one
phase; the state and steps it shares with the others are declared once, in
spoteval/agent/state.py. A lone node (no `pool` section) never
waits and never gives anything up.

- Every attempt carries the holder it runs under (`run.extra["holder"]`, the uploader's
  `Item.holder`). Before an attempt starts, and again once its dispatch journal is durable, its
  standing is asked: only an OWN one starts; a WAIT one (the lease is overdue: renewed `expiry_s / 2`
  ago or more) goes back to the queue until the lease is renewed; a LOST one (another node took the
  episode over) is dropped. So a holder that was paused or slow past its expiry starts nothing of
  what it lost: it learns at its next renewal that its lease was ended (fenced), and rejoins.
- When the holder changes (fenced, or an ended holder's episodes came back to this node), every
  running attempt is looked at again: a LOST one is stopped (SIGTERM, SIGKILL `GIVE_UP_GRACE_S`
  later) and this node records nothing of it (its taker records it `interrupted` from the ended
  holder's in-flight list); an OWN one runs on under the new holder.
- The uploader rules on every attempt write the same way (spoteval/agent/uploader.py): a LOST
  attempt is given up (`_on_given_up`): it leaves the in-flight list, its counts and, if it was
  final, the episodes this node counts as done.
"""

from __future__ import annotations

from typing import Final

from spoteval.agent import episodes as ep
from spoteval.agent.state import AgentState
from spoteval.agent.uploader import Item
from spoteval.claims.takeover import LOST, OWN

GIVE_UP_GRACE_S: Final = 2.0  # a given-up attempt: SIGTERM, then SIGKILL this long after


class Holding(AgentState):
    """The agent's holding part (its state and steps: spoteval/agent/state.py)."""

    def _standing(self, episode: str) -> tuple[str, str | None]:
        """(standing, holder) of a new attempt of the episode (the holder it would run under)."""
        holder = self.pending.holder_of(episode)
        return self.pending.standing(episode, holder), self.pending.heir(holder, episode)

    def _watch_standing(self, now: float) -> None:
        """After a change of holder: stop the running attempts this node no longer holds."""
        epoch = self.pending.epoch()
        if epoch == self.seen_epoch:
            return
        self.seen_epoch = epoch
        for episode, run in list(self.running.items()):
            holder = run.extra.get("holder")
            standing = self.pending.standing(episode, holder)
            if standing == OWN:
                run.extra["holder"] = self.pending.heir(holder, episode)
            elif standing == LOST:
                self._give_up(run, now)

    def _give_up(self, run: ep.Running, now: float) -> None:
        del self.running[run.episode_id]
        self.doomed[(run.episode_id, run.dispatch)] = run
        self.in_flight.pop((run.episode_id, run.dispatch), None)
        ep.terminate(run, ep.KILL_CAPACITY, GIVE_UP_GRACE_S, now)
        self.counts["given_up"] = self.counts.get("given_up", 0) + 1
        self.log(
            f"{run.episode_id}: another node took it over when this node's lease ended; "
            "its attempt here is stopped, and recorded by that node"
        )

    def _kill_doomed(self, now: float) -> None:
        for run in self.doomed.values():
            if run.kill_at is not None and now >= run.kill_at:
                ep.kill(run, ep.KILL_CAPACITY)

    def _doomed_exit(self, run: ep.Running) -> bool:
        """A given-up attempt's process ended: nothing to record (True), or not one of those (False)."""
        if self.doomed.get((run.episode_id, run.dispatch)) is not run:
            return False
        del self.doomed[(run.episode_id, run.dispatch)]
        ep.cleanup(run)
        return True

    def _on_given_up(self, item: Item) -> None:
        """The uploader gave up writing the attempt: another node took the episode over."""
        payload = item.payload
        episode = str(payload.get("episode_id", ""))
        details = payload.get("details") or {}
        if details.get("incarnation") != self.incarnation:
            return  # an earlier incarnation's, from the spool: nothing of this one to undo
        self.in_flight.pop((episode, int(details.get("dispatch", 0))), None)
        outcome = str(payload.get("outcome", ""))
        if self.counts.get(outcome, 0) > 0:
            self.counts[outcome] -= 1
        self.counts["given_up"] = self.counts.get("given_up", 0) + 1
        if outcome in ep.FAILURES and self.failures.get(episode, 0) > 0:
            self.failures[episode] -= 1
        if item.write_result and not self.pending.has_result(episode):
            self.final.discard(episode)
        self.log(f"{episode}: attempt given up (another node took it over when this node's lease ended)")
