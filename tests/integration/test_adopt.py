"""adopt-cluster.yml against the sandbox: a real API server, KWOK nodes and the control-plane emulator.

Each test starts from the cluster it names (``unadopted`` or ``adopted``), in any order: the
first adoption, a second run that changes nothing, check mode, then failures (a refused join, a
selector that selects nothing, a wrong pin).
"""

from __future__ import annotations

import json
import stat
import subprocess
import time

import pytest
from kubernetes import client as k8s

from tests.helpers import recap, run_playbook
from tests.secrets_scan import files_touched_since, find_in_files, find_in_text

pytestmark = [pytest.mark.sandbox]


@pytest.fixture(scope="module")
def admin(sandbox):
    from sandbox.control_plane.admin import Admin

    a = Admin.for_sandbox(sandbox.dir)
    a.clear_faults()
    yield a
    a.clear_faults()


def tokens(cp, cpvars) -> list[dict]:
    return list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))


def gpu_nodes(sandbox) -> list[str]:
    core = k8s.CoreV1Api(sandbox.api_client())
    return sorted(n.metadata.name for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items)


def reporting(cp, cpvars) -> dict[str, dict]:
    return {n["hostname"]: n for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}


def annotations_and_events(sandbox, namespace="bcd-system") -> str:
    api = sandbox.api_client()
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    parts = [json.dumps(core.read_namespace(namespace).metadata.annotations or {})]
    for cm in core.list_namespaced_config_map(namespace).items:
        parts.append(json.dumps(cm.metadata.annotations or {}))
    for ds in apps.list_namespaced_daemon_set(namespace).items:
        parts.append(json.dumps(ds.metadata.annotations or {}))
        parts.append(json.dumps(ds.spec.template.metadata.annotations or {}))
    for ev in core.list_namespaced_event(namespace).items:
        parts.append(f"{ev.reason} {ev.message}")
    return "\n".join(parts)


@pytest.mark.usefixtures("unadopted")
def test_selector_that_selects_nothing_fails_in_preflight(sandbox, cp, cpvars):
    before = len(tokens(cp, cpvars))
    run = run_playbook("adopt-cluster.yml", "-e", '{"bcd_node_selector": {"nvidia.com/gpu.product": "no-such-gpu"}}')
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "bcd_node_selector" in out and "selects no Node" in out
    assert "Traceback" not in out
    assert len(tokens(cp, cpvars)) == before, "no token was minted"


@pytest.mark.usefixtures("unadopted")
def test_adopt_joins_every_gpu_node_and_leaves_no_token_or_secret(sandbox, cp, cpvars, tmp_path):
    secret_out = tmp_path / "bcd-join-secret.json"
    started = time.time() - 1
    run = run_playbook("adopt-cluster.yml", "-vvvv", "--diff", "-e", f"bcd_join_secret_out={secret_out}",
                       env={"ANSIBLE_LOG_PATH": str(tmp_path / "ansible.log")})
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]

    # every GPU node reports adopting, and the report says so
    nodes = reporting(cp, cpvars)
    for name in gpu_nodes(sandbox):
        assert nodes[name]["state"] in ("adopting", "ready"), nodes.get(name)
        assert name in out
    n = len(gpu_nodes(sandbox))
    assert f"{n} of {n} selected nodes report" in out

    # the token: minted once, for the nodes to join, spent by them, revoked; the Secret is gone
    mine = [t for t in tokens(cp, cpvars) if (t.get("description") or "").startswith("bcd-ansible cluster=sandbox ")]
    assert mine and all(t["revokedAt"] for t in mine)
    core = k8s.CoreV1Api(sandbox.api_client())
    assert core.list_namespaced_secret("bcd-system", field_selector="metadata.name=bcd-join").items == []

    # the 0600 Secret file is the one place the token may be; it is nowhere else
    assert stat.S_IMODE(secret_out.stat().st_mode) == 0o600
    manifest = json.loads(secret_out.read_text())
    import base64

    token = base64.b64decode(manifest["data"]["token"]).decode()
    api_key = cpvars["bcd_api_key"]
    assert len(token) > 16
    secrets = [token, api_key]  # never in an assert expression: pytest would print them when it fails
    in_output = find_in_text(out, secrets)
    assert not in_output, "a secret is in the -vvvv --diff output"
    in_log = find_in_text((tmp_path / "ansible.log").read_text(), secrets)
    assert not in_log, "a secret is in ANSIBLE_LOG_PATH"
    in_files = find_in_files(files_touched_since(started, exclude=(secret_out, sandbox.dir)), secrets)
    assert not in_files, "a secret is in a file"
    in_cluster = find_in_text(annotations_and_events(sandbox), secrets)
    assert not in_cluster, "a secret is in an annotation or Event"
    # server-side apply only: no last-applied annotation anywhere
    assert "last-applied-configuration" not in annotations_and_events(sandbox)


