"""Filters for the fleet summary: what each cluster of a run did, from the facts its play set.

A run of any of the playbooks on several clusters (inventory hosts of group ``clusters``) ends
with one line per cluster and, where several clusters share ``bcd_report_out``, one JSON report
holding all of them (roles/fleet).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_report import REPORT_SCHEMA_VERSION
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import short_ref

_CLUSTER_FACTS = ("adopt_cluster", "rollout_cluster", "audit_cluster", "release_cluster_name")
# Facts whose presence shows that a host's play ran (a host of the pattern that never ran, under
# --limit or after an earlier play failed it, has none of them).
# gpu_stack_settings: gpu-stack.yml's first step, which runs under --check too, where the gate does not
_RAN_FACTS = ("fleet_failure", "bcd_daemonset_fleet_report", "bcd_daemonset_render", "gpu_stack_verify_cluster",
              "gpu_stack_verify_folder", "gpu_stack_settings", "audit_result", "audit_error", *_CLUSTER_FACTS)


def _get(obj, *keys, default=None):
    for key in keys:
        if isinstance(obj, Mapping) and key in obj:
            obj = obj[key]
        else:
            return default
    return default if obj is None else obj


def _plain(value):
    """Ansible's lazy and tagged containers as plain lists and dicts (for JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _count(value) -> int:
    return len(value) if isinstance(value, (list, tuple)) else 0


def _raw_report_out(hv) -> str | None:
    """The host's bcd_report_out as given, absolute (relative to where ansible-playbook runs, as the
    inventory lookup takes it); None when unset or when it does not template (the cluster's play
    has refused it already)."""
    try:
        raw = hv.get("bcd_report_out")
    except Exception:  # noqa: BLE001 - any templating error: the render step names it
        return None
    return os.path.abspath(str(raw)) if isinstance(raw, str) and raw else None


def _report_out(hv) -> str | None:
    resolved = _get(hv, "bcd_daemonset_render", "config", "bcd_report_out")
    return str(resolved) if resolved else _raw_report_out(hv)


def _isolation_verdict(hv) -> Mapping:
    """The GPU isolation verdict the host's play registered (role gpu_stack, verify.yml): of the
    node root folder (bcd_node_root), else of the cluster; {} when neither ran to a verdict."""
    for key in ("gpu_stack_verify_folder", "gpu_stack_verify_cluster"):
        res = _get(hv, key)
        if isinstance(res, Mapping) and not res.get("skipped") and not res.get("failed") and "passed" in res:
            return res
    return {}


def _adopt(hv, rec, joined_word):
    report = _get(hv, "bcd_daemonset_joined") if _get(hv, "bcd_daemonset_joined", "nodes") is not None else None
    report = report or _get(hv, "bcd_daemonset_report") or {}
    minted = 1 if _get(hv, "join_token_minted", "id") else 0
    # joined by this run: the uses of this run's token as the control plane recorded them when it
    # was revoked (a node that rejoins with the identity it has spends none); unknown (None) when
    # the token was minted but its record could not be read
    uses = _get(hv, "join_token_revoked", "uses")
    if not minted:
        joined = 0
    elif isinstance(uses, Mapping) and uses and all(isinstance(v, int) for v in uses.values()):
        joined = sum(uses.values())
    else:
        joined = None
    revoked = _count(_get(hv, "join_token_revoked", "revoked")) + _count(_get(hv, "join_token_stale", "revoked"))
    rec["tokens"] = {"minted": minted, "revoked": revoked}
    if "selected" in report:
        rec["nodes"] = {"selected": report.get("selected"), "reporting": report.get("reporting"), joined_word: joined}
        said = f"{joined} {joined_word} by this run" if joined is not None else \
            f"how many {joined_word} by this run is unknown (its token's record could not be read)"
        rec["detail"] = f"{report.get('reporting')} of {report.get('selected')} selected node(s) report, {said}"
    rec["report"] = _plain(_isolation_verdict(hv).get("report"))


def _rollout(hv, rec):
    summary = _get(hv, "bcd_daemonset_fleet_report") or {}
    rows = summary.get("nodes") or []
    rolled = [r for r in rows if str(r.get("outcome") or "").startswith("rolled")]
    rec["nodes"] = {"selected": len(rows), "rolled": len(rolled) if summary.get("result") == "succeeded" else 0,
                    "failed": [f.get("node") for f in summary.get("failed_nodes") or []]}
    if summary:
        rec["detail"] = f"{summary.get('result')}: {summary.get('headline')}"
    rec["report"] = _plain(summary) or None


