"""Progress lines for long waits, shared by the collection's action plugins (controller side).

A module cannot print while it runs, so a wait of more than 10 s would be silent. Two ways to
keep it from being silent, both printing a line at least every ``PROGRESS_EVERY`` seconds that
says what is waited for, how far it is, the time waited, the limit and the variable that sets it:

- :func:`poll_in_slices`: the action plugin runs the module in slices of at most
  ``PROGRESS_EVERY`` seconds (the module returns early when its state changes) and prints a line
  between slices. For waits a module can resume: a DaemonSet's rollout, the nodes reporting to
  the control plane, another run's lock on the cluster.
- :class:`RetryWatch`: while one module run works, a thread prints the control-plane client's
  retries (attempt, error, the next attempt's time, ``bcd_control_plane_timeout``), which the
  module appends to a file named by ``$BCD_PROGRESS_FILE`` (module_utils/bcd_module.py). For
  calls a module cannot stop in the middle of (minting a token, a rollout's gate). A module run
  elsewhere than on the controller does not see the file; its retries stay silent.

Lines go to stdout, or to stderr under a machine-readable stdout callback (json), whose output
they would otherwise break.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible import constants as C
from ansible.utils.display import Display
from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_tmp
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import BcdAction

display = Display()
MACHINE_READABLE_CALLBACKS = ("json", "jsonl", "ansible.posix.json", "ansible.posix.jsonl")
# Seconds between progress lines at most (a slice of a sliced wait lasts this long at most).
PROGRESS_EVERY = 25.0
# A control-plane call retried for less than this (its retries and the next wait) is not reported.
RETRY_QUIET = 10.0
# Where a module appends its control-plane retries (one JSON object a line); set by RetryWatch.
PROGRESS_ENV = "BCD_PROGRESS_FILE"


def _to_stderr() -> bool:
    return C.DEFAULT_STDOUT_CALLBACK in MACHINE_READABLE_CALLBACKS


def say(host: str, text: str) -> None:
    """Print one progress line for ``host``."""
    display.display(f"{host}: {text}", stderr=_to_stderr())


def utc(epoch: float) -> str:
    """``2026-01-31T12:00:00Z``: the one format every time in a message has (UTC, whole seconds)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress:
    """The progress of one wait: when it began, and when and what it last said."""

    def __init__(self, host: str):
        self.host = host
        self.started = time.monotonic()
        self._state: object = None
        self._said: float | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, state: object, text: str, limit: float, variable: str) -> None:
        """``<host>: <text> (waited Ns of Ls; <variable> sets the limit)``, printed when ``state``
        changed since the last line, or at least ``PROGRESS_EVERY`` s after it."""
        now = time.monotonic()
        if self._said is not None and state == self._state and now - self._said < PROGRESS_EVERY - 1:
            return
        say(self.host, f"{text} (waited {now - self.started:.0f}s of {limit:.0f}s; {variable} sets the limit)")
        self._state, self._said = state, now

    def next_slice(self, limit: float, margin: float = 0.0) -> float:
        """Seconds the next module run may wait: ``PROGRESS_EVERY``, never past ``limit - margin``."""
        return max(0.0, min(PROGRESS_EVERY, limit - self.elapsed() - margin))


@dataclass
class Step:
    """What :func:`poll_in_slices` does after a module run.

    ``done``: the task's result, to return now (after printing ``text`` if given). Else the wait
    goes on: ``text`` says what it waits for and how far (printed when ``state`` changes, and at
    least every ``PROGRESS_EVERY`` s), ``limit`` (seconds since the wait began) and ``variable``
    (the variable that sets it) bound it; the next run waits up to ``PROGRESS_EVERY`` s, never
    past ``limit - margin``; a next run with no time left to wait is preceded by ``pause`` s.
    """

    done: dict | None = None
    text: str | None = None
    state: object = None
    limit: float | None = None
    variable: str = ""
    margin: float = 0.0
    pause: float = 0.0
    extra: dict = field(default_factory=dict)


def poll_in_slices(execute: Callable[[float, dict], dict], step: Callable[[dict, Progress], Step], progress: Progress,
                   first_slice: float = 0.0) -> dict:
    """Run a module again and again, each run waiting up to a slice of the wait, until ``step``
    says it is done; print the wait's progress between runs.

    ``execute(slice_seconds, extra)`` runs the module once (``extra``: the arguments ``step`` asked
    for, e.g. when the wait began); ``step(result, progress)`` reads its result (:class:`Step`).
    """
    slice_s, extra = first_slice, {}
    while True:
        res = execute(slice_s, extra)
        s = step(res, progress)
        if s.text is not None and s.limit is not None:
            progress.say(s.state, s.text, s.limit, s.variable)
        if s.done is not None:
            return s.done
        extra = s.extra
        slice_s = PROGRESS_EVERY if s.limit is None else progress.next_slice(s.limit, s.margin)
        if slice_s <= 0 and s.pause:
            time.sleep(s.pause)


