"""Errors that name the right thing, one line each, exit 2; options that do not apply are refused.

Before: `report --stack nope` and `measure_restart --stack nope` said "the pulumi CLI is not on PATH"
(operate: `stack file stacks/Pulumi.nope.yaml: missing`); a plain-http S3 endpoint gave `... HTTP
error: builder error`; an empty workload file gave "got NoneType"; malformed YAML in `plan` had no
line number; `--offer-trace`, `--concurrency-per` without `--offers`, and `report --workload` with
`episode_minutes: 0` were silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from scripts import measure_restart, operate, placement, plan, report
from spoteval.stack import known_stacks
from spoteval.store import Store, StoreError
from tests import servers

STACKS = Path(__file__).resolve().parent.parent / "stacks"
Main = Callable[[Sequence[str]], int]

COMMANDS: list[tuple[str, Main, str]] = [
    ("plan", plan.main, "error: "),
    ("placement", placement.main, "error: "),
    ("offers", lambda argv: placement.main(["--offers", *argv]), "error: "),
    ("report", report.main, "report: "),
    ("measure_restart", measure_restart.main, "measure_restart: "),
    ("operate", operate.main, "operate: "),
    ("operate status", lambda argv: operate.main(["status", *argv]), "operate: "),
]


@pytest.mark.parametrize(("name", "main", "prefix"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_names_a_missing_stack_the_same_way(
    name: str, main: Main, prefix: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(STACKS.parent)
    monkeypatch.setenv("PATH", "/nonexistent")  # no pulumi: the stack is named before pulumi is asked
    assert main(["--stack", "nope"]) == 2
    listed = ", ".join(known_stacks(STACKS))
    assert capsys.readouterr().err == f"{prefix}stack 'nope': no stacks/Pulumi.nope.yaml (stacks: {listed})\n"


def test_a_plain_http_endpoint_names_the_setting_that_allows_it(
    moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    import boto3

    boto3.client("s3", endpoint_url=moto_server.url).create_bucket(Bucket="plain-http-bucket")
    with pytest.raises(StoreError) as info:
        Store("s3://plain-http-bucket/evals").list("runs/")
    message = str(info.value)
    assert message.endswith(
        f"(the endpoint {moto_server.url} is plain http: set AWS_ALLOW_HTTP=true, or the store option "
        "allow_http: true)"
    )
    assert "\n" not in message
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    assert Store("s3://plain-http-bucket/evals").list("runs/") == []


def test_a_missing_bucket_is_named_by_the_services_code_not_its_xml(
    moto_server: servers.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in moto_server.env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(StoreError) as info:
        Store("s3://no-such-bucket/evals").list("runs/")
    message = str(info.value)
    assert message.startswith("list s3://no-such-bucket/evals/runs/: Generic S3 error: ")
    assert message.endswith(
        "Server returned non-2xx status code: 404 Not Found: NoSuchBucket "
        "(The specified bucket does not exist)"
    )
    assert "<" not in message and "\n" not in message


def test_empty_and_malformed_files_name_the_file_and_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert placement.main([str(empty)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {empty}: the workload file is empty (it must be a mapping of keys)\n"
    )
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.broken.yaml").write_text(
        "config:\n  spot-eval:provider: aws\n  spot-eval:node: {a: [1\n"
    )
    assert plan.main(["--stack", "broken", "--stacks-dir", str(stacks)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {stacks / 'Pulumi.broken.yaml'}: malformed YAML at line 4 column 1: ")
    assert err.count("\n") == 1
    (stacks / "Pulumi.blank.yaml").write_text("")
    assert plan.main(["--stack", "blank", "--stacks-dir", str(stacks)]) == 2
    assert capsys.readouterr().err == (
        f"error: {stacks / 'Pulumi.blank.yaml'}: the stack file is empty (it must be a mapping of keys)\n"
    )


@pytest.mark.parametrize(
    ("main", "argv", "line"),
    [
        (
            placement.main,
            ["--offer-trace", "aws:us-east-1:g5.xlarge=trace.json"],
            "error: --offer-trace: traces one offer of --offers: give --offers with it (or --trace FILE)",
        ),
        (
            placement.main,
            ["--concurrency-per", "gpu"],
            "error: --concurrency-per: applies to the offers' instance types: give --offers with it "
            "(or concurrency_per in the workload)",
        ),
        (
            placement.main,
            ["--store", "file:///tmp/x"],
            "error: --store: is the store of --from-run RUN_ID: give --from-run with it",
        ),
        (
            placement.main,
            ["--offers", "--stack", "aws-us-east-1", "--trace", "t.json"],
            "error: --trace: with --offers a trace belongs to one offer: --offer-trace "
            "PROVIDER:REGION:TYPE=FILE",
        ),
        (
            report.main,
            ["--store", "file:///tmp/x", "--run", "r1", "--outputs", "o.json"],
            "report: --outputs gives a stack's outputs: give --stack NAME with it",
        ),
        (
            measure_restart.main,
            ["--outputs", "o.json", "--fis-template", "EXT1"],
            "measure_restart: --fis-template is the experiment of --mode preempt: give --mode "
            "preempt with it",
        ),
        (
            measure_restart.main,
            ["--outputs", "o.json", "--ready-timeout", "60"],
            "measure_restart: --ready-timeout is how long --wait-ready waits: give --wait-ready with it",
        ),
        (
            measure_restart.main,
            ["--outputs", "o.json", "--plot", "p.png"],
            "measure_restart: --plot draws the measured cycles: give --yes (without it nothing is measured)",
        ),
        (
            operate.main,
            ["--outputs", "o.json", "--json"],
            "operate: --json prints the statuses: use it with `status`",
        ),
        (
            operate.main,
            ["status", "--outputs", "o.json", "--once"],
            "operate: --once checks and acts once: `status` only reads, give one or the other",
        ),
    ],
)
def test_an_option_that_does_not_apply_is_refused_with_one_line(
    main: Main,
    argv: list[str],
    line: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(STACKS.parent)
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"
