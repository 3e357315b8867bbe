# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: refuse a run of a bcd playbook that would run only part of it."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def limits(cliargs) -> list[str]:
    """The command-line options of ``cliargs`` (ansible-playbook's parsed options) that would run part
    of a playbook, each as it was given. The playbooks tag no task, so ``--tags`` runs them only when
    it selects ``all`` or ``untagged``, and ``--skip-tags`` skips one only when it names ``all``,
    ``untagged`` or ``always`` (Ansible tags the roles' argument validation ``always``; any other tag
    skipped skips nothing: molecule skips ``notest``); ``--start-at-task``
    skips every task before the one named; ``--step`` lets whoever answers its prompts skip any task
    (the join token's revocation among them)."""
    said = []
    tags = [str(t) for t in cliargs.get("tags") or ()]
    if tags and not {"all", "untagged"} & set(tags):
        said.append("--tags " + ",".join(tags))
    skip = [str(t) for t in cliargs.get("skip_tags") or ()]
    if {"all", "untagged", "always"} & set(skip):
        said.append("--skip-tags " + ",".join(skip))
    start = cliargs.get("start_at_task")
    if start:
        said.append(f"--start-at-task {start!r}")
    if cliargs.get("step"):
        said.append("--step")
    return said


def _cliargs():
    # ansible.context is not a plugin API: where it is missing or reads differently, nothing is
    # refused (the run goes on as Ansible runs it), never a traceback
    try:
        from ansible import context

        args = context.CLIARGS
        args.get("tags")
    except Exception:  # noqa: BLE001 - any failure of a private API means: cannot tell
        return {}
    return args


def bcd_whole_run(pattern: str) -> str:
    """Return the play's host ``pattern`` unchanged, or raise ``AnsibleFilterError`` naming the
    options that would run part of the playbook (see :func:`limits`), with the fix."""
    said = limits(_cliargs())
    if said:
        raise AnsibleFilterError(
            f"{' and '.join(said)}: bcd playbooks run whole, and this run was refused before any change. Their "
            "parts stand on each other (validation, the cluster's choice, the lock, the join token's "
            "revocation, the waits, the gates), and they tag no task. Run the playbook without "
            "--tags, --start-at-task and --step; --check --diff shows what a run would change.")
    return pattern


class FilterModule:
    def filters(self):
        return {"bcd_whole_run": bcd_whole_run}
