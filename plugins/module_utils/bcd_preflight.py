"""The read-only checks a run makes before anything changes, shared by the modules that make
them one at a time (bcd_control_plane, bcd_nodes, bcd_pod_security) and by bcd_preflight, which
makes them all in one module run with its independent requests in parallel.

Each check is split in two: the requests (plain callables, run by :func:`gather`, each in its
own thread with its own client) and the judgement (a pure function of what the requests
answered, which raises :class:`Refusal` with the same wording whichever module made it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import (
    NODE_STATES_REPORTING,
    ControlPlaneError,
    trust_forecast,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_pins import (
    PinError,
    Unreachable,
    check_serving_ca,
    load_jwk,
    pin_of_jwk,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_quantity import QuantityError, value

ENFORCE = "pod-security.kubernetes.io/enforce"


class Refusal(Exception):
    """A check refused: ``msg`` for fail_json, ``extra`` the other keys the failure returns."""

    def __init__(self, msg: str, **extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


class Outcomes:
    """What each request of :func:`gather` answered: ``take(name)`` returns the answer or raises
    the exception the request raised, so the judgement reads as sequential code and fails in the
    same order, with the same message, as the requests made one after the other."""

    def __init__(self, done: dict[str, tuple[bool, object]]):
        self._done = done

    def __contains__(self, name: str) -> bool:
        return name in self._done

    def take(self, name: str):
        ok, answer = self._done[name]
        if not ok:
            raise answer
        return answer


def gather(calls: dict, workers: int = 8) -> Outcomes:
    """Run each callable of ``calls`` (name -> callable without arguments) in a thread pool and
    return their :class:`Outcomes`. The callables must not share a client: the kubernetes
    client's ApiClient and our control-plane client each count their requests unlocked, so
    each request gets its own. Exceptions are kept, not raised (see :meth:`Outcomes.take`)."""
    def one(fn):
        try:
            return True, fn()
        except Exception as exc:  # noqa: BLE001 - kept and raised again by Outcomes.take
            return False, exc

    if len(calls) <= 1:
        return Outcomes({name: one(fn) for name, fn in calls.items()})
    with ThreadPoolExecutor(max_workers=min(workers, len(calls))) as pool:
        futures = {name: pool.submit(one, fn) for name, fn in calls.items()}
        return Outcomes({name: f.result() for name, f in futures.items()})


# -- the control plane: discovery, pins, pool -------------------------------------------------

def control_plane_calls(clients, inv, gateway_timeout: float, nodes: bool) -> dict:
    """The requests of :func:`judge_control_plane`. ``clients``: a callable returning a new
    control-plane client; ``nodes``: also list the pool's nodes (``cp_nodes``)."""
    calls = {
        "discovery": lambda: clients().discovery(),
        "serving_ca": lambda: check_serving_ca(inv.bcd_gateway_url, inv.bcd_gateway_server_name,
                                               inv.bcd_pins.serving_ca, timeout=gateway_timeout),
        "pool": lambda: clients().get_pool(inv.bcd_tenant, inv.bcd_pool),
    }
    if nodes:
        calls["cp_nodes"] = lambda: list(clients().list_nodes(inv.bcd_tenant, inv.bcd_pool))
    return calls


