"""Kubernetes reads and writes our modules make, with the official ``kubernetes`` client.

Playbooks make their Kubernetes calls through kubernetes.core; our modules use this file for
the few they must make themselves (the join-token Secret, whose token never enters Ansible's
variables; reads for waiting and for the per-node report; the rollout lock).

Objects are plain dicts (the API's JSON). We use the client's ApiClient (kubeconfig loading,
TLS, auth) but not its typed API classes: since kubernetes 37 those are pydantic models whose
import costs seconds in every module run; the REST paths below are the API's own
(https://kubernetes.io/docs/reference/using-api/api-concepts/).
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_tmp import private_dir


class KubeError(Exception):
    """A Kubernetes API failure, with a message an operator can act on. ``status``: HTTP status or
    None; ``detail``: the API server's own message (its Status), when it answered."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.detail = detail


# How a run picks its cluster, as kubernetes.core picks it (each setting on its own); named in
# every refusal of a kubeconfig or a context.
RULE = ("the cluster is chosen by bcd_kubeconfig and bcd_kube_context, else K8S_AUTH_KUBECONFIG and "
        "K8S_AUTH_CONTEXT, else KUBECONFIG, else ~/.kube/config and its current context")
DEFAULT_KUBECONFIG = "~/.kube/config"
# what chose the kubeconfig or the context when no variable did (said at the start of a run)
DEFAULT_SOURCE = "the default ~/.kube/config"
CURRENT_SOURCE = "the kubeconfig's current context"


def _names(items: object) -> list[str]:
    return [str(i["name"]) for i in items if isinstance(i, dict) and i.get("name")] if isinstance(items, list) else []


def resolve(kubeconfig: str | None = None, context: str | None = None, environ=None) -> dict:
    """Which kubeconfig and context this run uses, chosen once, as kubernetes.core chooses them:
    ``kubeconfig`` (bcd_kubeconfig), else $K8S_AUTH_KUBECONFIG, else $KUBECONFIG, else
    ~/.kube/config; ``context`` (bcd_kube_context), else $K8S_AUTH_CONTEXT, else the kubeconfig's
    current context. A list of files (``os.pathsep`` between them) is merged as kubectl merges it.

    Returns ``{"kubeconfig", "files", "context", "kubeconfig_from", "context_from"}``; with no
    kubeconfig named anywhere and no ~/.kube/config, ``kubeconfig`` and ``context`` are None (the
    in-cluster service account). Raises :class:`KubeError` (``INVALID_CONFIG: ...``, naming the
    variable and :data:`RULE`) for a kubeconfig that does not exist or cannot be read, a context
    that is not in it (naming those that are), K8S_AUTH_HOST (kubernetes.core would send its
    requests there whatever the kubeconfig says), and a kubeconfig without a current context.
    """
    import yaml

    env = os.environ if environ is None else environ
    if env.get("K8S_AUTH_HOST") is not None:  # even empty: kubernetes.core would take it as the server
        raise KubeError(f"INVALID_CONFIG: K8S_AUTH_HOST is set ({env['K8S_AUTH_HOST']!r}): bcd-ansible takes the server "
                        f"from a kubeconfig and its context, and kubernetes.core would send its requests to "
                        f"K8S_AUTH_HOST instead; unset it ({RULE})")
    for name, value in (("bcd_kubeconfig", kubeconfig), ("K8S_AUTH_KUBECONFIG", env.get("K8S_AUTH_KUBECONFIG")),
                        ("KUBECONFIG", env.get("KUBECONFIG"))):
        if value:
            source, named = name, [os.path.expanduser(p) for p in str(value).split(os.pathsep) if p]
            break
    else:
        source, named = DEFAULT_SOURCE, [os.path.expanduser(DEFAULT_KUBECONFIG)]
    files = [f for f in named if os.path.isfile(f)]
    if source == "KUBECONFIG" and files:
        pass  # as kubectl: a file of $KUBECONFIG that does not exist is left out
    elif files != named:
        missing = ", ".join(f for f in named if f not in files)
        if source == DEFAULT_SOURCE and not (context or env.get("K8S_AUTH_CONTEXT")):
            # nothing named anywhere and no ~/.kube/config: the pod's own service account
            return {"kubeconfig": None, "files": [], "context": None, "kubeconfig_from": "in-cluster",
                    "context_from": "in-cluster"}
        what = DEFAULT_KUBECONFIG if source == DEFAULT_SOURCE else source
        raise KubeError(f"INVALID_CONFIG: {what}: {missing} does not exist; name an existing kubeconfig file ({RULE})")
    if context:
        chosen, context_from = context, "bcd_kube_context"
    elif env.get("K8S_AUTH_CONTEXT"):
        chosen, context_from = env["K8S_AUTH_CONTEXT"], "K8S_AUTH_CONTEXT"
    else:
        chosen, context_from = None, CURRENT_SOURCE
    contexts: list[str] = []
    current = None
    for f in files:
        try:
            with open(f, encoding="utf-8") as handle:
                doc = yaml.safe_load(handle) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeError(f"INVALID_CONFIG: {source}: cannot read the kubeconfig {f}: {exc}") from None
        if not isinstance(doc, dict):
            raise KubeError(f"INVALID_CONFIG: {source}: {f} is not a kubeconfig (not a mapping)")
        # merged as kubectl merges: the first file that names a context or a current context wins
        contexts += [n for n in _names(doc.get("contexts")) if n not in contexts]
        current = current or doc.get("current-context") or None
    where = f"kubeconfig {os.pathsep.join(files)} ({source})"
    there = ", ".join(contexts) or "none"
    if chosen is None:
        if not current:
            raise KubeError(f"INVALID_CONFIG: {where} has no current context; set bcd_kube_context or K8S_AUTH_CONTEXT "
                            f"to one of its contexts: {there} ({RULE})")
        chosen = str(current)
    if chosen not in contexts:
        name = "the current context" if context_from == CURRENT_SOURCE else context_from
        raise KubeError(f"INVALID_CONFIG: {name}: context {chosen!r} is not in {where}; its contexts: {there} ({RULE})")
    return {"kubeconfig": os.pathsep.join(files), "files": files, "context": chosen, "kubeconfig_from": source,
            "context_from": context_from}


