"""Action plugin bcd_nodes_info: poll the bcd_nodes_info module until every selected Node reports.

Runs on the controller. Each run of the bcd_nodes_info module lists the selected Nodes once and then
polls the control plane (ceil(pool nodes / 500) nodes.list calls a poll) every ``interval``
seconds for up to ``PROGRESS_EVERY`` s (never past the wait's limit, which the module knows from
the inventory); it returns early when every Node reports. A progress line (n of N, the time
waited and the limit, and the variable that sets it) is printed when the count changes and at
least every ``PROGRESS_EVERY`` s, so a long wait is never silent (plugin_utils/bcd_progress.py);
the control plane's retries inside a run are printed as they happen. Few module runs matter:
each costs a Python start and a Node list, and on a 2-core machine takes CPU from the cluster
it waits for. Without ``wait`` it
runs the module once.
"""

from __future__ import annotations

import datetime

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_progress import (
    PROGRESS_EVERY,
    Progress,
    RetryWatch,
    Step,
    poll_in_slices,
)

FAILING_FIX = ("The container's last exit quotes what bcd wrote before it exited (kubectl -n {ns} logs <pod> "
               "-c bcd --previous shows more); fix the cause on the Node and run again.")


def token_fix(reasons) -> str | None:
    """The fix for joins the control plane refused because of the token's limits, naming the
    variable that sets each (``reasons``: the refusals' texts, which carry the control plane's
    reason: TokenExhausted, TokenExpired), or None."""
    text = " ".join(str(r) for r in reasons)
    fixes = []
    if "TokenExhausted" in text:
        fixes.append("the join token ran out of uses: raise bcd_token_max_uses to the number of nodes to join, or "
                     "unset it (the default is that number)")
    if "TokenExpired" in text:
        fixes.append("the join token expired before these nodes joined: raise bcd_token_ttl above the join wait "
                     "(bcd_join_timeout, default 300 s + 2 s per selected Node)")
    if not fixes:
        return None
    return "Fix: " + "; ".join(fixes) + "; then run again (the next run mints a new token for the nodes left)."


class ActionModule(BcdAction):

    def _poll(self, args: dict, task_vars: dict, diagnose: bool, poll_for: float = 0, interval: float = 2) -> dict:
        with RetryWatch(task_vars.get("inventory_hostname", "")):
            return self._execute_module(module_name="bcd.kubernetes.bcd_nodes_info",
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
        progress = Progress(task_vars.get("inventory_hostname", ""))
        namespace = self._namespace(args)
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        variable = "the timeout option" if timeout else "bcd_join_timeout"
        count = {"polls": 0, "cp_requests": 0, "limit": None}

        def execute(slice_s: float, _extra: dict) -> dict:
            # the first run polls up to PROGRESS_EVERY s, capped at the limit itself (it reads
            # bcd_join_timeout and counts the Nodes); its answer gives the limit for later runs
            return self._poll({**args, "timeout": timeout, "refusals": True, "pods": True, "since": since}, task_vars,
                              diagnose=False, poll_for=slice_s, interval=interval)

        def step(res: dict, progress: Progress) -> Step:
            count["polls"] += res.get("polls", 1)
            if res.get("failed"):
                return Step(done=res)
            count["cp_requests"] += res.get("cp_requests", 0)
            have, want = res["reporting"], res["selected"]
            if count["limit"] is None:
                count["limit"] = int(timeout or res.get("join_timeout") or (300 + 2 * want))
            limit = count["limit"]
            if res.get("refused"):
                # a refused join does not heal by waiting: fail now, naming each refused node
                lines = [f"{name}: {why}" for name, why in sorted(res["refused"].items())]
                res.update(failed=True, changed=False, polls=count["polls"], cp_requests=count["cp_requests"],
                           waited=round(progress.elapsed(), 1),
                           msg=f"{len(lines)} of {want} selected nodes were refused by the control plane (not waiting "
                               f"out the {limit}s timeout):\n" + "\n".join(lines) + "".join(
                                   f"\n{fix}" for fix in [token_fix(lines)] if fix))
                return Step(done=res)
            if res.get("failing"):
                # a crash-looping or failing pod does not heal by waiting either: fail now, naming
                # each pod, its state and its container's last exit, whatever the control plane says
                lines = [f"{name}: {why}" for name, why in sorted(res["failing"].items())]
                res.update(failed=True, changed=False, polls=count["polls"], cp_requests=count["cp_requests"],
                           waited=round(progress.elapsed(), 1),
                           msg=f"{len(lines)} of {want} selected nodes have a failing bcd pod, whatever the control "
                               f"plane says (not waiting out the {limit}s timeout):\n" + "\n".join(lines)
                               + "\n" + FAILING_FIX.format(ns=namespace))
                return Step(done=res)
            sick = len(res.get("unhealthy") or [])
            text = f"{have} of {want} nodes report to the control plane"
            line = Step(text=text + (f", {sick} bcd pod(s) not healthy yet" if sick else ""), state=(have, sick),
                        limit=limit, variable=variable, margin=interval, pause=interval)
            if have == want and not sick:
                res.update(changed=False, polls=count["polls"], cp_requests=count["cp_requests"],
                           waited=round(progress.elapsed(), 1))
                line.done = res
            elif progress.elapsed() + interval > limit:
                line.done = self._final(args, task_vars, count, limit)
            return line

        return poll_in_slices(execute, step, progress, first_slice=PROGRESS_EVERY)

    @staticmethod
    def _namespace(args: dict) -> str:
        config = args.get("config")
        return str((config.get("bcd_namespace") if isinstance(config, dict) else None) or "bcd-system")

    def _final(self, args: dict, task_vars: dict, count: dict, limit: int) -> dict:
        """The wait's limit is reached: one more read, with each missing Node's reason and each pod
        that is not healthy."""
        final = self._poll({**args, "pods": True}, task_vars, diagnose=True)
        if final.get("failed"):
            return final
        polls, cp_requests = count["polls"] + 1, count["cp_requests"] + final.get("cp_requests", 0)
        sick = final.get("unhealthy") or []
        if final["reporting"] == final["selected"] and not sick:
            final.update(changed=False, polls=polls, cp_requests=cp_requests)
            return final
        lines = [f"{n['name']}: {n.get('why', 'does not report')}" for n in final["nodes"] if not n["reporting"]]
        msg = []
        if lines:
            msg.append(f"{final['selected'] - final['reporting']} of {final['selected']} selected nodes did not report "
                       f"within {limit}s:\n" + "\n".join(lines))
        missing = set(final["missing"])  # a list searched per pod is O(N^2) at 5,000 nodes
        reporting_sick = [u for u in sick if u["node"] not in missing]
        if reporting_sick:
            msg.append(f"{len(reporting_sick)} of {final['selected']} selected nodes report, but their bcd pod is not "
                       f"healthy after {limit}s:\n" + "\n".join(f"{u['node']}: {u['why']}" for u in reporting_sick)
                       + "\n" + FAILING_FIX.format(ns=self._namespace(args)))
        fix = token_fix(lines)
        if fix:
            msg.append(fix)
        final.update(failed=True, changed=False, polls=polls, cp_requests=cp_requests, msg="\n".join(msg))
        return final
