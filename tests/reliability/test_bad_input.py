"""Bad input through ansible-playbook: invalid inventories and invalid extra vars end in
INVALID_CONFIG naming the variable, with no traceback and no call to the control plane or the
cluster.

The invalid variables come from the same hypothesis generator as the in-process tests
(tests/unit/plugins/module_utils/test_model_property.py), over the sandbox's real settings, so a call, if one were
made, would reach the emulator (its request counters must not move) or the cluster, which the
runs reach only through a counting proxy (their kubeconfig points at it, as does $KUBECONFIG).

- inventories: one adopt-cluster.yml run with one inventory host (cluster) per generated
  inventory; each host fails at validation, naming each variable broken;
- extra vars: one run per generated set of extra vars (``-e @vars.json``), over adopt-cluster,
  add-nodes, rollout, render, gpu-stack and doctor (the last two validate the GPU isolation
  variables only, so only those are broken there).

The generated cases are seeded (:func:`case_seed`): pytest-randomly's seed of the run, or a fixed
one without it, so a failure names its seed and case and the same seed makes the same cases.
"""

from __future__ import annotations

import json
import math
import zlib
from urllib.parse import urlsplit

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.reliability.harness import Proxy, first_failure, json_results
from tests.unit.plugins.module_utils.test_model_property import LINE, VALID, check_unmasked, invalid_inventory

pytestmark = pytest.mark.sandbox

GPU_VARIABLES = ("bcd_nvidia_toolkit", "bcd_container_runtime", "bcd_node_selector", "bcd_gpu_isolation_enforce",
                 "bcd_node_roots", "bcd_kube_context")
# Extra settings of the in-process generator's valid base that would make a run touch files.
DROP = ("bcd_render_out", "bcd_join_secret_out", "bcd_report_out", "bcd_node_roots", "bcd_node_name",
        "bcd_kubeconfig", "bcd_kube_context", "bcd_control_plane_ca_file")
# The cases' seed without pytest-randomly (-p no:randomly): the same cases every run.
FIXED_SEED = 0


def ansible_safe(value) -> bool:
    """Values Ansible takes as data: no template markers (Ansible would template them), text that
    is UTF-8 without NUL, finite numbers."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return not any(m in value for m in ("{{", "{%", "{#", "\0"))
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(ansible_safe(k) and ansible_safe(v) for k, v in value.items())
    if isinstance(value, list):
        return all(ansible_safe(v) for v in value)
    return True


def cases(count: int, names=None, *, case_seed: int) -> list[tuple[dict, set[str]]]:
    """``count`` invalid inventories from the generator (as varied as hypothesis makes them over
    that many examples), Ansible-safe; the same ones for the same ``case_seed``."""
    out = []

    @seed(case_seed)
    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(invalid_inventory(names).filter(lambda c: ansible_safe(c[0])))
    def collect(case):
        out.append(case)

    collect()
    return out[:count]


@pytest.fixture
def case_seed(pytestconfig, request) -> int:
    """The seed of this test's generated cases: pytest-randomly's seed of the run (its header
    names it), else :data:`FIXED_SEED`, plus a hash of the test's id (each test its own cases)."""
    run_seed = getattr(pytestconfig.option, "randomly_seed", None)
    run_seed = run_seed if isinstance(run_seed, int) else FIXED_SEED
    print(f"generated cases: run seed {run_seed} (`-p randomly --randomly-seed={run_seed}` makes them again)")
    return run_seed + zlib.crc32(request.node.nodeid.encode())


def shown(variables: dict, broken: set[str]) -> dict:
    """The generated values of the broken variables (a failing case; never the sandbox's key)."""
    return {k: variables.get(k, "<missing>") for k in sorted(broken)}


def sandbox_vars(world, kubeconfig: str) -> dict:
    v = world.vars
    out = {k: v[k] for k in ("bcd_control_plane_url", "bcd_control_plane_ca_file", "bcd_gateway_url", "bcd_site_id",
                             "bcd_pins", "bcd_tenant", "bcd_pool", "bcd_api_key")}
    out["bcd_kubeconfig"] = kubeconfig
    return out


def real(variables: dict, broken: set[str], base: dict) -> dict:
    """The generated inventory over the sandbox's settings: a broken variable keeps its broken
    value (or stays missing), every other one is the sandbox's."""
    out = {k: val for k, val in variables.items() if k not in DROP or k in broken}
    for k, val in base.items():
        if k not in broken:
            out[k] = val
    return out