def describe_source(kubeconfig: str | None, context: str | None, server: str | None = None) -> str:
    """``kubeconfig <file(s)>, context <name>[, server <url>]``: where a connection came from."""
    files = ", ".join(p for p in (kubeconfig or "").split(os.pathsep) if p) or "(none)"
    out = f"kubeconfig {files}, context {context or '(current context)'}"
    return out + (f", server {server}" if server else "")


def api_client(kubeconfig: str | None = None, context: str | None = None, environ=None):
    """An ApiClient for the cluster :func:`resolve` chooses from ``kubeconfig``/``context`` (else
    $K8S_AUTH_KUBECONFIG/$K8S_AUTH_CONTEXT, else $KUBECONFIG or ~/.kube/config and its current
    context, else in-cluster).

    The client carries ``bcd_source`` (:func:`describe_source`: the kubeconfig file(s), the context
    and its server), which :class:`Kube` puts in every connection error, and ``bcd_resolved``
    (:func:`resolve`'s choice, with ``server``).
    """
    from kubernetes import config
    from kubernetes.client.api_client import ApiClient
    from kubernetes.client.configuration import Configuration
    from kubernetes.config.config_exception import ConfigException

    chosen = resolve(kubeconfig, context, environ)
    try:
        if chosen["kubeconfig"] is None:
            cfg = Configuration()
            config.load_incluster_config(client_configuration=cfg)
            client = ApiClient(configuration=cfg)
            client.bcd_source = f"in-cluster service account, server {cfg.host}"
            client.bcd_resolved = {**chosen, "server": cfg.host}
            return client
        cfg = Configuration()
        # the CA, certificate and key a kubeconfig embeds are written as files: in our own
        # directory, which goes with the process even where atexit does not run
        config.load_kube_config(config_file=chosen["kubeconfig"], context=chosen["context"], client_configuration=cfg,
                                temp_file_path=private_dir())
        client = ApiClient(configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        if chosen["kubeconfig"] is None:
            raise KubeError(f"cannot load the Kubernetes configuration: no kubeconfig is named and {DEFAULT_KUBECONFIG} "
                            f"does not exist ({RULE}), and this is not a pod with a service account ({exc})") from None
        where = describe_source(chosen["kubeconfig"], chosen["context"])
        raise KubeError(f"cannot load the Kubernetes configuration ({where}): {exc}") from None
    client.bcd_source = describe_source(chosen["kubeconfig"], chosen["context"], client.configuration.host)
    client.bcd_resolved = {**chosen, "server": client.configuration.host}
    return client


class Kube:
    """JSON requests to the API server through an ApiClient.

    Paths are API paths (``/api/v1/nodes``); ``query`` a mapping of query parameters.
    Every failure is a :class:`KubeError` naming the request and the cause.
    """

    def __init__(self, client):
        self.client = client
        self.requests = 0
        # kubeconfig file(s), context and server (api_client sets it), named in connection errors
        self.source = getattr(client, "bcd_source", None)

    def request(self, method: str, path: str, query: dict | None = None, body: object = None,
                content_type: str = "application/json", timeout: float = 60.0):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        q = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            _m, url, hdrs, data, _p = self.client.param_serialize(method, path, query_params=q, header_params=headers,
                                                                  body=body, auth_settings=["BearerToken"])
            self.requests += 1
            resp = self.client.call_api(method, url, header_params=hdrs, body=data, _request_timeout=timeout)
            raw = resp.read()
        except Exception as exc:  # noqa: BLE001 - urllib3/SSL/socket errors: one line, never a traceback
            where = f" ({self.source})" if self.source else ""
            # urllib3 wraps the cause (refused, timed out, TLS) in MaxRetryError: name the cause
            cause = getattr(exc, "reason", None) or exc
            raise KubeError(f"{method} {path}: cannot reach the Kubernetes API{where}: {cause}") from None
        doc = None
        if raw:
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
        if not 200 <= resp.status < 300:
            message = (doc or {}).get("message") if isinstance(doc, dict) else None
            if resp.status == 401 and self.source:
                # the credentials of this kubeconfig context were refused: say which ones
                message = f"{message or resp.reason} ({self.source})"
            raise KubeError(f"{method} {path}: Kubernetes API {resp.status}: {message or resp.reason}", status=resp.status,
                            detail=(doc or {}).get("message") if isinstance(doc, dict) else None)
        return doc

    def get(self, path: str, query: dict | None = None):
        """The object at ``path``, or None when it does not exist (404)."""
        try:
            return self.request("GET", path, query)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, query: dict | None = None, limit: int = 500, keep=None) -> list[dict]:
        """Every item of a list, following ``continue`` tokens, ``limit`` per page.

        ``keep``: a function applied to each item as its page arrives (for example
        :func:`slim_pod`), so that a large list (1,000 pods) is never held whole, only the
        fields the caller reads.
        """
        items, token = [], None
        while True:
            page = self.request("GET", path, {**(query or {}), "limit": limit, "continue": token})
            got = page.get("items") or []
            items.extend(map(keep, got) if keep else got)
            token = (page.get("metadata") or {}).get("continue")
            del page, got
            if not token:
                return items

    def create(self, path: str, body: dict, field_manager: str | None = None):
        return self.request("POST", path, {"fieldManager": field_manager}, body)

    def replace(self, path: str, body: dict, field_manager: str | None = None):
        return self.request("PUT", path, {"fieldManager": field_manager}, body)

    def delete(self, path: str, body: dict | None = None):
        """Delete; True when deleted, False when it was not there (404)."""
        try:
            self.request("DELETE", path, None, body)
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def apply(self, path: str, obj: dict, field_manager: str, dry_run: bool = False):
        """Server-side apply ``obj`` at ``path`` as ``field_manager``, forcing conflicts (as
        ``kubectl apply --server-side --force-conflicts``); with ``dry_run``, ``dryRun=All`` (nothing
        is stored). The object as the API server stored it (or would store it)."""
        query = {"fieldManager": field_manager, "force": "true", "dryRun": "All" if dry_run else None}
        return self.request("PATCH", path, query, obj, content_type="application/apply-patch+yaml")

    def patch(self, path: str, body: dict, kind: str = "merge", field_manager: str | None = None):
        types = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json", "apply": "application/apply-patch+yaml"}
        return self.request("PATCH", path, {"fieldManager": field_manager}, body, content_type=types[kind])


