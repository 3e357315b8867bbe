"""What each module run of a playbook spends on imports (``python -X importtime``).

    python -m bench.importtime adopt-cluster.yml [ansible-playbook arguments...]

Runs the playbook (with the environment it is given: inventory, sandbox) with every module's
Python started as ``python -X importtime`` (an interpreter wrapper given as
``ansible_python_interpreter``), then prints, per module run in order, the import time in
milliseconds split by package (self times summed, so the parts add up to the total), and the
median and the sum over the runs. Modules of bcd.kubernetes are told apart from kubernetes.core's
and ansible.builtin's by the module_utils they import.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)$")
GROUPS = (
    ("bcd module_utils", "ansible_collections.bcd."),
    ("kubernetes.core module_utils", "ansible_collections.kubernetes."),
    ("ansible", "ansible"),
    ("kubernetes client", "kubernetes"),
    ("pydantic", ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions")),
    ("urllib3/requests/oauthlib", ("urllib3", "requests", "oauthlib", "requests_oauthlib", "google", "certifi", "idna",
                                   "charset_normalizer", "dateutil", "six", "websocket", "durationpy")),
    ("yaml", "yaml"),
    ("jinja2", ("jinja2", "markupsafe")),
    ("cryptography", "cryptography"),
)


def group(name: str) -> str:
    for label, prefixes in GROUPS:
        for p in (prefixes,) if isinstance(prefixes, str) else prefixes:
            if name == p or name.startswith(p + ".") or (p.endswith(".") and name.startswith(p)):
                return label
    return "stdlib and other"


def parse(text: str) -> tuple[str, dict[str, float]]:
    """(which module, {group: ms}) of one run's importtime output."""
    parts: dict[str, float] = defaultdict(float)
    names = set()
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        names.add(m.group(4))
        parts[group(m.group(4))] += int(m.group(1)) / 1000
    if any(n.startswith("ansible_collections.bcd.") for n in names):
        kind = "bcd"
    elif any(n.startswith("ansible_collections.kubernetes.") for n in names):
        kind = "kubernetes.core"
    else:
        kind = "ansible.builtin"
    return kind, dict(parts)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bcd-importtime-") as tmp:
        wrapper = Path(tmp) / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -X importtime "$@" 2>>{tmp}/run.$$.log\n')
        wrapper.chmod(0o755)
        done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *argv,
                               "-e", f"ansible_python_interpreter={wrapper}"],
                              env=dict(os.environ), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-2000:], file=sys.stderr)
            return done.returncode
        logs = sorted(Path(tmp).glob("run.*.log"), key=lambda p: p.stat().st_mtime)
        runs = [parse(p.read_text()) for p in logs]
    labels = [g for g, _ in GROUPS] + ["stdlib and other"]
    print(f"{len(runs)} module runs; import ms per run, by package")
    print("| # | module | total | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 3) + "|")
    for i, (kind, parts) in enumerate(runs, 1):
        print(f"| {i} | {kind} | {sum(parts.values()):.0f} | " + " | ".join(f"{parts.get(g, 0):.0f}" for g in labels) + " |")
    for kind in ("bcd", "kubernetes.core", "ansible.builtin"):
        totals = [sum(p.values()) for k, p in runs if k == kind]
        if totals:
            print(f"{kind}: {len(totals)} runs, median {statistics.median(totals):.0f} ms, sum {sum(totals):.0f} ms")
    print(f"all: sum {sum(sum(p.values()) for _, p in runs):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
