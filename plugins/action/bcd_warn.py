"""Action plugin bcd_warn: give the operator a warning as Ansible's own warning.

A warning printed with ansible.builtin.debug is a line of output: AWX/AAP, ansible-runner and
the machine-readable callbacks see it as an ordinary result. A warning raised here lands in the
task result's ``warnings``, which every callback shows as ``[WARNING]`` and ansible-runner keeps in
the job event (``event_data.res.warnings``). Runs on the controller only; see
plugins/modules/bcd_warn.py for its documentation.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("msg",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        msg = self._task.args.get("msg")
        lines = msg if isinstance(msg, list) else [msg]
        if not lines or not all(isinstance(line, str) and line.strip() for line in lines):
            raise AnsibleActionFail("bcd_warn: msg must be a non-empty string or a list of them")
        for line in lines:
            # Captured by the task executor into this task's result warnings.
            display.warning(" ".join(line.split()))
        result.update(changed=False, msg=lines if isinstance(msg, list) else lines[0])
        return result
