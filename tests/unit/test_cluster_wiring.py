"""Every kubernetes.core task of a playbook is given the cluster the run chose and pinned
(bcd_kubeconfig, bcd_kube_context; README, "Which cluster a run uses"), never left to
kubernetes.core's own reading of the environment: each play of playbooks/ that runs a role with
kubernetes.core tasks sets them for group/kubernetes.core.k8s, and so does every play or block
that names kubernetes.core itself."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
WANT = {"kubeconfig": "{{ bcd_kubeconfig | default(omit) }}", "context": "{{ bcd_kube_context | default(omit) }}"}


def _roles_with_kubernetes_core() -> set[str]:
    return {p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/*.yml") if "kubernetes.core." in p.read_text()}


def test_every_play_that_reaches_the_cluster_through_kubernetes_core_is_given_the_chosen_cluster():
    roles = _roles_with_kubernetes_core()
    assert {"bcd_daemonset", "gpu_stack", "release_cluster"} <= roles
    checked = 0
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            text = yaml.safe_dump(play.get("tasks") or [])
            if not any(f"bcd.kubernetes.{r}" in text for r in roles) and "kubernetes.core." not in text:
                continue
            if path.name == "render.yml":
                continue  # reaches no cluster: its render is told so (bcd_daemonset_existing_files: [])
            defaults = (play.get("module_defaults") or {}).get("group/kubernetes.core.k8s")
            assert defaults == WANT, f"{path.name}: play {play.get('name')!r} sets {defaults}"
            checked += 1
    assert checked >= 6


def test_every_block_of_a_role_that_sets_kubernetes_core_defaults_gives_the_chosen_cluster():
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        text = path.read_text()
        if "group/kubernetes.core.k8s" not in text:
            continue
        for task in yaml.safe_load(text) or []:
            defaults = (task.get("module_defaults") or {}).get("group/kubernetes.core.k8s")
            if defaults is not None:
                assert defaults == WANT, f"{path}: {task.get('name')!r} sets {defaults}"
