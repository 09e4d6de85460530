"""GPUs, vCPUs and memory per instance type: what an offer's price buys and how many episodes it runs.

One table, keyed by (provider, instance type). The GPU count changes C (episodes in flight on one
node) when the workload states its concurrency per GPU, and so the price per episode; vCPUs and
memory are what the GCP Catalog prices a machine type by (per vCPU-hour + per GiB-hour + per GPU).

This table is a provider fact: it moves into `spoteval/providers.py` once that module exists. Add a
type here (with its documentation link) before ranking it; Nebius presets carry their GPU count in
their name (`1gpu-16vcpu-200gb`) and Runpod offers are a GPU type times the stack's `gpu_count`, so
neither needs a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

#: the date every row below was last checked against its source
CHECKED: Final = "2026-12-01"

_AWS_G6: Final = "https://aws.amazon.com/ec2/instance-types/g6/"
_AWS_G5: Final = "https://aws.amazon.com/ec2/instance-types/g5/"
_GCP_G2: Final = "https://cloud.google.com/compute/docs/accelerator-optimized-machines#g2-vms"
_AZ_T4: Final = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series"


@dataclass(frozen=True)
class InstanceShape:
    """One instance type: its GPUs (count and model, as the provider's price API names the model),
    vCPUs and memory, with the page they were read from."""

    gpus: int
    gpu: str
    vcpus: int
    memory_gib: float
    source: str
    checked: str = CHECKED


INSTANCE_TYPES: Final[Mapping[tuple[str, str], InstanceShape]] = {
    ("aws", "g6.xlarge"): InstanceShape(1, "nvidia-l4", 4, 16, _AWS_G6),
    ("aws", "g6.2xlarge"): InstanceShape(1, "nvidia-l4", 8, 32, _AWS_G6),
    ("aws", "g6.12xlarge"): InstanceShape(4, "nvidia-l4", 48, 192, _AWS_G6),
    ("aws", "g5.xlarge"): InstanceShape(1, "nvidia-a10g", 4, 16, _AWS_G5),
    ("gcp", "g2-standard-8"): InstanceShape(1, "nvidia-l4", 8, 32, _GCP_G2),
    ("gcp", "g2-standard-12"): InstanceShape(1, "nvidia-l4", 12, 48, _GCP_G2),
    ("gcp", "g2-standard-24"): InstanceShape(2, "nvidia-l4", 24, 96, _GCP_G2),
    ("azure", "Standard_NC4as_T4_v3"): InstanceShape(1, "nvidia-t4", 4, 28, _AZ_T4),
    ("azure", "Standard_NC8as_T4_v3"): InstanceShape(1, "nvidia-t4", 8, 56, _AZ_T4),
    ("azure", "Standard_NC16as_T4_v3"): InstanceShape(1, "nvidia-t4", 16, 110, _AZ_T4),
    ("azure", "Standard_NC64as_T4_v3"): InstanceShape(4, "nvidia-t4", 64, 440, _AZ_T4),
}


def shape_of(provider: str, instance_type: str) -> InstanceShape | None:
    """The row for an instance type, or None when the table does not know it."""
    return INSTANCE_TYPES.get((provider, instance_type))


def gpus_of(provider: str, instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs on one node of this offer; None when unknown.

    Runpod: the stack's `node.gpu_count` (its instance type is a GPU type). Nebius: the preset's
    leading count. Others: the table.
    """
    if provider == "runpod":
        return stack_gpu_count or 1
    if provider == "nebius":
        from spoteval.clouds.nebius import gpus_of as nebius_gpus

        return nebius_gpus(instance_type)
    shape = shape_of(provider, instance_type)
    return None if shape is None else shape.gpus
