"""Concurrency: adopt-cluster.yml runs started on one cluster at the same time all end with every
node joined and no token left unrevoked (the cluster's lock, a Lease, keeps them apart; the run
that waited counts the nodes again and mints only for those still missing)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.reliability.harness import Run, Runner, World

pytestmark = pytest.mark.sandbox


def together(runner: Runner, count: int, stagger: float = 0.5) -> list[Run]:
    runs: list[Run | None] = [None] * count
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            time.sleep(i * stagger)
            runs[i] = runner.run("adopt-cluster.yml")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return runs


def check(world: World, runs: list[Run], before: set[str]) -> dict:
    for run in runs:
        assert run.returncode == 0, run.tail()
    world.wait(world.all_joined, timeout=90, why="every GPU node to report")
    minted = [t for t in world.ours() if t["id"] not in before]
    assert minted and all(t["revokedAt"] for t in minted), minted
    assert world.clean(), world.state()
    return {"tokens minted": len(minted),
            "seconds taking the lock": [round(r.task_seconds("Take the cluster's lock"), 1) for r in runs],
            "seconds": [round(r.seconds, 1) for r in runs]}


@pytest.mark.long  # minutes: make test-long (see docs/reliability.md)
def test_two_runs_at_once(ready, runner, reliability):
    world = ready
    reliability.describe("Concurrency", "two adopt-cluster.yml runs started together (0.5 s apart), nodes to join")
    world.forget()
    before = {t["id"] for t in world.ours()}
    runs = together(runner, 2)
    figures = check(world, runs, before)
    reliability.result = "both succeeded; every node joined; every token revoked; no Secret, no lock left"
    reliability.figures.update(figures)


@pytest.mark.long
@pytest.mark.parametrize("count", [2, 3])
def test_runs_at_once_repeatedly(count, ready, runner, reliability):
    world = ready
    reliability.describe("Concurrency", f"{count} adopt-cluster.yml runs started together, three times, "
                         "with new nodes to join each time")
    totals = {"tokens minted": 0}
    for _ in range(3):
        world.forget()
        before = {t["id"] for t in world.ours()}
        runs = together(runner, count, stagger=0.2)
        figures = check(world, runs, before)
        totals["tokens minted"] += figures["tokens minted"]
    reliability.result = "every round: all succeeded, every node joined, every token revoked, nothing left"
    reliability.figures.update(totals)
