#!/usr/bin/env bash
# The floor for render.yml: the same renderer (plugins/module_utils/bcd_model.py and
# bcd_render.py) called once from Python, without Ansible: validate the bcd_* variables, render
# the Namespace, ConfigMap and DaemonSet, write them as one v1 List to a new file.
#
# Inputs (environment): BCD_VARS (a JSON file of the bcd_* variables, as lookup('bcd_inventory')
# gives them), BCD_RENDER_OUT (a new file), PYTHON (default python3). Run from anywhere.
set -euo pipefail

: "${BCD_VARS:?}" "${BCD_RENDER_OUT:?}"
root=$(cd "$(dirname "$0")/../.." && pwd)
"${PYTHON:-python3}" - "$root" "$BCD_VARS" "$BCD_RENDER_OUT" <<'PY'
import json, sys
root, vars_file, out = sys.argv[1:4]
# the collection as make setup links it (collections/ansible_collections/bcd/kubernetes): the
# module_utils import each other by their collection names
sys.path.insert(0, f"{root}/collections")
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import load
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_render import as_list, dumps, render
inv = load(json.load(open(vars_file)), ("bcd_render_out",))
with open(f"{root}/templates/config.toml.j2", encoding="utf-8") as handle:
    objects = render(inv, handle.read())
with open(out, "x", encoding="utf-8") as handle:
    handle.write(dumps(as_list(objects)))
print(f"floor: {out}: " + ", ".join(o["kind"] for o in objects))
PY
