"""Unit tests of the control-plane emulator's parts (no server, no cluster): the Trust rule, the
seed file, the token store (atomic spending), tokens and pins, how a pod's files are found, and
the fault specification."""

from __future__ import annotations

import threading
import time
import types

import pytest
import yaml

from sandbox.control_plane import pki as cp_pki
from sandbox.control_plane.config import Seed, SeedError, load_seed
from sandbox.control_plane.db import KeyConflict, Store, ulid
from sandbox.control_plane.faults import FaultError, Faults, validate
from sandbox.control_plane.join import _item_key, join_container, volume_file


def seed(**kw) -> Seed:
    base = {"root_tenant": "root", "tenant": "root", "site_id": "site_1", "site_kind": "platform", "site_owner": "root",
            "pool_id": "pool_1", "platform_operated": False}
    base.update(kw)
    return Seed(**base)


@pytest.mark.parametrize("kw,trust", [
    ({}, "tenant-controlled"),
    ({"platform_operated": True}, "platform"),
    ({"platform_operated": True, "root_tenant": None}, "platform"),
    # the flag counts only on a pool the platform owns (seed 000, Trust; 259d82c)
    ({"platform_operated": True, "tenant": "acme"}, "tenant-controlled"),
    ({"platform_operated": True, "tenant": "acme", "site_owner": "acme", "root_tenant": "root"}, "tenant-controlled"),
    ({"platform_operated": True, "tenant": "acme", "site_owner": "acme", "root_tenant": None}, "platform"),
    # a tenant's own custom site stays tenant-owned, whatever the flag says
    ({"site_kind": "custom", "tenant": "acme", "site_owner": "acme"}, "tenant-owned"),
    ({"site_kind": "custom", "platform_operated": True}, "tenant-owned"),
])
def test_trust_rule(kw, trust):
    assert seed(**kw).hosted_trust() == trust


def test_package_seed_loads(tmp_path):
    from sandbox.control_plane.config import PACKAGE_SEED

    s = load_seed(PACKAGE_SEED)
    assert s.pool_document()["policy"] == {"kubernetes": {"platformOperated": False}}
    assert s.hosted_trust() == "tenant-controlled"


@pytest.mark.parametrize("doc,message", [
    ({"tenant": "root", "site": {"id": "s"}, "pool": {"id": "p"}, "extra": 1}, "unknown key(s) extra"),
    ({"tenant": "root", "site": {"id": "s", "kind": "x"}, "pool": {"id": "p"}}, "site.kind"),
    ({"tenant": "root", "site": {"id": "s"}, "pool": {"id": "p", "platformOperated": "yes"}}, "pool.platformOperated"),
    ({"tenant": "bad id!", "site": {"id": "s"}, "pool": {"id": "p"}}, "tenant: must be an id"),
    ({"tenant": "root", "site": {"id": "s"}, "pool": {"id": "p"}, "offline_grace_seconds": 0}, "offline_grace_seconds"),
    ({"tenant": "root", "site": "s", "pool": {"id": "p"}}, "site and pool must be mappings"),
])
def test_seed_errors_name_the_key(tmp_path, doc, message):
    path = tmp_path / "seed.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SeedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_seed(path)


# -- the store --------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "cp.db")
    yield s
    s.close()


