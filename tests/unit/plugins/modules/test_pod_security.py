"""bcd_pod_security's rule: which namespaces let pods mount host paths (no cluster needed; the
module's run against the API server is in tests/integration/test_adopt.py). The rule lives in
module_utils/bcd_preflight.py, which bcd_pod_security and bcd_preflight share."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import open_namespaces


def ns(name, enforce=None):
    labels = {"pod-security.kubernetes.io/enforce": enforce} if enforce else None
    return {"metadata": {"name": name, "labels": labels}}


def test_open_namespaces_are_unlabelled_or_privileged_and_not_allowed():
    namespaces = [ns("default"), ns("ml", "privileged"), ns("web", "baseline"), ns("locked", "restricted"),
                  ns("bcd-system", "privileged"), ns("kube-system")]
    assert open_namespaces(namespaces, {"bcd-system", "kube-system"}) == ["default", "ml"]
    assert open_namespaces([ns("web", "baseline")], set()) == []
