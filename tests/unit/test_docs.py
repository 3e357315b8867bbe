"""Documentation that must not drift: the variable table (docs/variables.md), argument specs, module docs."""

from __future__ import annotations

import ast
import json
import re
import subprocess

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import KNOWN_VARIABLES

from tests.helpers import ROOT, VENV_BIN, ansible_env

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))


def readme_variables() -> set[str]:
    text = (ROOT / "docs" / "variables.md").read_text()
    return set(re.findall(r"^\| `(bcd_[a-z0-9_]+)` \|", text, flags=re.M))


def test_readme_table_lists_every_variable_of_the_model():
    assert readme_variables() == set(KNOWN_VARIABLES)


def test_argument_specs_name_only_model_variables():
    for spec_file in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"]
        for entry, spec in specs.items():
            for option in spec.get("options", {}):
                if option.startswith("bcd_") and not option.startswith("bcd_daemonset_"):
                    assert option in KNOWN_VARIABLES, f"{spec_file}:{entry}: {option} is not a model variable"


@pytest.mark.parametrize("module", MODULES)
def test_module_documentation_parses(module):
    tree = ast.parse((ROOT / "plugins" / "modules" / f"{module}.py").read_text())
    docs = {n.targets[0].id: n.value.value for n in tree.body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    doc = yaml.safe_load(docs["DOCUMENTATION"])
    assert doc["module"] == module and doc["short_description"] and doc["description"]
    yaml.safe_load(docs["EXAMPLES"])
    yaml.safe_load(docs["RETURN"])
    # a retired module's page warns of its deprecation (meta/runtime.yml); its docs must say so too
    # (test_modules.py checks the warning itself)
    extra = {"ANSIBLE_DEPRECATION_WARNINGS": "False"} if doc.get("deprecated") else {}
    if extra:
        assert doc["deprecated"]["removed_in"] and doc["deprecated"]["alternative"], doc["deprecated"]
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "module", f"bcd.kubernetes.{module}"], cwd=ROOT,
                         env=ansible_env(**extra), capture_output=True, text=True, check=False)
    assert run.returncode == 0 and "ERROR" not in run.stderr and "WARNING" not in run.stderr, run.stderr
    assert f"bcd.kubernetes.{module}" in run.stdout


class _Spec(Exception):
    pass


