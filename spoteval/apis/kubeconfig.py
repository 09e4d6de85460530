"""The Kubernetes client's configuration: the kubeconfig (`KUBECONFIG`, else `~/.kube/config`, its
current context), else the pod's service account when running inside a cluster.

`KUBECONFIG` is read at each call: the client library reads it once, when it is imported. The
client library (`kubernetes`) is imported here when called, so importing this module needs
nothing beyond the standard library.
"""

from __future__ import annotations

import os
from typing import Any


def api_client(error: type[Exception]) -> Any:
    """A configured `kubernetes.client.ApiClient`; `error` (one line naming both attempts) when
    neither a kubeconfig nor the cluster gives one."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    kubeconfig = os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        k8s_config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as first:
        try:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise error(
                f"kubernetes: no usable kubeconfig ({kubeconfig}: {first}) and not in a cluster ({exc})"
            ) from None
    return k8s.ApiClient()
