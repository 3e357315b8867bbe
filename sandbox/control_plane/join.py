"""The join simulator: stands in for bcd's ``join`` init container on the sandbox's KWOK nodes.

KWOK runs no container, so nothing would ever call the control plane; this thread does what
``bcd join --config <file> --token-file <file>`` does (control-plane-api.md, "What bcd itself
does"; seed 000, Apply / Revoke the token / Trust), reading what the pod really mounts:

* A **bcd pod** is a pod labelled ``app.kubernetes.io/name=bcd`` (the only pods watched: the
  other pods of a 5,000-node cluster would only cost the watch), owned by a DaemonSet, with an
  init container whose command line is ``<...>/bcd join ...``. KWOK's stage ``pod-bcd-join-init`` (sandbox/kwok/kwok.yaml) holds it
  ``Pending`` with that container running; the simulator then plays the container as a kubelet
  shows it: admitted, the container exits 0 (``Completed``) and KWOK runs the pod and turns it
  Ready; refused, the container exits 1 with the reason as its termination message
  (``lastState.terminated``), waits ``CrashLoopBackOff`` (kubectl: ``Init:CrashLoopBackOff``)
  and is tried again after a back-off that doubles from ``join_retry_seconds`` up to 16 times
  that (a kubelet: 10 s up to 5 min); the pod is never Ready. A pod that runs already (the
  emulator restarted, or the control plane forgot its node) is tried again every
  ``join_retry_seconds``, without touching its status.
* ``--config``: the file is looked up through the init container's volumeMounts and the pod's
  volumes (a ConfigMap volume, with or without ``items``); the ConfigMap is read from the pod's
  namespace. Its ``site``, ``gateway.url``, ``pins.*``, ``join.hosted`` and (when set)
  ``join.server`` must be the emulator's own, else ``ConfigMismatch``; no such volume,
  ConfigMap or key: ``NoConfig``.
* A Node that joined before (by name: its identity would live in ``/var/lib/bcd`` on the host)
  succeeds without a token and spends nothing.
* Else ``--token-file`` is looked up the same way (a Secret volume): an absent Secret or key is
  ``NoToken``; a file group or others could read (the volume's ``mode``/``defaultMode``) is
  ``TokenFileMode``; a token over 4 KiB or one this control plane did not issue is
  ``TokenInvalid``; then one use is spent, atomically, of an unexpired (``TokenExpired``),
  unrevoked (``TokenRevoked``) token with uses left (``TokenExhausted``).
* A joined node is recorded ``adopting`` with ``hostname`` = the Node's name and the trust the
  seed's Trust rule gives, and the Node is labelled ``bcd.dev/node-id=<id>``.
* Fault injection can refuse named Nodes (``Refused``).

Every refusal is a Warning Event ``BcdJoinRefused`` on the Pod (one Event per pod and reason,
its count incremented on each retry) whose message starts with the reason, and, for a node the
control plane knows, the node condition ``JoinRefused`` (status "True") in nodes.list. A join
is a Normal Event ``BcdJoined``.

Reporting: a joined node whose Node has no Running and Ready bcd pod that joined for longer than
``offline_grace_seconds`` (or the fault ``offlineGraceSeconds``) turns ``offline`` (condition
``Reporting`` "False"), and gets its previous state back when such a pod is there again.

Crash loops: with the fault ``crashLoop`` naming a Node, the simulator plays that Node's joined,
running bcd pod's main container (its first) as a kubelet shows a container that exits at once:
``state.terminated`` (exit 1, ``Error``, the fault's text as termination message) for a second,
then ``state.waiting`` ``CrashLoopBackOff`` with that exit in ``lastState.terminated`` for a
back-off that doubles from ``join_retry_seconds`` up to 16 times that (a kubelet: 10 s up to
5 min), then again, ``restartCount`` one more each time; the pod's ``Ready`` and
``ContainersReady`` conditions are "False" throughout. A replaced pod crash-loops as well (the
cause is the Node's). The fault lifted, the next restart runs and turns Ready, as a kubelet's does
once the cause is gone. The node stays ``adopting`` for the offline grace, then turns ``offline``.

Real nodes (the kind test bed) run bcd itself, which joins and reports through the gateway's node
side (``gateway.py``): the simulator plays only pods on KWOK's nodes (annotated
``kwok.x-k8s.io/node=fake``), and leaves a node that reports by itself to the gateway, which
turns it ``offline`` when its reports stop for ``offline_grace_seconds``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import logging
import posixpath
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sandbox.control_plane.config import Seed
from sandbox.control_plane.db import Store
from sandbox.control_plane.faults import Faults
from sandbox.control_plane.pki import Pki

log = logging.getLogger("bcd.cp.join")

NODE_ID_LABEL = "bcd.dev/node-id"
EVENT_REFUSED = "BcdJoinRefused"
EVENT_JOINED = "BcdJoined"
MAX_TOKEN = 4096
# The User-Agent of the join simulator's Kubernetes requests (bench/ leaves them out of its counts).
USER_AGENT = "bcd-control-plane-emulator"
# KWOK manages (and the simulator plays) only the Nodes with this annotation.
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# A pod bound to a KWOK Node with no status after this many seconds is touched (annotation
# NUDGE_ANNOTATION) so that KWOK plays it; again after twice as long, at most every 30 s. With
# more than 50 such pods, 0.1 s more per pod.
NUDGE_AFTER = 5.0
NUDGE_ANNOTATION = "sandbox.bcd.dev/kwok-nudge"
# The pods the simulator watches: bcd's DaemonSet pods carry this label (bcd_render's selector);
# every other pod of the cluster would only cost the watch (5,000 nodes: megabytes a minute).
POD_SELECTOR = "app.kubernetes.io/name=bcd"
# Joins played at once, as the kubelets of that many Nodes run their join containers at once.
WORKERS = 16
# A watch request lasts this long (the API server ends it), then resumes from its last resourceVersion.
WATCH_SECONDS = 240


@dataclass
class Crash:
    """The crash loop the simulator plays on one pod's container (fault ``crashLoop``)."""

    container: str
    restarts: int  # restartCount: runs after the first
    failures: int  # exits so far (the back-off doubles with each)
    phase: str  # "terminated" (it just exited) or "waiting" (CrashLoopBackOff)
    due: float  # monotonic time of the next step
    term: dict  # its last exit, as lastState.terminated says it


