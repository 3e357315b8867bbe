"""The pod side of a node's health: is its bcd pod what a healthy node shows?

A node is healthy when both sides say so: the control plane (its bcd node reports, nodes.list)
and the cluster (its bcd pod). The control plane keeps counting a node ``adopting`` or ``ready``
for its offline grace after bcd stopped reporting, so a crash-looping pod can hide behind a
node that still "reports"; the kubelet's view of the pod says so at once.

A bcd pod is healthy when it is Ready, runs the DaemonSet's current pod template, and none of its
containers is failing: waiting in ``CrashLoopBackOff`` (or a reason that does not heal by
waiting), terminated with a non-zero exit code (``Error``), or restarted since the run began.
The ``join`` init container is judged apart (:func:`bcd_kube.join_failure`: a refused join,
with its own notion of a stale failure). Each judgement names the pod, its state and the
container's last message (``lastState.terminated``: exit code, reason, termination message),
which is what bcd wrote before it exited.

Pure functions over the API's JSON (a pod as :func:`bcd_kube.slim_pod` keeps it), shared by
audit (check ``pod``), the preflight (adopt's "nothing to do"), the node wait, the DaemonSet
wait and the rollout gates (:func:`bcd_rollout.fatal`).
"""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    JOIN_CONTAINER,
    join_failure,
    last_exit,
    pod_ready,
    pod_state,
)

# Container waiting reasons that do not heal by waiting: the kubelet backs off restarting a
# container that exited (CrashLoopBackOff), or cannot make one from the spec.
FAILING_WAITING = frozenset({"CrashLoopBackOff", "InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull",
                             "RunContainerError"})
# The DaemonSet controller's labels on its pods: the template generation and the revision's hash.
GENERATION_LABEL = "pod-template-generation"
REVISION_LABEL = "controller-revision-hash"
# The DaemonSet's template generation (apps/v1 keeps spec.templateGeneration in this annotation).
GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _statuses(pod: dict, skip: str = JOIN_CONTAINER) -> list[dict]:
    status = pod.get("status") or {}
    return ([cs for cs in status.get("initContainerStatuses") or [] if cs.get("name") != skip]
            + list(status.get("containerStatuses") or []))


def container_failure(pod: dict, since: str | None = None) -> str | None:
    """Why a container of ``pod`` (not its ``join`` init container) is failing, or None: waiting in
    ``CrashLoopBackOff`` or another reason of :data:`FAILING_WAITING`, terminated with a non-zero
    exit code, or (with ``since``, RFC 3339 UTC) restarted since then - its last run finished at
    or after ``since``. The text names the container, its state, its restarts and its last exit."""
    for cs in _statuses(pod):
        name = cs.get("name")
        state = cs.get("state") or {}
        restarts = int(cs.get("restartCount") or 0)
        waiting = state.get("waiting") or {}
        term = state.get("terminated") or {}
        last = last_exit(cs)
        tail = f"; last {last}" if last else ""
        if waiting.get("reason") in FAILING_WAITING:
            why = f"container {name} waiting: {waiting['reason']}, {_plural(restarts, 'restart')}"
            if waiting["reason"] != "CrashLoopBackOff" and waiting.get("message"):
                why += f" - {' '.join(str(waiting['message']).split())}"
            return why + tail
        if term.get("exitCode"):
            return f"container {name} terminated, {_plural(restarts, 'restart')}{tail}"
        finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or ""
        if since and restarts and finished >= since:
            return f"container {name} restarted during this run ({_plural(restarts, 'restart')}){tail}"
    return None


