"""Processes the sandbox starts: each logs to <dir>/logs/<name>.log and is tracked by pid.

Every long-running process of the sandbox (etcd, the Kubernetes components, KWOK, the
control-plane emulator) is started with :func:`spawn`, so ``sandbox down`` can stop exactly the
processes it started, by pid, and nothing else.

Layout under the sandbox directory (passed in, or ``$SANDBOX_DIR``; the package never derives one
from where it is installed: ``python -m sandbox`` picks a checkout's default):
``pids/<name>.pid`` holds ``<pid> <start time in clock ticks>`` (the start time guards against a
recycled pid); ``logs/<name>.log`` holds the process's stdout and stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


class StartError(RuntimeError):
    """A component did not start: names it and carries the tail of its log."""


class NoStateDir(StartError):
    """No state directory was passed in and ``$SANDBOX_DIR`` is not set."""


def sandbox_dir() -> Path:
    """The sandbox state directory when none is passed in: ``$SANDBOX_DIR`` (the command line sets it
    from ``--dir``, ``--name`` or its default); raises :class:`NoStateDir` when it is not set."""
    env = os.environ.get("SANDBOX_DIR")
    if not env:
        raise NoStateDir("sandbox: no state directory: pass one (python -m sandbox --dir DIR, "
                         "Sandbox(dir=...)) or set SANDBOX_DIR")
    return Path(env).resolve()


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces; fields after the closing parenthesis are fixed.
    return stat.rsplit(")", 1)[1].split()[19]


def log_tail(sdir: Path, name: str, lines: int = 30) -> str:
    path = sdir / "logs" / f"{name}.log"
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def spawn(sdir: Path, name: str, argv: list[str], env: dict | None = None, cwd: Path | None = None) -> int:
    """Start ``argv`` in its own session, detached; record its pid. Returns the pid."""
    (sdir / "logs").mkdir(parents=True, exist_ok=True)
    (sdir / "pids").mkdir(parents=True, exist_ok=True)
    log = open(sdir / "logs" / f"{name}.log", "ab")
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})}, cwd=str(cwd) if cwd else None, start_new_session=True,
        )
    finally:
        log.close()
    ticks = None
    for _ in range(50):
        ticks = _start_ticks(proc.pid)
        if ticks:
            break
        time.sleep(0.01)
    (sdir / "pids" / f"{name}.pid").write_text(f"{proc.pid} {ticks or ''}\n")
    if name in RESTARTABLE and not env and cwd is None:
        (sdir / "pids" / f"{name}.argv").write_text(json.dumps(argv))
    return proc.pid


def pid_of(sdir: Path, name: str) -> int | None:
    """The pid of a component the sandbox started, when that very process still runs."""
    path = sdir / "pids" / f"{name}.pid"
    try:
        fields = path.read_text().split()
    except OSError:
        return None
    pid = int(fields[0])
    ticks = fields[1] if len(fields) > 1 else None
    now = _start_ticks(pid)
    if now is None or (ticks and now != ticks):
        return None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state == "Z" else pid


def running(sdir: Path, name: str) -> bool:
    return pid_of(sdir, name) is not None


def names(sdir: Path) -> list[str]:
    return sorted(p.stem for p in (sdir / "pids").glob("*.pid")) if (sdir / "pids").is_dir() else []


def stop(sdir: Path, name: str, timeout: float = 10.0) -> None:
    """SIGTERM the component's process group, then SIGKILL after ``timeout`` seconds."""
    pid = pid_of(sdir, name)
    if pid is not None:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and pid_of(sdir, name) is not None:
                time.sleep(0.1)
            if pid_of(sdir, name) is None:
                break
    (sdir / "pids" / f"{name}.pid").unlink(missing_ok=True)


def stop_all(sdir: Path, order: list[str] | None = None) -> None:
    """Stop every recorded component: those in ``order`` first, in that order, then the rest."""
    todo = names(sdir)
    for name in (order or []) + [n for n in todo if n not in (order or [])]:
        if name in todo:
            stop(sdir, name)


# KWOK's CEL set-up has a data race (easycel: "concurrent map writes") that now and then kills it
# as it starts; a simulator started again is as good, so it is, at most twice per sandbox.
RESTARTABLE = {"kwok": "fatal error: concurrent map writes"}


def _restarted(sdir: Path, name: str) -> bool:
    """Start ``name`` again when its log since its last start shows its known start-up crash."""
    argv_file, count_file = sdir / "pids" / f"{name}.argv", sdir / "pids" / f"{name}.restarts"
    if name not in RESTARTABLE or not argv_file.is_file():
        return False
    count = int(count_file.read_text() or 0) if count_file.is_file() else 0
    try:
        since = (sdir / "logs" / f"{name}.log").read_text(errors="replace").rsplit("--- sandbox: starting", 1)[-1]
    except OSError:
        return False
    if count >= 2 or RESTARTABLE[name] not in since:
        return False
    count_file.write_text(str(count + 1))
    with open(sdir / "logs" / f"{name}.log", "a") as log:
        log.write(f"--- sandbox: starting {name} again: it crashed as it started ({RESTARTABLE[name]})\n")
    spawn(sdir, name, json.loads(argv_file.read_text()))
    time.sleep(1)
    return running(sdir, name)


def ensure_running(sdir: Path, name: str) -> None:
    """Raise StartError naming ``name`` with the tail of its log when it has exited (after one or
    two new starts of a component with a known start-up crash, see RESTARTABLE)."""
    if not running(sdir, name) and not _restarted(sdir, name):
        raise StartError(f"sandbox: {name} failed to start; the end of {sdir / 'logs' / (name + '.log')}:\n{log_tail(sdir, name)}")