@dataclass
class Outcome:
    """The last join attempt of one pod."""

    ok: bool
    reason: str
    message: str
    at: float
    node: str
    pod: str
    namespace: str
    node_id: str | None = None
    wall: float = 0.0
    # when the container started, at the latest (epoch seconds): the oldest view of the cluster
    # the join used (a pass's cached read may predate the attempt)
    started: float | None = None

    def view(self) -> dict:
        return {"node": self.node, "pod": f"{self.namespace}/{self.pod}", "joined": self.ok, "reason": self.reason,
                "message": self.message, "nodeId": self.node_id,
                "at": datetime.datetime.fromtimestamp(self.wall, datetime.UTC).isoformat(timespec="seconds")}


class Refusal(Exception):
    def __init__(self, reason: str, message: str):
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


def _rfc3339(epoch: float) -> str:
    """``epoch`` (seconds) as a Kubernetes status timestamp (RFC 3339, UTC, whole seconds)."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _opt(cmd: list[str], flag: str) -> str | None:
    for i, arg in enumerate(cmd):
        if arg == flag and i + 1 < len(cmd):
            return cmd[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def join_container(pod: dict) -> dict | None:
    """The pod's ``bcd join`` init container, when the pod is a bcd DaemonSet pod; else None."""
    meta = pod.get("metadata") or {}
    if not any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return None
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        cmd = list(container.get("command") or []) + list(container.get("args") or [])
        if len(cmd) >= 2 and (cmd[0] == "bcd" or cmd[0].endswith("/bcd")) and cmd[1] == "join":
            return container
    return None


def init_status(pod: dict, name: str | None) -> dict | None:
    """The status of init container ``name`` of ``pod``, or None."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == name:
            return status
    return None


def _ready(pod: dict) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def volume_file(pod: dict, container: dict, path: str) -> tuple[dict, str]:
    """(volume, path inside the volume) of the file ``path`` as ``container`` sees it.

    Raises LookupError when no volume is mounted there.
    """
    path = posixpath.normpath(path)
    best = None
    for mount in container.get("volumeMounts") or []:
        mpath = posixpath.normpath(mount.get("mountPath") or "")
        if (path == mpath or path.startswith(mpath.rstrip("/") + "/")) and (best is None or len(mpath) > len(best[1])):
            best = (mount, mpath)
    if best is None:
        raise LookupError(f"no volume is mounted at {path}")
    mount, mpath = best
    rel = path[len(mpath):].lstrip("/")
    if mount.get("subPath"):
        rel = posixpath.join(mount["subPath"], rel) if rel else mount["subPath"]
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == mount.get("name"):
            return volume, rel
    raise LookupError(f"the pod has no volume {mount.get('name')!r} (mounted at {mpath})")


def _item_key(source: dict, rel: str) -> tuple[str | None, int | None]:
    """(key, item mode) of the file ``rel`` in a ConfigMap/Secret volume source."""
    items = source.get("items")
    if items:
        for item in items:
            if posixpath.normpath(item.get("path") or "") == rel:
                return item.get("key"), item.get("mode")
        return None, None
    return (rel if rel and "/" not in rel else None), None



def config_problems(doc: dict, pki: Pki, seed: Seed, gateway_url: str, control_plane_url: str) -> list[str]:
    """What in a bcd ``config.toml`` (as a dict) contradicts this control plane: its ``site``,
    ``gateway.url``, ``pins.*``, ``join.hosted`` and (when set) ``join.server``. The join
    simulator and the gateway's join endpoint refuse such a join with ``ConfigMismatch``."""
    pins = pki.pins()
    want = {
        "site": seed.site_id,
        "gateway.url": gateway_url.rstrip("/"),
        "pins.serving_ca": pins["serving_ca"],
        "pins.join_signing": pins["join_signing"],
        "pins.join_encryption": pins["join_encryption"],
        "join.hosted": "kubernetes",
    }

    def get(dotted: str):
        value = doc
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    problems = []
    for key, expected in want.items():
        value = get(key)
        if isinstance(value, str) and key.endswith("url"):
            value = value.rstrip("/")
        if value != expected:
            shown = "missing" if value is None else json.dumps(value)
            problems.append(f"{key} is {shown}, the control plane's is {json.dumps(expected)}")
    server = get("join.server")
    cp_url = control_plane_url.rstrip("/")
    if server is not None and (not isinstance(server, str) or server.rstrip("/") != cp_url):
        problems.append(f"join.server is {json.dumps(server)}, another control plane than {cp_url}")
    return problems


