"""Every task name the sandbox tests wait for is a task the playbooks have.

The reliability scenarios act when a run prints a task's banner (``Trigger``), and judge a run by
the banners it printed (``Run.reached``, ``Run.task_seconds``, ``task_end``). A task renamed in a
role leaves such a test injecting nothing, or asserting ``not reached`` of a banner that can never
print: it passes and shows nothing. Most of those tests run only in ``make test-long``, which CI
may not reach, so the names are checked here, statically, in ``make test``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

TESTS = ROOT / "tests"
# (callable name, index of the argument that names a task)
CALLS = {"Trigger": 0, "reached": 0, "task_seconds": 0, "task_end": 1}


def _names(tasks, out: list[str], prefix: str = "") -> None:
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        if task.get("name"):
            out.append(prefix + str(task["name"]))
        for key in ("block", "rescue", "always"):
            _names(task.get(key), out, prefix)


def banners() -> list[str]:
    """Every task's banner text as Ansible prints it (``<role FQCN> : <name>`` in a role)."""
    out: list[str] = []
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        _names(yaml.safe_load(path.read_text()), out, f"bcd.kubernetes.{path.parts[-3]} : ")
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                _names(play.get(key), out)
    # the argument validation Ansible adds before a role entry point's tasks
    out += [f"bcd.kubernetes.{p.parts[-3]} : Validating arguments against arg spec"
            for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")]
    return out


def _constants(tree: ast.Module) -> dict[str, object]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _parametrized(func: ast.FunctionDef | None, name: str) -> list[str] | None:
    """The values ``@pytest.mark.parametrize("<name>", [...])`` gives ``name`` on ``func``."""
    for deco in getattr(func, "decorator_list", []):
        if isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("parametrize") and deco.args:
            if ast.literal_eval(deco.args[0]) == name:
                return [v for v in ast.literal_eval(deco.args[1]) if isinstance(v, str)]
    return None


def wanted() -> list[tuple[str, str]]:
    """(where, task name) of every literal, module constant or parametrized value passed as a
    task name to one of ``CALLS`` in the tests."""
    out = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == Path(__file__).name:
            continue
        tree = ast.parse(path.read_text())
        consts = _constants(tree)
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fname = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if fname not in CALLS or len(node.args) <= CALLS[fname]:
                continue
            arg = node.args[CALLS[fname]]
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((where, arg.value))
            elif isinstance(arg, ast.Name) and isinstance(consts.get(arg.id), str):
                out.append((where, consts[arg.id]))
            elif isinstance(arg, ast.Name):
                func = node
                while func is not None and not isinstance(func, ast.FunctionDef):
                    func = parents.get(func)
                out += [(where, v) for v in _parametrized(func, arg.id) or []]
    return out


WANTED = wanted()
BANNERS = banners()


def test_the_check_finds_the_names_it_is_for():
    # the scan itself works: the triggers of the fault tests and the waits of the admission tests
    assert len(WANTED) > 15 and len(BANNERS) > 200, (len(WANTED), len(BANNERS))
    assert any(name == "Revoke the token and delete the Secret" for _, name in WANTED)


@pytest.mark.parametrize(("where", "name"), WANTED, ids=[f"{w}:{n[:40]}" for w, n in WANTED])
def test_a_task_name_a_test_waits_for_is_a_task_of_the_playbooks(where, name):
    assert any(name in banner for banner in BANNERS), (
        f"{where} waits for a task banner containing {name!r}, and no task of roles/ or playbooks/ has such a name "
        "(renamed?): the test would act or judge on nothing")
