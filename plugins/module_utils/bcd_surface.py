"""The pod surface: bcd's live objects against the render, whoever owns the extra fields.

A privileged, host-network pod is only as safe as its whole template: a hostPath volume another
field manager adds (``kubectl patch``, a GitOps controller, a webhook's owner) is as dangerous as
one the render adds. So the question here is not "did a field bcd-ansible owns change" but "is
what runs exactly the render".

- The DaemonSet's pod template (``spec.template``, all of it: volumes, every container and init
  container, host namespaces, the service account token, scheduling, security contexts, labels
  and annotations) is compared with the render *as the API server defaults it*: the answer to a
  server-side dry-run update (``PUT ?dryRun=All``) of the live DaemonSet with the rendered one,
  which runs defaulting and mutating admission as our apply would and changes nothing. Only real
  differences remain. ``kubectl rollout restart``'s ``kubectl.kubernetes.io/restartedAt``
  template annotation is never one.
- The ConfigMap's keys (``data``, ``binaryData``): an extra, missing or changed key.
- The Namespace's Pod Security labels (``pod-security.kubernetes.io/*``).
- Labels and annotations on the DaemonSet's own metadata that the render does not set are
  warnings: they do not reach the pods.

Each finding names a readable field path (list items by their merge key: containers, volumes
and env by name, volumeMounts by mountPath, ports by containerPort/protocol), the live and the
rendered value, and the field managers that own it (``metadata.managedFields``). Extra host paths
are flagged and sorted first. The operator may allow more paths (``bcd_drift_allowed_paths``).

To restore the render, :func:`take_over` moves the drifting fields (and only those) from the other
managers' field sets into bcd-ansible's Apply entry, as ``kubectl apply --server-side`` migrates a
client-side apply; the server-side apply that follows then removes what the render lacks and sets
what it has. :func:`node_loss` says which Nodes that run a bcd pod now a new template would no
longer select or tolerate.

Field sets: https://kubernetes.io/docs/reference/using-api/server-side-apply/ ; list merge keys:
the ``+listMapKey`` markers of k8s.io/api/core/v1/types.go.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import path as api_path
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_rollout import merge_fields

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
RESTARTED_AT_PATH = f'spec.template.metadata.annotations["{RESTARTED_AT}"]'
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
# Set on the DaemonSet by the API server itself on every write.
SERVER_ANNOTATIONS = ("deprecated.daemonset.template.generation",)
SCHEDULING_FIELDS = ("nodeSelector", "affinity", "tolerations")

# Lists whose items are matched by these fields (their server-side apply keys); any other list
# is compared whole.
LIST_KEYS = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",), "volumes": ("name",),
    "env": ("name",), "imagePullSecrets": ("name",), "resourceClaims": ("name",), "schedulingGates": ("name",),
    "claims": ("name",), "volumeMounts": ("mountPath",), "volumeDevices": ("devicePath",),
    "ports": ("containerPort", "protocol"), "hostAliases": ("ip",), "resizePolicy": ("resourceName",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
# Maps whose keys are data, not field names: a key is written ["key"].
MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector", "data", "binaryData", "limits", "requests",
                        "matchLabels", "overhead"})
# An allowed path may not be one of these (it would switch the check off).
TOO_BROAD = frozenset({"spec", "spec.template", "spec.template.spec", "spec.template.metadata", "data", "binaryData",
                       "metadata", "metadata.labels", "metadata.annotations"})
ALLOWED_ROOTS = ("spec.template.", "data[", "binaryData[", "metadata.labels[", "metadata.annotations[")

# The tolerations the DaemonSet controller adds to every daemon pod (pkg/controller/daemon/util).
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
HOST_NETWORK_TOLERATION = {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}


class SurfaceError(Exception):
    """The API server would not answer what the render becomes (its refusal, as a sentence)."""


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING = _Missing()


# --- paths ------------------------------------------------------------------------------------

def _bracket(text: str) -> str:
    return f"[{text}]" if re.fullmatch(r'[^\[\]"]+', text) else f"[{json.dumps(text)}]"


def path_text(steps: tuple) -> str:
    """``spec.template.spec.volumes[host-root].hostPath.path``: a step is ``("f", name)`` (a
    field; a key of a map field, written ``["key"]``) or ``("k", {merge keys}, text)`` (a list item)."""
    out, parent = "", None
    for step in steps:
        if step[0] == "k":
            out += _bracket(step[2])
        elif parent in MAP_FIELDS:
            out += f"[{json.dumps(step[1])}]"
        else:
            out += ("." if out else "") + step[1]
        parent = step[1] if step[0] == "f" else None
    return out


_TOKEN = re.compile(r'\.?([A-Za-z_$][A-Za-z0-9_$-]*)|\[("(?:[^"\\]|\\.)*"|[^\[\]"]+)\]')


def canonical_path(text: str) -> str:
    """``text`` in the form :func:`path_text` writes (a map key quoted, a list item bare); raises
    ValueError when it is not a field path."""
    if not isinstance(text, str) or not text or text != text.strip():
        raise ValueError("must be a field path such as spec.template.spec.volumes[name]")
    pos, out, parent = 0, "", None
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or (pos == 0 and text.startswith((".", "["))) or (pos > 0 and m.group(1) and text[pos] != "."):
            raise ValueError(f"{text!r} is not a field path (at {text[pos:]!r}): write fields with dots and list "
                             "items or map keys in brackets, e.g. spec.template.spec.containers[bcd].env[NAME] or "
                             'spec.template.metadata.annotations["example.com/key"]')
        if m.group(1):
            out += ("." if out else "") + m.group(1)
            parent = m.group(1)
        else:
            raw = m.group(2)
            key = json.loads(raw) if raw.startswith('"') else raw
            out += f"[{json.dumps(key)}]" if parent in MAP_FIELDS else _bracket(key)
            parent = None
        pos = m.end()
    return out


def check_allowed_path(text: str) -> str:
    """An entry of ``bcd_drift_allowed_paths``, canonical; ValueError naming the rule."""
    canon = canonical_path(text)
    if canon in TOO_BROAD or not canon.startswith(ALLOWED_ROOTS):
        raise ValueError(f"{text!r} would allow too much or names no field of bcd's objects: name a field under "
                         "spec.template.spec or spec.template.metadata (DaemonSet), data[key] or binaryData[key] "
                         "(ConfigMap), or metadata.labels[key] (Namespace, DaemonSet)")
    return canon


def allowed_by(path: str, allowed: list[str]) -> str | None:
    """The entry of ``allowed`` (canonical paths) that covers ``path`` (itself or a parent), or None."""
    for a in allowed:
        if path == a or path.startswith((a + ".", a + "[")):
            return a
    return None


# --- comparing --------------------------------------------------------------------------------

def _item_key(item: dict, keys: tuple[str, ...]) -> tuple[dict, str]:
    ident = {k: item[k] for k in keys if k in item}
    return ident, "/".join(str(item.get(k)) for k in keys if k in item)


def diff(live: object, want: object, steps: tuple = ()) -> list[tuple[tuple, object, object]]:
    """``(steps, live value, rendered value)`` of each difference; a side that lacks the field is
    :data:`MISSING`. Maps and keyed lists are compared item by item (an extra or missing item is one
    difference, the whole item); other lists and scalars whole."""
    field = steps[-1][1] if steps and steps[-1][0] == "f" else None
    if isinstance(live, dict) and isinstance(want, dict):
        out = []
        for key in sorted(set(live) | set(want)):
            a, b = live.get(key, MISSING), want.get(key, MISSING)
            if a is MISSING or b is MISSING:
                out.append(((*steps, ("f", key)), a, b))
            else:
                out += diff(a, b, (*steps, ("f", key)))
        return out
    keys = LIST_KEYS.get(field)
    if (keys and isinstance(live, list) and isinstance(want, list)
            and all(isinstance(i, dict) for i in live + want)):
        live_items = {json.dumps(_item_key(i, keys)[0], sort_keys=True): i for i in live}
        want_items = {json.dumps(_item_key(i, keys)[0], sort_keys=True): i for i in want}
        if len(live_items) == len(live) and len(want_items) == len(want):
            out = []
            for k in list(live_items) + [k for k in want_items if k not in live_items]:
                a, b = live_items.get(k, MISSING), want_items.get(k, MISSING)
                ident, text = _item_key(a if a is not MISSING else b, keys)
                step = (*steps, ("k", ident, text))
                if a is MISSING or b is MISSING:
                    out.append((step, a, b))
                else:
                    out += diff(a, b, step)
            return out
    return [] if live == want else [(steps, live, want)]


def _hide_env(value: object) -> object:
    """``value`` with each env var's literal ``value`` replaced by its length (it may be a secret)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "env" and isinstance(v, list):
                out[k] = [_hide_env_var(i) for i in v]
            else:
                out[k] = _hide_env(v)
        return out
    if isinstance(value, list):
        return [_hide_env(i) for i in value]
    return value


