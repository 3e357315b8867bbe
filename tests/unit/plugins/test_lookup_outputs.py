"""The bcd_inventory lookup makes relative output paths absolute against where ansible-playbook runs."""

from __future__ import annotations

import os

from ansible.template import Templar
from ansible_collections.bcd.kubernetes.plugins.lookup.bcd_inventory import LookupModule


def lookup(variables: dict) -> dict:
    plugin = LookupModule(templar=Templar(loader=None, variables=variables))
    (out,) = plugin.run([], variables=variables)
    return out


def test_relative_output_paths_are_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = lookup({"bcd_report_out": "reports/audit.json", "bcd_junit_out": "audit.xml",
                  "bcd_metrics_out": "/var/lib/node_exporter/bcd.prom", "bcd_render_out": "~/render.json",
                  "bcd_image": "relative/looking:1"})
    assert out["bcd_report_out"] == os.path.join(str(tmp_path), "reports/audit.json")
    assert out["bcd_junit_out"] == os.path.join(str(tmp_path), "audit.xml")
    assert out["bcd_metrics_out"] == "/var/lib/node_exporter/bcd.prom"  # absolute: as given
    assert out["bcd_render_out"] == "~/render.json"  # the model expands ~ itself
    assert out["bcd_image"] == "relative/looking:1"  # not an output file
