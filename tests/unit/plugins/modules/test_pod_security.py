"""bcd_pod_security's rule: which namespaces let pods mount host paths (no cluster needed; the
module's run against the API server is in tests/integration/test_adopt.py)."""

from __future__ import annotations

import importlib.util

from tests.helpers import ROOT


def _module():
    spec = importlib.util.spec_from_file_location("bcd_pod_security", ROOT / "plugins" / "modules" / "bcd_pod_security.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ns(name, enforce=None):
    labels = {"pod-security.kubernetes.io/enforce": enforce} if enforce else None
    return {"metadata": {"name": name, "labels": labels}}


def test_open_namespaces_are_unlabelled_or_privileged_and_not_allowed():
    m = _module()
    namespaces = [ns("default"), ns("ml", "privileged"), ns("web", "baseline"), ns("locked", "restricted"),
                  ns("bcd-system", "privileged"), ns("kube-system")]
    assert m.open_namespaces(namespaces, {"bcd-system", "kube-system"}) == ["default", "ml"]
    assert m.open_namespaces([ns("web", "baseline")], set()) == []