def _hide_env_var(item: object) -> object:
    if isinstance(item, dict) and isinstance(item.get("value"), str):
        return {**item, "value": f"<{len(item['value'])} characters, not shown>"}
    return _hide_env(item)


def show(value: object, steps: tuple = (), limit: int = 200) -> str:
    """A value for a message: compact JSON (``(absent)`` for :data:`MISSING`), an env var's
    literal value hidden, a long ConfigMap value as its size and digest, cut at ``limit``."""
    if value is MISSING:
        return "(absent)"
    fields = [s[1] for s in steps if s[0] == "f"]
    in_env = any(s[0] == "k" for s in steps) and "env" in fields
    if in_env and steps[-1][0] == "k":
        value = _hide_env_var(value)
    elif in_env and fields[-1] == "value" and isinstance(value, str):
        value = f"<{len(value)} characters, not shown>"
    else:
        value = _hide_env(value)
    if fields[:1] in (["data"], ["binaryData"]) and isinstance(value, str) and (len(value) > 60 or "\n" in value):
        return f"<{len(value.encode())} bytes, sha256 {hashlib.sha256(value.encode()).hexdigest()[:12]}>"
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit - 3] + "..."


# --- field managers ---------------------------------------------------------------------------

def _matches(key: str, step: tuple) -> bool:
    if step[0] == "f":
        return key == "f:" + step[1]
    if key.startswith("k:"):
        try:
            return json.loads(key[2:]) == step[1]
        except ValueError:
            return False
    return False