def _argument_spec(module: str) -> dict:
    """The module's argument_spec, as main() passes it to AnsibleModule (nothing else runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bcd_doc_{module}", ROOT / "plugins" / "modules" / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def capture(*args, **kwargs):
        raise _Spec(kwargs.get("argument_spec", args[0] if args else None))

    if not hasattr(mod, "AnsibleModule"):
        return {}  # an action plugin's documentation (bcd_warn): no module code
    mod.AnsibleModule = capture
    try:
        mod.main()
    except _Spec as exc:
        return exc.args[0]
    raise AssertionError(f"{module}: main() did not build an AnsibleModule")


@pytest.mark.parametrize("module", MODULES)
def test_documented_options_are_the_argument_spec(module):
    """What ansible-doc shows (fragments included) is what the module accepts, with the same
    types, defaults and choices (validate-modules cannot import our modules: see
    tests/sanity/ignore-2.19.txt)."""
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "--json", "-t", "module", f"bcd.kubernetes.{module}"], cwd=ROOT,
                         env=ansible_env(), capture_output=True, text=True, check=True)
    documented = json.loads(run.stdout)[f"bcd.kubernetes.{module}"]["doc"].get("options", {})
    accepted = _argument_spec(module)
    if module == "bcd_warn":
        assert set(documented) == {"msg"}
        return
    assert set(documented) == set(accepted), f"documented {sorted(documented)} != accepted {sorted(accepted)}"
    for name, spec in accepted.items():
        doc = documented[name]
        assert doc.get("type", "str") == spec.get("type", "str"), name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert bool(doc.get("required")) == bool(spec.get("required")), name


def test_readme_and_argument_specs_defaults_are_the_models():
    """docs/variables.md's Default column and the argument specs' default: come from the inventory model
    (scripts/gen_docs.py writes them); this fails when either drifts from it."""
    import sys

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("module", MODULES)
def test_attributes_come_from_the_doc_fragment(module):
    """The attributes every module shares live in the doc fragment bcd.kubernetes.attributes; a
    module's own attributes: block holds only what differs, and ansible-doc still shows all three
    with their support."""
    tree = ast.parse((ROOT / "plugins" / "modules" / f"{module}.py").read_text())
    doc = yaml.safe_load(next(n.value.value for n in tree.body
                              if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DOCUMENTATION"))
    assert "bcd.kubernetes.attributes" in doc["extends_documentation_fragment"]
    own = doc.get("attributes") or {}
    assert "platforms" not in (own.get("platform") or {}), "platforms comes from the fragment"
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "--json", "-t", "module", f"bcd.kubernetes.{module}"], cwd=ROOT,
                         env=ansible_env(), capture_output=True, text=True, check=True)
    shown = json.loads(run.stdout)[f"bcd.kubernetes.{module}"]["doc"]["attributes"]
    assert shown["platform"]["platforms"] == "posix" and shown["platform"]["details"].startswith("Runs on")
    assert shown["check_mode"]["support"] in ("full", "partial") and shown["check_mode"]["description"]
    assert shown["diff_mode"]["support"] in ("full", "partial", "none") and shown["diff_mode"]["description"]
    for name, value in own.items():  # a module's own word wins over the fragment's
        assert {k: shown[name][k] for k in value} == value, name


def _filters() -> dict:
    """Every filter the collection ships: name -> function, from each plugins/filter/*.py FilterModule."""
    import importlib

    found = {}
    for source in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        mod = importlib.import_module(f"ansible_collections.bcd.kubernetes.plugins.filter.{source.stem}")
        found.update(mod.FilterModule().filters())
    return found


FILTERS = sorted(_filters())


@pytest.mark.parametrize("name", FILTERS)
def test_every_filter_is_documented_as_ansible_doc_reads_it(name):
    """Each filter has DOCUMENTATION, EXAMPLES and RETURN in plugins/filter/<name>.yml (ansible-core's
    layout for filter plugins): ansible-doc -t filter shows it without a warning, and the options
    it documents are the function's parameters, in order, with their defaults."""
    import inspect

    assert (ROOT / "plugins" / "filter" / f"{name}.yml").is_file()
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "--json", "-t", "filter", f"bcd.kubernetes.{name}"], cwd=ROOT,
                         env=ansible_env(), capture_output=True, text=True, check=False)
    assert run.returncode == 0 and "WARNING" not in run.stderr and "ERROR" not in run.stderr, run.stderr
    entry = json.loads(run.stdout)[f"bcd.kubernetes.{name}"]
    doc = entry["doc"]
    assert doc["name"] == name and doc["short_description"] and doc["description"] and doc["version_added"]
    assert entry["examples"].strip() and f"bcd.kubernetes.{name}" in entry["examples"]
    assert entry["return"]["_value"]["description"] and entry["return"]["_value"]["type"]
    params = list(inspect.signature(_filters()[name]).parameters.values())
    positional = [p.strip() for p in doc["positional"].split(",")]
    assert positional == ["_input", *(p.name for p in params[1:])]
    assert set(doc["options"]) == set(positional)
    for p in params[1:]:
        if p.default is inspect.Parameter.empty:
            assert doc["options"][p.name].get("required") is True, p.name
        else:
            assert doc["options"][p.name].get("default") == p.default, p.name
    assert doc["options"]["_input"]["required"] is True


def test_ansible_doc_lists_every_filter():
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "filter", "-l", "bcd.kubernetes"], cwd=ROOT,
                         env=ansible_env(), capture_output=True, text=True, check=True)
    listed = sorted(line.split()[0].removeprefix("bcd.kubernetes.") for line in run.stdout.splitlines() if line.strip())
    assert listed == FILTERS
    assert "has a documentation formatting error" not in run.stderr and "WARNING" not in run.stderr, run.stderr
