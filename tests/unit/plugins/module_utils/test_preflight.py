"""The judgements of module_utils/bcd_preflight.py and bcd_token.py, from answers given to them
(no cluster, no control plane: their requests against the real ones are in
tests/integration/test_preflight.py)."""

from __future__ import annotations

import base64
import threading

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_pins import PinError, Unreachable, pin_of_jwk
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_preflight import (
    Outcomes,
    Refusal,
    gather,
    judge_control_plane,
    judge_pod_security,
    node_rows,
    short_of_requests,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import bad_name, leftovers
from cryptography.hazmat.primitives.asymmetric import ec

from tests.helpers import base_vars


def jwk() -> dict:
    nums = ec.generate_private_key(ec.SECP256R1()).private_numbers().public_numbers

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()

    return {"kty": "EC", "crv": "P-256", "x": b64(nums.x), "y": b64(nums.y), "use": "enc", "kid": "k1"}


KEY, SIGNING = jwk(), jwk()


def inv(**overrides):
    pins = {"serving_ca": "sha256/" + "A" * 43 + "=", "join_signing": pin_of_jwk(SIGNING), "join_encryption": pin_of_jwk(KEY)}
    return load(base_vars(bcd_tenant="t1", bcd_pool="p1", bcd_pins=pins, **overrides))


def answers(**over) -> Outcomes:
    done = {
        "discovery": (True, {"gateway": {"url": "https://gw.example.com:7443", "name": "gw"}, "site": "site_01",
                             "joinKey": KEY, "joinSigningKey": SIGNING}),
        "serving_ca": (True, None),
        "pool": (True, {"id": "p1", "policy": {"kubernetes": {"platformOperated": False}}}),
        "cp_nodes": (True, [{"hostname": "gpu-1", "id": "n1", "state": "ready", "trust": "platform"},
                            {"hostname": "gpu-2", "id": "n2", "state": "offline"}]),
    }
    done.update(over)
    return Outcomes(done)


def test_gather_runs_in_parallel_and_keeps_each_exception_for_its_taker():
    started = threading.Barrier(3, timeout=5)

    def slow(value):
        def fn():
            started.wait()  # all three run at once, or this times out
            return value
        return fn

    def boom():
        started.wait()
        raise KubeError("GET /api/v1/nodes: Kubernetes API 500: no", status=500)

    out = gather({"a": slow(1), "b": slow(2), "c": boom})
    assert out.take("a") == 1 and out.take("b") == 2
    with pytest.raises(KubeError, match="500"):
        out.take("c")


def test_a_control_plane_that_agrees_gives_the_facts_and_the_trust():
    result = judge_control_plane(answers(), inv(), {"gpu-1", "gpu-2"})
    assert result["discovery"] == {"gateway_url": "https://gw.example.com:7443", "gateway_name": "gw", "site": "site_01",
                                   "join_key_pin": pin_of_jwk(KEY)}
    assert result["pins_checked"] == ["join_encryption", "join_signing", "serving_ca"]
    assert result["trust"] == "tenant-controlled" and "add no capacity" in result["warnings_text"][0]
    assert set(result["known"]) == {"gpu-1", "gpu-2"} and set(result["reporting"]) == {"gpu-1"}


def test_every_contradiction_is_refused_at_once_in_one_message():
    other = jwk()
    out = answers(discovery=(True, {"gateway": {"url": "https://elsewhere:1"}, "site": "site_02", "joinKey": other,
                                    "joinSigningKey": other}),
                  serving_ca=(False, PinError("the gateway presented no certificate with this pin")))
    with pytest.raises(Refusal) as refused:
        judge_control_plane(out, inv())
    lines = refused.value.extra["errors"]
    assert [line.split(":")[0] for line in lines] == ["bcd_pins.join_encryption", "bcd_gateway_url", "bcd_site_id",
                                                      "bcd_pins.join_signing", "bcd_pins.serving_ca"]
    assert refused.value.msg == "\n".join(lines)
    assert all("refusing it before any token is minted" in line for line in (lines[0], lines[3], lines[4]))


def test_discovery_failure_comes_first_and_an_unreachable_gateway_only_warns():
    out = answers(discovery=(False, ControlPlaneError("UNREACHABLE", "cannot reach cp", procedure="discovery")),
                  pool=(False, ControlPlaneError("UNAVAILABLE", "down", procedure="pools.get")))
    with pytest.raises(Refusal, match=r"^preflight: control plane discovery: UNREACHABLE"):
        judge_control_plane(out, inv())
    result = judge_control_plane(answers(serving_ca=(False, Unreachable("timed out"))), inv())
    assert result["pins_checked"] == ["join_encryption", "join_signing"]
    assert any(w.startswith("bcd_pins.serving_ca could not be checked") for w in result["warnings_text"])
    with pytest.raises(Refusal, match=r"^preflight: control plane pools.get: UNAVAILABLE"):
        judge_control_plane(answers(pool=(False, ControlPlaneError("UNAVAILABLE", "down", procedure="pools.get"))), inv())


def test_pod_security_warns_or_refuses_as_told():
    ns = [{"metadata": {"name": "default"}}, {"metadata": {"name": "bcd-system"}},
          {"metadata": {"name": "web", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}]
    found = judge_pod_security(ns, inv())
    assert found["open_namespaces"] == ["default"] and found["namespaces"] == ["bcd-system", "default", "web"]
    assert found["warning"].startswith("Pod Security lets pods in default run privileged")
    with pytest.raises(Refusal) as refused:
        judge_pod_security(ns, inv(bcd_require_pod_security=True))
    assert refused.value.msg.startswith("bcd_require_pod_security: namespaces default let pods mount host paths")
    assert refused.value.extra == {"open_namespaces": ["default"], "namespaces": ["bcd-system", "default", "web"]}
    assert judge_pod_security(ns[1:], inv(bcd_require_pod_security=True))["warning"] is None


def test_node_rows_and_requests():
    nodes = {"gpu-2": {"metadata": {"name": "gpu-2", "labels": {"bcd.dev/node-id": "n2-label"}},
                       "status": {"allocatable": {"cpu": "10m", "memory": "1Gi"}}},
             "gpu-1": {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"cpu": "8", "memory": "64Gi"}}}}
    rows = node_rows(nodes, {"gpu-1": {"id": "n1", "state": "draining", "trust": "platform", "conditions": [{"type": "X"}]}})
    assert rows == [
        {"name": "gpu-1", "id": "n1", "state": "draining", "trust": "platform", "reporting": True, "conditions": [{"type": "X"}]},
        {"name": "gpu-2", "id": "n2-label", "state": None, "trust": None, "reporting": False, "conditions": []},
    ]
    short = short_of_requests(inv(), nodes)
    assert len(short) == 1 and short[0].startswith("Node gpu-2: allocatable cpu 10m < request ")


