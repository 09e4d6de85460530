"""What a stack declares, without a cloud account: the review of an infrastructure change.

    python -m scripts.plan --stack NAME [--stacks-dir DIR] [--json] [--now RFC3339]

Runs the Pulumi program (`__main__.py`) on `stacks/Pulumi.NAME.yaml` against Pulumi's mock engine
(the same one the tests use) and prints every resource it declares, as a tree of components: type
token, logical name, the holds (`protect`, `retain-on-delete`) and the key properties of each type
(spot settings, max price, bucket privacy, identity policy, stop rules, event patterns), then the
stack outputs. `--json` prints the same as one JSON object. `--now` fixes the clock the stop rules
are computed from (default: now).

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

from components.mocks import STACKS_DIR, RenderError, render_stack, stack_files, stack_name
from components.plan import as_json, as_text
from spoteval.cli import OneLineParser

EXIT_BAD_INPUT: Final = 2


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m scripts.plan",
        description="Print what a stack declares, rendered without a cloud account.",
    )
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.NAME.yaml")
    parser.add_argument("--stacks-dir", type=Path, default=STACKS_DIR, help="folder of the stack files")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--now", help="RFC 3339 time the stop rules count from (default: now)")
    return parser


def run(args: argparse.Namespace) -> int:
    path = args.stacks_dir / f"Pulumi.{args.stack}.yaml"
    if not path.is_file():
        known = ", ".join(stack_name(p) for p in stack_files(args.stacks_dir)) or "none"
        raise RenderError(f"stack {args.stack!r}: no {path} (stacks: {known})")
    now = None
    if args.now is not None:
        try:
            now = datetime.fromisoformat(args.now.replace("Z", "+00:00"))
        except ValueError:
            raise RenderError(f"--now {args.now!r}: not an RFC 3339 time") from None
        if now.tzinfo is None:
            raise RenderError(f"--now {args.now!r}: give a time zone (Z or +00:00)")
    rendered = render_stack(path, now=now)
    if args.json:
        print(json.dumps(as_json(rendered), indent=2, sort_keys=True))
    else:
        print(as_text(rendered))
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
