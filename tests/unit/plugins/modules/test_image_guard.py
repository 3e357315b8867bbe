"""bcd_image_guard's judgement without a cluster: which image a DaemonSet runs (its container
named bcd, whatever else runs beside it), and the refusal and warning, each naming both images and
the way out (the sandbox tests run the module against the API server)."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import container_image
from ansible_collections.bcd.kubernetes.plugins.modules.bcd_image_guard import message

LIVE, INVENTORY = "registry.example/bcd@sha256:" + "a" * 64, "registry.example/bcd@sha256:" + "b" * 64


def ds(*containers: tuple[str, str]) -> dict:
    return {"spec": {"template": {"spec": {"containers": [{"name": n, "image": i} for n, i in containers]}}}}


def test_the_image_is_the_bcd_containers():
    assert container_image(ds(("sidecar", "x"), ("bcd", LIVE))) == LIVE
    assert container_image(ds(("sidecar", "x"))) is None
    assert container_image({}) is None


def test_the_refusal_names_both_images_and_the_way_out():
    msg = message("bcd-system", "bcd", LIVE, INVENTORY, "refuse", under_lock=False)
    assert msg.startswith(f"DaemonSet bcd-system/bcd runs {LIVE}, but bcd_image in the inventory is {INVENTORY}.")
    assert f"set bcd_image to {LIVE} in the inventory; to run {INVENTORY}, run rollout.yml" in msg
    assert msg.endswith("Nothing was changed and no token minted.")
    locked = message("bcd-system", "bcd", LIVE, INVENTORY, "refuse", under_lock=True)
    assert locked.endswith("(read under the lock of the cluster: another run changed the DaemonSet since this run "
                           "first read it).")


def test_the_warning_says_new_nodes_join_with_the_running_image():
    msg = message("bcd-system", "bcd", LIVE, INVENTORY, "warn", under_lock=False)
    assert "New nodes join with the running image" in msg and "no token" not in msg
