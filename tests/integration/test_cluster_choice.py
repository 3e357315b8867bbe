"""One run, one cluster, chosen as kubernetes.core users choose it: with two sandboxes in one
kubeconfig (context ``wrong``, a second sandbox, current; context ``right``, the session's), each
behind a counting proxy, every task of adopt, rollout, audit, doctor and release goes to the chosen
one and the other receives no connection at all. ``make test`` chooses with K8S_AUTH_CONTEXT (the
user's report); ``make test-long`` with every way (bcd_kubeconfig/bcd_kube_context,
K8S_AUTH_KUBECONFIG/K8S_AUTH_CONTEXT, KUBECONFIG, ~/.kube/config), adopting again after a real
release. A context or kubeconfig that does not exist is refused naming it, before any request."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.helpers import ROOT, left_in_tmpdir, run_playbook
from tests.reliability.harness import Proxy

pytestmark = [pytest.mark.sandbox]

OTHER_DIR = ROOT / ".sandbox-choice-other"
# adopt and rollout find nothing to do on the adopted sandbox; release only says what it would do
PLAYBOOKS = [
    ("adopt-cluster.yml", []),
    ("rollout.yml", []),
    ("audit.yml", []),
    ("doctor.yml", []),
    ("release-cluster.yml", ["-e", "bcd_release_confirm=sandbox", "--check"]),
]


@pytest.fixture(scope="module")
def other(request):
    """A second sandbox (1 GPU node: gpu-node-1, a name the session's has too), started here and
    stopped at the end when this fixture started it."""
    from sandbox.api import Sandbox

    sb = Sandbox(OTHER_DIR)
    started = sb.state_or_none() is None
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if started or not sb.is_up():
        with capture.global_and_fixture_disabled():
            sb.up(nodes=1)
    yield sb
    if started:
        with capture.global_and_fixture_disabled():
            sb.down()


def _port(server: str) -> int:
    return urlparse(server).port


class Clusters:
    """The two sandboxes behind their proxies, and kubeconfigs naming them."""

    def __init__(self, right, wrong, tmp: Path):
        self.right, self.wrong = right, wrong
        self.proxies = {"right": Proxy(("127.0.0.1", _port(right.server))),
                        "wrong": Proxy(("127.0.0.1", _port(wrong.server)))}
        self.tmp = tmp

    def kubeconfig(self, name: str, contexts=("wrong", "right"), current: str | None = "wrong") -> str:
        """A kubeconfig with ``contexts`` (each through its proxy; the server's certificate is for
        127.0.0.1, as the proxy's address is) and ``current``."""
        doc = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
        for ctx in contexts:
            sb = self.right if ctx == "right" else self.wrong
            src = yaml.safe_load(sb.kubeconfig.read_text())
            doc["clusters"].append({"name": ctx, "cluster": {**src["clusters"][0]["cluster"],
                                                             "server": f"https://127.0.0.1:{self.proxies[ctx].port}"}})
            doc["users"].append({"name": ctx, "user": src["users"][0]["user"]})
            doc["contexts"].append({"name": ctx, "context": {"cluster": ctx, "user": ctx}})
        if current:
            doc["current-context"] = current
        path = self.tmp / name
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return str(path)

    def counts(self) -> dict[str, int]:
        return {k: p.connections for k, p in self.proxies.items()}

    def close(self) -> None:
        for p in self.proxies.values():
            p.close()


@pytest.fixture(scope="module")
def clusters(sandbox, other, tmp_path_factory):
    c = Clusters(sandbox, other, tmp_path_factory.mktemp("choice"))
    yield c
    c.close()


def inventory(sandbox, tmp: Path) -> str:
    """The sandbox inventory without bcd_kubeconfig, so the environment chooses the cluster."""
    host = yaml.safe_load((ROOT / "inventories/sandbox/host_vars/sandbox.yml").read_text())
    host.pop("bcd_kubeconfig")
    common = yaml.safe_load((ROOT / "inventories/sandbox/group_vars/all.yml").read_text())
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": common}, "clusters": {"hosts": {
        "sandbox": {**host, "sandbox_dir": str(sandbox.dir)}}}}, sort_keys=False))
    return str(path)


