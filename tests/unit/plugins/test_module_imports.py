"""Modules and module_utils import every module_utils at module scope.

mitogen's strategy (ANSIBLE_STRATEGY=mitogen_linear, docs/benchmarks.md) sends a module the
module_utils that its top level imports (mitogen.imports.codeobj_imports reads the module-level
bytecode only, and follows those files in turn); an import made inside a function is then resolved
from the target's own sys.path, which works on the controller by chance and fails on a remote node.
"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

FILES = sorted((ROOT / "plugins" / "modules").glob("*.py")) + sorted((ROOT / "plugins" / "module_utils").glob("*.py"))
OURS = ("ansible_collections.", "ansible.module_utils.")


def nested_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import of a module_utils made inside a function or a class."""
    out = []
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for node in ast.walk(scope):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            out.extend((node.lineno, n) for n in names if n.startswith(OURS) or n in ("ansible_collections",))
    return sorted(set(out))


def test_the_rule_sees_a_nested_import():
    tree = ast.parse("import os\n\ndef f():\n    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import load\n")
    assert nested_imports(tree) == [(4, "ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model")]
    assert nested_imports(ast.parse("try:\n    from ansible.module_utils.basic import AnsibleModule\nexcept ImportError:\n    pass\n")) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_module_utils_are_imported_at_module_scope(path):
    found = nested_imports(ast.parse(path.read_text(), filename=str(path)))
    assert not found, f"{path.name}: module_utils imported inside a function (mitogen cannot ship them): {found}"
