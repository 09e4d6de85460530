"""A stack as the CLIs read it: its file `stacks/Pulumi.NAME.yaml` and its `pulumi stack output`.

    path = stack_file(Path("stacks"), "aws-us-east-1")
    settings = stack_settings(read_stack_document(path))   # {"provider": "aws", "workload": {...}, ...}
    outputs = pulumi_stack_output("aws-us-east-1")         # the parsed `pulumi stack output --json`

`stack_settings` gives the `spot-eval:*` keys of the file's `config:` without the namespace (what
`components.settings` parses for the Pulumi program). Reading never starts anything: `pulumi stack
output` only reads the stack's state. Problems are raised as `DocumentError` (the file) or
`StackOutputError` (the CLI) with their parts, and each CLI words them for its users.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from spoteval.config_reader import DocumentError, read_document, read_text

NAMESPACE: Final = "spot-eval"
PREFIX: Final = f"{NAMESPACE}:"


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
    """A JSON file (saved stack outputs); a bad file is a `DocumentError` (`malformed`: not JSON)."""
    text = read_text(path)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DocumentError(path, "malformed", str(exc)) from None


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
