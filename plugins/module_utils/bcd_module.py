"""What every bcd-ansible module shares: loading the inventory model, failing cleanly, clients.

A module never lets a Python traceback reach the operator: invalid input fails with the
model's ``INVALID_CONFIG`` lines (one per problem, naming the variable and the rule), and
control-plane or Kubernetes failures fail with one line naming the call and the cause.
"""

from __future__ import annotations

# Every module_utils import is at module scope: mitogen's strategy (ANSIBLE_STRATEGY=mitogen_linear)
# ships a module the module_utils its top level imports, and only those.
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client, ControlPlaneError
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import RULE, Kube, KubeError, api_client
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import (
    SECRET_VARIABLES,
    VERSION_KEY,
    ConfigError,
    Inventory,
    load,
)

CONFIG_OPTION = {"type": "dict", "required": True}
# Options of modules that reach the control plane and/or the cluster.
API_KEY_OPTION = {"type": "str", "no_log": True}
KUBE_OPTIONS = {"kubeconfig": {"type": "path"}, "context": {"type": "str"}}


def inventory(module, required: tuple[str, ...] = ()) -> Inventory:
    """Validate ``module.params['config']`` (the bcd_* variables) with the inventory model.

    On invalid input calls ``module.fail_json`` with ``msg`` = the INVALID_CONFIG lines joined
    by newlines and ``errors`` = the same lines as a list; never returns in that case.
    """
    config = module.params["config"] or {}
    for name in SECRET_VARIABLES:
        # config never should hold a secret (lookup('bcd.kubernetes.bcd_inventory') leaves them out); if a
        # caller passes one anyway, mask it in everything the module returns.
        if isinstance(config, dict):
            module.no_log_values.update(secret_texts(config.get(name)))
    try:
        return load(config, required)
    except ConfigError as exc:
        module.fail_json(msg="\n".join(exc.lines), errors=exc.lines)
        raise  # unreachable: fail_json exits


def secret_texts(value: object) -> set[str]:
    """The text to mask of a secret variable's value: the string, or each string inside a list or
    mapping. Never a number or a bool: the lookup passes ``0``, ``False``, ``[]`` or ``{}`` in place
    of a key that is not a string, and masking ``0`` would mask every 0 in the INVALID_CONFIG lines."""
    if isinstance(value, str):
        return {value} if value else set()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*(secret_texts(v) for v in value))
    return set()


def refuse_existing(module, inv: Inventory, names: list[str]) -> None:
    """Fail (INVALID_CONFIG) when a variable in ``names`` names a file that already exists."""
    import os

    existing = []
    for name in names:
        target = getattr(inv, name, None)
        if target and os.path.lexists(target):
            existing.append(f"INVALID_CONFIG: {name}: {target} exists; give a new file (it is never overwritten)")
    if existing:
        module.fail_json(msg="\n".join(existing), errors=existing)


def refuse_missing(module, inv: Inventory, names: list[str]) -> None:
    """Fail (INVALID_CONFIG) when a variable in ``names`` names a file that does not exist (the
    cluster's kubeconfig): said at validation, before anything is reached or changed."""
    import os

    missing = []
    for name in names:
        target = getattr(inv, name, None)
        # a kubeconfig may be several files, os.pathsep between them (as KUBECONFIG holds them)
        gone = [t for t in (target.split(os.pathsep) if name == "bcd_kubeconfig" and target else [target])
                if t and not os.path.exists(t)]
        if gone:
            missing.append(f"INVALID_CONFIG: {name}: {', '.join(gone)} does not exist; name an existing file"
                           + (f" (or leave it unset: {RULE})" if name == "bcd_kubeconfig" else ""))
    if missing:
        module.fail_json(msg="\n".join(missing), errors=missing)


def label_selector(inv: Inventory) -> str:
    """``bcd_node_selector`` as a label selector string (``k=v,k2=v2``); empty selects every node."""
    return ",".join(f"{k}={v}" for k, v in sorted(inv.bcd_node_selector.items()))


# The file the action plugin reads this module's control-plane retries from, to print them as
# they happen (plugin_utils/bcd_progress.py, RetryWatch); unset when nothing reads them.
PROGRESS_ENV = "BCD_PROGRESS_FILE"


def retry_reporter():
    """An ``on_retry`` for the control-plane client that appends each retry event (JSON, one a
    line, with the wall-clock time and the next attempt's) to ``$BCD_PROGRESS_FILE``, or None."""
    import json
    import os
    import time

    target = os.environ.get(PROGRESS_ENV)
    if not target or not os.path.isfile(target):
        return None

    def on_retry(event: dict) -> None:
        now = time.time()
        event = {**event, "at": now, "next_at": now + event.get("delay", 0.0), "variable": "bcd_control_plane_timeout"}
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")

    return on_retry


