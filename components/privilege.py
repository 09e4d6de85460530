"""What the node may do with the result bucket, per provider: pure functions that render the policy
documents, IAM conditions and role-assignment conditions the stacks declare (components/aws.py,
gcp.py, azure.py wire them in; tests/test_privilege.py parses what they declare).

The node needs, and gets, only this:

- write (create) objects under its run's prefix `runs/RUN_ID/` (RunLayout.prefix), create-only
  where the provider can enforce it: every write the agent makes is `Store.put_new` (S3
  `If-None-Match: *`, GCS `ifGenerationMatch=0`, Azure `If-None-Match: *`);
- read objects under its run's prefix, and the agent bundle and staged manifest under `spot-eval/`
  (components/bundle.py), which it cannot write: what every boot runs comes from a place the node
  cannot change;
- list its run's prefix;
- no delete, no overwrite where the provider can refuse one, nothing in other runs' prefixes.

The provider facts these rely on (condition keys, attribute names, role contents) are in
spoteval/provider_rules.py (`PERMISSION_FACTS`), each with its documentation page.
"""

from __future__ import annotations

from typing import Final

from components.bundle import MANIFEST_KEY, OBJECT_KEY
from spoteval.record import RunLayout

#: the node's read-only prefix: the agent bundle and the staged manifest live here
CODE_PREFIX: Final = "spot-eval/"
assert OBJECT_KEY.startswith(CODE_PREFIX) and MANIFEST_KEY.startswith(CODE_PREFIX)
#: the prefix of every run's record; the bucket refuses writes there that could overwrite
RECORD_PREFIX: Final = "runs/"
#: the CloudWatch namespace of the agent's own metrics (the idle alarm's signal, aws_rules.py)
AWS_METRIC_NAMESPACE: Final = "SpotEval/Agent"


def run_prefix(run_id: str) -> str:
    return RunLayout(run_id).prefix


# --- AWS: the node role's policy and the bucket policy's create-only rule -------------------------


def aws_node_statements(bucket_arn: str, run_id: str) -> list[dict[str, object]]:
    """The node role's statements on the bucket, the spot price and its own metrics. No delete:
    versioning keeps every object's history and only the deployer may remove versions."""
    prefix = run_prefix(run_id)
    return [
        {
            "Sid": "ListOwnRun",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": [bucket_arn],
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
        },
        {
            "Sid": "ReadCodeAndOwnRun",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": [f"{bucket_arn}/{CODE_PREFIX}*", f"{bucket_arn}/{prefix}*"],
        },
        {
            "Sid": "CreateInOwnRun",
            "Effect": "Allow",
            "Action": ["s3:PutObject"],
            "Resource": [f"{bucket_arn}/{prefix}*"],
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
            "Condition": {"StringEquals": {"cloudwatch:namespace": AWS_METRIC_NAMESPACE}},
        },
    ]


def aws_create_only_statement(bucket_arn: str) -> dict[str, object]:
    """Bucket policy: in the run record, an object upload without `If-None-Match` is refused, for
    every principal (multipart parts, which cannot carry the header, stay allowed; the completion
    must carry it). Copies into the record fail too, which nothing here does."""
    return {
        "Sid": "RecordIsCreateOnly",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:PutObject",
        "Resource": f"{bucket_arn}/{RECORD_PREFIX}*",
        "Condition": {
            "Null": {"s3:if-none-match": "true"},
            "Bool": {"s3:ObjectCreationOperation": "true"},
        },
    }


# --- GCP: conditional bucket role bindings --------------------------------------------------------

#: GCS resource names of objects in IAM conditions: projects/_/buckets/BUCKET/objects/NAME
_GCS_OBJECTS: Final = "projects/_/buckets/{bucket}/objects/"
_GCS_BUCKET_TYPE: Final = "storage.googleapis.com/Bucket"


#: the title of each role's condition
GCS_CONDITION_TITLES: Final = {
    "roles/storage.objectCreator": "own run only",
    "roles/storage.objectViewer": "code and own run",
}


def gcs_condition(bucket: str, role: str, run_id: str) -> str:
    """The CEL expression of a role's binding. The creator role has no overwrite (replacing an
    object needs storage.objects.delete, which it lacks) and creates only under the run's prefix;
    the viewer reads the bundle and the run's prefix, and may list the bucket (GCS checks a listing
    against the bucket, not a prefix, so a condition cannot narrow the listing)."""
    objects = _GCS_OBJECTS.format(bucket=bucket)
    prefix = run_prefix(run_id)
    if role == "roles/storage.objectCreator":
        return f'resource.name.startsWith("{objects}{prefix}")'
    if role == "roles/storage.objectViewer":
        return (
            f'resource.type == "{_GCS_BUCKET_TYPE}"'
            f' || resource.name.startsWith("{objects}{CODE_PREFIX}")'
            f' || resource.name.startsWith("{objects}{prefix}")'
        )
    raise ValueError(f"no condition for role {role!r}")


# --- Azure: the data actions of the node's role and the assignment's condition ------------------

_BLOBS: Final = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
AZURE_BLOB_READ: Final = f"{_BLOBS}/read"
AZURE_BLOB_WRITE: Final = f"{_BLOBS}/write"
AZURE_BLOB_ADD: Final = f"{_BLOBS}/add/action"
#: blob data actions of the node's role: read, write, add; no delete, no version delete
AZURE_BLOB_DATA_ACTIONS: Final = (AZURE_BLOB_READ, AZURE_BLOB_WRITE, AZURE_BLOB_ADD)
_PATH: Final = f"@Resource[{_BLOBS}:path]"
_LIST_PREFIX: Final = f"@Request[{_BLOBS}:prefix]"
AZURE_CONDITION_VERSION: Final = "2.0"


def azure_blob_condition(run_id: str) -> str:
    """The role assignment's condition (Azure ABAC): writes only under the run's prefix, reads of
    the code prefix and the run's prefix, listings of the run's prefix. Azure has no condition on
    `If-None-Match`: an overwrite by the node is possible, and blob versioning keeps the version it
    replaced (the node cannot delete versions)."""
    prefix = run_prefix(run_id)
    write = (
        f"((!(ActionMatches{{'{AZURE_BLOB_WRITE}'}}) AND !(ActionMatches{{'{AZURE_BLOB_ADD}'}}))"
        f" OR ({_PATH} StringStartsWith '{prefix}'))"
    )
    read = (
        f"((!(ActionMatches{{'{AZURE_BLOB_READ}'}} AND NOT SubOperationMatches{{'Blob.List'}}))"
        f" OR ({_PATH} StringStartsWith '{CODE_PREFIX}' OR {_PATH} StringStartsWith '{prefix}'))"
    )
    listing = (
        f"((!(ActionMatches{{'{AZURE_BLOB_READ}'}} AND SubOperationMatches{{'Blob.List'}}))"
        f" OR ({_LIST_PREFIX} StringStartsWith '{prefix}'))"
    )
    return f"{write} AND {read} AND {listing}"
