"""The judgements of module_utils/bcd_admission.py: what refused a pod and its fix, which
FailedCreate events count, when a refusal stands, the dry-run pod (no cluster: the requests
against a real API server are in tests/integration/test_admission.py).

The messages are the API server's own formats (k8s.io/apiserver admission plugins, the
DaemonSet controller's ``Error creating: %v``)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    Standing,
    judge,
    last_seen,
    latest,
    pod_usage,
    probe_pod,
    quoted,
    refusals,
    replaced_pod_makes_room,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import daemonset

from tests.helpers import base_vars

NS = "bcd-system"
UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
QUOTA = 'Error creating: pods "bcd-" is forbidden: exceeded quota: crit, requested: pods=1, used: pods=0, limited: pods=0'
POLICY = ('Error creating: pods "bcd-x7k2p" is forbidden: ValidatingAdmissionPolicy \'deny-privileged\' with binding '
          "'deny-privileged-bcd' denied request: privileged pods are not allowed in bcd-system")


@pytest.mark.parametrize(("message", "kind", "fatal", "in_fix"), [
    (QUOTA, "quota", True, ["ResourceQuota crit", "limited: pods=0", "3 pods, one per selected Node", "remove it"]),
    ('pods "bcd-" is forbidden: insufficient quota to match these scopes: [{PriorityClass In [system-node-critical '
     'system-cluster-critical]}]', "quota", True,
     ["scopeSelector", "PriorityClass", "system-node-critical", "at least 3", "bcd_priority_class_name"]),
    ('pods "bcd-" is forbidden: status unknown for quota: crit, resources: pods', "quota", False, ["not counted"]),
    ('pods "bcd-" is forbidden: violates PodSecurity "baseline:latest": privileged (container "bcd" must not set '
     'securityContext.privileged=true), host namespaces (hostNetwork=true)', "pod-security", True,
     ["pod-security.kubernetes.io/enforce=privileged", "kubectl label namespace bcd-system"]),
    (POLICY, "admission-policy", True, ["ValidatingAdmissionPolicy deny-privileged (binding deny-privileged-bcd)",
                                        "namespaceSelector"]),
    ('pods "bcd-" is forbidden: ValidatingAdmissionPolicy \'p\' denied request: no', "admission-policy", True,
     ["ValidatingAdmissionPolicy p refuses"]),
    # a policy's default reason is Invalid (422), with an empty field path
    ('Error creating: pods "bcd-" is invalid: : ValidatingAdmissionPolicy \'p\' with binding \'b\' denied request: no',
     "admission-policy", True, ["ValidatingAdmissionPolicy p (binding b) refuses"]),
    ('admission webhook "validate.kyverno.svc-fail" denied the request: policy disallow-privileged: denied',
     "webhook", True, ["validate.kyverno.svc-fail", "exception for namespace bcd-system"]),
    ('Internal error occurred: failed calling webhook "gatekeeper.sh": failed to call webhook: Post '
     '"https://gatekeeper-webhook-service.gatekeeper-system.svc:443/v1/admit": dial tcp 10.0.0.1:443: connect: '
     'connection refused', "webhook", True, ["gatekeeper.sh cannot be called", "failurePolicy"]),
    ('admission webhook "sidefx.example.com" does not support dry run', "webhook-no-dry-run", False, ["side effects"]),
    ('pods "bcd-" is forbidden: maximum cpu usage per Container is 50m, but limit is 100m', "limit-range", True,
     ["LimitRange", "bcd_resources"]),
    ('pods "bcd-" is forbidden: no PriorityClass with name system-node-critical was found', "priority-class", True,
     ["create PriorityClass system-node-critical"]),
    ('pods "bcd-" is forbidden: unable to create new content in namespace bcd-system because it is being terminated',
     "namespace-terminating", True, ["being deleted"]),
    ('pods "bcd-" is forbidden: error looking up service account bcd-system/default: serviceaccount "default" not found',
     "service-account", False, ["ServiceAccount"]),
    ('pods is forbidden: User "ops" cannot create resource "pods" in API group "" in the namespace "bcd-system"',
     "rbac", False, ["grant create on pods"]),
    ('pods "bcd-" is forbidden: some-plugin says no', "forbidden", True, ["admission plugin"]),
    ('Pod "bcd-" is invalid: spec.containers[0].image: Required value', "invalid", True, ["bcd_* variables"]),
])
def test_each_refusal_is_named_with_its_fix(message, kind, fatal, in_fix):
    got = judge(message, NS, nodes=3, priority_class="system-node-critical")
    assert got["kind"] == kind and got["fatal"] is fatal, got
    for part in in_fix:
        assert part in got["fix"], (part, got["fix"])
    assert not got["reason"].startswith(("Error creating", "pods \"")), "the API server's reason, without the prefix"


@pytest.mark.parametrize("message", [
    "Error creating: Timeout: request did not complete within requested timeout - context deadline exceeded",
    'Error creating: Operation cannot be fulfilled on pods "bcd-abcde": the object has been modified',
    "",
])
def test_what_heals_by_retrying_is_no_refusal(message):
    assert judge(message, NS) is None


def test_the_quote_is_the_reason_alone():
    assert quoted(QUOTA) == "exceeded quota: crit, requested: pods=1, used: pods=0, limited: pods=0"
    assert quoted(POLICY).startswith("ValidatingAdmissionPolicy 'deny-privileged'")
    assert quoted('pods "bcd-" is invalid: : ValidatingAdmissionPolicy \'p\' denied request: no') == \
        "ValidatingAdmissionPolicy 'p' denied request: no"
    assert quoted("(combined from similar events): " + QUOTA) == quoted(QUOTA), "an aggregated event"
    assert quoted("plain words") == "plain words"


def event(message=QUOTA, last="2026-05-01T10:00:10Z", uid=UID, reason="FailedCreate", **extra) -> dict:
    return {"reason": reason, "message": message, "involvedObject": {"kind": "DaemonSet", "uid": uid},
            "firstTimestamp": "2026-05-01T10:00:00Z", "lastTimestamp": last, "count": 4, **extra}


def test_only_this_daemonsets_failedcreate_events_since_the_wait_count():
    events = [
        event(),  # fresh
        event(last="2026-05-01T09:59:59Z", message=POLICY),  # an earlier run's: stale
        event(uid="other-uid", message=POLICY),  # another object's
        event(reason="SuccessfulCreate", message="Created pod: bcd-abcde"),
        event(message="Error creating: Timeout: request did not complete within requested timeout"),
    ]
    found = refusals(events, UID, "2026-05-01T10:00:05Z", NS, 3, "system-node-critical")
    assert [r["kind"] for r in found] == ["quota"]
    assert found[0]["at"] == "2026-05-01T10:00:10Z" and found[0]["count"] == 4
    # however old, the latest refusal names the reason at a timeout
    assert latest(events[1:2], UID, NS)["kind"] == "admission-policy"
    assert refusals(events[1:2], UID, "2026-05-01T10:00:05Z", NS) == []


def test_an_event_recorded_through_events_k8s_io_is_read_by_its_series():
    ev = {"reason": "FailedCreate", "message": QUOTA, "involvedObject": {"uid": UID}, "lastTimestamp": None,
          "eventTime": "2026-05-01T10:00:01.123456Z", "series": {"count": 7, "lastObservedTime": "2026-05-01T10:00:30.000001Z"}}
    assert last_seen(ev) == "2026-05-01T10:00:30Z"
    found = refusals([ev], UID, "2026-05-01T10:00:20Z", NS)
    assert found and found[0]["count"] == 7


def test_one_refusal_per_reason_the_latest_first():
    events = [event(last="2026-05-01T10:00:10Z"), event(last="2026-05-01T10:00:12Z"),
              event(message=POLICY, last="2026-05-01T10:00:11Z")]
    found = refusals(events, UID, "2026-05-01T10:00:00Z", NS)
    assert [(r["kind"], r["at"]) for r in found] == [("quota", "2026-05-01T10:00:12Z"),
                                                     ("admission-policy", "2026-05-01T10:00:11Z")]
    assert found[0]["count"] == 8, "the quota's two events (each pod its own), 4 each"


def test_a_refusal_stands_only_after_the_grace_with_pods_still_missing():
    found = refusals([event()], UID, None, NS)
    s = Standing(grace=6.0)
    assert s.update(found, missing=True, now=100.0) == []
    assert s.due() == 106.0
    assert s.update(found, missing=True, now=105.9) == []
    assert s.update(found, missing=True, now=106.0) == found
    # the pods came (a quota that had not counted a deleted pod yet): it starts over
    assert s.update(found, missing=False, now=107.0) == [] and s.due() is None
    assert s.update(found, missing=True, now=108.0) == []
    # a refusal that heals by itself never stands
    pending = refusals([event(message='pods "bcd-" is forbidden: status unknown for quota: crit, resources: pods')],
                       UID, None, NS)
    assert pending and Standing(0).update(pending, missing=True, now=1.0) == []


def render(**overrides) -> dict:
    inv = load(base_vars(**overrides), ())
    return daemonset(inv, "log_level = \"info\"\n")


def test_the_probe_pod_is_the_daemonset_controllers_pod():
    ds = render()
    before = copy.deepcopy(ds)
    pod = probe_pod(ds, node="gpu-node-1", owner_uid=UID)
    assert ds == before, "the render is not changed"
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == "bcd-admission-probe"
    assert pod["metadata"]["namespace"] == "bcd-system"
    assert pod["metadata"]["labels"] == ds["spec"]["template"]["metadata"]["labels"]
    assert pod["metadata"]["ownerReferences"][0] == {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "bcd",
                                                     "uid": UID, "controller": True, "blockOwnerDeletion": True}
    spec = pod["spec"]
    assert spec["containers"] == ds["spec"]["template"]["spec"]["containers"]
    assert spec["containers"][0]["securityContext"]["privileged"] is True
    keys = {(t.get("key"), t.get("effect")) for t in spec["tolerations"]}
    assert ("node.kubernetes.io/not-ready", "NoExecute") in keys and ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys, "hostNetwork pods tolerate it"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}]
    unbound = probe_pod(ds)
    assert "affinity" not in unbound["spec"] and "ownerReferences" not in unbound["metadata"]


def test_a_pod_counts_in_a_quota_as_the_api_server_counts_it():
    spec = {"initContainers": [{"resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}],
            "containers": [{"resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}},
                           {"resources": {"requests": {"cpu": "100m"}}}]}
    usage = pod_usage(spec)
    assert usage["pods"] == 1
    assert usage["requests.cpu"] == usage["cpu"] == pytest.approx(0.5), "the largest init container's, if more"
    assert usage["requests.memory"] == 128 * 2**20
    assert usage["limits.memory"] == 512 * 2**20


def test_a_full_quota_a_rollout_makes_room_in_is_not_a_refusal():
    spec = render()["spec"]["template"]["spec"]  # requests cpu 100m, memory 128Mi
    full = 'exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3'
    assert replaced_pod_makes_room(full, spec), "one pod deleted, its replacement fits"
    assert not replaced_pod_makes_room('exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=2', spec)
    assert not replaced_pod_makes_room('exceeded quota: q, requested: pods=1, used: pods=0, limited: pods=0', spec)
    cpu = "exceeded quota: q, requested: requests.cpu=200m, used: requests.cpu=300m, limited: requests.cpu=400m"
    assert replaced_pod_makes_room(cpu, spec), "300m - 100m + 200m <= 400m"
    more = "exceeded quota: q, requested: requests.cpu=300m, used: requests.cpu=300m, limited: requests.cpu=400m"
    assert not replaced_pod_makes_room(more, spec)
    assert not replaced_pod_makes_room("exceeded quota: q, requested: nvidia.com/gpu=1, used: nvidia.com/gpu=8, "
                                       "limited: nvidia.com/gpu=8", spec), "a resource bcd's pod does not free"
    assert not replaced_pod_makes_room(POLICY, spec)