def path(kind: str, name: str | None = None, namespace: str | None = None) -> str:
    """The API path of a few kinds we use (plural lower-case kind, core or group/version)."""
    groups = {
        "nodes": "/api/v1", "namespaces": "/api/v1", "pods": "/api/v1", "secrets": "/api/v1", "events": "/api/v1",
        "configmaps": "/api/v1", "daemonsets": "/apis/apps/v1", "controllerrevisions": "/apis/apps/v1",
        "leases": "/apis/coordination.k8s.io/v1",
    }
    base = groups[kind]
    out = base + (f"/namespaces/{quote(namespace, safe='')}" if namespace else "") + f"/{kind}"
    return out + (f"/{quote(name, safe='')}" if name else "")


def resource_version(obj: dict | None) -> str | None:
    """``metadata.resourceVersion`` of ``obj``; None for no object or none recorded."""
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


def without_bookkeeping(obj: dict, metadata: tuple[str, ...], annotations: tuple[str, ...] = ()) -> dict:
    """A copy of ``obj`` (plain JSON types) without ``status``, the ``metadata`` keys and the
    ``annotations`` named (the API server's bookkeeping), and without an ``annotations`` or
    ``metadata`` left empty by that: what a diff of two objects should compare."""
    out = json.loads(json.dumps(obj))  # a deep copy in plain types (Ansible's tagged values do not dump)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in metadata:
            meta.pop(key, None)
        notes = meta.get("annotations")
        if isinstance(notes, dict):
            for key in annotations:
                notes.pop(key, None)
            if not notes:
                meta.pop("annotations")
        if not meta:
            out.pop("metadata")
    out.pop("status", None)
    return out


