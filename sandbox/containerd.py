"""Real containerd, asked what a node root's configuration means (the GPU-isolation file judge's
oracle).

Builds: one containerd per loader family, from the Go module proxy into the sandbox's binary
cache (``~/.cache/bcd-ansible/bin/containerd-<version>``, with a ``.stamp`` as the Kubernetes
binaries have), ``CGO_ENABLED=0 -trimpath``, the release's version stamped as its own release
build does. 2.x builds with ``go install <module>/cmd/containerd@<version>``; 1.7's go.mod has
``exclude`` directives, which ``go install pkg@version`` refuses, so 1.7 builds from a copy of
its module. CGO off leaves out only cgo-only parts (the btrfs snapshotter); the config loader,
its version migration and the CRI plugin are the released code. A build takes about two minutes
on two cores; versions build one at a time, ``nice``d.

Asking (:func:`ask`): the root is copied to a scratch folder with the binary inside, so absolute
imports, relative ones, globs and symlinks resolve inside the root as on the node. Then

* ``containerd config dump`` under ``chroot`` (the merged configuration, each plugin's section
  decoded over its defaults); and
* the daemon itself, in a private mount namespace (``unshare --mount --propagation private``)
  with its own ``proc`` and tmpfs ``/run``, ``/tmp`` and ``/dev``, chrooted into the copy, until
  its log says it booted or it exits (10 seconds at most). It pulls and runs nothing. The
  machine's own ``/etc`` and ``/run`` are never touched; the namespace, and every mount in it,
  ends with the daemon.

From the log: whether containerd refused its configuration (and why), whether the CRI plugin
(``io.containerd.grpc.v1.cri``) loaded, and if it did not, why (disabled, a dependency disabled,
its configuration invalid). The CRI runtimes (name -> ``BinaryName``) and ``default_runtime_name``
come from the ``starting cri plugin`` line on 2.x (the daemon's own), from ``config dump`` on 1.7
(whose log prints Go's ``%+v``).

Answers are cached by (version, hash of the root's files) in
``~/.cache/bcd-ansible/bin/containerd-oracle/<version>/``, so a rerun costs seconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from contextlib import contextmanager
from pathlib import Path

from sandbox import oracle
from sandbox.build import BuildError, cache_dir

# One release per loader family: 1.7; 2.0-2.2; 2.3.0-2.3.4 (drop-in version check); 2.3.5+/2.4.
VERSIONS = ("1.7.35", "2.2.9", "2.3.4", "2.4.2")
# Bumped when what is read from containerd's answers changes: cached answers are then asked again.
ORACLE_SCHEMA = 3
BOOT_TIMEOUT = 10.0
CRI_ID = "io.containerd.grpc.v1.cri"
BIN_IN_ROOT = "/.bcd-oracle/containerd"


def module_of(version: str) -> str:
    return "github.com/containerd/containerd" if version.startswith("1.") else "github.com/containerd/containerd/v2"


def binary_path(version: str) -> Path:
    return cache_dir() / f"containerd-{version}"


def _ldflags(version: str) -> str:
    return f"-s -w -X {module_of(version)}/version.Version=v{version}"


def _stamp(version: str) -> str:
    return f"{version} {hashlib.sha256(_ldflags(version).encode()).hexdigest()[:16]}"


def cached(version: str) -> Path | None:
    path = binary_path(version)
    try:
        ok = Path(f"{path}.stamp").read_text().strip() == _stamp(version)
    except OSError:
        return None
    return path if ok and os.access(path, os.X_OK) else None


@contextmanager
def _lock(name: str = ".lock"):
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / name, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _go(say) -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("containerd build: `go` is not on PATH (install Go to build containerd from the module proxy)")
    return go


def _build(version: str, say) -> float:
    go = _go(say)
    out = cache_dir()
    log_path = out / f"build-containerd-{version}.log"
    say(f"containerd build: building containerd v{version} from the Go module proxy (log: {log_path})")
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false"}
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    tmp = Path(tempfile.mkdtemp(prefix=f".build-containerd-{version}-", dir=out))
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            if version.startswith("1."):
                # go install refuses a main module with exclude directives: build a copy of it.
                src = tmp / "src"
                oracle.writable_module(go, module_of(version), version, src, env, "containerd build")
                argv = [*nice, go, "build", "-trimpath", "-ldflags", _ldflags(version), "-o", str(tmp / "containerd"),
                        "./cmd/containerd"]
                rc = subprocess.run(argv, cwd=src, env={**env, "GOFLAGS": "-buildvcs=false -mod=mod"}, stdout=log,
                                    stderr=subprocess.STDOUT, check=False).returncode
            else:
                argv = [*nice, go, "install", "-trimpath", "-ldflags", _ldflags(version),
                        f"{module_of(version)}/cmd/containerd@v{version}"]
                rc = subprocess.run(argv, env={**env, "GOBIN": str(tmp)}, stdout=log, stderr=subprocess.STDOUT,
                                    check=False).returncode
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise BuildError(f"containerd build: v{version} failed (exit {rc}); the end of {log_path}:\n{tail}")
        Path(f"{binary_path(version)}.stamp").unlink(missing_ok=True)
        (tmp / "containerd").replace(binary_path(version))
        Path(f"{binary_path(version)}.stamp").write_text(_stamp(version) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - start
    say(f"containerd build: built containerd v{version} in {int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
    return elapsed


def resolve(versions=VERSIONS, say=None) -> tuple[dict[str, Path], float]:
    """Each version's binary, building the missing ones one at a time; and the seconds spent
    building."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out: dict[str, Path] = {v: cached(v) for v in versions}
    spent = 0.0
    if all(out.values()):
        return out, spent
    # its own lock: the sandbox's builds (the other lock) must not wait for these, nor these for them
    with _lock(".lock-containerd"):
        for v in versions:
            path = cached(v)
            if path is None:
                spent += _build(v, say)
                path = binary_path(v)
            out[v] = path
    return out, spent


