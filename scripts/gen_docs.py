#!/usr/bin/env python3
"""Write the inventory model's defaults into docs/variables.md's table and into the `default:`
of every bcd_* option in roles/*/meta/argument_specs.yml, so neither drifts from the model.

Only plain defaults (a string, a number, a boolean) are written; a variable that is required,
has no default or a structured one keeps the words of the table (for example "every node")
and no `default:` in the argument specs. The descriptions stay as written.

Usage: gen_docs.py [--check]   (--check: change nothing, exit 1 naming what differs)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import Inventory  # noqa: E402


def plain_defaults() -> dict[str, str]:
    """bcd_* variable -> its default as YAML writes it, for the plain ones."""
    out = {}
    for name, field in Inventory.model_fields.items():
        if field.is_required():
            continue
        value = field.get_default(call_default_factory=True)
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, int) and name.endswith(("_timeout", "_ttl")):
            out[name] = duration(value)
        elif isinstance(value, (int, float)) or (isinstance(value, str) and value):
            out[name] = str(value)
    return out


def duration(seconds: int) -> str:
    """Seconds as the inventory writes durations: 1h, 30m, 45s."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def readme(text: str, defaults: dict[str, str]) -> str:
    def row(m: re.Match) -> str:
        name = m.group(1)
        if name not in defaults:
            return m.group(0)
        return f"| `{name}` | `{defaults[name]}` |{m.group(3)}"
    return re.sub(r"(?m)^\| `(bcd_[a-z0-9_]+)` \| ([^|]*) \|(.*)$", row, text)


def argument_specs(text: str, defaults: dict[str, str]) -> str:
    def option(m: re.Match) -> str:
        indent, name, body = m.group(1), m.group(2), m.group(3)
        body = re.sub(r"type: raw, default: (\"[^\"]*\"|[^,}]*)", "type: raw", body, count=1).strip()
        if name in defaults:
            value = defaults[name]
            body = body.replace("type: raw", f"type: raw, default: {_yaml_scalar(value)}", 1)
        return f"{indent}{name}: {{{body}}}"
    return re.sub(r"(?m)^( +)(bcd_(?!daemonset_)[a-z0-9_]+): \{(.*)\}$", option, text)


def _yaml_scalar(value: str) -> str:
    if value in ("true", "false") or re.fullmatch(r"-?[0-9.]+", value):
        return value
    return f'"{value}"'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    defaults = plain_defaults()
    stale = []
    targets = [(ROOT / "docs" / "variables.md", readme)] + [(p, argument_specs) for p in sorted(ROOT.glob("roles/*/meta/argument_specs.yml"))]
    for path, rewrite in targets:
        old = path.read_text()
        new = rewrite(old, defaults)
        if new != old:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new)
    if stale and args.check:
        print("gen_docs: the model's defaults differ in " + ", ".join(stale) + "; run scripts/gen_docs.py")
        return 1
    if stale:
        print("gen_docs: wrote " + ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
