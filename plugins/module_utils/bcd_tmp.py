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

A module run as a process of its own (not in ansible-playbook or its workers: :data:`RUN_PROCESS`)
also registers the directory's removal as AnsibleModule does its own temporary directory
(``atexit.register(shutil.rmtree, ...)``): a host that keeps the process between tasks or ends it
with ``os._exit`` (mitogen's strategy) runs those as the task ends. A directory removed while the process goes on is made again on next use; the kubernetes
client writes its files again when the ones it remembers are gone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from multiprocessing import util as multiprocessing_util

# (pid, path) of this process's directory; a forked child inherits its parent's, and tells by pid
_DIR: tuple[int, str] | None = None
# True in ansible-playbook and the workers it forks (set before the first fork): their
# directories go by multiprocessing's finalizers only. An atexit entry there would be inherited
# by a child forked outside multiprocessing, whose exit would take the parent's directory.
RUN_PROCESS = False


def private_dir() -> str:
    """This process's directory (mode 0700, under $TMPDIR or inside the parent process's own),
    made on first use. Raises OSError when it cannot be made."""
    global _DIR
    pid = os.getpid()
    if _DIR is not None and _DIR[0] == pid and os.path.isdir(_DIR[1]):
        return _DIR[1]
    if _DIR is None:
        parent = None
    elif _DIR[0] == pid:  # removed at a task's end while the process goes on: made again beside
        parent = os.path.dirname(_DIR[1])
    else:  # a forked child: inside the parent's, so the parent's removal takes it
        parent = _DIR[1]
    _DIR = (pid, tempfile.mkdtemp(prefix="bcd-tmp-", dir=parent if parent and os.path.isdir(parent) else None))
    multiprocessing_util.Finalize(None, remove, exitpriority=0)
    if not RUN_PROCESS:
        # a module's process: a host that keeps it between tasks or ends it with os._exit
        # (mitogen) runs this form of atexit entry as the task ends
        atexit.register(shutil.rmtree, _DIR[1], True)
    return _DIR[1]


def remove() -> None:
    """Remove this process's directory and all in it (a forked child's call removes only its
    own). Idempotent; for a process about to end with ``os._exit``."""
    global _DIR
    if _DIR is None or _DIR[0] != os.getpid():
        return
    shutil.rmtree(_DIR[1], ignore_errors=True)
    _DIR = None
