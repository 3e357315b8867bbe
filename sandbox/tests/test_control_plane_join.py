"""Join tests of the control-plane emulator in the sandbox cluster.

A DaemonSet rendered by our own renderer (bcd_render.render over bcd_model.load of the
variables the emulator wrote to control-plane.yml) runs on the KWOK GPU nodes, and the join
simulator joins its pods as bcd's ``join`` init container would: with a valid Secret every GPU
node reports ``adopting`` and the token's ``uses`` is their number; a revoked, expired, absent or
exhausted token, or a wrong pin, leaves nodes unjoined with a visible reason; a pod restarted
without the Secret spends nothing and loses no node; a restart of the emulator keeps every token
and node.

These tests need the sandbox to themselves while they run: at start and end they make the
control plane forget every node (admin ``/nodes/forget``), and they refuse to run while another
bcd DaemonSet is deployed (its pods would join the same nodes).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from sandbox.control_plane import service
from sandbox.control_plane.admin import Admin
from sandbox.tests.test_control_plane import Emulator
from tests.helpers import run_module

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "templates" / "config.toml.j2"
IMAGE = "registry.example.com/better-compute/bcd@sha256:" + "7e" * 32
GPU_SELECTOR = {"nvidia.com/gpu.present": "true"}


def wait_for(what: str, fn, timeout: float = 60.0, interval: float = 0.5):
    """Poll ``fn`` until it returns something truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; last: {value!r}")
        time.sleep(interval)


class Env:
    """The sandbox, its emulator and Kubernetes clients."""

    def __init__(self, sb):
        from kubernetes import client

        self.sb = sb
        self.api = sb.api_client()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.gpu = sb.gpu_node_names()
        self.cpu = sb.cpu_node_names()
        self.refresh()

    def refresh(self) -> None:
        self.cp = Emulator(self.sb.dir)
        self.admin = Admin.for_sandbox(self.sb.dir)

    # -- control plane ----------------------------------------------------------------------

    def token(self, max_uses: int, **kw) -> dict:
        return self.cp.create(f"join-test-{time.time_ns()}", maxUses=max_uses, **kw)

    def get_token(self, token_id: str) -> dict:
        return self.cp.ok("joinTokens.get", {"tenant": self.cp.tenant, "id": token_id})

    def nodes(self, limit: int = 500) -> list[dict]:
        items, cursor = [], None
        while True:
            body = {"tenant": self.cp.tenant, "limit": limit, **({"cursor": cursor} if cursor else {})}
            page = self.cp.ok("nodes.list", body)
            items += page["items"]
            cursor = page["nextCursor"]
            if not cursor:
                return items

    def by_host(self) -> dict[str, dict]:
        return {n["hostname"]: n for n in self.nodes()}

    def joins(self, ns: str) -> dict[str, dict]:
        """The last join attempt per Node, for the pods of namespace ``ns``."""
        return {j["node"]: j for j in self.admin.joins() if j["pod"].startswith(ns + "/")}

    # -- cluster ----------------------------------------------------------------------------

    def deploy(self, ns: str, token: str | None, **overrides) -> dict:
        """Render and apply Namespace, Secret (when ``token``), ConfigMap and DaemonSet in ``ns``."""
        from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_model, bcd_render
        variables = {k: v for k, v in self.cp.vars.items() if k != "bcd_api_key"}
        variables.update(bcd_image=IMAGE, bcd_namespace=ns, bcd_node_selector=GPU_SELECTOR, **overrides)
        inv = bcd_model.load(variables)
        objects = bcd_render.render(inv, TEMPLATE.read_text())
        kinds = [o["kind"] for o in objects]
        assert kinds == ["Namespace", "ConfigMap", "DaemonSet"], kinds
        self.sb.create_namespace(ns, labels=objects[0]["metadata"]["labels"])
        secret = inv.bcd_join_token_secret
        if token is not None:
            self.core.create_namespaced_secret(ns, {"metadata": {"name": secret.name}, "type": "Opaque",
                                                    "stringData": {secret.key: token}})
        self.core.create_namespaced_config_map(ns, objects[1])
        self.apps.create_namespaced_daemon_set(ns, objects[2])
        return {"inv": inv, "configmap": objects[1], "daemonset": objects[2], "vars": variables}

    def pods(self, ns: str) -> list:
        return self.core.list_namespaced_pod(ns).items

    def running(self, ns: str) -> dict[str, str]:
        """Node name -> pod name of the Running (not terminating) pods in ``ns``."""
        return {p.spec.node_name: p.metadata.name for p in self.pods(ns)
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp}

    def current(self, ns: str) -> dict[str, str]:
        """Node name -> pod name of the pods in ``ns`` that are not terminating, in any phase."""
        return {p.spec.node_name: p.metadata.name for p in self.pods(ns)
                if p.spec.node_name and not p.metadata.deletion_timestamp}

    def refusals(self, ns: str) -> dict[str, list]:
        """Pod name -> its BcdJoinRefused Events (message, count)."""
        out: dict[str, list] = {}
        for ev in self.core.list_namespaced_event(ns, field_selector="reason=BcdJoinRefused").items:
            assert ev.type == "Warning" and ev.involved_object.kind == "Pod"
            out.setdefault(ev.involved_object.name, []).append((ev.message, ev.count or 1))
        return out

    def restart_pods(self, ns: str, node: str | None = None) -> set[str]:
        """Delete the pods of ``ns`` (on ``node`` only, when given); return the deleted names."""
        gone = {p.metadata.name for p in self.pods(ns) if node is None or p.spec.node_name == node}
        for name in gone:
            self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        want = [node] if node else self.gpu
        wait_for(f"new pods in {ns} on {want}",
                 lambda: all(self.current(ns).get(n) not in (None, *gone) for n in want))
        return gone

    def remove(self, ns: str) -> None:
        """Delete the DaemonSet and its pods (waiting until no pod is left), then the namespace."""
        from kubernetes.client.rest import ApiException

        def quietly(fn, *args, **kw):
            try:
                fn(*args, **kw)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        for ds in self.apps.list_namespaced_daemon_set(ns).items:
            quietly(self.apps.delete_namespaced_daemon_set, ds.metadata.name, ns, propagation_policy="Orphan")
        for pod in self.pods(ns):
            quietly(self.core.delete_namespaced_pod, pod.metadata.name, ns, grace_period_seconds=0)
        wait_for(f"the pods of {ns} to go", lambda: not self.pods(ns), timeout=60)
        quietly(self.core.delete_namespace, ns)

    def other_bcd_daemonsets(self) -> list[str]:
        out = []
        for ds in self.apps.list_daemon_set_for_all_namespaces().items:
            for c in ds.spec.template.spec.init_containers or []:
                cmd = list(c.command or []) + list(c.args or [])
                if len(cmd) >= 2 and cmd[0].endswith("/bcd") and cmd[1] == "join":
                    out.append(f"{ds.metadata.namespace}/{ds.metadata.name}")
        return out