class JoinSimulator:
    """Watches bcd's pods (one thread), looks at them all after changes (a pass, another thread) and
    plays the joins, exits, crash-loop steps and nudges a pass asks for on a pool of workers."""

    def __init__(self, kubeconfig: str, db_path, pki: Pki, seed: Seed, control_plane_url: str, gateway_url: str,
                 faults: Faults, reports=None):
        self.kubeconfig = str(kubeconfig)
        self.core = None  # made by the watch thread (importing the client is slow)
        self.db_path = db_path
        self._local = threading.local()  # one Store (SQLite connection) per thread
        self._seen = threading.local()  # the join being played in this thread: what it saw when (_saw)
        self.pki = pki
        self.seed = seed
        self.control_plane_url = control_plane_url.rstrip("/")
        self.gateway_url = gateway_url.rstrip("/")
        self.faults = faults
        self.reports = reports  # gateway.NodeReports: the nodes that report by themselves
        self.kwok_nodes: dict[str, bool] = {}  # Node name -> KWOK plays it
        self.kwok_listed = 0.0
        self.lock = threading.RLock()
        self.pods: dict[str, dict] = {}
        self.outcomes: dict[str, Outcome] = {}
        self.events: dict[tuple[str, str], int] = {}
        self.last_ready: dict[str, float] = {}
        # uid -> (failed runs of its join container, monotonic time of the next run)
        self.backoff: dict[str, tuple[int, float]] = {}
        # uid -> monotonic time before which its join is not run again (admin: a held back-off)
        self.held: dict[str, float] = {}
        # uid -> (monotonic time first seen bound with no status, nudges so far, next nudge at)
        self.unplayed: dict[str, tuple[float, int, float]] = {}
        self.crashing: dict[str, Crash] = {}  # uid -> the crash loop played on that pod
        # uids whose join, exit, crash-loop step or nudge a worker plays now (one at a time per pod)
        self.busy: set[str] = set()
        self.pool: ThreadPoolExecutor | None = None
        self.started = time.monotonic()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.synced = threading.Event()
        self.threads: list[threading.Thread] = []

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """This thread's Store: sqlite3 connections are not shared across threads; spending a token
        is one BEGIN IMMEDIATE transaction (Store.spend_and_join), atomic across them."""
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.db_path)
        return store

    def start(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="join")
        for name, target in (("pod-watch", self._watch), ("joiner", self._work)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _play(self, uid: str, fn, *args) -> None:
        """Run ``fn(*args)`` for pod ``uid`` on a worker, unless one plays that pod already (the
        next pass looks again); inline when there is no pool (the unit tests)."""
        if getattr(self, "pool", None) is None:
            fn(*args)
            return
        with self.lock:
            if uid in self.busy:
                return
            self.busy.add(uid)

        def run() -> None:
            try:
                fn(*args)
            except Exception:
                log.exception("join simulator: playing pod %s failed", uid)
            finally:
                with self.lock:
                    self.busy.discard(uid)
                self.wake.set()

        try:
            self.pool.submit(run)
        except RuntimeError:  # shut down
            with self.lock:
                self.busy.discard(uid)

    # -- pod cache -------------------------------------------------------------------------------

    def _client(self):
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = WORKERS + 4  # the workers, the pass and the watch at once
        api = client.ApiClient(cfg)
        # Its own User-Agent, so the audit log tells the emulator's requests from the
        # playbooks' (make bench counts those).
        api.user_agent = USER_AGENT
        return client.CoreV1Api(api)

    def _list(self) -> str:
        """List bcd's pods, 500 a page (one response of 5,000 Nodes broke off mid-way, 15 MB in, on
        a loaded API server); the cache becomes that list. Returns the list's resourceVersion."""
        items, token = [], None
        while True:
            resp = self.core.list_pod_for_all_namespaces(label_selector=POD_SELECTOR, limit=500, _preload_content=False,
                                                         # the API server's own limit at scale (sandbox/cluster.py)
                                                         _request_timeout=(10, 180),
                                                         **({"_continue": token} if token else {}))
            doc = json.loads(resp.data)
            items.extend(doc.get("items") or [])
            token = doc["metadata"].get("continue")
            if not token:
                break
        with self.lock:
            self.pods = {p["metadata"]["uid"]: p for p in items}
        log.info("listed %d bcd pods (resourceVersion %s)", len(items), doc["metadata"]["resourceVersion"])
        return doc["metadata"]["resourceVersion"]

    def _watch(self) -> None:
        """List bcd's pods once, then watch them from the last resourceVersion seen (bookmarks
        move it too): a watch that ends or breaks resumes where it was; only an expired
        resourceVersion (410 Gone) lists them again."""
        from kubernetes.client.rest import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        rv = None
        while not self.stopping.is_set():
            try:
                if self.core is None:
                    self.core = self._client()
                if rv is None:
                    rv = self._list()
                    self.synced.set()
                    self.wake.set()
                resp = self.core.list_pod_for_all_namespaces(
                    label_selector=POD_SELECTOR, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_SECONDS, _preload_content=False, _request_timeout=(10, WATCH_SECONDS + 60))
                try:
                    for line in iter_resp_lines(resp):
                        if self.stopping.is_set():
                            break
                        if not line:
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                log.info("pod watch: resourceVersion %s expired (410); listing again", rv)
                                rv = None
                            else:
                                log.warning("pod watch: %s %s; resuming in 2s", obj.get("code"), obj.get("message"))
                                self.stopping.wait(2.0)
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if kind not in ("ADDED", "MODIFIED", "DELETED"):
                            continue  # BOOKMARK: only its resourceVersion
                        uid = (obj.get("metadata") or {}).get("uid")
                        with self.lock:
                            if kind == "DELETED":
                                self.pods.pop(uid, None)
                            else:
                                self.pods[uid] = obj
                        self.wake.set()
                finally:
                    resp.close()
                    resp.release_conn()
            except ApiException as exc:
                if exc.status == 410:
                    log.info("pod watch: resourceVersion %s expired (410); listing again", rv)
                    rv = None
                    continue
                log.warning("watching pods failed (%s %s); retrying in 2s", exc.status, exc.reason)
                self.stopping.wait(2.0)
            except Exception as exc:  # noqa: BLE001 - a broken stream or the cluster down: resume from rv
                log.warning("watching pods failed (%s: %s); resuming from %s in 2s", type(exc).__name__, exc, rv)
                self.stopping.wait(2.0)

    # -- the work loop ---------------------------------------------------------------------------

    def _work(self) -> None:
        tick = min(1.0, self.seed.join_retry_seconds)
        while not self.stopping.is_set():
            self.wake.wait(timeout=tick)
            self.wake.clear()
            if self.stopping.is_set():
                break
            if not self.synced.is_set():
                continue
            t0 = time.monotonic()
            try:
                self.reconcile()
            except Exception:
                log.exception("join simulator pass failed")
            # coalesce bursts of pod events; a pass over thousands of pods takes a while, and
            # passes back to back would take that CPU from the API server and KWOK
            self.stopping.wait(max(0.05, min(2.0, 2 * (time.monotonic() - t0))))

    def reconcile(self) -> None:
        now = time.monotonic()
        with self.lock:
            pods = dict(self.pods)
            for uid in [u for u in self.outcomes if u not in pods]:
                del self.outcomes[uid]
            for key in [k for k in self.events if k[0] not in pods]:
                del self.events[key]
            for uid in [u for u in self.backoff if u not in pods]:
                del self.backoff[uid]
            for uid in [u for u in self.held if u not in pods]:
                del self.held[uid]
            for uid in [u for u in self.unplayed if u not in pods]:
                del self.unplayed[uid]
            for uid in [u for u in self.crashing if u not in pods]:
                del self.crashing[uid]
        self._cache = {}
        for uid, pod in pods.items():
            self._nudge(uid, pod, now)
            container = join_container(pod)
            if container is None:
                continue
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            if not spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if not self._kwok(spec["nodeName"]):
                continue  # a real node: its own bcd joins it (gateway.py)
            init = init_status(pod, container.get("name"))
            if status.get("phase") == "Pending" and init is not None:
                state = init.get("state") or {}
                waiting = (state.get("waiting") or {}).get("reason")
                with self.lock:
                    last = self.outcomes.get(uid)
                    _failures, due = self.backoff.get(uid, (0, 0.0))
                    due = max(due, self.held.get(uid, 0.0))
                # (the pod in the cache may predate our own status update: the outcome and the
                # back-off are the truth)
                if last and last.ok:
                    # KWOK can write its init stage again after our exit (the container shown
                    # running again): record the exit once more, as a kubelet's status would say
                    if state.get("running") and now - last.at > 2.0:
                        last.at = now
                        self._play(uid, self._exit_now, uid, pod, container, init, last)
                    continue
                if now < due:
                    continue
                if state.get("running") or waiting == "CrashLoopBackOff":
                    self._play(uid, self._attempt_now, uid, pod, container, init)
                continue
            if status.get("phase") != "Running":
                continue
            with self.lock:
                last = self.outcomes.get(uid)
            if last and last.ok:
                with self.lock:
                    crashing = uid in self.crashing
                if crashing or self.faults.crash_loop(spec["nodeName"]) is not None:
                    self._play(uid, self._crash_loop_now, uid, pod)
            if last and (last.ok or now - last.at < self.seed.join_retry_seconds):
                continue
            self._play(uid, self._attempt_now, uid, pod, container, None)
        self.report(pods, now)

    # (a worker plays a pod some time after the pass that chose it: the back-offs and retry delays
    # count from when the worker plays it, as a kubelet's count from the container's exit)
    def _attempt_now(self, uid: str, pod: dict, container: dict, init: dict | None) -> None:
        self.attempt(uid, pod, container, time.monotonic(), init=init)

    def _exit_now(self, uid: str, pod: dict, container: dict, init: dict, outcome: Outcome) -> None:
        self._exit(uid, pod, container, init, outcome, time.monotonic())

    def _crash_loop_now(self, uid: str, pod: dict) -> None:
        self._crash_loop(uid, pod, time.monotonic())

    def _nudge(self, uid: str, pod: dict, now: float) -> None:
        """Touch a pod bound to a KWOK Node that KWOK has left without any status for
        ``NUDGE_AFTER`` seconds, so that KWOK plays it. KWOK drops the events of a pod bound to a
        Node it has not started to manage yet (a Node just added, whose DaemonSet pod came at
        once), and nothing else changes such a pod again; a kubelet syncs every pod bound to it."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if (not spec.get("nodeName") or pod["metadata"].get("deletionTimestamp")
                or status.get("phase") not in (None, "Pending")
                or status.get("initContainerStatuses") or status.get("containerStatuses")):
            self.unplayed.pop(uid, None)
            return
        if not self._kwok(spec["nodeName"]):
            return
        # with many pods waiting, KWOK's queue (not its bug) is why: 300 pods without a status at
        # 5,000 nodes were touched after 5 s, each touch one more write for a starved API server
        after = NUDGE_AFTER * max(1.0, len(self.unplayed) / 50)
        first, count, due = self.unplayed.setdefault(uid, (now, 0, now + after))
        if now < max(due, first + after):
            return
        self._play(uid, self._touch, pod, count + 1, now - first)
        self.unplayed[uid] = (first, count + 1, now + min(NUDGE_AFTER * 2 ** (count + 1), 30.0))

    def _touch(self, pod: dict, count: int, waited: float) -> None:
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod(meta["name"], meta["namespace"],
                                           {"metadata": {"annotations": {NUDGE_ANNOTATION: str(count)}}})
            log.warning("KWOK left pod %s/%s on Node %s without any status for %.0fs: touched it (%s=%d)",
                        meta["namespace"], meta["name"], pod["spec"]["nodeName"], waited, NUDGE_ANNOTATION, count)
        except Exception as exc:  # noqa: BLE001 - gone or the cluster is down; the next pass looks again
            log.warning("touching pod %s/%s failed (%s: %s)", meta["namespace"], meta["name"], type(exc).__name__, exc)

    def _kwok(self, node_name: str) -> bool:
        """Whether KWOK plays Node ``node_name``; Nodes are listed again (at most every 2 s) when
        one is new to us."""
        if node_name not in self.kwok_nodes and time.monotonic() - self.kwok_listed > 2.0:
            self.kwok_listed = time.monotonic()
            key, value = KWOK_ANNOTATION
            kwok, token = {}, None
            try:
                # 500 a page: 5,000 Nodes in one response (15 MB) broke off mid-way on a loaded API server
                while True:
                    nodes = json.loads(self.core.list_node(limit=500, _preload_content=False, _request_timeout=(10, 60),
                                                           **({"_continue": token} if token else {})).data)
                    kwok.update({n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(key) == value
                                 for n in nodes.get("items") or []})
                    token = nodes["metadata"].get("continue")
                    if not token:
                        break
            except Exception as exc:  # noqa: BLE001 - the cluster may be down; the next pass asks again
                log.warning("listing Nodes failed (%s: %s)", type(exc).__name__, exc)
                return False
            self.kwok_nodes = kwok
        return self.kwok_nodes.get(node_name, False)

    # -- crash loops (fault crashLoop) ------------------------------------------------------------

    def _crash_loop(self, uid: str, pod: dict, now: float) -> None:
        """Play the next step of the crash loop of a joined, running bcd pod whose Node the fault
        ``crashLoop`` names, as a kubelet's status shows a container that exits at once: exited
        (``Error``), then ``CrashLoopBackOff`` for the back-off, then exited again after a
        restart. The fault lifted, the next restart runs and turns Ready."""
        meta, node_name = pod["metadata"], pod["spec"]["nodeName"]
        message = self.faults.crash_loop(node_name)
        with self.lock:
            crash = self.crashing.get(uid)
        if crash is None and message is None:
            return
        if crash is not None and now < crash.due:
            return
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        containers = (pod.get("spec") or {}).get("containers") or []
        if not containers:
            return
        if crash is None:
            mine = next((c for c in (pod.get("status") or {}).get("containerStatuses") or []
                         if c.get("name") == containers[0].get("name")), {})
            started = ((mine.get("state") or {}).get("running") or {}).get("startedAt") or stamp
            crash = Crash(containers[0].get("name"), int(mine.get("restartCount") or 0), 0, "waiting", now, {})
            log.info("node %s: bcd pod %s/%s crash-loops (fault crashLoop)", node_name, meta["namespace"], meta["name"])
        else:
            started = stamp
        previous = crash.term
        if message is None:
            # the cause is gone: this restart runs, and the container turns Ready
            state, ready = {"running": {"startedAt": stamp}}, True
            crash.restarts += 1
            with self.lock:
                self.crashing.pop(uid, None)
            log.info("node %s: bcd pod %s/%s runs again (fault crashLoop lifted)", node_name, meta["namespace"], meta["name"])
        elif crash.phase == "waiting":
            # (re)started, and exits at once
            if crash.failures:
                crash.restarts += 1
            crash.failures += 1
            crash.term = {"exitCode": 1, "reason": "Error", "message": message, "startedAt": started, "finishedAt": stamp}
            crash.phase, crash.due = "terminated", now + 1.0
            state, ready, previous = {"terminated": crash.term}, False, previous
        else:
            delay = min(self.seed.join_retry_seconds * 2 ** (crash.failures - 1), self.seed.join_retry_seconds * 16)
            crash.phase, crash.due = "waiting", now + delay
            state, ready, previous = {"waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:g}s restarting failed container={crash.container} "
                           f"pod={meta['name']}_{meta['namespace']}({meta['uid']})"}}, False, crash.term
        if message is not None:
            with self.lock:
                self.crashing[uid] = crash
        mine = {"name": crash.container, "image": containers[0].get("image") or "", "imageID": "",
                "restartCount": crash.restarts, "ready": ready, "started": ready, "state": state,
                **({"lastState": {"terminated": previous}} if previous else {})}
        statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if s.get("name") != crash.container]
        flag = "True" if ready else "False"
        conditions = [{"type": t, "status": flag, "lastTransitionTime": stamp,
                       **({} if ready else {"reason": "ContainersNotReady",
                                            "message": f"containers with unready status: [{crash.container}]"})}
                      for t in ("Ready", "ContainersReady")]
        self._patch_status(pod, {"status": {"containerStatuses": [mine, *statuses], "conditions": conditions}},
                           "the crash loop of its bcd container")

    def _patch_status(self, pod: dict, body: dict, what: str) -> None:
        from kubernetes.client.rest import ApiException

        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body,
                                                  _content_type="application/strategic-merge-patch+json")
        except ApiException as exc:
            if exc.status != 404:
                log.warning("recording %s on pod %s/%s failed: %s %s", what, meta["namespace"], meta["name"],
                            exc.status, exc.reason)

    # -- one join --------------------------------------------------------------------------------

    def attempt(self, uid: str, pod: dict, container: dict, now: float, init: dict | None = None) -> Outcome:
        """Join the pod's node; with ``init`` (the join container's status while the pod
        initializes) also record the container's exit in the pod's status."""
        meta, node_name = pod["metadata"], pod["spec"]["nodeName"]
        self._seen.at = time.time()
        try:
            node, rejoined = self._join(pod, container, node_name)
        except Refusal as refusal:
            outcome = Outcome(False, refusal.reason, refusal.message, now, node_name, meta["name"], meta["namespace"])
            self.faults.count_join("refused", refusal.reason)
            log.info("join of %s (pod %s/%s) refused: %s", node_name, meta["namespace"], meta["name"], refusal)
            self._event(pod, "Warning", EVENT_REFUSED, refusal.reason, f"{refusal.reason}: {refusal.message}",
                        container.get("name", "join"))
            if self.store.set_condition(node_name, "JoinRefused", {
                    "type": "JoinRefused", "status": "True", "reason": refusal.reason, "message": refusal.message}):
                log.info("node %s: condition JoinRefused %s", node_name, refusal.reason)
        except Exception as exc:  # noqa: BLE001 - a failed API call is ours, not bcd's: retry quietly
            outcome = Outcome(False, "Error", f"{type(exc).__name__}: {exc}", now, node_name, meta["name"],
                              meta["namespace"])
            log.warning("join of %s (pod %s/%s) failed on our side: %s", node_name, meta["namespace"], meta["name"],
                        outcome.message)
        else:
            how = "joined before; no token spent" if rejoined else f"spent one use of {node['token_id']}"
            message = f"joined as {node['id']} ({node['trust']}); {how}"
            outcome = Outcome(True, "Rejoined" if rejoined else "Joined", message, now, node_name, meta["name"],
                              meta["namespace"], node["id"])
            self.faults.count_join("rejoined" if rejoined else "joined")
            log.info("%s (pod %s/%s): %s", node_name, meta["namespace"], meta["name"], message)
            self.store.set_condition(node_name, "JoinRefused", None)
            self._label(node_name, node["id"])
            self._event(pod, "Normal", EVENT_JOINED, "joined", message, container.get("name", "join"))
            with self.lock:
                self.last_ready[node_name] = now
        outcome.wall, outcome.started, self._seen.at = time.time(), self._seen.at, None
        with self.lock:
            self.outcomes[uid] = outcome
        if init is not None and outcome.reason != "Error":
            self._exit(uid, pod, container, init, outcome, now)
        return outcome

    def _exit(self, uid: str, pod: dict, container: dict, init: dict, outcome: Outcome, now: float) -> None:
        """Record in the pod's status how its join container exited, as a kubelet does: exit 0
        (KWOK then runs the pod), or exit 1 with the reason as termination message, restarting
        with back-off (``CrashLoopBackOff``)."""
        from kubernetes.client.rest import ApiException

        meta, name = pod["metadata"], container.get("name", "join")
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # a retry's container starts when the join is played (KWOK shows only the first run's)
        began = _rfc3339(outcome.started) if outcome.started is not None else stamp
        started = min(((init.get("state") or {}).get("running") or {}).get("startedAt") or began, began)
        with self.lock:
            failures, _due = self.backoff.get(uid, (int(init.get("restartCount") or 0)
                                                    + (1 if (init.get("state") or {}).get("waiting") else 0), 0.0))
        mine = {"name": name, "image": container.get("image") or init.get("image") or "", "imageID": "",
                **({"lastState": init["lastState"]} if init.get("lastState") else {})}
        if outcome.ok:
            mine.update(ready=True, started=False, restartCount=max(failures, int(init.get("restartCount") or 0)),
                        state={"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                              "finishedAt": stamp}})
        else:
            failures += 1
            delay = min(self.seed.join_retry_seconds * 2 ** (failures - 1), self.seed.join_retry_seconds * 16)
            with self.lock:
                self.backoff[uid] = (failures, now + delay)
            mine.update(
                ready=False, started=False, restartCount=failures - 1,
                state={"waiting": {"reason": "CrashLoopBackOff",
                                   "message": f"back-off {delay:g}s restarting failed container={name} "
                                              f"pod={meta['name']}_{meta['namespace']}({meta['uid']})"}},
                lastState={"terminated": {"exitCode": 1, "reason": "Error", "message": f"{outcome.reason}: {outcome.message}",
                                          "startedAt": started, "finishedAt": stamp}},
            )
        statuses = [mine if s.get("name") == name else s for s in (pod.get("status") or {}).get("initContainerStatuses") or []]
        body = {"status": {"initContainerStatuses": statuses}}
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body,
                                                  _content_type="application/strategic-merge-patch+json")
        except ApiException as exc:
            if exc.status != 404:
                log.warning("recording the join container's exit on pod %s/%s failed: %s %s", meta["namespace"],
                            meta["name"], exc.status, exc.reason)

    def _join(self, pod: dict, container: dict, node_name: str) -> tuple[dict, bool]:
        """(node, joined before?) or raise Refusal."""
        reason = self.faults.join_refusal(node_name)
        if reason is not None:
            raise Refusal("Refused", reason)
        cmd = list(container.get("command") or []) + list(container.get("args") or [])
        self._check_config(pod, container, _opt(cmd, "--config") or "/etc/bcd/config.toml")
        env = {e.get("name"): e for e in container.get("env") or []}
        field = (((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field != "spec.nodeName":
            raise Refusal("ConfigMismatch", "the join container has no NODE_NAME from spec.nodeName: bcd cannot tell "
                                            "which Node it joins")
        known = self.store.node_by_hostname(node_name)
        if known and known["state"] != "removed":
            return known, True
        token_file = _opt(cmd, "--token-file")
        if not token_file:
            raise Refusal("NoToken", "bcd join has no --token-file and the node never joined")
        token_id = self._read_token(pod, container, token_file)
        node, why = self.store.spend_and_join(token_id, node_name, self.seed.site_id, self.seed.hosted_trust())
        if node is None:
            token = self.store.token(token_id) or {}
            detail = {
                "TokenUnknown": "the control plane has no such token",
                "TokenRevoked": f"join token {token_id} was revoked",
                "TokenExpired": f"join token {token_id} expired",
                "TokenExhausted": f"join token {token_id} has no use left ({token.get('uses')} of {token.get('max_uses')} spent)",
            }[why]
            raise Refusal("TokenInvalid" if why == "TokenUnknown" else why, detail)
        return node, False

    def _read_key(self, pod: dict, container: dict, path: str, kind: str) -> tuple[bytes | None, str, int | None]:
        """(content or None when absent, where, mode) of a file from a ConfigMap or Secret volume."""
        volume, rel = volume_file(pod, container, path)
        source_key = "configMap" if kind == "ConfigMap" else "secret"
        source = volume.get(source_key)
        if source is None:
            raise LookupError(f"{path} is on volume {volume.get('name')!r}, which is not a {kind} volume")
        name = source.get("name") if kind == "ConfigMap" else source.get("secretName")
        key, item_mode = _item_key(source, rel)
        namespace = pod["metadata"]["namespace"]
        where = f"{kind} {namespace}/{name}"
        if key is None:
            raise LookupError(f"{where} volume {volume.get('name')!r} maps no key to {path}")
        mode = item_mode if item_mode is not None else source.get("defaultMode", 0o644)
        from kubernetes.client.rest import ApiException

        try:
            obj = self._read(kind, namespace, name)
            if kind == "ConfigMap":
                data = (obj.data or {}).get(key)
                content = data.encode() if data is not None else None
                if content is None and (obj.binary_data or {}).get(key) is not None:
                    content = base64.b64decode(obj.binary_data[key])
            else:
                data = (obj.data or {}).get(key)
                content = base64.b64decode(data) if data is not None else None
        except ApiException as exc:
            if exc.status == 404:
                return None, f"{where} does not exist", mode
            raise
        except (binascii.Error, ValueError):
            return None, f"{where} key {key!r} is not base64", mode
        if content is None:
            return None, f"{where} has no key {key!r}", mode
        return content, f"{where} key {key!r}", mode

    def _read(self, kind: str, namespace: str, name: str):
        """Read a ConfigMap or Secret, once per pass (the pods of one pass see the same objects)."""
        from kubernetes.client.rest import ApiException

        key = (kind, namespace, name)
        cache = getattr(self, "_cache", None)
        if cache is not None and key in cache:
            hit, read_at = cache[key]
            self._saw(read_at)
            if isinstance(hit, ApiException):
                raise hit
            return hit
        read_at = time.time()
        self._saw(read_at)
        try:
            if kind == "ConfigMap":
                obj = self.core.read_namespaced_config_map(name, namespace)
            else:
                obj = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if cache is not None and exc.status == 404:
                cache[key] = (exc, read_at)
            raise
        if cache is not None:
            cache[key] = (obj, read_at)
        return obj

    def _saw(self, read_at: float) -> None:
        """Note that the join being played sees the cluster as of ``read_at`` (epoch seconds):
        its container counts as started then at the latest (``startedAt``), as a kubelet's
        container that read its mounts when it started."""
        seen = getattr(self._seen, "at", None)
        if seen is not None:
            self._seen.at = min(seen, read_at)

    def _check_config(self, pod: dict, container: dict, path: str) -> None:
        try:
            raw, where, _ = self._read_key(pod, container, path, "ConfigMap")
        except LookupError as exc:
            raise Refusal("NoConfig", str(exc)) from None
        if raw is None:
            raise Refusal("NoConfig", f"{path}: {where}")
        try:
            doc = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise Refusal("ConfigMismatch", f"{path} ({where}) is not valid TOML: {exc}") from None
        problems = config_problems(doc, self.pki, self.seed, self.gateway_url, self.control_plane_url)
        if problems:
            raise Refusal("ConfigMismatch", f"{path} ({where}): " + "; ".join(problems))

    def _read_token(self, pod: dict, container: dict, path: str) -> str:
        try:
            raw, where, mode = self._read_key(pod, container, path, "Secret")
        except LookupError as exc:
            raise Refusal("NoToken", str(exc)) from None
        if raw is None:
            raise Refusal("NoToken", f"no token file {path}: {where}")
        if mode is not None and mode & 0o077:
            raise Refusal("TokenFileMode", f"{path} would be mode {mode:04o}: bcd join refuses a token file group or "
                                           "others can read")
        if len(raw) > MAX_TOKEN:
            raise Refusal("TokenInvalid", f"{path} is over 4 KiB")
        try:
            token = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise Refusal("TokenInvalid", f"{path} ({where}) is not a join token") from None
        token_id = self.pki.token_id_of(token)
        if token_id is None:
            raise Refusal("TokenInvalid", f"{path} ({where}) holds no join token this control plane issued")
        return token_id

    # -- reporting -------------------------------------------------------------------------------

    def report(self, pods: dict[str, dict], now: float) -> None:
        direct = self.reports.snapshot() if self.reports is not None else {}
        with self.lock:
            joined_hosts = {
                (pod.get("spec") or {}).get("nodeName")
                for uid, pod in pods.items()
                if uid in self.outcomes and self.outcomes[uid].ok and _ready(pod)
            }
        for node in self.store.nodes():
            host = node["hostname"]
            if node["state"] == "removed":  # left the pool (nodes.remove): reports nothing
                continue
            if host in direct:  # bcd on a real node reports by itself (gateway.NodeSide.sweep)
                continue
            if host in joined_hosts and not self.faults.muted(host):
                with self.lock:
                    self.last_ready[host] = now
                if node["state"] == "offline" and self.store.set_offline(host, False):
                    log.info("node %s (%s) reports again", host, node["id"])
                if "Reporting" in node["conditions"]:
                    self.store.set_condition(host, "Reporting", None)
                continue
            with self.lock:
                since = self.last_ready.setdefault(host, now)
            grace = self.faults.offline_grace(self.seed.offline_grace_seconds)
            if now - since >= grace and node["state"] != "offline":
                self.store.set_offline(host, True)
                self.store.set_condition(host, "Reporting", {
                    "type": "Reporting", "status": "False", "reason": "NoReadyPod",
                    "message": f"no Running and Ready bcd pod that joined on {host} for {grace:g}s"})
                log.info("node %s (%s) is offline: no Running and Ready bcd pod", host, node["id"])

    # -- Kubernetes side effects -----------------------------------------------------------------

    def _label(self, node_name: str, node_id: str | None) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.patch_node(node_name, {"metadata": {"labels": {NODE_ID_LABEL: node_id}}})
        except ApiException as exc:
            log.warning("labelling Node %s failed: %s %s", node_name, exc.status, exc.reason)

    def _event(self, pod: dict, etype: str, reason: str, key: str, message: str, container: str = "join") -> None:
        """One Event per (pod, key), named ``<pod>.bcd-join-<key>``: created once, then its count and
        lastTimestamp move (also across restarts of the emulator)."""
        from kubernetes.client.rest import ApiException

        meta = pod["metadata"]
        ns = meta["namespace"]
        name = f"{meta['name']}.bcd-join-{key.lower()}"[:253]
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self.lock:
            count = self.events.get((meta["uid"], key))
        try:
            if count is None:
                try:
                    self.core.create_namespaced_event(ns, {
                        "metadata": {"name": name, "namespace": ns},
                        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "namespace": ns,
                                           "uid": meta["uid"], "fieldPath": f"spec.initContainers{{{container}}}"},
                        "reason": reason, "message": message, "type": etype,
                        "source": {"component": "bcd-join", "host": pod["spec"].get("nodeName")},
                        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
                    })
                    count = 1
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    count = self.core.read_namespaced_event(name, ns).count or 1
                    count = self._bump(name, ns, count, stamp, message)
            else:
                count = self._bump(name, ns, count, stamp, message)
            with self.lock:
                self.events[(meta["uid"], key)] = count
        except ApiException as exc:
            with self.lock:
                self.events.pop((meta["uid"], key), None)
            log.warning("recording Event %s on pod %s/%s failed: %s %s", reason, ns, meta["name"], exc.status, exc.reason)

    def _bump(self, name: str, ns: str, count: int, stamp: str, message: str) -> int:
        self.core.patch_namespaced_event(name, ns, {"count": count + 1, "lastTimestamp": stamp, "message": message})
        return count + 1

    # -- admin -------------------------------------------------------------------------------------

    def joins(self) -> list[dict]:
        """The last join attempt of every bcd pod the simulator tried, by Node name."""
        with self.lock:
            return sorted((o.view() for o in self.outcomes.values()), key=lambda v: (v["node"], v["pod"]))

    def hold_backoff(self, uid: str, seconds: float) -> dict | None:
        """Run the pod ``uid``'s join again no sooner than ``seconds`` from now, whatever its own
        back-off says (a kubelet's reaches 5 minutes; the sandbox's 2 s doubling stops at 32 s).
        None when the simulator holds no back-off for that pod (it has not failed, or it is gone)."""
        with self.lock:
            if uid not in self.backoff:
                return None
            failures, _due = self.backoff[uid]
            self.held[uid] = time.monotonic() + seconds
        return {"uid": uid, "failures": failures, "seconds": seconds}

    def forgotten(self, nodes: list[dict]) -> None:
        """The control plane forgot ``nodes`` (admin): drop their label and retry their pods."""
        hosts = {n["hostname"] for n in nodes}
        with self.lock:
            for uid in [u for u, o in self.outcomes.items() if o.node in hosts]:
                del self.outcomes[uid]
            for host in hosts:
                self.last_ready.pop(host, None)
        if self.reports is not None:
            self.reports.forget(hosts)
        for host in sorted(hosts):
            if self.core is not None:
                self._label(host, None)
        self.wake.set()
