"""The command lines' shared argument parser: a usage error is one line and exit 2.

argparse prints the whole multi-line usage before its message. The project's error format is one
line naming the problem (`prog: message`) and exit code 2, for option errors as for any other bad
input. Standard library only: the node agent's commands use it too.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose usage errors print `prog: message` and exit 2.

    Subparsers made with `add_subparsers()` are of the same class (argparse's default).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}\n")


def positive_number(value: str) -> float:
    """An argparse `type`: a finite number > 0 (seconds, a price), or the option's one-line error."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be > 0")
    return number


def add_deployed_stack_options(parser: argparse.ArgumentParser) -> None:
    """`--stack NAME | --outputs FILE.json`, `--grant FILE` and `--stacks-dir DIR`: how the commands
    that act on a deployed stack (the restart measurement, the operator) name it, all alike."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--stack",
        metavar="NAME",
        help="the deployed stack: its outputs from `pulumi stack output --json`, its grant, provider block "
        "and workload price from stacks/Pulumi.NAME.yaml",
    )
    src.add_argument(
        "--outputs",
        metavar="FILE.json",
        help="the stack's outputs saved as JSON (pulumi stack output --json > FILE.json), for a stack "
        "managed elsewhere; then no grant unless --grant",
    )
    parser.add_argument(
        "--grant", metavar="FILE", help="a grant (YAML or JSON), instead of the stack's spot-eval:grant"
    )
    parser.add_argument(
        "--stacks-dir",
        metavar="DIR",
        help="where Pulumi.NAME.yaml is (with --stack; default: stacks/ here, else the repository's)",
    )


def add_price_option(parser: argparse.ArgumentParser) -> None:
    """`--price PER_HOUR`: the price for the grant's checks where no API gives one, for the commands
    that start a deployed stack's nodes (the restart measurement, the operator)."""
    parser.add_argument(
        "--price",
        type=positive_number,
        metavar="PER_HOUR",
        help="the price per hour where no API gives one (default: the stack's workload.prices for its "
        "market)",
    )
