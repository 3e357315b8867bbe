"""Action plugin bcd_nodes: poll the bcd_nodes module until every selected Node reports.

Runs on the controller. Each run of the bcd_nodes module lists the selected Nodes once and then
polls the control plane (ceil(pool nodes / 500) nodes.list calls a poll) every ``interval``
seconds for up to ``PROGRESS_EVERY`` s (never past the wait's limit, which the module knows from
the inventory); it returns early when every Node reports. A progress line (n of N, the time
waited and the limit, and the variable that sets it) is printed when the count changes and at
least every ``PROGRESS_EVERY`` s, so a long wait is never silent. Few module runs matter: each costs a Python start and a
Node list, and on a 2-core machine takes CPU from the cluster it waits for. Without ``wait`` it
runs the module once.
"""

from __future__ import annotations

import datetime
import time

from ansible import constants as C
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()
MACHINE_READABLE_CALLBACKS = ("json", "jsonl", "ansible.posix.json", "ansible.posix.jsonl")
# Seconds between progress lines at most (each module run polls this long, then returns).
PROGRESS_EVERY = 25.0


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def _poll(self, args: dict, task_vars: dict, diagnose: bool, poll_for: float = 0, interval: float = 2) -> dict:
        return self._execute_module(module_name="bcd.kubernetes.bcd_nodes",
                                    module_args={**args, "diagnose": diagnose, "wait": False, "poll_for": poll_for,
                                                 "interval": interval},
                                    task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        if not boolean(args.get("wait", False), strict=False):
            return self._poll(args, task_vars, boolean(args.get("diagnose", False), strict=False))
        interval = float(args.pop("interval", None) or 2)
        timeout = args.pop("timeout", None)
        args.pop("wait", None)
        host = task_vars.get("inventory_hostname", "")
        to_stderr = C.DEFAULT_STDOUT_CALLBACK in MACHINE_READABLE_CALLBACKS
        started = time.monotonic()
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        deadline = None
        last = None
        last_said = started
        polls = 0
        cp_requests = 0
        while True:
            # each run polls up to 60 s; the first one caps that at the limit itself (it reads
            # bcd_join_timeout and counts the Nodes), and its answer gives the limit for later runs
            slice_s = PROGRESS_EVERY if deadline is None else max(0.0, min(PROGRESS_EVERY, deadline - time.monotonic() - interval))
            res = self._poll({**args, "timeout": timeout, "refusals": True, "since": since}, task_vars, diagnose=False,
                             poll_for=slice_s, interval=interval)
            polls += res.get("polls", 1)
            if res.get("failed"):
                return res
            cp_requests += res.get("cp_requests", 0)
            have, want = res["reporting"], res["selected"]
            if deadline is None:
                limit = int(timeout or res.get("join_timeout") or (300 + 2 * want))
                deadline = started + limit
            if res.get("refused"):
                # a refused join does not heal by waiting: fail now, naming each refused node
                lines = [f"{name}: {why}" for name, why in sorted(res["refused"].items())]
                res.update(failed=True, changed=False, polls=polls, cp_requests=cp_requests,
                           waited=round(time.monotonic() - started, 1),
                           msg=f"{len(lines)} of {want} selected nodes were refused by the control plane (not waiting "
                               f"out the {limit}s timeout):\n" + "\n".join(lines))
                return res
            now = time.monotonic()
            if have != last or now - last_said >= PROGRESS_EVERY - 1:
                display.display(f"{host}: {have} of {want} nodes report to the control plane (waited {now - started:.0f}s "
                                f"of {limit}s; {'the timeout option' if timeout else 'bcd_join_timeout'} sets the limit)",
                                stderr=to_stderr)
                last, last_said = have, now
            if have == want:
                res.update(changed=False, polls=polls, cp_requests=cp_requests, waited=round(time.monotonic() - started, 1))
                return res
            if slice_s > 0 and time.monotonic() + interval <= deadline:
                continue  # the module already waited between its polls
            if time.monotonic() + interval > deadline:
                final = self._poll(args, task_vars, diagnose=True)
                if final.get("failed"):
                    return final
                if final["reporting"] == final["selected"]:
                    final.update(changed=False, polls=polls + 1, cp_requests=cp_requests + final.get("cp_requests", 0))
                    return final
                lines = [f"{n['name']}: {n.get('why', 'does not report')}" for n in final["nodes"] if not n["reporting"]]
                final.update(
                    failed=True, changed=False, polls=polls + 1, cp_requests=cp_requests + final.get("cp_requests", 0),
                    msg=f"{final['selected'] - final['reporting']} of {final['selected']} selected nodes did not report "
                        f"within {limit}s:\n" + "\n".join(lines),
                )
                return final
            time.sleep(interval)