def _isolation(hv, rec):
    iso = _isolation_verdict(hv)
    nodes = iso.get("nodes") or []
    if iso:
        ok = [n for n in nodes if n.get("verdict") == "isolated"]
        rec["nodes"] = {"selected": len(nodes), "isolated": len(ok)}
        rec["detail"] = f"{len(ok)} of {len(nodes)} node(s) isolated"
    rec["report"] = _plain(iso.get("report"))


def _audit(hv, rec):
    result = _get(hv, "audit_result") or {}
    checks = result.get("results") or []
    if checks:
        failed = [c for c in checks if not c.get("ok")]
        rec["nodes"] = {"checks": len(checks), "failed_checks": len(failed)}
        paths = _get(hv, "audit_result", "host_paths")
        if paths:  # extra host paths come first, in the verdict too
            rec["nodes"]["extra_host_paths"] = _count(paths)
        rec["detail"] = f"{len(failed)} of {len(checks)} check(s) failed"
    err = _get(hv, "audit_error", "message")
    if err and not rec["failure"]:
        rec["result"], rec["failure"] = "failed", f"the audit could not run: {err}"
    rec["report"] = None  # audit.yml writes every cluster into bcd_report_out itself


def _release(hv, rec):
    removed = _get(hv, "release_cluster_nodes", "removed")
    rec["tokens"]["revoked"] = _count(_get(hv, "join_token_stale", "revoked"))
    if removed is not None:
        rec["nodes"] = {"removed": _count(removed), "already_removed": _count(_get(hv, "release_cluster_nodes", "already_removed"))}
        rec["detail"] = f"{_count(removed)} node(s) removed from the control plane"


def _render(hv, rec):
    dest = _get(hv, "bcd_daemonset_render", "dest")
    if dest and not rec["failure"]:  # a failed render returns its dest too, unwritten
        rec["detail"] = f"rendered to {dest}"


_KINDS = {
    "adopt-cluster": lambda hv, rec: _adopt(hv, rec, "joined"),
    "add-nodes": lambda hv, rec: _adopt(hv, rec, "joined"),
    "rollout": _rollout,
    "doctor": _isolation,
    "gpu-stack": _isolation,
    "audit": _audit,
    "release-cluster": _release,
    "render": _render,
}


def bcd_fleet_records(hostvars, hosts, playbook: str) -> list[dict]:
    """``hostvars | bcd.kubernetes.bcd_fleet_records(hosts, playbook)``: one record per host of
    ``hosts`` that took part in this run (it set ``fleet_failure`` or a fact the playbook sets),
    ``{cluster, host, playbook, result, failure, detail, nodes, tokens: {minted, revoked},
    report_out, report}``.

    ``result`` is ``failed`` when the cluster's play noted a failure (``fleet_failure``, set in
    its rescue), else ``ok``; ``failure`` is ``<task>: <message>`` or None. ``nodes`` counts what
    the playbook did to nodes (adopt-cluster, add-nodes: nodes that report, and joined by this run;
    rollout: nodes rolled, and failed; doctor, gpu-stack: nodes isolated; audit: checks failed;
    release-cluster: nodes removed). ``report`` is the per-cluster document the playbook writes to
    ``bcd_report_out`` with one cluster (adopt-cluster, add-nodes, doctor, gpu-stack: the GPU
    isolation report; rollout: the rollout summary), or None; ``report_out`` the absolute
    ``bcd_report_out``, or None. ``playbook``: one of adopt-cluster, add-nodes, rollout, doctor,
    gpu-stack, audit, release-cluster, render (ValueError otherwise).
    """
    if playbook not in _KINDS:
        raise ValueError(f"bcd_fleet_records: unknown playbook {playbook!r} (one of {', '.join(sorted(_KINDS))})")
    records = []
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        if not any(key in hv for key in _RAN_FACTS):
            continue
        name = next((str(hv[k]) for k in _CLUSTER_FACTS if hv.get(k)), None) or str(hv.get("bcd_cluster_name") or host)
        fail = _get(hv, "fleet_failure")
        failure = f"{fail.get('task')}: {fail.get('msg')}" if isinstance(fail, Mapping) else None
        # a cluster of a later wave that an earlier wave's failure stopped never started
        unstarted = isinstance(fail, Mapping) and str(fail.get("msg") or "").startswith("not started")
        rec = {"cluster": name, "host": str(host), "playbook": playbook,
               "result": "not started" if unstarted else "failed" if failure else "ok",
               "failure": failure, "detail": None, "nodes": None, "tokens": {"minted": 0, "revoked": 0},
               "report_out": _report_out(hv), "report": None}
        _KINDS[playbook](hv, rec)
        records.append(rec)
    return records


