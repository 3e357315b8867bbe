# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stdout callback concise: Ansible's default output without the lines that say nothing, and each
failure printed once."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: concise
type: stdout
short_description: Ansible's default output, without the lines that say nothing; each failure once
version_added: 1.1.0
description:
  - Ansible's default stdout callback (P(ansible.builtin.default#callback)), with its options. It
    differs only while C(display_ok_hosts) is false (as this repository's C(ansible.cfg) sets it) and
    the verbosity is 0 (no C(-v)).
  - A task that ends ok prints only when it has something to say - a message (M(ansible.builtin.debug)),
    a warning, a change - and then with its banner, as with C(display_ok_hosts) true. The default
    callback with C(display_ok_hosts) false would hide a message and an ok task's warnings too.
    The lines C(included - <file> for <host>) and the banners of include tasks are not printed.
  - A failure prints once, as its banner and C(fatal - [host] - <its message>); not also as an
    C([ERROR]) line with the task's source, nor with every key of its result (C(-v) shows them). A
    later failure of the same host whose message repeats an earlier one's (the last play of a
    playbook fails each failed cluster, naming the first failure) shows the repeat as
    C((the error above)).
  - The playbook's verdict (the last play's one line - what happened, to how many nodes, and the
    next command when anything is left or failed) is printed last, after the recap. A run that
    failed before its last play ends with a line that says so, naming the failed hosts.
  - With C(-v) or more the output is the default callback's with C(display_ok_hosts) true (every ok
    task prints); with C(display_ok_hosts) true (C(ANSIBLE_DISPLAY_OK_HOSTS=true)) it is the default
    callback's.
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - set as the stdout callback in configuration - C(stdout_callback = bcd.kubernetes.concise) and
    C(display_ok_hosts = False) in the C([defaults]) section of your C(ansible.cfg) (this
    repository's C(ansible.cfg) has them)
"""

import os

from ansible import constants as C
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible_collections.bcd.kubernetes.plugins.plugin_utils import bcd_compat
from ansible_collections.bcd.kubernetes.plugins.plugin_utils.bcd_inprocess import preload

# the collection's playbooks (root files, and playbooks/*.yml): each ends with its verdict
_PLAYBOOKS = frozenset(f"{name}.yml" for name in (
    "adopt-cluster", "add-nodes", "rollout", "audit", "doctor", "gpu-stack", "render", "release-cluster"))
# a repeat shorter than this is not worth a reference (a word, "failed")
_MIN_REPEAT = 40


def _fold(text: str) -> str:
    return " ".join(text.split())


def _failure(res: dict) -> str:
    """What a failed result says: its message; for an until-loop that ran out of attempts without
    one (ansible-core then supplies "Unknown error."), how many attempts it made."""
    msg = str(res.get("msg") or res.get("reason") or "")
    tries = res.get("attempts")
    if tries and (not msg or msg.endswith("Unknown error.")):
        return f"its condition did not hold after {tries} attempt(s) (-v shows its whole result)"
    return msg or "failed (-v shows its whole result)"


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "bcd.kubernetes.concise"

    def __init__(self):
        super().__init__()
        self._show_ok = False
        self._failures: dict[str, list[str]] = {}
        # the run's verdict (roles/fleet sets fleet_verdict, then prints it), held for the end
        self._verdict: str | None = None
        self._playbook = "the playbook"
        # the default callback's own helpers this class calls: on an ansible-core where they are
        # not as expected (or untested), it prints as the default callback, and says so once
        self._unavailable = bcd_compat.callback_unavailable(self)
        if self._unavailable:
            bcd_compat.note(self._unavailable, self._display)
        # our modules run in the forked workers (plugin_utils/bcd_inprocess.py): what they import
        # is loaded here, once, before the first fork
        preload()

    def get_option(self, k):
        # an ok result with something to say prints as the default callback prints it with
        # display_ok_hosts true (banner, "ok: [host] => msg", warnings); with -v every ok task
        # prints: verbose output hides nothing
        if k == "display_ok_hosts" and (self._show_ok or self._display.verbosity > 0):
            return True
        return super().get_option(k)

    def _quiet(self) -> bool:
        return not self._unavailable and self._display.verbosity == 0 and not super().get_option("display_ok_hosts")

    def _says(self, result) -> bool:
        return self._says_item(result.result)

    def _shown(self, method, result) -> None:
        self._show_ok = True
        try:
            method(result)
        finally:
            self._show_ok = False

    def v2_playbook_on_start(self, playbook):
        self._verdict = None
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "") or "the playbook"
        return super().v2_playbook_on_start(playbook)

    def _held(self, result) -> bool:
        """Whether ``result`` sets or prints the run's verdict, which is printed last (held here)."""
        res = result.result
        facts = res.get("ansible_facts") if isinstance(res, dict) else None
        if isinstance(facts, dict) and isinstance(facts.get("fleet_verdict"), str):
            self._verdict = facts["fleet_verdict"]
            return True
        return self._verdict is not None and res.get("msg") == self._verdict

    def v2_playbook_on_stats(self, stats):
        super().v2_playbook_on_stats(stats)
        if not self._quiet():
            return  # the verdict was printed where its task ran
        if self._verdict is not None:
            failed = " FAILED" in self._verdict or " NOT " in self._verdict
            color = C.COLOR_ERROR if failed else C.COLOR_WARN if "; next:" in self._verdict else C.COLOR_OK
            self._display.display(self._verdict, color=color)
            return
        # one of the collection's playbooks whose last play did not run (a failure no play noted):
        # say so, from the recap's counts
        hosts = sorted(h for h in stats.processed if stats.failures.get(h) or stats.dark.get(h))
        if hosts and self._playbook.replace("_", "-") in _PLAYBOOKS:
            # a root file (adopt-cluster.yml) by its name, playbooks/adopt_cluster.yml by its FQCN
            again = self._playbook if "_" not in self._playbook else f"bcd.kubernetes.{self._playbook[:-4]}"
            # named as every verdict names its playbook (audit:, adopt-cluster:)
            name = self._playbook.removesuffix(".yml").replace("_", "-")
            self._display.display(f"{name}: FAILED on {', '.join(hosts)} before its summary; next: fix the "
                                  f"error above, then ansible-playbook {again} again", color=C.COLOR_ERROR)

    def v2_runner_on_ok(self, result):
        if not self._quiet():
            return super().v2_runner_on_ok(result)
        if self._held(result):
            return None
        if isinstance(result.task, TaskInclude):
            return None  # "included:" says nothing an operator acts on
        if self._says(result) or (result.task.loop and any(self._says_item(r) for r in result.result.get("results") or [])):
            self._shown(super().v2_runner_on_ok, result)
        return None

    def _says_item(self, res) -> bool:
        """Whether a result has something to say: a change, a message, a warning. bcd's note that
        modules run as separate processes (every bcd task's, on an untested ansible-core) is the
        run's, not the task's: it is said once, here, and shows no task."""
        if not isinstance(res, dict):
            return False
        warned = False
        for warning in res.get("warnings") or []:
            text = bcd_compat.note_of(warning)
            if text:
                bcd_compat.note(text, self._display)
            else:
                warned = True
        return bool(res.get("changed") or res.get("_ansible_verbose_always") or warned or res.get("deprecations"))

    def v2_runner_item_on_ok(self, result):
        if not self._quiet():
            return super().v2_runner_item_on_ok(result)
        if self._says(result):
            self._shown(super().v2_runner_item_on_ok, result)
        return None

    def v2_playbook_on_include(self, included_file):
        if not self._quiet():
            super().v2_playbook_on_include(included_file)

    def v2_runner_item_on_failed(self, result):
        # an item's whole result can be a whole object (an until-loop of k8s_info); the message,
        # or the attempts made, says what failed, and the task's rescue says why: -v shows it all
        if not self._quiet():
            return super().v2_runner_item_on_failed(result)
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        res = result.result
        res.pop("exception", None)
        self._handle_warnings_and_exception(result)
        msg = _failure(res)
        self._display.display(f"failed: [{self.host_label(result)}] (item={self._get_item_label(res)}): {_fold(msg)}",
                              color=C.COLOR_ERROR, stderr=self.get_option("display_failed_stderr"))
        return None

    def v2_runner_on_failed(self, result, ignore_errors=False):
        res = result.result
        if not self._quiet() or (result.task.loop and "results" in res):
            return super().v2_runner_on_failed(result, ignore_errors)
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        # the [ERROR] line repeats the message with the task's source: -v shows it
        res.pop("exception", None)
        self._handle_warnings_and_exception(result)
        msg = _failure(res)
        host = result.host.get_name()
        folded, shown = _fold(msg), msg
        for earlier in self._failures.get(host, []):
            if len(earlier) >= _MIN_REPEAT and earlier in folded:
                folded = shown = folded.replace(earlier, "(the error above)")
        self._failures.setdefault(host, []).append(_fold(msg))
        self._display.display(f"fatal: [{self.host_label(result)}]: {shown}", color=C.COLOR_ERROR,
                              stderr=self.get_option("display_failed_stderr"))
        if ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)
        return None
