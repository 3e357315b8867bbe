"""The collection as a user installs it: built, installed into a fresh collections path, and
called by FQCN from a user's own playbook in a directory outside the repository, with no
ansible.cfg of ours, against the sandbox; each of its playbooks run by FQCN the same way; and
README's ansible.cfg lines, which enable its callbacks.

The user's inventory is README's "Using it on your cluster" example, copied verbatim from
README.md (its placeholders get the sandbox's values from a host_vars file beside it, which
inventory precedence puts above the hosts file).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from tests.helpers import ROOT, VENV_BIN, recap

CHECK = """
    - name: Say what the collection's module found
      ansible.builtin.debug:
        msg: "user play: {{ nodes.reporting }} of {{ nodes.selected }} selected Nodes report"
"""


def gpu_nodes(sandbox) -> list[str]:
    core = k8s.CoreV1Api(sandbox.api_client())
    return sorted(n.metadata.name for n in core.list_node(label_selector="nvidia.com/gpu.present=true").items)


def readme_yaml(section: str) -> str:
    """The first YAML block of README's section ``section``, as it is written there."""
    readme = (ROOT / "README.md").read_text()
    text = readme.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block, f"README's {section!r} has no yaml block"
    return block.group(1)


def readme_block(section: str, lang: str) -> str:
    """The first ``lang`` block of README's section ``section``, as it is written there."""
    readme = (ROOT / "README.md").read_text()
    text = readme.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(rf"```{lang}\n(.*?)```", text, re.S)
    assert block, f"README's {section!r} has no {lang} block"
    return block.group(1)


def readme_inventory() -> str:
    return readme_yaml("Using it on your cluster")


def user_env(collections: Path, home: Path) -> dict[str, str]:
    """The environment of a user's shell: our venv's tools on PATH, the fresh collections path,
    and none of the repository's Ansible settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({"ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_HOME": str(home), "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"})
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The built collection installed into a fresh collections path, with kubernetes.core taken
    from ./collections (where `make setup` installed it: scripts/install_collections.py)."""
    tmp = tmp_path_factory.mktemp("install")
    build = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp), str(ROOT)],
                           capture_output=True, text=True, check=False, cwd=tmp)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = next(tmp.glob("bcd-kubernetes-*.tar.gz"))
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert tarball.name == f"bcd-kubernetes-{version}.tar.gz"
    core = ROOT / "collections" / "ansible_collections" / "kubernetes" / "core"
    requirements = tmp / "requirements.yml"
    requirements.write_text(yaml.safe_dump({"collections": [
        {"name": str(tarball), "type": "file"},
        {"name": str(core), "type": "dir"},
    ]}))
    dest = tmp / "collections"
    install = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "install", "--offline",
                              "-r", str(requirements), "-p", str(dest)],
                             capture_output=True, text=True, check=False, cwd=tmp,
                             env=user_env(dest, tmp / "ansible-home"))
    assert install.returncode == 0, install.stdout + install.stderr
    coll = dest / "ansible_collections" / "bcd" / "kubernetes"
    assert (coll / "MANIFEST.json").is_file() and not (coll / "tests").exists() and not (coll / "sandbox").exists()
    assert (dest / "ansible_collections" / "kubernetes" / "core" / "MANIFEST.json").is_file()
    return dest


