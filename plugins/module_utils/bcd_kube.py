"""Kubernetes reads and writes our modules make, with the official ``kubernetes`` client.

Playbooks make their Kubernetes calls through kubernetes.core; our modules use this file for
the few they must make themselves (the join-token Secret, whose token never enters Ansible's
variables; reads for waiting and for the per-node report; the rollout lock).
"""

from __future__ import annotations

from typing import Any


class KubeError(Exception):
    """A Kubernetes API failure, with a message an operator can act on."""


def api_client(kubeconfig: str | None = None, context: str | None = None):
    """An ApiClient from ``kubeconfig``/``context`` (else $KUBECONFIG or ~/.kube/config, else in-cluster)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig, context=context)
        try:
            return config.new_client_from_config(context=context)
        except ConfigException:
            config.load_incluster_config()
            return client.ApiClient()
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        raise KubeError(f"cannot load the kubeconfig {kubeconfig or '(default)'}{' context ' + context if context else ''}: {exc}") from None


def describe(exc: Exception) -> str:
    """A one-line description of a kubernetes client exception."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        import json

        message = exc.reason
        try:
            message = json.loads(exc.body).get("message", message)
        except (TypeError, ValueError, AttributeError):
            pass
        return f"Kubernetes API {exc.status}: {message}"
    return f"cannot reach the Kubernetes API: {exc}"


def call(fn, *args, **kwargs) -> Any:
    """Run one client call; turn any failure into KubeError (never a traceback)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        raise KubeError(describe(exc)) from None
    except (HTTPError, OSError) as exc:
        raise KubeError(describe(exc)) from None


def status_of(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def list_all(fn, *args, limit: int = 500, **kwargs) -> list:
    """Every item of a list call, following ``continue`` tokens, ``limit`` per page."""
    items, token = [], None
    while True:
        page = call(fn, *args, limit=limit, _continue=token, **kwargs) if token else call(fn, *args, limit=limit, **kwargs)
        items.extend(page.items)
        token = page.metadata._continue
        if not token:
            return items


def selector(labels: dict[str, str]) -> str:
    """A label selector string (``k=v,k2=v2``) from a mapping; empty selects everything."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def node_ready(node) -> bool:
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == "Ready":
            return cond.status == "True"
    return False


def pod_ready(pod) -> bool:
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "Ready":
            return cond.status == "True"
    return False
