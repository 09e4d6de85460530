"""The agent bundle (and the run's manifest) as objects in an S3-compatible bucket that is not AWS's:
Nebius Object Storage, or the bucket a Runpod stack names. Declared with `pulumi-aws`'s S3 objects
through an explicit provider pointed at that endpoint; its credentials are the user's, from the
standard environment of `pulumi up` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` of that storage).
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.bundle import MANIFEST_KEY, OBJECT_KEY


def s3_compatible_provider(name: str, endpoint: str, region: str) -> aws.Provider:
    return aws.Provider(
        name,
        region=region,
        endpoints=[aws.ProviderEndpointArgs(s3=endpoint)],
        s3_use_path_style=True,
        skip_credentials_validation=True,
        skip_metadata_api_check=True,
        skip_region_validation=True,
        skip_requesting_account_id=True,
    )


def upload(
    name: str,
    bucket: pulumi.Input[str],
    prefix: str,
    bundle_path: Path,
    manifest_path: Path | None,
    *,
    opts: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    """The bundle (and manifest) under `prefix` in `bucket`, where the node's startup fetches them."""
    head = prefix.strip("/") + "/" if prefix.strip("/") else ""
    objects: list[pulumi.Resource] = [
        aws.s3.BucketObjectv2(
            f"{name}-agent-bundle",
            bucket=bucket,
            key=head + OBJECT_KEY,
            source=pulumi.FileAsset(str(bundle_path)),
            content_type="application/zip",
            opts=opts,
        )
    ]
    if manifest_path is not None:
        objects.append(
            aws.s3.BucketObjectv2(
                f"{name}-manifest",
                bucket=bucket,
                key=head + MANIFEST_KEY,
                source=pulumi.FileAsset(str(manifest_path)),
                content_type="application/x-ndjson",
                opts=opts,
            )
        )
    return objects
