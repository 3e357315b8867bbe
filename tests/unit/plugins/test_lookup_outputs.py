"""The bcd_inventory lookup makes relative output paths absolute against where ansible-playbook runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import ROOT

# In a process of its own: a Templar set up in the test process changes how later in-process
# module runs report their warnings.
SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible.template import Templar
from ansible_collections.bcd.kubernetes.plugins.lookup.bcd_inventory import LookupModule
variables = json.loads(sys.argv[2])
(out,) = LookupModule(templar=Templar(loader=None, variables=variables)).run([], variables=variables)
print(json.dumps(out))
"""


def lookup(variables: dict, cwd) -> dict:
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "collections"), json.dumps(variables)],
                         cwd=str(cwd), capture_output=True, text=True, timeout=60, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_relative_output_paths_are_against_the_working_directory(tmp_path):
    out = lookup({"bcd_report_out": "reports/audit.json", "bcd_junit_out": "audit.xml",
                  "bcd_metrics_out": "/var/lib/node_exporter/bcd.prom", "bcd_render_out": "~/render.json",
                  "bcd_image": "relative/looking:1"}, tmp_path)
    assert out["bcd_report_out"] == os.path.join(str(tmp_path), "reports/audit.json")
    assert out["bcd_junit_out"] == os.path.join(str(tmp_path), "audit.xml")
    assert out["bcd_metrics_out"] == "/var/lib/node_exporter/bcd.prom"  # absolute: as given
    assert out["bcd_render_out"] == "~/render.json"  # the model expands ~ itself
    assert out["bcd_image"] == "relative/looking:1"  # not an output file
