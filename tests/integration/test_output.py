"""What a run prints, through the shipped ansible.cfg (the stdout callback bcd.kubernetes.concise,
display_ok_hosts and display_skipped_hosts false): `make demo`'s adoption (adopt-cluster.yml on a
cluster not adopted yet) in at most 200 lines with the per-node report last, then the verdict; a
failure printed once in full, with the per-node report and the failures in the last lines, then
the verdict naming the next command. Line counts are
output, not timing."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_playbook

pytestmark = pytest.mark.sandbox

DEMO_LINES = 200
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3")


def lines_of(run) -> list[str]:
    return (run.stdout + run.stderr).rstrip().splitlines()


def after_report(stdout: str) -> list[str]:
    """The non-empty stdout lines after the per-node report's last line."""
    lines = stdout.rstrip().splitlines()
    # the report's line starts with the count (the verdict, last, counts them too, after its words)
    end = max(i for i, line in enumerate(lines) if re.match(r"\W*\d+ of \d+ selected nodes report", line))
    return [line for line in lines[end + 1:] if line.strip()]


def test_the_demo_adoption_fits_in_200_lines_and_ends_with_the_per_node_report(sandbox, cp, cpvars):
    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    run = run_playbook("adopt-cluster.yml")  # make demo's adoption step
    lines = lines_of(run)
    assert run.returncode == 0, "\n".join(lines[-60:])
    assert len(lines) <= DEMO_LINES, f"{len(lines)} lines:\n" + "\n".join(lines)
    assert not [line for line in lines if line.startswith(("skipping:", "included:"))]
    # what the operator needs is there: the token minted and revoked, the rollout, each node
    flat = " ".join(run.stdout.split())
    assert "Minted join token" in flat and "Revoked 1 token(s)" in flat, flat[-3000:]
    for node in NODES:
        assert re.search(rf"- {node}\s+node_\S+\s+adopting", run.stdout), run.stdout[-3000:]
    # then only the last play's banner, the recap and the verdict, last
    after = after_report(run.stdout)
    assert after[0].startswith("PLAY [Sum up the fleet]") and after[1].startswith("PLAY RECAP"), after
    assert len(after) == 4 and after[2].startswith("sandbox "), after
    assert re.fullmatch(r"adopt-cluster: cluster sandbox adopted: 3 of 3 selected nodes report to the control plane"
                        r"(, 3 joined by this run)?", after[3]), after


def test_a_failure_is_printed_once_in_full_and_last_with_the_per_node_report(sandbox, cp, cpvars, tmp_path):
    """gpu-node-3's join is refused: the node wait fails, naming it. Its message is printed once
    (not again as an [ERROR] with the task's source, nor in full by the last play that fails the
    cluster); the per-node report and the failures are the last lines before the recap."""
    from sandbox.control_plane.admin import Admin

    sandbox.unadopt(cp, cpvars["bcd_tenant"], cpvars["bcd_pool"])
    admin = Admin.for_sandbox(sandbox.dir)
    admin.set_faults({"refuseJoin": {"gpu-node-3": "maintenance"}})
    try:
        run = run_playbook("adopt-cluster.yml", "-e", "bcd_join_timeout=60")
    finally:
        admin.clear_faults()
    lines = lines_of(run)
    (tmp_path / "adopt.log").write_text(run.stdout + run.stderr)
    assert run.returncode != 0, "\n".join(lines[-60:])
    assert len(lines) <= DEMO_LINES, f"{len(lines)} lines:\n" + "\n".join(lines)
    fatal = [i for i, line in enumerate(lines) if line.startswith("fatal: [sandbox]:")]
    assert len(fatal) == 2, [lines[i] for i in fatal]
    # a failure's message runs to the next empty line
    first = "\n".join(lines[fatal[0]:lines.index("", fatal[0])])
    fleet = lines[fatal[1]]
    assert "gpu-node-3" in first, first
    # the reason, in full, once: the last play names the failed task and points to it
    reason = " ".join(first.split(": ", 1)[1].split())
    # the verdict (stdout's last line) names the reason again, cut short, as the next step's
    verdict = run.stdout.rstrip().splitlines()[-1]
    assert " ".join((run.stdout + run.stderr).replace(verdict, "", 1).split()).count(reason) == 1, reason
    assert "(the error above)" in fleet and "failed at" in fleet, fleet
    assert not [line for line in lines if line.startswith(("[ERROR]", "Origin:"))]
    # last: the failure, the revocation, the per-node report, the cluster failed; then the recap
    out = run.stdout.rstrip().splitlines()
    start = out.index(lines[fatal[0]])
    assert len(out) - start <= 40, "\n".join(out[start:])
    assert re.search(r"- '?gpu-node-3\s+-", "\n".join(out[start:])), "\n".join(out[start:])
    after = after_report(run.stdout)
    assert after[0].startswith("PLAY [Sum up the fleet]") and after[2] == fleet and after[3].startswith("PLAY RECAP"), after
    # last, the verdict: not adopted, how many nodes report, and what to run next
    assert len(after) == 6 and after[5] == verdict, after
    assert re.fullmatch(r"adopt-cluster: cluster sandbox NOT adopted; 2 of 3 selected nodes report to the control plane"
                        r"(, [12] joined by this run)?; "
                        r"next: fix .+, then ansible-playbook adopt-cluster.yml again", verdict), verdict
