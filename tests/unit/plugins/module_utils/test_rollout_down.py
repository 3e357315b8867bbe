"""Down nodes in a staged rollout (plugins/module_utils/bcd_rollout.py), without a cluster: which
selected Node is down and why, the bcd_rollout_max_down budget, and what the plan and the report
say of each. The sandbox shows it end to end (tests/integration/test_rollout_down.py).
"""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import slim_node
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import (
    down_budget,
    left_behind,
    node_dark,
    node_down,
    over_budget,
    plan,
    pod_column,
    went,
)

from tests.helpers import base_vars


def node(name="n1", ready="True", reason=None, message=None, unschedulable=None, taints=None):
    """A Node as the API returns it (only what matters here, and some of what does not)."""
    ready_cond = {"type": "Ready", "status": ready, **({"reason": reason} if reason else {}),
                  **({"message": message} if message else {})}
    spec = {**({"unschedulable": unschedulable} if unschedulable is not None else {}),
            **({"taints": taints} if taints is not None else {}), "podCIDR": "10.0.0.0/24"}
    return {"metadata": {"name": name, "labels": {}, "uid": "u", "managedFields": [{}]}, "spec": spec,
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, ready_cond],
                       "images": [{"names": ["x"]}]}}


POD_READY = {"metadata": {"name": "bcd-x"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.mark.parametrize("slim", [False, True], ids=["whole", "slim"])
@pytest.mark.parametrize(("kwargs", "why"), [
    ({}, None),
    ({"ready": "False", "reason": "KubeletNotReady", "message": "container runtime is down"},
     "the Node is NotReady (KubeletNotReady: container runtime is down)"),
    ({"ready": "Unknown", "reason": "NodeStatusUnknown"}, "the Node is NotReady (NodeStatusUnknown)"),
    ({"unschedulable": True}, "the Node is cordoned (spec.unschedulable)"),
    ({"unschedulable": False}, None),
    ({"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
     "the Node is tainted node.kubernetes.io/unreachable (its kubelet stopped reporting)"),
    ({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}, None),
])
def test_which_node_is_down_and_why(kwargs, why, slim):
    n = node(**kwargs)
    assert node_down(slim_node(n) if slim else n) == why


def test_a_node_with_no_ready_condition_or_gone_is_down():
    bare = {"metadata": {"name": "n1"}, "status": {"conditions": []}}
    assert node_down(bare) == "the Node is NotReady (no Ready condition)"
    assert node_down(None).startswith("the Node is gone")


def test_a_slim_node_keeps_cordon_and_taints():
    slim = slim_node(node(unschedulable=True, taints=[{"key": "k", "effect": "NoSchedule"}]))
    assert slim["spec"] == {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    assert slim_node(node())["spec"] == {"unschedulable": False, "taints": []}


@pytest.mark.parametrize(("budget", "total", "allowed"), [
    ("10%", 3, 1), ("10%", 5000, 500), ("10%", 10, 1), ("10%", 11, 2), ("0%", 100, 0), ("100%", 7, 7),
    (0, 3, 0), (2, 3, 2), (5, 3, 5), ("1%", 1, 1),
])
def test_the_down_budget_is_a_count_or_a_percentage_rounded_up(budget, total, allowed):
    assert down_budget(budget, total) == allowed


def test_more_down_nodes_than_the_budget_refuses_naming_them_and_the_variable():
    down = {"gpu-node-2": "the Node is NotReady (KubeletNotReady)", "gpu-node-3": "the Node is cordoned (spec.unschedulable)"}
    assert over_budget(down, "10%", 30) is None  # 3 allowed
    assert over_budget({}, 0, 3) is None
    refusal = over_budget(down, "10%", 3)
    assert refusal.startswith("2 of 3 selected node(s) are down, more than bcd_rollout_max_down 10% allows (1): ")
    assert "gpu-node-2: the Node is NotReady (KubeletNotReady)" in refusal and "gpu-node-3: the Node is cordoned" in refusal
    assert "bcd_rollout_max_down 0 allows (0)" in over_budget(dict(list(down.items())[:1]), 0, 3)


def test_a_plan_without_the_down_nodes_keeps_percentages_of_the_selected_nodes():
    selected = [f"n{i}" for i in range(1, 11)]
    down = {"n2", "n5"}
    stages = plan([n for n in selected if n not in down], 1, "20%", len(selected))
    assert [s["nodes"] for s in stages] == [["n1"], ["n3", "n4"], ["n6", "n7"], ["n8", "n9"], ["n10"]]
    assert not down & {n for s in stages for n in s["nodes"]}


def test_what_the_report_says_of_a_down_node():
    why = "the Node is NotReady (KubeletNotReady: container runtime is down)"
    text = left_behind(why)
    assert text.startswith(f"left behind: {why}; no stage rolls it or waits for it")
    assert "next rollout.yml or audit.yml run checks it" in text
    assert went(why) == "the Node went NotReady (KubeletNotReady: container runtime is down)"
    assert went("the Node is cordoned (spec.unschedulable)") == "the Node was cordoned (spec.unschedulable)"
    assert went("the Node is gone (or no longer matches bcd_node_selector)").startswith("the Node went away")


def test_the_pod_column_does_not_trust_a_ready_pod_on_a_notready_node():
    assert pod_column(POD_READY, node()) == "Ready"
    assert pod_column(POD_READY, node(ready="False")) == "unknown (Node NotReady)"
    assert pod_column(POD_READY) == "Ready"
    assert pod_column(None, node(ready="False")) == "none"
    assert pod_column({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, node()) == "NotReady"


@pytest.mark.parametrize("value", ["10%", "0%", "100%", 0, 3, "7"])
def test_bcd_rollout_max_down_accepts_counts_and_percentages(value):
    inv = load(base_vars(bcd_rollout_max_down=value))
    assert inv.bcd_rollout_max_down == (int(value) if str(value).isdigit() else value)


@pytest.mark.parametrize("value", ["150%", -1, "x", True, 1.5, "-5%"])
def test_bcd_rollout_max_down_refuses_other_values_naming_the_variable(value):
    with pytest.raises(ConfigError) as err:
        load(base_vars(bcd_rollout_max_down=value))
    assert "INVALID_CONFIG: bcd_rollout_max_down:" in str(err.value), str(err.value)


@pytest.mark.parametrize(("kwargs", "dark"), [
    ({}, False),
    ({"unschedulable": True}, False),
    ({"ready": "False", "reason": "KubeletNotReady"}, True),
    ({"ready": "Unknown"}, True),
    ({"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}, True),
    ({"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}, False),
], ids=["ready", "cordoned", "notready", "unknown", "unreachable", "other-taint"])
def test_a_down_node_is_dark_unless_only_cordoned(kwargs, dark):
    """A rollback waits for the pods the DaemonSet controller can still count available: a
    cordoned Node's pod runs on; a NotReady, unreachable or gone Node's does not."""
    assert node_dark(node(**kwargs)) is dark
    assert node_dark(slim_node(node(**kwargs))) is dark
    assert node_dark(None) is True

