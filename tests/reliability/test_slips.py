"""Slips and races: an operator's slip is refused before anything changes (sandbox).

The slips a new user's trial made: a typo in bcd_node_selector (the trial lost every bcd pod and
the run exited 0), a canary as large as the fleet (a crash hit every node at once), a token for
fewer nodes than join (test_false_success.py). Each is refused now, naming the variable, and the
figures say what was left as it was.
"""

from __future__ import annotations

import json

import pytest

from tests.reliability.harness import World

pytestmark = [pytest.mark.sandbox, pytest.mark.long]

TYPO = json.dumps({"bcd_node_selector": {"nvidia.com/gpu.presnt": "true"}})
NEXT = f"registry.example.com/better-compute/bcd:0.5.0@sha256:{'e5' * 32}"


def pod_uids(world: World) -> dict[str, str]:
    pods = world.core.list_namespaced_pod(world.namespace, label_selector="app.kubernetes.io/name=bcd").items
    return {p.spec.node_name or "-": p.metadata.uid for p in pods if not p.metadata.deletion_timestamp}


def test_a_selector_typo_is_refused_and_no_bcd_pod_is_deleted(ready_any_image, runner, reliability):
    world = ready_any_image
    reliability.describe("Slips and races", "rollout.yml with a typo in bcd_node_selector (nvidia.com/gpu.presnt)")
    before = pod_uids(world)
    run = runner.run("rollout.yml", "-e", TYPO)
    assert run.returncode != 0, run.tail()
    assert "selects no Node in this cluster" in run.text and "Nothing was changed" in run.text, run.tail()
    after = pod_uids(world)
    assert after == before, "every bcd pod as it was"
    assert world.lease_holder() is None
    reliability.result = (f"refused before any change, naming the selector and the {len(before)} bcd pods it would "
                          "have deleted (main deleted them all and exited 0)")
    reliability.figures.update({"bcd pods before": len(before), "bcd pods after": len(after),
                                "pods deleted": len(set(before.values()) - set(after.values())),
                                "run s": round(run.seconds, 1)})


def test_a_canary_as_large_as_the_fleet_is_refused(ready_any_image, runner, reliability):
    world = ready_any_image
    n = len(world.gpu_nodes())
    reliability.describe("Slips and races", f"rollout.yml with bcd_rollout_canary={n} on {n} nodes (no canary left)")
    before = pod_uids(world)
    run = runner.run("rollout.yml", "-e", f"bcd_image={NEXT}", "-e", f"bcd_rollout_canary={n}")
    assert run.returncode != 0, run.tail()
    assert "a failure hits the whole fleet at once" in run.text and "bcd_rollout_all_at_once" in run.text, run.tail()
    assert pod_uids(world) == before
    reliability.result = ("refused before any change: one stage would roll every node, so a failure would hit the "
                          "whole fleet at once; bcd_rollout_all_at_once=true allows it")
    reliability.figures.update({"nodes": n, "pods replaced": 0, "run s": round(run.seconds, 1)})
