"""A notice, then the model server goes too (an OS shutdown signals every process): the attempts
that were running on within the notice cannot finish, and one waiting on a request would wait for
its client's timeout, so the agent ends them at once and records them `interrupted`, instead of
waiting for their SIGTERM at the end of the notice. The episodes wait for a gate file at their end,
so which attempts run on does not depend on the machine's speed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from spoteval.store import Store
from tests.conftest import StoreTarget
from tests.fake_metadata import (
    AgentProcess,
    read_record,
    start_agent,
    tagged_pids,
    wait_for,
)
from tests.test_agent_run import GATED_EPISODE, _setup

pytestmark = pytest.mark.timing


def standin_pids(agent: AgentProcess) -> list[int]:
    out = []
    for pid in tagged_pids(agent.tag):
        try:
            if b"spoteval.standin" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


def test_attempts_running_on_end_at_once_when_the_server_goes_during_the_notice(
    file_target: StoreTarget, tmp_path: Path, agents: list[AgentProcess]
) -> None:
    gate, trace, script = tmp_path / "gate", tmp_path / "trace.txt", tmp_path / "episode.py"
    gate.touch()
    script.write_text(GATED_EPISODE.replace("will_fail(episode, 0.3, seed=5)", "False"))
    ids = [f"e{i}" for i in range(12)]
    command = [sys.executable, str(script), "{episode_id}", "{output}", str(gate), str(trace)]
    # 60 s of notice: attempts that usually take 0.4 s run on, their SIGTERM 45 s after the notice
    path = _setup(file_target, tmp_path, ids, concurrency=4, command=command, sigterm_grace_s=60)
    store = Store(file_target.url, file_target.options)
    agent = start_agent(path, tmp_path)
    agents.append(agent)
    assert wait_for(lambda: len(store.list("runs/r1/results/")) >= 6, 60), agent.stderr()
    gate.unlink()

    def blocked() -> list[str]:
        return sorted(line.split()[1] for line in trace.read_text().splitlines()) if trace.exists() else []

    assert wait_for(lambda: len(blocked()) == 4, 60), agent.stderr()
    agent.signal_group(signal.SIGTERM)
    assert wait_for(lambda: any(e.kind == "notice" for e in read_record(store, "r1").events), 30)
    [server] = standin_pids(agent)
    os.kill(server, signal.SIGKILL)  # the shutdown reaches the model server too
    assert agent.wait(30) == 0, agent.stderr()  # well before the attempts' SIGTERM 45 s after the notice
    assert "notice: the model server is gone; ending 4 attempt(s) now" in agent.stderr()
    record = read_record(store, "r1")
    interrupted = sorted(a.episode_id for items in record.attempts.values() for a in items
                         if a.outcome == "interrupted")  # fmt: skip
    assert interrupted == blocked()
    assert not any(
        a.outcome in ("model_failure", "harness_error") for items in record.attempts.values() for a in items
    )
