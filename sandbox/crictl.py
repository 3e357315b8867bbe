"""crictl, the CRI's own command line, built for the kind test bed and the live judge's fixtures.

The kind node image carries no crictl (nor does this machine): molecule/kind/verify_runtime.yml
copies this one onto the worker it asks, so ``bcd_runtime_info`` reads ``crictl info`` (the
running containerd's own answer over CRI) rather than the daemon's start-up log line, and
tests/fixtures/containerd-live/capture.py runs it against the cached containerd releases.

Built from the Go module proxy as sandbox/containerd.py builds containerd: ``go install
sigs.k8s.io/cri-tools/cmd/crictl@v<VERSION>`` with ``CGO_ENABLED=0 -trimpath``, its version
stamped as its release build does (``-X .../pkg/version.Version``), into the sandbox's binary cache
(``~/.cache/bcd-ansible/bin/crictl`` with a ``crictl.stamp``; the log in ``build-crictl.log``).
A warm cache costs a stamp read; a cold build takes about a minute on two cores, ``nice``d.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox.build import BuildError, cache_dir
from sandbox.containerd import _lock

# The kind node runs Kubernetes 1.36; the proxy serves cri-tools 1.34.0 and 1.37.0 (no 1.36.x).
# crictl speaks CRI v1, which every containerd we test serves (1.6.20 in the node, 1.7, 2.x).
VERSION = "1.37.0"
MODULE = "sigs.k8s.io/cri-tools"


def binary_path() -> Path:
    return cache_dir() / "crictl"


def _ldflags(version: str = VERSION) -> str:
    return f"-s -w -X {MODULE}/pkg/version.Version={version}"


def _stamp(version: str = VERSION) -> str:
    return f"{version} {hashlib.sha256(_ldflags(version).encode()).hexdigest()[:16]}"


def cached() -> Path | None:
    """The cached crictl when its stamp names this VERSION and ldflags, else None."""
    path = binary_path()
    try:
        ok = Path(f"{path}.stamp").read_text().strip() == _stamp()
    except OSError:
        return None
    return path if ok and os.access(path, os.X_OK) else None


def _build(say) -> float:
    go = shutil.which("go")
    if not go:
        raise BuildError("crictl build: `go` is not on PATH (install Go to build crictl from the module proxy)")
    out = cache_dir()
    log_path = out / "build-crictl.log"
    say(f"crictl build: building crictl v{VERSION} from the Go module proxy (log: {log_path})")
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false"}
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    tmp = Path(tempfile.mkdtemp(prefix=".build-crictl-", dir=out))
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            argv = [*nice, go, "install", "-trimpath", "-ldflags", _ldflags(), f"{MODULE}/cmd/crictl@v{VERSION}"]
            rc = subprocess.run(argv, env={**env, "GOBIN": str(tmp)}, stdout=log, stderr=subprocess.STDOUT,
                                check=False).returncode
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise BuildError(f"crictl build: v{VERSION} failed (exit {rc}); the end of {log_path}:\n{tail}")
        Path(f"{binary_path()}.stamp").unlink(missing_ok=True)
        (tmp / "crictl").replace(binary_path())
        Path(f"{binary_path()}.stamp").write_text(_stamp() + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - start
    say(f"crictl build: built crictl v{VERSION} in {int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
    return elapsed


def resolve(say=None) -> Path:
    """The cached crictl, built first when the cache lacks it (a warm cache costs a stamp read)."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    path = cached()
    if path:
        return path
    with _lock(".lock-crictl"):
        path = cached()
        if path is None:
            _build(say)
            path = binary_path()
    return path


if __name__ == "__main__":
    print(resolve())