def test_ulids_sort_by_creation():
    ids = [ulid() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(len(i) == 26 for i in ids)


def test_create_token_is_idempotent_and_conflicts(store):
    a, created = store.create_token("root", "p", "kubernetes", 2, 60, "k", None)
    b, again = store.create_token("root", "p", "kubernetes", 2, 60, "k", None)
    assert created and not again and a == b
    with pytest.raises(KeyConflict) as info:
        store.create_token("root", "p", "kubernetes", 3, 60, "k", None)
    assert info.value.differs == ["maxUses"]
    other, _ = store.create_token("acme", "p", "kubernetes", 2, 60, "k", None)
    assert other["id"] != a["id"]  # keys are per tenant


def test_spend_reasons_and_rejoin(store):
    tok, _ = store.create_token("root", "p", "kubernetes", 1, 60, "k", None)
    node, why = store.spend_and_join(tok["id"], "gpu-node-1", "site", "tenant-controlled")
    assert why is None and node["state"] == "adopting" and node["hostname"] == "gpu-node-1"
    assert store.spend_and_join(tok["id"], "gpu-node-2", "site", "tenant-controlled") == (None, "TokenExhausted")
    again, why = store.spend_and_join(tok["id"], "gpu-node-1", "site", "tenant-controlled")
    assert why is None and again["id"] == node["id"]  # a known node spends nothing
    assert store.token(tok["id"])["uses"] == 1
    assert store.spend_and_join("jt_nope", "gpu-node-3", "site", "x") == (None, "TokenUnknown")
    rev, _ = store.create_token("root", "p", "kubernetes", 5, 60, "r", None)
    store.revoke_token("root", rev["id"])
    assert store.spend_and_join(rev["id"], "gpu-node-3", "site", "x") == (None, "TokenRevoked")
    exp, _ = store.create_token("root", "p", "kubernetes", 5, 60, "e", None)
    store.expire_token(exp["id"])
    assert store.spend_and_join(exp["id"], "gpu-node-3", "site", "x") == (None, "TokenExpired")
    assert store.token(rev["id"])["uses"] == store.token(exp["id"])["uses"] == 0


def test_revoke_keeps_the_first_time(store):
    tok, _ = store.create_token("root", "p", "kubernetes", 1, 60, "k", None)
    first = store.revoke_token("root", tok["id"])["revoked_at"]
    time.sleep(0.01)
    assert store.revoke_token("root", tok["id"])["revoked_at"] == first
    assert store.revoke_token("acme", tok["id"]) is None


def test_concurrent_joins_never_overspend(tmp_path):
    path = tmp_path / "cp.db"
    Store(path).create_token("root", "p", "kubernetes", 3, 600, "k", None)
    token_id = Store(path).list_tokens("root", None, None, 1)[0]["id"]
    results = []
    start = threading.Barrier(12)

    def join(i: int) -> None:
        s = Store(path)
        start.wait()
        results.append(s.spend_and_join(token_id, f"gpu-node-{i}", "site", "tenant-controlled"))
        s.close()

    threads = [threading.Thread(target=join, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    joined = [n for n, why in results if why is None]
    assert len(joined) == 3 and sorted(why for _, why in results if why) == ["TokenExhausted"] * 9
    assert Store(path).token(token_id)["uses"] == 3 and len(Store(path).nodes()) == 3


def test_offline_remembers_the_state(store):
    tok, _ = store.create_token("root", "p", "kubernetes", 1, 60, "k", None)
    store.spend_and_join(tok["id"], "n1", "site", "tenant-controlled")
    assert store.set_offline("n1", True) and not store.set_offline("n1", True)
    assert store.node_by_hostname("n1")["state"] == "offline"
    assert store.set_offline("n1", False) and store.node_by_hostname("n1")["state"] == "adopting"


# -- tokens and pins ----------------------------------------------------------------------------


def test_tokens_are_derived_and_unforgeable(tmp_path):
    p = cp_pki.ensure(tmp_path / "pki")
    token = p.token_for("jt_01abc")
    assert token.startswith("bcdjt_jt_01abc.") and len(token) < 4096
    assert p.token_id_of(token) == "jt_01abc"
    assert p.token_id_of(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert p.token_id_of(token.replace("jt_01abc", "jt_01abd")) is None
    assert p.token_id_of("garbage") is None and p.token_id_of("bcdjt_é.x") is None
    assert cp_pki.ensure(tmp_path / "pki").token_for("jt_01abc") == token  # same secret after a reload


def test_pins_agree_with_the_toolkits_pin_code(tmp_path):
    from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_pins
    p = cp_pki.ensure(tmp_path / "pki")
    pins = p.pins()
    assert all(bcd_pins.is_pin(v) for v in pins.values())
    assert bcd_pins.pin_of_jwk(p.join_key()) == pins["join_encryption"]
    assert bcd_pins.pin_of_pem(p.ca_file.read_bytes()) == pins["serving_ca"]


# -- finding a pod's files ----------------------------------------------------------------------


def _pod(volumes, mounts, command=("/usr/local/bin/bcd", "join"), owner="DaemonSet"):
    return {"metadata": {"ownerReferences": [{"kind": owner}]},
            "spec": {"volumes": volumes, "initContainers": [{"name": "join", "command": list(command),
                                                             "volumeMounts": mounts}]}}


def test_join_container_is_found_by_its_command_and_owner():
    assert join_container(_pod([], [])) is not None
    assert join_container(_pod([], [], owner="ReplicaSet")) is None
    assert join_container(_pod([], [], command=("/usr/local/bin/bcd", "node"))) is None
    assert join_container(_pod([], [], command=("/bin/sh", "-c", "bcd join"))) is None


def test_volume_files_with_items_default_keys_and_subpaths():
    pod = _pod(
        [{"name": "config", "configMap": {"name": "bcd-config"}},
         {"name": "tok", "secret": {"secretName": "s", "items": [{"key": "token-key", "path": "token", "mode": 0o400}]}},
         {"name": "sub", "configMap": {"name": "other"}}],
        [{"name": "config", "mountPath": "/etc/bcd"}, {"name": "tok", "mountPath": "/var/run/secrets/bcd-join"},
         {"name": "sub", "mountPath": "/opt/x.toml", "subPath": "x.toml"}])
    container = pod["spec"]["initContainers"][0]
    volume, rel = volume_file(pod, container, "/etc/bcd/config.toml")
    assert volume["name"] == "config" and _item_key(volume["configMap"], rel) == ("config.toml", None)
    volume, rel = volume_file(pod, container, "/var/run/secrets/bcd-join/token")
    assert _item_key(volume["secret"], rel) == ("token-key", 0o400)
    volume, rel = volume_file(pod, container, "/var/run/secrets/bcd-join/other")
    assert _item_key(volume["secret"], rel) == (None, None)
    volume, rel = volume_file(pod, container, "/opt/x.toml")
    assert volume["name"] == "sub" and rel == "x.toml"
    with pytest.raises(LookupError):
        volume_file(pod, container, "/nowhere/config.toml")


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec,member", [
    ({"errorRate": 1.5}, "errorRate"), ({"errorRate": True}, "errorRate"), ({"errorStatus": 404}, "errorStatus"),
    ({"outageMode": "crash"}, "outageMode"), ({"procedures": "pools.get"}, "procedures"),
    ({"refuseJoin": {"n": 1}}, "refuseJoin"), ({"latency": 1}, "unknown member"), ({"errorCount": 1.5}, "errorCount"),
    ({"crashLoop": {"n": 1}}, "crashLoop"), ({"crashLoop": "n"}, "crashLoop"), ({"offlineGraceSeconds": 0}, "offlineGraceSeconds"),
])
def test_fault_specs_are_checked(spec, member):
    with pytest.raises(FaultError, match=member):
        validate(spec)


def test_error_count_and_procedure_filter():
    f = Faults({"errorCount": 2, "errorStatus": 429, "procedures": ["pools.get"]})
    assert f.decide("nodes.list") == (0.0, None, None)
    assert f.decide("pools.get") == (0.0, 429, 1)
    assert f.decide("pools.get") == (0.0, 429, 1)
    assert f.decide("pools.get") == (0.0, None, None)
    f.patch({"refuseJoin": ["gpu-node-1"]})
    assert f.join_refusal("gpu-node-1") and f.join_refusal("gpu-node-2") is None
    f.patch({"refuseJoin": None})
    assert f.join_refusal("gpu-node-1") is None


def test_crash_loop_and_offline_grace_faults():
    from sandbox.control_plane.faults import CRASH_MESSAGE

    f = Faults({"crashLoop": {"gpu-node-2": "panic: nvml: driver/library version mismatch"}})
    assert f.crash_loop("gpu-node-2") == "panic: nvml: driver/library version mismatch"
    assert f.crash_loop("gpu-node-1") is None
    f.patch({"crashLoop": ["gpu-node-1"]})
    assert f.crash_loop("gpu-node-1") == CRASH_MESSAGE and f.crash_loop("gpu-node-2") is None
    assert f.offline_grace(20.0) == 20.0
    f.patch({"offlineGraceSeconds": 600})
    assert f.offline_grace(20.0) == 600.0
    f.clear()
    assert f.crash_loop("gpu-node-1") is None and f.offline_grace(20.0) == 20.0


def test_the_server_certificate_is_issued_again_for_a_new_listen_address(tmp_path):
    """The kind test bed's pods reach the emulator at the kind network's gateway: its server
    certificate must name that address; the CA (and so the serving-CA pin) stays the same."""
    import ipaddress

    from cryptography import x509

    first = cp_pki.ensure(tmp_path)
    pins = first.pins()

    def sans() -> tuple[set, set]:
        cert = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return set(san.get_values_for_type(x509.DNSName)), set(san.get_values_for_type(x509.IPAddress))

    assert sans() == ({"localhost"}, {ipaddress.ip_address("127.0.0.1")})
    again = cp_pki.ensure(tmp_path, extra_ips=("10.89.0.1",))
    assert sans() == ({"localhost"}, {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.89.0.1")})
    assert again.pins() == pins
    chain = (tmp_path / "server-chain.pem").read_bytes()
    assert chain.startswith((tmp_path / "server.pem").read_bytes())
    # an address already named: the certificate is kept as it is
    before = (tmp_path / "server.pem").read_bytes()
    cp_pki.ensure(tmp_path, extra_ips=("10.89.0.1",))
    assert (tmp_path / "server.pem").read_bytes() == before


def test_node_credentials_are_derived_and_checked(tmp_path):
    pki = cp_pki.ensure(tmp_path)
    cred = pki.credential_for("node_01abc")
    assert cred.startswith("bcdnc_node_01abc.")
    assert pki.node_of_credential(cred) == "node_01abc"
    assert pki.node_of_credential(cred[:-2] + "AA") is None
    assert pki.node_of_credential(pki.token_for("node_01abc")) is None


class _Core:
    """Records the pod patches the join simulator makes."""

    def __init__(self):
        self.patches = []

    def patch_namespaced_pod(self, name, namespace, body):
        self.patches.append((namespace, name, body))


def _bound_pod(**status) -> dict:
    return {"metadata": {"name": "bcd-x1", "namespace": "bcd-system", "uid": "u1"},
            "spec": {"nodeName": "gpu-node-9"}, "status": {"phase": "Pending", **status}}


def test_a_pod_kwok_left_without_status_is_touched_then_backed_off(tmp_path):
    """KWOK drops the events of a pod bound to a Node it does not manage yet: the simulator
    touches such a pod after NUDGE_AFTER seconds (so KWOK plays it), then backs off; a pod with
    any status, or on a Node KWOK does not play, is left alone."""
    from sandbox.control_plane import join

    sim = join.JoinSimulator.__new__(join.JoinSimulator)
    sim.core, sim.unplayed = _Core(), {}
    sim.kwok_nodes, sim.kwok_listed = {"gpu-node-9": True, "kind-worker": False}, time.monotonic()
    t0 = 1000.0
    sim._nudge("u1", _bound_pod(), t0)
    sim._nudge("u1", _bound_pod(), t0 + join.NUDGE_AFTER - 0.1)
    assert sim.core.patches == []
    sim._nudge("u1", _bound_pod(), t0 + join.NUDGE_AFTER)
    assert sim.core.patches == [("bcd-system", "bcd-x1", {"metadata": {"annotations": {join.NUDGE_ANNOTATION: "1"}}})]
    sim._nudge("u1", _bound_pod(), t0 + join.NUDGE_AFTER + 1)
    assert len(sim.core.patches) == 1, "backed off"
    sim._nudge("u1", _bound_pod(), t0 + 3 * join.NUDGE_AFTER)
    assert sim.core.patches[-1][2]["metadata"]["annotations"][join.NUDGE_ANNOTATION] == "2"
    # KWOK played it: forgotten
    sim._nudge("u1", _bound_pod(initContainerStatuses=[{"name": "join"}]), t0 + 100)
    assert "u1" not in sim.unplayed
    # a real node's pod (its kubelet plays it) and a pod not bound yet are never touched
    real = _bound_pod()
    real["spec"]["nodeName"] = "kind-worker"
    unbound = _bound_pod()
    del unbound["spec"]["nodeName"]
    for pod in (real, unbound):
        sim._nudge("u2", pod, t0)
        sim._nudge("u2", pod, t0 + 60)
    assert len(sim.core.patches) == 2


def test_a_pod_is_played_by_one_worker_at_a_time(tmp_path):
    """Joins run on a pool of workers: a pass that asks again for a pod a worker still plays
    is ignored (one join container per pod at a time); once played, the pod can be played again."""
    from concurrent.futures import ThreadPoolExecutor

    from sandbox.control_plane import join

    sim = join.JoinSimulator.__new__(join.JoinSimulator)
    sim.lock, sim.busy, sim.wake = threading.RLock(), set(), threading.Event()
    sim.pool = ThreadPoolExecutor(max_workers=4)
    release, played = threading.Event(), []

    def play(tag):
        played.append(tag)
        release.wait(10)

    try:
        sim._play("u1", play, "first")
        sim._play("u1", play, "again while busy")
        sim._play("u2", play, "another pod")
        deadline = time.monotonic() + 10
        while len(played) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(played) == ["another pod", "first"]
        release.set()
        while sim.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sim.busy == set() and sim.wake.is_set()
        sim._play("u1", play, "after")
        sim.pool.shutdown(wait=True)
        assert sorted(played) == ["after", "another pod", "first"]
    finally:
        release.set()
        sim.pool.shutdown(wait=True)


def test_each_thread_has_its_own_store_and_spending_stays_exact(tmp_path):
    """The workers' Stores are one SQLite connection per thread; a token with 5 uses spent by 16
    threads at once joins exactly 5 nodes (the others: TokenExhausted)."""
    from concurrent.futures import ThreadPoolExecutor

    from sandbox.control_plane import join

    sim = join.JoinSimulator.__new__(join.JoinSimulator)
    sim.db_path, sim._local = tmp_path / "cp.db", threading.local()
    tok, _ = sim.store.create_token("root", "p", "kubernetes", 5, 60, "k", None)

    stores = []
    other = threading.Thread(target=lambda: stores.append(sim.store))
    other.start()
    other.join()
    assert stores[0] is not sim.store and sim.store is sim.store

    def spend(i):
        return sim.store.spend_and_join(tok["id"], f"gpu-node-{i}", "site", "tenant-controlled")[1]

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(spend, range(16)))
    assert sorted(why or "joined" for why in results) == ["TokenExhausted"] * 11 + ["joined"] * 5
    assert sim.store.token(tok["id"])["uses"] == 5


def test_a_join_that_used_a_cached_read_started_when_that_read_was_made():
    """A pass reads each ConfigMap and Secret once: a join played later that uses such a read saw
    the cluster as it was then, so its container's ``startedAt`` is that read's time (a kubelet's
    container reads its mounts when it starts), never the later time it was played. The wait
    (bcd_kube.join_failure with ``since``) tells a join that ran before the token existed by it."""
    from kubernetes.client.rest import ApiException

    from sandbox.control_plane import join

    class Core:
        def __init__(self):
            self.status = []

        def read_namespaced_secret(self, name, namespace):
            raise AssertionError("read from the pass's cache, not the API server")

        def patch_namespaced_pod_status(self, name, namespace, body, **_):
            self.status.append(body)

    sim = join.JoinSimulator.__new__(join.JoinSimulator)
    sim.core, sim.lock, sim.backoff, sim._seen = Core(), threading.RLock(), {}, threading.local()
    sim.seed = types.SimpleNamespace(join_retry_seconds=2.0)
    earlier = time.time() - 50
    sim._cache = {("Secret", "bcd-system", "bcd-join"): (ApiException(status=404), earlier)}

    sim._seen.at = time.time()
    with pytest.raises(ApiException):
        sim._read("Secret", "bcd-system", "bcd-join")
    assert sim._seen.at == earlier

    outcome = join.Outcome(False, "NoToken", "no token file", time.monotonic(), "gpu-node-9", "bcd-x1", "bcd-system",
                           started=earlier)
    init = {"name": "join", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 1}
    sim._exit("u1", _bound_pod(initContainerStatuses=[init]), {"name": "join"}, init, outcome, time.monotonic())
    (body,) = sim.core.status
    term = body["status"]["initContainerStatuses"][0]["lastState"]["terminated"]
    assert term["startedAt"] == join._rfc3339(earlier) < term["finishedAt"], term
