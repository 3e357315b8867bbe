"""The bcd-ansible lock of a cluster: a coordination.k8s.io Lease whose holder identity names
the user, host, ansible-playbook process and run that holds it (one run at a time).

Used by module bcd_lock (take, wait for, release) and by module bcd_rollout, which takes the
lock and reads the fleet in one module run. Functions return the module result (a dict with
``failed`` and ``msg`` on failure) rather than exit, so either module can go on after them.
"""

from __future__ import annotations

import datetime as dt
import getpass
import os
import re
import socket
import time

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError, path, resource_version

HOLDER_RE = re.compile(r"^(?P<user>[^@\s]*)@(?P<host>\S+) pid=(?P<pid>\d+) run=(?P<run>\S+)$")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(t: dt.datetime | None) -> str:
    """One format for every time a message shows: 2026-01-31T12:00:00Z (UTC, whole seconds)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else "?"


def _parse(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _playbook_pid() -> int:
    """The pid of the ansible-playbook process this module runs under (the topmost ancestor
    whose command line runs ansible-playbook), else our parent's."""
    pid, found = os.getppid(), None
    for _step in range(16):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            break
        if any(b"ansible-playbook" in part for part in cmdline[:2]):
            found = pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            break
    return found or os.getppid()


def _alive_here(holder: str) -> bool | None:
    """True/False when the holder was a process on this host (alive or not); None when unknown."""
    m = HOLDER_RE.match(holder or "")
    if not m or m["host"] != socket.gethostname():
        return None
    try:
        cmdline = open(f"/proc/{m['pid']}/cmdline", "rb").read()
    except OSError:
        return False
    return b"ansible-playbook" in cmdline


def lock_name(bcd_name: str) -> str:
    """The name of a cluster's lock Lease: ``<bcd_name>-ansible-lock`` (in ``bcd_namespace``)."""
    return f"{bcd_name}-ansible-lock"


def _standing(spec: dict, holder: str) -> tuple[dt.datetime | None, bool, bool]:
    """(expiry, expired, holder's process on this host gone) of a Lease's ``spec``: the two
    reasons a lock is taken over at once."""
    renew = _parse(spec.get("renewTime") or spec.get("acquireTime"))
    expires = renew + dt.timedelta(seconds=spec.get("leaseDurationSeconds") or 0) if renew else None
    return expires, expires is None or expires < _now(), _alive_here(holder) is False


