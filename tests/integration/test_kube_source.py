"""A cluster whose kubeconfig context points at a server that does not answer: every playbook
that reaches the cluster fails naming the kubeconfig file and the context (and the server),
without a traceback, before it changes anything or mints a token."""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from tests.helpers import run_playbook

pytestmark = [pytest.mark.sandbox]

PLAYBOOKS = [
    ("adopt-cluster.yml", []),
    ("add-nodes.yml", []),
    ("rollout.yml", []),
    ("audit.yml", []),
    ("release-cluster.yml", ["-e", "bcd_release_confirm=sandbox", "--check"]),
    ("doctor.yml", []),
    ("gpu-stack.yml", []),
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dead_kubeconfig(sandbox, tmp_path_factory):
    """The sandbox's kubeconfig plus a context `unreachable` whose server is a closed port."""
    doc = yaml.safe_load(sandbox.kubeconfig.read_text())
    cluster = dict(doc["clusters"][0])
    cluster = {"name": "unreachable", "cluster": {**cluster["cluster"], "server": f"https://127.0.0.1:{_closed_port()}"}}
    context = {"name": "unreachable", "context": {**doc["contexts"][0]["context"], "cluster": "unreachable"}}
    doc["clusters"].append(cluster)
    doc["contexts"].append(context)
    path = tmp_path_factory.mktemp("kube") / "two-contexts.yaml"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path, cluster["cluster"]["server"]


@pytest.mark.parametrize(("playbook", "extra"), PLAYBOOKS, ids=[p for p, _ in PLAYBOOKS])
def test_an_unreachable_context_is_named_with_its_kubeconfig(sandbox, cp, cpvars, dead_kubeconfig, playbook, extra):
    path, server = dead_kubeconfig
    tokens = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    run = run_playbook(playbook, "-e", f"bcd_kubeconfig={path}", "-e", "bcd_kube_context=unreachable", *extra)
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, out[-3000:]
    assert f"kubeconfig {path}, context unreachable, server {server}" in out, out[-3000:]
    # and the run's closing failure of the cluster names them too, whatever task failed (audit.yml
    # stops at its first failure, which is the one above)
    if playbook != "audit.yml":
        assert f"(cluster: kubeconfig {path}, context unreachable" in out, out[-3000:]
    assert "Connection refused" in out
    assert "Traceback" not in out
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens, "no token minted"


@pytest.mark.usefixtures("adopted")
def test_the_rollout_report_names_the_kubeconfig_and_the_context(sandbox, tmp_path):
    report = tmp_path / "rollout.json"
    run = run_playbook("rollout.yml", "-e", f"bcd_report_out={report}")
    assert run.returncode == 0, run.stdout[-3000:]
    where = f"kubeconfig {sandbox.kubeconfig}, context "
    assert f"Cluster sandbox: {where}" in " ".join(run.stdout.split()), run.stdout[-3000:]
    kube = json.loads(report.read_text())["kube"]
    assert kube.startswith(where) and kube.endswith(f"server {sandbox.server}"), kube
