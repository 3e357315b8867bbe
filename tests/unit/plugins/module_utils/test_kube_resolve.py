"""Which cluster a run uses (bcd_kube.resolve): kubernetes.core's precedence, each setting on its
own (bcd_kubeconfig, bcd_kube_context; K8S_AUTH_KUBECONFIG, K8S_AUTH_CONTEXT; KUBECONFIG;
~/.kube/config and its current context), and a clear refusal of what does not exist."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    CURRENT_SOURCE,
    DEFAULT_SOURCE,
    RULE,
    KubeError,
    api_client,
    resolve,
)

from tests.helpers import BASE_VARS, run_module


def _kubeconfig(path, contexts=("wrong", "right"), current="wrong"):
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": c, "cluster": {"server": f"https://{c}.example:6443"}} for c in contexts],
        "users": [{"name": "u", "user": {"token": "not-a-secret-test-token"}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home whose ~/.kube/config has contexts home-a (current) and home-b."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    return _kubeconfig(tmp_path / "home" / ".kube" / "config", ("home-a", "home-b"), "home-a")


def _pick(r):
    return r["kubeconfig"], r["context"], r["kubeconfig_from"], r["context_from"]


def test_the_default_is_home_and_its_current_context(home):
    assert _pick(resolve(environ={})) == (home, "home-a", DEFAULT_SOURCE, CURRENT_SOURCE)


def test_kubeconfig_env_beats_home(home, tmp_path):
    kc = _kubeconfig(tmp_path / "kc")
    assert _pick(resolve(environ={"KUBECONFIG": kc})) == (kc, "wrong", "KUBECONFIG", CURRENT_SOURCE)


def test_k8s_auth_beats_kubeconfig_env(home, tmp_path):
    kc, auth = _kubeconfig(tmp_path / "kc"), _kubeconfig(tmp_path / "auth", ("a1", "a2"), "a1")
    env = {"KUBECONFIG": kc, "K8S_AUTH_KUBECONFIG": auth, "K8S_AUTH_CONTEXT": "a2"}
    assert _pick(resolve(environ=env)) == (auth, "a2", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT")


def test_k8s_auth_context_alone_picks_in_kubeconfig(home, tmp_path):
    # the user's report: KUBECONFIG with wrong current and right wanted, K8S_AUTH_CONTEXT=right
    kc = _kubeconfig(tmp_path / "kc")
    assert _pick(resolve(environ={"KUBECONFIG": kc, "K8S_AUTH_CONTEXT": "right"})) == (
        kc, "right", "KUBECONFIG", "K8S_AUTH_CONTEXT")


def test_bcd_variables_beat_the_environment(home, tmp_path):
    kc, auth = _kubeconfig(tmp_path / "kc"), _kubeconfig(tmp_path / "auth", ("right",), "right")
    env = {"KUBECONFIG": auth, "K8S_AUTH_KUBECONFIG": auth, "K8S_AUTH_CONTEXT": "right"}
    assert _pick(resolve(kc, "wrong", env)) == (kc, "wrong", "bcd_kubeconfig", "bcd_kube_context")


def test_each_setting_on_its_own_as_kubernetes_core(home, tmp_path):
    """bcd_kubeconfig with K8S_AUTH_CONTEXT: kubernetes.core takes the option's file and the
    variable's context; so does the run."""
    kc = _kubeconfig(tmp_path / "kc")
    assert _pick(resolve(kc, None, {"K8S_AUTH_CONTEXT": "right"})) == (kc, "right", "bcd_kubeconfig", "K8S_AUTH_CONTEXT")


