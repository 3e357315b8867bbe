"""Action plugin bcd_daemonset_wait: run the module in slices, printing the rollout's progress.

Each module run waits up to ``PROGRESS_EVERY`` seconds (the first ``FIRST_SLICE``, so the first
line comes within 30 s however long a module run takes to start) following the DaemonSet and its
pods by a watch, and returns early when the counts changed and at least the module's
``progress_every`` (20 s) passed: each return costs a new module run (a Python start, about a
second), so returning at every change would slow the wait; it fails by
itself on a pod that cannot start and at the wait's limit. This plugin prints a line when the
counts change and at least every ``PROGRESS_EVERY`` seconds, and hands each run the wait's start
(``since``, ``elapsed``) so that the slices make one wait (plugin_utils/bcd_progress.py).
"""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_progress import (
    Progress,
    Step,
    poll_in_slices,
)

FIRST_SLICE = 20.0  # seconds


class ActionModule(BcdAction):

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        progress = Progress(task_vars.get("inventory_hostname", ""))
        restarted: list[str] = []
        source = "the timeout option" if args.get("timeout") else "bcd_rollout_timeout"

        def execute(slice_s: float, extra: dict) -> dict:
            return self._execute_module(module_name="bcd.kubernetes.bcd_daemonset_wait",
                                        module_args={**args, **extra, "poll_for": slice_s, "elapsed": progress.elapsed()},
                                        task_vars=task_vars)

        def step(res: dict, _progress: Progress) -> Step:
            restarted.extend(res.get("restarted") or [])
            if res.get("failed") or res.get("done"):
                res["restarted"] = restarted
                res["changed"] = bool(restarted)
                return Step(done=res)
            return Step(text=f"waiting for the DaemonSet to roll out: {res['updated']} of {res['desired']} pods updated, "
                             f"{res['available']} available",
                        state=(res["updated"], res["available"], res["desired"]), limit=int(res["timeout"]),
                        variable=source, extra={"since": res["since"], "refused_at": res.get("refused_at")})

        return poll_in_slices(execute, step, progress, first_slice=FIRST_SLICE)
