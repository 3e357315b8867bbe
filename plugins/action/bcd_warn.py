"""Action plugin bcd_warn: return a message as an Ansible warning (see the module's docs)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("msg",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        msg = self._task.args.get("msg")
        lines = [msg] if isinstance(msg, str) else msg
        if not lines or not all(isinstance(line, str) and line.strip() for line in lines):
            raise AnsibleActionFail("bcd_warn: msg must be a non-empty string or a list of them")
        result.update(changed=False, msg=lines[0] if len(lines) == 1 else lines, warnings=list(lines))
        return result
