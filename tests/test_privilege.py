"""Least privilege, per stack: the node's permissions on the result bucket, parsed from what each stack
declares under Pulumi's mock engine and compared statement by statement (components/privilege.py).

The node creates objects only under its run's prefix (create-only where the provider enforces it),
reads the agent bundle from a prefix it cannot write, and deletes nothing.
"""

from __future__ import annotations

import ast
import functools
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from components.bundle import MANIFEST_KEY, OBJECT_KEY
from components.mocks import Rendered, read_stack_config, render_stack, stack_files, stack_name
from components.privilege import CODE_PREFIX, run_prefix
from spoteval.harness.progress import ShardKeys
from spoteval.provider_rules import PERMISSION_FACTS
from spoteval.record import RunLayout
from tests.test_stacks import NOW, pod_spec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parent.parent
STACKS = {stack_name(p): p for p in stack_files()}
PROVIDER_OF = {name: read_stack_config(path)["spot-eval:provider"] for name, path in STACKS.items()}
STACK_OF = {provider: name for name, provider in PROVIDER_OF.items()}


@functools.cache
def rendered(provider: str) -> Rendered:
    return render_stack(STACKS[STACK_OF[provider]], now=NOW)


def run_id(provider: str) -> str:
    value: str = read_stack_config(STACKS[STACK_OF[provider]])["spot-eval:run_id"]
    return value


# --- AWS ------------------------------------------------------------------------------------------


