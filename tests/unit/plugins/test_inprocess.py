"""The in-process runner (plugin_utils/bcd_inprocess.py): a module run in the worker process returns
what the same module returns as a process (AnsibleModule's own validation, no_log masking, check
mode, diff, fail_json), and a task falls back to a module process where running here could differ."""

from __future__ import annotations

import json

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import decode, run_module_here

from tests.helpers import run_playbook

MODULE = "tests.unit.plugins.inprocess_module"
SECRET = "s3cr3t-value-0123456789"


def run(args: dict, check_mode: bool = False, diff: bool = False) -> tuple[int, dict]:
    internal = {"_ansible_check_mode": check_mode, "_ansible_diff": diff, "_ansible_no_log": False,
                "_ansible_module_name": "inprocess_module", "_ansible_verbosity": 0, "_ansible_debug": False,
                "_ansible_tracebacks_for": []}
    text, status = run_module_here(MODULE, {**args, **internal})
    return status, decode(text)


def shown(res: dict) -> str:
    """A module's result as the controller shows it (output, callbacks). Up to ansible-core 2.21
    the module masks its no_log values itself; from 2.22 it names them (``_ansible_new_secrets``)
    and ansible-core registers them and masks them wherever it shows a result."""
    text = json.dumps(res, default=str)
    try:
        from ansible.module_utils.secrets import mask_secrets, register_secrets
    except ImportError:
        return text
    register_secrets(res.get("_ansible_new_secrets") or [])
    return mask_secrets(text)


def test_a_no_log_value_is_masked_everywhere_it_appears():
    status, res = run({"name": "a", "secret": SECRET}, diff=True)
    assert status == 0
    assert SECRET not in shown(res)
    assert res["msg"].startswith("a x1 with ") and res["diff"]["after"].startswith("key: ")


def test_check_mode_and_diff_reach_the_module():
    status, res = run({"name": "a"}, check_mode=True, diff=True)
    assert status == 0 and res["check_mode"] is True and res["diff_mode"] is True and res["changed"] is False
    status, res = run({"name": "a"})
    assert res["check_mode"] is False and res["diff_mode"] is False and res["changed"] is True


def test_a_failure_keeps_the_modules_message_masked():
    status, res = run({"name": "fail", "secret": SECRET})
    assert status == 1
    assert res["failed"] is True and res["msg"].startswith("cannot do it with ") and res["node"] == "n1"
    assert SECRET not in shown(res)


def test_argument_errors_name_the_option():
    status, res = run({"count": 2})
    assert status == 1 and res["failed"] is True and res["msg"] == "missing required arguments: name"
    status, res = run({"name": "a", "count": "many"})
    assert status == 1 and "count" in res["msg"] and "int" in res["msg"]
    status, res = run({"name": "a", "bogus": 1})
    assert status == 1 and res["msg"].startswith("Unsupported parameters for (inprocess_module) module: bogus.")


def test_a_warning_is_returned_in_the_result_and_does_not_carry_over():
    status, res = run({"name": "warn"})
    assert status == 0 and [w.event.msg for w in res["warnings"]] == ["a warning from the module"]
    status, res = run({"name": "a"})
    assert "warnings" not in res


def test_an_unexpected_exception_is_a_failed_result_not_a_crash():
    status, res = run({"name": "boom", "crash": True})
    assert status == 1 and res["failed"] is True
    assert "an unexpected error in boom" in json.dumps(res, default=str)


PLAY = """
- name: In-process and as a process, the same answers
  hosts: localhost
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: In the worker process - a missing option
      bcd.kubernetes.bcd_lock: {namespace: ns, name: lock}
      register: here
      ignore_errors: true
    - name: As a process (a task environment falls back) - a missing option
      bcd.kubernetes.bcd_lock: {namespace: ns, name: lock}
      environment: {BCD_TEST: "1"}
      register: there
      ignore_errors: true
    - name: In the worker process - invalid inventory, a secret given as the key
      bcd.kubernetes.bcd_manifests:
        config: {bcd_typo: 1}
        api_key: "%(secret)s"
        template: /nonexistent
      register: here_config
      ignore_errors: true
    - name: As a process - invalid inventory, a secret given as the key
      bcd.kubernetes.bcd_manifests:
        config: {bcd_typo: 1}
        api_key: "%(secret)s"
        template: /nonexistent
      environment: {BCD_TEST: "1"}
      register: there_config
      ignore_errors: true
    - name: Compare
      ansible.builtin.assert:
        that:
          - here.failed and there.failed
          - here.msg == there.msg
          - "here.msg == 'missing required arguments: run'"
          - here_config.msg == there_config.msg
          - here_config.errors == there_config.errors
        quiet: true
"""


def test_a_task_runs_in_process_on_the_controller_and_as_a_process_elsewhere(tmp_path):
    book = tmp_path / "parity.yml"
    book.write_text(PLAY % {"secret": SECRET})
    done = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-vvvv")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count("in the worker process") == 2, out[-4000:]
    assert out.count("as a separate process: the task sets an environment") == 2
    assert SECRET not in out


def test_with_the_default_stdout_callback_modules_still_run_in_the_worker(tmp_path):
    # The probe runs in the worker then (our concise callback runs it before forking): on 2.21 a
    # parse hands its warning to the task's warning context, which must not show it or turn the
    # in-process runner off
    book = tmp_path / "parity.yml"
    book.write_text(PLAY % {"secret": SECRET})
    done = run_playbook(str(book), "-i", "localhost,", "-c", "local", "-vvvv",
                        env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert out.count("in the worker process") == 2, out[-4000:]
    assert "bcd probe warning" not in out and "in-process runner expects" not in out, out[-4000:]


def test_another_packages_mixin_does_not_hide_the_module_run():
    """mitogen's strategy mixes its ActionModuleMixin, whose run() only calls ours, into every
    action plugin: the module still runs (it did not, and the task returned an empty result)."""
    from ansible.plugins.action import ActionBase
    from ansible_collections.bcd.kubernetes.plugins.action.bcd_daemonset_wait import ActionModule as Wait
    from ansible_collections.bcd.kubernetes.plugins.action.bcd_manifests import ActionModule as Manifests

    class Mixin(ActionBase):
        def run(self, tmp=None, task_vars=None):
            return super().run(tmp, task_vars)

    for plugin, itself in ((Manifests, False), (Wait, True)):
        mixed = type("Mixed", (Mixin, plugin), {})
        assert mixed._runs_module_itself(object.__new__(mixed)) is itself, plugin
        assert plugin._runs_module_itself(object.__new__(plugin)) is itself, plugin


MITOGEN_PLAY = """
- name: Our modules under mitogen's strategy
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
    - name: Both ran and failed as under the default strategy
      ansible.builtin.assert:
        that:
          - "lock.msg == 'missing required arguments: run'"
          - "render.msg is search('INVALID_CONFIG: bcd_image: is required')"
"""


def test_modules_run_under_mitogens_strategy(tmp_path):
    from tests.helpers import mitogen_env

    book = tmp_path / "mitogen.yml"
    book.write_text(MITOGEN_PLAY)
    done = run_playbook(str(book), "-i", "localhost,", "-c", "local", env=mitogen_env())
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
