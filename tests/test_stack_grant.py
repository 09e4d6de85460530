"""One grant per stack: `spot-eval:grant` is what `plan`, the placement, the offers and the report read;
a stack's workload block inherits it and may not carry its own.

Before: `plan` read `spot-eval:grant` and the placement `spot-eval:workload.grant`, so a cap of
`cheap` failed `plan` and passed the placement, and caps of 0.30 and 0.90 gave two answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.settings import SettingsError, parse
from scripts import placement as placement_cli
from scripts import plan as plan_cli
from scripts import report as report_cli
from spoteval.offers.build import read_stack
from spoteval.placement import PlacementError
from spoteval.placement.inputs import SECOND_GRANT
from spoteval.stack import stack_settings

STACKS = Path(__file__).resolve().parent.parent / "stacks"
BOTH_KEYS = ("spot-eval:workload.grant", "spot-eval:grant")


def copy_stack(tmp_path: Path, name: str, change: Any) -> Path:
    """stacks/Pulumi.NAME.yaml copied into tmp_path/stacks with `change(config)` applied."""
    doc = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())
    change(doc["config"])
    folder = tmp_path / "stacks"
    folder.mkdir(exist_ok=True)
    (folder / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))
    return folder


def with_second_grant(config: dict[str, Any]) -> None:
    config["spot-eval:workload"]["grant"] = {"price_cap": 0.3, "budget": 40}


def test_every_stack_of_the_repository_has_one_grant() -> None:
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text())["config"]
        assert "spot-eval:grant" in config, path
        assert "grant" not in (config.get("spot-eval:workload") or {}), path


@pytest.mark.parametrize("stack", ["aws-us-east-1", "runpod-eu"])
def test_a_second_grant_is_refused_everywhere_with_one_line_naming_both_keys(
    stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = copy_stack(tmp_path, stack, with_second_grant)
    assert placement_cli.main(["--stack", stack, "--stacks-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: spot-eval:workload.grant: {SECOND_GRANT}\n"
    assert all(key in err for key in BOTH_KEYS)
    assert plan_cli.main(["--stack", stack, "--stacks-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: stack config spot-eval:workload.grant: {SECOND_GRANT}\n"
    with pytest.raises(PlacementError, match=r"spot-eval:workload\.grant"):
        read_stack(stack, folder)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"bucket_url": f"file://{tmp_path}/store", "run_id": "r1"}))
    assert report_cli.main(["--stack", stack, "--stacks-dir", str(folder), "--outputs", str(outputs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(key in err for key in BOTH_KEYS)


def test_the_placement_reads_the_grant_plan_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def cap(value: Any) -> Any:
        def change(config: dict[str, Any]) -> None:
            config["spot-eval:grant"]["price_cap"] = value

        return change

    # a cap that is not a number: both refuse it, naming the stack's grant
    folder = copy_stack(tmp_path, "aws-us-east-1", cap("cheap"))
    assert placement_cli.main(["--stack", "aws-us-east-1", "--stacks-dir", str(folder)]) == 2
    assert capsys.readouterr().err == "error: spot-eval:grant.price_cap: must be a number, got 'cheap'\n"
    assert plan_cli.main(["--stack", "aws-us-east-1", "--stacks-dir", str(folder)]) == 2
    assert "spot-eval:grant.price_cap" in capsys.readouterr().err
    # a cap below spot's 0.42 and on-demand's 0.80: the placement finds nothing within it
    folder = copy_stack(tmp_path, "aws-us-east-1", cap(0.3))
    assert placement_cli.main(["--stack", "aws-us-east-1", "--stacks-dir", str(folder), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["grant"]["price_cap"] == 0.3
    assert (
        doc["options"]["spot"]["why_not"] == "its price 0.42 per node-hour is above the grant's price_cap 0.3"
    )


def test_the_settings_workload_inherits_the_stacks_grant() -> None:
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        raw = stack_settings(yaml.safe_load(path.read_text()))
        settings = parse(raw, stack=path.stem)
        assert settings.workload is not None and settings.workload.grant == settings.grant
        with pytest.raises(SettingsError) as info:
            parse({**raw, "workload": {**raw["workload"], "grant": {"budget": 1}}})
        assert info.value.key == "workload.grant" and str(info.value) == f"workload.grant: {SECOND_GRANT}"
