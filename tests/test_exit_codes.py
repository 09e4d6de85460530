"""The agent's exit codes reach what runs it: the Kubernetes pod's command (sh with `set -e`, then
`exec`) exits with the agent's own code, and the Job's podFailurePolicy fails the Job on the
permanent codes only (spoteval/agent/exits.py), so `75` (store unreachable at start) is retried."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from components.startup import NODE_ID_PLACEHOLDER, k8s_agent_command
from spoteval.agent import exits
from tests.test_stacks import kube

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _pod(tmp_path: Path, manifest_code: int, agent_code: int) -> int:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(
        "#!/bin/bash\n"
        'case "$*" in\n'
        f'  *" manifest "*) exit {manifest_code} ;;\n'
        f'  *"-m spoteval.agent --config"*) exit {agent_code} ;;\n'
        "esac\nexit 0\n"
    )
    (fake / "python3").chmod(0o755)
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"node": {"id": NODE_ID_PLACEHOLDER}}))
    command = k8s_agent_command(
        str(config), "/etc/spot-eval/agent-bundle.zip", "/etc/spot-eval/manifest.jsonl"
    )
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "POD_NAME": "p-0", "TMPDIR": str(tmp_path)}
    return subprocess.run(command, check=False, env=env, timeout=30).returncode


@pytest.mark.parametrize(
    ("manifest_code", "agent_code", "pod_code"),
    [
        (exits.STORE_UNREACHABLE, exits.OK, exits.STORE_UNREACHABLE),  # the manifest step
        (exits.OK, exits.STORE_UNREACHABLE, exits.STORE_UNREACHABLE),  # the agent itself
        (exits.BAD_INPUT, exits.OK, exits.BAD_INPUT),
        (exits.OK, exits.OK, exits.OK),
    ],
)
def test_the_pod_exits_with_the_agent_s_code(
    tmp_path: Path, manifest_code: int, agent_code: int, pod_code: int
) -> None:
    assert _pod(tmp_path, manifest_code, agent_code) == pod_code


def test_the_job_fails_on_permanent_codes_only() -> None:
    rules = kube().one("kubernetes:batch/v1:Job").inputs["spec"]["podFailurePolicy"]["rules"]
    failing = {code for r in rules if r["action"] == "FailJob" for code in r["onExitCodes"]["values"]}
    assert failing == set(exits.PERMANENT) == {2, 3}
    assert not failing & set(exits.TRANSIENT)
