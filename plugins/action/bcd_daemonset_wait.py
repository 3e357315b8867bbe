"""Action plugin bcd_daemonset_wait: poll the module until the DaemonSet rolled out, printing progress.

Each module run polls the DaemonSet every second for up to ``PROGRESS_EVERY`` seconds and returns
early when it rolled out or its counts changed; this plugin prints a line when the counts change
and at least every ``PROGRESS_EVERY`` seconds, and fails at the limit with the counts.
"""

from __future__ import annotations

import time

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()
MACHINE_READABLE_CALLBACKS = ("json", "jsonl", "ansible.posix.json", "ansible.posix.jsonl")
PROGRESS_EVERY = 25.0


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        host = task_vars.get("inventory_hostname", "")
        to_stderr = C.DEFAULT_STDOUT_CALLBACK in MACHINE_READABLE_CALLBACKS
        started = time.monotonic()
        deadline = None
        last, last_said = None, started
        while True:
            # the first run reads once, so the first line says at once where the rollout stands
            left = 0.0 if deadline is None else max(0.0, min(PROGRESS_EVERY, deadline - time.monotonic()))
            res = self._execute_module(module_name="bcd.kubernetes.bcd_daemonset_wait", module_args={**args, "poll_for": left},
                                       task_vars=task_vars)
            if res.get("failed"):
                return res
            limit = int(res["timeout"])
            deadline = deadline or started + limit
            counts = (res["updated"], res["available"], res["desired"])
            now = time.monotonic()
            if res["done"]:
                res["waited"] = round(now - started, 1)
                return res
            if counts != last or now - last_said >= PROGRESS_EVERY - 1:
                source = "the timeout option" if args.get("timeout") else "bcd_rollout_timeout"
                what = (f"{res['updated']} of {res['desired']} pods updated, {res['available']} available" if res["found"]
                        else "the DaemonSet does not exist yet")
                display.display(f"{host}: waiting for the DaemonSet to roll out: {what} (waited {now - started:.0f}s of "
                                f"{limit}s; {source} sets the limit)", stderr=to_stderr)
                last, last_said = counts, now
            if now >= deadline:
                res.update(failed=True, msg=(
                    f"the DaemonSet did not roll out within {limit}s: {res['available']} of {res['desired']} pods "
                    f"available, {res['updated']} updated" if res["found"] else
                    f"the DaemonSet was not found within {limit}s"))
                return res