def holder_identity(run: str) -> str:
    """``user@host pid=<ansible-playbook's pid> run=<run>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid={_playbook_pid()} run={run}"


def left_lock(kube, namespace: str, name: str) -> dict | None:
    """The lock Lease ``namespace/name`` when an earlier run left it behind, read only: expired,
    or held by a process on this host that no longer runs (the two :func:`acquire` takes over at
    once). Returns ``{lease, holder, until, why}`` (``until``: its expiry, UTC), or None when
    there is no Lease or its holder may still be working. Raises ``KubeError`` when it cannot be
    read."""
    lease = kube.get(path("leases", name, namespace))
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder:
        return None
    expires, expired, dead = _standing(spec, holder)
    if expired:
        why = "expired"
    elif dead:
        why = "its process on this host is gone"
    else:
        return None
    return {"lease": f"Lease {namespace}/{name}", "holder": holder, "until": _utc(expires), "why": why}


class _Done(Exception):
    def __init__(self, result: dict):
        super().__init__(result.get("msg", ""))
        self.result = result


def acquire(kube, namespace: str, name: str, ttl: int, me: str, wait: float = 0, poll_for: float | None = None,
            elapsed: float = 0, check_mode: bool = False, warn=None) -> dict:
    """Take the lock Lease ``namespace/name`` for holder ``me`` (``ttl`` seconds): create it,
    renew our own, or take over one that expired or whose process on this host is gone (said
    through ``warn``). Another live holder is waited for up to ``wait`` seconds (``elapsed``:
    already waited in earlier module runs; ``poll_for``: return ``waiting`` after that many
    seconds of this run), then refused: ``failed``, ``msg`` ("locked by <holder> (since, until);
    ..."), ``holder``. Returns the module result (``changed`` false, ``holder``, ``took_over``,
    ``waited``). Check mode takes nothing."""
    where = f"Lease {namespace}/{name}"
    lease_path = path("leases", name, namespace)

    def fail(msg: str, **extra):
        raise _Done({"failed": True, "msg": msg, **extra})

    def read():
        try:
            return kube.get(lease_path)
        except KubeError as exc:
            fail(f"reading {where}: {exc}")

    def body(resource_version=None, transitions=0):
        now = _micro(_now())
        meta = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": me, "leaseDurationSeconds": ttl, "acquireTime": now, "renewTime": now,
                         "leaseTransitions": transitions}}

    run_started = time.monotonic()
    started = run_started - max(0.0, elapsed)  # the wait began in an earlier run of the action plugin
    # Most runs find no Lease: create it first, unread (one request); 409, it exists: read it.
    # Check mode writes nothing, so it reads.
    unread = not check_mode
    try:
        while True:
            lease = None if unread else read()
            unread = False
            if lease is None:
                if check_mode:
                    return {"changed": False, "holder": None, "took_over": None, "waited": 0.0}
                try:
                    made = kube.create(path("leases", namespace=namespace), body())
                    return {"changed": False, "holder": me, "took_over": None, "waited": round(time.monotonic() - started, 1),
                            "lease": where, "until": _utc(_now() + dt.timedelta(seconds=ttl)), "version": resource_version(made)}
                except KubeError as exc:
                    if exc.status == 404:
                        fail(f"taking {where}: namespace {namespace} does not exist")
                    if exc.status != 409:
                        fail(f"taking {where}: {exc}")
                    continue
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            expires, expired, dead = _standing(spec, holder)
            if holder == me or not holder or expired or dead:
                if check_mode:
                    return {"changed": False, "holder": holder, "took_over": None if holder in (me, "") else holder, "waited": 0.0}
                try:
                    made = kube.replace(lease_path, body(lease["metadata"]["resourceVersion"],
                                                         (spec.get("leaseTransitions") or 0) + (holder != me)))
                except KubeError as exc:
                    if exc.status == 409:
                        continue  # someone else took it first: look again
                    fail(f"taking {where}: {exc}")
                took = None if holder in (me, "") else holder
                if took and warn:
                    warn(f"took over {where} from {took} ({'its process is gone' if dead else 'it expired'})")
                # lease and until: what a run interrupted from now on leaves (the left_behind callback)
                return {"changed": False, "holder": me, "took_over": took, "waited": round(time.monotonic() - started, 1),
                        "lease": where, "until": _utc(_now() + dt.timedelta(seconds=ttl)), "version": resource_version(made)}
            since = _parse(spec.get("acquireTime"))
            if time.monotonic() - started >= wait:
                fail(f"locked by {holder} (since {_utc(since)}, until {_utc(expires)}); "
                     f"another bcd-ansible run works on this cluster ({where}). Try again when it ends.", holder=holder)
            left_in_run = None if poll_for is None else poll_for - (time.monotonic() - run_started)
            if left_in_run is not None and left_in_run <= 0:
                return {"changed": False, "waiting": True, "holder": holder, "lease": where, "since": _utc(since),
                        "until": _utc(expires), "took_over": None, "waited": round(time.monotonic() - started, 1)}
            pause = min(5.0, max(0.5, wait - (time.monotonic() - started)))
            time.sleep(pause if left_in_run is None else max(0.1, min(pause, left_in_run)))
    except _Done as done:
        return done.result


def release(kube, namespace: str, name: str, me: str, check_mode: bool = False, version: str | None = None) -> dict:
    """Release the lock Lease when ``me`` holds it (a delete guarded by its resourceVersion);
    another holder's lock is left alone. Returns the module result.

    ``version``: the resourceVersion of the Lease as this run last wrote it (holder ``me``): the
    delete is guarded by it without a read first (one request); a Lease written since (409) is
    read and released as without it, a Lease gone (404) is released already."""
    where = f"Lease {namespace}/{name}"
    lease_path = path("leases", name, namespace)
    if version and not check_mode:
        try:
            kube.delete(lease_path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": version}})
            return {"changed": False, "holder": None}
        except KubeError as exc:
            if exc.status == 404:
                return {"changed": False, "holder": None}
            if exc.status != 409:
                return {"failed": True, "msg": f"releasing {where}: {exc}"}
    try:
        lease = kube.get(lease_path)
    except KubeError as exc:
        return {"failed": True, "msg": f"reading {where}: {exc}"}
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    if lease is None or holder != me or check_mode:
        return {"changed": False, "holder": holder}
    try:
        kube.delete(lease_path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                 "preconditions": {"resourceVersion": lease["metadata"]["resourceVersion"]}})
    except KubeError as exc:
        if exc.status != 409:
            return {"failed": True, "msg": f"releasing {where}: {exc}"}
    return {"changed": False, "holder": None}