class FakeCp:
    def __init__(self, tokens=None, error=None):
        self.tokens, self.error = tokens or [], error

    def list_tokens(self, tenant, pool):
        if self.error:
            raise self.error
        return iter(self.tokens)


class FakeKube:
    def __init__(self, secret=None, error=None):
        self.secret, self.error = secret, error

    def get(self, path):
        if self.error:
            raise self.error
        return self.secret


def test_leftovers_are_other_runs_live_tokens_of_this_cluster_and_our_secret():
    tokens = [{"id": "a", "description": "bcd-ansible cluster=c1 run=old playbook=adopt-cluster"},
              {"id": "b", "description": "bcd-ansible cluster=c1 run=now playbook=adopt-cluster"},
              {"id": "c", "description": "bcd-ansible cluster=c2 run=old playbook=adopt-cluster"},
              {"id": "d", "description": "bcd-ansible cluster=c1 run=old2 playbook=adopt-cluster", "revokedAt": "x"},
              {"id": "e", "description": "someone else's"}]
    ours = {"metadata": {"labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}}}
    got = leftovers(FakeCp(tokens), FakeKube(ours), inv(), "c1", "now")
    assert got["failed"] is False and got["revoked"] == ["a"] and got["secret_deleted"] is True and got["note"] is None
    got = leftovers(FakeCp(), FakeKube({"metadata": {}}), inv(), "c1", "now")
    assert got["secret_deleted"] is False and "was not made by bcd-ansible; left in place" in got["note"]


def test_leftovers_that_cannot_be_read_are_a_result_not_an_exception():
    got = leftovers(FakeCp(error=ControlPlaneError("UNAVAILABLE", "down", procedure="joinTokens.list")),
                    FakeKube(error=KubeError("GET x: Kubernetes API 403: no", status=403)), inv(), "c1", "now")
    assert got["failed"] is True
    assert got["msg"] == ("cleaning up the join token failed: listing tokens: control plane joinTokens.list: UNAVAILABLE: down; "
                          "GET x: Kubernetes API 403: no")
    got = leftovers(FakeCp(), FakeKube(), inv(), "not a name", "now")
    assert got["failed"] is True and got["msg"] == bad_name("cluster", "not a name")
    assert bad_name("run", "20261201T000000Z-1") is None
