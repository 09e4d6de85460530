"""GPUs, vCPUs and memory per instance type: what an offer's price buys and how many episodes it runs.

The shapes are facts of each provider's module (spoteval/providers/, `INSTANCE_TYPES`, with the page
each was read from and the date). The GPU count changes C (episodes in flight on one node) when the
workload states its concurrency per GPU, and so the price per episode; vCPUs and memory are what the
GCP Catalog prices a machine type by (per vCPU-hour + per GiB-hour + per GPU). Add a type to its
provider's table (with its documentation link) before ranking it; Nebius presets carry their GPU
count in their name (`1gpu-16vcpu-200gb`) and Runpod offers are a GPU type times the stack's
`gpu_count`, so neither needs a row.
"""

from __future__ import annotations

from spoteval.providers import InstanceShape, provider

__all__ = ["InstanceShape", "gpus_of", "shape_of"]


def shape_of(key: str, instance_type: str) -> InstanceShape | None:
    """The row for an instance type, or None when the provider's table does not know it."""
    return provider(key).INSTANCE_TYPES.get(instance_type)


def gpus_of(key: str, instance_type: str, stack_gpu_count: int | None = None) -> int | None:
    """GPUs on one node of this offer, as the provider counts them; None when unknown."""
    return provider(key).gpus_of(instance_type, stack_gpu_count)
