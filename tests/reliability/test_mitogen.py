"""adopt-cluster.yml under mitogen's strategy (ANSIBLE_STRATEGY=mitogen_linear), the opt-in
persistent interpreter of docs/benchmarks.md: the same adoption, report and clean-up as under plain
Ansible, a second run that changes nothing, and check mode that changes nothing. The secrets
matrix runs under it too (test_secrets.py, variant ``mitogen``), rollout.yml included.
"""

from __future__ import annotations

import pytest

from tests.helpers import mitogen_env, recap
from tests.reliability.harness import Runner

pytestmark = [pytest.mark.sandbox, pytest.mark.long]


def under_mitogen(run) -> bool:
    """The run's modules ran in mitogen's interpreter (its process title is python(mitogen:...))."""
    return any("(mitogen:" in c for c in run.cmdlines)


def test_adopt_under_mitogen_joins_every_node_and_cleans_up(ready, tmp_path):
    world = ready
    world.forget()
    before = {t["id"] for t in world.tokens()}
    # mitogen's interpreter outlives each task and ends with os._exit: the kubeconfig's key, which
    # our modules write for TLS, must still go at each task's end
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    runner = Runner(env={**mitogen_env(), "TMPDIR": str(tmpdir)})

    run = runner.run("adopt-cluster.yml", watch_cmdlines=True)
    assert run.returncode == 0, run.tail()
    assert under_mitogen(run), "no mitogen interpreter ran: the strategy was not used"
    n = len(world.gpu_nodes())
    assert f"{n} of {n} selected nodes report" in run.text
    assert world.all_joined(), world.reporting()
    minted = [t for t in world.tokens() if t["id"] not in before]
    assert len(minted) == 1 and minted[0]["revokedAt"], minted
    assert world.clean(), world.state()

    again = runner.run("adopt-cluster.yml", watch_cmdlines=True)
    assert again.returncode == 0, again.tail()
    assert under_mitogen(again)
    assert recap(again.output)["sandbox"]["changed"] == 0, again.tail()
    assert "nothing to do, no token minted" in again.text
    ds = world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version

    check = runner.run("adopt-cluster.yml", "--check", "--diff", "-e", "bcd_log_level=debug")
    assert check.returncode == 0, check.tail()
    assert 'log_level = "debug"' in check.output, "the diff shows the config.toml change"
    assert world.apps.read_namespaced_daemon_set("bcd", world.namespace).metadata.resource_version == ds
    assert {t["id"] for t in world.tokens()} == {t["id"] for t in minted} | before, "no token minted after the first run"
    assert world.clean(), world.state()
    # kubernetes.core's modules leave theirs loose in TMPDIR under mitogen (docs/benchmarks.md)
    assert [p.name for p in tmpdir.iterdir() if p.name.startswith("bcd-tmp-")] == []