@pytest.mark.usefixtures("adopted")
def test_second_run_changes_nothing_and_mints_no_token(sandbox, cp, cpvars):
    before = len(tokens(cp, cpvars))
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert recap(run.stdout)["sandbox"]["changed"] == 0
    assert "nothing to do, no token minted" in " ".join(run.stdout.split())
    assert len(tokens(cp, cpvars)) == before


def lease(sandbox, holder: str, renewed: str | None = None) -> None:
    """The cluster's lock Lease held by ``holder``, renewed at ``renewed`` (default now), for 30 minutes."""
    import datetime as dt

    at = renewed or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    doc = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "bcd-ansible-lock", "namespace": "bcd-system",
                        "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1800, "acquireTime": at, "renewTime": at}}
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(doc))


def lease_holder(sandbox) -> str | None:
    got = sandbox.kubectl("get", "lease", "-n", "bcd-system", "bcd-ansible-lock", "-o", "json", check=False)
    return json.loads(got.stdout)["spec"].get("holderIdentity") if got.returncode == 0 else None


@pytest.mark.usefixtures("adopted")
def test_a_lock_an_interrupted_run_left_is_taken_over_and_released(sandbox, cp, cpvars):
    """An earlier run on this host died holding the lock (its cleanup failed): the next run, with
    nothing else to do, says so, takes the lock over and releases it, as the left_behind callback
    promised. A lock another host holds and has not let expire is not this run's: nothing to do,
    and it stays."""
    import socket

    ended = subprocess.Popen(["true"])  # an ansible-playbook that ran here and is gone
    ended.wait()
    holder = f"root@{socket.gethostname()} pid={ended.pid} run=20261203T000000Z-1"
    lease(sandbox, holder)
    try:
        run = run_playbook("adopt-cluster.yml")
        flat = " ".join(run.stdout.split())
        assert run.returncode == 0, run.stdout[-3000:]
        assert ("An earlier run on this cluster did not clean up: its lock (Lease bcd-system/bcd-ansible-lock held by "
                f"{holder}: its process on this host is gone); this run takes the lock over") in flat, run.stdout[-3000:]
        assert "nothing to do" not in flat
        assert lease_holder(sandbox) is None, "taken over and released"
        assert recap(run.stdout)["sandbox"]["changed"] == 0, "nothing else changed"

        other = "someone@another-host pid=1 run=20261203T000000Z-2"
        lease(sandbox, other)
        run = run_playbook("adopt-cluster.yml")
        assert run.returncode == 0, run.stdout[-3000:]
        assert "nothing to do, no token minted" in " ".join(run.stdout.split()), run.stdout[-3000:]
        assert lease_holder(sandbox) == other, "another host's live lock is left alone"
    finally:
        sandbox.kubectl("delete", "lease", "-n", "bcd-system", "bcd-ansible-lock", "--ignore-not-found", check=False)


