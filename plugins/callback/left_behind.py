# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback left_behind: when a run is interrupted, or its clean-up fails, its last lines say
what it leaves on the cluster and the control plane, until when, and the command that cleans up."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: left_behind
type: aggregate
short_description: Say what an interrupted run, or one whose clean-up failed, leaves behind
version_added: 1.1.0
description:
  - Records, from the results of the tasks as they end, what a bcd-ansible run holds at each
    moment - the cluster's lock (M(bcd.kubernetes.bcd_lock), M(bcd.kubernetes.bcd_rollout) with
    C(take_lock)) and the join token it minted (its id, uses and expiry, and the Secret that holds
    it; never the token) - and the first failure of each cluster.
  - When the run is interrupted (SIGINT, Ctrl-C; SIGTERM is turned into the same interruption,
    so that the workers are stopped and these lines still print) or ends with something of it
    still live (a clean-up that failed), its last lines name each join token still live (id,
    uses left at most, expiry - it lapses then), the Secret (until the next run deletes it), the
    lock (until it expires, C(bcd_lock_ttl) after it was taken) and the one command that cleans
    them all up (the next run of the same playbook does). The very last line keeps the first
    cause.
  - Ansible runs no C(always:) section on an interruption, so this callback cannot revoke the
    token itself; the next run does, and takes over at once a lock whose holder process on this
    host is gone.
  - Enabled in the collection's C(ansible.cfg) (C(callbacks_enabled = bcd.kubernetes.left_behind)).
requirements:
  - enable in configuration
"""

import atexit
import os
import shlex
import signal
import sys

from ansible.plugins.callback import CallbackBase

# options of ansible-playbook that say which clusters a run covers (no -e: it may carry a secret)
_KEEP = {"-i", "--inventory", "--inventory-file", "-l", "--limit"}


def _command() -> str:
    """``ansible-playbook <playbook> -i ... -l ...`` from this process's command line."""
    argv, out, i = sys.argv[1:], ["ansible-playbook"], 0
    while i < len(argv):
        arg = argv[i]
        if arg in _KEEP and i + 1 < len(argv):
            out += [arg, argv[i + 1]]
            i += 2
            continue
        if any(arg.startswith(k + "=") for k in _KEEP):
            out.append(arg)
        elif arg.endswith((".yml", ".yaml")) or arg.startswith("bcd.kubernetes."):
            out.append(arg)
        i += 1
    return shlex.join(out)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bcd.kubernetes.left_behind"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._locks: dict[str, dict] = {}
        self._tokens: dict[str, dict] = {}
        self._first: dict[str, str] = {}
        self._task: str | None = None
        self._signal: str | None = None
        self._ended = False
        self._said = False
        self._pid = os.getpid()
        atexit.register(self._at_exit)
        self._previous_term = signal.getsignal(signal.SIGTERM)

    # -- interruption ----------------------------------------------------------------------------
    def v2_playbook_on_start(self, playbook):
        # TaskQueueManager's own SIGTERM handler stops the workers and kills ansible-playbook at
        # once, before any line could say what is left: take SIGTERM as Ctrl-C instead (the
        # workers get SIGINT, the CLI ends with "User interrupted execution", then _at_exit)
        signal.signal(signal.SIGTERM, self._on_term)
        previous_int = signal.getsignal(signal.SIGINT)

        def on_int(signum, frame):
            self._signal = self._signal or "SIGINT (Ctrl-C)"
            if callable(previous_int):
                return previous_int(signum, frame)
            raise KeyboardInterrupt()

        signal.signal(signal.SIGINT, on_int)

    def _on_term(self, signum, frame):
        self._signal = "SIGTERM"
        handler = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if callable(handler):
            return handler(signal.SIGINT, frame)
        raise KeyboardInterrupt()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task.name or task.get_name()

    def v2_playbook_on_handler_task_start(self, task):
        self._task = task.name or task.get_name()

    # -- what the run holds ----------------------------------------------------------------------
    def _record(self, result, failed: bool):
        host = result._host.get_name()
        res = result._result or {}
        action = result._task.action or ""
        if failed and host not in self._first and not result._task.ignore_errors:
            msg = res.get("msg") or res.get("reason") or "failed"
            self._first[host] = f'"{result._task.name or result._task.get_name()}" failed: {" ".join(str(msg).split())}'
        if action.endswith("bcd_lock") or action.endswith("bcd_rollout"):
            args = result._task.args or {}
            if action.endswith("bcd_lock") and args.get("state") == "absent" and not failed:
                self._locks.pop(host, None)
            elif res.get("lease") and res.get("until") and res.get("holder") and not res.get("waiting"):
                if not failed or res.get("lock_held"):
                    self._locks[host] = {"lease": res["lease"], "holder": res["holder"], "until": res["until"]}
        facts = res.get("ansible_facts") or {}
        if "join_token_live" in facts and not failed:
            live = facts["join_token_live"] or {}
            if live.get("id"):
                self._tokens[host] = dict(live)
            else:
                self._tokens.pop(host, None)

    def v2_runner_on_ok(self, result):
        self._record(result, False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, True)

    def v2_playbook_on_stats(self, stats):
        # said at exit: after the recap and the warnings ansible-playbook prints last
        self._ended = True

    def _at_exit(self):
        if os.getpid() != self._pid:
            return  # a worker process forked from ansible-playbook
        if not self._ended:
            self._signal = self._signal or "an interruption"
        self._say()

    # -- the last lines --------------------------------------------------------------------------
    def _say(self):
        hosts = sorted(set(self._locks) | set(self._tokens))
        if self._said or not hosts:
            return
        self._said = True
        if self._signal:
            cause = f"interrupted by {self._signal}" + (f' during "{self._task}"' if self._task else "")
        else:
            cause = "; ".join(f"{h}: {self._first[h]}" for h in hosts if h in self._first) or "its clean-up did not complete"
        command = _command()
        lines = [f"bcd-ansible: this run left behind ({'it was ' + cause if self._signal else 'its clean-up failed'}):"]
        left_short = []
        for host in hosts:
            parts = []
            token = self._tokens.get(host)
            if token:
                lines.append(f"  {host}: join token {token['id']} is still live: at most {token.get('max_uses')} use(s) left, "
                             f"until {token.get('expires_at')} (it lapses then); anyone who reads it can join a node")
                parts.append(f"token {token['id']} (until {token.get('expires_at')})")
                if token.get("secret"):
                    lines.append(f"  {host}: Secret {token['secret']} holds it, until the next run deletes it")
                    parts.append(f"Secret {token['secret']}")
            lock = self._locks.get(host)
            if lock:
                lines.append(f"  {host}: the lock {lock['lease']} ({lock['holder']}) is held until {lock['until']} "
                             "(bcd_lock_ttl); once this process is gone, a run on this host takes it over at once")
                parts.append(f"the lock until {lock['until']}")
            left_short.append(f"{host}: {', '.join(parts)}")
        lines.append(f"  clean up: run `{command}` again (with your other options): it revokes the token, deletes "
                     "the Secret and takes over the lock")
        lines.append(f"bcd-ansible: {cause}; left: {'; '.join(left_short)}; `{command}` cleans them up")
        try:
            for line in lines:
                self._display.display(line, color="bright red", stderr=False)
        except Exception:  # noqa: BLE001 - at exit the display may be gone: the lines still matter
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
