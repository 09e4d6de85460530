"""The stack's `eval:` block naming a harness: what the node is given (under Pulumi's mocks), and the
bad input refused with one line naming the key before anything is declared."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from components.eval_settings import (
    EvalProject,
    HarnessEval,
    check_task,
    resolve_eval,
    shard_plan,
    statement,
    task_samples,
)
from components.mocks import Rendered, RenderError, read_stack_config, render_config
from components.runpod import start_script
from components.settings import SettingsError, parse
from spoteval.bundle.build import Bundle, build_bundle
from tests.test_settings import raw_of, rejects
from tests.test_stacks import NOW, STACKS, agent_template, pod_spec, user_data

STACK = "aws-us-east-1"
MODEL = "Qwen/Qwen2.5-7B-Instruct"  # the stack's server.model
REPO = Path(__file__).resolve().parent.parent
INSPECT_TASK = "spoteval/harness/tasks/inspect_tiny.py@spoteval_tiny"
LM_EVAL_OPTIONS = {"include_path": "spoteval/harness/tasks/lm_eval"}
INSPECT_IDS = [
    "arith/1",
    "colour 1",
    "geo/1",
    "bio/1",
    "astro/1",
    "phys/1",
    "words/1",
    "colour 2",
    "arith/2",
    "words 2",
]
RUNNER = ["-m", "spoteval.harness", "run"]
NODE_INSPECT_TASK = "eval/inspect_tiny.py@spoteval_tiny"  # the task's folder ships as the bundle's eval/
EVAL_ENV = {"workdir": "eval", "venvs_dir": "/mnt/spot-eval-cache/venvs"}
PLACEHOLDERS = ["--model-url", "{model_url}", "--output", "{output}", "--episode", "{episode_id}"]


def harness_config(stack: str = STACK, **eval_block: Any) -> dict[str, Any]:
    """A stack with its eval block's command and manifest replaced by `eval_block`, no workload."""
    config = copy.deepcopy(read_stack_config(STACKS[stack]))
    config.pop("spot-eval:workload")
    block = config["spot-eval:eval"]
    block.pop("command")
    block.pop("manifest")
    block.update(eval_block)
    return config


def render(**eval_block: Any) -> Rendered:
    return render_config(STACK, harness_config(**eval_block), now=NOW)


def staged_manifest(r: Rendered) -> list[dict[str, Any]]:
    objects = {o.inputs["key"]: o for o in r.of_type("aws:s3/bucketObjectv2:BucketObjectv2")}
    path = Path(objects["spot-eval/manifest.jsonl"].inputs["source"]["path"])
    return [json.loads(line) for line in path.read_text().splitlines()]


def command_stack_template() -> dict[str, Any]:
    """The agent config of the same stack with its own command: everything else must be the same."""
    config = copy.deepcopy(read_stack_config(STACKS[STACK]))
    config.pop("spot-eval:workload")
    config["spot-eval:eval"]["concurrency"] = 2
    return agent_template(user_data(render_config(STACK, config, now=NOW)))


def test_an_inspect_eval_block_gives_the_node_the_shard_runner_and_its_shards() -> None:
    r = render(harness="inspect", task=INSPECT_TASK, task_args={"max_tokens": 4}, samples=INSPECT_IDS,
               shard_size=4, concurrency=2)  # fmt: skip
    script = user_data(r)
    expected = command_stack_template()
    expected["episodes"]["command"] = [
        "{python}", *RUNNER, "--harness", "inspect", "--task", NODE_INSPECT_TASK, "--model", MODEL,
        *PLACEHOLDERS, "--args", '{"max_tokens": 4}',
    ]  # fmt: skip
    expected["eval_env"] = EVAL_ENV
    assert agent_template(script) == expected
    shard = {"harness": "inspect", "task": NODE_INSPECT_TASK}
    assert staged_manifest(r) == [
        {"id": "spoteval_tiny-0001", **shard, "samples": INSPECT_IDS[0:4]},
        {"id": "spoteval_tiny-0002", **shard, "samples": INSPECT_IDS[4:8]},
        {"id": "spoteval_tiny-0003", **shard, "samples": INSPECT_IDS[8:]},
    ]
    prepare = script[script.index("cat > /opt/spot-eval/prepare") :]
    python = "/opt/spot-eval/venv/bin/python"
    install = (
        f"{python} -c 'import inspect_ai' 2>/dev/null"
        f" || {python} -m pip install -q --disable-pip-version-check 'inspect-ai>=0.3.285'"
    )
    assert prepare.splitlines().count(install) == 1
    assert "SPOT_EVAL_MANIFEST_URL=s3://" in script
    assert prepare.count("-m spoteval.agent manifest --config /etc/spot-eval/agent.json") == 1


