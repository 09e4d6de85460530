"""Kubernetes: the model server (Deployment + Service, weights cache on a protected PVC) and the
episodes (an Indexed Job of node agents) on spot nodes of a managed cluster. The result bucket is
the one named by `k8s.bucket_url` (this program makes no bucket); the pods reach it with the
workload identity given by `k8s.service_account_annotations`.

Preemptions never count as failures: the Job's pod failure policy ignores pods that fail with the
`DisruptionTarget` condition, and each pod's grace period fits the flavour's notice.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import apps, batch, core, meta

from components import pool_stop
from components.base import BuildContext, StackOutputs, child, held
from components.holds import exclusive
from components.settings import BUCKET_URL, CommonKeyRules, Settings, SettingsError, SettingsReader
from components.startup import (
    CONTAINER_PYTHON,
    agent_config,
    harness_install,
    k8s_agent_command,
    server_command,
    stop_timeout_s,
)
from spoteval.agent import exits
from spoteval.providers import K8S_FLAVOURS, K8sFlavour

CONFIG_DIR: Final = "/etc/spot-eval"
CACHE_MOUNT: Final = "/cache"
#: The agent's spool (its config's default `spool_dir`), on a volume that outlives the pod: a result
#: finished during a store outage, or a notice the store could not take, is uploaded by the next
#: pod of the same Job index. Each index has its own folder on the claim.
SPOOL_MOUNT: Final = "/var/lib/spot-eval/spool"
SPOOL_GB: Final = 1
#: a ConfigMap holds at most 1 MiB; keep a margin for keys and metadata
CONFIG_MAP_LIMIT: Final = 1_000_000
#: agent exit codes that fail the whole Job: bad input, and a run whose every episode was a harness
#: error (spoteval/agent/exits.py). Every other
#: failure (1, or 75 "store unreachable": an identity not yet usable at pod start) is retried and
#: counted against backoffLimit.
FAIL_JOB_EXIT_CODES: Final = sorted(exits.PERMANENT)
#: `pulumi up` does not wait for a workload to become ready or complete: a run takes hours, the
#: provider's await (a Job's completion, a Deployment's readiness) would fail the update after its
#: 10-minute default. The run's progress is the run record's (`python -m scripts.report`).
SKIP_AWAIT: Final = {"pulumi.com/skipAwait": "true"}

# --- the stack config: rules for the common keys, the `k8s:` block -----------------------------

SETTINGS_KEYS: Final = frozenset(
    {
        "flavour",
        "namespace",
        "create_namespace",
        "bucket_url",
        "context",
        "storage_class",
        "service_account_annotations",
        "node_selector",
        "shared_spool_class",
    }
)
#: the keys every stack has, on Kubernetes: the model server runs from `server.image`
COMMON_RULES: Final = CommonKeyRules(server_image=True)
_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class K8sSettings:
    flavour: str
    namespace: str
    create_namespace: bool
    bucket_url: str
    context: str | None
    storage_class: str | None
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    #: a storage class offering ReadWriteMany: the agents of a pool share one spool claim of it
    shared_spool_class: str | None = None

    @property
    def notice_s(self) -> int:
        """What a pod gets between SIGTERM and SIGKILL when its spot node goes away."""
        return K8S_FLAVOURS[self.flavour].notice_s


def parse_settings(block: SettingsReader) -> K8sSettings:
    block.reject_unknown(SETTINGS_KEYS)
    flavour = block.choice("flavour", tuple(K8S_FLAVOURS))
    namespace = block.string("namespace", "spot-eval")
    if not _NAME.match(namespace):
        raise SettingsError("k8s.namespace", f"{namespace!r} is not a Kubernetes namespace name")
    bucket_url = block.string("bucket_url")
    if not BUCKET_URL.match(bucket_url):
        raise SettingsError(
            "k8s.bucket_url", f"must be s3://, gs:// or az:// BUCKET[/PREFIX], got {bucket_url!r}"
        )
    selector = block.string_map("node_selector")
    if flavour == "nebius" and not selector:
        raise SettingsError(
            "k8s.node_selector",
            "is required for nebius (labels of its preemptible node groups are not documented)",
        )
    return K8sSettings(
        flavour=flavour,
        namespace=namespace,
        create_namespace=block.boolean("create_namespace", True),
        bucket_url=bucket_url.rstrip("/"),
        context=block.opt_string("context"),
        storage_class=block.opt_string("storage_class"),
        service_account_annotations=block.string_map("service_account_annotations"),
        node_selector=selector,
        shared_spool_class=block.opt_string("shared_spool_class"),
    )


def own(settings: Settings) -> K8sSettings:
    return settings.block_of(K8sSettings)


def provider(settings: Settings) -> k8s.Provider:
    """The stack's one Kubernetes provider: the kubeconfig context named in the stack, else the current."""
    return k8s.Provider(
        f"{settings.run_id}-k8s", context=own(settings).context, namespace=own(settings).namespace
    )