@pytest.fixture(autouse=True)
def _no_k8s_auth(monkeypatch):
    """Nothing of the test process's own environment takes part in the choice."""
    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "K8S_AUTH_HOST"):
        monkeypatch.delenv(name, raising=False)



def run_all(clusters, inv: str, env: dict, extra: list[str], playbooks=PLAYBOOKS) -> None:
    """Each playbook succeeds, names the chosen context at its start, sends the other sandbox
    nothing while the chosen one is reached, and leaves nothing in its TMPDIR."""
    for playbook, args in playbooks:
        before = clusters.counts()
        tmpdir = Path(inv).parent / f"tmpdir-{playbook}"
        tmpdir.mkdir(exist_ok=True)
        run = run_playbook(playbook, "-i", inv, *extra, *args, env={**env, "TMPDIR": str(tmpdir)})
        out = " ".join((run.stdout + run.stderr).split())
        after = clusters.counts()
        assert run.returncode == 0, f"{playbook}: {out[-3000:]}"
        # the kubeconfig's client key and certificates, written for TLS, go with the run; what
        # stays is kubernetes.core's API discovery cache (k8srcp-<hash>.json), kept by design
        assert left_in_tmpdir(tmpdir) == [], playbook
        assert after["wrong"] == before["wrong"], f"{playbook} reached the sandbox not chosen: {out[-2000:]}"
        assert after["right"] > before["right"], f"{playbook} did not go through the chosen context's proxy"
        port = clusters.proxies["right"].port
        assert "every task uses kubeconfig " in out and f"context right, server https://127.0.0.1:{port}" in out, \
            f"{playbook}: {out[:3000]}"
        assert "Traceback" not in out


@pytest.mark.usefixtures("adopted")
def test_k8s_auth_context_chooses_for_every_task(sandbox, clusters, tmp_path):
    """The user's report: KUBECONFIG holds wrong (current) and right, K8S_AUTH_CONTEXT=right."""
    kc = clusters.kubeconfig("two.yaml")
    run_all(clusters, inventory(sandbox, tmp_path), {"KUBECONFIG": kc, "K8S_AUTH_CONTEXT": "right"}, [])


