"""The stack loader: a stack file's spot-eval keys and `pulumi stack output`, with a fake pulumi on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spoteval.config_reader import DocumentError
from spoteval.stack import (
    StackOutputError,
    is_stack_name,
    pulumi_stack_output,
    read_json,
    read_stack_document,
    stack_file,
    stack_settings,
)

REPO = Path(__file__).resolve().parent.parent


def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_stack_file_gives_its_spot_eval_keys_without_the_namespace() -> None:
    path = stack_file(REPO / "stacks", "aws-us-east-1")
    assert path == REPO / "stacks" / "Pulumi.aws-us-east-1.yaml"
    settings = stack_settings(read_stack_document(path))
    assert settings["provider"] == "aws"
    assert settings["workload"]["concurrency"] == settings["eval"]["concurrency"]
    assert not any(":" in key for key in settings)


def test_settings_of_documents_without_a_config_mapping_are_empty() -> None:
    assert stack_settings(None) == {}
    assert stack_settings({"config": ["x"]}) == {}
    assert stack_settings({"config": {"aws:region": "us-east-1", "spot-eval:run_id": "r1"}}) == {
        "run_id": "r1"
    }


def test_stack_names_stay_inside_the_stacks_directory() -> None:
    assert is_stack_name("aws-us-east-1")
    assert [is_stack_name(n) for n in ("", "../x", "a/b", "a\\b", ".hidden")] == [False] * 5


def test_a_missing_stack_file_is_a_document_error(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as info:
        read_stack_document(stack_file(tmp_path, "nope"))
    assert info.value.reason == "missing"


def test_saved_outputs_must_be_json(tmp_path: Path) -> None:
    path = tmp_path / "outputs.json"
    path.write_text('{"run_id": "r1"}')
    assert read_json(path) == {"run_id": "r1"}
    path.write_text("run_id: r1\n")
    with pytest.raises(DocumentError) as info:
        read_json(path)
    assert (info.value.reason, info.value.detail, info.value.line, info.value.column) == (
        "malformed",
        "Expecting value",
        1,
        1,
    )


def test_pulumi_stack_output_is_asked_for_json_of_the_named_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_pulumi(
        tmp_path,
        monkeypatch,
        '[ "$*" = "stack output --json --stack gpu-aws" ] || { echo "unexpected: $*" >&2; exit 3; }\n'
        'echo \'{"run_id": "r1", "node_ids": ["i-1"]}\'\n',
    )
    assert pulumi_stack_output("gpu-aws") == {"run_id": "r1", "node_ids": ["i-1"]}
    with pytest.raises(StackOutputError) as info:
        pulumi_stack_output("other")
    err = info.value
    assert (err.reason, err.returncode, err.stderr) == (
        "failed",
        3,
        "unexpected: stack output --json --stack other\n",
    )


def test_pulumi_stack_output_that_is_not_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pulumi(tmp_path, monkeypatch, "echo 'Current stack outputs (0):'\n")
    with pytest.raises(StackOutputError) as info:
        pulumi_stack_output("gpu-aws")
    assert info.value.reason == "not-json"


def test_no_pulumi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackOutputError) as info:
        pulumi_stack_output("gpu-aws")
    assert (info.value.reason, str(info.value)) == ("no-cli", "--stack gpu-aws: pulumi stack output: no-cli")