def pod_failure(pod: dict, since: str | None = None) -> str | None:
    """Why ``pod`` fails now, in a way waiting does not heal, or None: the pod failed (phase
    ``Failed``: evicted, for one) or a container fails (:func:`container_failure`).
    ``pod <name> not Ready: <why>``."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name")
    if status.get("phase") == "Failed":
        why = status.get("reason") or status.get("message") or pod_state(pod)
        return f"pod {name} failed ({why})"
    failing = container_failure(pod, since)
    return f"pod {name} not Ready: {failing}" if failing else None


def template_generation(ds: dict | None) -> str | None:
    """The DaemonSet's pod template generation (its pods of that template carry it as a label)."""
    return ((ds or {}).get("metadata") or {}).get("annotations", {}).get(GENERATION_ANNOTATION)


def pod_updated(pod: dict, ds: dict | None, revision: str | None = None) -> bool:
    """Whether ``pod`` runs the DaemonSet's current pod template, as the DaemonSet controller
    decides it: its ``controller-revision-hash`` is ``revision`` (the newest ControllerRevision's
    hash; after a rollback the template is an older revision's again) or its
    ``pod-template-generation`` is the DaemonSet's. Without either to compare with, True."""
    labels = ((pod.get("metadata") or {}).get("labels") or {})
    generation = template_generation(ds)
    if revision is None and generation is None:
        return True
    return bool((revision and labels.get(REVISION_LABEL) == revision)
                or (generation is not None and labels.get(GENERATION_LABEL) == str(generation)))


def pod_health(pod: dict | None, ds: dict | None = None, revision: str | None = None,
               since: str | None = None) -> str | None:
    """Why the bcd pod of a node is not healthy, or None: no pod, a failure (:func:`pod_failure`),
    its join refused (:func:`bcd_kube.join_failure`), an older pod template than the DaemonSet's
    (``ds``, ``revision``: see :func:`pod_updated`), or not Ready. Each names the pod and its state."""
    if pod is None:
        return "no bcd pod on the Node"
    failing = pod_failure(pod, since)
    if failing:
        return failing
    name = pod["metadata"].get("name")
    refused = join_failure(pod)
    if refused:
        return f"pod {name} not Ready: {refused}"
    if ds is not None and not pod_updated(pod, ds, revision):
        labels = pod["metadata"].get("labels") or {}
        want = revision or f"generation {template_generation(ds)}"
        return (f"pod {name} runs an older pod template (revision {labels.get(REVISION_LABEL) or '?'}), not the "
                f"DaemonSet's current one ({want}): its rollout is not complete")
    if not pod_ready(pod):
        return f"pod {name} not Ready ({pod_state(pod)})"
    return None


def healthy_text(pod: dict) -> str:
    """A healthy pod in a few words: ``pod <name> Ready, revision <hash>, <n> restarts``."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    restarts = sum(int(cs.get("restartCount") or 0) for cs in _statuses(pod))
    return (f"pod {pod['metadata'].get('name')} Ready, revision {labels.get(REVISION_LABEL) or '?'}, "
            f"{_plural(restarts, 'restart')}")


def unhealthy_pods(names: list[str], by_node: dict[str, dict], ds: dict | None = None, revision: str | None = None,
                   since: str | None = None) -> list[dict]:
    """``[{node, pod, why}]``, sorted by Node, for each of ``names`` whose bcd pod (``by_node``:
    Node name -> pod) is not healthy (:func:`pod_health`); ``pod`` is null when it has none."""
    out = []
    for name in sorted(names):
        pod = by_node.get(name)
        why = pod_health(pod, ds, revision, since)
        if why:
            out.append({"node": name, "pod": (pod or {}).get("metadata", {}).get("name"), "why": why})
    return out


def failing_pods(names: list[str], by_node: dict[str, dict], since: str | None = None) -> dict[str, str]:
    """Node name -> why, for each of ``names`` whose bcd pod fails in a way waiting does not heal
    (:func:`pod_failure`): a wait fails at once on these, as on a refused join."""
    out = {}
    for name in sorted(names):
        pod = by_node.get(name)
        why = pod_failure(pod, since) if pod is not None else None
        if why:
            out[name] = why
    return out
