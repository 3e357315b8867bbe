"""The emulator's nodes.remove (control-plane-api.md) and its allocation hook, without a server:
idempotent, refused for a node holding an allocation unless force, listed as removed, and a
removed host that joins again is a new node that spends a token use."""

from __future__ import annotations

import pytest

from sandbox.control_plane.app import Api, ApiError
from sandbox.control_plane.config import Seed
from sandbox.control_plane.db import Store


@pytest.fixture
def env(tmp_path):
    store = Store(tmp_path / "cp.db")
    seed = Seed(root_tenant="root", tenant="root", site_id="site_1", site_kind="platform", site_owner="root",
                pool_id="pool_1", platform_operated=False)
    api = Api(store, None, seed, "https://gw.example.com")
    tok, _ = store.create_token("root", "pool_1", "kubernetes", 5, 3600, "k1", "d")
    node, why = store.spend_and_join(tok["id"], "gpu-node-1", "site_1", "tenant-controlled")
    assert why is None
    yield api, store, tok, node
    store.close()


def listed(api) -> dict:
    return {n["hostname"]: n for n in api.call("nodes.list", {"tenant": "root"})["items"]}


def test_remove_is_idempotent_and_listed(env):
    api, _, _, node = env
    assert listed(api)["gpu-node-1"]["allocation"] is None and listed(api)["gpu-node-1"]["removedAt"] is None
    first = api.call("nodes.remove", {"tenant": "root", "id": node["id"]})
    assert first["state"] == "removed" and first["removedAt"]
    again = api.call("nodes.remove", {"tenant": "root", "id": node["id"]})
    assert again == first
    assert listed(api)["gpu-node-1"]["state"] == "removed"
    assert listed(api)["gpu-node-1"]["removedAt"] == first["removedAt"]


def test_an_allocation_refuses_unless_force(env):
    api, store, _, node = env
    store.set_allocation("gpu-node-1", "alloc_1")
    assert listed(api)["gpu-node-1"]["allocation"] == "alloc_1"
    with pytest.raises(ApiError) as exc:
        api.call("nodes.remove", {"tenant": "root", "id": node["id"]})
    assert exc.value.code == "CONFLICT" and "alloc_1" in exc.value.message and "gpu-node-1" in exc.value.message
    assert listed(api)["gpu-node-1"]["state"] == "adopting"
    assert api.call("nodes.remove", {"tenant": "root", "id": node["id"], "force": True})["state"] == "removed"
    assert listed(api)["gpu-node-1"]["allocation"] is None


@pytest.mark.parametrize("body,code", [
    ({"tenant": "root", "id": "node_unknown"}, "NOT_FOUND"),
    ({"tenant": "other", "id": "node_x"}, "FORBIDDEN"),
    ({"tenant": "root", "id": "node_x", "force": "yes"}, "INVALID_INPUT"),
])
def test_errors(env, body, code):
    api = env[0]
    with pytest.raises(ApiError) as exc:
        api.call("nodes.remove", body)
    assert exc.value.code == code


def test_a_removed_host_joins_again_as_a_new_node(env):
    api, store, tok, node = env
    api.call("nodes.remove", {"tenant": "root", "id": node["id"]})
    again, why = store.spend_and_join(tok["id"], "gpu-node-1", "site_1", "tenant-controlled")
    assert why is None and again["id"] != node["id"] and again["state"] == "adopting"
    assert store.token(tok["id"])["uses"] == 2
    assert [n["id"] for n in api.call("nodes.list", {"tenant": "root"})["items"]] == [again["id"]]
    # a node that was not removed rejoins without spending
    same, _ = store.spend_and_join(tok["id"], "gpu-node-1", "site_1", "tenant-controlled")
    assert same["id"] == again["id"] and store.token(tok["id"])["uses"] == 2


def test_an_older_database_gains_the_columns(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE nodes (id TEXT PRIMARY KEY, hostname TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL,"
                       " pool TEXT NOT NULL, site TEXT NOT NULL, state TEXT NOT NULL, prev_state TEXT, trust TEXT NOT NULL,"
                       " token_id TEXT, joined_at REAL NOT NULL, conditions TEXT NOT NULL DEFAULT '{}');")
    conn.close()
    store = Store(path)
    assert {"allocation", "removed_at"} <= {r["name"] for r in store.conn.execute("PRAGMA table_info(nodes)")}
    store.close()


def test_status_counts_a_removed_node_apart(tmp_path):
    """`python -m sandbox status` (the emulator's service.status) counts the nodes in the pool;
    the ones nodes.remove took out (release-cluster.yml) are counted apart, not as still there."""
    from sandbox.control_plane.config import Paths
    from sandbox.control_plane.service import status

    store = Store(Paths(tmp_path).db)
    try:
        api = Api(store, None, Seed(root_tenant="root", tenant="root", site_id="site_1", site_kind="platform",
                                    site_owner="root", pool_id="pool_1", platform_operated=False), "https://gw.example.com")
        tok, _ = store.create_token("root", "pool_1", "kubernetes", 5, 3600, "k1", "d")
        joined = [store.spend_and_join(tok["id"], f"gpu-node-{i}", "site_1", "tenant-controlled")[0] for i in (1, 2, 3)]
        assert (status(tmp_path)["nodes"], status(tmp_path)["removed_nodes"]) == (3, 0)
        for node in joined[:2]:
            api.call("nodes.remove", {"tenant": "root", "id": node["id"]})
        assert (status(tmp_path)["nodes"], status(tmp_path)["removed_nodes"]) == (1, 2)
        # a removed host that joins again is in the pool again (a new node, in place of the removed one)
        store.spend_and_join(tok["id"], "gpu-node-1", "site_1", "tenant-controlled")
        assert (status(tmp_path)["nodes"], status(tmp_path)["removed_nodes"]) == (2, 1)
    finally:
        store.close()