@pytest.mark.parametrize("name", ["K8S_AUTH_CONTEXT", "bcd_kube_context"])
def test_a_context_that_does_not_exist_is_refused_naming_it(sandbox, clusters, cp, cpvars, tmp_path, name):
    kc = clusters.kubeconfig("two.yaml")
    # bcd_kube_context wins over a K8S_AUTH_CONTEXT that does exist
    extra = ["-e", "bcd_kube_context=nope"] if name == "bcd_kube_context" else []
    env = {"KUBECONFIG": kc, "K8S_AUTH_CONTEXT": "right" if extra else "nope"}
    tokens = len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])))
    before = clusters.counts()
    run = run_playbook("adopt-cluster.yml", "-i", inventory(sandbox, tmp_path), *extra, env=env)
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert (f"INVALID_CONFIG: {name}: context 'nope' is not in kubeconfig {kc} (KUBECONFIG); "
            "its contexts: wrong, right (the cluster is chosen by bcd_kubeconfig and bcd_kube_context") in out, out[-3000:]
    assert "Service host/port" not in out and "Traceback" not in out
    assert clusters.counts() == before, "no request to either cluster"
    assert len(list(cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"]))) == tokens, "no token minted"


def test_a_kubeconfig_that_does_not_exist_is_refused_naming_the_variable(sandbox, clusters, tmp_path):
    gone = str(tmp_path / "gone.yaml")
    before = clusters.counts()
    run = run_playbook("audit.yml", "-i", inventory(sandbox, tmp_path),
                       env={"KUBECONFIG": clusters.kubeconfig("two.yaml"), "K8S_AUTH_KUBECONFIG": gone})
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    assert f"INVALID_CONFIG: K8S_AUTH_KUBECONFIG: {gone} does not exist; name an existing kubeconfig file" in out, \
        out[-3000:]
    assert clusters.counts() == before and "Traceback" not in out


def _ways(clusters, tmp: Path) -> dict[str, tuple[dict, list[str]]]:
    """Every way of choosing right, each with the lower-precedence ways pointing at wrong."""
    two = clusters.kubeconfig("two.yaml")
    wrong_only = clusters.kubeconfig("wrong-only.yaml", contexts=("wrong",))
    right_current = clusters.kubeconfig("right-current.yaml", current="right")
    home = tmp / "home"
    (home / ".kube").mkdir(parents=True, exist_ok=True)
    (home / ".kube" / "config").write_text(Path(right_current).read_text())
    (home / ".kube" / "config").chmod(0o600)
    return {
        "bcd variables": ({"KUBECONFIG": wrong_only, "K8S_AUTH_KUBECONFIG": wrong_only, "K8S_AUTH_CONTEXT": "wrong"},
                          ["-e", f"bcd_kubeconfig={two}", "-e", "bcd_kube_context=right"]),
        "bcd_kubeconfig with K8S_AUTH_CONTEXT": ({"K8S_AUTH_CONTEXT": "right"}, ["-e", f"bcd_kubeconfig={two}"]),
        "K8S_AUTH_KUBECONFIG and K8S_AUTH_CONTEXT": ({"KUBECONFIG": wrong_only, "K8S_AUTH_KUBECONFIG": two,
                                                      "K8S_AUTH_CONTEXT": "right"}, []),
        "K8S_AUTH_KUBECONFIG, its current context": ({"KUBECONFIG": wrong_only, "K8S_AUTH_KUBECONFIG": right_current}, []),
        "KUBECONFIG, its current context": ({"KUBECONFIG": right_current}, []),
        "KUBECONFIG list": ({"KUBECONFIG": os.pathsep.join([right_current, wrong_only])}, []),
        "~/.kube/config": ({"KUBECONFIG": "", "HOME": str(home)}, []),
    }


WAYS = ["bcd variables", "bcd_kubeconfig with K8S_AUTH_CONTEXT", "K8S_AUTH_KUBECONFIG and K8S_AUTH_CONTEXT",
        "K8S_AUTH_KUBECONFIG, its current context", "KUBECONFIG, its current context", "KUBECONFIG list",
        "~/.kube/config"]


@pytest.mark.long
@pytest.mark.usefixtures("adopted")
@pytest.mark.parametrize("way", WAYS)
def test_every_way_of_choosing_reaches_only_the_chosen_cluster(sandbox, clusters, tmp_path, way):
    env, extra = _ways(clusters, tmp_path)[way]
    run_all(clusters, inventory(sandbox, tmp_path), env, extra)


@pytest.mark.long
@pytest.mark.usefixtures("adopted")
def test_release_and_adopt_again_reach_only_the_chosen_cluster(sandbox, clusters, tmp_path):
    """A real release, then a real adoption (a token minted, the DaemonSet applied and waited
    for): the sandbox ends adopted, as it was, and wrong was never reached."""
    env = {"KUBECONFIG": clusters.kubeconfig("two.yaml"), "K8S_AUTH_CONTEXT": "right"}
    inv = inventory(sandbox, tmp_path)

    def daemonset() -> str:
        return sandbox.kubectl("get", "daemonset", "-n", "bcd-system", "-o", "name", check=False).stdout.strip()

    run_all(clusters, inv, env, [], playbooks=[("release-cluster.yml", ["-e", "bcd_release_confirm=sandbox"])])
    assert daemonset() == "", "released: bcd's DaemonSet is gone from the chosen cluster"
    run_all(clusters, inv, env, [], playbooks=[("adopt-cluster.yml", [])])
    assert daemonset() == "daemonset.apps/bcd", "adopted again"