def _walk(fields: dict, steps: tuple) -> tuple[list[str], dict] | None:
    """The trie keys down to ``steps`` in ``fields`` and the subtree there, or the keys of an
    atomic ancestor (a leaf reached before the end owns everything below it); None: not owned."""
    node, keys = fields, []
    for i, step in enumerate(steps):
        if i and not node:
            return keys, node
        key = next((k for k in node if k != "." and _matches(k, step)), None)
        if key is None:
            return None
        keys.append(key)
        node = node[key]
    return keys, node


def _entries(obj: dict) -> list[dict]:
    return [e for e in (obj.get("metadata") or {}).get("managedFields") or []
            if not e.get("subresource") and e.get("fieldsType", "FieldsV1") == "FieldsV1"]


def owners(obj: dict, steps: tuple) -> list[str]:
    """The field managers whose field set holds the field at ``steps`` (or something in it)."""
    return sorted({e.get("manager") or "?" for e in _entries(obj) if _walk(e.get("fieldsV1") or {}, steps) is not None})


def _cut(fields: dict, steps: tuple) -> tuple[list[str], dict] | None:
    """Remove the subtree at ``steps`` (or its atomic ancestor) from ``fields``; return its keys
    and the subtree. Maps left empty by the removal go too (an empty node would mean "owns it")."""
    found = _walk(fields, steps)
    if found is None:
        return None
    keys, sub = found
    parents = [fields]
    for k in keys[:-1]:
        parents.append(parents[-1][k])
    del parents[-1][keys[-1]]
    for i in range(len(parents) - 1, 0, -1):
        if parents[i]:
            break
        del parents[i - 1][keys[i - 1]]
    return keys, sub


def _nest(keys: list[str], sub: dict) -> dict:
    out = sub
    for k in reversed(keys):
        out = {k: out}
    return out