@pytest.fixture(scope="module")
def env(sandbox, cp, cpvars):
    """The join tests' world, on a sandbox that no earlier test left adopted (``ensure_unadopted``)."""
    from tests.sandbox_fixtures import ensure_unadopted

    ensure_unadopted(sandbox, cp, cpvars)
    service.start(sandbox.dir, sandbox.kubeconfig)
    e = Env(sandbox)
    others = e.other_bcd_daemonsets()
    if others:
        pytest.fail(f"another bcd DaemonSet is deployed ({', '.join(others)}): its pods would join the GPU nodes; "
                    "the join tests need the sandbox to themselves")
    assert len(e.gpu) >= 2, e.gpu
    e.admin.clear_faults()
    e.admin.forget_nodes()
    try:
        yield e
    finally:
        e.admin.clear_faults()
        e.admin.forget_nodes()
        e.api.close()


@pytest.fixture
def ns(env, request, sandbox):
    """A namespace of the test's own, on nodes no earlier join labelled (the joiner's
    ``bcd.dev/*`` labels stay on a Node after the emulator forgets it)."""
    from sandbox import baseline

    baseline.drop_bcd_labels(sandbox.dir)
    name = f"cpj-{time.time_ns() % 10**10}"
    yield name
    env.admin.clear_faults()
    env.remove(name)
    env.admin.forget_nodes()


