"""Interruption: SIGINT, SIGTERM and SIGKILL at each step of adopt-cluster.yml.

A signal ends ansible-playbook before its ``always:`` can run (Ansible stops at once on SIGINT
and SIGTERM, and SIGKILL cannot be caught), so a run killed after the mint leaves its token
unrevoked, the Secret in place and the lock held by a process that is gone. The promise: the
next run finds the stale token by its description, revokes it, deletes the Secret, takes the
lock over, and completes.

The scenarios are chains: before each run the control plane forgets the nodes (so every run
mints), each run is killed at its step, and every run that gets past "Revoke the tokens an
earlier run on this cluster left behind" must have revoked every token the killed runs before
it left. A last run completes: every node reports, no token of the chain is unrevoked, no
Secret, no lock. ``make test`` runs one chain of three (one per signal, at the steps where the
most is left behind); ``make test-long`` runs each signal at every step.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT
from tests.reliability.harness import Run, Runner, Trigger, World, paused, reap, send

pytestmark = pytest.mark.sandbox

# The banner after the cleanup of earlier runs' tokens: a run that printed it has revoked them.
AFTER_CLEANUP = "Count again the nodes that do not report"


def steps() -> list[str]:
    """The names of adopt-cluster.yml's own tasks, in order (blocks and always: included; the
    play holds lock -> work -> always revoke, report, release), and of the bcd_daemonset entry
    points before the lock that hold several steps (preflight, todo). Not a rescue: a run that
    completes never reaches one."""
    out = []
    role_tasks = ROOT / "roles" / "bcd_daemonset" / "tasks"
    flow = {"preflight", "todo"}

    def walk(tasks, given=None):
        for task in tasks or []:
            if "block" in task:
                walk(task["block"], given)
                walk(task.get("always"), given)
                continue
            out.append(task["name"])
            role = task.get("ansible.builtin.include_role") or {}
            target = role.get("tasks_from") if role.get("name") == "bcd.kubernetes.bcd_daemonset" else None
            target = target or task.get("ansible.builtin.include_tasks")
            if isinstance(target, str) and target.startswith("{{"):
                target = (given or {}).get(target.strip("{} "))
            if target in flow:
                name = target if target.endswith(".yml") else f"{target}.yml"
                walk(yaml.safe_load((role_tasks / name).read_text()), {**(given or {}), **task.get("vars", {})})

    for play in yaml.safe_load(Path(ROOT / "playbooks" / "adopt_cluster.yml").read_text()):
        walk(play.get("tasks"))
    return out


# Steps a run that mints reaches (the nothing-to-do block is skipped, but its banners print).
STEPS = steps()


def forget_for_good(world: World, settle: float = 3.0, timeout: float = 90) -> None:
    """The control plane forgets every GPU node until none reports again for ``settle`` s: a
    killed run's Secret may hold a token with uses left, with which the pods join again at once
    (each rejoin uses it up), and the next run would then find nothing to do."""
    def joined() -> list[str]:
        return [n for n, state in world.reporting().items() if state in ("adopting", "ready", "draining")]

    deadline = time.monotonic() + timeout
    while True:
        world.forget()
        quiet_until = time.monotonic() + settle
        while time.monotonic() < quiet_until and not joined():
            time.sleep(0.5)
        if not joined():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the nodes kept joining again for {timeout}s: {joined()}")


def kill_and_check(world: World, runner: Runner, sig: signal.Signals, step: str, delay: float,
                   stale: dict[str, str], nth: int = 1) -> tuple[Run, dict]:
    """One link of a chain: forget the nodes, run, send ``sig`` ``delay`` s after the ``nth``
    banner naming ``step`` (at the banner, with the run stopped while it is sent, for the last
    step: it may end sooner). ``stale``: token id -> run id of the tokens killed runs left
    unrevoked so far (updated)."""
    forget_for_good(world)
    known = {t["id"] for t in world.ours()}
    action = send(sig)
    if step == STEPS[-1]:
        action, delay = paused(action), 0.0
    run = runner.run("adopt-cluster.yml", triggers=[Trigger(step, action, delay=delay, nth=nth)])
    killed = reap(run)
    assert run.signalled == sig.name, f"the run ended before {step!r} ({run.returncode}):\n{run.tail()}"
    at = run.output.find("Traceback")
    assert at < 0, run.output[max(0, at - 1500):at + 3000]  # the traceback with the tasks before it
    tokens = {t["id"]: t for t in world.ours()}
    if run.reached(AFTER_CLEANUP):
        # past the cleanup of earlier runs: every token they left is revoked now
        still = [i for i in stale if not tokens[i]["revokedAt"]]
        assert not still, f"killed at {step!r}, after the cleanup step: tokens of earlier runs still unrevoked: {still}"
        stale.clear()
    for tid, tok in tokens.items():
        if tid not in known and not tok["revokedAt"]:
            stale[tid] = tok["run"]
    left = world.state()
    return run, {"step": step, "signal": sig.name, "rc": run.returncode, "unrevoked": len(left["unrevoked"]),
                 "secret": left["secret"], "lock": bool(left["lease"]), "workers killed after": len(killed)}


def finish(world: World, runner: Runner, stale: dict[str, str]) -> Run:
    """The run after the chain completes and leaves nothing behind."""
    run = runner.run("adopt-cluster.yml")
    assert run.returncode == 0, run.tail()
    if stale:
        assert f"Revoked {len(stale)} stale token(s)" in run.text, run.tail()
    world.wait(world.all_joined, timeout=90, why="every GPU node to report")
    tokens = {t["id"]: t for t in world.ours()}
    assert all(tokens[i]["revokedAt"] for i in stale), {i: tokens[i] for i in stale}
    assert world.clean(), world.state()
    return run


def summary(links: list[dict]) -> str:
    return "; ".join(f"{x['signal']}@{x['step'][:40]}: left {x['unrevoked']} token(s)"
                     f"{', Secret' if x['secret'] else ''}{', lock' if x['lock'] else ''}" for x in links)


# Where the most is left behind: after the mint (token + Secret + lock), while waiting for the
# nodes, and inside always: while this run revokes its own token.
CHAIN = [
    (signal.SIGKILL, "Say which token was minted", 0.2),
    (signal.SIGTERM, "Wait for every selected node to report", 0.3),
    (signal.SIGINT, "Revoke this run's join token and delete its Secret", 0.1),
]


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_signals_after_the_mint_and_the_next_run_cleans_up(ready, runner, reliability):
    world = ready
    reliability.describe("Interruption", "SIGKILL after the mint, SIGTERM in the node wait, SIGINT in the revoke; "
                         "then a run to the end")
    stale: dict[str, str] = {}
    links = [kill_and_check(world, runner, sig, step, delay, stale)[1] for sig, step, delay in CHAIN]
    assert links[0]["unrevoked"] >= 1 and links[0]["secret"] and links[0]["lock"], links[0]
    finish(world, runner, stale)
    reliability.result = f"{summary(links)}; every stale token revoked by the next run; the last run completed clean"
    reliability.figures.update({"killed runs": len(links), "tokens left by killed runs (all revoked later)":
                                sum(x["unrevoked"] for x in links)})


def kill_points() -> list[tuple[str, int]]:
    """Every step of adopt-cluster.yml as (banner text, which occurrence), and inside the steps
    that include a role, the task that does the work (the mint, the revokes, the waits)."""
    out, seen = [], {}
    skipped = ("Say so", "Stop here for this cluster", "Say what check mode cannot dry-run")  # never reached here
    for name in STEPS:
        seen[name] = seen.get(name, 0) + 1
        if name not in skipped:
            out.append((name, seen[name]))
        for inner in ROLE_WORK.get(name, ()):
            out.append((inner, 1))
    return out


ROLE_WORK = {
    "Revoke the tokens an earlier run on this cluster left behind": ["Revoke stale join tokens of earlier runs"],
    "Mint the join token into its Secret": ["Mint a hosted join token into its Secret"],
    "Wait for the DaemonSet's rollout": ["bcd_daemonset : Wait for the DaemonSet to roll out"],
    "Revoke the token and delete the Secret": ["Revoke this run's join token and delete its Secret"],
}
KILL_POINTS = kill_points()


CHUNK = 11  # kill points per test (a test may not start once the CI's time budget is used up)
CHUNKS = [KILL_POINTS[i:i + CHUNK] for i in range(0, len(KILL_POINTS), CHUNK)]


@pytest.mark.long
@pytest.mark.parametrize("chunk", range(len(CHUNKS)), ids=lambda i: f"steps{i * CHUNK + 1}-{i * CHUNK + len(CHUNKS[i])}")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_at_every_step(sig, chunk, ready, runner, reliability):
    world = ready
    points = CHUNKS[chunk]
    first = chunk * CHUNK + 1
    reliability.describe("Interruption", f"{sig.name} at steps {first}-{first + len(points) - 1} of the "
                         f"{len(KILL_POINTS)} of adopt-cluster.yml ({points[0][0][:30]}... to {points[-1][0][:30]}...), "
                         "one run per step, then a run to the end")
    stale: dict[str, str] = {}
    links = []
    for step, nth in points:
        links.append(kill_and_check(world, runner, sig, step, 0.3, stale, nth=nth)[1])
    finish(world, runner, stale)
    reliability.result = ("killed at every step; every token a killed run left was revoked by the next run past the "
                          "cleanup step; the last run completed clean")
    reliability.figures.update({
        "left a token": sum(1 for x in links if x["unrevoked"]),
        "left the Secret": sum(1 for x in links if x["secret"]),
        "left the lock": sum(1 for x in links if x["lock"]),
        "workers killed after the grace": sum(x["workers killed after"] for x in links),
    })
