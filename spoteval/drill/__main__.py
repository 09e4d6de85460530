"""`python -m spoteval.drill node --config agent.json --boot-file FILE` (the drill node's startup path) or
`python -m spoteval.drill operator DIR [--once]` (a second operator of a drill); the drill itself is
scripts/drill.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from spoteval.drill.attach import operator_main
from spoteval.drill.node import node_main


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "node":
        return node_main(args[1:])
    if args and args[0] == "operator":
        return operator_main(args[1:])
    print(
        "python -m spoteval.drill: the commands are `node --config agent.json --boot-file FILE` "
        "and `operator DIR [--once]`",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