def test_valid_secret_joins_every_gpu_node_and_restarts_spend_nothing(env, ns):
    n = len(env.gpu)
    token = env.token(n, description="join test")
    deployed = env.deploy(ns, token["token"])
    nodes = wait_for("every GPU node adopting",
                     lambda: (lambda b: b if sorted(b) == sorted(env.gpu) and all(
                         x["state"] == "adopting" for x in b.values()) else None)(env.by_host()))
    assert env.get_token(token["id"])["uses"] == n
    for host, node in nodes.items():
        assert node["pool"] == env.cp.pool and node["site"] == env.cp.vars["bcd_site_id"]
        assert node["trust"] == "tenant-controlled" and node["conditions"] == [] and node["joinedAt"].endswith("Z")
        labels = env.core.read_node(host).metadata.labels
        assert labels["bcd.dev/node-id"] == node["id"]
    for host in env.cpu:
        assert "bcd.dev/node-id" not in (env.core.read_node(host).metadata.labels or {})
    # nodes.list pages one node at a time, and filters by pool
    assert [x["id"] for x in env.nodes(limit=1)] == [x["id"] for x in env.nodes()]
    assert len(env.cp.ok("nodes.list", {"tenant": env.cp.tenant, "pool": env.cp.pool})["items"]) == n
    joined = {e.involved_object.name for e in env.core.list_namespaced_event(ns, field_selector="reason=BcdJoined").items}
    assert joined == set(env.running(ns).values())
    assert deployed["daemonset"]["spec"]["template"]["spec"]["volumes"][-1]["secret"]["optional"] is True

    # Revoke the token and delete the Secret, then restart every pod: nothing spent, no node lost.
    env.cp.ok("joinTokens.revoke", {"tenant": env.cp.tenant, "id": token["id"]})
    env.core.delete_namespaced_secret(deployed["inv"].bcd_join_token_secret.name, ns)
    env.restart_pods(ns)
    joins = wait_for("every new pod rejoined",
                     lambda: (lambda j: j if len(j) == n and all(x["reason"] == "Rejoined" for x in j.values())
                              else None)(env.joins(ns)))
    assert {h: j["nodeId"] for h, j in joins.items()} == {h: x["id"] for h, x in nodes.items()}
    after = env.get_token(token["id"])
    assert after["uses"] == n and after["revokedAt"]
    assert {h: (x["id"], x["state"]) for h, x in env.by_host().items()} == {
        h: (x["id"], "adopting") for h, x in nodes.items()}
    assert env.refusals(ns) == {}

    # The emulator restarted mid-way keeps every token and node, and pods still rejoin for free.
    tokens_before = env.cp.ok("joinTokens.list", {"tenant": env.cp.tenant, "limit": 500})
    nodes_before = env.nodes()
    service.restart(env.sb.dir)
    env.refresh()
    assert env.cp.ok("joinTokens.list", {"tenant": env.cp.tenant, "limit": 500}) == tokens_before
    assert env.nodes() == nodes_before
    env.restart_pods(ns, env.gpu[0])
    wait_for("the restarted pod rejoined", lambda: env.joins(ns).get(env.gpu[0], {}).get("reason") == "Rejoined")
    assert env.get_token(token["id"])["uses"] == n
    assert env.nodes() == nodes_before


def _revoked(env):
    t = env.token(len(env.gpu))
    env.cp.ok("joinTokens.revoke", {"tenant": env.cp.tenant, "id": t["id"]})
    return t


def _expired(env):
    t = env.token(len(env.gpu))
    env.admin.expire_token(t["id"])
    return t