@pytest.mark.usefixtures("adopted")
def test_check_mode_shows_the_change_and_changes_nothing(sandbox, cp, cpvars):
    apps = k8s.AppsV1Api(sandbox.api_client())
    core = k8s.CoreV1Api(sandbox.api_client())
    ds_before = apps.read_namespaced_daemon_set("bcd", "bcd-system")
    cm_before = core.read_namespaced_config_map("bcd-config", "bcd-system")
    before = len(tokens(cp, cpvars))
    run = run_playbook("adopt-cluster.yml", "--check", "--diff", "-e", "bcd_log_level=debug")
    assert run.returncode == 0, run.stdout[-3000:]
    assert 'log_level = "debug"' in run.stdout, "the diff shows the config.toml change"
    assert apps.read_namespaced_daemon_set("bcd", "bcd-system").metadata.resource_version == ds_before.metadata.resource_version
    assert core.read_namespaced_config_map("bcd-config", "bcd-system").data == cm_before.data
    assert len(tokens(cp, cpvars)) == before, "check mode mints nothing"


@pytest.mark.usefixtures("adopted")
def test_a_refused_join_fails_naming_the_node_and_cleans_up(sandbox, cp, cpvars, admin):
    (new,) = sandbox.add_nodes(1)
    admin.patch_faults({"refuseJoin": {new: "maintenance window"}})
    try:
        before = {t["id"] for t in tokens(cp, cpvars)}
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_join_timeout=45")
        out = run.stdout + run.stderr
        assert run.returncode != 0
        assert f"{new}:" in out and "maintenance window" in out, out[-3000:]
        minted = [t for t in tokens(cp, cpvars) if t["id"] not in before]
        assert len(minted) == 1 and minted[0]["maxUses"] == 1 and minted[0]["revokedAt"]
        core = k8s.CoreV1Api(sandbox.api_client())
        assert core.list_namespaced_secret("bcd-system", field_selector="metadata.name=bcd-join").items == []
    finally:
        admin.patch_faults({"refuseJoin": None})
    # without the fault the next run joins it, with a token for exactly that one node
    run = run_playbook("adopt-cluster.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert reporting(cp, cpvars)[new]["state"] in ("adopting", "ready")


@pytest.mark.usefixtures("adopted")
@pytest.mark.parametrize("pin", ["serving_ca", "join_signing"])
def test_a_wrong_pin_is_refused_before_anything_is_applied(sandbox, cp, cpvars, pin):
    """Another valid pin than the control plane's (the run that once applied the ConfigMap and
    DaemonSet and reported every node while the control plane refused every join): refused in
    preflight, naming the pin and what the gateway or discovery presented; nothing applied, no token."""
    import base64

    apps, core = k8s.AppsV1Api(sandbox.api_client()), k8s.CoreV1Api(sandbox.api_client())
    ds_before = apps.read_namespaced_daemon_set("bcd", "bcd-system").metadata.resource_version
    cm_before = core.read_namespaced_config_map("bcd-config", "bcd-system").metadata.resource_version
    before = len(tokens(cp, cpvars))
    wrong = "sha256/" + base64.b64encode(bytes(range(32))).decode()
    run = run_playbook("adopt-cluster.yml", "-e", json.dumps({"bcd_pins": {**cpvars["bcd_pins"], pin: wrong}}))
    out = run.stdout + run.stderr
    flat = " ".join(out.split())
    assert run.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    assert f"bcd_pins.{pin}" in flat and wrong in flat and "refusing it before any token is minted" in flat, out[-3000:]
    if pin == "serving_ca":  # what the gateway presented: its certificate and the serving CA, with their pins
        assert cpvars["bcd_pins"]["serving_ca"] in flat and "presented" in flat
    else:
        assert cpvars["bcd_pins"]["join_signing"] in flat
    assert apps.read_namespaced_daemon_set("bcd", "bcd-system").metadata.resource_version == ds_before
    assert core.read_namespaced_config_map("bcd-config", "bcd-system").metadata.resource_version == cm_before
    assert len(tokens(cp, cpvars)) == before, "no token minted"
