#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_lock: a Lease that keeps two bcd-ansible runs on one cluster apart."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_lock
short_description: Take or release the bcd-ansible lock of a cluster (a coordination.k8s.io Lease)
version_added: 1.0.0
description:
  - One C(coordination.k8s.io/v1) Lease in the bcd namespace (C(<bcd_name>-ansible-lock)) says
    which bcd-ansible run works on the cluster, with its holder (user, host, process and run)
    and expiry (C(renewTime) + C(leaseDurationSeconds)).
  - C(state=present) takes the lock. A lock held by another live run is waited for up to
    O(wait) seconds, then refused naming who holds it and until when. A lock whose expiry has
    passed, or whose holder was a process on this host that no longer runs, is taken over
    safely (an update with the Lease's resourceVersion, so of two runs taking over at once
    exactly one wins).
  - C(state=absent) releases the lock if this run holds it, and only then.
  - The Lease is bookkeeping that lives only while a run works; taking and releasing it is not
    reported as a change.
options:
  config:
    description:
      - The C(bcd_*) variables (C(lookup('bcd.kubernetes.bcd_inventory'))), usually from the action
        group's C(module_defaults). When given, O(namespace), O(name), O(ttl), O(kubeconfig) and
        O(context) default to C(bcd_namespace), C(<bcd_name>-ansible-lock), C(bcd_lock_ttl),
        C(bcd_kubeconfig) and C(bcd_kube_context).
    type: dict
  api_key:
    description: Accepted so that C(module_defaults) of the action group apply; not used.
    type: str
  kubeconfig:
    description: Kubeconfig of the cluster.
    type: path
  context:
    description: Kubeconfig context.
    type: str
  namespace:
    description: The bcd namespace (C(bcd_namespace)); required without O(config).
    type: str
  name:
    description: The Lease's name; required without O(config).
    type: str
  run:
    description: This run's id; with the user, host and process it makes the holder identity.
    type: str
    required: true
  state:
    description: C(present) takes the lock, C(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  ttl:
    description: Seconds the lock lasts without renewal (C(bcd_lock_ttl); 1800 without O(config)).
    type: int
  wait:
    description:
      - Seconds to wait for a lock another live run holds; 0 refuses at once.
      - The action plugin runs the module in slices of at most 25 s and prints, between them, who
        holds the lock, until when, the time waited and the limit (O(wait_set_by) names the
        variable that sets it).
    type: int
    default: 0
  wait_set_by:
    description: The variable that sets O(wait), named in the progress lines of the wait.
    type: str
    default: the wait option
  poll_for:
    description:
      - Internal to the action plugin. Seconds this run waits for the lock before it returns with
        RV(waiting) true; unset, it waits until it has the lock or O(wait) has passed.
    type: float
  elapsed:
    description: Internal to the action plugin. Seconds waited by earlier runs of the same wait.
    type: float
    default: 0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: In check mode the Lease is read, never written; a held lock is still reported.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the cluster's lock
  bcd.kubernetes.bcd_lock:
    namespace: bcd-system
    name: bcd-ansible-lock
    run: "{{ run_id }}"
"""

RETURN = r"""
holder:
  description: The holder identity now (ours after taking it).
  returned: always
  type: str
took_over:
  description: The previous holder whose expired or dead lock was taken over, or null.
  returned: state=present
  type: str
waited:
  description: Seconds spent waiting for another run.
  returned: state=present
  type: float
waiting:
  description: True when this run returned after O(poll_for) seconds with the lock still held by another run.
  returned: state=present
  type: bool
lease:
  description: C(Lease <namespace>/<name>).
  returned: when RV(waiting) is true
  type: str
since:
  description: When the other run took the lock (UTC, C(2026-01-31T12:00:00Z)).
  returned: when RV(waiting) is true
  type: str
until:
  description: When the other run's lock expires unless renewed (UTC, C(2026-01-31T12:00:00Z)).
  returned: when RV(waiting) is true
  type: str
"""

import datetime as dt
import getpass
import os
import re
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError, api_client, path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module import inventory

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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict"},
            "api_key": {"type": "str", "no_log": True},
            "kubeconfig": {"type": "path"},
            "context": {"type": "str"},
            "namespace": {"type": "str"},
            "name": {"type": "str"},
            "run": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "ttl": {"type": "int"},
            "wait": {"type": "int", "default": 0},
            "wait_set_by": {"type": "str", "default": "the wait option"},
            "poll_for": {"type": "float"},
            "elapsed": {"type": "float", "default": 0},
        },
        required_one_of=[("config", "namespace"), ("config", "name")],
        supports_check_mode=True,
    )
    p = module.params
    if p["config"] is not None:
        inv = inventory(module)
        p["namespace"] = p["namespace"] or inv.bcd_namespace
        p["name"] = p["name"] or f"{inv.bcd_name}-ansible-lock"
        p["ttl"] = p["ttl"] or int(inv.bcd_lock_ttl)
        p["kubeconfig"] = p["kubeconfig"] or inv.bcd_kubeconfig
        p["context"] = p["context"] or inv.bcd_kube_context
    p["ttl"] = p["ttl"] or 1800
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    me = f"{user}@{socket.gethostname()} pid={_playbook_pid()} run={p['run']}"
    try:
        kube = Kube(api_client(p["kubeconfig"], p["context"]))
    except KubeError as exc:
        module.fail_json(msg=str(exc))
    where = f"Lease {p['namespace']}/{p['name']}"
    lease_path = path("leases", p["name"], p["namespace"])

    def read():
        try:
            return kube.get(lease_path)
        except KubeError as exc:
            module.fail_json(msg=f"reading {where}: {exc}")

    def body(resource_version=None, transitions=0):
        now = _micro(_now())
        meta = {"name": p["name"], "namespace": p["namespace"], "labels": {"app.kubernetes.io/managed-by": "bcd-ansible"}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": me, "leaseDurationSeconds": p["ttl"], "acquireTime": now, "renewTime": now,
                         "leaseTransitions": transitions}}

    if p["state"] == "absent":
        lease = read()
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if lease is None or holder != me or module.check_mode:
            module.exit_json(changed=False, holder=holder)
        try:
            kube.delete(lease_path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                     "preconditions": {"resourceVersion": lease["metadata"]["resourceVersion"]}})
        except KubeError as exc:
            if exc.status != 409:
                module.fail_json(msg=f"releasing {where}: {exc}")
        module.exit_json(changed=False, holder=None)

    run_started = time.monotonic()
    started = run_started - max(0.0, p["elapsed"])  # the wait began in an earlier run of the action plugin
    while True:
        lease = read()
        if lease is None:
            if module.check_mode:
                module.exit_json(changed=False, holder=None, took_over=None, waited=0.0)
            try:
                kube.create(path("leases", namespace=p["namespace"]), body())
                module.exit_json(changed=False, holder=me, took_over=None, waited=round(time.monotonic() - started, 1))
            except KubeError as exc:
                if exc.status == 404:
                    module.fail_json(msg=f"taking {where}: namespace {p['namespace']} does not exist")
                if exc.status != 409:
                    module.fail_json(msg=f"taking {where}: {exc}")
                continue
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renew = _parse(spec.get("renewTime") or spec.get("acquireTime"))
        expires = renew + dt.timedelta(seconds=spec.get("leaseDurationSeconds") or 0) if renew else None
        expired = expires is None or expires < _now()
        dead = _alive_here(holder) is False
        if holder == me or not holder or expired or dead:
            if module.check_mode:
                module.exit_json(changed=False, holder=holder, took_over=None if holder in (me, "") else holder, waited=0.0)
            try:
                kube.replace(lease_path, body(lease["metadata"]["resourceVersion"], (spec.get("leaseTransitions") or 0) + (holder != me)))
            except KubeError as exc:
                if exc.status == 409:
                    continue  # someone else took it first: look again
                module.fail_json(msg=f"taking {where}: {exc}")
            took = None if holder in (me, "") else holder
            if took:
                module.warn(f"took over {where} from {took} ({'its process is gone' if dead else 'it expired'})")
            module.exit_json(changed=False, holder=me, took_over=took, waited=round(time.monotonic() - started, 1))
        since = _parse(spec.get("acquireTime"))
        if time.monotonic() - started >= p["wait"]:
            module.fail_json(msg=f"locked by {holder} (since {_utc(since)}, until {_utc(expires)}); "
                                 f"another bcd-ansible run works on this cluster ({where}). Try again when it ends.",
                             holder=holder)
        left_in_run = None if p["poll_for"] is None else p["poll_for"] - (time.monotonic() - run_started)
        if left_in_run is not None and left_in_run <= 0:
            module.exit_json(changed=False, waiting=True, holder=holder, lease=where, since=_utc(since), until=_utc(expires),
                             took_over=None, waited=round(time.monotonic() - started, 1))
        pause = min(5.0, max(0.5, p["wait"] - (time.monotonic() - started)))
        time.sleep(pause if left_in_run is None else max(0.1, min(pause, left_in_run)))


if __name__ == "__main__":
    main()