@pytest.mark.parametrize("case,reason", [
    ("revoked", "TokenRevoked"),
    ("expired", "TokenExpired"),
    ("no-secret", "NoToken"),
    ("foreign-token", "TokenInvalid"),
    ("wrong-pin", "ConfigMismatch"),
    ("wrong-site", "ConfigMismatch"),
    ("wrong-gateway", "ConfigMismatch"),
])
def test_refused_joins_leave_every_node_unjoined_with_a_reason(env, ns, case, reason):
    token = None
    overrides: dict = {}
    if case == "revoked":
        token = _revoked(env)
    elif case == "expired":
        token = _expired(env)
    elif case in ("foreign-token",):
        token = {"id": None, "token": "bcdjt_jt_01forged.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
    else:
        token = env.token(len(env.gpu)) if case != "no-secret" else None
    if case == "wrong-pin":
        pins = dict(env.cp.vars["bcd_pins"])
        pins["join_signing"] = pins["serving_ca"]
        overrides["bcd_pins"] = pins
    elif case == "wrong-site":
        overrides["bcd_site_id"] = "site_elsewhere"
    elif case == "wrong-gateway":
        overrides["bcd_gateway_url"] = "https://gw.example.com:7443"
    deployed = env.deploy(ns, token["token"] if token else None, **overrides)
    refusals = wait_for(f"a {reason} Event on every pod, repeated",
                        lambda: (lambda r: r if len(r) == len(env.gpu) and any(
                            c >= 2 for evs in r.values() for _, c in evs) else None)(env.refusals(ns)), timeout=90)
    for pod, events in refusals.items():
        assert len(events) == 1, (pod, events)  # one Event per pod and reason, its count moving
        message, _ = events[0]
        assert message.startswith(reason + ": "), message
    if case == "wrong-pin":
        assert "pins.join_signing" in next(iter(refusals.values()))[0][0]
    assert env.nodes() == []
    assert all(not j["joined"] and j["reason"] == reason for j in env.joins(ns).values())
    for host in env.gpu:
        assert "bcd.dev/node-id" not in (env.core.read_node(host).metadata.labels or {})
    if token and token["id"]:
        assert env.get_token(token["id"])["uses"] == 0

    # As a kubelet shows a failed init container: never Ready, the join container exited 1 with
    # the reason as its termination message, restarting with back-off (Init:CrashLoopBackOff).
    for pod in env.pods(ns):
        assert_refused_like_a_kubelet(pod, reason)

    # The DaemonSet wait fails at once, not at its timeout, naming each node and the reason
    # (how soon is make bench's business, not a test's: the machine's load decides it).
    code, result = run_module("bcd_daemonset_wait", {"config": deployed["vars"], "kubeconfig": str(env.sb.kubeconfig)})
    assert code != 0 and "(not waiting out the " in result["msg"], result
    assert sorted(f["node"] for f in result["failed_nodes"]) == sorted(env.gpu), result
    for line in result["failed_nodes"]:
        assert f"bcd join exited 1: {reason}: " in line["why"], line
    for host in env.gpu:
        assert f"{host}: pod " in result["msg"]


def assert_refused_like_a_kubelet(pod, reason: str) -> None:
    """``pod`` (a V1Pod) looks as a kubelet shows a pod whose join init container is refused."""
    ready = {c.type: c.status for c in pod.status.conditions or []}
    assert pod.status.phase == "Pending" and ready.get("Ready") == "False", (pod.metadata.name, pod.status.phase, ready)
    (join,) = [c for c in pod.status.init_container_statuses if c.name == "join"]
    assert join.state.waiting and join.state.waiting.reason == "CrashLoopBackOff", join.state
    assert join.last_state.terminated.exit_code == 1 and join.last_state.terminated.message.startswith(reason + ": ")
    assert not join.ready
    assert all(not c.ready and c.state.waiting and c.state.waiting.reason == "PodInitializing"
               for c in pod.status.container_statuses), pod.status.container_statuses


def test_max_uses_one_short_leaves_one_node_unjoined(env, ns):
    n = len(env.gpu)
    token = env.token(n - 1)
    env.deploy(ns, token["token"])
    refused = wait_for("a repeated TokenExhausted Event",
                       lambda: (lambda r: r if r and any(c >= 2 for evs in r.values() for _, c in evs) else None)(
                           env.refusals(ns)), timeout=90)
    assert len(refused) == 1
    (pod, events), = refused.items()
    assert events[0][0].startswith("TokenExhausted: ")
    nodes = env.by_host()
    assert len(nodes) == n - 1 and all(x["state"] == "adopting" for x in nodes.values())
    unjoined = [h for h in env.gpu if h not in nodes]
    assert env.current(ns)[unjoined[0]] == pod
    assert set(env.running(ns)) == set(nodes)  # the spent token's nodes run; the refused one does not
    (refused_pod,) = [p for p in env.pods(ns) if p.metadata.name == pod]
    assert_refused_like_a_kubelet(refused_pod, "TokenExhausted")
    got = env.get_token(token["id"])
    assert got["uses"] == got["maxUses"] == n - 1


def test_a_held_back_off_keeps_that_pod_from_joining_the_others_join(env, ns):
    """Admin ``POST /pods/backoff``: a pod whose join failed is not tried again before the time it
    names, as a kubelet at its 5-minute cap, while the other pods retry and join once the token is
    there; an unknown pod is a 404."""
    from sandbox.control_plane.admin import AdminError

    deployed = env.deploy(ns, None)
    failed = wait_for("every pod's join failed for want of a token",
                      lambda: (lambda r: r if len(r) == len(env.gpu) else None)(env.refusals(ns)), timeout=90)
    (held,) = [p for p in env.pods(ns) if p.metadata.name == sorted(failed)[0]]
    got = env.admin.hold_backoff(held.metadata.uid, 600)
    assert got["uid"] == held.metadata.uid and got["seconds"] == 600 and got["failures"] >= 1, got
    with pytest.raises(AdminError, match="404"):
        env.admin.hold_backoff("no-such-uid", 600)
    secret = deployed["inv"].bcd_join_token_secret
    env.core.create_namespaced_secret(ns, {"metadata": {"name": secret.name}, "type": "Opaque",
                                           "stringData": {secret.key: env.token(len(env.gpu))["token"]}})
    since = time.monotonic()
    others = {p.spec.node_name for p in env.pods(ns)} - {held.spec.node_name}
    wait_for("the other pods joined", lambda: others <= set(env.by_host()), timeout=120)
    # past the sandbox's longest back-off (32 s) and a pass of the simulator: an unheld pod retries
    time.sleep(max(0.0, since + 40 - time.monotonic()))
    attempts = env.joins(ns)[held.spec.node_name]
    assert not attempts["joined"] and attempts["reason"] == "NoToken", attempts
    assert held.spec.node_name not in env.by_host()


@pytest.mark.long  # slow: make test-long keeps make test within its budget
def test_refusal_of_a_known_node_shows_as_a_condition_and_offline(env, ns):
    n = len(env.gpu)
    token = env.token(n)
    deployed = env.deploy(ns, token["token"])
    wait_for("every GPU node adopting", lambda: len(env.by_host()) == n)
    first, second = env.gpu[0], env.gpu[1]

    # gpu-node-1: the control plane refuses it (fault injection); gpu-node-2: a ConfigMap with a
    # wrong pin (a bad render) reaches its restarted pod.
    env.admin.set_faults({"refuseJoin": {first: "under maintenance"}})
    cm = deployed["configmap"]
    bad = cm["data"]["config.toml"].replace(env.cp.vars["bcd_pins"]["join_encryption"],
                                            env.cp.vars["bcd_pins"]["serving_ca"])
    env.core.patch_namespaced_config_map(cm["metadata"]["name"], ns, {"data": {"config.toml": bad}})
    env.restart_pods(ns, first)
    env.restart_pods(ns, second)

    def conditions():
        nodes = env.by_host()
        c1 = {c["type"]: c for c in nodes[first]["conditions"]}.get("JoinRefused")
        c2 = {c["type"]: c for c in nodes[second]["conditions"]}.get("JoinRefused")
        return (c1, c2) if c1 and c2 else None

    c1, c2 = wait_for("JoinRefused conditions", conditions)
    assert c1 == {"type": "JoinRefused", "status": "True", "reason": "Refused", "message": "under maintenance"}
    assert c2["status"] == "True" and c2["reason"] == "ConfigMismatch" and "pins.join_encryption" in c2["message"]
    refusals = env.refusals(ns)
    assert refusals[env.current(ns)[first]][0][0] == "Refused: under maintenance"
    assert refusals[env.current(ns)[second]][0][0].startswith("ConfigMismatch: ")
    # A node that joined before starts without a token, but not when its join is refused: the
    # pods never turn Ready (Init:CrashLoopBackOff) and bcd does not report: offline after the grace.
    pods = {p.spec.node_name: p for p in env.pods(ns) if not p.metadata.deletion_timestamp}
    assert_refused_like_a_kubelet(pods[first], "Refused")
    assert_refused_like_a_kubelet(pods[second], "ConfigMismatch")
    offline = wait_for("both refused nodes offline", lambda: (lambda b: b if b[first]["state"] == "offline"
                                                              and b[second]["state"] == "offline" else None)(
        env.by_host()), timeout=60)
    reporting = {c["type"]: c for c in offline[first]["conditions"]}["Reporting"]
    assert reporting["status"] == "False" and reporting["reason"] == "NoReadyPod"
    assert all(offline[h]["state"] == "adopting" for h in env.gpu[2:])
    assert env.get_token(token["id"])["uses"] == n

    # Lift the fault and fix the ConfigMap: both come back as they were, for free.
    env.admin.clear_faults()
    env.core.patch_namespaced_config_map(cm["metadata"]["name"], ns, {"data": {"config.toml": cm["data"]["config.toml"]}})
    env.restart_pods(ns, second)
    back = wait_for("both nodes adopting again", lambda: (lambda b: b if all(
        b[h]["state"] == "adopting" and b[h]["conditions"] == [] for h in (first, second)) else None)(env.by_host()))
    assert {h: x["id"] for h, x in back.items()} == {h: x["id"] for h, x in offline.items()}
    assert env.get_token(token["id"])["uses"] == n


def test_trust_follows_the_seed_pool_policy(env, ns):
    seed_file = env.sb.dir / "control-plane" / "seed.yml"
    original = seed_file.read_text()
    seed = yaml.safe_load(original)
    seed["pool"]["platformOperated"] = True
    assert seed["site"]["kind"] == "platform" and seed["site"]["owner"] == seed["tenant"]
    seed_file.write_text(yaml.safe_dump(seed))
    try:
        service.restart(env.sb.dir)
        env.refresh()
        assert env.cp.ok("pools.get", {"tenant": env.cp.tenant, "id": env.cp.pool})["policy"] == {
            "kubernetes": {"platformOperated": True}}
        token = env.token(len(env.gpu))
        env.deploy(ns, token["token"])
        nodes = wait_for("every GPU node adopting", lambda: (lambda b: b if len(b) == len(env.gpu) else None)(
            env.by_host()))
        assert {x["trust"] for x in nodes.values()} == {"platform"}
    finally:
        seed_file.write_text(original)
        service.restart(env.sb.dir)
        env.refresh()


def _preflight(env) -> tuple[int, dict]:
    """The control-plane part of bcd_preflight's answer, as adopt-cluster.yml's preflight gets it."""
    variables = {k: v for k, v in env.cp.vars.items() if k != "bcd_api_key"}
    variables.update(bcd_image=IMAGE, bcd_node_selector=GPU_SELECTOR, bcd_kubeconfig=str(env.sb.kubeconfig))
    code, result = run_module("bcd_preflight", {"config": variables, "api_key": env.cp.vars["bcd_api_key"]})
    return code, result.get("control_plane", result)


def test_every_pin_that_can_be_checked_is_and_the_others_are_said_so(env):
    code, result = _preflight(env)
    assert code == 0, result
    assert result["pins_checked"] == ["join_encryption", "join_signing", "serving_ca"]
    assert not any("could not be checked" in line for line in result["warnings_text"])

    # A control plane that publishes no joinSigningKey, and a gateway this controller cannot
    # reach: one line each, and the preflight goes on.
    seed_file = env.sb.dir / "control-plane" / "seed.yml"
    original = seed_file.read_text()
    seed = yaml.safe_load(original)
    seed.update(publish_join_signing_key=False, gateway_name="gateway.invalid")
    seed_file.write_text(yaml.safe_dump(seed))
    try:
        service.restart(env.sb.dir)
        env.refresh()
        assert env.cp.vars["bcd_gateway_url"].startswith("https://gateway.invalid:")
        code, result = _preflight(env)
        assert code == 0, result
        assert result["pins_checked"] == ["join_encryption"]
        lines = [line for line in result["warnings_text"] if "could not be checked" in line]
        assert len(lines) == 2 and all("\n" not in line for line in lines), lines
        assert lines[0].startswith("bcd_pins.join_signing could not be checked: the control plane's discovery "
                                   "document publishes no joinSigningKey")
        assert lines[1].startswith(f"bcd_pins.serving_ca could not be checked: the gateway {env.cp.vars['bcd_gateway_url']} "
                                   "is not reachable from here")
    finally:
        seed_file.write_text(original)
        service.restart(env.sb.dir)
        env.refresh()
