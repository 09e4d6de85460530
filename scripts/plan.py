"""What a stack declares, without a cloud account: the review of an infrastructure change.

    python -m scripts.plan --stack NAME [--stacks-dir DIR] [--json] [--now RFC3339] [--price-now]

Runs the Pulumi program (`__main__.py`) on `stacks/Pulumi.NAME.yaml` against Pulumi's mock engine
(the same one the tests use) and prints every resource it declares, as a tree of components: type
token, logical name, the holds (`protect`, `retain-on-delete`) and the key properties of each type
(spot settings, max price, bucket privacy, identity policy, stop rules, event patterns; Nebius's
preset and preemptible, Runpod's GPU type and price cap), then the stack outputs, notes (a held
weights cache attached to no node, and why) and the cost: the hourly price of the nodes it
declares (the stack's `spot-eval:workload.prices`, or with `--price-now` the provider's price API,
read as `scripts.placement --offers` reads it) and the run's expected cost from the placement.
`--json` prints the same as one JSON object. `--now` fixes the clock the stop rules are computed
from (default: now).

Exit codes: 0 rendered; 2 unknown stack or a config the program refuses (one line on stderr naming
the key).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Final

from components.base import STACK_FILE
from components.mocks import RenderError, read_stack_config, render_config
from components.plan import as_json, as_text, notes
from components.plan_cost import plan_cost
from components.settings import SettingsError, parse
from spoteval.cli import OneLineParser
from spoteval.stack import PREFIX, StackNotFound, find_stack

EXIT_BAD_INPUT: Final = 2


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m scripts.plan",
        description="Print what a stack declares, rendered without a cloud account, and what it costs.",
        epilog="Exit codes: 0 rendered, 2 an unknown stack or a setting the program refuses (one line).",
    )
    parser.add_argument("--stack", required=True, metavar="NAME", help="the stack: stacks/Pulumi.NAME.yaml")
    parser.add_argument(
        "--stacks-dir",
        type=Path,
        metavar="DIR",
        help="where Pulumi.NAME.yaml is (default: stacks/ here, else the repository's)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="the time the stop rules count from, e.g. 2026-12-01T09:00:00Z (default: now)",
    )
    parser.add_argument(
        "--price-now",
        action="store_true",
        help="read the node's price now from the provider's price API (as placement --offers does; needs "
        "its credentials) instead of the stack's workload.prices",
    )
    return parser


def _now(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        now = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise RenderError(f"--now {text!r}: not an RFC 3339 time") from None
    if now.tzinfo is None:
        raise RenderError(f"--now {text!r}: give a time zone (Z or +00:00)")
    return now


def run(args: argparse.Namespace) -> int:
    try:
        path = find_stack(args.stack, args.stacks_dir)
    except StackNotFound as exc:
        raise RenderError(str(exc)) from None
    now = _now(args.now)
    config = read_stack_config(path)
    raw = {k[len(PREFIX) :]: v for k, v in config.items() if k.startswith(PREFIX)}
    token = STACK_FILE.set(path)  # the eval block's paths are relative to the stack file's repository
    try:
        rendered = render_config(args.stack, config, now=now)
        settings = parse(raw, stack=args.stack)
    except SettingsError as exc:  # the program accepted it: the same parse cannot refuse it now
        raise RenderError(f"stack config spot-eval:{exc}") from None
    finally:
        STACK_FILE.reset(token)
    cost = plan_cost(settings, raw, price_now=args.price_now)
    extra = notes(rendered, settings.node.count)
    if args.json:
        doc = {**as_json(rendered), "notes": extra, "cost": cost.to_json()}
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        lines = [as_text(rendered)]
        if extra:
            lines += ["notes:", *(f"  {n}" for n in extra)]
        print("\n".join([*lines, *cost.lines()]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except RenderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