def test_an_lm_eval_eval_block_chooses_the_shard_size_from_the_measured_timings() -> None:
    r = render(harness="lm-eval", task="spoteval_tiny", options=LM_EVAL_OPTIONS, samples=10, concurrency=2)
    expected = command_stack_template()
    expected["episodes"]["command"] = [
        "{python}", *RUNNER, "--harness", "lm-eval", "--task", "eval@spoteval_tiny", "--model", MODEL,
        *PLACEHOLDERS,
    ]  # fmt: skip
    expected["eval_env"] = EVAL_ENV
    assert agent_template(user_data(r)) == expected
    # lm-eval's start-up is long and it answers the stand-in in milliseconds (measured.json): one
    # shard would hold all ten samples, so the two episodes in flight (concurrency 2) split them
    shard = {"harness": "lm-eval", "task": "eval@spoteval_tiny"}
    assert staged_manifest(r) == [
        {"id": "spoteval_tiny-0001", **shard, "samples": [0, 1, 2, 3, 4]},
        {"id": "spoteval_tiny-0002", **shard, "samples": [5, 6, 7, 8, 9]},
    ]
    assert "'lm-eval[api]>=0.4.13'" in user_data(r)


def test_pods_install_the_harness_into_their_python_before_the_agent_starts() -> None:
    block = {"harness": "lm-eval", "task": "spoteval_tiny", "options": LM_EVAL_OPTIONS, "samples": 10}
    install = (
        "python3 -c 'import lm_eval' 2>/dev/null"
        " || python3 -m pip install -q --disable-pip-version-check 'lm-eval[api]>=0.4.13'"
    )
    r = render_config("k8s-gke", harness_config("k8s-gke", **block), now=NOW)
    data = r.one("kubernetes:core/v1:ConfigMap").inputs["data"]
    command = json.loads(data["agent.json"])["episodes"]["command"]
    assert command[:7] == ["{python}", *RUNNER, "--harness", "lm-eval", "--task"]
    assert [json.loads(line)["samples"] for line in data["manifest.jsonl"].splitlines()] == [
        list(range(10))[n : n + 1] for n in range(10)
    ]  # 32 episodes in flight: one sample each
    script = pod_spec(r.one("kubernetes:batch/v1:Job"))["containers"][0]["command"][2].splitlines()
    unpack = (
        "PYTHONPATH=/etc/spot-eval/agent-bundle.zip python3 -m spoteval.bundle unpack "
        "/etc/spot-eval/agent-bundle.zip /tmp/spot-eval-bundle"
    )
    assert script.index(install) == script.index(unpack) - 1
    assert script.index(unpack) == script.index("export PYTHONPATH=/tmp/spot-eval-bundle") - 1

    raw = {k: v for k, v in raw_of("runpod-eu").items() if k != "workload"}
    raw["eval"] = {k: v for k, v in raw["eval"].items() if k not in ("command", "manifest")} | block
    lines = start_script(parse(raw, "runpod-eu")).splitlines()
    assert lines.count(install) == 1
    assert lines.index(install) < lines.index(
        "python3 -m spoteval.agent manifest --config /tmp/spot-eval-agent.json /tmp/spot-eval-manifest.jsonl"
    )


def _resolved(h: HarnessEval, project: EvalProject | None = None) -> tuple[Any, Bundle]:
    resolved = resolve_eval(h, project or EvalProject(), REPO, SettingsError)
    return resolved, build_bundle(project=resolved.project)


def test_the_shard_plan_is_stated_with_where_the_size_came_from() -> None:
    h = HarnessEval(
        "lm-eval", "spoteval_tiny", options=LM_EVAL_OPTIONS, samples=10, startup_s=55.7, sample_s=0.017
    )
    resolved, bundle = _resolved(h)
    shards = shard_plan(h, MODEL, 2, SettingsError, resolved=resolved, bundle=bundle)
    assert statement(h, shards, check_task(resolved, bundle, SettingsError)) == (
        "eval: lm-eval task spoteval_tiny: 10 samples in 2 shards of up to 5, chosen from start-up 55.7 s "
        "per shard and 0.017 s per sample (start-up <= 10% of a shard; figures: start-up and time per "
        "sample as given); harness logs under runs/{run_id}/harness/{shard}/logs/ in the bucket"
    )
    given = HarnessEval("inspect", "inspect_evals/gsm8k", samples=(1, 2, 3), shard_size=2)
    resolved, bundle = _resolved(given)
    shards = shard_plan(given, MODEL, 8, SettingsError, resolved=resolved, bundle=bundle)
    assert statement(given, shards, check_task(resolved, bundle, SettingsError)) == (
        "eval: inspect task inspect_evals/gsm8k: 3 samples in 2 shards of up to 2, as given (shard_size); "
        "harness logs under runs/{run_id}/harness/{shard}/logs/ in the bucket; "
        "the task itself is checked on the node, by the first shard"
    )


@pytest.mark.slow
def test_inspect_samples_are_read_from_the_task_in_the_bundle_when_not_listed() -> None:
    h = HarnessEval("inspect", INSPECT_TASK, samples=3)
    resolved, bundle = _resolved(h)
    assert task_samples(h, resolved, bundle, SettingsError) == tuple(INSPECT_IDS[:3])
    h = HarnessEval("inspect", INSPECT_TASK, samples=11)
    with pytest.raises(SettingsError) as info:
        task_samples(h, resolved, bundle, SettingsError)
    assert str(info.value) == "eval.samples: 11 is more than the task's 10 samples"


