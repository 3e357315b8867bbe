"""Documentation that must not drift: README's variable table, argument specs, module docs."""

from __future__ import annotations

import ast
import re
import subprocess

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import KNOWN_VARIABLES

from tests.helpers import ROOT, VENV_BIN, ansible_env

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))


def readme_variables() -> set[str]:
    text = (ROOT / "README.md").read_text()
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
    run = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "module", module], cwd=ROOT, env=ansible_env(),
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0 and "ERROR" not in run.stderr, run.stderr
