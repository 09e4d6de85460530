"""`python -m scripts.measure_restart` as one call: the plan, or the measurement and its report."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from spoteval.clouds import (
    NodeState,
    PlaneConfig,
    Price,
    open_plane,
)
from spoteval.measure.cycle import Measurement, Timeouts
from spoteval.measure.inputs import Inputs, load_inputs
from spoteval.measure.phases import GCP_KEY_ENV, PROG, MeasureError
from spoteval.measure.probe import read_events
from spoteval.measure.render import plot, print_plan, print_report
from spoteval.providers import Lacks, UnknownProvider, facts
from spoteval.providers import provider as facts_provider
from spoteval.record import RunLayout
from spoteval.store import Store


@dataclass(frozen=True)
class Options:
    """What the command line asks for (the options of `python -m scripts.measure_restart`)."""

    stack: str | None = None
    outputs: str | None = None
    grant: str | None = None
    stacks_dir: str | None = None  # None: stacks/ here, else the repository's
    node: str | None = None
    cycles: int = 3
    mode: str = "stop-start"
    health_url: str | None = None
    yes: bool = False
    leave: str = "stopped"
    json: bool = False
    plot: str | None = None
    wait_ready: bool = False
    price: float | None = None
    fis_template: str | None = None
    gcp_project: str | None = None
    azure_subscription: str | None = None
    azure_resource_group: str | None = None
    k8s_namespace: str | None = None
    k8s_deployment: str | None = None
    poll: float = 5.0
    stop_timeout: float = 900.0
    start_timeout: float = 1800.0
    serve_timeout: float = 1800.0
    ready_timeout: float = 900.0

    def inputs(self) -> Inputs:
        return load_inputs(
            stack=self.stack, outputs=self.outputs, grant=self.grant, stacks_dir=self.stacks_dir
        )


def _preempt_option(key: str) -> str | None:
    """The plane option a simulated preemption needs on this provider (spoteval/providers/)."""
    try:
        option = facts_provider(facts(key).key).PREEMPT_OPTION
    except UnknownProvider as exc:
        raise MeasureError(str(exc)) from None
    return None if isinstance(option, Lacks) else option.name


def run(options: Options, out: Console, err: Console) -> int:
    """Show the plan, or (with `yes`) measure and report; the exit code."""
    inputs = options.inputs()
    outputs, grant = inputs.outputs, inputs.grant
    node = options.node or outputs.node_ids[0]
    if node not in outputs.node_ids:
        raise MeasureError(
            f"--node {node!r} is not among the stack's node_ids: {', '.join(outputs.node_ids)}"
        )
    grant.check_region(outputs.region, "outputs.region")
    grant.check_instance_type(outputs.instance_type, "outputs.instance_type")
    needs = _preempt_option(outputs.provider)
    if options.mode == "preempt" and needs == "fis_template_id" and not options.fis_template:
        raise MeasureError(
            "--mode preempt on aws needs --fis-template ID (aws:ec2:send-spot-instance-interruptions)"
        )
    block = inputs.provider_block

    def from_block(key: str) -> str | None:
        value = block.get(key)
        return value if isinstance(value, str) and value else None

    config = PlaneConfig(
        configured_price=options.price if options.price is not None else inputs.configured_price,
        currency=grant.currency,
        poll_s=options.poll,
        fis_template_id=options.fis_template,
        gcp_billing_api_key=os.environ.get(GCP_KEY_ENV) or None,
        gcp_project=options.gcp_project or from_block("project"),
        azure_subscription=options.azure_subscription,
        azure_resource_group=options.azure_resource_group or from_block("resource_group"),
        k8s_namespace=options.k8s_namespace or from_block("namespace"),
        k8s_deployment=options.k8s_deployment,
    )
    plane = open_plane(outputs, node, config)
    store = Store(outputs.bucket_url)
    timeouts = Timeouts(
        options.stop_timeout, options.start_timeout, options.serve_timeout, options.ready_timeout
    )

    state = plane.state()
    price = plane.price_now()
    plan = _plan(
        options, inputs, node=node, store=store, timeouts=timeouts, state=state, price=price, err=err
    )
    if not options.yes:
        if options.json:
            print(json.dumps({"plan": plan, "changed": False}, indent=2))
        else:
            print_plan(plan, out)
        return 0
    if state.status == "terminated":
        raise MeasureError(f"node {node} is {state.raw}: nothing to measure")

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True
    ) as progress:
        measurement = Measurement(
            plane,
            outputs,
            grant,
            store,
            mode=options.mode,
            cycles=options.cycles,
            leave=options.leave,
            timeouts=timeouts,
            health_url=options.health_url,
            wait_ready=options.wait_ready,
            poll_s=options.poll,
            progress=progress,
            console=err,
        )
        measurement.last_price = price
        code = measurement.run()
    report = measurement.report()
    if options.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, out)
    if options.plot and report["cycles"]:
        plot(report, Path(options.plot))
    if code:
        err.print(f"{PROG}: {report['outcome']}: {report['error']}")
    return code


def _plan(
    options: Options,
    inputs: Inputs,
    *,
    node: str,
    store: Store,
    timeouts: Timeouts,
    state: NodeState,
    price: Price,
    err: Console,
) -> dict[str, Any]:
    """What the measurement would do and may cost, from the state and the price read now."""
    outputs, grant = inputs.outputs, inputs.grant
    layout = RunLayout(outputs.run_id)
    budget_left = None
    if grant.budget is not None:
        events = read_events(store, store.list(layout.events_prefix), err)
        budget_left = grant.budget_left(events, fallback_price=price.per_hour)
    hours = options.cycles * timeouts.cycle_hours(options.wait_ready)
    return {
        "node": node,
        "provider": outputs.provider,
        "region": outputs.region,
        "zone": outputs.zone,
        "instance_type": outputs.instance_type,
        "market": outputs.market,
        "state_now": state.raw if state.raw == state.status else f"{state.status} ({state.raw})",
        "mode": options.mode,
        "cycles": options.cycles,
        "leave": options.leave,
        "price_now": price.to_json(),
        "currency": price.currency,
        "max_billed_hours": round(hours, 4),
        "most_it_can_cost": hours * price.per_hour if price.per_hour is not None else None,
        "grant": grant.to_json(),
        "budget_left": budget_left,
        "record": store.join(layout.events_prefix),
    }


def refuse_out_of_context(args: argparse.Namespace) -> None:
    """Options that do not apply to what was asked are bad input (one line), not silently ignored."""
    if args.fis_template and args.mode != "preempt":
        raise MeasureError("--fis-template is the experiment of --mode preempt: give --mode preempt with it")
    if args.ready_timeout is not None and not args.wait_ready:
        raise MeasureError("--ready-timeout is how long --wait-ready waits: give --wait-ready with it")
    if args.plot and not args.yes:
        raise MeasureError("--plot draws the measured cycles: give --yes (without it nothing is measured)")
    if args.stacks_dir and not args.stack:
        raise MeasureError("--stacks-dir is where --stack NAME is looked for: give --stack NAME with it")
