"""Real CRI-O, asked what a node root's configuration means (the GPU-isolation file judge's oracle
for CRI-O, as sandbox/containerd.py is for containerd).

Builds: CRI-O from the Go module proxy (``github.com/cri-o/cri-o``, by exact version: the proxy
refuses the version list) into the sandbox's binary cache, ``~/.cache/bcd-ansible/bin/crio-<version>``
and ``pinns-<version>`` (its C helper, ``make -C pinns``, static), each with a ``.stamp``. The
module is not vendored and its go.mod needs ``-mod=mod``, so it builds from a writable copy.
``CGO_ENABLED=0`` with the build tags that leave out only cgo-only parts (GPGME signatures,
ostree, btrfs and devicemapper storage): the configuration loader, its validation and the
daemon's start are the released code. A build takes about 8 minutes on two cores, ``nice``d.

Asking (:func:`ask`): the node root is copied to a scratch folder and what a node has besides its
configuration is added where the root has nothing at that path (a stand-in the root holds for
one of them is replaced by the real binary): Debian's ``conmon``, ``runc``, ``crun`` and
``nsenter`` with the libraries they load, ``/var/run`` as a link to ``/run``, and CRI-O with its
``pinns`` in ``/.bcd-oracle/bin`` (last on $PATH). CRI-O validates its runtimes
only when the daemon starts (``crio config`` alone accepts what the daemon refuses), so the
daemon runs, in a private mount namespace (``unshare --mount --propagation private``) with its own
``proc`` and tmpfs ``/run``, ``/tmp`` and ``/dev``, chrooted into the copy, with vfs storage and
no host-port mapping (it needs no iptables). Once its socket answers, ``crio status config`` asks
it for the configuration it runs with. Nothing is pulled or run; the machine's own ``/etc``,
``/run`` and ``/var/lib`` are never touched, and the namespace ends with the daemon.

The answer: whether the daemon started, or why not (its fatal line); the files it read (its
"Updating config from drop-in file" lines, in order); the runtime handlers it kept (name ->
``runtime_path``, as it resolved them) and ``default_runtime``; and each handler it dropped,
with its reason ("is being ignored due to"). Cached by (version, hash of the root's files) in
``~/.cache/bcd-ansible/bin/crio-oracle/<version>/``.

Serving (:func:`serve`): the same daemon left running on a copy, for bcd_runtime_info's probe to
ask as on a node (:class:`Daemon` runs commands in its namespace and root).
"""

from __future__ import annotations

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
from sandbox.containerd import _lock, tree_digest

VERSIONS = ("1.34.0", "1.36.3")
MODULE = "github.com/cri-o/cri-o"
TAGS = ("containers_image_ostree_stub", "containers_image_openpgp", "exclude_graphdriver_btrfs",
        "exclude_graphdriver_devicemapper")
# Bumped when what is read from CRI-O's answers changes: cached answers are then asked again.
ORACLE_SCHEMA = 1
BOOT_TIMEOUT = 20.0
BIN_DIR = "/.bcd-oracle/bin"
OUT_DIR = "/.bcd-oracle/out"
# The $PATH of the daemon (a systemd unit's default, then the oracle's own binaries).
PATH = f"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:{BIN_DIR}"
# What a CRI-O node has besides its configuration (Debian's packages conmon, runc, crun, util-linux).
NODE_BINARIES = ("conmon", "runc", "crun", "nsenter")
PACKAGES = {"conmon": "conmon", "runc": "runc", "crun": "crun", "nsenter": "util-linux"}
# how can_run ends a reason that `crio build` removes by installing Debian's packages
INSTALLABLE = "what a CRI-O node runs; `python -m sandbox crio build` installs them)"
# Where a node root may hold a stand-in of one (tests/crio_configs.py): the real binary goes there
NODE_PATHS = {"conmon": ("/usr/bin/conmon",), "runc": ("/usr/sbin/runc", "/usr/bin/runc"), "crun": ("/usr/bin/crun",)}


def binary_path(version: str, name: str = "crio") -> Path:
    return cache_dir() / f"{name}-{version}"


def _recipe(version: str) -> str:
    return f"{version} CGO_ENABLED=0 -trimpath -s -w tags={','.join(TAGS)}"


def _stamp(version: str) -> str:
    return f"{version} {hashlib.sha256(_recipe(version).encode()).hexdigest()[:16]}"