def bcd_fleet_lines(records: list[dict]) -> list[str]:
    """The printed summary: one line per cluster, then the verdict."""
    width = max([len(r["cluster"]) for r in records] + [7])
    result_width = 11 if any(r["result"] == "not started" for r in records) else 6
    lines = [f"{'CLUSTER':<{width}}  {'RESULT':<{result_width}}  TOKENS (minted/revoked)  WHAT"]
    for r in records:
        what = r["detail"] or "-"
        if r["result"] == "not started":
            what = r["failure"].split(": ", 1)[-1]
        elif r["failure"]:
            what = f"{what}; FAILED at {r['failure']}" if r["detail"] else f"FAILED at {r['failure']}"
        tokens = f"{r['tokens']['minted']}/{r['tokens']['revoked']}"
        lines.append(f"{r['cluster']:<{width}}  {r['result']:<{result_width}}  {tokens:<23}  {what}")
    failed = [r["cluster"] for r in records if r["failure"] and r["result"] != "not started"]
    unstarted = [r["cluster"] for r in records if r["result"] == "not started"]
    verdict = [f"{len(failed)} failed ({', '.join(failed)})"] if failed else []
    verdict += [f"{len(unstarted)} not started ({', '.join(unstarted)})"] if unstarted else []
    lines.append(f"{len(records)} cluster(s): " + (", ".join(verdict) if verdict else "all ok"))
    return lines


def bcd_fleet_shares_report(hostvars, hosts, me) -> bool:
    """Whether another host of ``hosts`` writes the same ``bcd_report_out`` as host ``me`` (then the
    fleet summary writes one report holding them all, and no host writes its own)."""
    def path(host):
        return _raw_report_out(hostvars[host]) if host in hostvars else None

    mine = path(me)
    return mine is not None and any(h != me and path(h) == mine for h in hosts)


def bcd_kube_source(hostvars, host) -> str:
    """How host ``host`` reached its cluster, for a failure line: the API server and context the
    render recorded (``bcd_daemonset_render.cluster``), else the kubeconfig and context it was given
    (``bcd_kubeconfig``, ``bcd_kube_context``) or their defaults."""
    hv = hostvars[host] if host in hostvars else {}
    reached = _get(hv, "bcd_daemonset_render", "cluster")
    if reached:
        return str(reached)
    kubeconfig = _get(hv, "bcd_kubeconfig") or "from K8S_AUTH_KUBECONFIG, KUBECONFIG or ~/.kube/config"
    context = _get(hv, "bcd_kube_context") or "from K8S_AUTH_CONTEXT or its current context"
    return f"kubeconfig {kubeconfig}, context {context}"


# playbooks whose cluster plays write no report of their own: the fleet report is theirs, for one
# cluster too (docs/reports.md)
_FLEET_REPORT_ONLY = ("release-cluster", "render")


def bcd_fleet_reports(records: list[dict], finished_at: str | None = None) -> list[dict]:
    """``[{path, document}]``: one JSON document for each ``bcd_report_out`` several clusters
    share, and for each of a playbook that has no other report (release-cluster, render),
    ``{"schema_version", "playbook", "finished_at", "passed", "failed", "summary", "clusters": [record]}``."""
    by_path: dict[str, list[dict]] = {}
    for r in records:
        if r["report_out"] and r["playbook"] != "audit":
            by_path.setdefault(r["report_out"], []).append(r)
    out = []
    for path, group in by_path.items():
        if len(group) < 2 and group[0]["playbook"] not in _FLEET_REPORT_ONLY:
            continue
        failed = [r["cluster"] for r in group if r["failure"]]
        clusters = [{k: v for k, v in r.items() if k != "report_out"} for r in group]
        out.append({"path": path, "document": {
            "schema_version": REPORT_SCHEMA_VERSION, "playbook": group[0]["playbook"], "finished_at": finished_at, "passed": not failed, "failed": failed,
            "summary": bcd_fleet_lines(group), "clusters": clusters}})
    return out