def test_a_kubeconfig_list_is_merged_missing_files_left_out(home, tmp_path):
    a, b = _kubeconfig(tmp_path / "a", ("a",), "a"), _kubeconfig(tmp_path / "b", ("b",), None)
    env = {"KUBECONFIG": os.pathsep.join([a, str(tmp_path / "gone"), b]), "K8S_AUTH_CONTEXT": "b"}
    r = resolve(environ=env)
    assert r["files"] == [a, b] and r["kubeconfig"] == os.pathsep.join([a, b]) and r["context"] == "b"
    assert resolve(environ={"KUBECONFIG": os.pathsep.join([a, b])})["context"] == "a"  # the first file's current


@pytest.mark.parametrize(("kubeconfig", "context", "env_context", "name"), [
    (None, "nope", None, "bcd_kube_context"),
    (None, None, "nope", "K8S_AUTH_CONTEXT"),
])
def test_a_context_that_does_not_exist_is_refused_naming_those_there(home, tmp_path, kubeconfig, context,
                                                                     env_context, name):
    kc = _kubeconfig(tmp_path / "kc")
    env = {"KUBECONFIG": kc, **({"K8S_AUTH_CONTEXT": env_context} if env_context else {})}
    with pytest.raises(KubeError) as err:
        resolve(kubeconfig, context, env)
    msg = str(err.value)
    assert msg.startswith(f"INVALID_CONFIG: {name}: context 'nope' is not in kubeconfig {kc} (KUBECONFIG)"), msg
    assert "its contexts: wrong, right" in msg and RULE in msg


@pytest.mark.parametrize("name", ["bcd_kubeconfig", "K8S_AUTH_KUBECONFIG", "KUBECONFIG"])
def test_a_kubeconfig_that_does_not_exist_is_refused_naming_the_variable(home, tmp_path, name):
    gone = str(tmp_path / "gone.yaml")
    env = {} if name == "bcd_kubeconfig" else {name: gone}
    with pytest.raises(KubeError) as err:
        resolve(gone if name == "bcd_kubeconfig" else None, None, env)
    assert str(err.value) == f"INVALID_CONFIG: {name}: {gone} does not exist; name an existing kubeconfig file ({RULE})"


def test_no_current_context_is_refused_naming_the_contexts(home, tmp_path):
    kc = _kubeconfig(tmp_path / "kc", current=None)
    with pytest.raises(KubeError, match=r"has no current context; set bcd_kube_context or K8S_AUTH_CONTEXT to one of "
                                        r"its contexts: wrong, right"):
        resolve(environ={"KUBECONFIG": kc})


def test_k8s_auth_host_is_refused(home):
    with pytest.raises(KubeError, match=r"^INVALID_CONFIG: K8S_AUTH_HOST is set"):
        resolve(environ={"K8S_AUTH_HOST": ""})  # empty too: kubernetes.core takes it


def test_no_kubeconfig_anywhere_is_the_in_cluster_account(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve(environ={})["kubeconfig"] is None
    with pytest.raises(KubeError, match=r"^INVALID_CONFIG: ~/.kube/config: .* does not exist"):
        resolve(environ={"K8S_AUTH_CONTEXT": "right"})  # a context named, and no kubeconfig to find it in


def test_the_client_goes_to_the_chosen_server(home, tmp_path, monkeypatch):
    kc = _kubeconfig(tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", kc)
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "right")
    monkeypatch.delenv("K8S_AUTH_KUBECONFIG", raising=False)
    client = api_client()
    assert client.configuration.host == "https://right.example:6443"
    assert client.bcd_source == f"kubeconfig {kc}, context right, server https://right.example:6443"


def test_a_module_refuses_an_unknown_context_before_any_request(home, tmp_path, monkeypatch):
    kc = _kubeconfig(tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", kc)
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "nope")
    code, result = run_module("bcd_nodes_info", {"config": {**BASE_VARS, "bcd_tenant": "root", "bcd_pool": "p"}})
    assert code != 0
    assert result["msg"].startswith("INVALID_CONFIG: K8S_AUTH_CONTEXT: context 'nope' is not in"), result["msg"]
    assert "Service host/port" not in result["msg"] and "Traceback" not in result["msg"]