# --- asking --------------------------------------------------------------------------------------

def tree_digest(root: Path) -> str:
    """Hash of a root's files and symlinks (paths relative to the root, contents, link targets)."""
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files + [x for x in dirs if os.path.islink(os.path.join(d, x))]):
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                h.update(b"L" + rel.encode() + b"\0" + os.readlink(p).encode() + b"\0")
            else:
                with open(p, "rb") as fh:
                    h.update(b"F" + rel.encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()[:32]


def answer_path(version: str, digest: str) -> Path:
    return cache_dir() / "containerd-oracle" / version / f"{digest}.json"


LOG_FIELD_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def _fields(line: str) -> dict:
    out = {}
    for k, v in LOG_FIELD_RE.findall(line):
        if v.startswith('"'):
            try:
                v = json.loads(v)
            except ValueError:
                v = v[1:-1]
        out[k] = v
    return out


def parse_log(lines: list[str]) -> dict:
    """What the daemon's log says about the CRI plugin (2.x logrus text and 1.7 alike)."""
    cri = "absent"  # not tried at all: disabled, or never reached
    error = None
    config = None
    for line in lines:
        f = _fields(line)
        msg = f.get("msg", "")
        pid = f.get("id") or ""
        if "loading plugin" in msg and (pid == CRI_ID or f'"{CRI_ID}"' in msg):
            if cri == "absent":
                cri = "loaded"
        elif ("failed to load plugin" in msg or "skip loading plugin" in msg) and (pid == CRI_ID or CRI_ID in msg):
            cri = "failed"
            error = f.get("error") or msg
        elif msg == "starting cri plugin" and f.get("config"):
            try:
                config = json.loads(f["config"])
            except ValueError:
                config = None
    return {"cri": cri, "cri_error": error, "cri_config": config}


def _runtimes_from_log(config: dict) -> tuple[dict, str | None]:
    runtimes = {}
    for name, rt in (config.get("containerd", {}).get("runtimes") or {}).items():
        opts = rt.get("options") or {}
        runtimes[name] = opts.get("BinaryName") or ""
    return runtimes, config.get("containerd", {}).get("defaultRuntimeName")


def _runtimes_from_dump(dump: dict, version: str) -> tuple[dict, str | None]:
    plugins = dump.get("plugins") or {}
    section = plugins.get("io.containerd.cri.v1.runtime" if not version.startswith("1.") else CRI_ID) or {}
    if version.startswith("1.") and not section:
        section = plugins.get("cri") or {}
    table = section.get("containerd") or {}
    runtimes = {}
    for name, rt in (table.get("runtimes") or {}).items():
        opts = rt.get("options") if isinstance(rt.get("options"), dict) else {}
        runtimes[name] = opts.get("BinaryName") or ""
    return runtimes, table.get("default_runtime_name")


def _boot(scratch: Path, log_path: Path) -> tuple[bool, int | None, list[str]]:
    """Run the daemon in a private mount namespace chrooted into ``scratch``: (booted, exit code
    when it exited by itself, its log lines)."""
    script = oracle.NAMESPACE_SETUP + f"mkdir -p var/lib/containerd\nexec chroot . {BIN_IN_ROOT} --log-level info\n"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "boot",
                                 str(scratch)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + BOOT_TIMEOUT
    booted = False
    rc = None
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if "containerd successfully booted" in text:
            booted = True
            break
        rc = proc.poll()
        if rc is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    if not booted:
        text = log_path.read_text(errors="replace")
        booted = "containerd successfully booted" in text
    return booted, (None if booted else rc), log_path.read_text(errors="replace").splitlines()


def _refusal(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith("containerd: "):
            return line[len("containerd: "):]
        f = _fields(line)
        if f.get("level") in ("fatal", "error") and (f.get("error") or f.get("msg")):
            return f.get("error") or f.get("msg")
    return lines[-1] if lines else "exited without a word"


def ask_uncached(binary: Path, version: str, root: Path) -> dict:
    with oracle.scratch_copy(root, "containerd-oracle-") as scratch:
        target = scratch / BIN_IN_ROOT.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(binary, target)
        except OSError:
            shutil.copy2(binary, target)
        dump = subprocess.run(["chroot", str(scratch), BIN_IN_ROOT, "config", "dump"], capture_output=True,
                              text=True, timeout=30, check=False)
        booted, rc, lines = _boot(scratch, scratch.parent / "log")
    dumped = None
    if dump.returncode == 0:
        try:
            dumped = tomllib.loads(dump.stdout)
        except tomllib.TOMLDecodeError:
            dumped = None
    out = {
        "version": version, "schema": ORACLE_SCHEMA, "booted": booted,
        "refusal": None if booted else _refusal(lines), "exit": rc,
        "dump_rc": dump.returncode, "dump_error": dump.stderr.strip()[-500:] if dump.returncode else None,
    }
    log = parse_log(lines) if booted else {"cri": "absent", "cri_error": None, "cri_config": None}
    out["cri"] = log["cri"]
    out["cri_error"] = log["cri_error"]
    runtimes, default = {}, None
    if booted and log["cri_config"] is not None:
        runtimes, default = _runtimes_from_log(log["cri_config"])
        out["runtimes_from"] = "daemon log"
    elif dumped is not None:
        runtimes, default = _runtimes_from_dump(dumped, version)
        out["runtimes_from"] = "config dump"
    out["runtimes"] = runtimes
    out["default_runtime"] = default
    out["log_tail"] = lines[-8:] if not booted else []
    return out


def ask(binary: Path, version: str, root: Path, digest: str | None = None) -> dict:
    """containerd ``version``'s answer for the node root ``root`` (cached; see the module)."""
    return oracle.cached(answer_path(version, digest or tree_digest(root)), ORACLE_SCHEMA,
                         lambda: ask_uncached(binary, version, root))


def can_run() -> str | None:
    """Why the daemon cannot be run here (None: it can): root, unshare and chroot are needed."""
    return oracle.cannot_unshare()