def take_over(obj: dict, paths: list[tuple], manager: str, now: str) -> tuple[list[dict], list[str]]:
    """``obj``'s managedFields with the fields at each of ``paths`` moved from every other
    manager (but subresources) into ``manager``'s Apply entry (created when there is none), and
    the managers they came from. An entry left with no field goes."""
    entries = copy.deepcopy((obj.get("metadata") or {}).get("managedFields") or [])
    moved: dict = {}
    sources: set[str] = set()
    kept = []
    for e in entries:
        ours = e.get("manager") == manager and e.get("operation") == "Apply"
        if not ours and not e.get("subresource") and isinstance(e.get("fieldsV1"), dict):
            for steps in paths:
                cut = _cut(e["fieldsV1"], steps)
                if cut is not None:
                    moved = merge_fields(moved, _nest(*cut))
                    sources.add(e.get("manager") or "?")
            if not e["fieldsV1"]:
                continue
        kept.append(e)
    if not moved:
        return entries, []
    for e in kept:
        if e.get("manager") == manager and e.get("operation") == "Apply" and not e.get("subresource"):
            e["fieldsV1"] = merge_fields(e.get("fieldsV1") or {}, moved)
            return kept, sorted(sources)
    kept.append({"manager": manager, "operation": "Apply", "apiVersion": obj.get("apiVersion"), "time": now,
                 "fieldsType": "FieldsV1", "fieldsV1": moved})
    return kept, sorted(sources)


# --- judging ----------------------------------------------------------------------------------

def _at(render: object, steps: tuple) -> tuple[bool, object]:
    """Whether the raw render sets the field at ``steps`` (or an atomic value holding it), and its
    value there (:data:`MISSING` when the render sets only an atomic ancestor)."""
    node = render
    for step in steps:
        if isinstance(node, dict) and step[0] == "f":
            if step[1] not in node:
                return False, MISSING
            node = node[step[1]]
        elif isinstance(node, list) and step[0] == "k":
            node = next((i for i in node if isinstance(i, dict) and all(i.get(k) == v for k, v in step[1].items())), None)
            if node is None:
                return False, MISSING
        else:
            return True, MISSING
    return True, node


def _sets(render: object, steps: tuple) -> bool:
    return _at(render, steps)[0]


def _finding(obj: dict, render: dict, steps: tuple, live: object, want: object, allowed: list[str]) -> dict:
    path = path_text(steps)
    managers = owners(obj, steps) if live is not MISSING else []
    if want is MISSING:
        # the API server leaves out a false or empty value (omitempty): say what the render sets
        want = _at(render, steps)[1]
    hit = allowed_by(path, allowed)
    out = {"path": path, "live": show(live, steps), "rendered": show(want, steps), "managers": managers,
           "allowed": False, "host_path": None, "steps": steps}
    if hit and not _sets(render, steps):
        out["allowed"] = hit
    elif hit:
        out["note"] = f"bcd_drift_allowed_paths names {hit}, but the render sets this field: change it in the inventory"
    return out


def _host_paths(findings: list[dict], live_pod: dict, want_pod: dict) -> None:
    """Flag each finding that adds a host path (a hostPath volume the render does not have as it is)."""
    want_paths = {v.get("name"): (v.get("hostPath") or {}).get("path") for v in want_pod.get("volumes") or []}
    mounts: dict[str, list[str]] = {}
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for c in live_pod.get(kind) or []:
            for m in c.get("volumeMounts") or []:
                mode = "read-only" if m.get("readOnly") else "read-write"
                mounts.setdefault(m.get("name"), []).append(f"at {m.get('mountPath')} in container {c.get('name')} ({mode})")
    for v in live_pod.get("volumes") or []:
        host = (v.get("hostPath") or {}).get("path")
        if host is None or want_paths.get(v.get("name")) == host:
            continue
        prefix = f"spec.template.spec.volumes{_bracket(str(v.get('name')))}"
        for f in findings:
            if f["path"] == prefix or f["path"].startswith((prefix + ".", prefix + "[")):
                where = "; ".join(mounts.get(v.get("name")) or ["not mounted"])
                f["host_path"] = host
                f["volume"] = v.get("name")
                f["host_path_text"] = f"{host} (volume {v.get('name')}, {where})"