def judge_control_plane(out: Outcomes, inv, wanted: set[str] | None = None) -> dict:
    """Refuse a join key that has a private part or is not the pinned one, a gateway URL or site
    that is not the inventory's, a join signing key or gateway CA that contradicts its pin
    (the bcd DaemonSet specification, section Render the manifests and the join token); forecast the trust the pool's nodes
    land with (the bcd DaemonSet specification, section Trust). Returns what module bcd_control_plane returns (without
    ``cp_requests``); ``warnings_text`` are to be issued as Ansible warnings. ``wanted``: the
    Node names whose bcd nodes to return in ``known`` and ``reporting`` (from ``cp_nodes``).
    Raises :class:`Refusal`."""
    try:
        disc = out.take("discovery")
    except ControlPlaneError as exc:
        raise Refusal(f"preflight: {exc}") from None
    gateway = disc.get("gateway") or {}
    problems = []
    try:
        jwk = load_jwk(disc.get("joinKey"))
        pin = pin_of_jwk(jwk)
    except PinError as exc:
        raise Refusal(f"preflight: the control plane's join key {exc}; refusing it before any token is minted") from None
    if pin != inv.bcd_pins.join_encryption:
        problems.append(f"bcd_pins.join_encryption: the control plane's join key has pin {pin}, not the pinned "
                        f"{inv.bcd_pins.join_encryption}; refusing it before any token is minted")
    if gateway.get("url") and gateway["url"].rstrip("/") != inv.bcd_gateway_url.rstrip("/"):
        problems.append(f"bcd_gateway_url: the control plane's gateway is {gateway['url']}, not {inv.bcd_gateway_url}")
    if disc.get("site") and disc["site"] != inv.bcd_site_id:
        problems.append(f"bcd_site_id: the control plane's site is {disc['site']}, not {inv.bcd_site_id}")
    checked, unchecked = ["join_encryption"], []
    signing = disc.get("joinSigningKey")
    if signing is None:
        unchecked.append("bcd_pins.join_signing could not be checked: the control plane's discovery document "
                         "publishes no joinSigningKey")
    else:
        try:
            signing_pin = pin_of_jwk(signing)
        except PinError as exc:
            raise Refusal(f"preflight: the control plane's join signing key {exc}; refusing it before any "
                          "token is minted") from None
        if signing_pin != inv.bcd_pins.join_signing:
            problems.append(f"bcd_pins.join_signing: the control plane's join signing key has pin {signing_pin}, not "
                            f"the pinned {inv.bcd_pins.join_signing}; refusing it before any token is minted")
        checked.append("join_signing")
    try:
        out.take("serving_ca")
        checked.append("serving_ca")
    except PinError as exc:
        problems.append(f"bcd_pins.serving_ca: {inv.bcd_pins.serving_ca}: {exc}; refusing it before any token is minted")
    except Unreachable as exc:
        unchecked.append(f"bcd_pins.serving_ca could not be checked: the gateway {inv.bcd_gateway_url} is not reachable "
                         f"from here ({exc}); nodes may reach networks this controller cannot, so going on")
    if problems:
        raise Refusal("\n".join(problems), errors=problems)
    try:
        pool = out.take("pool")
        known = {}
        if wanted:
            for node in out.take("cp_nodes"):
                name = node.get("hostname")
                if name in wanted:
                    known[name] = {k: node.get(k) for k in ("id", "state", "trust", "joinedAt", "conditions")}
    except ControlPlaneError as exc:
        raise Refusal(f"preflight: {exc}") from None
    trust = trust_forecast(pool)
    warnings = []
    if trust == "tenant-controlled":
        warnings.append(
            f"pool {inv.bcd_pool}: nodes joined with a hosted token will land tenant-controlled and add no capacity "
            "(placement excludes them; the bcd DaemonSet specification, section Trust). "
            "Set the pool's policy.kubernetes.platformOperated to true only if "
            "the platform itself operates this cluster."
        )
    return {
        "discovery": {"gateway_url": gateway.get("url"), "gateway_name": gateway.get("name"), "site": disc.get("site"),
                      "join_key_pin": pin},
        "pool": pool,
        "trust": trust,
        "warnings_text": warnings + unchecked,
        "pins_checked": checked,
        "known": known,
        "reporting": {n: v for n, v in known.items() if v.get("state") in NODE_STATES_REPORTING},
    }


# -- the selected Nodes and which of them report ------------------------------------------------

def short_of_requests(inv, nodes: dict[str, dict]) -> list[str]:
    """One line per selected Node whose allocatable CPU or memory is below bcd's requests
    (``bcd_resources.requests``): the scheduler cannot place bcd's pod there."""
    out = []
    for name in sorted(nodes):
        allocatable = (nodes[name].get("status") or {}).get("allocatable") or {}
        short = []
        for res in ("cpu", "memory"):
            want, have = inv.bcd_resources.requests.get(res), allocatable.get(res)
            if want is None or have is None:
                continue
            try:
                if value(str(have)) < value(want):
                    short.append(f"allocatable {res} {have} < request {want}")
            except QuantityError:
                continue
        if short:
            out.append(f"Node {name}: {', '.join(short)}: bcd's pod cannot be scheduled there (lower bcd_resources.requests, "
                       "or free the Node's resources)")
    return out


