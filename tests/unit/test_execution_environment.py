"""The execution environment (execution-environment.yml) without a container engine:
``ansible-builder create`` writes the build context an image would be built from, and its Python
requirements hold the runtime dependencies only, pinned as the repository pins them.

What counts as runtime is read from one place, the code: the third-party packages that
``plugins/`` imports (an import in an ``except ImportError`` fallback, such as ``tomli`` on older
Pythons, is not one). ansible-core and ansible-runner are not in that list: the EE installs them
itself (``dependencies.ansible_core`` and ``dependencies.ansible_runner``). Pins are read from every
``requirements*.txt`` at the top of the repository and under ``requirements/``, so the test does not
depend on how those files are split.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import ROOT, VENV_BIN

# The EE installs these with dependencies.ansible_core / ansible_runner, not from the Python list.
INSTALLED_BY_THE_EE = {"ansible-core", "ansible-runner"}
# Never in the image: tests, linters, the sandbox, the builder itself.
DEVELOPMENT = {"pytest", "pytest-testinfra", "hypothesis", "molecule", "ansible-lint", "ruff", "starlette", "uvicorn",
               "ansible-builder"}


def imported_distributions() -> set[str]:
    """Distributions of the third-party modules plugins/ imports (fallback imports left out)."""
    tops: set[str] = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        tree = ast.parse(path.read_text())
        fallback = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                    for h in t.handlers for n in ast.walk(h)}
        for node in ast.walk(tree):
            if id(node) in fallback:
                continue
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                tops.add(node.module.split(".")[0])
    tops -= set(sys.stdlib_module_names)
    dists = packages_distributions()
    missing = sorted(t for t in tops if t not in dists)
    assert not missing, f"plugins/ imports {missing}, which no installed distribution provides"
    return {canonicalize_name(d) for t in tops for d in dists[t]}


def repository_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    files = sorted(ROOT.glob("requirements*.txt")) + sorted((ROOT / "requirements").glob("*.txt"))
    for path in files:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            req = Requirement(line)
            spec = [s for s in req.specifier if s.operator == "=="]
            if spec:
                pins[canonicalize_name(req.name)] = spec[0].version
    return pins


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ee") / "context"
    run = subprocess.run([str(VENV_BIN / "ansible-builder"), "create", "-f", str(ROOT / "execution-environment.yml"),
                          "-c", str(out), "--output-filename", "Containerfile"],
                         cwd=str(ROOT), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_build_context_holds_the_runtime_dependencies_only_pinned_as_the_repository_pins_them(context):
    lines = [ln.split("#", 1)[0].strip() for ln in (context / "_build" / "requirements.txt").read_text().splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln]
    names = {canonicalize_name(r.name) for r in reqs}
    runtime = imported_distributions() - INSTALLED_BY_THE_EE
    assert names == runtime, f"in the EE but not imported by plugins/: {sorted(names - runtime)}; " \
                             f"imported but missing from the EE: {sorted(runtime - names)}"
    assert not names & DEVELOPMENT
    pins = repository_pins()
    for r in reqs:
        versions = [s.version for s in r.specifier if s.operator == "=="]
        assert versions, f"{r}: not pinned"
        assert pins.get(canonicalize_name(r.name)) == versions[0], \
            f"{r}: the repository pins {r.name}=={pins.get(canonicalize_name(r.name))}"


def test_ansible_core_and_ansible_runner_are_the_versions_the_repository_pins(context):
    containerfile = (context / "Containerfile").read_text()
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M)
    assert refs, containerfile[:2000]
    pins = repository_pins()
    installed = dict(ref.split("==", 1) for ref in refs[1].split())
    assert installed == {"ansible-core": pins["ansible-core"], "ansible-runner": pins["ansible-runner"]}


def test_the_collections_of_requirements_yml_are_installed(context):
    built = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    ours = yaml.safe_load((ROOT / "requirements.yml").read_text())
    have = {(c["name"], str(c.get("version"))) for c in built.get("collections", [])}
    for c in ours["collections"]:
        assert (c["name"], str(c.get("version"))) in have, f"{c['name']} {c.get('version')} is not in the EE"