def _sorted(findings: list[dict]) -> list[dict]:
    return sorted(findings, key=lambda f: (f["host_path"] is None, f["path"]))


def judge_daemonset(live: dict, defaulted: dict, render: dict, allowed: list[str]) -> tuple[list[dict], list[dict]]:
    """The findings of the pod template (live against the defaulted render), host paths first,
    and the warnings of the DaemonSet's own labels and annotations the render does not set."""
    live_t = copy.deepcopy((live.get("spec") or {}).get("template") or {})
    want_t = copy.deepcopy((defaulted.get("spec") or {}).get("template") or {})
    for t in (live_t, want_t):
        notes = (t.get("metadata") or {}).get("annotations")
        if isinstance(notes, dict):
            notes.pop(RESTARTED_AT, None)
            if not notes:
                t["metadata"].pop("annotations")
    found = [_finding(live, render, (("f", "spec"), ("f", "template"), *steps), a, b, allowed)
             for steps, a, b in diff(live_t, want_t)]
    _host_paths(found, live_t.get("spec") or {}, want_t.get("spec") or {})
    warnings = []
    meta, want_meta = live.get("metadata") or {}, render.get("metadata") or {}
    for part in ("labels", "annotations"):
        have, want = meta.get(part) or {}, want_meta.get(part) or {}
        for key in sorted(set(have) - set(want) - set(SERVER_ANNOTATIONS)):
            steps = (("f", "metadata"), ("f", part), ("f", key))
            w = _finding(live, render, steps, have[key], MISSING, allowed)
            if not w["allowed"]:
                warnings.append(w)
    return _sorted(found), warnings


def judge_configmap(live: dict, render: dict, allowed: list[str]) -> list[dict]:
    """An extra, missing or changed key of ``data`` or ``binaryData``."""
    out = []
    for part in ("data", "binaryData"):
        have, want = live.get(part) or {}, render.get(part) or {}
        for key in sorted(set(have) | set(want)):
            a, b = have.get(key, MISSING), want.get(key, MISSING)
            if a != b:
                out.append(_finding(live, render, (("f", part), ("f", key)), a, b, allowed))
    return out


def judge_namespace(live: dict, render: dict, allowed: list[str]) -> list[dict]:
    """A Pod Security label (``pod-security.kubernetes.io/*``) that is not the render's."""
    have = {k: v for k, v in ((live.get("metadata") or {}).get("labels") or {}).items() if k.startswith(POD_SECURITY_PREFIX)}
    want = {k: v for k, v in ((render.get("metadata") or {}).get("labels") or {}).items() if k.startswith(POD_SECURITY_PREFIX)}
    out = []
    for key in sorted(set(have) | set(want)):
        a, b = have.get(key, MISSING), want.get(key, MISSING)
        if a != b:
            out.append(_finding(live, render, (("f", "metadata"), ("f", "labels"), ("f", key)), a, b, allowed))
    return out


def failing(findings: list[dict]) -> list[dict]:
    return [f for f in findings if not f["allowed"]]


def foreign(findings: list[dict], manager: str) -> list[dict]:
    """The failing findings another field manager than ``manager`` owns."""
    return [f for f in failing(findings) if set(f["managers"]) - {manager}]


def public(finding: dict) -> dict:
    """A finding without its internal steps, for a module's result."""
    return {k: v for k, v in finding.items() if k != "steps"}


def line(f: dict, manager: str | None = None) -> str:
    """One finding, for a message: the path, the live value, the rendered one and its managers."""
    who = ", ".join(f["managers"]) if f["managers"] else "none (removed)"
    text = f"{f['path']}: live {f['live']}, rendered {f['rendered']}; field manager(s) {who}"
    if manager and f["managers"] == [manager]:
        text += " (an earlier render)"
    return text + (f"; {f['note']}" if f.get("note") else "")


def host_path_line(f: dict) -> str:
    return f"EXTRA HOST PATH {f['host_path_text']}, set by field manager(s) {', '.join(f['managers']) or 'none'}"


# --- asking the API server --------------------------------------------------------------------

