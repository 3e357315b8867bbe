"""rollout.yml against the sandbox: a real API server, KWOK nodes and the control-plane emulator.

The molecule scenario `rollout` checks what rollout.yml promises end to end (a rollout, the same
command again, a `dead…` digest rolled back, two runs at once, add-nodes.yml). These tests add
what it does not: check mode, a refused digest, percentages, no secret in the output, the report,
a failed rollout left as it is (`bcd_rollout_rollback: false`), the refusal that follows and the
recovery with `bcd_rollout_force`, and a lock held by someone else (refused) or expired (taken
over). Each starts from the cluster as adopted on the inventory's digest (the ``adopted``
fixture), and rolls it on from there itself, in any order.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from tests.helpers import daemonset, image, kget, pods, ready, recap, run_playbook
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]

REPO = "registry.example.com/better-compute/bcd"
GOOD = [f"{REPO}:0.2.0@sha256:{'b2' * 32}", f"{REPO}:0.3.0@sha256:{'c3' * 32}", f"{REPO}:0.4.0@sha256:{'d4' * 32}"]
DEAD = f"{REPO}:0.9.0@sha256:dead{'0f' * 30}"
# pods turn Ready, then crash 10 s later (sandbox/kwok/kwok.yaml, pod-ready-then-crash)
CRASH = f"{REPO}:0.8.0@sha256:fa11{'0e' * 30}"  # Ready, then crashes 2 s later: within the sandbox's 5 s soak
LATE = f"{REPO}:0.8.1@sha256:1a7e{'0e' * 30}"  # Ready, then crashes 15 s later: after the sandbox's soak (kwok.yaml)
LEASE = "bcd-ansible-lock"


def gpu_nodes(sandbox) -> list[str]:
    return sandbox.gpu_node_names()


def reporting(cp, cpvars) -> dict[str, str]:
    return {n["hostname"]: n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def token_count(cp, cpvars) -> int:
    return len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))


def rollout(*args: str, report=None):
    extra = ["-e", f"bcd_report_out={report}"] if report else []
    return run_playbook("rollout.yml", *extra, *args)


def assert_fleet_on(sandbox, cp, cpvars, want: str) -> None:
    nodes = gpu_nodes(sandbox)
    running = pods(sandbox)
    assert sorted(running) == sorted(nodes)  # gpu_nodes is in natural order (gpu-node-2 before gpu-node-10)
    assert {n: (image(p), ready(p)) for n, p in running.items()} == {n: (want, True) for n in nodes}
    states = reporting(cp, cpvars)
    assert all(states.get(n) in ("adopting", "ready") for n in nodes), states


def test_a_digest_that_is_not_one_is_refused_before_any_call(sandbox):
    rv = daemonset(sandbox)["metadata"]["resourceVersion"]
    run = rollout("-e", f"bcd_image={REPO}@sha256:1234")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "INVALID_CONFIG: bcd_image" in out and "Traceback" not in out
    assert daemonset(sandbox)["metadata"]["resourceVersion"] == rv


def test_check_mode_shows_the_diff_and_the_plan_and_changes_nothing(sandbox):
    before = daemonset(sandbox)
    run = rollout("--check", "-e", f"bcd_image={GOOD[0]}")
    assert run.returncode == 0, run.stdout[-3000:]
    out = " ".join(run.stdout.split())
    assert f"+ - image: {GOOD[0]}" in out, out[-3000:]
    assert "canary" in out and "will roll" in out
    # a check run reports changed for what it would change (the DaemonSet's image), and prints
    # the plan once
    assert recap(run.stdout)["sandbox"]["changed"] >= 1, run.stdout[-3000:]
    assert len(re.findall(r"rollout [0-9a-f]{12} -> [0-9a-f]{12}: \d+ of \d+ selected node\(s\) roll", out)) == 1, out[-3000:]
    after = daemonset(sandbox)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0, "no lock left"


def test_rollout_in_a_canary_and_percentage_batches_mints_no_token_and_says_so(sandbox, cp, cpvars, tmp_path):
    nodes = gpu_nodes(sandbox)
    tokens = token_count(cp, cpvars)
    report = tmp_path / "rollout.json"
    run = rollout("-e", f"bcd_image={GOOD[0]}", "-e", "bcd_rollout_max_unavailable=50%", "-vv", report=report)
    out = run.stdout + run.stderr
    assert run.returncode == 0, run.stdout[-4000:]
    assert_fleet_on(sandbox, cp, cpvars, GOOD[0])
    assert token_count(cp, cpvars) == tokens, "a rollout mints no token"
    assert daemonset(sandbox)["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}

    summary = json.loads(report.read_text())
    assert summary["result"] == "succeeded" and summary["schema_version"] == 1  # docs/reports.md
    assert summary["to"]["image"] == GOOD[0] and summary["to"]["digest"] == GOOD[0].split("@")[1]
    half = -(-(len(nodes)) // 2)  # 50% of the selected nodes, rounded up
    expected = [nodes[:1]] + [nodes[1:][i:i + half] for i in range(0, len(nodes) - 1, half)]
    # the canary is the plan's first node; the DaemonSet controller picks each batch's nodes: the
    # sizes are the plan's, every node rolled once
    assert summary["stages"][0]["nodes"] == nodes[:1]
    assert [s["size"] for s in summary["stages"]] == [len(e) for e in expected]
    assert [len(s["nodes"]) for s in summary["stages"]] == [len(e) for e in expected], summary["stages"]
    assert sorted(n for s in summary["stages"] for n in s["nodes"]) == sorted(nodes)
    assert [s["name"] for s in summary["stages"]] == ["canary"] + [f"batch {i + 1}" for i in range(len(expected) - 1)]
    assert all(s["outcome"] == "passed" for s in summary["stages"])
    assert {r["name"] for r in summary["nodes"]} == set(nodes)
    leaked = find_in_text(out + report.read_text(), [cpvars["bcd_api_key"]])
    assert not leaked, "the API key leaked"

    again = rollout("-e", f"bcd_image={GOOD[0]}", "-e", "bcd_rollout_max_unavailable=50%")
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap(again.stdout)["sandbox"]["changed"] == 0
    assert "and healthy: nothing to do" in " ".join(again.stdout.split())
    assert token_count(cp, cpvars) == tokens


def test_adopt_and_add_nodes_never_roll_the_image_back_silently(sandbox, cp, cpvars):
    """The fleet runs GOOD[0] (rolled out first); the inventory still names its own digest.
    adopt-cluster.yml refuses, naming both and rollout.yml, before anything changes; add-nodes.yml
    (which never changes the DaemonSet) says so and goes on."""
    import yaml

    from tests.helpers import ROOT

    first = rollout("-e", f"bcd_image={GOOD[0]}")
    assert first.returncode == 0, first.stdout[-3000:]
    inventory = yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())["bcd_image"]
    before = daemonset(sandbox)
    tokens = token_count(cp, cpvars)
    run = run_playbook("adopt-cluster.yml")
    flat = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, flat[-3000:]
    assert f"runs {GOOD[0]}, but bcd_image in the inventory is {inventory}" in flat, flat[-3000:]
    assert "rollout.yml" in flat and "Nothing was changed and no token minted" in flat
    assert daemonset(sandbox)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert token_count(cp, cpvars) == tokens
    assert_fleet_on(sandbox, cp, cpvars, GOOD[0])

    added = run_playbook("add-nodes.yml")
    flat = " ".join((added.stdout + added.stderr).split())
    assert added.returncode == 0, flat[-3000:]
    assert "[WARNING]" in flat  # an Ansible warning, as AWX counts them
    assert f"DaemonSet bcd-system/bcd runs {GOOD[0]}, but bcd_image in the inventory is {inventory}" in flat
    assert daemonset(sandbox)["metadata"]["generation"] == before["metadata"]["generation"]

    # with the inventory at the running digest there is nothing to refuse
    same = run_playbook("adopt-cluster.yml", "-e", f"bcd_image={GOOD[0]}")
    assert same.returncode == 0, same.stdout[-3000:]
    assert recap(same.stdout)["sandbox"]["changed"] == 0


def test_a_pod_that_turns_ready_then_crashes_fails_the_canary_soak_and_is_rolled_back(sandbox, cp, cpvars, tmp_path):
    """A digest whose pods turn Ready and crash 2 s later: the canary's gate would pass at once
    without a soak; with the sandbox inventory's own (5 s; default 30 s) it sees the crash, fails
    and rolls back."""
    crashed_in_soak(sandbox, cp, cpvars, tmp_path, CRASH)
    ds = daemonset(sandbox)
    assert ds["spec"]["minReadySeconds"] == 5, "the render's soak (the sandbox inventory's) is the DaemonSet's"


def test_a_pod_that_crashes_after_the_soak_passes_it_unless_the_soak_is_longer(sandbox, cp, cpvars, tmp_path):
    """A digest whose pods crash 15 s after turning Ready: a 5 s soak (the sandbox's) ends before
    the crash, which is what soak cannot catch; a soak longer than the delay (here 20 s) sees it,
    fails the canary and rolls back."""
    crashed_in_soak(sandbox, cp, cpvars, tmp_path, LATE, "-e", "bcd_rollout_soak=20")


def crashed_in_soak(sandbox, cp, cpvars, tmp_path, digest: str, *args: str) -> None:
    nodes = gpu_nodes(sandbox)
    before = image(pods(sandbox)[nodes[0]])
    report = tmp_path / "soak.json"
    run = rollout("-e", f"bcd_image={digest}", *args, report=report)
    assert run.returncode != 0, run.stdout[-4000:]
    summary = json.loads(report.read_text())
    canary = nodes[0]
    assert summary["result"] == "rolled_back", summary
    assert [f["node"] for f in summary["failed_nodes"]] == [canary]
    assert "soak" in summary["failed_nodes"][0]["why"] and "not Ready" in summary["failed_nodes"][0]["why"], summary
    assert [s["outcome"] for s in summary["stages"]][:1] == ["failed"]
    assert all(s["outcome"] == "not started" for s in summary["stages"][1:])
    # the canary's pod was replaced twice: the recap counts a change beside the failure
    assert recap(run.stdout)["sandbox"]["changed"] >= 1, run.stdout[-3000:]
    assert_fleet_on(sandbox, cp, cpvars, before)


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_without_rollback_a_failed_canary_stays_and_the_next_run_refuses_until_forced(sandbox, cp, cpvars, tmp_path):
    nodes = gpu_nodes(sandbox)
    # whatever digest the fleet runs now (make test-long runs this without the tests before it)
    was = {n: image(p) for n, p in pods(sandbox).items()}
    report = tmp_path / "failed.json"
    run = rollout("-e", f"bcd_image={DEAD}", "-e", "bcd_rollout_rollback=false", "-e", "bcd_rollout_gate_timeout=8",
                  report=report)
    assert run.returncode != 0
    summary = json.loads(report.read_text())
    canary = nodes[0]
    assert summary["result"] == "failed" and summary["rollback"] is None
    assert [f["node"] for f in summary["failed_nodes"]] == [canary]
    assert "OnDelete" in summary["headline"] and any("NOT ROLLED BACK" in n for n in summary["notes"])
    ds = daemonset(sandbox)
    assert ds["spec"]["updateStrategy"]["type"] == "OnDelete", "nothing else rolls"
    running = pods(sandbox)
    assert image(running[canary]) == DEAD and not ready(running[canary])
    assert all(image(running[n]) == was[n] and ready(running[n]) for n in nodes[1:]), (was, running)

    # the next scheduled run must not take the fleet further down: it refuses, naming the canary
    refused = rollout("-e", f"bcd_image={GOOD[1]}", report=tmp_path / "refused.json")
    out = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode != 0
    assert f"{canary}: pod" in out and "not Ready" in out and "incomplete" in out
    assert json.loads((tmp_path / "refused.json").read_text())["result"] == "refused"
    assert image(pods(sandbox)[nodes[1]]) == was[nodes[1]], "nothing changed"

    # an operator recovers by rolling to a digest they trust, forced
    forced = rollout("-e", f"bcd_image={GOOD[1]}", "-e", "bcd_rollout_force=true", "-e", "bcd_rollout_max_unavailable=100%")
    assert forced.returncode == 0, forced.stdout[-4000:]
    assert_fleet_on(sandbox, cp, cpvars, GOOD[1])
    assert daemonset(sandbox)["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def lease(sandbox, holder: str, renewed: dt.datetime, seconds: int = 600) -> None:
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": "bcd-system"},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": stamp, "renewTime": stamp}}
    sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
    sandbox.kubectl("create", "-f", "-", input=json.dumps(doc))


def test_a_lock_held_elsewhere_refuses_at_once_and_an_expired_one_is_taken_over(sandbox, cp, cpvars, tmp_path):
    now = dt.datetime.now(dt.UTC)
    holder = "ops@scheduler-2 pid=4242 run=20260101T000000Z-1"
    was = {image(p) for p in pods(sandbox).values()}
    lease(sandbox, holder, now)
    try:
        run = rollout("-e", f"bcd_image={GOOD[2]}", report=tmp_path / "locked.json")
        out = " ".join((run.stdout + run.stderr).split())
        assert run.returncode != 0
        assert f"locked by {holder}" in out
        summary = json.loads((tmp_path / "locked.json").read_text())
        assert summary["result"] == "locked" and summary["holder"] == holder and summary["schema_version"] == 1
        assert kget(sandbox, "lease", "-n", "bcd-system", LEASE)["spec"]["holderIdentity"] == holder, "not touched"
        assert {image(p) for p in pods(sandbox).values()} == was, "nothing rolled"

        lease(sandbox, holder, now - dt.timedelta(hours=2))
        taken = rollout("-e", f"bcd_image={GOOD[2]}", "-e", "bcd_rollout_canary=0", "-e", "bcd_rollout_max_unavailable=100%",
                        "-e", "bcd_rollout_all_at_once=true")
        assert taken.returncode == 0, taken.stdout[-4000:]
        assert f"took over Lease bcd-system/{LEASE} from {holder}" in " ".join((taken.stdout + taken.stderr).split())
        assert_fleet_on(sandbox, cp, cpvars, GOOD[2])
        assert sandbox.kubectl("get", "lease", "-n", "bcd-system", LEASE, check=False).returncode != 0, "released"
    finally:
        sandbox.kubectl("delete", "lease", "-n", "bcd-system", LEASE, "--ignore-not-found")