# --- bad input: one line naming the key ---------------------------------------------------------------

HARNESS = {"eval__command": None, "eval__manifest": None, "workload": None}
INSPECT = {"eval__harness": "inspect", "eval__task": INSPECT_TASK}
LM_EVAL = {"eval__harness": "lm-eval", "eval__task": "spoteval_tiny", "eval__options": LM_EVAL_OPTIONS}
BAD_BLOCKS = [
    (
        "eval.harness",
        {"eval__harness": "helm", "eval__task": "x"},
        "unknown harness 'helm' (known: inspect, lm-eval)",
    ),
    ("eval.harness", {**INSPECT, "eval__command": ["x"]}, "give either command or harness, not both"),
    ("eval.command", {}, "give either command (your episode command) or harness (inspect or lm-eval)"),
    ("eval.shard_size", {**INSPECT, "eval__shard_size": 0}, "must be >= 1, got 0"),
    ("eval.shard_size", {**INSPECT, "eval__shard_size": "4"}, "must be an integer, got '4'"),
    ("eval.shard_size", {**INSPECT, "eval__shard_size": 2.5}, "must be an integer, got 2.5"),
    (
        "eval.manifest",
        {**INSPECT, "eval__manifest": "m.jsonl"},
        "is made from the harness's samples in shards; remove it",
    ),
    (
        "eval.task",
        {**LM_EVAL, "eval__options": {}},
        "name the lm-eval task as FOLDER@TASK (the folder of its YAML files)",
    ),
    (
        "eval.task",
        {**LM_EVAL, "eval__task": "spoteval/harness/tasks/lm_eval@spoteval_tiny"},
        "spoteval/harness/tasks/lm_eval@spoteval_tiny: give the folder once, as FOLDER@TASK or as "
        "include_path, not both",
    ),
    (
        "eval.task",
        {**INSPECT, "eval__task": "evals/x@t"},
        "evals/x@t: write PATH.py@TASK (a file) or package.module@TASK (a module)",
    ),
    (
        "eval.requirements",
        {**INSPECT, "eval__requirements": []},
        "give a requirements file or a non-empty list",
    ),
    ("eval.exclude", {**INSPECT, "eval__exclude": "data/"}, "must be a list of strings, got 'data/'"),
    (
        "eval.samples",
        {**INSPECT, "eval__samples": [7, "7"]},
        "sample ids 7 and '7' map to the same key '7': rename one of them",
    ),
    (
        "eval.samples",
        {**LM_EVAL, "eval__samples": ["a"]},
        "lm-eval's sample ids are document indices (integers >= 0)",
    ),
    (
        "eval.samples",
        {**LM_EVAL, "eval__samples": 0},
        "must be >= 1 (the first N samples) or a list of ids, got 0",
    ),
    (
        "eval.task",
        {"eval__command": ["x"], "eval__task": "x"},
        "is read only with harness (the command runs as given)",
    ),
]


@pytest.mark.parametrize(("key", "changes", "message"), BAD_BLOCKS)
def test_bad_eval_blocks_are_one_line_naming_the_key(key: str, changes: dict[str, Any], message: str) -> None:
    assert rejects(STACK, key, **{**HARNESS, **changes}) == f"{key}: {message}"


@pytest.mark.parametrize(
    ("harness", "key", "message"),
    [
        (HarnessEval("inspect", "spoteval/harness/tasks/nope.py@x"), "eval.task",
         "task file spoteval/harness/tasks/nope.py does not exist"),
        (HarnessEval("inspect", "spoteval/harness/tasks/inspect_tiny.py@nope"), "eval.task",
         "spoteval/harness/tasks/inspect_tiny.py defines no task function 'nope'"),
        (HarnessEval("inspect", "../evals/mine.py@x"), "eval.task",
         f"../evals/mine.py leaves {REPO}: give a path inside it, or an absolute path"),
        (HarnessEval("lm-eval", "spoteval/harness/tasks/lm_eval@nope"), "eval.task",
         "lm-eval task 'nope' is not in spoteval/harness/tasks/lm_eval: no YAML file there defines it"),
        (HarnessEval("lm-eval", "tiny", options={"include_path": "/no/such/folder"}), "eval.task",
         "lm-eval task folder /no/such/folder does not exist"),
    ],
)  # fmt: skip
def test_a_task_that_does_not_exist_is_refused(harness: HarnessEval, key: str, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        resolved, bundle = _resolved(harness)
        check_task(resolved, bundle, SettingsError)
    assert str(info.value) == f"{key}: {message}"


def test_a_missing_task_stops_the_program_before_anything_is_declared() -> None:
    with pytest.raises(RenderError) as info:
        render(harness="inspect", task="spoteval/harness/tasks/inspect_tiny.py@nope", samples=INSPECT_IDS)
    assert str(info.value) == (
        "stack config spot-eval:eval.task: "
        "spoteval/harness/tasks/inspect_tiny.py defines no task function 'nope'"
    )
