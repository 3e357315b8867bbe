"""A private temporary directory per process, removed as the process ends, however it ends.

What a run writes to temporary files and must not leave behind: the CA, client certificate and
client key the kubernetes client writes from a kubeconfig's ``*-data`` fields (TLS needs them as
files), and the progress files a module appends to for its action plugin. The kubernetes client
removes its copies through ``atexit`` only, and every Ansible worker (where our modules run)
ends with ``os._exit``, which skips ``atexit``: each run would leave copies of the user's client
key in $TMPDIR.

:func:`private_dir` is removed by multiprocessing's exit finalizers, which run both at a normal
interpreter exit and as a multiprocessing child (an Ansible worker) ends. A process forked from
one that has a directory makes its own inside the parent's, so the parent's removal also takes
what a killed worker left (the stdout callback makes the run's directory before the first fork).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from multiprocessing import util as multiprocessing_util

# (pid, path) of this process's directory; a forked child inherits its parent's, and tells by pid
_DIR: tuple[int, str] | None = None


def private_dir() -> str:
    """This process's directory (mode 0700, under $TMPDIR or inside the parent process's own),
    made on first use. Raises OSError when it cannot be made."""
    global _DIR
    pid = os.getpid()
    if _DIR is not None and _DIR[0] == pid:
        return _DIR[1]
    parent = _DIR[1] if _DIR is not None and os.path.isdir(_DIR[1]) else None
    _DIR = (pid, tempfile.mkdtemp(prefix="bcd-tmp-", dir=parent))
    multiprocessing_util.Finalize(None, remove, exitpriority=0)
    return _DIR[1]


def remove() -> None:
    """Remove this process's directory and all in it (a forked child's call removes only its
    own). Idempotent; for a process about to end with ``os._exit``."""
    global _DIR
    if _DIR is None or _DIR[0] != os.getpid():
        return
    shutil.rmtree(_DIR[1], ignore_errors=True)
    _DIR = None
