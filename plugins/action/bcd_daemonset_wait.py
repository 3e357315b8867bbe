"""Action plugin bcd_daemonset_wait: run the module in slices, printing the rollout's progress.

Each module run waits up to ``PROGRESS_EVERY`` seconds (the first reads once, so the first line
says at once where the rollout stands) and returns early when the counts change; it fails by
itself on a pod that cannot start and at the wait's limit. This plugin prints a line when the
counts change and at least every ``PROGRESS_EVERY`` seconds, and hands each run the wait's start
(``since``, ``elapsed``) so that the slices make one wait.
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
        since, limit = None, None
        last, last_said = None, started
        restarted: list[str] = []
        while True:
            elapsed = time.monotonic() - started
            slice_s = 0.0 if limit is None else max(0.0, min(PROGRESS_EVERY, limit - elapsed))
            extra = {"poll_for": slice_s, "elapsed": elapsed} | ({"since": since} if since else {})
            res = self._execute_module(module_name="bcd.kubernetes.bcd_daemonset_wait",
                                       module_args={**args, **extra}, task_vars=task_vars)
            restarted += res.get("restarted") or []
            if res.get("failed") or res.get("done"):
                res["restarted"] = restarted
                res["changed"] = bool(restarted)
                return res
            since, limit = res["since"], int(res["timeout"])
            counts = (res["updated"], res["available"], res["desired"])
            now = time.monotonic()
            if counts != last or now - last_said >= PROGRESS_EVERY - 1:
                source = "the timeout option" if args.get("timeout") else "bcd_rollout_timeout"
                display.display(f"{host}: waiting for the DaemonSet to roll out: {res['updated']} of {res['desired']} pods "
                                f"updated, {res['available']} available (waited {now - started:.0f}s of {limit}s; "
                                f"{source} sets the limit)", stderr=to_stderr)
                last, last_said = counts, now
