#!/usr/bin/python
# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module bcd_audit_report: write audit.yml's JSON report, JUnit XML and Prometheus textfile."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bcd_audit_report
version_added: 1.0.0
short_description: Write the audit's JSON report, JUnit XML and Prometheus textfile, for every cluster of the run
description:
  - "Takes the C(bcd_audit) results of every cluster of the run (and clusters whose audit could not
    run) and writes, each when its path is given, the JSON report (O(report_out),
    C({schema_version, started_at, finished_at, passed, failed_checks, clusters}), each result with
    its C(status); C(schema_version) is 1, and the collection's C(docs/reports.md) lists every key),
    JUnit XML (O(junit_out), one test case per check and node, so AWX, Jenkins or GitLab show
    failures; a warning is a C(WARNING) line of the suite's C(system-out)) and a Prometheus
    textfile (O(metrics_out), node-exporter textfile-collector format written with
    C(prometheus_client) - C(bcd_audit_check_ok{cluster,check,node}), 0 for a failed check,
    C(bcd_audit_check_warning{cluster,check,node}), 1 for a check that passed with a warning, and
    C(bcd_audit_last_run_timestamp_seconds)). Files are
    replaced whole on each run (a schedule rewrites them); they hold no secret."
  - A cluster whose audit could not run gets one failed C(audit) check naming the error.
  - "A check's C(status) is C(failed) when it did not pass, else C(warning) when it has something to
    say, else C(ok); the printed table (C(WARNING), C(FAILED), C(ok)), the JSON, the JUnit XML and
    the metrics all say the same for every check."
options:
  results:
    description: The M(bcd.kubernetes.bcd_audit) result C(results) of every cluster, concatenated.
    type: list
    elements: dict
    required: true
  errors:
    description: C({cluster, message}) for each cluster whose audit could not run.
    type: list
    elements: dict
    default: []
  started:
    description: Unix time the run started (default now).
    type: float
  report_out:
    description: Where to write the JSON report (C(bcd_report_out)).
    type: path
  junit_out:
    description: Where to write the JUnit XML (C(bcd_junit_out)).
    type: path
  metrics_out:
    description: Where to write the Prometheus textfile (C(bcd_metrics_out)); name it C(*.prom) for the textfile collector.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - bcd.kubernetes.attributes
attributes:
  check_mode:
    details: The files are written in check mode too; they are the audit's output, not a change to a cluster.
author:
  - bcd-ansible developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write the outputs
  bcd.kubernetes.bcd_audit_report:
    results: "{{ all_results }}"
    started: "{{ audit_started }}"
    junit_out: audit.xml
    metrics_out: /var/lib/node_exporter/textfile/bcd_audit.prom
"""

RETURN = r"""
failed_checks:
  description: How many checks failed, over every cluster.
  returned: success
  type: int
"""

import datetime
import json
import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_audit import junit_xml, status, write_metrics
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_report import REPORT_SCHEMA_VERSION


def _write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-audit-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def main() -> None:
    module = AnsibleModule(
        argument_spec={"results": {"type": "list", "elements": "dict", "required": True},
                       "errors": {"type": "list", "elements": "dict", "default": []},
                       "started": {"type": "float"},
                       "report_out": {"type": "path"}, "junit_out": {"type": "path"}, "metrics_out": {"type": "path"}},
        supports_check_mode=True,
    )
    p = module.params
    p["started"] = p["started"] or time.time()
    results = [dict(r) for r in p["results"]]
    for err in p["errors"]:
        results.append({"cluster": err["cluster"], "check": "audit", "node": "", "ok": False,
                        "message": f"the audit could not run: {err['message']}", "warning": False})
    for r in results:
        r["status"] = status(r)
    finished = time.time()
    failed = sum(1 for r in results if not r["ok"])
    clusters = {}
    for r in results:
        c = clusters.setdefault(r["cluster"], {"passed": True, "results": []})
        c["results"].append(r)
        c["passed"] = c["passed"] and r["ok"]
    try:
        if p["report_out"]:
            _write(p["report_out"], json.dumps({"schema_version": REPORT_SCHEMA_VERSION, "started_at": _iso(p["started"]),
                                                "finished_at": _iso(finished), "passed": failed == 0,
                                                "failed_checks": failed, "clusters": clusters}, indent=2) + "\n")
        if p["junit_out"]:
            _write(p["junit_out"], junit_xml(results, p["started"], finished - p["started"]))
        if p["metrics_out"]:
            write_metrics(p["metrics_out"], results, p["started"])
    except OSError as exc:
        module.fail_json(msg=f"writing the audit's outputs: {exc}")
    module.exit_json(changed=False, failed_checks=failed)


if __name__ == "__main__":
    main()