def user_project(sandbox, tmp_path, play: str | None) -> tuple[Path, Path, str]:
    """A user's project folder: README's inventory with the sandbox's values in place of its
    placeholders (the same lookups as inventories/sandbox), and ``play`` (when given) as site.yml;
    returns the folder, the inventory and README's one cluster host."""
    user = tmp_path / "my-ansible"
    inventory = user / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(readme_inventory())
    hosts = yaml.safe_load(readme_inventory())["clusters"]["hosts"]
    assert len(hosts) == 1
    host = next(iter(hosts))
    sandbox_vars = yaml.safe_load((ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml").read_text())
    sandbox_vars["sandbox_dir"] = str(sandbox.dir)
    (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(sandbox_vars))
    if play is not None:
        (user / "site.yml").write_text(play)
    return user, inventory, host


def test_the_tarball_holds_the_collection_only(installed):
    coll = installed / "ansible_collections" / "bcd" / "kubernetes"
    for kept in ("playbooks/adopt_cluster.yml", "roles/bcd_daemonset/tasks/main.yml", "meta/runtime.yml",
                 "plugins/modules/bcd_nodes_info.py", "templates/config.toml.j2", "CHANGELOG.rst", "LICENSE"):
        assert (coll / kept).is_file(), kept
    for left_out in ("bench", "molecule", ".venv", "collections", "ansible.cfg", "requirements-dev.txt"):
        assert not (coll / left_out).exists(), left_out


@pytest.mark.sandbox
@pytest.mark.usefixtures("unadopted")
def test_a_users_playbook_adopts_the_sandbox_by_fqcn(sandbox, cp, cpvars, installed, tmp_path):
    # the user's playbook: README's "Use from your own playbooks", verbatim, and a check of it
    user, inventory, host = user_project(sandbox, tmp_path, readme_yaml("Use from your own playbooks") + CHECK)
    assert not (user / "ansible.cfg").exists()

    env = user_env(installed, tmp_path / "ansible-home")
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "site.yml"], cwd=user, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert recap(run.stdout)[host]["failed"] == 0
    n = len(gpu_nodes(sandbox))
    assert f"user play: {n} of {n} selected Nodes report" in out

    # adopted: every GPU node reports; the token was revoked; the Secret is gone
    core = k8s.CoreV1Api(sandbox.api_client())
    gpu = gpu_nodes(sandbox)
    nodes = {n["hostname"]: n for n in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}
    assert gpu and all(nodes.get(name, {}).get("state") in ("adopting", "ready") for name in gpu), nodes
    mine = [t for t in cp.list_tokens(cpvars["bcd_tenant"], cpvars["bcd_pool"])
            if (t.get("description") or "").startswith(f"bcd-ansible cluster={host} ")]
    assert mine and all(t["revokedAt"] for t in mine)
    assert core.list_namespaced_secret("bcd-system", field_selector="metadata.name=bcd-join").items == []


def test_ansible_doc_finds_the_modules_by_fqcn(installed, tmp_path):
    env = user_env(installed, tmp_path / "ansible-home")
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "bcd.kubernetes.bcd_nodes_info"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "bcd.kubernetes.bcd_nodes_info" in run.stdout
    assert str(installed) in run.stdout  # from the installed collection, not this checkout


NO_DEFAULTS = """
- name: A user's play that includes our roles and calls our modules without module_defaults
  hosts: clusters
  gather_facts: false
  connection: local
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    ansible_pipelining: true
  tasks:
    - name: Render with the role (config comes from the inventory, as the lookup gives it)
      ansible.builtin.include_role:
        name: bcd.kubernetes.bcd_daemonset
        tasks_from: render
      vars:
        bcd_daemonset_required: [bcd_control_plane_url, bcd_tenant, bcd_pool]

    - name: Preflight with the role (the control plane is reached with bcd_api_key)
      ansible.builtin.include_role:
        name: bcd.kubernetes.bcd_daemonset
        tasks_from: preflight

    - name: Which selected Nodes report to the control plane
      bcd.kubernetes.bcd_nodes_info:
      register: nodes
""" + CHECK


@pytest.mark.sandbox
@pytest.mark.usefixtures("unadopted")
def test_a_users_play_without_module_defaults_runs_our_roles(sandbox, installed, tmp_path):
    """Our role tasks pass neither config nor api_key: without the play's module_defaults for
    group/bcd.kubernetes.bcd, each module takes config from lookup('bcd.kubernetes.bcd_inventory')
    and api_key from bcd_api_key (its action plugin), and the key never shows."""
    user, inventory, host = user_project(sandbox, tmp_path, NO_DEFAULTS)
    assert "module_defaults:" not in NO_DEFAULTS

    env = user_env(installed, tmp_path / "ansible-home")
    env.pop("BETTER_COMPUTE_API_KEY", None)
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "site.yml", "-vvv"], cwd=user,
                         env=env, capture_output=True, text=True, timeout=900, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert recap(run.stdout)[host]["failed"] == 0
    n = len(gpu_nodes(sandbox))
    # whatever an earlier test left adopted: the module reached the control plane with the key
    assert re.search(rf"user play: \d+ of {n} selected Nodes report", out), out[-3000:]
    key = yaml.safe_load((sandbox.dir / "control-plane.yml").read_text())["bcd_api_key"]
    assert key not in out


# the start of the warning the playbooks that mint a token or take the lock print without the
# callback (roles/bcd_daemonset/tasks/left_behind.yml), and the ansible.cfg line it gives
NO_LEFT_BEHIND = "[WARNING]: callback bcd.kubernetes.left_behind is not enabled"
CFG_LINE = "callbacks_enabled = bcd.kubernetes.left_behind"


