"""Action plugin bcd_lock: wait for another run's lock in slices, printing who holds it.

With ``wait`` (seconds) and ``state=present``, the module runs in slices of at most
``PROGRESS_EVERY`` s (the first looks once, so a held lock is said at once); between them a line
says which Lease is waited for, who holds it since when and until when, the time waited, the
limit and the variable that sets it (``wait_set_by``). The module fails by itself at the limit
("locked by ..."). Without a wait, the module runs once (plugin_utils/bcd_progress.py).
"""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_progress import (
    Progress,
    Step,
    poll_in_slices,
)


class ActionModule(BcdAction):

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            wait = int(args.get("wait") or 0)
        except (TypeError, ValueError):
            wait = 0  # the module refuses it, naming the option
        if wait <= 0 or args.get("state", "present") != "present":
            return self._execute_module(module_name="bcd.kubernetes.bcd_lock", module_args=args, task_vars=task_vars)
        progress = Progress(task_vars.get("inventory_hostname", ""))
        variable = args.get("wait_set_by") or "the wait option"

        def execute(slice_s: float, _extra: dict) -> dict:
            return self._execute_module(module_name="bcd.kubernetes.bcd_lock",
                                        module_args={**args, "poll_for": slice_s, "elapsed": progress.elapsed()},
                                        task_vars=task_vars)

        def step(res: dict, _progress: Progress) -> Step:
            if res.get("failed") or not res.get("waiting"):
                return Step(done=res)
            return Step(text=f"waiting for {res.get('lease', 'the lock')}, which another bcd-ansible run holds: "
                             f"{res.get('holder')} (since {res.get('since')}, until {res.get('until')})",
                        state=(res.get("holder"), res.get("until")), limit=wait, variable=variable)

        return poll_in_slices(execute, step, progress)
