"""The left_behind callback reads a host's settings (its bcd_* variables, templated, and clients
made from them) through the play's public accessors and the Host its task results carried. In a
process of its own, which loads the collection as ansible-playbook does (init_plugin_loader)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

from tests.helpers import ROOT, ansible_env

SCRIPT = textwrap.dedent("""
    import json, sys
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([{collections!r}])
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.vars.manager import VariableManager
    from ansible_collections.bcd.kubernetes.plugins.callback.left_behind import CallbackModule

    class Task:
        action, args, name, ignore_errors = "ansible.builtin.debug", {{}}, "a task", False

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[{inventory!r}])
    host = inventory.get_host("gpu-kubeadm")
    manager = VariableManager(loader=loader, inventory=inventory)
    play = Play().load({{"hosts": "all", "gather_facts": False, "tasks": []}}, variable_manager=manager, loader=loader)
    callback = CallbackModule()
    callback.v2_playbook_on_play_start(play)
    out = {{}}
    try:
        callback._settings(host.get_name())
    except RuntimeError as exc:
        out["before"] = str(exc)

    class Result:
        task, result = Task(), {{}}

    Result.host = host
    callback.v2_runner_on_ok(Result())
    settings = callback._settings(host.get_name())
    out.update(kubeconfig=settings.inv.bcd_kubeconfig, namespace=settings.inv.bcd_namespace, kube=settings.kube is not None)
    print(json.dumps(out))
""")

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_hosts_settings_come_from_the_play_it_ran_in(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventories" / "example", inventory)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    host_vars = inventory / "host_vars" / "gpu-kubeadm.yml"
    host_vars.write_text(host_vars.read_text().replace("~/.kube/gpu-kubeadm.yaml", str(kubeconfig)))
    script = SCRIPT.format(collections=str(ROOT / "collections"), inventory=str(inventory))
    done = subprocess.run([sys.executable, "-c", script], env=ansible_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"].startswith("no task of")
    assert out["kubeconfig"] == str(kubeconfig) and out["namespace"] and out["kube"] is True