def cached(version: str) -> tuple[Path, Path] | None:
    """(crio, pinns) of ``version`` when both are built by this recipe, else None."""
    out = []
    for name in ("crio", "pinns"):
        path = binary_path(version, name)
        try:
            ok = Path(f"{path}.stamp").read_text().strip() == _stamp(version)
        except OSError:
            return None
        if not ok or not os.access(path, os.X_OK):
            return None
        out.append(path)
    return out[0], out[1]


def _build(version: str, say) -> float:
    go = shutil.which("go")
    if not go:
        raise BuildError("CRI-O build: `go` is not on PATH (install Go to build CRI-O from the module proxy)")
    for tool in ("make", "cc"):
        if not shutil.which(tool):
            raise BuildError(f"CRI-O build: `{tool}` is not on PATH (pinns is C: Debian's make and gcc build it)")
    out = cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / f"build-crio-{version}.log"
    say(f"CRI-O build: building CRI-O v{version} from the Go module proxy (log: {log_path})")
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false -mod=mod"}
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    tmp = Path(tempfile.mkdtemp(prefix=f".build-crio-{version}-", dir=out))
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            src = tmp / "src"
            oracle.writable_module(go, MODULE, version, src, env, "CRI-O build")
            steps = [
                [*nice, go, "build", "-trimpath", "-tags", " ".join(TAGS), "-ldflags", "-s -w", "-o", str(tmp / "crio"),
                 "./cmd/crio"],
                [*nice, "make", "-C", "pinns"],
            ]
            for argv in steps:
                rc = subprocess.run(argv, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
                if rc != 0:
                    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                    raise BuildError(f"CRI-O build: v{version}: {' '.join(argv[len(nice):][:3])} failed (exit {rc}); "
                                     f"the end of {log_path}:\n{tail}")
        for name, built in (("crio", tmp / "crio"), ("pinns", src / "bin" / "pinns")):
            target = binary_path(version, name)
            Path(f"{target}.stamp").unlink(missing_ok=True)
            shutil.copy2(built, target)
            Path(f"{target}.stamp").write_text(_stamp(version) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.monotonic() - start
    say(f"CRI-O build: built CRI-O v{version} in {int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
    return elapsed


def resolve(versions=VERSIONS, say=None) -> tuple[dict[str, tuple[Path, Path]], float]:
    """Each version's (crio, pinns), building the missing ones one at a time; and the seconds spent
    building."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = {v: cached(v) for v in versions}
    spent = 0.0
    if all(out.values()):
        return out, spent
    with _lock(".lock-crio"):
        for v in versions:
            if cached(v) is None:
                spent += _build(v, say)
            out[v] = cached(v)
    return out, spent


# --- asking --------------------------------------------------------------------------------------

def answer_path(version: str, digest: str) -> Path:
    return cache_dir() / "crio-oracle" / version / f"{digest}.json"


def _libraries(binary: str) -> list[str]:
    run = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
    return re.findall(r"(/\S+) \(0x", run.stdout) if run.returncode == 0 else []


def _place(src: str | Path, scratch: Path, at: str, replace: bool = False) -> None:
    """``src`` at ``at`` inside ``scratch``, unless the root has something there already (and not
    ``replace``: a stand-in the root holds for a node binary is replaced by the real one)."""
    target = scratch / at.lstrip("/")
    if os.path.lexists(target):
        if not replace:
            return
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(os.path.realpath(src), target)
    except OSError:
        shutil.copy2(src, target)


def _furnish(scratch: Path, crio: Path, pinns: Path) -> None:
    for name in NODE_BINARIES:
        found = shutil.which(name)
        _place(found, scratch, found)
        for at in NODE_PATHS.get(name, ()):
            if os.path.lexists(scratch / at.lstrip("/")):
                _place(found, scratch, at, replace=True)
        for path in _libraries(found):
            _place(path, scratch, path)
    if not os.path.lexists(scratch / "var" / "run"):
        (scratch / "var").mkdir(exist_ok=True)
        os.symlink("../run", scratch / "var" / "run")
    _place(crio, scratch, f"{BIN_DIR}/crio")
    _place(pinns, scratch, f"{BIN_DIR}/pinns")


# "$2": the daemon's $PATH, "$3": where it writes what it says, "$4": where crio is (in the copy)
BOOT = oracle.NAMESPACE_SETUP + r"""mkdir -p "./$3"
export PATH="$2"
chroot . "$4/crio" --storage-driver vfs --log-level info --disable-hostport-mapping > "./$3/daemon.log" 2>&1 &
pid=$!
while :; do
  if [ -S run/crio/crio.sock ] && chroot . "$4/crio" status --socket /run/crio/crio.sock config \
      > "./$3/config.toml" 2> "./$3/status.err"; then
    echo answered > "./$3/state"
    break
  fi
  if ! kill -0 $pid 2>/dev/null; then
    rc=0; wait $pid || rc=$?
    echo "exited $rc" > "./$3/state"
    exit 0
  fi
  sleep 0.05
done
kill -9 $pid
"""

LOG_RE = re.compile(r'level=(\w+) msg="((?:[^"\\]|\\.)*)"')


def _messages(text: str) -> list[tuple[str, str]]:
    out = []
    for level, msg in LOG_RE.findall(text):
        try:
            msg = json.loads(f'"{msg}"')
        except ValueError:
            pass
        out.append((level, msg))
    return out


def parse(log: str, config: str | None) -> dict:
    """What the daemon's log and ``crio status config`` say (see the module)."""
    messages = _messages(log)
    read = [m.split(": ", 1)[1] for _, m in messages if m.startswith("Updating config from drop-in file: ")]
    skipped = [m for _, m in messages if m.startswith("Skipping not-existing config file")]
    dropped = {}
    for _, m in messages:
        found = re.match(r'Runtime handler "([^"]+)" is being ignored due to: (.*)', m, re.S)
        if found:
            dropped[found.group(1)] = found.group(2)
    fatal = next((m for level, m in reversed(messages) if level == "fatal"), None)
    out = {"read": [p for p in read if not any(f'"{p}"' in s for s in skipped)], "dropped": dropped,
           "refusal": fatal, "runtimes": {}, "default_runtime": None}
    if config is not None:
        runtime = tomllib.loads(config).get("crio", {}).get("runtime", {})
        out["runtimes"] = {name: rt.get("runtime_path", "") for name, rt in (runtime.get("runtimes") or {}).items()}
        out["default_runtime"] = runtime.get("default_runtime")
    return out


def ask_uncached(crio: Path, pinns: Path, version: str, root: Path) -> dict:
    with oracle.scratch_copy(root, "crio-oracle-") as scratch:
        _furnish(scratch, crio, pinns)
        out = scratch / OUT_DIR.lstrip("/")
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", BOOT, "boot",
                                 str(scratch), PATH, OUT_DIR.lstrip("/"), BIN_DIR], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            said, _ = proc.communicate(timeout=BOOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            said, _ = proc.communicate()
        state = (out / "state").read_text().strip() if (out / "state").is_file() else "timed out"
        log = (out / "daemon.log").read_text(errors="replace") if (out / "daemon.log").is_file() else ""
        config = (out / "config.toml").read_text() if state == "answered" else None
    answer = {"version": version, "schema": ORACLE_SCHEMA, "started": state == "answered", **parse(log, config)}
    if not answer["started"]:
        lines = log.strip().splitlines()
        answer["refusal"] = answer["refusal"] or (f"{state}: {lines[-1]}" if lines else f"{state}: {said.decode().strip()}")
    return answer


def ask(binaries: tuple[Path, Path], version: str, root: Path, digest: str | None = None) -> dict:
    """CRI-O ``version``'s answer for the node root ``root`` (cached; see the module)."""
    return oracle.cached(answer_path(version, digest or tree_digest(root)), ORACLE_SCHEMA,
                         lambda: ask_uncached(*binaries, version, root))


SERVE = oracle.NAMESPACE_SETUP + r"""mkdir -p "./$3"
export PATH="$2"
exec chroot . "$4/crio" --storage-driver vfs --log-level info --disable-hostport-mapping > "./$3/daemon.log" 2>&1
"""


class Daemon:
    """A CRI-O daemon left running on a copy of a node root (:func:`serve`): ``pid`` (this
    machine's), ``root`` (the copy, as this machine sees it), and :meth:`run`, which runs a command
    as on that node: in the daemon's mount namespace and root (``nsenter --mount --root``)."""

    def __init__(self, pid: int, root: Path, version: str):
        self.pid, self.root, self.version = pid, root, version

    def inside(self, path: str) -> str:
        """A path of this machine under the copy, as the node sees it (others as they are)."""
        prefix = str(self.root)
        return path[len(prefix):] or "/" if path.startswith(prefix + "/") else path

    def run(self, argv: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
        cmd = ["nsenter", "--target", str(self.pid), "--mount", "--root", "--wd=/", "--",
               self.inside(argv[0]), *argv[1:]]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                                  env={"PATH": PATH})
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]}: timed out after {timeout:.0f}s"
        return done.returncode, done.stdout, done.stderr

    def log(self) -> str:
        path = self.root / OUT_DIR.lstrip("/") / "daemon.log"
        return path.read_text(errors="replace") if path.is_file() else ""


@contextmanager
def serve(binaries: tuple[Path, Path], version: str, root: Path):
    """Start CRI-O ``version`` on a copy of the node root ``root`` (furnished as :func:`ask` does)
    and yield a :class:`Daemon` once ``crio status config`` answers on its socket; the daemon, its
    namespace and the copy are gone afterwards. Raises RuntimeError (with its log) when it does
    not answer within BOOT_TIMEOUT."""
    with oracle.scratch_copy(root, "crio-daemon-") as scratch:
        _furnish(scratch, *binaries)
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", SERVE, "serve",
                                 str(scratch), PATH, OUT_DIR.lstrip("/"), BIN_DIR], stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            daemon = Daemon(proc.pid, scratch, version)
            deadline = time.monotonic() + BOOT_TIMEOUT
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"CRI-O {version} exited ({proc.returncode}) as it started:\n{daemon.log()[-3000:]}")
                rc, _, _ = daemon.run([f"{BIN_DIR}/crio", "status", "config"], timeout=5)
                if rc == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRI-O {version} did not answer within {BOOT_TIMEOUT:.0f}s:\n"
                                       f"{daemon.log()[-3000:]}")
                time.sleep(0.1)
            yield daemon
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def can_run() -> str | None:
    """Why the daemon cannot be run here (None: it can): root, unshare, chroot, ldd, and what a
    CRI-O node has (Debian's conmon, runc, crun, util-linux) are needed."""
    reason = oracle.cannot_unshare(("unshare", "chroot", "mknod", "ldd"))
    if reason:
        return reason
    missing = [PACKAGES[b] for b in NODE_BINARIES if not shutil.which(b)]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install {' '.join(missing)}: {INSTALLABLE}"
    return None


