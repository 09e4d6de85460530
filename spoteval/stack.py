"""A stack as the CLIs read it: its file `stacks/Pulumi.NAME.yaml` and its `pulumi stack output`.

    path = find_stack("aws-us-east-1")                     # every command finds a stack this way
    path = stack_file(Path("stacks"), "aws-us-east-1")
    settings = stack_settings(read_stack_document(path))   # {"provider": "aws", "workload": {...}, ...}
    outputs = pulumi_stack_output("aws-us-east-1")         # the parsed `pulumi stack output --json`

`stack_settings` gives the `spot-eval:*` keys of the file's `config:` without the namespace (what
`components.settings` parses for the Pulumi program). Reading never starts anything: `pulumi stack
output` only reads the stack's state. Problems are raised as `DocumentError` (the file) or
`StackOutputError` (the CLI) with their parts, and each CLI words them for its users.

`find_stack` is how every command (plan, placement, report, measure_restart, operate) turns
`--stack NAME` into a file, before anything else is asked (not even `pulumi`): a name that is not a
stack of the folder is a `StackNotFound` whose one line names the file looked for and the stacks
there. `market_refusal` is the settings' own rule for which markets a stack may declare; the
placement and the offers ask it too, so their answers stay within what the stack can do.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from spoteval.config_reader import read_document, read_json_document

NAMESPACE: Final = "spot-eval"
PREFIX: Final = f"{NAMESPACE}:"
#: the repository's stacks (every command's default `--stacks-dir` when the current folder has none)
DEFAULT_STACKS_DIR: Final = Path(__file__).resolve().parents[1] / "stacks"


def default_stacks_dir() -> Path:
    """Where `--stack NAME` is looked for without `--stacks-dir`: `stacks/` of the current folder when
    it has one (a project's own, the repository's when run from its root), else the repository's."""
    here = Path("stacks")
    return here if here.is_dir() else DEFAULT_STACKS_DIR


#: the markets a stack's `node.market` may name
MARKETS: Final = ("spot", "on_demand")


class StackNotFound(Exception):
    """`--stack NAME` names no stack file in the stacks folder; the message is the one line to print."""

    def __init__(self, name: str, path: Path, known: list[str], *, bad_name: bool = False) -> None:
        listed = ", ".join(known) or "none"
        what = "not a stack name" if bad_name else f"no {shown_path(path)}"
        #: `stack 'NAME'` and what is wrong: every command prints `{subject}: {problem}`
        self.subject = f"stack {name!r}"
        self.problem = f"{what} (stacks: {listed})"
        super().__init__(f"{self.subject}: {self.problem}")
        self.name = name
        self.path = path
        self.known = known


def shown_path(path: Path) -> str:
    """`path` as a user reads it: relative to the current folder when it lies inside it."""
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def known_stacks(stacks_dir: Path) -> list[str]:
    """The stack names of `stacks_dir/Pulumi.*.yaml`, sorted."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))


def find_stack(name: str, stacks_dir: Path | None = None) -> Path:
    """The file of the stack NAME in `stacks_dir` (default: `default_stacks_dir()`); `StackNotFound`
    when there is none."""
    folder = default_stacks_dir() if stacks_dir is None else Path(stacks_dir)
    path = stack_file(folder, name)
    if not is_stack_name(name):
        raise StackNotFound(name, path, known_stacks(folder), bad_name=True)
    if not path.is_file():
        raise StackNotFound(name, path, known_stacks(folder))
    return path


def market_refusal(provider: object, market: str) -> str | None:
    """Why a stack of `provider` cannot declare `market` (one line with its source), or None when it
    can. The settings refuse `node.market` with this; the placement and the offers leave the market
    out with it. An unknown provider refuses nothing here (the settings name it as unknown)."""
    from spoteval.providers import facts

    try:
        found = facts(str(provider))
    except KeyError:
        return None
    return None if market in found.markets else found.market_refusal(market)


def declarable_markets(provider: object) -> tuple[str, ...]:
    """The markets a stack of `provider` may declare, in `MARKETS` order."""
    return tuple(m for m in MARKETS if market_refusal(provider, m) is None)


def stack_file(stacks_dir: Path, name: str) -> Path:
    """Where the stack NAME's config lives: `stacks_dir/Pulumi.NAME.yaml`."""
    return stacks_dir / f"Pulumi.{name}.yaml"


def is_stack_name(name: str) -> bool:
    """A name that stays inside the stacks directory (no path separators, not hidden)."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def read_stack_document(path: Path, *, json_first: bool = False) -> object:
    """The stack file as plain values; a missing, unreadable or malformed file is a `DocumentError`."""
    return read_document(path, json_first=json_first)


def stack_settings(doc: object) -> dict[str, Any]:
    """The `spot-eval:*` keys of a stack document's `config`, without the namespace ({} when none)."""
    config = doc.get("config") if isinstance(doc, Mapping) else None
    if not isinstance(config, Mapping):
        return {}
    return {k[len(PREFIX) :]: v for k, v in config.items() if isinstance(k, str) and k.startswith(PREFIX)}


def read_json(path: Path) -> object:
    """A JSON file (saved stack outputs); a bad file is a `DocumentError` (`malformed`: not JSON,
    with the line and column)."""
    return read_json_document(path)


class StackOutputError(Exception):
    """`pulumi stack output` could not give the outputs.

    `reason`: "no-cli" (pulumi is not on PATH), "cannot-run" (`detail` says why), "failed" (exit code
    `returncode`, what it printed in `stderr` and `stdout`), or "not-json" (`detail` is the parser's message).
    """

    def __init__(
        self,
        stack: str,
        reason: str,
        detail: str = "",
        *,
        returncode: int = 0,
        stderr: str = "",
        stdout: str = "",
    ) -> None:
        super().__init__(f"--stack {stack}: pulumi stack output: {reason}{': ' + detail if detail else ''}")
        self.stack = stack
        self.reason = reason
        self.detail = detail
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout


def pulumi_stack_output(stack: str, *, cwd: Path | None = None, timeout_s: float | None = None) -> object:
    """`pulumi stack output --json --stack NAME`, parsed; `StackOutputError` when it cannot be had."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise StackOutputError(stack, "no-cli")
    try:
        done = subprocess.run(
            [pulumi, "stack", "output", "--json", "--stack", stack],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackOutputError(stack, "cannot-run", str(exc)) from None
    if done.returncode != 0:
        raise StackOutputError(
            stack, "failed", returncode=done.returncode, stderr=done.stderr or "", stdout=done.stdout or ""
        )
    try:
        return json.loads(done.stdout)
    except ValueError as exc:
        raise StackOutputError(stack, "not-json", str(exc)) from None