@pytest.mark.sandbox
@pytest.mark.usefixtures("unadopted")
def test_every_playbook_runs_by_fqcn_from_the_installed_collection(sandbox, cp, cpvars, installed, tmp_path):
    """``ansible-playbook bcd.kubernetes.<name>`` from a user's folder outside the repository, with
    README's inventory (no ansible_connection in it) and no ansible.cfg: every playbook runs on the
    controller (no SSH to the cluster host), from the installed collection. With no callback
    configured, those that mint a token or take the lock warn once, giving the ansible.cfg line;
    the others do not. Ends released (the fixtures adopt again)."""
    user, inventory, host = user_project(sandbox, tmp_path, None)
    assert not user.resolve().is_relative_to(ROOT) and not (user / "ansible.cfg").exists()
    env = user_env(installed, tmp_path / "ansible-home")
    key = cpvars["bcd_api_key"]
    n = len(gpu_nodes(sandbox))

    def run(name: str, *args: str, warns: bool) -> str:
        cmd = [str(VENV_BIN / "ansible-playbook"), f"bcd.kubernetes.{name}", "-i", str(inventory), *args]
        done = subprocess.run(cmd, cwd=user, env=env, capture_output=True, text=True, timeout=600, check=False)
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{name}: {out[-5000:]}"
        assert recap(done.stdout)[host]["unreachable"] == 0 and "UNREACHABLE" not in out, f"{name}: {out[-3000:]}"
        assert out.count(NO_LEFT_BEHIND) == (1 if warns else 0), f"{name}: {out[-5000:]}"
        if warns:
            assert CFG_LINE in out and "ANSIBLE_CALLBACKS_ENABLED=bcd.kubernetes.left_behind" in out
            # no ansible.cfg: README's stdout callback is named too
            assert "stdout_callback = bcd.kubernetes.concise" in out, out[-3000:]
        assert key not in out
        return " ".join(out.split())

    run("adopt_cluster", warns=True)
    nodes = {node["hostname"]: node for node in cp.list_nodes(cpvars["bcd_tenant"], cpvars["bcd_pool"])}
    assert all(nodes.get(name, {}).get("state") in ("adopting", "ready") for name in gpu_nodes(sandbox)), nodes
    image = yaml.safe_load((inventory / "host_vars" / f"{host}.yml").read_text())["bcd_image"]
    assert "and healthy: nothing to do" in run("rollout", "-e", f"bcd_image={image}", warns=True)
    assert "nothing to do" in run("add_nodes", warns=True)
    run("gpu_stack", warns=False)
    run("audit", "-e", "bcd_report_out=audit.json", warns=False)
    assert json.loads((user / "audit.json").read_text())["passed"] is True
    run("doctor", warns=False)
    run("render", "-e", "bcd_render_out=bcd.json", warns=False)
    assert {i["kind"] for i in json.loads((user / "bcd.json").read_text())["items"]} >= {"Namespace", "DaemonSet"}
    out = run("release_cluster", "-e", f"bcd_release_confirm={host}", warns=True)
    assert f"Cluster {host} is released" in out and f"{n} node(s) removed" in out, out[-3000:]


FIRST_STEP = """
- name: The first step of the playbooks that mint a token or take the lock, alone
  hosts: all
  gather_facts: false
  serial: "{{ waves | default(['100%']) }}"
  connection: local
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Warn when the callback that cleans up after an interrupted run is not enabled
      ansible.builtin.include_role:
        name: bcd.kubernetes.bcd_daemonset
        tasks_from: left_behind
"""


def test_the_readme_ansible_cfg_enables_the_collections_callbacks(installed, tmp_path):
    """Without an ansible.cfg the installed collection warns that left_behind is off, once per run
    (also when clusters go in waves), with the lines to add; with README's ansible.cfg lines, as
    written, both callbacks load from the installed collection and nothing warns."""
    user = tmp_path / "my-ansible"
    user.mkdir()
    (user / "site.yml").write_text(FIRST_STEP)
    env = user_env(installed, tmp_path / "ansible-home")

    def run(*cmd: str) -> str:
        done = subprocess.run([str(VENV_BIN / cmd[0]), *cmd[1:]], cwd=user, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    bare = run("ansible-playbook", "-i", "localhost,", "site.yml")
    assert bare.count(NO_LEFT_BEHIND) == 1 and f"  [defaults]\n  {CFG_LINE}\n" in bare, bare
    # clusters rolled in waves (rollout.yml's serial) run the play once per wave; ansible-core prints a
    # warning it has printed once only once (Display deduplicates): still one
    waves = run("ansible-playbook", "-i", "east,west,north,", "-e", '{"waves": [1, 1]}', "site.yml")
    assert waves.count("PLAY [") == 3 and waves.count(NO_LEFT_BEHIND) == 1, waves

    (user / "ansible.cfg").write_text(readme_block("Install", "ini"))
    config = run("ansible-config", "dump", "--only-changed")
    assert re.search(r"^CALLBACKS_ENABLED\(.*\) = \['bcd.kubernetes.left_behind'\]$", config, re.M), config
    assert re.search(r"^DEFAULT_STDOUT_CALLBACK\(.*\) = bcd.kubernetes.concise$", config, re.M), config
    configured = run("ansible-playbook", "-i", "localhost,", "site.yml")
    # no warning: neither ours nor one of a callback that failed to load; the concise callback
    # drops the "included:" line the default callback prints
    assert "[WARNING]" not in configured and "skipping: [localhost]" in configured, configured
    assert "included:" in bare and "included:" not in configured, configured