# --- the verdict: the run's last line ----------------------------------------------------------

# what an ok cluster was, by playbook (the verdict of several clusters counts them)
_DONE = {"adopt-cluster": "adopted", "add-nodes": "joined", "rollout": "rolled", "doctor": "checked",
         "gpu-stack": "configured", "audit": "audited", "release-cluster": "released", "render": "rendered"}
# a failure's reason in the next step is cut here (the whole reason is printed above it)
_REASON_MAX = 160
# a refusal's own fix in the next step: whole, unless something made it far longer than ours are
_FIX_MAX = 480


# an image by digest, whole: registry and path, name[:tag], sha256 and 64 hex
_IMAGE_RE = re.compile(r"(?:[\w.-]+(?::\d+)?/)*[\w.-]+(?::[\w.-]+)?@sha256:[0-9a-f]{64}\b")


def _refusal(said: str) -> str:
    """A refused rollout's reason for the verdict: each part of the refusal with the Nodes it
    names, not each Node's why (the refusal above has them in full): ``2 of 3 selected node(s) are
    down, more than bcd_rollout_max_down 10% allows (1): gpu-node-2, gpu-node-3``."""
    parts = []
    for part in said.removeprefix("rollout refused: ").split(". "):
        head, sep, details = part.partition(": ")
        names = [d.partition(": ")[0] for d in details.split("; ")] if sep else []
        if names and all(n and n != "-" and " " not in n for n in names):
            part = f"{head}: " + ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        parts.append(part)
    return _reason("; ".join(parts))


def _reason(text, limit: int = _REASON_MAX) -> str:
    """A failure's reason, short enough for the verdict line: folded, images named short (as
    :func:`short_ref`; the whole reference is in the failure above), cut at a word, never inside a
    parenthesis, and without a full stop of its own (the verdict goes on after it: ", then ...")."""
    folded = " ".join(str(text or "").split()).removeprefix("Task failed: ") or "the error above"
    folded = _IMAGE_RE.sub(lambda m: short_ref(m.group(0)), folded)
    for tail in ("; the reason is above", " (the error is above)", " (the reason is above)"):
        folded = folded.removesuffix(tail)
    if len(folded) <= limit:
        return folded[:-1] if folded.endswith(".") and not folded.endswith("..") else folded
    cut = folded[:limit].rsplit(" ", 1)[0]
    if cut.count("(") > cut.count(")"):
        # an aside cut in half reads as a different sentence: end before it, or close it when
        # it began near the start (nothing would be left before it)
        opened = cut.rindex("(")
        if opened < limit // 4:
            return cut.rstrip(" ,;:.") + " ...)"
        cut = cut[:opened]
    return cut.rstrip(" ,;:.") + " ..."


def _nodes(rec) -> dict:
    return rec.get("nodes") if isinstance(rec.get("nodes"), Mapping) else {}


def _again(playbook: str, hosts: list[str] | None = None) -> str:
    limit = f" -l {','.join(hosts)}" if hosts else ""
    return f"ansible-playbook {playbook}.yml{limit} again"


def _failure_reason(rec) -> str:
    """Why a cluster failed, in the fewest words that are true: a rollout's first failed node and
    why (its play's own failure only says that the rollout did not complete), else the failure."""
    report = rec.get("report") if isinstance(rec.get("report"), Mapping) else {}
    failed = [f for f in report.get("failed_nodes") or [] if isinstance(f, Mapping)]
    if rec["playbook"] == "rollout" and failed:
        more = f" (and {len(failed) - 1} more node(s))" if len(failed) > 1 else ""
        return _reason(f"{failed[0].get('node')}: {failed[0].get('why')}") + more
    if rec["playbook"] == "rollout" and report.get("result") == "refused" and report.get("headline"):
        return _refusal(report["headline"].partition(" Nothing was changed. ")[0])
    if rec["playbook"] == "rollout" and report.get("result") == "locked" and report.get("headline"):
        return _reason(report["headline"])
    return _reason(str(rec.get("failure") or "").split(": ", 1)[-1])