class RetryWatch:
    """While a module runs (``with RetryWatch(host):``), print its control-plane retries.

    Sets ``$BCD_PROGRESS_FILE`` (inherited by the module's process on the controller) to a new
    0600 file in the process's :func:`bcd_tmp.private_dir`; a thread reads the retries the module
    appends and prints one when the call has been retried for ``RETRY_QUIET`` s or more (what
    failed, the attempt, when the next one is and the limit), at most one every 10 s, and at least
    every ``PROGRESS_EVERY`` s while the call is still retried. The file is removed on exit. The lines hold what the client's errors
    hold: never an API key or a token.
    """

    def __init__(self, host: str):
        self.host = host
        self._stop = threading.Event()
        self._path: str | None = None
        self._previous: str | None = None
        self._thread: threading.Thread | None = None
        self._offset = 0
        self._last: dict | None = None  # the retry of the call in progress, if any
        self._said = 0.0
        self._told = False  # a line about the call in progress was printed

    def __enter__(self) -> RetryWatch:
        fd, self._path = tempfile.mkstemp(prefix="bcd-progress-", suffix=".jsonl", dir=bcd_tmp.private_dir())
        os.close(fd)
        self._previous = os.environ.get(PROGRESS_ENV)
        os.environ[PROGRESS_ENV] = self._path
        self._thread = threading.Thread(target=self._watch, name="bcd-retry-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self._previous is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = self._previous
        if self._path:
            try:
                os.unlink(self._path)
            except OSError:
                pass

    def _events(self) -> list[dict]:
        try:
            with open(self._path, encoding="utf-8") as f:
                f.seek(self._offset)
                text = f.read()
        except OSError:
            return []
        complete = text[: text.rfind("\n") + 1]
        self._offset += len(complete.encode("utf-8"))
        out = []
        for line in complete.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def _line(self, e: dict, now: float, still: bool) -> str:
        error = e.get("code") or "error"
        if e.get("status"):
            error += f" HTTP {e['status']}"
        if e.get("message"):
            error += f": {e['message']}"
        waited = e.get("waited", 0.0) + max(0.0, now - e.get("at", now))
        if still and now >= e.get("next_at", now):
            nxt = f"attempt {e.get('attempt', 0) + 1} sent at {utc(e['next_at'])}, waiting for its answer"
        else:
            nxt = f"next attempt at {utc(e.get('next_at', now))}"
        return (f"control plane {e.get('procedure', '?')}: {'still retrying: ' if still else ''}attempt "
                f"{e.get('attempt', '?')} failed ({error}); {nxt} (waited {waited:.0f}s of {e.get('budget', 0):.0f}s; "
                f"{e.get('variable', 'bcd_control_plane_timeout')} sets the limit)")

    def _watch(self) -> None:
        while True:
            stopping = self._stop.wait(0.5)
            now = time.time()
            for e in self._events():
                if e.get("kind") == "progress":
                    # a long wait of the module's own (a rollout's gate): printed as it comes
                    say(self.host, str(e.get("text", "")))
                    continue
                if e.get("kind") == "ended":
                    # answered (or failed for good: the task's error says so, once)
                    if self._told and not e.get("code"):
                        say(self.host, f"control plane {e.get('procedure', '?')}: answered at attempt {e.get('attempt', '?')} "
                                       f"(after {e.get('waited', 0.0):.0f}s of retries)")
                    self._last, self._told = None, False
                    continue
                self._last = e
                if e.get("waited", 0.0) + e.get("delay", 0.0) >= RETRY_QUIET and now - self._said >= 10:
                    say(self.host, self._line(e, now, still=False))
                    self._said, self._told = now, True
            if stopping:
                return
            e = self._last
            # still retrying: the next attempt is due, or sent and not answered yet (a request
            # waits up to its timeout)
            if (e and now - self._said >= PROGRESS_EVERY and now < e.get("next_at", 0) + e.get("request_timeout", 30) + 2
                    and e.get("waited", 0.0) + now - e.get("at", now) >= RETRY_QUIET):
                say(self.host, self._line(e, now, still=True))
                self._said, self._told = now, True


class RetryReportingAction(BcdAction):
    """An action plugin that runs its module (``MODULE``) once, printing its control-plane retries
    (:class:`RetryWatch`); in the worker process where that is safe (plugin_utils/bcd_inprocess.py)."""

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        with RetryWatch((task_vars or {}).get("inventory_hostname", "")):
            return self._execute_module(module_name=self.MODULE, module_args=dict(self._task.args), task_vars=task_vars)
