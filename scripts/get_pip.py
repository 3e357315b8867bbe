"""Stand-in for pip's get-pip.py bootstrap script, for ansible-test's --venv on machines that
reach PyPI but not the host ansible-test downloads get-pip.py from (scripts/sanity.sh puts it
in ansible-test's cache).

Called as get-pip.py is: ``python get_pip.py [pip install options] [requirements]``, plus the
get-pip-only flags --no-setuptools / --no-wheel. Installs the pip bundled with Python
(ensurepip), then runs ``pip install`` with the same arguments. ansible-test runs pip with a
cleaned environment, so the PIP_* settings of the caller (certificate, links; sanity.sh writes
them as PIP_ENV above this docstring) go to the new virtualenv's own pip.conf.
"""

import ensurepip
import os
import subprocess
import sys

PIP_ENV = globals().get("PIP_ENV", {})
OPTION = {"PIP_DEFAULT_TIMEOUT": "timeout"}
if PIP_ENV:
    lines = ["[global]"] + [f"{OPTION.get(k, k[4:].lower().replace('_', '-'))} = {v}" for k, v in sorted(PIP_ENV.items())]
    with open(os.path.join(sys.prefix, "pip.conf"), "w") as conf:
        conf.write("\n".join(lines) + "\n")
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap(upgrade=True)
sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", *args], env={**os.environ, **PIP_ENV},
                        check=False).returncode)
