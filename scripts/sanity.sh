#!/usr/bin/env bash
# `make lint`: ansible-test sanity (the tests that need no container) on this collection.
# ansible-test wants the collection at .../ansible_collections/bcd/kubernetes and follows no
# symlink there, so it runs on the built collection, unpacked in a temp directory. Each sanity test runs in its own virtualenv (--venv) with the pinned tools
# ansible-test brings (pylint, yamllint, ...), which pip takes from PyPI on the first run and
# keeps under ~/.ansible/test/venv. Ignored checks and their reasons: tests/sanity/ignore-<ansible-core line>.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/.venv/bin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/bcd/kubernetes
mkdir -p "$dest"
# what the collection ships (galaxy.yml's build_ignore leaves out the sandbox, the bench, the
# tests and local state), plus the sanity ignore file
"$BIN/ansible-galaxy" collection build --force --output-path "$work" "$ROOT" >/dev/null
tar -C "$dest" -xzf "$work"/bcd-kubernetes-*.tar.gz
mkdir -p "$dest/tests/sanity"
cp "$ROOT"/tests/sanity/ignore-*.txt "$dest/tests/sanity/" 2>/dev/null || true
cd "$dest"
# ansible-test bootstraps pip in each venv with get-pip.py from a host outside PyPI; where that
# host is not reached, our stand-in (scripts/get_pip.py) does the same from PyPI.
pip_version=$(sed -n "s/^ *pip='\\([0-9.]*\\)',\$/\\1/p" "$("$BIN/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py" | head -1)
if [ -n "$pip_version" ]; then
  cache=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
  mkdir -p "$(dirname "$cache")"
  { printf 'PIP_ENV = %s\n' "$("$BIN/python" -c 'import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("PIP_")}))')"
    cat "$ROOT/scripts/get_pip.py"; } > "$cache"
fi
# The sanity venvs use the Python of $BIN's ansible-core (3.11 for 2.19 in .venv; 3.12 or later for
# 2.20 and later), made from the interpreter that venv was made from (so no pythonX.Y on PATH is
# needed); each ansible-core line reads its own tests/sanity/ignore-<major.minor>.txt.
python=$(readlink -f "$BIN/python")
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# ansible-test pins each sanity tool's requirements in its own data; a line that is a direct URL
# outside PyPI (2.22's pylint takes dill from a GitHub commit) cannot be installed where only PyPI
# is reached: then ansible-test runs from a copy in which that line names the package on PyPI.
ansible_test=("$BIN/ansible-test")
at_dir=$("$BIN/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
unreached=$("$BIN/python" - "$at_dir"/_data/requirements/sanity.*.txt <<'PY'
import re, sys, urllib.request
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"^([A-Za-z0-9_.-]+) @ (https?://\S+?)(#.*)?$", line.strip())
        if not m or m.group(2).startswith("https://files.pythonhosted.org/"):
            continue
        try:
            urllib.request.urlopen(urllib.request.Request(m.group(2), method="HEAD"), timeout=10).close()
        except OSError:
            print(m.group(1), m.group(2))
PY
)
if [ -n "$unreached" ]; then
  mkdir -p "$work/ansible-test"
  cp -r "$at_dir" "$work/ansible-test/"
  # ansible-test finds ansible-core's lib beside itself
  ln -s "$(dirname "$at_dir")/ansible" "$work/ansible-test/ansible"
  while read -r name url; do
    echo "sanity: ansible-test's requirement '$name @ $url' is not reachable here: $name from PyPI instead"
    sed -i "s|^$name @ .*|$name|" "$work"/ansible-test/ansible_test/_data/requirements/sanity.*.txt
  done <<< "$unreached"
  ansible_test=("$BIN/python" -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = "ansible-test"
from ansible_test._util.target.cli.ansible_test_cli_stub import main; main()' "$work/ansible-test")
fi
"${ansible_test[@]}" sanity --python "$version" --python-interpreter "$python" --venv --color no "$@"
