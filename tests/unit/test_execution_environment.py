"""The execution environment (execution-environment.yml) without a container engine:
``ansible-builder create`` writes the build context an image would be built from: it carries the
built collection, whose meta/execution-environment.yml gives ansible-builder the runtime Python
dependencies only, pinned as the repository pins them.

What counts as runtime is read from one place, the code: the third-party packages that
``plugins/`` imports (an import in an ``except ImportError`` fallback, such as ``tomli`` on older
Pythons, is not one). ansible-core and ansible-runner are not in that list: the EE installs them
itself (``dependencies.ansible_core`` and ``dependencies.ansible_runner``). Pins are read from every
``requirements*.txt`` at the top of the repository and under ``requirements/``, so the test does not
depend on how those files are split.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
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
    tops.discard("ansible_collections")  # collections' own code (ours, kubernetes.core): not from PyPI
    dists = packages_distributions()
    missing = sorted(t for t in tops if t not in dists)
    assert not missing, f"plugins/ imports {missing}, which no installed distribution provides"
    return {canonicalize_name(d) for t in tops for d in dists[t]}


def ee_python() -> str:
    """The EE's Python, ``major.minor``, from execution-environment.yml's interpreter path."""
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    found = re.search(r"python(\d+\.\d+)$", ee["dependencies"]["python_interpreter"]["python_path"])
    assert found, ee["dependencies"]["python_interpreter"]
    return found[1]


def build_ee():
    """scripts/build_ee.py, as `make ee` runs it."""
    spec = importlib.util.spec_from_file_location("build_ee", ROOT / "scripts" / "build_ee.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def repository_pins(python: str | None = None) -> dict[str, str]:
    """The version each requirement is pinned to, for the EE's Python (or ``python``): a pin whose
    environment marker excludes that Python (ansible-core's line for another Python) is not the EE's."""
    pins: dict[str, str] = {}
    python = python or ee_python()
    files = sorted(ROOT.glob("requirements*.txt")) + sorted((ROOT / "requirements").glob("*.txt"))
    for path in files:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"python_version": python}):
                continue
            spec = [s for s in req.specifier if s.operator == "=="]
            if spec:
                pins[canonicalize_name(req.name)] = spec[0].version
    return pins


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """The collection built as `make ee-context` builds it, where execution-environment.yml takes it."""
    out = tmp_path_factory.mktemp("build")
    run = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    (built,) = out.glob("bcd-kubernetes-*.tar.gz")
    # as `make ee` stages it (a tarball of the same contents is kept, so the image's layers stay cached)
    module = build_ee()
    dest = module.stage_collection(built)
    assert module._members_digest(dest) == module._members_digest(built)
    return dest


@pytest.fixture(scope="module")
def context(tmp_path_factory, tarball) -> Path:
    out = tmp_path_factory.mktemp("ee") / "context"
    run = subprocess.run([str(VENV_BIN / "ansible-builder"), "create", "-f", str(ROOT / "execution-environment.yml"),
                          "-c", str(out), "--output-filename", "Containerfile"],
                         cwd=str(ROOT), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def member(tarball: Path, name: str) -> str:
    with tarfile.open(tarball) as tar:
        return tar.extractfile(name).read().decode()


def test_the_build_context_carries_the_built_collection(context, tarball):
    copied = context / "_build" / "collections" / "bcd-kubernetes.tar.gz"
    assert copied.read_bytes() == tarball.read_bytes()
    built = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert {"name": "/build/collections/bcd-kubernetes.tar.gz", "type": "file"} in built["collections"]


def test_the_collection_declares_the_runtime_dependencies_only_pinned_as_the_repository_pins_them(tarball):
    # ansible-builder reads a collection's Python dependencies from its meta/execution-environment.yml
    meta = yaml.safe_load(member(tarball, "meta/execution-environment.yml"))
    lines = [ln.split("#", 1)[0].strip() for ln in member(tarball, meta["dependencies"]["python"]).splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln and not ln.startswith("-")]
    # ansible-builder's introspection leaves ansible-core out of a collection's requirements
    # (EXCLUDE_REQUIREMENTS): the EE installs it itself, at the version pinned above.
    reqs = [r for r in reqs if canonicalize_name(r.name) != "ansible-core"]
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


def test_make_ee_installs_the_ansible_core_requirements_txt_pins_for_its_python(context):
    """`make ee` builds the same context on Debian's Python (build_ee.BASE_PYTHON), not the
    definition's UBI one: requirements.txt's markers must pin the same ansible-core for both, or
    the image tested here would carry another line than the users' image."""
    containerfile = (context / "Containerfile").read_text()
    refs = dict(ref.split("==", 1) for ref in re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile,
                                                         re.M)[1].split())
    found = re.search(r"python(\d+\.\d+)$", build_ee().BASE_PYTHON)
    assert found, build_ee().BASE_PYTHON
    assert repository_pins(found[1])["ansible-core"] == refs["ansible-core"], (found[1], refs)


def test_the_collections_of_requirements_yml_reach_the_ee_from_the_local_copies(context, tarball):
    """No collection comes from Galaxy: requirements.yml's come from ./collections (``make setup``),
    each a directory in the context at its pinned version; kubernetes.core also satisfies the
    built collection's dependency."""
    built = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    sources = {c["name"]: c.get("type") for c in built["collections"]}
    assert set(sources.values()) <= {"file", "dir"}, f"a collection from Galaxy: {built['collections']}"
    deps = json.loads(member(tarball, "MANIFEST.json"))["collection_info"]["dependencies"]
    for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]:
        assert sources.get(f"/build/collections/{c['name']}") == "dir", f"{c['name']} is not in the EE: {built}"
        info = json.loads((context / "_build" / "collections" / c["name"] / "MANIFEST.json").read_text())
        info = info["collection_info"]
        assert (f"{info['namespace']}.{info['name']}", info["version"]) == (c["name"], str(c["version"]))
        if c["name"] in deps:
            assert SpecifierSet(deps[c["name"]]).contains(info["version"]), (c, deps)


def test_the_projects_ansible_cfg_leaves_the_ee_collections_on_the_search_path():
    """A job in the EE runs from a project checkout (no ./collections): ansible.cfg's
    collections_path must still reach the image's /usr/share/ansible/collections, or only AWX's
    own ANSIBLE_COLLECTIONS_PATH would save a run (ansible-navigator, ansible-runner alone)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    paths = cfg["defaults"]["collections_path"].split(":")
    assert paths[0] == "collections", paths
    assert "/usr/share/ansible/collections" in paths, paths
