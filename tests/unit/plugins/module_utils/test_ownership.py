"""Field-set arithmetic of taking over a client-side kubectl apply (bcd_ownership)."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_ownership import (
    LAST_APPLIED,
    clean,
    prune,
    removed_after_takeover,
    subtract_fields,
    upgraded_managed_fields,
)

VARLOG = 'k:{"name":"varlog"}'
CONF = 'k:{"name":"conf"}'
CSA = {"f:metadata": {"f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}}},
       "f:spec": {"f:volumes": {".": {}, VARLOG: {".": {}, "f:name": {}, "f:hostPath": {"f:path": {}}},
                                CONF: {".": {}, "f:name": {}}}}}
OURS = {"f:spec": {"f:volumes": {".": {}, CONF: {".": {}, "f:name": {}}}}}
OBJ = {"apiVersion": "apps/v1", "kind": "DaemonSet",
       "metadata": {"name": "bcd", "uid": "u", "resourceVersion": "7", "annotations": {LAST_APPLIED: "{}"},
                    "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": CSA},
                                      {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                                       "fieldsV1": {"f:status": {}}}]},
       "spec": {"volumes": [{"name": "varlog", "hostPath": {"path": "/var/log"}}, {"name": "conf"}]},
       "status": {"numberReady": 1}}


def test_subtract_keeps_what_the_other_does_not_hold():
    assert subtract_fields(CSA, OURS) == {"f:metadata": {"f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}}},
                                          "f:spec": {"f:volumes": {VARLOG: CSA["f:spec"]["f:volumes"][VARLOG]}}}


def test_prune_removes_the_extra_volume_and_the_annotation():
    applied = {**OBJ, "metadata": {**OBJ["metadata"], "managedFields": [
        *OBJ["metadata"]["managedFields"], {"manager": "bcd-ansible", "operation": "Apply", "fieldsV1": OURS}]}}
    removed = removed_after_takeover(upgraded_managed_fields(applied, "bcd-ansible", "t"), applied, "bcd-ansible")
    after = prune(applied, removed)
    assert after["spec"]["volumes"] == [{"name": "conf"}]
    assert LAST_APPLIED not in after["metadata"].get("annotations", {})


def test_upgrade_moves_the_client_side_set_into_our_apply_entry():
    entries = upgraded_managed_fields(OBJ, "bcd-ansible", "2026-01-01T00:00:00Z")
    assert [e["manager"] for e in entries] == ["kube-controller-manager", "bcd-ansible"]
    assert entries[1]["operation"] == "Apply" and entries[1]["fieldsV1"] == CSA and entries[1]["apiVersion"] == "apps/v1"
    existing = {**OBJ, "metadata": {**OBJ["metadata"], "managedFields": [
        *OBJ["metadata"]["managedFields"], {"manager": "bcd-ansible", "operation": "Apply", "fieldsV1": OURS}]}}
    merged = upgraded_managed_fields(existing, "bcd-ansible", "t")
    assert len(merged) == 2 and VARLOG in merged[1]["fieldsV1"]["f:spec"]["f:volumes"]


def test_clean_drops_bookkeeping():
    out = clean(OBJ)
    assert "status" not in out and not {"managedFields", "uid", "resourceVersion"} & set(out["metadata"])
