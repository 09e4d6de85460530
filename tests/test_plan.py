"""`python -m scripts.plan`: what a stack declares, printed for a reviewer, without a cloud account."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from components.mocks import STACKS_DIR
from scripts.plan import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_plan_prints_the_tree_with_holds_key_properties_and_outputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--stack", "aws-us-east-1", "--now", "2026-12-01T09:00:00Z"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "stack aws-us-east-1: 43 resources declared"
    assert "  spot-eval:aws:Store  qwen7b-drill-aws" in lines
    assert "    aws:s3/bucket:Bucket  qwen7b-drill-aws-results  [protect, retain-on-delete]" in lines
    cache = lines.index("  spot-eval:aws:WeightsCache  qwen7b-drill-aws")
    volume = "    aws:ebs/volume:Volume  qwen7b-drill-aws-weights-cache  [protect, retain-on-delete]"
    assert lines[cache + 1] == volume
    market = next(line for line in lines if "instanceMarketOptions:" in line)
    assert '"spotInstanceType": "persistent"' in market and '"maxPrice": "0.9000"' in market
    assert "        scheduleExpression: at(2026-12-02T15:00:00)" in lines
    assert any(line.strip().startswith("userData: <script: ") for line in lines)
    assert "outputs:" in lines
    assert "  market: spot" in lines and "  address_kind: ephemeral" in lines


def test_plan_json_lists_every_resource_with_its_parent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "k8s-gke", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["stack"] == "k8s-gke"
    by_type = {r["type"]: r for r in plan["resources"]}
    job = by_type["kubernetes:batch/v1:Job"]
    assert job["parent"] == "qwen7b-drill-gke"
    assert job["properties"]["spec.podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    assert by_type["kubernetes:core/v1:PersistentVolumeClaim"]["protect"] is True
    assert plan["outputs"]["provider"] == "k8s"


def test_unknown_stack_is_one_line_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "aws-eu-west-9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: stack 'aws-eu-west-9'") and "aws-us-east-1" in err


def test_config_the_program_refuses_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load((STACKS_DIR / "Pulumi.gcp-us-central1.yaml").read_text())
    data["config"]["spot-eval:region"] = "europe-west4"
    data["config"]["spot-eval:zone"] = "europe-west4-a"
    (tmp_path / "Pulumi.gcp-elsewhere.yaml").write_text(yaml.safe_dump(data))
    shutil.copytree(STACKS_DIR / "manifests", tmp_path / "manifests")
    assert main(["--stack", "gcp-elsewhere", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: stack config spot-eval:region: region 'europe-west4' is outside the grant")


def test_bad_clock_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--stack", "aws-us-east-1", "--now", "2026-12-01 09:00"]) == 2
    assert "--now" in capsys.readouterr().err