def by_hostname(cp_nodes, wanted) -> dict[str, dict]:
    """Hostname -> the pool's node (nodes.list) for each hostname in ``wanted``. A node that left
    the pool (``removed``) counts only when no other node has that hostname: a host that joined
    again after nodes.remove is a new node, and that one is the host's."""
    out: dict[str, dict] = {}
    for node in cp_nodes:
        name = node.get("hostname")
        if name in wanted and (name not in out or out[name].get("state") == "removed"):
            out[name] = node
    return out


def to_join(rows: list[dict]) -> list[str]:
    """The names of the rows (:func:`node_rows`) whose Node has no bcd node in the pool, or only
    one that left it (``removed``): the Nodes a join token is for. A Node that joined (any other
    state, ``offline`` too) keeps its identity on the host and joins again without a token."""
    return [r["name"] for r in rows if r.get("state") in (None, "removed")]


def node_rows(k8s_nodes: dict[str, dict], known: dict[str, dict]) -> list[dict]:
    """One row per selected Node (``k8s_nodes``: name -> slim Node), sorted by name, with its bcd
    node from ``known`` (hostname -> the pool's node, nodes.list): name, id (else the Node's
    label C(bcd.dev/node-id)), state, trust, reporting, conditions."""
    out = []
    for name in sorted(k8s_nodes):
        n = known.get(name) or {}
        labels = (k8s_nodes[name].get("metadata") or {}).get("labels") or {}
        out.append({
            "name": name,
            "id": n.get("id") or labels.get("bcd.dev/node-id"),
            "state": n.get("state"),
            "trust": n.get("trust"),
            "reporting": n.get("state") in NODE_STATES_REPORTING,
            "conditions": n.get("conditions") or [],
        })
    return out


# -- Pod Security ----------------------------------------------------------------------------

def slim_namespace(ns: dict) -> dict:
    meta = ns.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels")}}


def list_namespaces(kube) -> list[dict]:
    """Every namespace, name and labels only. Raises KubeError."""
    return kube.list(path("namespaces"), keep=slim_namespace)


def open_namespaces(namespaces: list[dict], allowed: set[str]) -> list[str]:
    """Names of the namespaces not in ``allowed`` that do not enforce baseline or restricted."""
    out = []
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        name = meta.get("name")
        if name in allowed:
            continue
        if (meta.get("labels") or {}).get(ENFORCE, "privileged") == "privileged":
            out.append(name)
    return sorted(out)


def judge_pod_security(namespaces: list[dict], inv) -> dict:
    """Which namespaces let pods mount host paths (the bcd DaemonSet specification, section Host paths and Pod Security):
    ``{open_namespaces, namespaces, warning}`` (``warning``: the Ansible warning to issue, or
    None). With ``bcd_require_pod_security`` and an open namespace, raises :class:`Refusal`
    (with ``open_namespaces`` and ``namespaces``)."""
    found = open_namespaces(namespaces, {inv.bcd_namespace, *inv.bcd_privileged_namespaces})
    names = sorted((ns.get("metadata") or {}).get("name") for ns in namespaces)
    if found and inv.bcd_require_pod_security:
        raise Refusal(
            f"bcd_require_pod_security: namespaces {', '.join(found)} let pods mount host paths (no {ENFORCE} "
            "label or enforce=privileged); label them baseline or restricted, or list them in "
            "bcd_privileged_namespaces. Nothing was changed and no token minted.",
            open_namespaces=found, namespaces=names)
    warning = None
    if found:
        warning = (
            f"Pod Security lets pods in {', '.join(found)} run privileged or mount host paths (no {ENFORCE} label, "
            "or enforce=privileged; a cluster-wide default set in the API server's admission configuration is not "
            "visible here). Any such pod can read /var/lib/bcd and act as the node: label workload namespaces "
            "baseline or restricted (the bcd DaemonSet specification, section Host paths and Pod Security).")
    return {"open_namespaces": found, "namespaces": names, "warning": warning}