def selector(labels: dict[str, str]) -> str:
    """A label selector string (``k=v,k2=v2``) from a mapping; empty selects everything."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def condition(obj: dict, ctype: str) -> str | None:
    """The status ("True", "False", "Unknown") of condition ``ctype`` of an object, or None."""
    for c in ((obj.get("status") or {}).get("conditions") or []):
        if c.get("type") == ctype:
            return c.get("status")
    return None


def node_ready(node: dict) -> bool:
    return condition(node, "Ready") == "True"


def _pick(obj: dict | None, keys: tuple[str, ...]) -> dict:
    return {k: obj[k] for k in keys if k in (obj or {})}


def slim_pod(pod: dict) -> dict:
    """The fields of a Pod that :func:`pod_ready`, :func:`pod_state` and the rollout read (names,
    uid, labels, owners, timestamps, node, container images, phase, conditions and container
    statuses), without the rest (managedFields, volumes, env, ...): about a tenth of the size."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    out_meta = _pick(meta, ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp"))
    out_meta["ownerReferences"] = [_pick(o, ("kind", "name", "uid")) for o in meta.get("ownerReferences") or []]
    out_spec = {"nodeName": spec.get("nodeName"),
                "containers": [_pick(c, ("name", "image")) for c in spec.get("containers") or []]}
    if not spec.get("nodeName") and target_node(pod):
        out_spec["affinity"] = (spec.get("affinity") or {})  # the Node an unscheduled DaemonSet pod is for
    return {
        "metadata": out_meta,
        "spec": out_spec,
        "status": _pick(pod.get("status"),
                        ("phase", "reason", "message", "conditions", "initContainerStatuses", "containerStatuses")),
    }


def slim_node(node: dict) -> dict:
    """The name, labels, conditions and allocatable resources of a Node, and whether it is
    cordoned (``spec.unschedulable``) and its taints (what selection, :func:`node_ready`, the
    capacity check and the rollout's down nodes read)."""
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    return {"metadata": _pick(node.get("metadata"), ("name", "labels", "uid")),
            "spec": {"unschedulable": bool(spec.get("unschedulable")), "taints": spec.get("taints") or []},
            "status": {"conditions": status.get("conditions") or [], "allocatable": status.get("allocatable") or {}}}


def target_node(pod: dict) -> str | None:
    """The Node a pod runs on (``spec.nodeName``) or, before it is scheduled, the one it is for:
    the DaemonSet controller ties each of its pods to one Node with a required node affinity
    ``matchFields`` on ``metadata.name`` (https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#how-daemon-pods-are-scheduled)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return None


def unschedulable(pod: dict) -> str | None:
    """Why the scheduler has not placed a pod (its PodScheduled condition False: reason and
    message, such as ``Unschedulable: 0/4 nodes are available: 1 Insufficient memory``), or None."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for c in ((pod.get("status") or {}).get("conditions") or []):
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or 'no reason given'}"
    return None


def pod_ready(pod: dict | None) -> bool:
    """Whether a pod (or None: no pod) has condition Ready True."""
    return pod is not None and condition(pod, "Ready") == "True"


def last_exit(cs: dict) -> str | None:
    """How the container last exited, from its current ``state.terminated`` (a non-zero exit)
    or else ``lastState.terminated``: ``exit 1 (Error) at <time>: <termination message>``."""
    term = ((cs.get("state") or {}).get("terminated") or {})
    if not term.get("exitCode"):
        term = (cs.get("lastState") or {}).get("terminated") or {}
    if not term:
        return None
    text = f"exit {term.get('exitCode', '?')}"
    if term.get("reason"):
        text += f" ({term['reason']})"
    if term.get("finishedAt"):
        text += f" at {term['finishedAt']}"
    message = " ".join(str(term.get("message") or "").split())
    return text + (f": {message}" if message else "")


