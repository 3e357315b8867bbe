"""add-nodes.yml against the sandbox: Nodes added after adoption join with a token for exactly them.

add-nodes.yml is adopt-cluster.yml's play with adopt_mode=add-nodes: it counts the selected Nodes
that do not report, mints one token for that many into the join Secret, never changes the
DaemonSet, waits for the Nodes, then revokes the token and deletes the Secret. The
molecule scenario `rollout` runs it too, after a rollout.
"""

from __future__ import annotations

import json
import time

import pytest

from sandbox.control_plane.admin import Admin
from tests.helpers import recap, run_playbook
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("adopted")]


def tokens(cp, cpvars) -> dict[str, dict]:
    return {t["id"]: t for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def reporting(cp, cpvars) -> dict[str, str]:
    return {n["hostname"]: n["state"] for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def daemonset(sandbox) -> dict:
    return json.loads(sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "bcd", "-o", "json").stdout)


def test_nothing_to_join_mints_nothing(sandbox, cp, cpvars):
    before = tokens(cp, cpvars)
    run = run_playbook("add-nodes.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap(run.stdout)["sandbox"]["changed"] == 0
    assert "no token minted" in " ".join(run.stdout.split())
    assert tokens(cp, cpvars) == before


def test_two_new_nodes_join_with_a_token_for_exactly_two_then_it_is_revoked(sandbox, cp, cpvars):
    before = tokens(cp, cpvars)
    ds = daemonset(sandbox)
    new = sandbox.add_nodes(2)
    assert all(reporting(cp, cpvars).get(n) is None for n in new)

    run = run_playbook("add-nodes.yml", "-vv")
    out = run.stdout + run.stderr
    assert run.returncode == 0, run.stdout[-4000:]

    minted = {k: v for k, v in tokens(cp, cpvars).items() if k not in before}
    assert len(minted) == 1, minted
    (token,) = minted.values()
    assert token["maxUses"] == 2 and token["uses"] == 2, token
    assert token["revokedAt"], "revoked once the nodes joined"
    assert token["description"].endswith("playbook=add-nodes")
    gone = sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "the join Secret is deleted"

    states = reporting(cp, cpvars)
    for name in sandbox.gpu_node_names():
        assert states.get(name) in ("adopting", "ready"), (name, states.get(name))
    after = daemonset(sandbox)
    assert after["metadata"]["generation"] == ds["metadata"]["generation"], "add-nodes never changes the DaemonSet"
    assert after["spec"]["template"] == ds["spec"]["template"]
    n = len(sandbox.gpu_node_names())
    assert f"{n} of {n} selected nodes report" in out
    leaked = find_in_text(out, [cpvars["bcd_api_key"]])
    assert not leaked, "the API key leaked"


def test_a_token_for_fewer_nodes_than_to_join_is_refused_before_minting(sandbox, cp, cpvars):
    """Two new Nodes and bcd_token_max_uses=1: known before minting, so refused then, naming the
    variable and the count; no token minted, no Secret, the DaemonSet as it was. Today's main
    minted it, joined one and failed on the other's TokenExhausted. The next run joins both."""
    before = tokens(cp, cpvars)
    ds = daemonset(sandbox)
    new = sandbox.add_nodes(2)
    run = run_playbook("add-nodes.yml", "-e", "bcd_token_max_uses=1")
    out = run.stdout + run.stderr
    flat = " ".join(out.split())
    assert run.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    assert "bcd_token_max_uses is 1, below the 2 node(s) to join" in flat, out[-3000:]
    assert "no token was minted" in flat and "Minted join token" not in flat
    assert tokens(cp, cpvars) == before, "no token minted"
    gone = sandbox.kubectl("get", "secret", "-n", "bcd-system", "bcd-join", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "no join Secret"
    assert all(reporting(cp, cpvars).get(n) is None for n in new), "no node joined"
    assert daemonset(sandbox)["metadata"]["generation"] == ds["metadata"]["generation"]

    again = run_playbook("add-nodes.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(reporting(cp, cpvars).get(n) in ("adopting", "ready") for n in new)


def test_a_token_ttl_shorter_than_the_join_wait_warns_before_minting(sandbox, cp, cpvars):
    """bcd_token_ttl below bcd_join_timeout: a warning naming both before any token exists (a
    --check run: it mints nothing)."""
    before = tokens(cp, cpvars)
    sandbox.add_nodes(1)
    run = run_playbook("add-nodes.yml", "--check", "-e", "bcd_token_ttl=2m", "-e", "bcd_join_timeout=10m")
    flat = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == 0, run.stdout[-3000:]
    assert "bcd_token_ttl (120s) is shorter than the join wait, bcd_join_timeout (600s)" in flat, flat[-3000:]
    assert "would mint a join token" in flat
    assert tokens(cp, cpvars) == before
    joined = run_playbook("add-nodes.yml")
    assert joined.returncode == 0, joined.stdout[-3000:]
    assert "bcd_token_ttl (" not in joined.stdout + joined.stderr, "the default TTL (1 h) outlasts the default wait"


def bcd_pod(sandbox, node: str) -> dict | None:
    """The bcd pod on ``node`` (the newest, if two are there for a moment), or None."""
    pods = json.loads(sandbox.kubectl("get", "pods", "-n", "bcd-system", "-l", "app.kubernetes.io/name=bcd",
                                      "--field-selector", f"spec.nodeName={node}", "-o", "json").stdout)["items"]
    return max(pods, key=lambda p: p["metadata"]["creationTimestamp"]) if pods else None


def test_a_pod_whose_join_failed_before_the_token_is_restarted_not_waited_for(sandbox, cp, cpvars):
    """A Node added with no token: its bcd pod's join fails (NoToken) and backs off, as a kubelet's
    does (up to 5 minutes on a real node). add-nodes.yml mints, then deletes that pod once (its uid
    as precondition) so that its replacement joins now; the other Nodes' pods stay as they are."""
    others = {n: bcd_pod(sandbox, n)["metadata"]["uid"] for n in sandbox.gpu_node_names()}
    (new,) = sandbox.add_nodes(1)
    deadline = time.monotonic() + 90
    while True:
        pod = bcd_pod(sandbox, new)
        statuses = ((pod or {}).get("status") or {}).get("initContainerStatuses") or []
        term = ((statuses[0].get("lastState") or {}).get("terminated") or {}) if statuses else {}
        if term.get("exitCode") and "NoToken" in (term.get("message") or ""):
            break
        assert time.monotonic() < deadline, f"the bcd pod on {new} did not fail its join for want of a token: {pod}"
        time.sleep(1)
    # a kubelet's back-off reaches 5 minutes; the sandbox's stops at 32 s, so a retry of the pod's
    # own could fall between the mint and the read of the pods and join without the restart this
    # test is about: hold it as a kubelet at its cap would
    Admin.for_sandbox(sandbox.dir).hold_backoff(pod["metadata"]["uid"], 600)
    stale = pod["metadata"]

    run = run_playbook("add-nodes.yml")
    flat = " ".join(run.stdout.split())
    assert run.returncode == 0, run.stdout[-4000:]
    assert reporting(cp, cpvars).get(new) in ("adopting", "ready"), new
    # restarted once, by name, and said so
    assert "Restart each bcd pod whose join failed before the token existed" in run.stdout, run.stdout[-4000:]
    assert f"changed: [sandbox] => (item={stale['name']})" in flat, run.stdout[-4000:]
    assert bcd_pod(sandbox, new)["metadata"]["uid"] != stale["uid"], "the stale pod was replaced"
    # a pod whose join did not fail is never restarted
    assert {n: bcd_pod(sandbox, n)["metadata"]["uid"] for n in others} == others
