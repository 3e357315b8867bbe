"""The staged rollout's engine: the :class:`Rollout` behind bcd_rollout_info (reads the fleet,
plans) and bcd_rollout (rolls stage by stage, gates, rolls back).

The rules it applies (plans, health, the previous render) are the pure functions of
:mod:`bcd_rollout`; this class does the requests (through bcd_kube and bcd_cp) and the waiting.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_admission import (
    Standing,
    describe,
    events_query,
    refusals,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    NODE_STATES_REPORTING,
    ControlPlaneError,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import (
    KubeError,
    path,
    pod_ready,
    pod_state,
    resource_version,
    selector,
    slim_node,
    slim_pod,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_lock import (
    acquire,
    holder_identity,
    lock_name,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import (
    API_KEY_OPTION,
    CONFIG_OPTION,
    KUBE_OPTIONS,
    progress_reporter,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import (
    ON_DELETE,
    applied_config,
    batch_size,
    container_image,
    digest,
    down_budget,
    failing,
    fatal,
    generation_seen,
    left_behind,
    newest_revision,
    node_dark,
    node_down,
    over_budget,
    plan,
    pod_column,
    pod_revision,
    pods_by_node,
    revision_hash,
    rolled_out,
    short,
    short_ref,
    table,
    went,
    with_strategy,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_watch import Follow, wait_for_change

# The options of a fleet read (bcd_rollout_info, and bcd_rollout, which reads before it writes).
READ_OPTIONS = {
    "config": CONFIG_OPTION,
    "api_key": API_KEY_OPTION,
    **KUBE_OPTIONS,
    "changes": {"type": "bool", "default": True},
    "template_changes": {"type": "bool", "default": True},
    "joining": {"type": "list", "elements": "str"},
    "run": {"type": "str"},
    "cluster": {"type": "str"},
    "started_at": {"type": "str"},
}

FIELD_MANAGER = "bcd-ansible"
# A stage's pods are deleted this many at a time (at most the client's connection pool, 5 per CPU).
DELETE_WORKERS = 8
# A full check of the gate (every pod of the DaemonSet and the pool's nodes) runs again no sooner
# than this many times its own duration after it ended: about a fifth of the time at most.
CHECK_SPACING = 4
CHECK_SPACING_MAX = 15.0  # seconds: however slow the checks, a fatal pod is seen within this
# Seconds a rollback whose pods passed the gate waits for the DaemonSet controller to count them
# all updated and available (its status lags the pods by a sync or two under load).
ROLLBACK_SETTLE = 60.0
# Seconds the gate sleeps at most when no pod or DaemonSet changes (lock renewal, check schedule).
WAKE_MAX = 1.0
# A gate's progress: a first line once it waited this long (s), then one every GATE_SAY_EVERY s
GATE_FIRST_SAY = 10.0
GATE_SAY_EVERY = 25.0
# Seconds a watch follows the DaemonSet and its pods at most (stopped when the run ends).
FOLLOW_FOR = 24 * 3600.0
# Seconds one of the rollout's watch requests lasts (the server then ends it and the next one
# starts): a rollout follows four lists for minutes, so a longer watch is fewer requests.
FOLLOW_WATCH = 600
FAILED_IN_MSG = 3  # failed nodes named with their reason in the failure message
# Seconds of minReadySeconds at least while the DaemonSet controller rolls a stage: the time there
# is to set OnDelete once it has deleted the stage's pods, before a new pod turns available and it
# starts on more (a soak shorter than this leaves minReadySeconds lower the rest of the time).
MIN_READY_GUARD = 5


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _rfc3339(t: dt.datetime | None = None) -> str:
    return (t or _now()).isoformat(timespec="seconds").replace("+00:00", "Z")


def change(from_image: str | None, to_image: str | None) -> str:
    """What a rollout changes, for its headline: the digests, or a new pod template on the same
    image (adopt-cluster.yml's template changes: a host mount, resources, the config)."""
    if from_image and from_image == to_image:
        return f"of a new pod template (image {short(to_image)})"
    return f"{short(from_image)} -> {short(to_image)}"


def natural(name: str) -> list:
    """Sort key: gpu-node-2 before gpu-node-10."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


class LostLock(Exception):
    pass


class Rollout:
    def __init__(self, module, inv, kube_api, cp):
        self.m = module
        self.inv = inv
        self.kube = kube_api
        self.cp = cp
        self.p = module.params
        self.ns = inv.bcd_namespace
        self.name = inv.bcd_name
        self.interval = max(0.2, float(self.p.get("interval") or 2))
        self.started = time.monotonic()
        self.started_at = self.p.get("started_at") or _rfc3339()
        self.last_renewal = time.monotonic()
        self.did_change = False
        self.notes: list[str] = []
        self.listed: dict[str, dict] = {}  # node -> pod, as the latest full check listed them
        self.available_before: int | None = None  # the DaemonSet's numberAvailable when state=run began
        self.lock_result: dict = {}  # with take_lock: bcd_lock's result, returned with the status
        self.lease_version: str | None = None  # the lock Lease's resourceVersion once renew() wrote it
        self.say = progress_reporter()  # the gate's progress lines, printed by the action plugin
        self.gate_label = ""
        # the DaemonSet and its pods, listed once and then followed by a watch (bcd_watch), so
        # the gate wakes on each change and never lists the pods again to find one
        self.changed = threading.Event()
        self.follow_pods: Follow | None = None
        self.follow_ds: Follow | None = None
        # the DaemonSet's FailedCreate events: a pod the API server refuses never exists
        self.follow_events: Follow | None = None
        # the selected Nodes, followed the same way (their own event: a Node's heartbeat does not
        # wake the gate; each full check reads them), so a check lists no Node
        self.follow_nodes: Follow | None = None
        self.events_since: str | None = None  # when the stage (or the rollback) began: older events are stale
        self.standing = Standing()
        self.selected_count: int | None = None
        # state=run: the selected Nodes down at the latest stage's start (Node -> why), those left
        # behind at the end, those that went down while their stage ran (Node -> the report's
        # words), those that joined the cluster meanwhile (Node -> the stage they joined in)
        self.down: dict[str, str] = {}
        self.left: dict[str, str] = {}
        self.went_down: dict[str, str] = {}
        self.joined: dict[str, str | None] = {}
        self.stage_name = ""
        self.ready_before: set[str] = set()  # the Nodes whose pod was Ready when state=run began
        self.passed_at: float | None = None  # when the last stage's gate passed (its pods all Ready)
        # kind -> resourceVersion of the DaemonSet and ConfigMap the fleet read read (returned as versions)
        self.versions: dict[str, str | None] = {}

    # -- the lock -----------------------------------------------------------------------------

    def take_lock(self) -> None:
        """Take the cluster's lock as bcd_lock with ``wait=0`` takes it (the Lease
        ``<bcd_name>-ansible-lock``, for ``bcd_lock_ttl`` seconds, holder ``run``); a lock another
        live run holds fails the module with bcd_lock's message. Its result is kept in
        ``lock_result`` and returned with the status read under it."""
        taken = acquire(self.kube, self.ns, lock_name(self.name), int(self.inv.bcd_lock_ttl),
                        holder_identity(self.p["run"]), check_mode=self.m.check_mode, warn=self.m.warn)
        if taken.pop("failed", False):
            self.m.fail_json(**taken)
        self.lock_result = {k: taken.get(k) for k in ("holder", "took_over", "waited", "lease", "until")}
        self.lock_result["lease_version"] = taken.get("version")

    def guarded(self, what: str, action) -> None:
        """Run ``action`` (``self.status``/``self.run``), failing on an API or control-plane error
        with a message naming ``what``; with the lock held, any failure says ``lock_held`` so that
        the caller releases it. The watches are stopped in any case."""
        try:
            action()
        except (KubeError, ControlPlaneError) as exc:
            self.m.fail_json(msg=f"{what}: {exc}", **({"lock_held": True, **self.lock_result} if self.lock_result else {}))
        except Exception as exc:  # with the lock held, say so, so that the caller releases it
            if not self.lock_result:
                raise
            self.m.fail_json(msg=f"{what}: {type(exc).__name__}: {exc}", lock_held=True, **self.lock_result)
        finally:
            self.unfollow()

    # -- reads ------------------------------------------------------------------------------

    def daemonset(self) -> dict | None:
        return self.kube.get(path("daemonsets", self.name, self.ns))

    def revisions(self, ds: dict) -> list[dict]:
        labels = (ds.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        return self.kube.list(path("controllerrevisions", namespace=self.ns), {"labelSelector": selector(labels) or None})

    def pods(self, ds: dict) -> dict[str, dict]:
        """Node name -> the DaemonSet's pod there: from the watch once :meth:`follow` started it
        (a :class:`KubeError` when the watch failed), else listed."""
        if self.follow_pods is not None:
            self.follow_pods.check()
            return pods_by_node(list(self.follow_pods.objects().values()), ds["metadata"]["uid"])
        labels = (ds.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        items = self.kube.list(path("pods", namespace=self.ns), {"labelSelector": selector(labels) or None}, keep=slim_pod)
        return pods_by_node(items, ds["metadata"]["uid"])

    def follow(self, ds: dict) -> None:
        """List the DaemonSet, its pods, its FailedCreate events and the selected Nodes once, and
        follow each by a watch until :meth:`unfollow`."""
        labels = (ds.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        until = time.monotonic() + FOLLOW_FOR
        self.follow_ds = Follow(self.kube, path("daemonsets", namespace=self.ns), {"fieldSelector": f"metadata.name={self.name}"},
                                changed=self.changed)
        self.follow_pods = Follow(self.kube, path("pods", namespace=self.ns), {"labelSelector": selector(labels) or None},
                                  keep=slim_pod, changed=self.changed)
        self.follow_pods.first_version = self.p.get("watch_from")
        self.follow_events = Follow(self.kube, path("events", namespace=self.ns), events_query(ds["metadata"]["uid"]),
                                    changed=self.changed)
        self.follow_nodes = Follow(self.kube, path("nodes"), {"labelSelector": selector(self.inv.bcd_node_selector) or None},
                                   keep=slim_node)
        for f in self.follows():
            f.watch_max = FOLLOW_WATCH
            f.start(until)

    def unfollow(self) -> None:
        for f in self.follows():
            f.stop()

    def follows(self) -> list[Follow]:
        return [f for f in (self.follow_ds, self.follow_pods, self.follow_events, self.follow_nodes) if f is not None]

    def watched(self) -> dict:
        """What the watches did: lists, relists (after 410 Gone or a dropped watch), watch requests, events."""
        fs = self.follows()
        return {"lists": sum(f.lists for f in fs), "relists": sum(f.relists for f in fs),
                "watches": sum(f.watches for f in fs), "events": sum(f.events for f in fs),
                "pod_lists": self.follow_pods.lists if self.follow_pods else 0,
                "pod_relists": self.follow_pods.relists if self.follow_pods else 0}

    def selected(self) -> dict[str, dict]:
        """Node name -> the selected Node: from the watch once :meth:`follow` started it (a
        :class:`KubeError` when the watch failed), else listed."""
        if self.follow_nodes is not None:
            self.follow_nodes.check()
            nodes = list(self.follow_nodes.objects().values())
        else:
            nodes = self.kube.list(path("nodes"), {"labelSelector": selector(self.inv.bcd_node_selector) or None},
                                   keep=slim_node)
        return {n["metadata"]["name"]: n for n in nodes}

    def cp_nodes(self, names) -> dict[str, dict]:
        wanted = set(names)
        return {n["hostname"]: n for n in self.cp.list_nodes(self.inv.bcd_tenant, self.inv.bcd_pool) if n.get("hostname") in wanted}

    # -- health -----------------------------------------------------------------------------

    def problem(self, node: str, pod: dict | None, cp_node: dict | None, revision: str | None, image: str | None,
                baseline: dict[str, dict] | None = None) -> str | None:
        """Why ``node`` is not healthy on ``revision``/``image``, or None."""
        if pod is None:
            return "no bcd pod on the Node (not replaced yet, or not scheduled there)"
        pname = pod["metadata"]["name"]
        if revision and pod_revision(pod) != revision:
            return f"pod {pname} runs revision {pod_revision(pod)}, not {revision} ({short(container_image(pod))})"
        if image and container_image(pod) != image:
            running, wanted = short_ref(container_image(pod)), short_ref(image)
            if running == wanted:  # the same name and short digest from another registry: in full
                running, wanted = container_image(pod), image
            return f"pod {pname} runs image {running}, not {wanted}"
        if not pod_ready(pod):
            return f"pod {pname} not Ready ({pod_state(pod)})"
        if cp_node is None:
            return "no bcd node in the control plane reports for it (not joined: add-nodes.yml joins it)"
        if cp_node.get("state") not in NODE_STATES_REPORTING:
            bad = failing(cp_node)
            extra = f" ({'; '.join(f'{k}: {v}' for k, v in bad.items())})" if bad else ""
            return f"bcd node {cp_node.get('id')} is {cp_node.get('state')}, not reporting{extra}"
        if baseline is not None:
            before = failing(baseline.get(node))
            new = {k: v for k, v in failing(cp_node).items() if k not in before}
            if new:
                return "new failing condition " + "; ".join(f"{k}: {v}" for k, v in new.items())
        return None

    # -- status -----------------------------------------------------------------------------

    def status(self) -> None:
        ds = self.daemonset()
        self.versions["DaemonSet"] = resource_version(ds)
        if ds is None:
            msg = (f"DaemonSet {self.ns}/{self.name} does not exist: adopt the cluster first (adopt-cluster.yml); "
                   "rollout.yml only moves an adopted cluster to a new image")
            self.finish_status(None, {}, {}, {}, None, msg, [], [], [])
        revision = revision_hash(newest_revision(self.revisions(ds), ds["metadata"]["uid"]))
        seen = generation_seen(ds)
        joining = set(self.p.get("joining") or [])
        pods = self.pods(ds)
        nodes = self.selected()
        if not nodes:
            # a selector that selects no Node (a typo) would take bcd off every Node that runs it
            msg = (f"bcd_node_selector {selector(self.inv.bcd_node_selector) or '(every node)'} selects no Node in this "
                   f"cluster: applying it would delete the DaemonSet's {len(pods)} bcd pod(s) "
                   f"({', '.join(sorted(pods, key=natural)) or 'none'}) and roll nothing. Nothing was changed. Fix "
                   "bcd_node_selector (kubectl get nodes --show-labels shows the labels); release-cluster.yml takes bcd "
                   "off a cluster on purpose.")
            self.finish_status(ds, pods, {}, {}, None, msg, [], [], [], losing=sorted(pods, key=natural))
        # Nodes that run a bcd pod now and that the selector no longer selects: the DaemonSet
        # controller deletes their pods as soon as the new template is applied
        losing = sorted((n for n in pods if n not in nodes), key=natural)
        cpn = self.cp_nodes(nodes)
        unhealthy, incomplete = [], []
        # down Nodes (NotReady, cordoned, unreachable) are left behind, within bcd_rollout_max_down:
        # at 5,000 nodes some node is always down, and a stage could only wait it out
        down = {n: why for n in sorted(nodes, key=natural) if (why := node_down(nodes[n]))}
        for name in sorted(nodes, key=natural):
            pod = pods.get(name)
            if name in down:
                continue
            why = self.problem(name, pod, cpn.get(name), None, None)
            if why and name not in joining:
                unhealthy.append({"node": name, "why": why})
            if pod is not None and revision and pod_revision(pod) != revision:
                incomplete.append({"node": name, "why": f"pod {pod['metadata']['name']} runs revision {pod_revision(pod)} "
                                                        f"({short(container_image(pod))}), not the DaemonSet's {revision} "
                                                        f"({short(container_image(ds))})"})
        if not seen:
            incomplete.insert(0, {"node": "-", "why": "the DaemonSet controller has not seen the latest DaemonSet yet"})
        refuse = None
        too_many = over_budget(down, self.inv.bcd_rollout_max_down, len(nodes))
        if unhealthy or incomplete or too_many:
            parts = []
            if too_many:
                parts.append(too_many)
            if incomplete:
                parts.append("the previous rollout is incomplete: " + "; ".join(f"{i['node']}: {i['why']}" for i in incomplete))
            if unhealthy:
                parts.append(f"{len(unhealthy)} of {len(nodes)} selected node(s) unhealthy: "
                             + "; ".join(f"{u['node']}: {u['why']}" for u in unhealthy))
            refuse = ". ".join(parts)
            if self.inv.bcd_rollout_force:
                self.notes.append("bcd_rollout_force: starting anyway; " + refuse
                                  + (" (the down nodes are left behind all the same)" if too_many else ""))
                refuse = None
            else:
                fix = []
                if too_many:
                    fix.append("bring the down nodes back (or uncordon them), or raise bcd_rollout_max_down")
                if unhealthy or incomplete:
                    fix.append("fix the unhealthy nodes (or finish or undo the previous rollout)")
                refuse += (f". Nothing was changed. {'; '.join(fix).capitalize()}, or run again with "
                           "bcd_rollout_force=true to roll anyway (the gate still applies to every rolled node; down nodes "
                           "are left behind).")
        if down and refuse is None:  # a refused run leaves nothing behind: it does not start
            self.notes.append(f"{len(down)} of {len(nodes)} selected node(s) down, left behind (bcd_rollout_max_down "
                              f"{self.inv.bcd_rollout_max_down} allows {down_budget(self.inv.bcd_rollout_max_down, len(nodes))}): "
                              + "; ".join(f"{n}: {why}" for n, why in down.items()))
        cm = self.kube.get(path("configmaps", self.inv.configmap_name, self.ns))
        self.versions["ConfigMap"] = resource_version(cm)
        previous = ([applied_config(cm)] if cm else []) + [applied_config(ds)]
        # only the selected Nodes roll: a pod on a Node the selector leaves is deleted, not rolled;
        # and only a new pod template replaces pods (a ConfigMap change alone replaces none)
        if self.p.get("changes", True) and self.p.get("template_changes", True):
            to_roll = sorted((n for n in pods if n in nodes and n not in down), key=natural)
        else:
            to_roll = sorted((n for n, pod in pods.items() if n in nodes and n not in down
                              and pod_revision(pod) != revision), key=natural)
        stages = plan(to_roll, self.inv.bcd_rollout_canary, self.inv.bcd_rollout_max_unavailable, len(nodes))
        if refuse is None and stages and len(stages[0]["nodes"]) == len(to_roll):
            refuse = self.all_at_once(stages[0], len(to_roll), len(nodes))
        # the plan names each stage's size and the Nodes still to roll: the DaemonSet controller
        # picks each stage's Nodes among them as it rolls
        sized = [{"name": s["name"], "size": len(s["nodes"]), **({"nodes": s["nodes"]} if s["name"] == "canary" else {})}
                 for s in stages]
        self.finish_status(ds, pods, nodes, cpn, revision, refuse, unhealthy, incomplete, sized, previous, losing=losing,
                           to_roll=[n for s in stages for n in s["nodes"]], down=down)

    def all_at_once(self, first: dict, rolling: int, selected: int) -> str | None:
        """The refusal of a plan whose first stage rolls every node to roll (no canary left) on more
        than one node, unless bcd_rollout_all_at_once; on a single-node cluster a warning only."""
        why = (f"the {first['name']} stage rolls all {rolling} node(s) to roll at once (bcd_rollout_canary "
               f"{self.inv.bcd_rollout_canary}, bcd_rollout_max_unavailable {self.inv.bcd_rollout_max_unavailable}): no "
               "canary is left, so a failure hits the whole fleet at once")
        if rolling > 1:
            if self.inv.bcd_rollout_all_at_once:
                self.notes.append(f"bcd_rollout_all_at_once: {why}; rolling anyway.")
                return None
            return (f"{why}. Nothing was changed. Lower bcd_rollout_canary below {rolling} (and "
                    f"bcd_rollout_max_unavailable) so that a first stage proves the new pods on some nodes first, or "
                    "set bcd_rollout_all_at_once: true to roll them all at once on purpose.")
        if selected <= 1:
            self.m.warn(f"{why}: this cluster has one selected node, so there is no canary to prove the new pod first.")
        return None

    def finish_status(self, ds, pods, nodes, cpn, revision, refuse, unhealthy, incomplete, stages, previous=None,
                      losing=None, to_roll=None, down=None) -> None:
        current = container_image(ds) if ds else None
        healthy = ds is not None and not unhealthy and not incomplete
        losing = list(losing or [])
        to_roll = list(to_roll or [])
        down = dict(down or {})
        rolling = set(to_roll)
        named = {n: s["name"] for s in stages for n in s.get("nodes") or []}  # the canary's
        stay = [n for n in nodes if n not in rolling and n not in down]
        if refuse:
            result, headline = "refused", f"rollout refused: {refuse}"
        elif not self.p.get("changes", True) and healthy:
            result, headline = "unchanged", (f"already on {short(current)} and healthy: nothing to do"
                                             + (f" ({len(down)} node(s) down, not judged: {', '.join(down)})" if down else ""))
        elif not self.p.get("template_changes", True) and not to_roll:
            result = "planned"
            headline = (f"rollout on {short(current)}: the render changes the ConfigMap or the DaemonSet's own fields, the "
                        f"pod template does not: none of the {len(nodes)} selected node(s) rolls (the kubelet updates the "
                        "mounted ConfigMap files in place)"
                        + (f"; {len(losing)} node(s) LOSE bcd (their pod is deleted, not selected by bcd_node_selector): "
                           f"{', '.join(losing)}" if losing else ""))
        else:
            result = "planned"
            # the headline counts what the table lists: the selected Nodes (rolled or staying)
            # and those that lose bcd
            # "batch 1: 2", not "batch 1 2": a stage's name may end in a number
            per_stage = ", ".join(f"{s['name']}: {s['size']}" for s in stages)
            headline = (f"rollout {change(current, self.inv.bcd_image)}: {len(to_roll)} of {len(nodes)} selected node(s) "
                        f"roll in {len(stages)} stage(s)" + (f" ({per_stage})" if stages else "")
                        + f", {len(stay)} stay as they are"
                        + (f", {len(down)} down left behind ({', '.join(down)})" if down else "")
                        + (f"; {len(losing)} node(s) LOSE bcd (their pod is deleted, not selected by bcd_node_selector): "
                           f"{', '.join(losing)}" if losing else "")
                        # the one line that names the new image in full; progress lines name it short
                        + (f"; new image {self.inv.bcd_image}" if current != self.inv.bcd_image else ""))
        rows = []
        for name in losing:
            pod = pods.get(name)
            rows.append({"name": name, "stage": named.get(name), "from": short(container_image(pod)) if pod else None, "to": None,
                         "pod": pod_column(pod), "state": None,
                         "outcome": "loses bcd: not selected by bcd_node_selector, its pod is deleted"})
        for name in sorted(nodes, key=natural):
            pod = pods.get(name)
            cp_node = cpn.get(name) or {}
            why = next((u["why"] for u in unhealthy if u["node"] == name), None)
            if name in down:
                # nothing rolls without changes, or when refused: the Node is only not judged
                outcome = (f"down, not judged: {down[name]}" if refuse or not self.p.get("changes", True)
                           else left_behind(down[name]))
            elif why:
                outcome = f"unhealthy: {why}"
            elif name in rolling:
                outcome = "not rolled: the rollout is refused" if refuse else "will roll"
            else:
                outcome = "up to date"
            rows.append({"name": name, "stage": named.get(name), "from": short(container_image(pod)) if pod else None,
                         "to": short(container_image(pod)) if pod else None,
                         "pod": pod_column(pod, nodes.get(name)), "state": cp_node.get("state"), "outcome": outcome})
        rows.sort(key=lambda r: natural(r["name"]))
        down_list = [{"node": n, "why": why} for n, why in down.items()]
        # a refused run rolls nothing: its report says what would have rolled, and that no stage started
        summary = self.summary(result, headline, current,
                               [{**s, "outcome": "not started" if refuse else "planned"} for s in stages], rows,
                               unhealthy=unhealthy, incomplete=incomplete, losing=losing, staying=stay,
                               to_roll=[] if refuse else to_roll, **({"would_roll": to_roll} if refuse else {}),
                               down=down_list)
        self.m.exit_json(changed=False, summary=summary, table=table(summary), refuse=refuse, previous=previous or [],
                         plan=stages, to_roll=to_roll, healthy=healthy, revision=revision, image=current, selected=len(nodes),
                         down=down_list, versions=self.versions, **self.lock_result)

    def summary(self, result, headline, from_image, stages, rows, **extra) -> dict:
        return {
            "cluster": self.p.get("cluster"), "namespace": self.ns, "daemonset": self.name, "run": self.p.get("run"),
            "result": result, "headline": headline,
            "from": {"image": from_image, "digest": digest(from_image)},
            "to": {"image": self.inv.bcd_image, "digest": digest(self.inv.bcd_image)},
            "started_at": self.started_at, "finished_at": _rfc3339(),
            "seconds": round(time.monotonic() - self.started, 1),
            "stages": stages, "nodes": rows, "failed_nodes": extra.pop("failed_nodes", []),
            "rollback": extra.pop("rollback", None), "notes": list(self.notes), "changed": self.did_change,
            "settings": {"canary": self.inv.bcd_rollout_canary, "max_unavailable": self.inv.bcd_rollout_max_unavailable,
                         "max_down": self.inv.bcd_rollout_max_down,
                         "rollback": self.inv.bcd_rollout_rollback, "gate_timeout": self.inv.bcd_rollout_gate_timeout,
                         "force": self.inv.bcd_rollout_force, "all_at_once": self.inv.bcd_rollout_all_at_once},
            **extra,
        }

    # -- writes -----------------------------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        """Server-side apply ``obj`` (field manager FIELD_MANAGER, forcing conflicts, as the
        playbooks' kubernetes.core applies do); the object as the API server stored it. A refusal
        is a :class:`KubeError` naming the object and quoting the server."""
        kind = {"DaemonSet": "daemonsets", "ConfigMap": "configmaps"}[obj["kind"]]
        meta = obj["metadata"]
        try:
            out = self.kube.apply(path(kind, meta["name"], meta.get("namespace")), obj, FIELD_MANAGER)
        except KubeError as exc:
            raise KubeError(f"applying {obj['kind']} {meta.get('namespace')}/{meta['name']} (server-side apply, field "
                            f"manager {FIELD_MANAGER}): {exc}", status=exc.status, detail=exc.detail) from None
        self.did_change = True
        return out or {}

    def apply_new(self, render: list[dict]) -> dict:
        """Apply the render's ConfigMap, then its DaemonSet with ``updateStrategy: OnDelete`` (the
        new template, no pod moves), start following (:meth:`follow`) and return the DaemonSet once
        its controller has seen it, as its watch saw it: one PATCH per object and no read."""
        applied = None
        for obj in sorted(render, key=lambda o: o.get("kind") == "DaemonSet"):
            if obj.get("kind") == "DaemonSet":
                applied = self.apply(with_strategy(obj, ON_DELETE))
            else:
                self.apply(obj)
        self.follow(applied)
        generation = int(applied["metadata"].get("generation") or 0)
        self.ds_seen(generation)
        ds = next(iter(self.follow_ds.objects().values()), None)
        if ds is None:
            raise KubeError(f"DaemonSet {self.ns}/{self.name} disappeared")
        return ds

    def delete_pod(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.kube.request("DELETE", path("pods", meta["name"], meta["namespace"]), None,
                              {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}})
        except KubeError as exc:
            if exc.status not in (404, 409):  # gone already, or another pod by that name
                raise
        self.did_change = True

    def delete_pods(self, pods: list[dict]) -> None:
        """Delete ``pods`` (a stage's: up to maxUnavailable of them) with DELETE_WORKERS requests in
        flight at once rather than one after the other; the first failure, once all are done."""
        if len(pods) <= 1:
            for pod in pods:
                self.delete_pod(pod)
            return
        pool_size = int(getattr(self.kube.client.configuration, "connection_pool_maxsize", 0) or DELETE_WORKERS)
        with ThreadPoolExecutor(max_workers=max(1, min(DELETE_WORKERS, pool_size, len(pods)))) as pool:
            errors = [f.exception() for f in [pool.submit(self.delete_pod, pod) for pod in pods]]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def renew(self, force: bool = False) -> None:
        """Renew our lock Lease (every third of its duration); LostLock when another run holds it."""
        if not self.p.get("lock") or not self.p.get("run"):
            return
        if not force and time.monotonic() - self.last_renewal < max(5.0, self.inv.bcd_lock_ttl / 3):
            return
        lease_path = path("leases", self.p["lock"], self.ns)
        lease = self.kube.get(lease_path)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
        if lease is None or not holder.endswith(f" run={self.p['run']}"):
            raise LostLock(f"lost the lock Lease {self.ns}/{self.p['lock']} (now held by {holder or 'nobody'}); "
                           "another run may be working on this cluster")
        lease["spec"]["renewTime"] = _now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease["spec"]["leaseDurationSeconds"] = self.inv.bcd_lock_ttl
        try:
            renewed = self.kube.replace(lease_path, lease)
        except KubeError as exc:
            if exc.status == 409:
                return self.renew(force=True)
            raise
        self.lease_version = resource_version(renewed)
        self.last_renewal = time.monotonic()
        return None

    # -- run --------------------------------------------------------------------------------

    def observed(self, timeout: float = 60) -> dict:
        """The DaemonSet once its controller has seen its latest generation."""
        deadline = time.monotonic() + timeout
        pause = min(0.25, self.interval)
        while True:
            ds = self.daemonset()
            if ds is None:
                raise KubeError(f"DaemonSet {self.ns}/{self.name} disappeared")
            if generation_seen(ds):
                return ds
            if time.monotonic() > deadline:
                raise KubeError(f"the DaemonSet controller did not see DaemonSet {self.ns}/{self.name} generation "
                                f"{ds['metadata'].get('generation')} within {timeout:g}s (is kube-controller-manager running?)")
            time.sleep(pause)
            pause = min(pause * 2, self.interval)

    def wait_rolled_out(self, timeout: float, available_before: int | None = None) -> str | None:
        """Wait up to ``timeout`` seconds until the DaemonSet is rolled out (:func:`rolled_out`:
        at most as many pods as ``available_before``, what its controller counted available before
        the run, since a forced run may start with some unavailable); None, or why not."""
        deadline = time.monotonic() + timeout
        while True:
            ds = self.daemonset()
            if ds is None:
                return f"DaemonSet {self.ns}/{self.name} disappeared"
            if rolled_out(ds, available_before):
                return None
            if time.monotonic() >= deadline:
                st = ds.get("status") or {}
                return (f"after {timeout:g}s the DaemonSet controller counts {st.get('updatedNumberScheduled') or 0} of "
                        f"{st.get('desiredNumberScheduled') or 0} pods updated and {st.get('numberAvailable') or 0} "
                        f"available on DaemonSet {self.ns}/{self.name} (kubectl rollout status daemonset/{self.name} "
                        f"-n {self.ns})")
            time.sleep(min(1.0, self.interval))

    def strategy(self, rolling: int | None, min_ready: int | None) -> int:
        """Set the DaemonSet's update strategy: RollingUpdate with maxUnavailable ``rolling`` (and
        maxSurge 0), or OnDelete when None; with ``min_ready``, its minReadySeconds too. A merge
        patch of those fields alone (field manager FIELD_MANAGER-rollout: the render's own apply
        takes them back at the end). Returns the DaemonSet's new generation."""
        strategy = ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": rolling, "maxSurge": 0}}
                    if rolling is not None else {"type": "OnDelete", "rollingUpdate": None})
        spec = {"updateStrategy": strategy, **({"minReadySeconds": min_ready} if min_ready is not None else {})}
        out = self.kube.patch(path("daemonsets", self.name, self.ns), {"spec": spec}, kind="merge",
                              field_manager=f"{FIELD_MANAGER}-rollout")
        self.did_change = True
        return int(((out or {}).get("metadata") or {}).get("generation") or 0)

    def taken(self, ds: dict, to_roll: list[str], revision: str) -> list[str]:
        """The Nodes of ``to_roll`` whose old pod the DaemonSet controller has deleted (as the pods'
        watch saw it): their pod is on ``revision``, or terminating and not replaced yet."""
        pods = self.pods(ds)
        return [n for n in to_roll if n not in pods or pod_revision(pods[n]) == revision]

    def ds_seen(self, generation: int, timeout: float = 60) -> None:
        """Wait (on the DaemonSet's watch) until its controller has seen ``generation``."""
        deadline = time.monotonic() + timeout
        while True:
            self.follow_ds.check()
            ds = next(iter(self.follow_ds.objects().values()), None)
            if ds is not None and int((ds.get("status") or {}).get("observedGeneration") or 0) >= generation:
                return
            if time.monotonic() >= deadline:
                raise KubeError(f"the DaemonSet controller did not see DaemonSet {self.ns}/{self.name} generation "
                                f"{generation} within {timeout:g}s (is kube-controller-manager running?)")
            wait_for_change(self.changed, min(WAKE_MAX, max(0.0, deadline - time.monotonic())))

    def controller_stage(self, ds: dict, to_roll: list[str], before: set[str], size: int, cumulative: int,
                         revision: str) -> tuple[list[str], str | None]:
        """One stage, rolled by the DaemonSet controller: RollingUpdate with maxUnavailable ``size``
        until it has deleted the old pods of ``cumulative`` Nodes of ``to_roll`` in all, then OnDelete
        before any new pod turns available (minReadySeconds, at least MIN_READY_GUARD s meanwhile),
        so that no further batch starts. Returns the Nodes it rolled in this stage (those of
        ``to_roll`` not in ``before``), and why it fell short of ``cumulative``, or None."""
        spec = ds.get("spec") or {}
        min_ready = int(spec.get("minReadySeconds") or 0)
        guard = MIN_READY_GUARD if min_ready < MIN_READY_GUARD else None
        if guard is not None and self.passed_at is not None:
            # a soak shorter than the guard: the controller would count the previous stage's pods
            # unavailable, take fewer, then more in a lump as they turn available (a stage larger
            # than planned); they have been Ready since the last gate passed at the latest
            while (left := self.passed_at + guard + 1 - time.monotonic()) > 0:
                self.renew()
                time.sleep(min(WAKE_MAX, left))
        self.strategy(size, guard)
        deadline = time.monotonic() + self.inv.bcd_rollout_gate_timeout
        short_by = None
        try:
            while True:
                self.renew()
                got = self.taken(ds, to_roll, revision)
                if len(got) >= cumulative:
                    break
                if time.monotonic() >= deadline:
                    st = next(iter(self.follow_ds.objects().values()), {}).get("status") or {}
                    short_by = (f"the DaemonSet controller replaced {len(got) - len(before)} of the stage's {size} pod(s) "
                                f"in {self.inv.bcd_rollout_gate_timeout}s (maxUnavailable {size}; it counts "
                                f"{int(st.get('numberUnavailable') or 0)} pod(s) unavailable, and replaces no more while "
                                f"that many are): kubectl describe daemonset/{self.name} -n {self.ns}")
                    break
                wait_for_change(self.changed, min(WAKE_MAX, max(0.0, deadline - time.monotonic())))
        finally:
            # no further batch: OnDelete, as the controller sees it, before the stage's new pods turn available
            self.ds_seen(self.strategy(None, min_ready if guard is not None else None))
        rolled = [n for n in self.taken(ds, to_roll, revision) if n not in before]
        return rolled, short_by

    def settled(self, expect_updated: int | None) -> tuple[bool, str | None]:
        """The DaemonSet as its watch last saw it (else one GET): whether its controller counts
        every pod Ready but those of the down and joined Nodes (``down``, ``went_down``, ``joined``) and at least
        ``expect_updated`` pods on the newest template, and the DaemonSet's resourceVersion (a
        status update changes it)."""
        if self.follow_ds is not None:
            self.follow_ds.check()
            ds = next(iter(self.follow_ds.objects().values()), None)
        else:
            ds = self.daemonset()
        if ds is None:
            return True, "gone"  # the full check says so
        st = ds.get("status") or {}
        # a down Node's pod is not Ready, or not for long, nor a joined Node's (no join token): the
        # controller counts them desired all the same
        desired = int(st.get("desiredNumberScheduled") or 0) - len(set(self.down) | set(self.went_down) | set(self.joined))
        ok = (generation_seen(ds)
              and int(st.get("numberReady") or 0) >= desired
              and (expect_updated is None or int(st.get("updatedNumberScheduled") or 0) >= expect_updated))
        return ok, ds["metadata"].get("resourceVersion")

    def check(self, ds: dict, nodes: list[str], revision: str, image: str, baseline: dict,
              timings: dict) -> tuple[dict, bool, bool]:
        """The full check of the gate: (node -> why not healthy, whether one of them is fatal,
        whether it could list the pods and the pool's nodes; if so, the pods are kept in
        ``self.listed``)."""
        try:
            pods = self.pods(ds)
            listed = self.selected()
            nodes = self.still_up(nodes, listed)
            cpn = self.cp_nodes(nodes)
        except (KubeError, ControlPlaneError) as exc:
            return dict.fromkeys(nodes, f"cannot check: {exc}"), False, False
        self.listed = pods
        refused = self.refused(ds, nodes, pods, revision)
        if refused:
            return refused, True, True
        problems: dict[str, str] = {}
        for node in nodes:
            pod = pods.get(node)
            # a pod of the new revision that crash-loops, exited or restarted during the run fails at once
            why = (fatal(pod, self.started_at) if pod is not None and pod_revision(pod) == revision else None)
            if why:
                return {node: why, **problems}, True, True
            why = self.problem(node, pod, cpn.get(node), revision, image, baseline)
            if why:
                problems[node] = why
            elif node not in timings:
                timings[node] = round(time.monotonic() - timings.get("_stage", self.started), 1)
        return problems, False, True

    def refused(self, ds: dict, nodes: list[str], pods: dict[str, dict], revision: str) -> dict[str, str]:
        """node -> why, for each of ``nodes`` without a pod on ``revision``, once the DaemonSet's
        FailedCreate events since the stage began say the API server refuses its pods and that has
        stood for REFUSAL_GRACE seconds with the pods still missing; else {}."""
        if self.follow_events is None or self.follow_events.error is not None:
            return {}  # a watch that failed says nothing; the pods' own state still gates
        found = refusals(list(self.follow_events.objects().values()), ds["metadata"].get("uid"), self.events_since,
                         self.ns, self.selected_count, self.inv.bcd_priority_class_name)
        missing = [n for n in nodes if pod_revision(pods.get(n)) != revision]
        standing = self.standing.update(found, missing=bool(missing))
        if not standing:
            return {}
        why = "; ".join(f"FailedCreate ({r['count']}x, last at {r['at']}): {describe(r)}" for r in standing)
        return dict.fromkeys(missing, f"the API server refuses its new pod: {why}")

    def still_up(self, nodes: list[str], listed: dict[str, dict]) -> list[str]:
        """``nodes`` less those whose Node went down (NotReady, cordoned, unreachable, gone: as
        ``listed``, the selected Nodes, shows them) or went down earlier in the run: each newly
        down one is left out of every later judgement (:meth:`lose`) rather than waited out, its
        kubelet being unable to run or replace its pod. Its pod's own Ready lags the Node's by up
        to the node monitor's grace period, so the Node is what tells."""
        up = []
        for name in nodes:
            if name in self.went_down:
                continue
            why = node_down(listed.get(name))
            if why:
                self.lose(name, why)
            else:
                up.append(name)
        return up

    def gate(self, ds: dict, nodes: list[str], revision: str, image: str, baseline: dict, timings: dict,
             expect_updated: int | None = None) -> dict[str, str]:
        """Wait until every node in ``nodes`` is healthy on ``revision``/``image``; {} or node -> why.

        The verdict always comes from a full check (:meth:`check`): the DaemonSet's pods (as
        their watch saw them) and the selected Nodes and the pool's nodes (listed), node by node.
        Between full checks the gate sleeps until the watches see a change of a pod or of the
        DaemonSet (at most ``WAKE_MAX`` s), and reads the DaemonSet as its watch saw it. A full check runs when the DaemonSet
        controller counts every pod Ready and ``expect_updated`` pods updated (and its status
        changed since the last full check), and once at the timeout. Otherwise it runs every
        ``max(2 * interval, 1)`` seconds anyway (so a crash-looping pod, or a node that stops
        reporting, is seen), or ``CHECK_SPACING`` times as long as the last successful check took,
        after it ended, if that is longer, at most ``CHECK_SPACING_MAX`` seconds: under load a
        check of 1,000 pods takes seconds, and back to back they would take the API server's CPU
        from the pods being replaced. A check that could not list (an API or control-plane error,
        which may have taken its whole timeout) does not lengthen the spacing."""
        started = time.monotonic()
        deadline = started + self.inv.bcd_rollout_gate_timeout
        soak = self.inv.bcd_rollout_soak
        self.standing = Standing()
        # a line once the gate has waited GATE_FIRST_SAY s, then every GATE_SAY_EVERY s
        said_at, unhealthy = started + GATE_FIRST_SAY - GATE_SAY_EVERY, len(nodes)
        full_every = max(2 * self.interval, 1.0)
        last_full, last_version, spacing = started, None, full_every
        healthy_since = None  # when every node of the stage was first seen healthy
        while True:
            self.renew()
            try:
                ok, version = self.settled(expect_updated)
            except KubeError:
                ok, version = False, None  # the full checks, on their schedule, say what is wrong
            now = time.monotonic()
            final = now >= (deadline if healthy_since is None else healthy_since + soak)
            # while soaking, a full check every full_every: a pod that turns Ready and then
            # fails, or a node that stops reporting, must be seen before the stage passes
            due = full_every if healthy_since is not None else spacing
            if final or (ok and version != last_version and healthy_since is None) or now - last_full >= due:
                last_version = version
                problems, is_fatal, listed = self.check(ds, nodes, revision, image, baseline, timings)
                last_full = time.monotonic()
                took = last_full - now if listed else 0.0
                spacing = max(full_every, min(CHECK_SPACING * took, CHECK_SPACING_MAX))
                unhealthy = len(problems)
                if problems and healthy_since is not None and listed:
                    into = last_full - healthy_since
                    return {n: f"{why} ({into:.0f}s into the {soak}s soak, after it was healthy)"
                            for n, why in problems.items()}
                if is_fatal:
                    return problems
                if not problems:
                    if healthy_since is None:
                        healthy_since = last_full
                    if last_full - healthy_since >= soak:
                        return problems
                elif final:
                    return {n: f"{why} (after {self.inv.bcd_rollout_gate_timeout}s)" for n, why in problems.items()}
            until = deadline if healthy_since is None else healthy_since + soak
            if self.say and time.monotonic() - said_at >= GATE_SAY_EVERY:
                said_at = time.monotonic()
                waited = said_at - started
                state = (f"all {len(nodes)} node(s) healthy, soaking ({said_at - healthy_since:.0f}s of {soak}s, "
                         "bcd_rollout_soak)" if healthy_since is not None
                         else f"{len(nodes) - unhealthy} of {len(nodes)} node(s) healthy")
                self.say(f"{self.gate_label or 'rollout'}: {state} (waited {waited:.0f}s of "
                         f"{self.inv.bcd_rollout_gate_timeout}s; bcd_rollout_gate_timeout sets the limit)")
            due_at = last_full + (full_every if healthy_since is not None else spacing)
            # woken by the watches at each change of a pod or the DaemonSet; at least every
            # second, for the lock's renewal and the schedule of full checks
            wait_for_change(self.changed, max(0.0, min(WAKE_MAX, until - time.monotonic(), due_at - time.monotonic())))

    def run(self) -> None:
        previous = self.p.get("previous") or []
        prev_ds = next((o for o in previous if o.get("kind") == "DaemonSet"), None)
        if prev_ds is None:
            self.m.fail_json(msg="bcd_rollout state=run needs previous (the status taken before the new template was applied)")
        from_image = container_image(prev_ds)
        target = self.inv.bcd_image
        stages_out: list[dict] = []
        failed: list[dict] = []
        rollback = None
        timings: dict = {}
        stage_of: dict[str, str] = {}
        start_images: dict[str, str | None] = {}
        result = "succeeded"
        msg = None
        render = self.p.get("apply") or []
        try:
            # with apply, the new template is applied here (OnDelete), else the playbook applied it
            ds = self.apply_new(render) if render else self.observed()
            self.available_before = int((ds.get("status") or {}).get("numberAvailable") or 0)
            if container_image(ds) != target:
                self.m.fail_json(msg=f"DaemonSet {self.ns}/{self.name} runs {container_image(ds)}, not {target}: "
                                     "apply the new template (OnDelete) before state=run")
            revision = revision_hash(newest_revision(self.revisions(ds), ds["metadata"]["uid"]))
            if self.follow_ds is None:
                self.follow(ds)
            pods = self.pods(ds)
            self.listed = pods
            nodes = self.selected()
            self.selected_count = len(nodes)
            baseline = self.cp_nodes(nodes)
            start_images = {n: container_image(p) for n, p in pods.items()}
            self.ready_before = {n for n, p in pods.items() if pod_ready(p)}
            # down Nodes (NotReady, cordoned, unreachable) roll in no stage and gate none: the plan
            # (status) refused more of them than bcd_rollout_max_down allows
            self.down = {n: why for n in sorted(nodes, key=natural) if (why := node_down(nodes[n]))}
            # a pod on a Node the selector no longer selects is the controller's to delete, not to roll
            old = sorted((n for n, pod in pods.items() if n in nodes and pod_revision(pod) != revision), key=natural)
            to_roll = [n for n in old if n not in self.down]
            already = len([n for n in pods if n in nodes]) - len(old)  # pods on the newest revision before the first stage
            stages = plan(to_roll, self.inv.bcd_rollout_canary, self.inv.bcd_rollout_max_unavailable, len(nodes))
            # every node still to roll, the down ones too: one that is back by a later stage rolls there
            pool = list(old)
            known = set(nodes)  # a Node not among them joined the cluster during the rollout
            rolled: list[str] = []
            i = 0
            while i < len(stages) or (not failed and any(n not in self.down for n in pool)):
                if i >= len(stages):
                    # nodes that were down at their turn and are back: one more batch each
                    batches = len([s for s in stages if s["name"].startswith("batch")])
                    size = batch_size(self.inv.bcd_rollout_max_unavailable, len(nodes))
                    stages.append({"name": f"batch {batches + 1}", "nodes": [n for n in pool if n not in self.down][:size]})
                stage = stages[i]
                self.renew()
                t0 = time.monotonic()
                timings["_stage"] = t0
                size = len(stage["nodes"])
                self.stage_name = stage["name"]
                now_nodes = self.selected()
                # which Nodes are down now: a stage never deletes a down Node's pod (its kubelet could
                # not replace it: the pod would stay Terminating) and never waits for one
                down_now = {n: why for n in sorted(set(now_nodes) | set(pool), key=natural)
                            if (why := node_down(now_nodes.get(n)))}
                self.down = {n: why for n, why in down_now.items() if n not in self.went_down}
                self.note_joined(now_nodes, known, stage["name"])
                record = {"name": stage["name"], "size": size, "nodes": [], "started_at": _rfc3339(), "outcome": "running"}
                stages_out.append(record)
                self.events_since = _rfc3339()
                candidates = [n for n in pool if n not in self.down]
                planned, size = size, min(size, len(candidates))  # fewer when nodes are down or rolled already
                if not size:
                    members, short_by = [], None
                elif stage["name"] == "canary" or down_now or self.joined:
                    # by name, the plan's next nodes that are up: the canary's few pods, or a batch's
                    # while a node is down or joined (the controller's RollingUpdate would delete the
                    # down node's unavailable pod first, and count the down nodes and a joined node
                    # whose bcd cannot join without a token against maxUnavailable).
                    # Each DELETE names the pod's uid, so a pod replaced since is never deleted.
                    members, short_by = candidates[:size], None
                    self.delete_pods([p for n in members if (p := self.listed.get(n)) is not None
                                      and pod_revision(p) != revision])
                else:
                    # a batch: the DaemonSet controller deletes and replaces its pods, and picks them
                    members, short_by = self.controller_stage(ds, old, set(rolled), size, len(rolled) + size, revision)
                pool = [n for n in pool if n not in members]
                record["nodes"] = members
                if not members and not short_by:
                    record.update(outcome="skipped", seconds=0.0)
                    self.notes.append(f"stage {stage['name']}: skipped, " + (
                        "every node left to roll is down: " + ", ".join(pool) if pool
                        else "no node left to roll (an earlier stage rolled more than planned)"))
                    i += 1
                    continue
                if len(members) != planned:
                    record["planned_size"] = planned
                    self.notes.append(f"stage {stage['name']}: {len(members)} node(s) rolled, {planned} planned"
                                      + (" (the DaemonSet controller replaced the extra ones; the next stage counts them)"
                                         if len(members) > planned else
                                         " (the others are down)" if any(n in self.down for n in pool) else ""))
                for node in members:
                    stage_of[node] = stage["name"]
                rolled += members
                self.gate_label = (f"rollout stage {i + 1} of {len(stages)} ({stage['name']}, {len(members)} node(s) "
                                   f"to {short_ref(target)})")
                gated = [n for n in rolled if n not in self.went_down]
                problems = self.gate(ds, gated, revision, target, baseline, timings,
                                     expect_updated=already + len([n for n in rolled if n not in self.went_down]))
                if short_by and not problems:
                    problems = {f"DaemonSet {self.ns}/{self.name}": short_by}
                record["seconds"] = round(time.monotonic() - t0, 1)
                lost = [n for n in members if n in self.went_down]
                if lost:
                    record["not_verified"] = lost
                if not problems:
                    problems = self.lost_too_much(stage["name"], members, lost)
                if problems:
                    record["outcome"] = "failed"
                    failed = [{"node": n, "stage": stage_of.get(n, stage["name"]), "why": w}
                              for n, w in sorted(problems.items(), key=lambda x: natural(x[0]))]
                    for later in stages[i + 1:]:
                        stages_out.append({"name": later["name"], "size": len(later["nodes"]), "nodes": [],
                                           "outcome": "not started"})
                    break
                record["outcome"] = "passed"
                self.passed_at = time.monotonic()
                i += 1
            if not failed:
                # a Node that joined after the last stage began: named too; every stage passed,
                # so a failed read only loses that name, not the rollout
                try:
                    self.note_joined(self.selected(), known, None)
                except KubeError as exc:
                    self.notes.append(f"could not list the selected Nodes after the last stage, to name any that joined "
                                      f"meanwhile (audit.yml names them): {exc}")
            # a down Node whose old pod an earlier run's RollingUpdate deleted (Terminating until its
            # kubelet is back: in no list) is as far behind as one that still has it
            podless = [n for n in nodes if n in self.down and n not in self.listed and n not in rolled]
            self.left = {n: self.down.get(n) or "the Node was down at its turn" for n in [*pool, *podless]
                         if n in self.down}
            if failed:
                # the nodes and why (the first few: the table has every one)
                names = "; ".join(f"{f['node']} - {f['why']}" for f in failed[:FAILED_IN_MSG])
                if len(failed) > FAILED_IN_MSG:
                    names += f"; and {len(failed) - FAILED_IN_MSG} more node(s)"
                back_to = (short_ref(from_image) if from_image != target
                           else f"the previous pod template (image {short_ref(from_image)})")
                first = next(s["name"] for s in stages_out if s["outcome"] == "failed")
                if self.inv.bcd_rollout_rollback:
                    rollback = self.rollback(previous, prev_ds, rolled, baseline, timings)
                    result = "rolled_back" if rollback["outcome"] == "succeeded" else "rollback_failed"
                    msg = (f"the {first} health gate failed on {names}: rolled back to {back_to}"
                           if result == "rolled_back" else
                           f"the {first} health gate failed on {names}, and the rollback did not complete: {rollback.get('why')}")
                else:
                    result = "failed"
                    msg = (f"the {first} health gate failed on {names}; bcd_rollout_rollback is false, so nothing was rolled "
                           f"back: the DaemonSet is left with updateStrategy OnDelete on {target}, so no other pod rolls")
                    self.notes.append(f"NOT ROLLED BACK: DaemonSet {self.ns}/{self.name} is left OnDelete on {target}; the "
                                      f"nodes above keep what they run. Roll to a good digest with rollout.yml "
                                      f"-e bcd_image=... -e bcd_rollout_force=true.")
            elif render:
                # every stage passed: the DaemonSet as rendered, its own update strategy (the
                # template is the one applied, so no pod moves)
                ds_render = next(o for o in render if o.get("kind") == "DaemonSet")
                try:
                    self.apply(ds_render)
                except KubeError as exc:
                    result, msg = "failed", (f"every stage passed, but the DaemonSet as rendered (its own update strategy) "
                                             f"could not be applied, so it is left OnDelete: {exc}")
        except LostLock as exc:
            result, msg = "failed", f"{exc}; stopped without rolling back"
        except (KubeError, ControlPlaneError) as exc:
            result, msg = "failed", f"stopped: {exc}"
            if stage_of:
                # what the cluster is left with, and the way on (the next run's status check refuses
                # a rollout left incomplete unless forced)
                took = sorted(stage_of, key=natural)
                named = ", ".join(took[:FAILED_IN_MSG]) + (f" and {len(took) - FAILED_IN_MSG} more" if len(took) > FAILED_IN_MSG else "")
                msg += (f". {len(took)} node(s) took the new pod before it stopped ({named}); DaemonSet {self.ns}/{self.name} "
                        f"is left with updateStrategy OnDelete on {short_ref(target)}, so no other pod rolls: once the cause "
                        f"is fixed, run rollout.yml again with -e bcd_rollout_force=true (a rollout left incomplete is "
                        f"refused without it) and the same bcd_image to roll the rest, or -e bcd_image={from_image} to "
                        f"roll these back")
        rows = self.rows(stage_of, start_images, failed, timings, result)
        # what a headline of success would leave unsaid: the down Nodes and those that joined
        aside = "".join((
            f"; {len(self.left)} down node(s) left behind ({', '.join(sorted(self.left, key=natural))})" if self.left else "",
            f"; {len(self.went_down)} rolled but not verified, their Node went down "
            f"({', '.join(sorted(self.went_down, key=natural))})" if self.went_down else "",
            f"; {len(self.joined)} node(s) joined during the rollout ({', '.join(sorted(self.joined, key=natural))})"
            if self.joined else ""))
        headline = {
            "succeeded": (f"rolled {change(from_image, target).removeprefix('of ')} on {len(stage_of)} node(s) in "
                          f"{len([s for s in stages_out if s['outcome'] != 'skipped'])} stage(s){aside}" if stage_of else
                          f"applied {short(target)}: no node rolled{aside}" if aside else
                          f"applied on {short(target)}: the pod template did not change, so no node rolled (every selected "
                          "node's pod already runs its pod template; the kubelet updates the mounted ConfigMap files in "
                          "place)"),
            "rolled_back": f"rollout {change(from_image, target)} FAILED and was rolled back: {msg}",
            "rollback_failed": f"rollout {change(from_image, target)} FAILED; rollback incomplete: {msg}",
            "failed": f"rollout {change(from_image, target)} FAILED: {msg}",
        }[result]
        summary = self.summary(result, headline, from_image, stages_out, rows, failed_nodes=failed, rollback=rollback,
                               left_behind=[{"node": n, "why": w} for n, w in sorted(self.left.items(), key=lambda x: natural(x[0]))],
                               not_verified=[{"node": n, "why": w}
                                             for n, w in sorted(self.went_down.items(), key=lambda x: natural(x[0]))],
                               joined=sorted(self.joined, key=natural))
        self.unfollow()
        out = {"changed": self.did_change, "watch": self.watched(), "summary": summary, "table": table(summary), "plan": [
            {"name": s["name"], "size": s["size"], "nodes": s["nodes"]} for s in stages_out],
            **({"lease_version": self.lease_version} if self.lease_version else {})}
        if result != "succeeded":
            self.m.fail_json(msg=headline, **out)
        self.m.exit_json(**out)

    def note_joined(self, now_nodes: dict[str, dict], known: set[str], stage: str | None) -> None:
        """Name each selected Node of ``now_nodes`` not in ``known`` (it joined the cluster during
        the rollout, before ``stage``, or after the last stage began when None), with a note; adds
        it to ``known``. The DaemonSet is OnDelete during the stages, so its first pod has the new
        template at once; its bcd has no join token yet (add-nodes.yml joins it), so no gate can
        wait for it to report."""
        for name in sorted(set(now_nodes) - known, key=natural):
            known.add(name)
            self.joined[name] = stage
            when = f"before stage {stage}" if stage else "during the last stage"
            line = (f"{name} joined the cluster {when}: its bcd pod has the new pod template from the start (the "
                    "DaemonSet is OnDelete while it rolls), not gated here; add-nodes.yml joins it to the control plane, "
                    "and audit.yml checks it")
            self.notes.append(line)
            if self.say:
                self.say(f"{self.gate_label or 'rollout'}: {line}")

    def lost_too_much(self, stage: str, members: list[str], lost: list[str]) -> dict[str, str]:
        """Fail a stage, as a failed gate does, when the nodes that went down after taking the new
        pod leave nothing to judge it by, or take the rollout over its down budget: a build that
        stops its nodes' kubelets or runtimes looks exactly like that, and must not spread.
        Returns node -> why ({} when the stage stands)."""
        if members and len(lost) == len(members):
            return {n: (f"{self.went_down[n]}, so no node of the {stage} was verified on the new pod: a stage that "
                        "verifies none of its nodes does not pass (run rollout.yml again once the Node is back, if "
                        "it went down for another reason)") for n in lost}
        down = set(self.down) | set(self.went_down)
        allowed = down_budget(self.inv.bcd_rollout_max_down, self.selected_count or len(down))
        if self.went_down and len(down) > allowed:
            return {n: (f"{self.went_down[n]}; {len(down)} of {self.selected_count} selected node(s) are down now, more "
                        f"than bcd_rollout_max_down {self.inv.bcd_rollout_max_down} allows ({allowed})")
                    for n in lost or sorted(self.went_down, key=natural)}
        return {}

    def lose(self, node: str, why: str) -> None:
        """Leave ``node``, rolled, out of every later judgement: its Node went down (``why``,
        :func:`node_down`'s phrase) while its stage ran; said at once, and in the report."""
        self.went_down[node] = f"{went(why)} during {self.stage_name or 'the rollout'}"
        line = (f"{node}: {self.went_down[node]}: left out of the gate (rolled, not verified; audit.yml checks it once "
                "it is back)")
        self.notes.append(line)
        if self.say:
            self.say(f"{self.gate_label or 'rollout'}: {line}")

    def rollback(self, previous: list[dict], prev_ds: dict, rolled: list[str], baseline: dict, timings: dict) -> dict:
        """Re-apply the previous render with OnDelete, replace the pods not on its revision, wait,
        then re-apply it with its own update strategy."""
        t0 = time.monotonic()
        out = {"attempted": True, "to": container_image(prev_ds), "started_at": _rfc3339()}
        try:
            for obj in previous:
                self.apply(with_strategy(obj, ON_DELETE) if obj.get("kind") == "DaemonSet" else obj)
            ds = self.observed()
            revision = revision_hash(newest_revision(self.revisions(ds), ds["metadata"]["uid"]))
            # a down Node's pod is neither replaced (its kubelet could not: the pod would stay
            # Terminating) nor waited for; the previous render's own strategy replaces it once it is back
            now_nodes = self.selected()
            self.down = {n: why for n in sorted(now_nodes, key=natural)
                         if n not in self.went_down and (why := node_down(now_nodes[n]))}
            # nor a joined Node's (its bcd cannot join without a token: add-nodes.yml's)
            skip = set(self.down) | set(self.went_down) | set(self.joined)
            stale = {node: pod for node, pod in self.pods(ds).items() if pod_revision(pod) != revision and node not in skip}
            self.events_since = _rfc3339()
            self.delete_pods(list(stale.values()))
            replaced = list(stale)
            out["nodes"] = sorted((set(replaced) | set(rolled)) - skip, key=natural)
            left = sorted((n for n in skip if n in rolled), key=natural)
            if set(self.joined) & set(self.pods(ds)):
                self.notes.append(f"rollback: the Node(s) that joined during the rollout keep their pod until the previous "
                                  f"render's update strategy replaces it: {', '.join(sorted(self.joined, key=natural))}")
            if left:
                out["left"] = left
                self.notes.append(f"rollback: not rolled back, the Node being down: {', '.join(left)} (its pod keeps the "
                                  "new pod template until the Node is back; the DaemonSet controller then replaces it, as the "
                                  "previous render's update strategy does)")
            timings.clear()
            timings["_stage"] = time.monotonic()
            self.gate_label = f"rollback of {len(out['nodes'])} node(s) to {short_ref(container_image(prev_ds))}"
            problems = self.gate(ds, out["nodes"], revision, container_image(prev_ds), baseline, {})
            self.apply(prev_ds)
            if problems:
                out.update(outcome="failed", why="; ".join(f"{n}: {w}" for n, w in problems.items()))
            else:
                # "rolled back" promises what `kubectl rollout status` would confirm: the
                # controller counts every pod updated and available on the previous render, but
                # those of down Nodes that were available before the run and now are not updated
                # (left on the new template) or not available (a cordoned Node's pod runs on)
                before = self.available_before
                if before is not None:
                    before -= len({n for n in (set(self.down) | set(self.went_down)) & self.ready_before
                                   if n in left or node_dark(now_nodes.get(n))})
                lag = self.wait_rolled_out(ROLLBACK_SETTLE, before)
                if lag:
                    out.update(outcome="failed", why=lag)
                else:
                    out["outcome"] = "succeeded"
        except (KubeError, ControlPlaneError, LostLock) as exc:
            out.update(outcome="failed", why=str(exc))
        out["seconds"] = round(time.monotonic() - t0, 1)
        return out

    def rows(self, stage_of, start_images, failed, timings, result) -> list[dict]:
        why = {f["node"]: f["why"] for f in failed}
        try:
            # as the watches saw them, when they follow (no request), else read
            ds = (next(iter(self.follow_ds.objects().values()), None) if self.follow_ds is not None
                  and self.follow_ds.error is None else self.daemonset())
            pods = self.pods(ds) if ds else {}
            nodes = self.selected()
            cpn = self.cp_nodes(nodes)
        except (KubeError, ControlPlaneError):
            pods, nodes, cpn = {}, {n: {} for n in set(stage_of) | set(start_images)}, {}
        rows = []
        rolled_back = result in ("rolled_back", "rollback_failed")
        # a Node left behind that is gone from the selection since keeps its row
        for name in set(self.left) - set(nodes):
            nodes[name] = None
        rows = []
        for name in sorted(nodes, key=natural):
            pod = pods.get(name)
            if name in why:
                outcome = f"FAILED: {why[name]}"
            elif name in self.went_down:
                outcome = (f"rolled, not rolled back: {self.went_down[name]}; its pod keeps the new pod template until the "
                           "Node is back (the DaemonSet controller then replaces it)" if rolled_back else
                           f"rolled, not verified: {self.went_down[name]}; audit.yml checks it once it is back")
            elif name in self.left:
                outcome = left_behind(self.left[name])
            elif name in self.joined:
                outcome = (f"joined during the rollout ({'before stage ' + self.joined[name] if self.joined[name] else 'in the last stage'}): "
                           "its pod has the DaemonSet's pod template from the start, not gated; add-nodes.yml joins it")
            elif name not in stage_of:
                outcome = "not rolled (already on the new revision)" if result == "succeeded" else "not rolled"
            elif rolled_back:
                outcome = "rolled, then rolled back"
            else:
                outcome = f"rolled, healthy after {timings[name]}s" if name in timings else "rolled"
            rows.append({"name": name, "stage": stage_of.get(name), "from": short(start_images.get(name)),
                         "to": short(container_image(pod)) if pod else None,
                         "pod": pod_column(pod, nodes.get(name) or None),
                         "state": (cpn.get(name) or {}).get("state"), "outcome": outcome})
        return rows