def progress_reporter():
    """A ``say(text)`` that appends one progress line of a long wait (a rollout's gate) to
    ``$BCD_PROGRESS_FILE``, which the action plugin prints as it comes; None when nothing reads it."""
    import json
    import os
    import time

    target = os.environ.get(PROGRESS_ENV)
    if not target or not os.path.isfile(target):
        return None

    def say(text: str) -> None:
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": "progress", "text": text, "at": time.time()}) + "\n")

    return say


def control_plane(module, inv: Inventory, on_retry=None):
    """A control-plane client for the inventory; the API key comes from the no_log option
    ``api_key`` or $BETTER_COMPUTE_API_KEY, and is added to the module's no_log values. Its
    retries are reported to the action plugin (:func:`retry_reporter`) unless ``on_retry`` is given."""
    import os

    key = module.params.get("api_key") or os.environ.get("BETTER_COMPUTE_API_KEY")
    if key:
        module.no_log_values.add(key)
    if not inv.bcd_control_plane_url:
        module.fail_json(msg="INVALID_CONFIG: bcd_control_plane_url: is required by this playbook")
    try:
        config = module.params.get("config")
        version = config.get(VERSION_KEY) if isinstance(config, dict) else None
        return Client(inv.bcd_control_plane_url, api_key=key, ca_file=inv.bcd_control_plane_ca_file,
                      retry_budget=inv.bcd_control_plane_timeout, on_retry=on_retry or retry_reporter(),
                      version=version if isinstance(version, str) else None)
    except ControlPlaneError as exc:
        module.fail_json(msg=str(exc))
    except (OSError, ValueError) as exc:  # an unreadable CA file
        module.fail_json(msg=f"bcd_control_plane_ca_file: cannot load {inv.bcd_control_plane_ca_file}: {exc}")
    raise AssertionError("unreachable")


def kube(module, inv: Inventory | None = None):
    """A :class:`bcd_kube.Kube` from the options ``kubeconfig``/``context`` (else bcd_kubeconfig/bcd_kube_context)."""
    kubeconfig = module.params.get("kubeconfig") or (inv.bcd_kubeconfig if inv else None)
    context = module.params.get("context") or (inv.bcd_kube_context if inv else None)
    try:
        return Kube(api_client(kubeconfig, context))
    except KubeError as exc:
        module.fail_json(msg=str(exc))
    raise AssertionError("unreachable")


def reach(module, kubeconfig: str | None, context: str | None, attempts: int = 3, pause: float = 2.0) -> dict:
    """Choose the cluster (:func:`bcd_kube.resolve`: bcd_kubeconfig, bcd_kube_context, else
    K8S_AUTH_KUBECONFIG, K8S_AUTH_CONTEXT, else KUBECONFIG or ~/.kube/config and its current
    context) and read its API server's ``/version``. Returns ``{"cluster": <where it was reached
    (:func:`bcd_kube.describe_source`)>, "kube": {"kubeconfig", "context", "server",
    "kubeconfig_from", "context_from"}}``: what every later task of the run is given. A kubeconfig
    or context that does not exist fails the module before any request; a cluster that cannot be
    reached fails it naming the kubeconfig file(s), the context and its server, and the fix."""
    import time

    try:
        api = Kube(api_client(kubeconfig, context))
    except KubeError as exc:
        module.fail_json(msg=str(exc))
    chosen = getattr(api.client, "bcd_resolved", None) or {}
    kube_out = {k: chosen.get(k) for k in ("kubeconfig", "context", "server", "kubeconfig_from", "context_from")}
    for attempt in range(1, attempts + 1):
        try:
            api.request("GET", "/version", timeout=10.0)
            return {"cluster": api.source or "in-cluster", "kube": kube_out}
        except KubeError as exc:
            if exc.status is not None and exc.status != 503:
                where = "" if api.source is None or api.source in str(exc) else f" ({api.source})"
                module.fail_json(msg=f"{exc}{where}; check bcd_kubeconfig and bcd_kube_context")
            if attempt == attempts:
                module.fail_json(msg=f"{exc} (tried {attempts} times, {pause:g}s apart); check that the server is up "
                                     "and reachable from this host, or set bcd_kubeconfig and bcd_kube_context "
                                     "to the cluster's kubeconfig and context")
            time.sleep(pause)
    raise AssertionError("unreachable")


def write_new_file(path: str, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` only if no file is there, created with ``mode`` from the start.

    Returns True when written, False when ``path`` already holds exactly ``data`` (a re-run).
    Raises FileExistsError when ``path`` holds anything else (an existing file is refused), and
    OSError for other failures. The file appears whole or not at all (written to a temporary
    name in the same directory, then hard-linked into place, which never replaces a file).
    """
    import os
    import tempfile

    try:
        with open(path, "rb") as existing:
            if existing.read() == data:
                return False
        raise FileExistsError(path)
    except FileNotFoundError:
        pass
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return True


def replace_file(path: str, data: bytes, mode: int) -> None:
    """Replace the file at ``path`` with ``data`` whole (a temporary file in the same directory,
    renamed over it), created with ``mode``: a reader sees the old file or the new one."""
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
