"""The local drill: an operated run on this machine, preempted by a chaos controller, then its report.

    python -m scripts.drill [--store file|s3|URL] [--eval-command CMD] [--server-command CMD]
                            [--episodes N] [--concurrency C] [--lifetime-s S] [--notice-s S]
                            [--capacity-delay-s S] [--seed N] [--out DIR] [--timeout-s S]
                            [--manifest FILE.jsonl] [--harness inspect|lm-eval]
                            [--task TASK] [--task-args JSON] [--options JSON] [--samples N|JSON]
                            [--shard-size N] [--startup-s S] [--sample-s S] [--timing-from DIR]
                            [--workdir DIR] [--requirements FILE | --requirement REQ ...]
                            [--exclude PATTERN ...] [--ship-credential PATH ...]
                            [--preempt-after-samples N] [--preempt-after-results N]
                            [--server standin|vllm] [--nodes K] [--shared] [--json]

No cloud account: the store is a local folder (`file`, the default) or S3 on a moto server the drill
starts on loopback (`s3`, needs `moto[server]`), or any store URL with its credentials in the
environment. The node runs the real agent (provider `local`) with the stand-in model server and the
built-in sample episode (0.5-3 s each, 3 % failing as model failures), unless `--server-command`
(with a `{port}` placeholder) and `--eval-command` (with the agent's `{episode_id}`, `{model_url}`,
`{output}` placeholders) say otherwise: rehearse your own harness's resume path this way.
`--harness inspect|lm-eval` runs a task in shards: your own with `--task` (`PATH.py@TASK`,
`package.module@TASK`, lm-eval `FOLDER@TASK`; paths relative to this folder or absolute), else the
harness's shipped one; `--preempt-after-samples N` then takes the node's first life once N samples
are in the store (`--preempt-after-results N`: once N episode results are). The task's folder (or
`--workdir`) ships to the node in the agent bundle, and `--requirements` are installed there, as a
stack's node does (spoteval/drill/bundled.py). `--server vllm` runs the real vLLM server on this
machine's CPU with a tiny model, through our launcher in the node's unpacked bundle (the vLLM
environment comes from `make vllm`; without it: one line naming it, exit 2), with longer lives and
episodes by default; it combines with `--task` and `--nodes K`.

The controller takes the node away after exponential lifetimes (mean `--lifetime-s`, default 45 s):
SIGTERM to the agent `--notice-s` before the end, SIGKILL of everything on the node at the end, a
capacity delay, and a restart through the node's startup path. At the end it prints the run report
and the placement decision for the next run, and writes `timeline.png`, `report.txt`, `report.json`
and the drill's own log (`drill.json`) into `--out` (default `drill-<time>/`).

`--nodes K` (K > 1) rehearses a pool: K nodes of one run, each with its own agent config
(`agent.json`, `agent-2.json`, ...), folder (`node-1/`, `node-2/`, ...), lifetimes and capacity
waits, sharing the episodes through claims in the run record; the operator brings each back.

Exit codes: 0 the run finished, 1 it did not finish within `--timeout-s`, 2 bad input, 3 every
episode ended in a harness error (a missing harness, a task that does not load, a failed
requirements install: the reason is printed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spoteval import drill
from spoteval.drill.options import OptionError, add_own_eval_options, command_argv, own_eval
from spoteval.report import ReportError


class UsageError(Exception):
    """Bad input: names the option."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    d = drill.DrillConfig(out=Path("."))
    p = _Parser(
        prog="python -m scripts.drill",
        description="Rehearse an operated spot run on this machine: chaos as the provider, then the report.",
    )
    p.add_argument("--store", default="file", help="file (default), s3 (a moto server on loopback), or a URL")
    p.add_argument("--eval-command", help="episode command with {episode_id} {model_url} {output}")
    p.add_argument("--server-command", help="model server command with {port}")
    p.add_argument(
        "--harness", choices=("inspect", "lm-eval"), help="run the harness's shipped task in shards"
    )
    add_own_eval_options(p)
    p.add_argument(
        "--preempt-after-samples",
        type=int,
        metavar="N",
        help="with --harness: take the first node once N samples are in the store",
    )
    p.add_argument(
        "--preempt-after-results",
        type=int,
        metavar="N",
        help="take the first node once N episode results are in the store",
    )
    p.add_argument(
        "--server",
        choices=drill.SERVERS,
        default="standin",
        help="the model server: the stand-in (default) or vLLM on this CPU (needs `make vllm`)",
    )
    vllm = drill.VLLM_DEFAULTS
    p.add_argument("--manifest", help="manifest.jsonl of your episodes (default: --episodes sample episodes)")
    p.add_argument(
        "--episodes", type=int, help=f"sample episodes (default {d.episodes}; {vllm['episodes']} with vllm)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        help=f"episodes in flight (default {d.concurrency}; {vllm['concurrency']} with vllm)",
    )
    p.add_argument(
        "--lifetime-s",
        type=float,
        help=f"mean lifetime (default {d.lifetime_s}; {vllm['lifetime_s']} with vllm)",
    )
    p.add_argument(
        "--notice-s", type=float, default=d.notice_s, help="notice before the kill (default %(default)s)"
    )
    p.add_argument(
        "--capacity-delay-s",
        type=float,
        default=d.capacity_delay_s,
        help="mean wait for capacity after a preemption (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help="seed of lifetimes, delays, sample (default %(default)s)"
    )
    p.add_argument(
        "--timeout-s",
        type=float,
        help=f"stop the drill after (default {d.timeout_s}; {vllm['timeout_s']} with vllm)",
    )
    p.add_argument("--nodes", type=int, default=d.nodes, help="nodes sharing the run (default %(default)s)")
    p.add_argument("--out", help="folder for the drill's files (default drill-<time>)")
    p.add_argument("--shared", action="store_true", help="print the shared report (no ids, no prices)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


def config_from(args: argparse.Namespace) -> drill.DrillConfig:
    out = Path(args.out or f"drill-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}")
    defaults = drill.server_defaults(args.server)
    try:
        commands = (
            command_argv(args.eval_command, "--eval-command"),
            command_argv(args.server_command, "--server-command"),
        )
        own = own_eval(args)
    except OptionError as exc:
        raise UsageError(str(exc)) from None

    def given(name: str) -> Any:
        value = getattr(args, name)
        return defaults[name] if value is None else value

    return drill.DrillConfig(
        out=out,
        store=args.store,
        episodes=given("episodes"),
        concurrency=given("concurrency"),
        lifetime_s=given("lifetime_s"),
        notice_s=args.notice_s,
        capacity_delay_s=args.capacity_delay_s,
        seed=args.seed,
        eval_command=commands[0],
        server_command=commands[1],
        timeout_s=given("timeout_s"),
        episode_seconds=defaults["episode_seconds"],
        manifest=Path(args.manifest) if args.manifest else None,
        harness=args.harness,
        preempt_after_samples=args.preempt_after_samples,
        preempt_after_results=args.preempt_after_results,
        server=args.server,
        nodes=args.nodes,
        own=own,
    )


def run(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    cfg = config_from(args)
    try:
        cfg.check()
    except drill.DrillError as exc:
        raise UsageError(str(exc)) from None
    return drill.run_command(cfg, as_json=args.json, shared=args.shared)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except (UsageError, drill.DrillError, ReportError) as exc:
        print(f"drill: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("drill: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