def _rollout_left(report) -> tuple[str, str | None]:
    """What a rollout that passed left to do, from its report: ``("; 1 down node(s) left behind
    (gpu-node-2)...", the next command)``, or ``("", None)``."""
    def names(items) -> list[str]:
        return [i.get("node") if isinstance(i, Mapping) else str(i) for i in items if i]

    behind = names(report.get("left_behind") or [])
    unverified = names(report.get("not_verified") or [])
    joined = names(report.get("joined") or [])
    parts, then = [], []
    for listed, what in ((behind, "down node(s) left behind"),
                         (unverified, "rolled but not verified (their Node went down)"),
                         (joined, "joined during the rollout, not judged")):
        if listed:
            shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
            parts.append(f"{len(listed)} {what} ({shown})")
    if behind or unverified:
        then.append("ansible-playbook rollout.yml with the same bcd_image once the down Nodes are back "
                    "(audit.yml names each node still behind meanwhile)")
    if joined:
        then.append("ansible-playbook add-nodes.yml (a Node that joined has no join token yet)")
    return "".join(f"; {p}" for p in parts), ("; then ".join(then) or None)


def _cluster_verdict(rec, check_mode: bool) -> tuple[str, str | None]:
    """(what happened to one cluster, the next command or None), from its record."""
    playbook, name, nodes = rec["playbook"], rec["cluster"], _nodes(rec)
    report = rec.get("report") if isinstance(rec.get("report"), Mapping) else {}
    counted = "selected" in nodes and "reporting" in nodes
    reports = (f"{nodes['reporting']} of {nodes['selected']} selected nodes report to the control plane"
               if counted else None)
    if rec["result"] == "not started":
        return f"cluster {name} not started ({_reason(rec.get('failure', '').split(': ', 1)[-1])})", None
    if rec["failure"]:
        what = {"adopt-cluster": "NOT adopted", "add-nodes": "nodes NOT joined", "rollout": "rollout FAILED",
                "release-cluster": "NOT released", "render": "NOT rendered"}.get(playbook, "FAILED")
        if playbook == "rollout" and report.get("result") == "rolled_back":
            back = short_ref((report.get("from") or {}).get("image"))
            to = short_ref((report.get("to") or {}).get("image"))
            what = f"rollout to {to} FAILED and was rolled back: every node on {back}"
        elif playbook == "rollout" and report.get("result") == "rollback_failed":
            what = "rollout FAILED and its rollback did not complete"
        elif playbook == "rollout" and report.get("result") == "refused":
            what = "rollout refused, nothing changed"
        elif playbook == "rollout" and report.get("result") == "locked":
            what = "rollout not started"
        # the failed task is named above (its fatal line and the summary): the reason is what to fix
        line = f"cluster {name} {what}" + (f"; {reports}" if reports else "")
        if playbook in ("adopt-cluster", "add-nodes") and reports and nodes.get("joined"):
            # a run that failed on one Node may have joined others: they spent the token's uses
            line += f", {nodes['joined']} joined by this run"
        if "isolated" in nodes:
            line += f"; {nodes['isolated']} of {nodes.get('selected', 0)} selected nodes isolated"
        if playbook == "audit":  # its record's failure is the audit's own error, not a task's
            line = f"cluster {name}: {_reason(rec['failure'])}"
        if playbook == "rollout" and report.get("result") == "locked":
            holder = report.get("holder")
            return line, (f"wait for the run that holds the cluster's lock{f' ({holder})' if holder else ''} to finish, "
                          f"then {_again(playbook)}")
        if playbook == "doctor" and "isolated" in nodes and nodes["isolated"] < nodes.get("selected", 0):
            return line, "ansible-playbook gpu-stack.yml (it configures GPU isolation), then ansible-playbook doctor.yml again"
        if playbook == "rollout" and report.get("result") in ("failed", "rollback_failed") and any(
                isinstance(s, Mapping) and s.get("nodes") for s in report.get("stages") or []):
            # pods left on two revisions: the next rollout's own check refuses an incomplete one
            return line, (f"fix {_failure_reason(rec)}, then {_again(playbook)} with -e bcd_rollout_force=true (a "
                          "rollout left incomplete is refused without it)")
        said, fix = str(report.get("headline") or "").partition(" Nothing was changed. ")[::2]
        if playbook == "rollout" and report.get("result") == "refused" and fix:
            # the refusal says what to do after what it changed (nothing): that is the next step
            # the fix is whole (the engine's own words, of bounded length): a cut fix is no fix
            return f"{line}: {_refusal(said)}", f"{_reason(fix[0].lower() + fix[1:], _FIX_MAX)}, then {_again(playbook)}"
        if playbook == "rollout" and report.get("result") == "rolled_back" and report.get("failed_nodes"):
            # the new image failed where it ran first: a fault of the image, or of those nodes
            return line, (f"find out why the new image failed ({_failure_reason(rec)}: the image, or those nodes), "
                          f"then {_again(playbook)}")
        return line, f"fix {_failure_reason(rec)}, then {_again(playbook)}"
    if check_mode and playbook not in ("audit", "doctor"):
        plan = ""
        if playbook == "rollout" and isinstance(report.get("to_roll"), list) and isinstance(report.get("staying"), list):
            roll, stay = len(report["to_roll"]), len(report["staying"])
            plan = (f"; {roll} of {roll + stay} selected node(s) would roll in {len(report.get('stages') or [])} "
                    "stage(s)")
        elif playbook == "rollout" and report.get("headline"):
            plan = f"; {_reason(report['headline'])}"
        return f"cluster {name}: nothing changed{plan}", f"ansible-playbook {playbook}.yml without --check"
    if playbook in ("adopt-cluster", "add-nodes"):
        joined = nodes.get("joined", 0)
        # None: the token's uses could not be read from the control plane
        count = "an unknown number of" if joined is None else joined
        head = f"cluster {name} adopted" if playbook == "adopt-cluster" else f"cluster {name}: {count} node(s) joined by this run"
        if not counted:
            return f"{head} (no node report was read)", None
        if playbook == "adopt-cluster" and joined:
            reports += f", {joined} joined by this run"
        elif playbook == "adopt-cluster" and joined is None:
            reports += ", how many joined by this run is unknown (the control plane did not say)"
        left = nodes["selected"] - nodes["reporting"]
        return f"{head}: {reports}", ("ansible-playbook add-nodes.yml" if left > 0 else None)
    if playbook == "rollout":
        result = report.get("result")
        to = short_ref((report.get("to") or {}).get("image"))
        left, then = _rollout_left(report)
        if result == "succeeded" and not nodes.get("rolled"):
            why = "no node rolled" if left else "the pod template did not change, so no node rolled"
            return f"cluster {name}: applied on {to}; {why}{left}", then
        if result == "succeeded":
            return (f"cluster {name} rolled to {to}: {nodes.get('rolled', 0)} of {nodes.get('selected', 0)} selected "
                    f"node(s) rolled{left}"), then
        if result == "unchanged":
            return f"cluster {name} already runs {to} and is healthy: nothing to roll", None
        return f"cluster {name}: {_reason(report.get('headline') or result or 'no rollout report')}", None
    if playbook in ("doctor", "gpu-stack"):
        if "isolated" not in nodes:
            return f"cluster {name}: no isolation verdict was registered", None
        line = f"cluster {name}: {nodes['isolated']} of {nodes['selected']} selected nodes isolated"
        if nodes["isolated"] < nodes["selected"]:
            return line, ("fix the findings the table above names (ansible-playbook gpu-stack.yml applies the "
                          "settings), then ansible-playbook doctor.yml")
        return line, None
    if playbook == "audit":
        if "checks" not in nodes:
            return f"cluster {name}: no check ran", None
        if nodes["failed_checks"]:
            paths = nodes.get("extra_host_paths")
            return (f"cluster {name}: {nodes['failed_checks']} of {nodes['checks']} checks FAILED"
                    + (f", {paths} EXTRA HOST PATH(S)" if paths else ""),
                    f"fix what the table above names, then {_again(playbook)}")
        return f"cluster {name}: all {nodes['checks']} checks passed", None
    if playbook == "release-cluster":
        if "removed" not in nodes:
            return f"cluster {name} released", None
        already = f" ({nodes['already_removed']} already removed)" if nodes.get("already_removed") else ""
        return f"cluster {name} released: {nodes['removed']} node(s) removed from the control plane{already}", None
    return f"cluster {name} {rec['detail'] or 'rendered'}", None