def pod_state(pod: dict, container: str = "bcd") -> str:
    """Why a pod is not Ready, in a few words: its phase, then each waiting or failed container
    (reason and message), and ``container`` when it runs but is not ready."""
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase') or 'Pending'}"]
    # a pod the scheduler cannot place (a request no Node fits) says so only in PodScheduled
    why_not = unschedulable(pod)
    if why_not:
        parts.append(f"not scheduled: {why_not}")
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        st = cs.get("state") or {}
        if st.get("waiting"):
            w = st["waiting"]
            last = last_exit(cs) if w.get("reason") == "CrashLoopBackOff" else None
            parts.append(f"{cs.get('name')} waiting: {w.get('reason')}" + (f" - {w['message']}" if w.get("message") else "")
                         + (f" (last {last})" if last else ""))
        elif st.get("terminated") and st["terminated"].get("exitCode"):
            t = st["terminated"]
            parts.append(f"{cs.get('name')} exited {t['exitCode']}" + (f": {t['reason']}" if t.get("reason") else ""))
        elif st.get("running") and not cs.get("ready") and cs.get("name") == container:
            parts.append(f"{cs.get('name')} running, not ready")
    return "; ".join(parts)


JOIN_CONTAINER = "join"


def join_failure(pod: dict | None, container: str = JOIN_CONTAINER, since: str | None = None) -> str | None:
    """Why the pod's ``bcd join`` init container failed, or None when it has not failed.

    A kubelet shows a failed init container as ``state.terminated`` with a non-zero exit code,
    then, while it restarts with back-off, ``state.waiting`` (``CrashLoopBackOff``) with the
    failed run in ``lastState.terminated``; ``message`` is what bcd wrote to the termination
    log (the refusal's reason). An init container that completed (exit 0) has not failed,
    whatever its earlier runs did. ``since`` (RFC 3339, UTC, whole seconds): a failed run that
    started in or before that second does not count (see :func:`join_failed_at`): it may have
    read its mounts before the token existed, and a failure stamped in the same second as
    ``since`` may predate it.
    """
    run = _failed_join_run(pod, container)
    if run is None:
        return None
    cs, term = run
    if since and _run_started(term) <= since:
        return None
    text = (term.get("message") or "").strip() or term.get("reason") or "no message"
    waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
    tail = f" ({waiting}, {cs.get('restartCount') or 0} restart(s))" if waiting else ""
    return f"bcd join exited {term['exitCode']}: {text}{tail}"


def _failed_join_run(pod: dict | None, container: str) -> tuple[dict, dict] | None:
    """(the ``bcd join`` container's status, its last failed run: ``state.terminated`` with a
    non-zero exit, else ``lastState.terminated``), or None when it has not failed or has
    completed (exit 0) since."""
    for cs in ((pod or {}).get("status") or {}).get("initContainerStatuses") or []:
        if cs.get("name") != container:
            continue
        done = (cs.get("state") or {}).get("terminated") or {}
        if done and not done.get("exitCode"):
            return None
        for term in (done, (cs.get("lastState") or {}).get("terminated") or {}):
            if term and term.get("exitCode"):
                return cs, term
    return None


def _run_started(term: dict) -> str:
    """When (RFC 3339) a container's run started (``startedAt``; else when it finished)."""
    return term.get("startedAt") or term.get("finishedAt") or ""


def join_failed_at(pod: dict | None, container: str = JOIN_CONTAINER) -> str | None:
    """When (RFC 3339) the pod's last failed ``bcd join`` run started (the container reads its
    token file when it starts), or None when it has not failed.

    A pod on a Node added before its join token existed fails (no token) and then waits out the
    kubelet's back-off (up to 5 minutes) before it tries again: such a failure is stale once a
    token exists, and the pod is restarted rather than waited for.
    """
    run = _failed_join_run(pod, container)
    return None if run is None else _run_started(run[1])


def stale_joins(pods: list[dict], since: str) -> list[dict]:
    """The pods whose failed ``bcd join`` run started in or before the second of ``since`` (RFC
    3339, UTC, whole seconds, taken once the token and config a wait is for were in place: such a
    run may have read its mounts before them) and that do not run. Restarted, they try again now
    rather than after the kubelet's back-off (up to 5 minutes). :func:`join_failure` with the same
    ``since`` counts exactly the other failures."""
    out = []
    for pod in pods or []:
        at = join_failed_at(pod)
        if at is not None and at <= since and ((pod or {}).get("status") or {}).get("phase") == "Pending":
            out.append(pod)
    return out