@pytest.fixture
def kube_proxy(ready, tmp_path):
    """A kubeconfig whose server is a counting proxy in front of the sandbox's API server."""
    world = ready
    server = urlsplit(world.sandbox.server)
    proxy = Proxy((server.hostname, server.port))
    config = yaml.safe_load(world.sandbox.kubeconfig.read_text())
    for c in config["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    # the proxy does count: one request through it
    from kubernetes import client
    from kubernetes import config as kconfig

    cfg = client.Configuration()
    kconfig.load_kube_config(config_file=str(path), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        client.VersionApi(api).get_code()
    assert proxy.connections >= 1
    proxy.connections = 0
    yield proxy, str(path)
    proxy.close()


def assert_refused(msg: str, broken: set[str], case: dict) -> None:
    lines = msg.splitlines()
    named = set()
    for line in lines:
        m = LINE.match(line)
        assert m, f"not an INVALID_CONFIG line naming a variable: {line!r} in {msg!r}; case {case!r}"
        named.add(m["var"])
    assert broken <= named, (sorted(broken), msg, case)
    check_unmasked(msg, case)


def inventories_through_adopt_cluster(world, kube_proxy, runner, tmp_path, reliability, count: int,
                                      case_seed: int) -> None:
    proxy, kubeconfig = kube_proxy
    reliability.describe("Bad input", f"{count} generated invalid inventories, one adopt-cluster.yml run "
                         "(one inventory host each)", unit="inventories")
    base = sandbox_vars(world, kubeconfig)
    hosts, broken_by_host, case_by_host = {}, {}, {}
    for i, (variables, broken) in enumerate(cases(count, case_seed=case_seed)):
        name = f"bad-{i:04d}"
        hosts[name] = real(variables, broken, base)
        broken_by_host[name] = broken
        case_by_host[name] = {"host": name, "case seed": case_seed, "broken": shown(variables, broken)}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"clusters": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}))
    before = world.counters()["total"]
    run = runner.run("adopt-cluster.yml", "-i", str(inventory), "--forks", "10",
                     env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "KUBECONFIG": kubeconfig}, timeout=3600)
    after = world.counters()["total"]
    assert run.returncode != 0
    assert "Traceback" not in run.output and "MODULE FAILURE" not in run.output
    results = json_results(run)
    for host, broken in broken_by_host.items():
        task, msg = first_failure(results[host])
        assert "render" in task, (host, task, msg, case_by_host[host])
        assert_refused(msg, broken, case_by_host[host])
    assert after == before, f"the control plane was called: {after - before} request(s)"
    assert proxy.connections == 0, "the cluster was called"
    reliability.runs = len(hosts)
    reliability.result = ("every host failed at validation with INVALID_CONFIG naming each broken variable; "
                          "0 requests to the control plane, 0 connections to the API server; no traceback")
    reliability.figures.update({"variables broken": len(set().union(*broken_by_host.values())),
                                "seconds": round(run.seconds, 1)})


def test_invalid_inventories_through_adopt_cluster(ready, kube_proxy, runner, tmp_path, reliability, case_seed):
    inventories_through_adopt_cluster(ready, kube_proxy, runner, tmp_path, reliability, 60, case_seed)


@pytest.mark.long
def test_many_invalid_inventories_through_adopt_cluster(ready, kube_proxy, runner, tmp_path, reliability, case_seed):
    inventories_through_adopt_cluster(ready, kube_proxy, runner, tmp_path, reliability, 500, case_seed)


PLAYBOOKS = ("adopt-cluster.yml", "add-nodes.yml", "rollout.yml", "render.yml", "gpu-stack.yml", "doctor.yml")


def extra_vars(playbook, world, kube_proxy, runner, tmp_path, reliability, count: int, case_seed: int) -> None:
    proxy, kubeconfig = kube_proxy
    reliability.describe("Bad input", f"{count} generated sets of invalid extra vars (-e @file) for {playbook}",
                         unit="runs")
    names = GPU_VARIABLES if playbook in ("gpu-stack.yml", "doctor.yml") else None
    before = world.counters()["total"]
    for i, (variables, broken) in enumerate(cases(count * 2, names, case_seed=case_seed)):
        # A missing one cannot be an extra var. A rule across variables breaks one variable by
        # what another holds, so that other one (changed from the generator's valid base) goes too.
        extra = {k: v for k, v in variables.items() if k in broken or (k not in DROP and VALID.get(k, v) != v)}
        if not broken & set(extra):
            continue
        if reliability.runs >= count:
            continue
        path = tmp_path / f"vars-{i}.json"
        path.write_text(json.dumps(extra))
        run = runner.run(playbook, "-e", f"bcd_kubeconfig={kubeconfig}", "-e", f"@{path}",
                         env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "KUBECONFIG": kubeconfig})
        case = {"case": i, "case seed": case_seed, "extra vars": extra}
        assert run.returncode != 0, (case, run.tail())
        assert "Traceback" not in run.output and "MODULE FAILURE" not in run.output, case
        _task, msg = first_failure(json_results(run)["sandbox"])
        assert_refused(msg, broken & set(extra), case)
    assert world.counters()["total"] == before, "the control plane was called"
    assert proxy.connections == 0, "the cluster was called"
    reliability.result = "each run failed at validation, naming each broken variable; no call; no traceback"


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_invalid_extra_vars(playbook, ready, kube_proxy, runner, tmp_path, reliability, case_seed):
    extra_vars(playbook, ready, kube_proxy, runner, tmp_path, reliability, 2, case_seed)


@pytest.mark.long
@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_many_invalid_extra_vars(playbook, ready, kube_proxy, runner, tmp_path, reliability, case_seed):
    extra_vars(playbook, ready, kube_proxy, runner, tmp_path, reliability, 12, case_seed)
