"""The playbooks inside the execution environment image, run as AWX runs a job.

AWX (and Automation Platform) runs every job with ``ansible-runner`` in the EE image under podman:
the private data directory is mounted at ``/runner``, the project (the repository, as SCM gives
it) is ``/runner/project``, the collections are the image's (``/usr/share/ansible/collections``),
and credentials arrive as AWX injects them. Here a custom credential type as
docs/scheduling.md defines it: the kubeconfig written to a file in ``env/`` (0600, AWX's
``tower.filename``) named by ``KUBECONFIG``, the API key as ``BETTER_COMPUTE_API_KEY``, both in
``env/envvars``; the control plane's CA as a second credential file whose path reaches the job
as an extra var (``env/extravars``, with the survey's string values). The container runs with
AWX's ``--user=root`` and, instead of AWX's slirp4netns, ``--network=host``: the sandbox's API
server and control-plane emulator listen on this machine's loopback.

The image is ``localhost/bcd-ee:<galaxy.yml version>``, built by scripts/build_ee.py (``make ee``)
before the first job: a cached build only rebuilds what changed. adopt-cluster.yml joins every
GPU node (one token, revoked); rollout.yml to a digest whose canary never gets Ready fails naming
the canary and rolls back. After each job every file of the private data directory is scanned for
the API key and every join token the control plane ever minted, plain and base64-encoded, as
tests/reliability/test_runner.py does: the key is where the credential put it (``env/envvars``)
and in ansible-runner's two copies of the job's environment, ``artifacts/<ident>/command`` (0600)
and ``artifacts/<ident>/env.list`` (the file ``podman run --env-file`` reads; 0644 in the 0700
directory ``artifacts/<ident>``), nowhere else: not in a job event, stdout or the report.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement

from tests.helpers import ROOT, VENV_BIN, install_debian_packages
from tests.reliability.harness import INVENTORY_IMAGE, baseline_ok, daemonset_image
from tests.reliability.test_runner import DEAD, Job, scan
from tests.secrets_scan import find_in_text

pytestmark = [pytest.mark.long, pytest.mark.sandbox]

IMAGE_COLLECTIONS = "/usr/share/ansible/collections/ansible_collections"
# What the image runs: Debian trixie's Python (scripts/build_ee.py), on which requirements.txt's
# markers pick ansible-core 2.21 (tests/unit/test_execution_environment.py checks the pins agree).
IMAGE_PYTHON = "3.13"
IMAGE_CORE_LINE = "2.21"
# The search paths AWX's job environment sets (RunJob.build_env): (variable, ansible.cfg key, the
# job's folder for the project's requirements, ansible-core's defaults).
AWX_PATHS = (
    ("ANSIBLE_COLLECTIONS_PATH", "collections_path", "requirements_collections",
     "~/.ansible/collections:/usr/share/ansible/collections"),
    ("ANSIBLE_ROLES_PATH", "roles_path", "requirements_roles", "~/.ansible/roles:/usr/share/ansible/roles:/etc/ansible/roles"),
)


def awx_paths(project: Path) -> dict[str, str]:
    """As AWX computes them: the job's folder, the project's ansible.cfg value when it names a
    path the defaults lack, then the defaults."""
    cfg = configparser.ConfigParser()
    cfg.read(project / "ansible.cfg")
    out = {}
    for env, key, folder, default in AWX_PATHS:
        paths = default.split(":")
        value = cfg.get("defaults", key, fallback="")
        if value and any(p not in paths for p in value.split(":")):
            paths = [value, *paths]
        out[env] = ":".join([f"/runner/{folder}", *paths])
    return out


def _podman_env() -> dict[str, str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_ee", ROOT / "scripts" / "build_ee.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.podman_env()


@pytest.fixture(scope="module")
def ee_image() -> str:
    """The image, built (or brought up to date from podman's layer cache) as `make ee` builds it."""
    # a new machine lacks the build's Debian tools: install them as the kind test bed does, or say why not
    missing = [tool for tool in ("podman", "mmdebstrap") if not shutil.which(tool)]
    if missing:
        why = install_debian_packages(missing)
        if why is not None and (os.geteuid() != 0 or not shutil.which("apt-get")):
            pytest.skip(f"the EE build needs {', '.join(missing)} (Debian packages): {why}")
        assert why is None, why
    run = subprocess.run([str(VENV_BIN / "python"), str(ROOT / "scripts" / "build_ee.py")], capture_output=True,
                         text=True, timeout=3600, check=False)
    assert run.returncode == 0, f"building the EE image failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    return f"localhost/bcd-ee:{version}"


def test_the_image_runs_ansible_core_2_21_on_python_3_13(ee_image):
    """``ansible --version`` in the image, through its entrypoint as a job starts: the ansible-core
    line and the Python that AWX users get, at requirements.txt's pin for that Python."""
    run = subprocess.run(["podman", "run", "--rm", "--network=none", ee_image, "ansible", "--version"],
                         capture_output=True, text=True, timeout=300, check=False, env=_podman_env())
    assert run.returncode == 0, run.stdout + run.stderr
    core = re.search(r"\[core ([^\]]+)\]", run.stdout)
    python = re.search(r"python version = (\d+\.\d+)\.", run.stdout)
    assert core and python, run.stdout
    assert core[1].startswith(f"{IMAGE_CORE_LINE}."), run.stdout
    assert python[1] == IMAGE_PYTHON, run.stdout
    reqs = [Requirement(line.split("#", 1)[0]) for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.startswith("ansible-core")]
    pinned = [str(r.specifier).removeprefix("==") for r in reqs
              if r.marker is None or r.marker.evaluate({"python_version": python[1]})]
    assert pinned == [core[1]], f"requirements.txt pins ansible-core {pinned} for Python {python[1]}; the image has {core[1]}"


def project_copy(dest: Path) -> None:
    """The repository as AWX's project update leaves it: the files git knows (the working tree's
    copies, new files too), none of the ignored ones (no .venv, no ./collections)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def credential_file(env_dir: Path, content: str) -> str:
    """A credential's file as AWX writes it (mkstemp in env/, 0600); its path in the container."""
    fd, path = tempfile.mkstemp(dir=env_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write(content)
    os.chmod(path, 0o600)
    return f"/runner/env/{Path(path).name}"


def inventory(world) -> dict:
    """The sandbox as an AWX inventory holds it: no kubeconfig, no API key, no file path."""
    keep = ("bcd_control_plane_url", "bcd_gateway_url", "bcd_site_id", "bcd_pins", "bcd_tenant", "bcd_pool")
    hostvars = {k: world.vars[k] for k in keep}
    hostvars.update(ansible_connection="local", ansible_python_interpreter="{{ ansible_playbook_python }}",
                    bcd_image=INVENTORY_IMAGE, bcd_node_selector={"nvidia.com/gpu.present": "true"})
    return {"clusters": {"hosts": {"sandbox": hostvars}}}


def run_in_ee(tmp_path: Path, world, image: str, playbook: str, extravars: dict, recorder) -> Job:
    """``ansible-runner run`` of ``playbook`` in ``image``, the private data directory laid out as AWX lays it."""
    pdd = tmp_path / f"ee-{playbook.removesuffix('.yml')}"
    (pdd / "project").mkdir(parents=True)
    project_copy(pdd / "project")
    (pdd / "inventory").mkdir()
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory(world)))
    env_dir = pdd / "env"
    env_dir.mkdir(mode=0o700)
    kubeconfig = credential_file(env_dir, world.sandbox.kubeconfig.read_text())
    ca = credential_file(env_dir, Path(world.vars["bcd_control_plane_ca_file"]).read_text())
    (env_dir / "envvars").write_text(json.dumps({
        **awx_paths(pdd / "project"), "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "KUBECONFIG": kubeconfig, "BETTER_COMPUTE_API_KEY": world.api_key}))
    # the credential type's extra var (the CA's file) and the survey's answers, all strings
    (env_dir / "extravars").write_text(json.dumps({**extravars, "bcd_control_plane_ca_file": ca}))
    for name in ("envvars", "extravars"):
        os.chmod(env_dir / name, 0o600)
    ident = f"{playbook.removesuffix('.yml')}-{uuid.uuid4().hex[:8]}"
    run = subprocess.run(
        [str(VENV_BIN / "ansible-runner"), "run", str(pdd), "-p", playbook, "--ident", ident,
         "--process-isolation", "--process-isolation-executable", "podman", "--container-image", image,
         "--container-option=--user=root", "--container-option=--network=host"],
        capture_output=True, text=True, timeout=1200, check=False,
        env={**_podman_env(), "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"})
    recorder.runs += 1
    artifacts = pdd / "artifacts" / ident
    assert (artifacts / "status").exists(), f"ansible-runner did not run the job:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    events = [json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")]
    events.sort(key=lambda e: e.get("counter", 0))
    runner = SimpleNamespace(events=events, config=SimpleNamespace(artifact_dir=str(artifacts)),
                             status=(artifacts / "status").read_text().strip(), rc=int((artifacts / "rc").read_text()))
    return Job(pdd, runner)


def task_paths(job: Job) -> set[str]:
    return {e["event_data"]["task_path"] for e in job.events if (e.get("event_data") or {}).get("task_path")}


def assert_ran_in_the_image(job: Job, image: str) -> None:
    """The job ran in ``image`` under podman, with the image's collection bcd.kubernetes."""
    command = json.loads((job.artifacts / "command").read_text())["command"]
    assert command[0] == "podman" and image in command, command
    ours = [p for p in task_paths(job) if p.startswith(f"{IMAGE_COLLECTIONS}/bcd/kubernetes/")]
    assert ours, f"no task of the image's bcd.kubernetes ran: {sorted(task_paths(job))[:10]}"


def assert_key_only_where_injected(job: Job, world, reliability) -> None:
    """The key is in the credential's input (env/envvars) and in ansible-runner's two copies of the
    job's environment: ``command`` (0600) and ``env.list``, the ``podman run --env-file`` it writes
    for the container (with the umask's mode, 0644 here); the directory of both is 0700."""
    leaks = scan(job, world, reliability)
    injected = {str(job.pdd / "env" / "envvars"), str(job.artifacts / "command"), str(job.artifacts / "env.list")}
    assert set(leaks) <= injected, f"a secret outside the injected environment: {sorted(set(leaks) - injected)}"
    command = json.loads((job.artifacts / "command").read_text())
    assert command["env"].pop("BETTER_COMPUTE_API_KEY") == world.api_key
    assert not find_in_text(json.dumps(command), world.secrets()), "nowhere else in command"
    env_list = dict(line.split("=", 1) for line in (job.artifacts / "env.list").read_text().splitlines())
    assert env_list.pop("BETTER_COMPUTE_API_KEY") == world.api_key
    assert not find_in_text(json.dumps(env_list), world.secrets()), "nowhere else in env.list"
    assert stat.S_IMODE((job.artifacts / "command").stat().st_mode) == 0o600
    assert stat.S_IMODE(job.artifacts.stat().st_mode) == 0o700, "only the job's user reads env.list"


def test_adopt_cluster_in_the_execution_environment(ee_image, ready, tmp_path, reliability):
    world = ready
    reliability.describe("Secrets", "adopt-cluster.yml in the EE image under ansible-runner and podman, "
                                    "kubeconfig and API key injected as an AWX credential; every file scanned")
    world.forget()  # every GPU node to join: a token is minted
    before = {t["id"] for t in world.tokens()}
    job = run_in_ee(tmp_path, world, ee_image, "adopt-cluster.yml",
                    {"bcd_token_ttl": "15m", "bcd_create_namespace": "true", "bcd_gpu_isolation_enforce": "true"},
                    reliability)
    assert (job.runner.status, job.runner.rc) == ("successful", 0), job.stdout[-4000:]
    assert_ran_in_the_image(job, ee_image)
    minted = [t for t in world.tokens() if t["id"] not in before]
    assert len(minted) == 1 and minted[0]["revokedAt"], "one token minted for the run, and revoked"
    assert world.all_joined() and world.clean()
    assert_key_only_where_injected(job, world, reliability)
    assert job.debug_warnings() == []
    reliability.result = ("adopted from the image's collections, one token minted and revoked; the key only in "
                          "env/envvars and runner's command and env.list")


def test_rollout_with_a_failing_canary_in_the_execution_environment(ee_image, ready_any_image, tmp_path, reliability):
    world = ready_any_image
    reliability.describe("Secrets", "rollout.yml in the EE image to a digest whose canary never gets Ready, "
                                    "AWX credential injection; rolled back; every file scanned")
    canary = world.gpu_nodes()[0]
    previous = daemonset_image(world)
    before = len(world.tokens())
    job = run_in_ee(tmp_path, world, ee_image, "rollout.yml", {
        "bcd_image": DEAD, "bcd_rollout_canary": "1", "bcd_rollout_max_unavailable": "1", "bcd_rollout_rollback": "true",
        "bcd_rollout_gate_timeout": "8", "bcd_report_out": "/runner/artifacts/rollout.json"}, reliability)
    assert job.runner.status == "failed" and job.runner.rc != 0, job.stdout[-4000:]
    assert_ran_in_the_image(job, ee_image)
    summary = json.loads((job.pdd / "artifacts" / "rollout.json").read_text())
    assert summary["result"] == "rolled_back", summary
    assert [(f["node"], f["stage"]) for f in summary["failed_nodes"]] == [(canary, "canary")], summary
    assert daemonset_image(world) == previous, "the DaemonSet is back on the previous digest"
    assert canary in " ".join(job.failed_messages()), job.failed_messages()
    assert len(world.tokens()) == before, "a rollout mints no token"
    assert world.lease_holder() is None, "the lock is released"
    assert_key_only_where_injected(job, world, reliability)
    world.wait(lambda: baseline_ok(world, image=False)[0], timeout=180, why="the fleet healthy again after the rollback")
    reliability.result = f"failed naming {canary}, rolled back to the previous digest; the key only where injected"
