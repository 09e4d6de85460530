"""Azure's provider-side stop: the auto-shutdown schedule (deallocate at a daily time) declared for
the max runtime when the runtime ends within the first day; never for longer runtimes (a daily
schedule would stop the VM early), which the agent and the operator enforce."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from components.azure_rules import auto_shutdown_time
from tests.test_stacks import variant, variant_cached

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SCHEDULE = "azure-native:devtestlab:GlobalSchedule"


def test_a_runtime_within_the_first_day_is_an_auto_shutdown_of_the_vm() -> None:
    r = variant_cached("azure", "stop__max_runtime_hours", 6)
    schedule = r.one(SCHEDULE)
    vm = r.one("azure-native:compute:VirtualMachine")
    vm_name = r.outputs["node_ids"][0]
    inputs = schedule.inputs
    assert inputs["name"] == f"shutdown-computevm-{vm_name}"
    assert inputs["taskType"] == "ComputeVmShutdownTask"
    assert inputs["status"] == "Enabled"
    assert inputs["dailyRecurrence"] == {"time": "1500"}  # NOW 09:00 UTC + 6 h
    assert inputs["timeZoneId"] == "UTC"
    assert vm.urn in schedule.depends_on
    assert schedule.ignore_changes == ("dailyRecurrence",)


def test_longer_runtimes_scale_sets_and_no_compute_declare_none() -> None:
    assert not variant("azure").of_type(SCHEDULE)  # the stack's 30 h
    assert not variant("azure", stop__max_runtime_hours=6, node__count=0).of_type(SCHEDULE)
    assert not variant("azure", stop__max_runtime_hours=6, node__count=2).of_type(SCHEDULE)


def test_auto_shutdown_time_of_day() -> None:
    now = datetime(2026, 12, 1, 21, 30, tzinfo=timezone.utc)
    assert auto_shutdown_time(now, 4 * 3600) == "0130"
    assert auto_shutdown_time(now, 24 * 3600) is None
