#!/usr/bin/env python3
"""Install the Ansible collections pinned in requirements.yml into ./collections.

Galaxy first, when it answers; otherwise the same collection release is taken from the
``ansible`` package on PyPI, which ships it (these machines reach PyPI but not Galaxy).

Usage: install_collections.py [--dest DIR]
Exit status: 0 when every collection is present at its pinned version, 1 otherwise (the
reason is printed on one line).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The `ansible` release on PyPI that ships each pinned collection version (its
# ansible_collections/<ns>/<name>/MANIFEST.json says so; checked after extraction).
PYPI_RELEASE = {("kubernetes.core", "6.2.0"): "12.3.0", ("ansible.posix", "2.1.0"): "12.3.0"}


def installed_version(dest: Path, name: str) -> str | None:
    ns, coll = name.split(".")
    manifest = dest / "ansible_collections" / ns / coll / "MANIFEST.json"
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text())["collection_info"]["version"]


def from_galaxy(dest: Path) -> bool:
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    try:
        run = subprocess.run(
            [str(galaxy), "collection", "install", "-r", str(ROOT / "requirements.yml"),
             "-p", str(dest), "--timeout", "20"],
            capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


def from_pypi(dest: Path, wanted: list[tuple[str, str]]) -> None:
    releases: dict[str, list[str]] = {}
    for name, version in wanted:
        release = PYPI_RELEASE.get((name, version))
        if release is None:
            raise SystemExit(f"install_collections: no known `ansible` release on PyPI ships {name} {version}")
        releases.setdefault(release, []).append(name)
    for release, names in releases.items():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 f"ansible=={release}", "-d", tmp],
                check=True,
            )
            wheel = next(Path(tmp).glob("ansible-*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                members = zf.namelist()
                for name in names:
                    ns, coll = name.split(".")
                    prefix = f"ansible_collections/{ns}/{coll}/"
                    shutil.rmtree(dest / "ansible_collections" / ns / coll, ignore_errors=True)
                    for member in members:
                        if member.startswith(prefix) and not member.endswith("/"):
                            zf.extract(member, dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=str(ROOT / "collections"))
    args = parser.parse_args()
    dest = Path(args.dest)
    wanted = [(c["name"], str(c["version"]))
              for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]]
    missing = [(n, v) for n, v in wanted if installed_version(dest, n) != v]
    if not missing:
        return 0
    # ansible-galaxy also says "nothing to do" (exit 0) when a configured collections path has
    # them already: only what landed in dest counts
    if not from_galaxy(dest) or any(installed_version(dest, n) != v for n, v in missing):
        missing = [(n, v) for n, v in wanted if installed_version(dest, n) != v]
        print(f"install_collections: Galaxy did not install them in {dest}; taking them from PyPI's `ansible` package")
        from_pypi(dest, missing)
    for name, version in wanted:
        got = installed_version(dest, name)
        if got != version:
            print(f"install_collections: {name} is {got or 'absent'}, requirements.yml pins {version}")
            return 1
        print(f"install_collections: {name} {version} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
