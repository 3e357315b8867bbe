"""What the reliability scenarios share: running a playbook while things go wrong, and reading
what it left behind in the control plane and the cluster.

``Runner.run`` starts ``ansible-playbook`` in a session of its own and reads its output line by
line, with a time stamp per line. Triggers fire on a task banner (``TASK [<name>]``): set a
control-plane fault, stop the Kubernetes API server, send a signal. The result keeps the output,
the exit code, each task's start time, and which trigger fired when.

``World`` reads the control-plane emulator (tokens, counters) and the cluster (the join-token
Secret, the lock Lease, Nodes). Every token the emulator ever minted can be recomputed from its
id (``sandbox.control_plane.pki.Pki.token_for``), so the secret scans look for all of them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import ROOT, VENV_BIN, ansible_env

ACCESS = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO bcd\.cp\.access: (?P<method>[A-Z]+) "
                    r"(?P<path>\S+) (?P<status>\d{3}) ")
BANNER = re.compile(r"^TASK \[(?P<name>.*?)\] \**\s*$")
CLUSTER = "sandbox"  # the inventory host (the cluster's name in token descriptions)
DESCRIPTION = re.compile(r"^bcd-ansible cluster=(?P<cluster>\S+) run=(?P<run>\S+)")
# The image inventories/sandbox pins (the DaemonSet of an adopted sandbox runs it).
INVENTORY_IMAGE = "registry.example.com/better-compute/bcd:0.1.0@sha256:5d3f2a1c9b8e7d6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
# Nodes a scenario adds carry this label, so they are removed when the scenarios end.
EXTRA_NODE_LABEL = "bcd-reliability/extra"


# ----------------------------------------------------------------------------------- running


@dataclass
class Trigger:
    """Call ``action(run)`` once, ``delay`` seconds after the first banner of a task whose name
    contains ``task`` (case-sensitive), counting the ``nth`` such banner (1 = the first).
    ``required``: a run in which it never fired fails the test (a renamed task would otherwise
    leave a fault test that injects nothing and passes)."""

    task: str
    action: Callable[[Run], None]
    delay: float = 0.0
    nth: int = 1
    required: bool = True
    fired_at: float | None = None
    seen: int = 0


@dataclass
class Run:
    playbook: str
    args: tuple[str, ...]
    started: float = 0.0
    ended: float = 0.0
    returncode: int | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    tasks: list[tuple[float, str]] = field(default_factory=list)
    signalled: str | None = None
    pid: int | None = None
    cmdlines: set[str] = field(default_factory=set)
    procs: dict[int, str] = field(default_factory=dict)  # pid -> start ticks of every process it started

    @property
    def output(self) -> str:
        return "".join(line for _, line in self.lines)

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def text(self) -> str:
        """The output with whitespace folded (Ansible wraps long messages)."""
        return " ".join(self.output.split())

    def task_seconds(self, name: str) -> float:
        """Seconds from the banner of the first task containing ``name`` to the next banner."""
        for i, (t, task) in enumerate(self.tasks):
            if name in task:
                end = self.tasks[i + 1][0] if i + 1 < len(self.tasks) else self.ended
                return end - t
        raise KeyError(name)

    def reached(self, name: str) -> bool:
        return any(name in task for _, task in self.tasks)

    def tail(self, n: int = 6000) -> str:
        return self.output[-n:]


class Runner:
    """Runs playbooks for one test; counts them into ``recorder.runs`` when given."""

    def __init__(self, recorder=None, env: dict | None = None):
        self.recorder = recorder
        self.env = env or {}
        self.history: list[Run] = []

    def run(self, playbook: str, *args: str, env: dict | None = None, triggers: list[Trigger] = (),
            timeout: float = 900, watch_cmdlines: bool = False, cwd: Path | None = None) -> Run:
        """Run ``ansible-playbook <playbook> <args>`` to its end (or its death by a trigger)."""
        run = Run(playbook, tuple(args))
        # every task's banner, printed when the task starts (triggers fire on them, and task
        # times are measured between them): the shipped ansible.cfg prints a task that ends ok or
        # skipped only when it has something to say, and the banner then waits for its result
        full_env = ansible_env(**{"ANSIBLE_DISPLAY_OK_HOSTS": "true", "ANSIBLE_DISPLAY_SKIPPED_HOSTS": "true",
                                  **self.env, **(env or {})})
        run.started = time.monotonic()
        proc = subprocess.Popen(
            [str(VENV_BIN / "ansible-playbook"), playbook, *args], cwd=str(cwd or ROOT), env=full_env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            start_new_session=True,
        )
        run.pid = proc.pid
        stop_watch = threading.Event()
        watcher = threading.Thread(target=_watch, args=(run, stop_watch, watch_cmdlines), daemon=True)
        watcher.start()
        pending: list[threading.Timer] = []
        reader = threading.Thread(target=_read, args=(proc, run, list(triggers), pending), daemon=True)
        reader.start()
        timed_out = False
        try:
            run.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            run.returncode = proc.wait()
            reap(run, grace=0)
        finally:
            # A run killed by a signal may leave workers holding the pipe: read on only briefly.
            reader.join(timeout=30 if (run.returncode or 0) >= 0 else 2)
            for t in pending:
                t.join()
            stop_watch.set()
            watcher.join()
            run.ended = time.monotonic()
        if timed_out:
            raise AssertionError(f"{playbook} {' '.join(args)}: no end within {timeout}s:\n{run.tail()}")
        missed = [f"{t.task!r} (banner {t.nth})" for t in triggers if t.required and t.fired_at is None]
        if missed:
            raise AssertionError(f"{playbook} {' '.join(args)}: no task banner matched the trigger(s) {', '.join(missed)} "
                                 f"(exit {run.returncode}):\n{run.tail()}")
        self.history.append(run)
        if self.recorder is not None:
            self.recorder.runs += 1
        return run


def _read(proc: subprocess.Popen, run: Run, triggers: list[Trigger], pending: list[threading.Timer]) -> None:
    for line in proc.stdout:
        now = time.monotonic()
        run.lines.append((now, line))
        m = BANNER.match(line.rstrip("\n"))
        if not m:
            continue
        run.tasks.append((now, m["name"]))
        for trig in triggers:
            if trig.fired_at is None and trig.task in m["name"]:
                trig.seen += 1
                if trig.seen == trig.nth:
                    trig.fired_at = now
                    t = threading.Timer(trig.delay, trig.action, args=(run,))
                    t.start()
                    pending.append(t)


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks) of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), fields[19])
    return table


def _descendants(table: dict[int, tuple[int, str]], roots: set[int]) -> set[int]:
    """``roots`` and every live process of ``table`` (:func:`_proc_table`) descending from them
    (ansible-playbook's workers call setsid(), so they are followed by parentage, not by session)."""
    known, changed = set(roots), True
    while changed:
        changed = False
        for pid, (ppid, _ticks) in table.items():
            if ppid in known and pid not in known:
                known.add(pid)
                changed = True
    return known


def _watch(run: Run, stop: threading.Event, cmdlines: bool) -> None:
    """Track every process the run starts and, with ``cmdlines``, their command lines."""
    while True:
        table = _proc_table()
        roots = {run.pid, *run.procs}
        known = _descendants(table, roots)
        for pid in known - roots:
            run.procs[pid] = table[pid][1]
        if cmdlines:
            for pid in known:
                try:
                    run.cmdlines.add(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
        if stop.wait(0.2):
            return


def alive(run: Run) -> list[int]:
    """Processes the run started that still run (the same processes: start times checked)."""
    table = _proc_table()
    return [pid for pid, ticks in run.procs.items() if table.get(pid, (0, None))[1] == ticks]


def send(sig: signal.Signals) -> Callable[[Run], None]:
    """A trigger action: send ``sig`` to the ansible-playbook process, as ``kill`` does (a
    terminal's Ctrl-C reaches the same process: Ansible's workers run in sessions of their own,
    and ansible-playbook passes SIGINT and SIGTERM on to them itself)."""

    def action(run: Run) -> None:
        try:
            os.kill(run.pid, sig)
            run.signalled = sig.name
        except ProcessLookupError:
            pass  # it had ended already

    return action


def paused(action: Callable[[Run], None]) -> Callable[[Run], None]:
    """A trigger action that runs ``action`` with the run stopped (SIGSTOP to ansible-playbook and
    every process it started, SIGCONT after): a change made "during" a task lands before the run's
    next request, however slow the machine. Without it, the run races the action."""

    def signal_all(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def wrapped(run: Run) -> None:
        stopped: list[int] = []
        try:
            # twice: a process forked while the first pass ran is stopped by the second
            for _ in range(2):
                pids = [p for p in sorted(_descendants(_proc_table(), {run.pid})) if p not in stopped]
                signal_all(pids, signal.SIGSTOP)
                stopped += pids
            action(run)
        finally:
            signal_all(stopped, signal.SIGCONT)

    return wrapped


def reap(run: Run, grace: float = 10.0) -> list[int]:
    """After a run died by a signal: wait up to ``grace`` seconds for the processes it left
    (workers, module processes) to end by themselves, then SIGKILL those that remain (each by
    its pid, checked against its start time). Returns the pids that had to be killed."""
    deadline = time.monotonic() + grace
    while alive(run) and time.monotonic() < deadline:
        time.sleep(0.25)
    left = alive(run)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


# ------------------------------------------------------------------------------- the world


class World:
    """The control-plane emulator and the sandbox cluster, as the tests read them."""

    def __init__(self, sandbox):
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client
        from kubernetes import client as k8s

        from sandbox.control_plane import pki
        from sandbox.control_plane.admin import Admin

        self.sandbox = sandbox
        self.vars = sandbox.control_plane_vars()
        self.cp = Client(self.vars["bcd_control_plane_url"], api_key=self.vars["bcd_api_key"],
                         ca_file=self.vars["bcd_control_plane_ca_file"], retry_budget=30)
        self.admin = Admin.for_sandbox(sandbox.dir)
        self._pki = pki.ensure(Path(sandbox.dir) / "control-plane")
        self.api = sandbox.api_client()
        self.core = k8s.CoreV1Api(self.api)
        self.apps = k8s.AppsV1Api(self.api)
        self.coord = k8s.CoordinationV1Api(self.api)
        self.namespace = "bcd-system"

    # -- control plane ---------------------------------------------------------------------

    @property
    def api_key(self) -> str:
        return self.vars["bcd_api_key"]

    def tokens(self) -> list[dict]:
        return list(self.cp.list_tokens(self.vars["bcd_tenant"], self.vars["bcd_pool"]))

    def ours(self, tokens: list[dict] | None = None) -> list[dict]:
        """Tokens bcd-ansible minted for this cluster (by their description)."""
        out = []
        for t in self.tokens() if tokens is None else tokens:
            m = DESCRIPTION.match(t.get("description") or "")
            if m and m["cluster"] == CLUSTER:
                out.append({**t, "run": m["run"]})
        return out

    def unrevoked(self) -> list[dict]:
        return [t for t in self.ours() if not t.get("revokedAt")]

    def token_values(self, ids: list[str] | None = None) -> list[str]:
        """The secret tokens of ``ids`` (default: every token the emulator ever minted)."""
        ids = [t["id"] for t in self.tokens()] if ids is None else ids
        return [self._pki.token_for(i) for i in ids]

    def secrets(self) -> list[str]:
        """Every secret a scan looks for: the API key and every join token ever minted."""
        return [self.api_key, *self.token_values()]

    def reporting(self) -> dict[str, str]:
        return {n["hostname"]: n["state"] for n in self.cp.list_nodes(self.vars["bcd_tenant"], self.vars["bcd_pool"])}

    def counters(self) -> dict:
        return self.admin.counters()

    def access(self, since: float, procedure: str | None = None) -> list[tuple[float, str, int]]:
        """The emulator's access log from ``since`` (epoch seconds): (time the answer was sent,
        procedure, status), oldest first; ``procedure`` keeps only that one."""
        out = []
        path = Path(self.sandbox.dir) / "logs" / "control-plane.log"
        for line in path.read_text(errors="replace").splitlines():
            m = ACCESS.match(line)
            if not m:
                continue
            when = dt.datetime.strptime(m["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            proc = m["path"].rsplit("/", 1)[-1] if "/rpc/" in m["path"] else "discovery"
            if when >= since and (procedure is None or proc == procedure):
                out.append((when, proc, int(m["status"])))
        return out

    # -- cluster ---------------------------------------------------------------------------

    def gpu_nodes(self) -> list[str]:
        return sorted(n.metadata.name for n in self.core.list_node(label_selector="nvidia.com/gpu.present=true").items)

    def secret_exists(self) -> bool:
        return bool(self.core.list_namespaced_secret(self.namespace, field_selector="metadata.name=bcd-join").items)

    def lease_holder(self) -> str | None:
        items = self.coord.list_namespaced_lease(self.namespace, field_selector="metadata.name=bcd-ansible-lock").items
        return items[0].spec.holder_identity if items else None

    def namespace_exists(self) -> bool:
        return bool(self.core.list_namespace(field_selector=f"metadata.name={self.namespace}").items)

    def all_joined(self) -> bool:
        states = self.reporting()
        return all(states.get(n) in ("adopting", "ready", "draining") for n in self.gpu_nodes())

    def unready_pods(self) -> dict[str, str]:
        """GPU node -> the name of its bcd pod ("" when it has none), for each GPU node whose bcd
        pod is not Ready (a crash loop lifted with its fault still backs off until its restart)."""
        pods = self.core.list_namespaced_pod(self.namespace, label_selector="app.kubernetes.io/name=bcd").items
        ready, named = set(), {}
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                continue
            named[pod.spec.node_name] = pod.metadata.name
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                ready.add(pod.spec.node_name)
        return {n: named.get(n, "") for n in self.gpu_nodes() if n not in ready}

    def objects_text(self) -> str:
        """Every object a secret must never reach, as JSON: Namespaces, Nodes, and in every
        namespace Pods, ConfigMaps, DaemonSets, Leases, Secrets and Events (metadata,
        annotations, specs, data, messages)."""
        api = self.api
        parts = []

        def dump(items):
            for obj in items:
                parts.append(json.dumps(api.sanitize_for_serialization(obj)))

        dump(self.core.list_namespace().items)
        dump(self.core.list_node().items)
        dump(self.core.list_pod_for_all_namespaces().items)
        dump(self.core.list_config_map_for_all_namespaces().items)
        dump(self.core.list_secret_for_all_namespaces().items)
        dump(self.core.list_event_for_all_namespaces().items)
        dump(self.apps.list_daemon_set_for_all_namespaces().items)
        dump(self.coord.list_lease_for_all_namespaces().items)
        return "\n".join(parts)

    # -- arranging -------------------------------------------------------------------------

    def forget(self, nodes: list[str] | None = None) -> list[str]:
        """The control plane forgets ``nodes`` (default: every GPU node), so the next run has
        nodes to join and mints a token; their pods join again once a token Secret exists."""
        return self.admin.forget_nodes(nodes if nodes is not None else self.gpu_nodes())

    def wait(self, what: Callable[[], bool], timeout: float = 120, step: float = 1.0, why: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout}s: {why or what}")
            time.sleep(step)

    def state(self) -> dict:
        """What a run left behind: unrevoked tokens of this cluster, the Secret, the Lease."""
        return {"unrevoked": [t["id"] for t in self.unrevoked()], "secret": self.secret_exists(),
                "lease": self.lease_holder()}

    def clean(self) -> bool:
        s = self.state()
        return not s["unrevoked"] and not s["secret"] and s["lease"] is None


def apiserver_down(sandbox) -> None:
    """Stop the sandbox's kube-apiserver (the Kubernetes API is unreachable from now on)."""
    from sandbox import proc

    proc.stop(Path(sandbox.dir), "kube-apiserver")


def apiserver_up(sandbox) -> None:
    """Start the kube-apiserver again and wait until the sandbox is whole (``sandbox up``)."""
    from sandbox import cluster

    cluster.up(Path(sandbox.dir))


def controllers_afresh(sandbox) -> None:
    """Restart the controller manager and the scheduler, and wait until they are healthy.

    After the API server restarts, their informers can lag it for a minute (from Kubernetes 1.36 the
    DaemonSet controller then refuses to sync: "read version ... is not as new as written
    version"), as a real cluster's do; a scenario that follows must not start inside that lag."""
    from sandbox import cluster, proc

    for name in ("kube-controller-manager", "kube-scheduler"):
        proc.stop(Path(sandbox.dir), name)
    cluster.up(Path(sandbox.dir))


def failure_lines(run: Run) -> list[str]:
    """The lines of the output that carry a failure (``fatal:``/``FAILED!`` and what follows)."""
    out, keep = [], 0
    for _, line in run.lines:
        if "fatal:" in line or "FAILED!" in line or line.startswith("[ERROR]"):
            keep = 12
        if keep:
            out.append(line.rstrip())
            keep -= 1
    return out


def daemonset_image(w: World) -> str | None:
    items = w.apps.list_namespaced_daemon_set(w.namespace, field_selector="metadata.name=bcd").items
    return items[0].spec.template.spec.containers[0].image if items else None


def baseline_ok(w: World, image: bool = True) -> tuple[bool, str]:
    """Whether the cluster is adopted with nothing left over (and, with ``image``, the DaemonSet
    runs the inventory's image); else why not."""
    if not w.namespace_exists():
        return False, "not adopted yet"
    if image and daemonset_image(w) != INVENTORY_IMAGE:
        return False, f"DaemonSet image {daemonset_image(w)}"
    if not w.all_joined():
        return False, "not every GPU node reports"
    unready = w.unready_pods()
    if unready:
        return False, f"no Ready bcd pod on {', '.join(sorted(unready))}"
    state = w.state()
    if not w.clean():
        return False, f"left over: {state}"
    return True, ""


def json_results(run: Run) -> dict[str, list[tuple[str, dict]]]:
    """Per host, (task name, result) of every task, from a run under the ansible.posix.json
    callback without -v (its stdout is then one JSON document)."""
    text = run.output
    doc = json.loads(text[text.index("{"):])
    out: dict[str, list[tuple[str, dict]]] = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                out.setdefault(host, []).append((task["task"]["name"], result))
    return out


def first_failure(results: list[tuple[str, dict]]) -> tuple[str, str] | None:
    """(task name, msg) of the first failed task (a failure a rescue handled counts too)."""
    for name, result in results:
        if result.get("failed"):
            return name, str(result.get("msg", ""))
    return None


class Listener:
    """A TCP listener on 127.0.0.1 that counts connections and closes them (nothing may call it)."""

    def __init__(self):
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._accepted(conn)

    def _accepted(self, conn) -> None:
        conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


class Proxy(Listener):
    """A TCP proxy on 127.0.0.1 to ``upstream`` (host, port). With ``certfile`` it terminates
    TLS with that certificate (and key) and talks TLS upstream, verified with ``upstream_ca``.
    Counts connections, completed and failed TLS handshakes, and the bytes sent upstream."""

    def __init__(self, upstream: tuple[str, int], certfile: str | None = None, upstream_ca: str | None = None):
        import ssl

        self.upstream = upstream
        self.handshakes = 0
        self.handshake_failures: list[str] = []
        self.bytes_up = 0
        self.server_ctx = None
        if certfile:
            self.server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.server_ctx.load_cert_chain(certfile)
            self.client_ctx = ssl.create_default_context(cafile=upstream_ca)
        super().__init__()

    def _accepted(self, conn) -> None:
        threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn) -> None:
        import socket
        import ssl

        try:
            if self.server_ctx is not None:
                try:
                    conn = self.server_ctx.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    self.handshake_failures.append(type(exc).__name__)
                    conn.close()
                    return
                self.handshakes += 1
                up = self.client_ctx.wrap_socket(socket.create_connection(self.upstream), server_hostname=self.upstream[0])
            else:
                up = socket.create_connection(self.upstream)
        except OSError:
            conn.close()
            return

        def pump(src, dst, count: bool) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if count:
                        self.bytes_up += len(data)
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        a = threading.Thread(target=pump, args=(conn, up, True), daemon=True)
        b = threading.Thread(target=pump, args=(up, conn, False), daemon=True)
        a.start()
        b.start()
        a.join()
        b.join()
        conn.close()
        up.close()
