"""Start, stop and report the control-plane emulator as a sandbox component.

``python -m sandbox up`` calls :func:`start` once the cluster is healthy, ``down`` calls
:func:`stop` and ``status`` calls :func:`status`. The emulator runs as the sandbox process
``control-plane`` (``python -m sandbox.control_plane --dir <dir> serve --kubeconfig <file>``),
started through sandbox.proc: pid in ``<dir>/pids/control-plane.pid``, log in
``<dir>/logs/control-plane.log``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from sandbox import proc
from sandbox.control_plane.config import BASE_PATH, Paths

NAME = "control-plane"
# The directory the sandbox package is imported from, so the emulator's interpreter imports this
# very package whether it runs from a checkout or from an installed copy.
IMPORT_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


def _discovery(sdir: Path, timeout: float = 2.0) -> dict | None:
    """Discovery's answer over TLS, verified with the emulator's CA; None when it does not answer."""
    paths = Paths(sdir)
    state = paths.read_state()
    ca = paths.home / "ca.pem"
    if not state or not ca.exists():
        return None
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(state["url"] + "/.well-known/better-compute", timeout=timeout,  # noqa: S310 - https
                                    context=ctx) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def start(sdir: Path, kubeconfig: Path | None, listen: str | None = None) -> None:
    """Start the emulator of the sandbox at ``sdir`` (idempotent) and wait until discovery answers.

    ``kubeconfig``: the cluster whose bcd pods the join simulator joins (None: API only).
    ``listen``: an address to listen on besides 127.0.0.1, advertised in the URLs (server.py).
    Writes ``<dir>/control-plane.yml``. Raises ``sandbox.proc.StartError`` with the end of the
    emulator's log when it does not come up within a minute.
    """
    sdir = Path(sdir).resolve()
    if proc.running(sdir, NAME):
        state = Paths(sdir).read_state() or {}
        if (state.get("pid") == proc.pid_of(sdir, NAME) and _discovery(sdir) is not None
                and (listen is None or state.get("listen") == listen)):
            return
        proc.stop(sdir, NAME)
    argv = [sys.executable, "-m", "sandbox.control_plane", "--dir", str(sdir), "serve"]
    if kubeconfig:
        argv += ["--kubeconfig", str(Path(kubeconfig).resolve())]
    if listen:
        argv += ["--listen", listen]
    pythonpath = os.pathsep.join(p for p in (str(IMPORT_ROOT), os.environ.get("PYTHONPATH")) if p)
    pid = proc.spawn(sdir, NAME, argv, env={"PYTHONPATH": pythonpath}, cwd=sdir)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        proc.ensure_running(sdir, NAME)
        state = Paths(sdir).read_state() or {}
        if state.get("pid") == pid and _discovery(sdir) is not None:
            return
        if time.monotonic() > deadline:
            raise proc.StartError(f"sandbox: {NAME} did not answer within {START_TIMEOUT:g}s; the end of its log:\n"
                                  f"{proc.log_tail(sdir, NAME)}")
        time.sleep(0.1)


def stop(sdir: Path) -> None:
    """Stop the emulator of the sandbox at ``sdir`` (its tokens and nodes stay in the database)."""
    proc.stop(Path(sdir), NAME)


def restart(sdir: Path, kubeconfig: Path | None = None) -> None:
    """Stop and start the emulator again, with the kubeconfig it ran with unless one is given."""
    sdir = Path(sdir).resolve()
    if kubeconfig is None:
        kubeconfig = (Paths(sdir).read_state() or {}).get("kubeconfig")
    stop(sdir)
    start(sdir, Path(kubeconfig) if kubeconfig else None)


def status(sdir: Path) -> dict:
    """``{"running", "pid", "answers", "url", "admin_url", "gateway_url", "tokens", "nodes", "removed_nodes"}``.

    ``answers``: discovery answered over TLS; ``tokens``: how many live join tokens (neither revoked nor
    expired) the database holds; ``nodes``: how many nodes are in a pool (every state but ``removed``);
    ``removed_nodes``: how many left it (``nodes.remove``, as release-cluster.yml does).
    """
    sdir = Path(sdir).resolve()
    paths = Paths(sdir)
    state = paths.read_state() or {}
    pid = proc.pid_of(sdir, NAME)
    report = {"running": pid is not None, "pid": pid, "answers": pid is not None and _discovery(sdir) is not None,
              "url": state.get("url"), "admin_url": state.get("admin_url"), "gateway_url": state.get("gateway_url"),
              "tokens": None, "nodes": None, "removed_nodes": None}
    if paths.db.exists():
        try:
            conn = sqlite3.connect(f"file:{paths.db}?mode=ro", uri=True, timeout=2.0)
            try:
                # live tokens only (neither revoked nor expired): what an operator wants to see at zero
                report["tokens"] = conn.execute("SELECT COUNT(*) FROM join_tokens WHERE revoked_at IS NULL AND expires_at > ?",
                                                (time.time(),)).fetchone()[0]
                # a removed node stays in the table (nodes.list shows it) but is no longer in the pool
                report["nodes"] = conn.execute("SELECT COUNT(*) FROM nodes WHERE state != 'removed'").fetchone()[0]
                report["removed_nodes"] = conn.execute("SELECT COUNT(*) FROM nodes WHERE state = 'removed'").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:
            pass
    return report


__all__ = ["BASE_PATH", "NAME", "restart", "start", "status", "stop"]
