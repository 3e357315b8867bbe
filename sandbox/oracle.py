"""What the runtime oracles share (sandbox/containerd.py, sandbox/crio.py): a scratch copy of a
node root, the private mount namespace a daemon runs in, a writable copy of a Go module, whether
this machine can do that at all, and the answer cache.

A daemon runs in a private mount namespace (``unshare --mount --propagation private``) chrooted
into the copy, with its own ``proc`` and tmpfs ``/run``, ``/tmp`` and ``/dev``
(:data:`NAMESPACE_SETUP`): the machine's own ``/etc``, ``/run`` and ``/var/lib`` are never
touched, and every mount ends with the namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from sandbox.build import BuildError

# The start of every daemon's script, run by `sh -c` under unshare with the copy as "$1".
NAMESPACE_SETUP = (
    'set -e\ncd "$1"\nmkdir -p proc run tmp dev\nmount -t proc proc proc\n'
    "for d in run tmp dev; do mount -t tmpfs -o mode=0755 tmpfs $d; done\n"
    "mknod -m 666 dev/null c 1 3\n"
)
MOUNTS = ("proc", "run", "tmp", "dev")


@contextmanager
def scratch_copy(root: Path, prefix: str):
    """A copy of the node root ``root`` (symlinks kept, so they resolve inside it as on the node),
    yielded as ``<work>/root``; removed afterwards, unless a mount is still on it (the mounts live
    in the daemon's namespace and end with it: never delete through one)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    scratch = work / "root"
    try:
        shutil.copytree(root, scratch, symlinks=True)
        yield scratch
    finally:
        if not any(os.path.ismount(scratch / d) for d in MOUNTS):
            shutil.rmtree(work, ignore_errors=True)


def writable_module(go: str, module: str, version: str, dst: Path, env: dict, what: str) -> None:
    """Download ``module`` at ``v<version>`` from the module proxy (``go mod download``) and copy it
    from Go's read-only module cache to ``dst``, writable (a build with ``-mod=mod`` writes go.sum;
    scripts keep their execute bit). Raises BuildError naming ``what`` when the download fails."""
    dl = subprocess.run([go, "mod", "download", "-json", f"{module}@v{version}"], env=env, capture_output=True,
                        text=True, check=False)
    if dl.returncode != 0:
        raise BuildError(f"{what}: go mod download of v{version} failed: {dl.stderr or dl.stdout}")
    shutil.copytree(json.loads(dl.stdout)["Dir"], dst)
    for d, _, files in os.walk(dst):
        os.chmod(d, 0o700)
        for f in files:
            os.chmod(os.path.join(d, f), 0o700 if f.endswith(".sh") else 0o600)


def cannot_unshare(tools: tuple[str, ...] = ("unshare", "chroot", "mknod")) -> str | None:
    """Why a daemon cannot run here in a private mount namespace and chroot, or None."""
    if os.geteuid() != 0:
        return "not root: running a daemon in a private mount namespace and chroot needs root"
    for tool in tools:
        if not shutil.which(tool):
            return f"`{tool}` is not on PATH"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        return f"unshare --mount is refused here ({probe.stderr.strip() or probe.returncode})"
    return None


def cached(path: Path, schema: int, ask: Callable[[], dict]) -> dict:
    """The answer stored at ``path`` when it has ``schema``, else ``ask()``'s, stored there
    (atomically); ``cached`` says which."""
    try:
        answer = json.loads(path.read_text())
        if answer.get("schema") == schema:
            answer["cached"] = True
            return answer
    except (OSError, ValueError):
        pass
    answer = ask()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(answer, indent=1, sort_keys=True))
    tmp.replace(path)
    answer["cached"] = False
    return answer
