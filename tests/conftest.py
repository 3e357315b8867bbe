"""Shared pytest set-up: make our module_utils importable as Ansible imports them."""

from __future__ import annotations

import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = ROOT / "plugins" / "module_utils"
if str(MODULE_UTILS) not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(MODULE_UTILS))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