def why_not_warm() -> tuple[str | None, bool]:
    """(why the oracle cannot answer at once, or None; whether ``build`` would make it able):
    the daemon cannot run here (buildable only when what is missing is Debian's packages, which
    ``build`` installs), or a version is not built (buildable with Go, make and a C compiler)."""
    reason = can_run()
    if reason:
        return reason, reason.endswith(INSTALLABLE) and bool(shutil.which("apt-get"))
    missing = [v for v in VERSIONS if cached(v) is None]
    if not missing:
        return None, True
    lacking = [t for t in ("go", "make", "cc") if not shutil.which(t)]
    what = f"CRI-O {', '.join(missing)} not built"
    if lacking:
        return f"{what}, and {', '.join(lacking)} not on PATH to build it", False
    return f"{what} (`python -m sandbox crio build`, about 8 minutes a version on 2 cores)", True


def ensure_packages(say=None) -> None:
    """Install what a CRI-O node runs besides CRI-O (Debian's conmon, crun, runc, util-linux)
    when one is missing: needs root and apt-get. Raises BuildError naming what failed."""
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    missing = sorted({PACKAGES[b] for b in NODE_BINARIES if not shutil.which(b)})
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise BuildError(f"CRI-O oracle: {', '.join(missing)} not installed, and installing them needs root and apt-get")
    say(f"CRI-O oracle: installing {' '.join(missing)} from Debian")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if run.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False)
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if run.returncode != 0:
        raise BuildError(f"CRI-O oracle: apt-get install {' '.join(missing)} failed: {(run.stderr or run.stdout)[-800:]}")


def main(args) -> int:
    """``python -m sandbox crio build|check``."""
    if args.crio_cmd == "check":
        # 2: cold, `build` makes it warm (.ci/run builds then); 1: not usable here as it is
        reason, buildable = why_not_warm()
        print(f"crio: not warm: {reason}" if reason else f"crio: warm (CRI-O {', '.join(VERSIONS)} built)")
        return 0 if reason is None else 2 if buildable else 1
    try:
        ensure_packages()
        paths, spent = resolve()
    except BuildError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for v, (crio, pinns) in paths.items():
        print(f"crio: CRI-O {v}: {crio}, {pinns}")
    print(f"crio: {spent:.0f}s spent building")
    return 0