def test_aws_node_role_statements_exactly() -> None:
    r = rendered("aws")
    arn = "arn:aws:mock:::" + r.one("aws:s3/bucket:Bucket").name
    run = f"runs/{run_id('aws')}/"
    policy = next(d for d in r.of_type("aws:iam/rolePolicy:RolePolicy") if d.name.endswith("-bucket"))
    document = json.loads(policy.inputs["policy"])
    assert document["Version"] == "2012-10-17"
    assert document["Statement"] == [
        {
            "Sid": "ListOwnRun",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [arn],
            "Condition": {"StringLike": {"s3:prefix": [f"{run}*"]}},
        },
        {
            "Sid": "ReadCodeAndOwnRun",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": [f"{arn}/spot-eval/*", f"{arn}/{run}*"],
        },
        {
            "Sid": "CreateInOwnRun",
            "Effect": "Allow",
            "Action": ["s3:PutObject"],
            "Resource": [f"{arn}/{run}*"],
        },
        {
            "Sid": "ReadSpotPrice",
            "Effect": "Allow",
            "Action": ["ec2:DescribeSpotPriceHistory"],
            "Resource": ["*"],
        },
        {
            "Sid": "PublishAgentMetrics",
            "Effect": "Allow",
            "Action": ["cloudwatch:PutMetricData"],
            "Resource": ["*"],
            "Condition": {"StringEquals": {"cloudwatch:namespace": "SpotEval/Agent"}},
        },
    ]
    # the node's role has this one policy, and nothing attached
    assert len(r.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")) == 0
    node_roles = [d for d in r.of_type("aws:iam/rolePolicy:RolePolicy") if d.name.endswith("-bucket")]
    assert len(node_roles) == 1


def test_aws_bucket_policy_makes_the_record_create_only() -> None:
    r = rendered("aws")
    arn = "arn:aws:mock:::" + r.one("aws:s3/bucket:Bucket").name
    document = json.loads(r.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    assert document["Statement"] == [
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [arn, f"{arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        {
            "Sid": "RecordIsCreateOnly",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:PutObject",
            "Resource": f"{arn}/runs/*",
            "Condition": {
                "Null": {"s3:if-none-match": "true"},
                "Bool": {"s3:ObjectCreationOperation": "true"},
            },
        },
    ]


# --- GCP ------------------------------------------------------------------------------------------


def test_gcp_bindings_are_conditioned_on_the_object_name() -> None:
    r = rendered("gcp")
    bucket = r.one("gcp:storage/bucket:Bucket").name
    objects = f"projects/_/buckets/{bucket}/objects/"
    run = f"runs/{run_id('gcp')}/"
    members = {m.inputs["role"]: m.inputs for m in r.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")}
    assert set(members) == {"roles/storage.objectViewer", "roles/storage.objectCreator"}
    assert members["roles/storage.objectCreator"]["condition"] == {
        "title": "own run only",
        "expression": f'resource.name.startsWith("{objects}{run}")',
    }
    assert members["roles/storage.objectViewer"]["condition"] == {
        "title": "code and own run",
        "expression": 'resource.type == "storage.googleapis.com/Bucket"'
        f' || resource.name.startsWith("{objects}spot-eval/")'
        f' || resource.name.startsWith("{objects}{run}")',
    }
    # no project-wide grant, no admin role (objectAdmin would add delete and overwrite)
    assert not r.of_type("gcp:projects/iAMMember:IAMMember")
    assert not r.of_type("gcp:storage/bucketIAMBinding:BucketIAMBinding")


# --- Azure ----------------------------------------------------------------------------------------


def test_azure_role_and_its_assignment_condition_exactly() -> None:
    r = rendered("azure")
    run = f"runs/{run_id('azure')}/"
    blobs = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
    role = r.one("azure-native:authorization:RoleDefinition").inputs
    assert role["permissions"] == [
        {
            "actions": ["Microsoft.Storage/storageAccounts/blobServices/containers/read"],
            "dataActions": [f"{blobs}/read", f"{blobs}/write", f"{blobs}/add/action"],
        }
    ]
    assignment = r.one("azure-native:authorization:RoleAssignment").inputs
    assert assignment["conditionVersion"] == "2.0"
    path = f"@Resource[{blobs}:path]"
    assert assignment["condition"] == (
        f"((!(ActionMatches{{'{blobs}/write'}}) AND !(ActionMatches{{'{blobs}/add/action'}}))"
        f" OR ({path} StringStartsWith '{run}'))"
        f" AND ((!(ActionMatches{{'{blobs}/read'}} AND NOT SubOperationMatches{{'Blob.List'}}))"
        f" OR ({path} StringStartsWith 'spot-eval/' OR {path} StringStartsWith '{run}'))"
        f" AND ((!(ActionMatches{{'{blobs}/read'}} AND SubOperationMatches{{'Blob.List'}}))"
        f" OR (@Request[{blobs}:prefix] StringStartsWith '{run}'))"
    )


# --- Kubernetes -----------------------------------------------------------------------------------


def test_kubernetes_pods_get_no_cluster_permissions_and_read_their_code_read_only() -> None:
    r = rendered("k8s")
    kinds = {d.type for d in r.resources}
    assert not {t for t in kinds if "rbac.authorization.k8s.io" in t}
    job = r.one("kubernetes:batch/v1:Job")
    mounts: list[dict[str, Any]] = pod_spec(job)["containers"][0]["volumeMounts"]
    config = next(m for m in mounts if m["name"] == "agent")
    assert config["readOnly"] is True and config["mountPath"] == "/etc/spot-eval"


def test_every_fact_behind_these_rules_has_its_page_and_date() -> None:
    assert set(PERMISSION_FACTS) == {
        "aws_create_only",
        "aws_idle_alarm_missing_data",
        "aws_alarm_ec2_stop",
        "aws_user_stop_disables_request",
        "aws_cancel_request_keeps_instance",
        "gcp_budget_project_number",
        "gcs_condition_resource_name",
        "gcs_object_creator_no_overwrite",
        "azure_abac_blob_path",
        "azure_no_provider_stop",
    }
    for source in PERMISSION_FACTS.values():
        assert source.url.startswith("https://") and source.checked == "2026-12-01" and source.note


# --- what the agent does fits these permissions ---------------------------------------------------


def test_everything_the_node_writes_is_created_under_its_run_prefix() -> None:
    layout = RunLayout("r1")
    harness = ShardKeys("r1", "e1")
    keys = [
        layout.manifest,
        layout.result("e1"),
        layout.attempt("e1", 1),
        layout.event(datetime(2026, 12, 1, tzinfo=timezone.utc), "i-0abc", 1),
        harness.sample("s1"),
        harness.log("t1", "log.txt"),
    ]
    assert [k for k in keys if not k.startswith(run_prefix("r1"))] == []
    assert OBJECT_KEY.startswith(CODE_PREFIX) and MANIFEST_KEY.startswith(CODE_PREFIX)
    assert not run_prefix("r1").startswith(CODE_PREFIX)
    # no code that runs on the node overwrites: every store write is `put_new` (create-only)
    overwrites = []
    for path in sorted((ROOT / "spoteval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "put"
                and ast.unparse(node.func.value).endswith("store")
                and ast.unparse(node.func.value) != "obstore"  # Store itself (spoteval/store.py)
            ):
                overwrites.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert overwrites == []
