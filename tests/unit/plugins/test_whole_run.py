"""Every playbook runs whole: ``--tags`` and ``--start-at-task`` (and ``--skip-tags`` that would skip an
untagged task) are refused when the first play starts, naming the option, before any task
(plugins/filter/bcd_run.py)."""

from __future__ import annotations

import sys
import types

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.bcd.kubernetes.plugins.filter import bcd_run
from ansible_collections.bcd.kubernetes.plugins.filter.bcd_run import bcd_whole_run, limits

from tests.helpers import ROOT, run_playbook

PLAYBOOKS = ["adopt-cluster.yml", "add-nodes.yml", "rollout.yml", "release-cluster.yml", "audit.yml", "doctor.yml",
             "gpu-stack.yml", "render.yml"]


@pytest.mark.parametrize(("cliargs", "said"), [
    ({"tags": ("all",), "skip_tags": (), "start_at_task": None}, []),
    ({}, []),
    ({"tags": ("revoke",), "skip_tags": ()}, ["--tags revoke"]),
    ({"tags": ("always",)}, ["--tags always"]),
    ({"tags": ("untagged",)}, []),
    # no task is tagged: skipping a tag skips nothing (molecule's converge skips notest) ...
    ({"tags": ("all",), "skip_tags": ("molecule-notest", "notest")}, []),
    # ... but every task is untagged
    ({"tags": ("all",), "skip_tags": ("wait", "untagged")}, ["--skip-tags wait,untagged"]),
    ({"skip_tags": ("all",)}, ["--skip-tags all"]),
    # the roles' argument validation is tagged always
    ({"skip_tags": ("always",)}, ["--skip-tags always"]),
    ({"start_at_task": "Take the cluster's lock"}, ["--start-at-task \"Take the cluster's lock\""]),
    ({"tags": ("a",), "skip_tags": ("untagged",), "start_at_task": "T"}, ["--tags a", "--skip-tags untagged", "--start-at-task 'T'"]),
    # each task's prompt could skip any of them, the token's revocation too
    ({"step": True}, ["--step"]),
    ({"step": False}, []),
])
def test_the_options_that_limit_a_run_are_named(cliargs, said, monkeypatch):
    assert limits(cliargs) == said
    monkeypatch.setattr(bcd_run, "_cliargs", lambda: cliargs)
    if said:
        with pytest.raises(AnsibleFilterError, match="refused before any change") as err:
            bcd_whole_run("clusters")
        assert " and ".join(said) in str(err.value)
    else:
        assert bcd_whole_run("clusters") == "clusters"


def test_the_options_are_read_from_ansible_and_without_them_nothing_is_refused(monkeypatch):
    from ansible import context

    monkeypatch.setattr(context, "CLIARGS", {"tags": ("revoke",)})
    with pytest.raises(AnsibleFilterError, match="--tags revoke"):
        bcd_whole_run("clusters")
    # ansible.context is not a plugin API: a build without it (or of another shape) refuses nothing
    monkeypatch.setattr(context, "CLIARGS", None)
    assert bcd_whole_run("clusters") == "clusters"
    monkeypatch.setitem(sys.modules, "ansible.context", types.ModuleType("ansible.context"))
    import ansible

    monkeypatch.delattr(ansible, "context")
    assert bcd_whole_run("clusters") == "clusters"


@pytest.mark.parametrize(("playbook", "option"), [
    *[(p, "--tags=revoke") for p in PLAYBOOKS],
    ("render.yml", "--skip-tags=untagged"),
    ("adopt-cluster.yml", "--start-at-task=Take the cluster's lock"),
    ("adopt-cluster.yml", "--step"),
    # a task inside a role: Ansible itself would find no match and exit 0 having done nothing
    ("rollout.yml", "--start-at-task=Mint a hosted join token into its Secret, for as many nodes as join_token_max_uses"),
])
def test_every_playbook_refuses_a_partial_run_before_any_task(playbook, option, tmp_path):
    inventory = tmp_path / "inventory.yml"
    # no cluster is reached: the refusal comes before the first task
    inventory.write_text("clusters:\n  hosts:\n    c1:\n      ansible_connection: local\n")
    done = run_playbook(str(ROOT / playbook), "-i", str(inventory), option, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "bcd playbooks run whole, and this run was refused before any change" in out, out[-3000:]
    assert option.split("=", 1)[0] in out
    assert "TASK [" not in out, "no task ran"