def _as_invoked(line: str, playbook_dir) -> str:
    """``line`` with each ``ansible-playbook <name>.yml`` as the user can type it: by FQCN
    (``ansible-playbook bcd.kubernetes.<name>``) when the run's playbooks are the installed
    collection's, where no ``<name>.yml`` is at hand."""
    parts = os.path.normpath(str(playbook_dir or "")).split(os.sep)
    if parts[-4:] != ["ansible_collections", "bcd", "kubernetes", "playbooks"]:
        return line
    return re.sub(r"ansible-playbook ([a-z][a-z-]*)\.yml\b",
                  lambda m: f"ansible-playbook bcd.kubernetes.{m.group(1).replace('-', '_')}", line)


def bcd_fleet_verdict(records: list[dict], playbook: str, check_mode: bool = False, playbook_dir=None) -> str:
    """The run's last line: what happened, to how many clusters and nodes, and, when anything is
    left or failed, the next command (by FQCN when ``playbook_dir`` is the installed
    collection's). Derived from the records only (bcd_fleet_records)."""
    return _as_invoked(_verdict(records, playbook, check_mode), playbook_dir)


def _verdict(records: list[dict], playbook: str, check_mode: bool) -> str:
    if not records:
        return f"{playbook}: no cluster ran (check the inventory's group clusters and --limit)"
    mode = " --check" if check_mode else ""
    if len(records) == 1:
        line, nxt = _cluster_verdict(records[0], check_mode)
        return f"{playbook}{mode}: {line}" + (f"; next: {nxt}" if nxt else "")
    verdicts = [(r, *_cluster_verdict(r, check_mode)) for r in records]
    failed = [r for r in records if r["failure"] and r["result"] != "not started"]
    unstarted = [r for r in records if r["result"] == "not started"]
    ok = [r for r in records if not r["failure"]]
    word = "checked, nothing changed" if check_mode and playbook not in ("audit", "doctor") else _DONE[playbook]
    parts = [f"{len(ok)} of {len(records)} clusters {word}"]
    counted = [_nodes(r) for r in ok if "selected" in _nodes(r) and "reporting" in _nodes(r)]
    if counted and playbook in ("adopt-cluster", "add-nodes") and not check_mode:
        parts[0] += (f": {sum(n['reporting'] for n in counted)} of {sum(n['selected'] for n in counted)} selected "
                     "nodes report to the control plane")
    isolated = [_nodes(r) for r in ok if "isolated" in _nodes(r)]
    if isolated and playbook in ("doctor", "gpu-stack"):
        parts[0] += (f": {sum(n['isolated'] for n in isolated)} of {sum(n['selected'] for n in isolated)} selected "
                     "nodes isolated")
    audited = [_nodes(r) for r in ok if "checks" in _nodes(r)]
    if audited and playbook == "audit":
        bad = sum(n["failed_checks"] for n in audited)
        parts[0] += (f": {bad} of {sum(n['checks'] for n in audited)} checks FAILED" if bad
                     else f": all {sum(n['checks'] for n in audited)} checks passed")
    if failed:
        parts.append("FAILED: " + ", ".join(r["cluster"] for r in failed))
    if unstarted:
        parts.append("not started: " + ", ".join(r["cluster"] for r in unstarted))
    steps = []
    if failed or unstarted:
        hosts = [r["host"] for r in failed + unstarted]
        first = failed[0] if failed else unstarted[0]
        why = (f"fix what failed on {first['cluster']} ({_failure_reason(first)})" if failed
               else "fix what stopped the earlier wave")
        steps.append(f"{why}, then {_again(playbook, hosts)}")
    # what is left on clusters that did not fail (nodes to join, isolation, failed checks)
    for r, _line, nxt in verdicts:
        if not r["failure"] and nxt and not check_mode:
            steps.append(f"{nxt} -l {r['host']}" if nxt.endswith(".yml") else f"on {r['cluster']}: {nxt}")
    if check_mode and not failed and playbook not in ("audit", "doctor"):
        steps.append(f"ansible-playbook {playbook}.yml without --check")
    return f"{playbook}{mode}: " + "; ".join(parts) + (f"; next: {'; and '.join(steps)}" if steps else "")


class FilterModule:
    def filters(self):
        return {"bcd_fleet_records": bcd_fleet_records, "bcd_fleet_lines": bcd_fleet_lines,
                "bcd_fleet_shares_report": bcd_fleet_shares_report, "bcd_fleet_reports": bcd_fleet_reports,
                "bcd_kube_source": bcd_kube_source, "bcd_fleet_verdict": bcd_fleet_verdict}
