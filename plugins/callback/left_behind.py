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
    so that the workers are stopped and these lines still print), Ansible runs no C(always:)
    section and no handler (the interruption unwinds ansible-playbook at once). So this callback
    cleans up itself, as ansible-playbook exits, with the module_utils the modules use and the
    settings the play has (the host's C(bcd_*) variables, C(bcd_api_key), the kubeconfig and
    context) - it revokes the join token it saw minted (or the one the join Secret names, when
    the interruption came while minting), deletes that Secret, and releases the cluster's lock.
    It takes at most 10 seconds (a SIGTERM is followed by a SIGKILL soon); a second Ctrl-C or
    SIGTERM stops it.
  - An interrupted ansible-playbook can hang in its own clean-up (a worker ended while it held the
    results queue's lock). When the run has not ended 20 seconds after the interruption, this
    callback cleans up and says what is left as above, then ends ansible-playbook with exit code
    99, as an interrupted run exits.
  - Whatever is still live then, or after a clean-up of the run itself that failed, its last
    lines name each join token still live (id, the uses it has left as the control plane says
    when it can be asked, expiry - it lapses then), the Secret (until the next run deletes it),
    the lock (until it expires, C(bcd_lock_ttl) after it was taken) and the one command that
    cleans them all up (the next run of the same playbook does, and takes over at once a lock
    whose holder process on this host is gone). The very last line keeps the first cause.
  - No secret is printed. The API key goes only to the control-plane client, and a token is
    never read (the Secret's token-id annotation is).
  - Enabled by configuration only, never by a play - C(callbacks_enabled = bcd.kubernetes.left_behind)
    in the C([defaults]) section of your C(ansible.cfg) (this repository's C(ansible.cfg) has it), or
    C(ANSIBLE_CALLBACKS_ENABLED=bcd.kubernetes.left_behind). Without it, the playbooks that mint a
    join token or take the lock (adopt-cluster, add-nodes, rollout, release-cluster) warn once per
    run, with those lines.
requirements:
  - enable in configuration
"""

import atexit
import os
import shlex
import signal
import sys
import threading
import time

import ansible
from ansible.plugins.callback import CallbackBase

# The clean-up of an interrupted run: at most this long in all (an orchestrator's SIGTERM is
# followed by a SIGKILL, often 10 s later), each request at most REQUEST_SECONDS.
CLEANUP_SECONDS = 10.0
REQUEST_SECONDS = 5.0
# After an interruption ansible-playbook ends within seconds; one still running this long after
# it is stuck (a worker stopped while it held the results queue's lock, which ansible-playbook's
# own clean-up then waits for): this callback cleans up, says what is left, and ends it.
STALL_SECONDS = 20.0
# ansible-playbook's exit code for an interrupted run ("User interrupted execution")
INTERRUPTED_EXIT = 99

# options of ansible-playbook that say which clusters a run covers (no -e: it may carry a secret)
_KEEP = {"-i", "--inventory", "--inventory-file", "-l", "--limit"}
# ansible-core's own files, whose context managers a signal's exception must not interrupt
_ANSIBLE_DIR = os.path.dirname(ansible.__file__) + os.sep


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


class _Settings:
    """What the clean-up needs of one cluster, as the play has it: the validated inventory, the
    control-plane client (with the API key) and the Kubernetes client. Never printed."""

    def __init__(self, inv, cp, kube):
        self.inv, self.cp, self.kube = inv, cp, kube


def _lease_where(lease: str) -> tuple[str, str] | None:
    """``Lease <namespace>/<name>`` -> (namespace, name)."""
    parts = lease.split(" ", 1)[-1].split("/", 1)
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def _uses(tok: dict) -> str | None:
    """``2 of 3 use(s) left`` from the control plane's answer, or None."""
    try:
        return f"{int(tok['maxUses']) - int(tok.get('uses') or 0)} of {int(tok['maxUses'])} use(s) left"
    except (KeyError, TypeError, ValueError):
        return None


def _closed_worker(frame) -> bool:
    """Whether the strategy running in ``frame`` (its ``_queue_task``) holds a worker process it
    has closed and not yet replaced. ansible-core's own SIGINT handler asks each worker
    ``is_alive()``, which raises ValueError ("process object is closed") on that one: the run would
    end on that exception, with a traceback, instead of as an interrupted run. The strategy's
    ``_workers`` is not a plugin API: where it is missing, this says no (nothing is deferred)."""
    workers = getattr(frame.f_locals.get("self"), "_workers", None)
    for worker in workers if isinstance(workers, list) else ():
        try:
            if worker is not None:
                worker.is_alive()
        except ValueError:
            return True
        except Exception:  # noqa: BLE001, S112 - whatever else it is, it is not a closed worker
            continue
    return False


def _exception_must_not_land(frame) -> bool:
    """Whether ``frame`` (where a signal handler was called) is where an exception must not land:
    where Python drops it (printed as "Exception ignored in ..."), within a fork of
    ``multiprocessing`` (its ``Popen._launch``, which runs the at-fork hooks) or within a finalizer
    (a ``__del__`` the garbage collector runs, such as a closed worker pipe's); or within the
    ``__enter__`` or ``__exit__`` of one of ansible-core's context managers, such as the templating
    contexts, which an exception there leaves out of order (ansible-playbook then ends with
    "Unexpected Exception, this is probably a bug" and a traceback, not as an interrupted run); or
    while ansible-core's strategy replaces a worker it has closed (see :func:`_closed_worker`)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_launch" and code.co_filename.endswith(os.path.join("multiprocessing", "popen_fork.py")):
            return True
        if code.co_name == "__del__":
            return True
        if code.co_name in ("__enter__", "__exit__") and code.co_filename.startswith(_ANSIBLE_DIR):
            return True
        if code.co_name == "_queue_task" and code.co_filename.startswith(_ANSIBLE_DIR) and _closed_worker(frame):
            return True
        frame = frame.f_back
    return False


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bcd.kubernetes.left_behind"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._locks: dict[str, dict] = {}
        self._tokens: dict[str, dict] = {}
        self._secrets: dict[str, str] = {}  # a Secret the clean-up could not delete (its token revoked)
        self._minting: set[str] = set()  # hosts whose mint started and whose token is not noted yet
        self._first: dict[str, str] = {}
        self._hosts: dict[str, object] = {}  # name -> the inventory's Host, for its variables
        self._task: str | None = None
        self._signal: str | None = None
        self._play = None
        self._ended = False
        self._said = False
        self._pid = os.getpid()
        self._exiting = threading.Lock()  # held by whichever ends the run: atexit, or the stall watch
        self._watching = False
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
            if self._not_now(signum, frame):
                return None
            self._signal = self._signal or "SIGINT (Ctrl-C)"
            self._watch_the_end()
            if callable(previous_int):
                return previous_int(signum, frame)
            raise KeyboardInterrupt()

        signal.signal(signal.SIGINT, on_int)

    def _not_now(self, signum: int, frame) -> bool:
        """Whether the signal must not be acted on here, and what was done instead.

        A handler runs where the main thread is. While ansible-playbook forks a worker, that is
        inside an at-fork hook (logging's, threading's); when the garbage collector closes a
        worker's pipe, inside its ``__del__``. There Python prints the interruption's exception
        as a traceback and drops it: the run went on to the end, the signal lost. In the parent
        the signal is sent again a moment later, once the hook or finalizer is over. In a worker
        that has not yet replaced the handlers it inherited (ansible-core's own race: its parent
        handler fails there), the worker ends as the signal's default does, silently; its parent
        is stopping it anyway."""
        if os.getpid() != self._pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return True
        if not _exception_must_not_land(frame):
            return False
        again = threading.Timer(0.02, os.kill, (self._pid, signum))
        again.daemon = True
        again.start()
        return True

    def _watch_the_end(self) -> None:
        """Once interrupted, make sure ansible-playbook ends: if it still runs STALL_SECONDS later
        and its exit has not begun, clean up and say what is left from here, then end it with
        the exit code of an interrupted run.

        ansible-playbook passes the interruption on to its workers, which end at once
        (``os._exit``); one that was sending on the results queue then never releases the queue's
        lock, and ansible-playbook's own clean-up blocks on it for good. An orchestrator's SIGKILL
        would end the run later, with nothing cleaned up and nothing said."""
        if self._watching:
            return
        self._watching = True

        def watch() -> None:
            time.sleep(STALL_SECONDS)
            if not self._exiting.acquire(blocking=False):
                return  # atexit is ending the run
            self._line(f"bcd-ansible: ansible-playbook did not end within {STALL_SECONDS:.0f}s of the interruption "
                       "(a worker stopped while holding its results queue); ending it", color="bright yellow")
            self._end()
            from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_tmp
            bcd_tmp.remove()  # what the exit finalizers would have removed
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(INTERRUPTED_EXIT)

        threading.Thread(target=watch, name="bcd-left-behind-watch", daemon=True).start()

    def _on_term(self, signum, frame):
        if self._not_now(signum, frame):
            return None
        self._signal = "SIGTERM"
        self._watch_the_end()
        handler = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if callable(handler):
            return handler(signal.SIGINT, frame)
        raise KeyboardInterrupt()

    def v2_playbook_on_play_start(self, play):
        # its variable manager gives the clean-up the settings the play has
        self._play = play

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task = task.name or task.get_name()

    def v2_playbook_on_handler_task_start(self, task):
        self._task = task.name or task.get_name()

    def v2_runner_on_start(self, host, task):
        # a token minted in the instant of an interruption is known only by the Secret it went to
        self._hosts[host.get_name()] = host
        args = task.args or {}
        if (task.action or "").endswith("bcd_join_token") and args.get("state", "present") == "present":
            self._minting.add(host.get_name())

    # -- what the run holds ----------------------------------------------------------------------
    def _record(self, result, failed: bool):
        host = result.host.get_name()
        self._hosts[host] = result.host
        res = result.result or {}
        task = result.task
        action = task.action or ""
        if failed and host not in self._first and not task.ignore_errors:
            msg = res.get("msg") or res.get("reason") or "failed"
            self._first[host] = f'"{task.name or task.get_name()}" failed: {" ".join(str(msg).split())}'
        if action.endswith("bcd_lock") or action.endswith("bcd_rollout"):
            args = task.args or {}
            if action.endswith("bcd_lock") and args.get("state") == "absent" and not failed:
                self._locks.pop(host, None)
            elif res.get("lease") and res.get("until") and res.get("holder") and not res.get("waiting"):
                if not failed or res.get("lock_held"):
                    self._locks[host] = {"lease": res["lease"], "holder": res["holder"], "until": res["until"]}
        facts = res.get("ansible_facts") or {}
        if "join_token_live" in facts and not failed:
            self._minting.discard(host)
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
        if not self._exiting.acquire(blocking=False):
            return  # the stall watch is ending the run
        self._end()

    def _end(self):
        """Clean up after an interruption and say what is left (once, as the run ends)."""
        if not self._ended:
            self._signal = self._signal or "an interruption"
        cleaned: dict[str, list[str]] = {}
        if self._signal and (self._locks or self._tokens or self._minting):
            cleaned = self._clean_up()
        self._say(cleaned)

    # -- the settings the play has ---------------------------------------------------------------
    def _settings(self, host: str) -> _Settings:
        """The host's bcd_* variables and API key as its tasks see them (the play's variables:
        inventory, group and host vars, play vars, -e), templated here on the controller, and
        clients made from them as the modules make theirs. Raises with the reason."""
        from ansible.template import Templar, trust_as_template
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import VERSION_KEY, Client
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, api_client
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load

        play = self._play
        if play is None:
            raise RuntimeError("no play had started")
        # no callback API hands out a host's variables: the play's own manager does, for the Host
        # object the task results carried
        if host not in self._hosts:
            raise RuntimeError(f"no task of {host} had started")
        variables = play.get_variable_manager().get_vars(play=play, host=self._hosts[host])
        templar = Templar(loader=play.get_loader(), variables=variables)
        config = templar.template(trust_as_template("{{ lookup('bcd.kubernetes.bcd_inventory') }}"))
        key = templar.template(trust_as_template("{{ bcd_api_key | default('') }}"))
        try:
            inv = load(config)
        except ConfigError as exc:
            raise RuntimeError("; ".join(exc.lines)) from None
        cp = None
        if inv.bcd_control_plane_url:
            cp = Client(inv.bcd_control_plane_url, api_key=key if isinstance(key, str) and key else None,
                        ca_file=inv.bcd_control_plane_ca_file, timeout=REQUEST_SECONDS, retry_budget=REQUEST_SECONDS,
                        version=config.get(VERSION_KEY) if isinstance(config, dict) else None)
        return _Settings(inv, cp, Kube(api_client(inv.bcd_kubeconfig, inv.bcd_kube_context)))

    # -- the clean-up of an interrupted run -------------------------------------------------------
    def _clean_host(self, host: str, done: list[str]) -> None:
        """Revoke the host's token, delete its Secret, release its lock; each step done is noted
        in ``done`` (and removed from what is left) as it completes, so that a clean-up cut
        short by its deadline still reports the truth."""
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import ControlPlaneError
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import KubeError
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_lock import release
        from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_token import (
            TOKEN_ID_ANNOTATION,
            delete_secret,
            ours,
            secret_path,
        )

        try:
            s = self._settings(host)
        except Exception as exc:  # noqa: BLE001 - the reason is said; what is left is named
            done.append(f"FAILED: the play's settings could not be read ({' '.join(str(exc).split())[:300]})")
            return
        token = self._tokens.get(host)
        if token or host in self._minting:
            where = f"{s.inv.bcd_namespace}/{s.inv.bcd_join_token_secret.name}"
            secret = None
            try:
                secret = s.kube.get(secret_path(s.inv))
            except KubeError as exc:
                done.append(f"FAILED: reading Secret {where}: {exc}")
                self._secrets[host] = where
            annotated = ((secret or {}).get("metadata", {}).get("annotations") or {}).get(TOKEN_ID_ANNOTATION)
            if secret is not None and ours(secret) and annotated and not token:
                # minted in the instant of the interruption: the Secret names it
                token = self._tokens[host] = {"id": annotated, "secret": where,
                                              "expires_at": (secret["metadata"].get("annotations") or {}).get(
                                                  "bcd.dev/join-token-expires-at")}
            self._minting.discard(host)
            if token and s.cp is not None:
                try:
                    s.cp.revoke_token(s.inv.bcd_tenant, token["id"])
                    done.append(f"join token {token['id']} revoked")
                    self._tokens.pop(host, None)
                except ControlPlaneError as exc:
                    done.append(f"FAILED: revoking join token {token['id']}: {exc}")
            if secret is not None:
                # the delete bcd_join_token does; a Secret holding another run's token is left
                try:
                    deleted = delete_secret(s.kube, s.inv, secret=secret, token_id=token["id"] if token else None)[0]
                    if deleted:
                        done.append(f"Secret {where} deleted")
                        if host in self._tokens:
                            self._tokens[host]["secret"] = None
                except KubeError as exc:
                    done.append(f"FAILED: deleting Secret {where}: {exc}")
                    self._secrets[host] = where
        lock = self._locks.get(host)
        where = _lease_where(lock["lease"]) if lock else None
        if lock and where:
            out = release(s.kube, where[0], where[1], lock["holder"])
            if out.get("failed"):
                done.append(f"FAILED: {out.get('msg')}")
            else:
                done.append(f"the lock {lock['lease']} released")
                self._locks.pop(host, None)

    def _clean_up(self) -> dict[str, list[str]]:
        """Clean up every host at once, in threads, for at most CLEANUP_SECONDS; a second SIGINT
        or SIGTERM stops the wait (what is left is then said)."""
        hosts = sorted(set(self._locks) | set(self._tokens) | self._minting)
        done: dict[str, list[str]] = {h: [] for h in hosts}
        self._line(f"bcd-ansible: {self._cause()}: cleaning up what this run holds on {', '.join(hosts)} "
                   f"(at most {CLEANUP_SECONDS:.0f}s; Ctrl-C again stops it)", color="bright yellow")

        def stop(signum, frame):
            raise KeyboardInterrupt()

        # only the main thread sets handlers (the stall watch cleans up from its own thread)
        main = threading.current_thread() is threading.main_thread()
        for signum in (signal.SIGINT, signal.SIGTERM) if main else ():
            signal.signal(signum, stop)
        threads = [threading.Thread(target=self._clean_host, args=(h, done[h]), daemon=True) for h in hosts]
        deadline = time.monotonic() + CLEANUP_SECONDS
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            for h in hosts:
                done[h].append("FAILED: the clean-up was stopped by a second signal")
        else:
            for h, t in zip(hosts, threads, strict=True):
                if t.is_alive():
                    done[h].append(f"FAILED: the clean-up did not end within {CLEANUP_SECONDS:.0f}s")
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM) if main else ():
                signal.signal(signum, signal.SIG_DFL)
        return {h: list(done[h]) for h in hosts}

    # -- the last lines --------------------------------------------------------------------------
    def _cause(self) -> str:
        return f"interrupted by {self._signal}" + (f' during "{self._task}"' if self._task else "")

    def _line(self, line: str, color: str = "bright red") -> None:
        try:
            self._display.display(line, color=color, stderr=False)
        except Exception:  # noqa: BLE001 - at exit the display may be gone: the lines still matter
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _uses_left(self, host: str, token: dict) -> str:
        """The uses the token has left, as the control plane says; else at most its max uses."""
        try:
            s = self._settings(host)
            if s.cp is None:
                raise RuntimeError("bcd_control_plane_url is not set")
            said = _uses(s.cp.get_token(s.inv.bcd_tenant, token["id"]))
            if said:
                return said
            raise RuntimeError("its answer holds no uses")
        except Exception as exc:  # noqa: BLE001 - the bound is said instead, and why
            bound = f"at most {token['max_uses']} use(s) left" if token.get("max_uses") else "its uses left unknown"
            return f"{bound} (the control plane could not be asked: {' '.join(str(exc).split())[:200]})"

    def _say(self, cleaned: dict[str, list[str]] | None = None):
        cleaned = cleaned or {}
        hosts = sorted(set(self._locks) | set(self._tokens) | set(self._secrets))
        if self._said or not (hosts or cleaned):
            return
        self._said = True
        if self._signal:
            cause = self._cause()
        else:
            cause = "; ".join(f"{h}: {self._first[h]}" for h in hosts if h in self._first) or "its clean-up did not complete"
        command = _command()
        lines = []
        for host, steps in sorted(cleaned.items()):
            lines += [f"  {host}: {step}" for step in steps]
        if not hosts:
            done = "; ".join(f"{h}: {', '.join(x for x in steps if not x.startswith('FAILED'))}"
                             for h, steps in sorted(cleaned.items()))
            lines.append(f"bcd-ansible: {cause}; cleaned up ({done}); nothing of this run is left")
            for line in lines:
                self._line(line, color="bright yellow")
            return
        lines.append(f"bcd-ansible: this run left behind ({'it was ' + cause if self._signal else 'its clean-up failed'}):")
        left_short = []
        for host in hosts:
            parts = []
            token = self._tokens.get(host)
            if token:
                lines.append(f"  {host}: join token {token['id']} is still live: {self._uses_left(host, token)}, "
                             f"until {token.get('expires_at')} (it lapses then); anyone who reads it can join a node")
                parts.append(f"token {token['id']} (until {token.get('expires_at')})")
                if token.get("secret"):
                    lines.append(f"  {host}: Secret {token['secret']} holds it, until the next run deletes it")
                    parts.append(f"Secret {token['secret']}")
            elif host in self._secrets:
                lines.append(f"  {host}: Secret {self._secrets[host]} may still be there (its token is revoked), "
                             "until the next run deletes it")
                parts.append(f"Secret {self._secrets[host]}")
            lock = self._locks.get(host)
            if lock:
                lines.append(f"  {host}: the lock {lock['lease']} ({lock['holder']}) is held until {lock['until']} "
                             "(bcd_lock_ttl); once this process is gone, a run on this host takes it over at once")
                parts.append(f"the lock until {lock['until']}")
            left_short.append(f"{host}: {', '.join(parts)}")
        lines.append(f"  clean up: run `{command}` again (with your other options): it revokes the token, deletes "
                     "the Secret and takes over the lock")
        lines.append(f"bcd-ansible: {cause}; left: {'; '.join(left_short)}; `{command}` cleans them up")
        for line in lines:
            self._line(line)
