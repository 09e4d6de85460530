"""The operator's idle rule: a running node whose agent served and then fell silent for
`idle_minutes` is stopped (`stop_rule:idle`): the agent is gone and the node holds a GPU. This is
the idle stop on Azure, which has no provider-side one, and a second guard elsewhere."""

from __future__ import annotations

from spoteval.grant import Grant
from spoteval.operate.decide import STOP, WAIT
from tests.test_operate_decide import RUNNING_STATE, act, ev, run, view

GRANT = Grant(idle_minutes=20)


def test_an_agent_silent_for_idle_minutes_after_it_served_gets_its_node_stopped() -> None:
    # start at T0, ready at 5 min, last heartbeat at 40 min; NOW is T0 + 60 min: 20 min of silence
    events = (ev(0, "start", "initial"), ev(5, "ready"), ev(40, "heartbeat"))
    assert act(view(events, RUNNING_STATE), GRANT, run(*events)) == (STOP, "stop_rule:idle")


def test_a_heartbeat_inside_idle_minutes_keeps_it() -> None:
    events = (ev(0, "start", "initial"), ev(5, "ready"), ev(41, "heartbeat"))  # 19 min of silence
    assert act(view(events, RUNNING_STATE), GRANT, run(*events))[0] == WAIT


def test_loading_the_model_is_not_silence_and_no_rule_means_no_stop() -> None:
    loading = (ev(0, "start", "initial"),)  # no `ready` yet: the model server may take 30 min
    assert act(view(loading, RUNNING_STATE), GRANT, run(*loading))[0] == WAIT
    served = (ev(0, "start", "initial"), ev(5, "ready"), ev(10, "heartbeat"))
    assert act(view(served, RUNNING_STATE), Grant(), run(*served))[0] == WAIT
    # a new allocation that has not served yet: the earlier `ready` does not count
    again = (*served, ev(30, "start", "restart_after_preemption"))
    assert act(view(again, RUNNING_STATE), GRANT, run(*again))[0] == WAIT