def _labels(settings: Settings, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "spot-eval",
        "app.kubernetes.io/instance": settings.run_id,
        "app.kubernetes.io/component": component,
    }


def _placement(settings: Settings, flavour: K8sFlavour, *, gpu: bool) -> dict[str, object]:
    """node_selector, tolerations and affinity that put a pod on the market's nodes."""
    spot = settings.node.spot
    selector = dict(flavour.spot_selector if spot else flavour.on_demand_selector)
    selector.update(own(settings).node_selector)
    if gpu and flavour.gpu_label:
        selector[flavour.gpu_label] = settings.node.gpu_type
    tolerations = [
        core.v1.TolerationArgs(key=t.key, operator=t.operator, value=t.value, effect=t.effect)
        for t in (flavour.spot_tolerations if spot else ())
    ]
    if gpu:
        tolerations.append(
            core.v1.TolerationArgs(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        )
    affinity = None
    if not spot and flavour.on_demand_absent:
        affinity = core.v1.AffinityArgs(
            node_affinity=core.v1.NodeAffinityArgs(
                required_during_scheduling_ignored_during_execution=core.v1.NodeSelectorArgs(
                    node_selector_terms=[
                        core.v1.NodeSelectorTermArgs(
                            match_expressions=[
                                core.v1.NodeSelectorRequirementArgs(key=key, operator="DoesNotExist")
                                for key in flavour.on_demand_absent
                            ]
                        )
                    ]
                )
            )
        )
    return {"node_selector": selector or None, "tolerations": tolerations or None, "affinity": affinity}


@dataclass(frozen=True)
class WorkloadArgs:
    settings: Settings
    context: BuildContext


class EvalWorkload(pulumi.ComponentResource):
    """Namespace, service account, agent config and bundle, weights-cache PVC, model server, episodes Job."""

    def __init__(self, name: str, args: WorkloadArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("spot-eval:k8s:EvalWorkload", name, None, opts)
        s = args.settings
        kube = own(s)
        flavour = K8S_FLAVOURS[kube.flavour]
        grace = stop_timeout_s(s)
        ns = kube.namespace
        # Checked before anything is declared: a ConfigMap holds at most 1 MiB.
        server_name = f"{s.run_id}-server"
        server_url = f"http://{server_name}.{ns}.svc.cluster.local:{s.server.port}"
        config = agent_config(s, store_url=kube.bucket_url, server_url=server_url, external_server=True)
        bundle = base64.b64encode(args.context.bundle_path.read_bytes()).decode()
        data = {"agent.json": json.dumps(config, indent=1, sort_keys=True)}
        manifest = args.context.manifest_path
        if manifest is not None:
            data["manifest.jsonl"] = manifest.read_text(encoding="utf-8")
        size = len(bundle) + sum(len(v.encode()) for v in data.values())  # binaryData is stored as base64
        if size > CONFIG_MAP_LIMIT:
            raise SettingsError(
                "eval.manifest",
                f"agent bundle and manifest take {size} bytes, "
                f"more than a ConfigMap holds ({CONFIG_MAP_LIMIT})",
            )
        self.namespace: core.v1.Namespace | None = None
        depends: list[pulumi.Resource] = []
        if kube.create_namespace:
            # The namespace holds the weights cache: deleting it would delete the PVC.
            self.namespace = core.v1.Namespace(
                f"{name}-namespace",
                metadata=meta.v1.ObjectMetaArgs(name=ns, labels=_labels(s, "namespace")),
                opts=held(self),
            )
            depends.append(self.namespace)

        def meta_(
            suffix: str, component: str, annotations: dict[str, str] | None = None
        ) -> meta.v1.ObjectMetaArgs:
            return meta.v1.ObjectMetaArgs(
                name=f"{s.run_id}-{suffix}",
                namespace=ns,
                labels=_labels(s, component),
                annotations=annotations or None,
            )

        self.service_account = core.v1.ServiceAccount(
            f"{name}-agent",
            metadata=meta_("agent", "agent", dict(kube.service_account_annotations)),
            opts=child(self, depends_on=depends),
        )
        self.config = core.v1.ConfigMap(
            f"{name}-agent",
            metadata=meta_("agent", "agent"),
            data=data,
            binary_data={"agent-bundle.zip": bundle},
            opts=child(self, depends_on=depends),
        )
        self.cache = core.v1.PersistentVolumeClaim(
            f"{name}-weights-cache",
            metadata=meta_("weights-cache", "model-server"),
            spec=core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteOnce"],
                storage_class_name=kube.storage_class,
                resources=core.v1.VolumeResourceRequirementsArgs(
                    requests={"storage": f"{s.node.cache_disk_gb}Gi"}
                ),
            ),
            opts=held(self, depends_on=depends),
        )
        # The spool claims do not depend on node.count (an access mode is replace-only, and a held
        # claim is never replaced): one ReadWriteOnce claim always, and with k8s.shared_spool_class
        # one ReadWriteMany claim that the agents of a pool, on different nodes, share.
        self.spool = core.v1.PersistentVolumeClaim(
            f"{name}-agent-spool",
            metadata=meta_("agent-spool", "agent"),
            spec=core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteOnce"],
                storage_class_name=kube.storage_class,
                resources=core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{SPOOL_GB}Gi"}),
            ),
            opts=held(self, depends_on=depends),
        )
        self.shared_spool: core.v1.PersistentVolumeClaim | None = None
        if kube.shared_spool_class is not None:
            self.shared_spool = core.v1.PersistentVolumeClaim(
                f"{name}-agent-spool-shared",
                metadata=meta_("agent-spool-shared", "agent"),
                spec=core.v1.PersistentVolumeClaimSpecArgs(
                    access_modes=["ReadWriteMany"],
                    storage_class_name=kube.shared_spool_class,
                    resources=core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{SPOOL_GB}Gi"}),
                ),
                opts=held(self, depends_on=depends),
            )
        spool = self.shared_spool or self.spool
        self.job: batch.v1.Job | None = None
        self.deployment: apps.v1.Deployment | None = None
        self.service: core.v1.Service | None = None
        if s.node.count < 1:
            self.register_outputs({"job": None})
            return

        server_labels = _labels(s, "model-server")
        server_place = _placement(s, flavour, gpu=True)
        assert s.server.image is not None
        # Fixed names, and the pods hold ReadWriteOnce claims: workloads are replaced delete-first.
        self.deployment = apps.v1.Deployment(
            f"{name}-server",
            metadata=meta_("server", "model-server", SKIP_AWAIT),
            spec=apps.v1.DeploymentSpecArgs(
                replicas=1,
                # One pod at a time: the weights cache is ReadWriteOnce.
                strategy=apps.v1.DeploymentStrategyArgs(type="Recreate"),
                selector=meta.v1.LabelSelectorArgs(match_labels=server_labels),
                template=core.v1.PodTemplateSpecArgs(
                    metadata=meta.v1.ObjectMetaArgs(labels=server_labels),
                    spec=core.v1.PodSpecArgs(
                        termination_grace_period_seconds=grace,
                        containers=[
                            core.v1.ContainerArgs(
                                name="model-server",
                                image=s.server.image,
                                command=server_command(s, cache_dir=CACHE_MOUNT),
                                ports=[core.v1.ContainerPortArgs(container_port=s.server.port, name="http")],
                                env=[core.v1.EnvVarArgs(name="HF_HOME", value=f"{CACHE_MOUNT}/huggingface")],
                                resources=core.v1.ResourceRequirementsArgs(
                                    limits={"nvidia.com/gpu": str(s.node.gpu_count)},
                                    requests={"nvidia.com/gpu": str(s.node.gpu_count)},
                                ),
                                readiness_probe=core.v1.ProbeArgs(
                                    http_get=core.v1.HTTPGetActionArgs(
                                        path=s.server.health_path, port=s.server.port
                                    ),
                                    period_seconds=10,
                                    failure_threshold=3,
                                ),
                                startup_probe=core.v1.ProbeArgs(
                                    http_get=core.v1.HTTPGetActionArgs(
                                        path=s.server.health_path, port=s.server.port
                                    ),
                                    period_seconds=10,
                                    failure_threshold=max(1, s.server.ready_timeout_s // 10),
                                ),
                                volume_mounts=[
                                    core.v1.VolumeMountArgs(name="weights-cache", mount_path=CACHE_MOUNT)
                                ],
                            )
                        ],
                        volumes=[
                            core.v1.VolumeArgs(
                                name="weights-cache",
                                persistent_volume_claim=core.v1.PersistentVolumeClaimVolumeSourceArgs(
                                    claim_name=self.cache.metadata.name
                                ),
                            )
                        ],
                        **server_place,
                    ),
                ),
            ),
            opts=exclusive(self, depends_on=depends),
        )
        self.service = core.v1.Service(
            f"{name}-server",
            metadata=meta.v1.ObjectMetaArgs(name=server_name, namespace=ns, labels=server_labels),
            spec=core.v1.ServiceSpecArgs(
                type="ClusterIP",
                selector=server_labels,
                ports=[core.v1.ServicePortArgs(name="http", port=s.server.port, target_port=s.server.port)],
            ),
            opts=child(self, depends_on=depends),
        )
        agent_labels = _labels(s, "agent")
        manifest_path = f"{CONFIG_DIR}/manifest.jsonl" if manifest is not None else None
        self.job = batch.v1.Job(
            f"{name}-episodes",
            metadata=meta_("episodes", "agent", SKIP_AWAIT),
            spec=batch.v1.JobSpecArgs(
                completion_mode="Indexed",
                completions=s.node.count,
                parallelism=s.node.count,
                backoff_limit=6 * s.node.count,
                active_deadline_seconds=s.stop.max_runtime_s,
                pod_failure_policy=batch.v1.PodFailurePolicyArgs(
                    rules=[
                        # Preempted or evicted pods: retried, never counted against backoffLimit.
                        batch.v1.PodFailurePolicyRuleArgs(
                            action="Ignore",
                            on_pod_conditions=[
                                batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(type="DisruptionTarget")
                            ],
                        ),
                        # A config the agent refuses: retrying cannot help.
                        batch.v1.PodFailurePolicyRuleArgs(
                            action="FailJob",
                            on_exit_codes=batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                                container_name="agent", operator="In", values=FAIL_JOB_EXIT_CODES
                            ),
                        ),
                    ]
                ),
                template=core.v1.PodTemplateSpecArgs(
                    metadata=meta.v1.ObjectMetaArgs(labels=agent_labels),
                    spec=core.v1.PodSpecArgs(
                        restart_policy="Never",
                        service_account_name=self.service_account.metadata.name,
                        termination_grace_period_seconds=grace,
                        containers=[
                            core.v1.ContainerArgs(
                                name="agent",
                                image=s.node.image,
                                command=k8s_agent_command(
                                    f"{CONFIG_DIR}/agent.json",
                                    f"{CONFIG_DIR}/agent-bundle.zip",
                                    manifest_path,
                                    harness_install(s, CONTAINER_PYTHON),
                                ),
                                env=[
                                    core.v1.EnvVarArgs(
                                        name="POD_NAME",
                                        value_from=core.v1.EnvVarSourceArgs(
                                            field_ref=core.v1.ObjectFieldSelectorArgs(
                                                field_path="metadata.name"
                                            )
                                        ),
                                    ),
                                    core.v1.EnvVarArgs(
                                        name="JOB_COMPLETION_INDEX",
                                        value_from=core.v1.EnvVarSourceArgs(
                                            field_ref=core.v1.ObjectFieldSelectorArgs(
                                                field_path=(
                                                    "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                                                )
                                            )
                                        ),
                                    ),
                                ],
                                resources=core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "2", "memory": "4Gi"}, limits={"memory": "8Gi"}
                                ),
                                volume_mounts=[
                                    core.v1.VolumeMountArgs(
                                        name="agent", mount_path=CONFIG_DIR, read_only=True
                                    ),
                                    core.v1.VolumeMountArgs(
                                        name="spool",
                                        mount_path=SPOOL_MOUNT,
                                        sub_path_expr="index-$(JOB_COMPLETION_INDEX)",
                                    ),
                                ],
                            )
                        ],
                        volumes=[
                            core.v1.VolumeArgs(
                                name="agent",
                                config_map=core.v1.ConfigMapVolumeSourceArgs(name=self.config.metadata.name),
                            ),
                            core.v1.VolumeArgs(
                                name="spool",
                                persistent_volume_claim=core.v1.PersistentVolumeClaimVolumeSourceArgs(
                                    claim_name=spool.metadata.name
                                ),
                            ),
                        ],
                        **_placement(s, flavour, gpu=False),
                    ),
                ),
            ),
            opts=exclusive(self, depends_on=[*depends, self.service]),
        )
        if s.node.pool:  # the agent that finds the run done scales the model server to zero
            pool_stop.kubernetes(name, self, s, ns, self.service_account.metadata.apply(lambda m: m.name))
        self.register_outputs({"job": self.job.metadata.name})


def build(settings: Settings, context: BuildContext) -> StackOutputs:
    if settings.node.pool and own(settings).shared_spool_class is None:
        raise SettingsError(
            "k8s.shared_spool_class",
            "is required for a pool (node.count > 1): its agents run on different nodes and share "
            "one ReadWriteMany spool claim; name a storage class that offers ReadWriteMany",
        )
    opts = pulumi.ResourceOptions(providers=[provider(settings)])
    workload = EvalWorkload(settings.run_id, WorkloadArgs(settings, context), opts)
    node_ids: pulumi.Input[list[str]] = (
        workload.job.metadata.name.apply(lambda n: [n]) if workload.job is not None else []
    )
    return StackOutputs(bucket_url=own(settings).bucket_url, node_ids=node_ids, zone=settings.zone or "")
