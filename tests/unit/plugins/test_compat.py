"""What the collection takes of ansible-core beyond its public plugin API (plugin_utils/bcd_compat.py),
on the ansible-core these tests run under: the in-process runner and the stdout callback use it on
a tested line whose names and result shape are as expected, and fall back - modules as separate
processes, ``concise`` as the default callback, one warning - on any other, never failing a task.

Run them under each supported ansible-core (2.19 to 2.22): the first test fails on a line not in
``TESTED``, which is the reminder to test it and add it there."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ansible.plugins.action import ActionBase
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible_collections.bcd.kubernetes.plugins.plugin_utils import bcd_compat

from tests.helpers import ansible_env

UNTESTED = "2.99.0"


@pytest.fixture
def fresh(monkeypatch):
    """bcd_compat checks once per process: these tests each start from no verdict."""
    monkeypatch.setattr(bcd_compat, "_checked", {})
    return bcd_compat


def test_this_ansible_core_is_a_tested_line_and_both_private_paths_are_on(fresh):
    assert fresh.core_line() in fresh.TESTED, f"ansible-core {fresh.core_version()}: test it, then add it to TESTED"
    assert fresh.untested() is None
    assert fresh.inprocess_unavailable() is None
    assert fresh.callback_unavailable(DefaultCallback()) is None


def test_the_parse_gives_the_dict_execute_module_gives(fresh):
    """The probe module's result, printed in-process and parsed, is a plain result dict: its
    values, its warning, no ``_ansible_`` key but ``_ansible_parsed`` (which ansible-core keeps)."""
    stdout, status = fresh.run_main(fresh._probe_main, fresh._probe_args(value="v"))
    res = fresh.parse_result(fresh._probe_action(), stdout, status)
    assert status == 0 and type(res) is dict
    assert res["value"] == "v" and res["number"] == 1 and res["changed"] is False
    assert [getattr(getattr(w, "event", None), "msg", w) for w in res["warnings"]] == ["bcd probe warning"]
    assert not [k for k in res if k.startswith("_ansible_") and k != "_ansible_parsed"]


def test_an_untested_version_turns_both_off_with_one_and_the_same_line(fresh):
    note = fresh.inprocess_unavailable(UNTESTED)
    assert note == fresh.callback_unavailable(DefaultCallback(), UNTESTED) == fresh.untested(UNTESTED)
    assert note.startswith(f"bcd: ansible-core {UNTESTED} is untested (tested: 2.19 to 2.22)")
    assert "bcd modules run as separate processes" in note and "\n" not in note
    assert fresh.core_line("devel") is None and fresh.untested("devel")


@pytest.mark.parametrize("break_it, says", [
    (lambda mp: mp.delattr("ansible.module_utils.basic.AnsibleModule._record_module_result"),
     "AnsibleModule._record_module_result is gone"),
    (lambda mp: mp.setattr(ActionBase, "_parse_returned_data", lambda self, res: {}),
     "ActionBase._parse_returned_data takes ['self', 'res'], not ['self', 'res', 'profile']"),
    (lambda mp: mp.setattr(ActionBase, "_parse_returned_data", lambda self, res, profile: ["a list"]),
     "a probe module"),
    (lambda mp: mp.setattr(ActionBase, "_parse_returned_data", lambda self, res, profile: 1 / 0),
     "a probe module failed: ZeroDivisionError"),
])
def test_a_name_gone_or_another_shape_turns_the_runner_off(fresh, monkeypatch, break_it, says):
    break_it(monkeypatch)
    note = fresh.inprocess_unavailable()
    assert note and says in note and note.endswith("bcd modules run as separate processes"), note


def test_a_default_callback_without_its_helpers_turns_concise_off(fresh, monkeypatch):
    from ansible.plugins.callback import CallbackBase

    monkeypatch.delattr(CallbackBase, "_get_item_label")
    note = fresh.callback_unavailable(DefaultCallback())
    assert "default callback._get_item_label is gone" in note and note.endswith("prints as ansible.builtin.default")


def test_a_note_is_said_once_per_process(fresh):
    said = []

    class Display:
        def warning(self, msg):
            said.append(msg)

    for _ in range(3):
        fresh.note("bcd: ansible-core 9.9 is untested", Display())
    assert said == ["bcd: ansible-core 9.9 is untested"]
    assert fresh.note_of("bcd: ansible-core 9.9 is untested") == "bcd: ansible-core 9.9 is untested"
    assert fresh.note_of({"event": {"msg": "bcd: ansible-core 9.9 is untested"}}) == "bcd: ansible-core 9.9 is untested"
    assert fresh.note_of("a warning") is None and fresh.note_of({"event": {"msg": "a warning"}}) is None


PLAY = """
- name: Our modules, whichever way they run
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: A missing option
      bcd.kubernetes.bcd_lock: {namespace: ns, name: lock}
      register: lock
      ignore_errors: true
    - name: No config given - the inventory's, which lacks bcd_image
      bcd.kubernetes.bcd_manifests: {template: /nonexistent}
      register: render
      ignore_errors: true
    - name: Both ran and failed with their own messages
      ansible.builtin.assert:
        that:
          - "lock.msg == 'missing required arguments: run'"
          - "render.msg is search('INVALID_CONFIG: bcd_image: is required')"
"""

# ansible-playbook, with something of ansible-core changed once it is imported (the forked
# workers inherit it): the version it reports, or a private name gone
LAUNCH = """
import sys, ansible.release
from ansible.cli.playbook import main
{change}
sys.argv = ["ansible-playbook", *sys.argv[1:]]
main()
"""


def _launch(tmp_path, change: str, *args: str) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(PLAY)
    return subprocess.run([sys.executable, "-c", LAUNCH.format(change=change), str(book), "-i", "localhost,",
                           "-c", "local", *args], env=ansible_env(), capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("change, says", [
    (f"ansible.release.__version__ = {UNTESTED!r}", f"bcd: ansible-core {UNTESTED} is untested"),
    ("from ansible.module_utils.basic import AnsibleModule\ndel AnsibleModule._record_module_result",
     "AnsibleModule._record_module_result is gone"),
])
@pytest.mark.parametrize("callback", ["bcd.kubernetes.concise", "ansible.builtin.default"])
def test_a_run_falls_back_to_module_processes_and_says_so_once(tmp_path, monkeypatch, change, says, callback):
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", callback)
    done = _launch(tmp_path, change, "-vvv")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count("[WARNING]: bcd: ansible-core") == 1 and says in out, out[-4000:]
    assert "in the worker process" not in out
    assert out.count("as a separate process: bcd: ansible-core") == 2


def test_a_run_on_a_tested_core_runs_the_modules_in_process(tmp_path):
    done = _launch(tmp_path, "", "-vvv")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count("in the worker process") == 2 and "bcd: ansible-core" not in out


def test_concise_says_a_note_once_and_shows_no_task_for_it(fresh, monkeypatch):
    """A module run's note (every bcd task's, when a worker finds the runner off) is the run's:
    concise says it once and does not show an ok task for it alone."""
    from ansible_collections.bcd.kubernetes.plugins.callback.concise import CallbackModule

    callback = CallbackModule()
    said = []
    monkeypatch.setattr(callback._display, "warning", said.append)
    note = "bcd: ansible-core 2.21.5 is not what bcd's in-process runner expects (x): bcd modules run as separate processes"
    assert callback._says_item({"changed": False, "warnings": [note]}) is False
    assert callback._says_item({"changed": False, "warnings": [note, "a warning of the task"]}) is True
    assert callback._says_item({"changed": True, "warnings": [note]}) is True
    assert said == [note]