def defaulted(kube, live: dict, render: dict) -> dict:
    """The rendered DaemonSet as the API server makes it: a server-side dry-run update (PUT,
    ``dryRun=All``) of the live one with the render, so every default and mutating admission
    fills it as our apply would; nothing is created or changed."""
    meta = render["metadata"]
    body = {**copy.deepcopy(render), "metadata": {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels", "annotations")
                                                  if k in meta}}
    body["metadata"]["uid"] = (live.get("metadata") or {}).get("uid")
    where = api_path("daemonsets", meta["name"], meta["namespace"])
    try:
        return kube.request("PUT", where, {"dryRun": "All", "fieldManager": "bcd-ansible-surface"}, body)
    except KubeError as exc:
        raise SurfaceError(f"the API server does not take the render as DaemonSet {meta['namespace']}/{meta['name']} "
                           f"(a server-side dry run, nothing changed): {exc}") from None


# --- scheduling: Nodes a template would leave ---------------------------------------------------

def scheduling(template: dict) -> dict:
    spec = (template or {}).get("spec") or {}
    return {k: spec.get(k) for k in SCHEDULING_FIELDS}


def _expression(expr: dict, values: dict) -> bool:
    key, op, want = expr.get("key"), expr.get("operator"), expr.get("values") or []
    have = values.get(key)
    if op == "In":
        return have is not None and have in want
    if op == "NotIn":
        return have is None or have not in want
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(want) == 1:
        try:
            a, b = int(have), int(want[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term(term: dict, node: dict) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term selects no Node
    labels = (node.get("metadata") or {}).get("labels") or {}
    named = {"metadata.name": (node.get("metadata") or {}).get("name")}
    return all(_expression(e, labels) for e in exprs) and all(_expression(f, named) for f in fields)


def _tolerates(tol: dict, taint: dict) -> bool:
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    op = tol.get("operator") or "Equal"
    if not tol.get("key"):
        return op == "Exists"
    if tol.get("key") != taint.get("key"):
        return False
    return op == "Exists" or (op == "Equal" and (tol.get("value") or "") == (taint.get("value") or ""))


def unfit(template: dict, node: dict) -> str | None:
    """Why the DaemonSet controller would not run ``template``'s pod on ``node`` (its nodeSelector,
    required node affinity, or a NoSchedule/NoExecute taint it does not tolerate, with the
    tolerations the controller adds), or None."""
    spec = (template or {}).get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in sorted((spec.get("nodeSelector") or {}).items()):
        if labels.get(k) != v:
            has = f"{k}={labels[k]}" if k in labels else "no such label"
            return f"nodeSelector {k}={v} (the Node has {has})"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None and not any(_term(t, node) for t in required.get("nodeSelectorTerms") or []):
        return "the required node affinity selects no label set the Node has"
    tolerations = list(spec.get("tolerations") or []) + DAEMON_TOLERATIONS
    if spec.get("hostNetwork"):
        tolerations.append(HOST_NETWORK_TOLERATION)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"
    return None


def node_loss(live: dict, want: dict, pods: list[dict], nodes: dict[str, dict]) -> list[dict]:
    """``[{node, pod, why}]``: the Nodes that run a pod of ``live`` (a DaemonSet) now and whose pod
    ``want``'s template would no longer run (only when the scheduling fields change)."""
    live_t = (live.get("spec") or {}).get("template") or {}
    want_t = (want.get("spec") or {}).get("template") or {}
    if scheduling(live_t) == scheduling(want_t):
        return []
    uid = (live.get("metadata") or {}).get("uid")
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or meta.get("deletionTimestamp") or not any(o.get("uid") == uid for o in meta.get("ownerReferences") or []):
            continue
        why = unfit(want_t, nodes.get(node) or {"metadata": {"name": node}})
        if why:
            out.append({"node": node, "pod": meta.get("name"), "why": why})
    return sorted(out, key=lambda x: x["node"])


def slim_node_taints(node: dict) -> dict:
    """A Node's name, labels and taints (what :func:`unfit` reads)."""
    return {"metadata": {k: (node.get("metadata") or {}).get(k) for k in ("name", "labels")},
            "spec": {"taints": (node.get("spec") or {}).get("taints") or []}}
