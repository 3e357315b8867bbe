"""The sandbox's binaries: pinned by the wrapper Go modules in ``sandbox/go``, built once, cached.

Pins: each wrapper module's ``go.mod`` (with its ``go.sum``) is the one source of the version:
``sandbox/go/etcd`` requires ``go.etcd.io/etcd/server/v3``, ``sandbox/go/kube-<minor>`` requires
``k8s.io/kubernetes`` (staging modules replaced by the published ``k8s.io/<name>``) and
``sandbox/go/kwok`` requires ``sigs.k8s.io/kwok``.

Kubernetes versions: one wrapper module per supported minor release (``kube-1.33`` ... ``kube-1.37``;
``node-<minor>`` for the kind test bed's node binaries). ``SANDBOX_KUBE_VERSION`` picks one (``1.33``
or its pinned release ``1.33.4``); the newest is the default (:func:`kube_minor`). Their binaries
are cached per version (``kubernetes-1.33.4/kube-apiserver``), so switching versions never rebuilds.

Where a binary comes from, first match wins (:func:`resolve`):

1. the file named by its environment variable (``SANDBOX_ETCD``, ``SANDBOX_KUBE_APISERVER``,
   ``SANDBOX_KUBE_CONTROLLER_MANAGER``, ``SANDBOX_KUBE_SCHEDULER``, ``SANDBOX_KUBECTL``,
   ``SANDBOX_KWOK``) when its version output names the pinned version;
2. the same name on ``PATH`` when its version matches;
3. the cache ``$XDG_CACHE_HOME/bcd-ansible/bin`` (default ``~/.cache/bcd-ansible/bin``) when the
   binary's stamp (``<name>.stamp``, in ``kubernetes-<version>/`` for Kubernetes: version and a
   digest of go.mod, go.sum and ldflags) matches;
4. otherwise it is built into the cache with ``go build`` (CGO_ENABLED=0, -trimpath, version
   ldflags) through the Go module proxy. The cold build of the Kubernetes binaries takes about ten
   minutes on two cores; progress is printed every 30 seconds.

A binary whose version does not match is never used: a mismatching ``SANDBOX_*`` variable is
reported and ignored.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent / "go"


class BuildError(RuntimeError):
    """A binary could not be found or built; the message says which and why."""


@dataclass(frozen=True)
class Binary:
    """One binary of the sandbox and how to build and recognise it."""

    name: str
    module: str             # wrapper module directory under sandbox/go
    requires: str           # the pinned module in that go.mod
    package: str            # the main package to build
    version_args: tuple[str, ...]
    version_pattern: str    # regex with {version}, searched in the version output

    @property
    def env(self) -> str:
        return "SANDBOX_" + self.name.upper().replace("-", "_")

    @property
    def versioned(self) -> bool:
        """Whether its wrapper module is one per Kubernetes minor release (``kube``, ``node``)."""
        return self.module in VERSIONED


BINARIES = (
    Binary("etcd", "etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3",
           ("--version",), r"etcd Version: {version}\b"),
    Binary("kube-apiserver", "kube", "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver",
           ("--version",), r"Kubernetes v{version}\b"),
    Binary("kube-controller-manager", "kube", "k8s.io/kubernetes",
           "k8s.io/kubernetes/cmd/kube-controller-manager", ("--version",), r"Kubernetes v{version}\b"),
    Binary("kube-scheduler", "kube", "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler",
           ("--version",), r"Kubernetes v{version}\b"),
    Binary("kubectl", "kube", "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kubectl",
           ("version", "--client"), r"Client Version: v{version}\b"),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok", "sigs.k8s.io/kwok/cmd/kwok",
           ("--version",), r"kwok version v{version}\b"),
)
BY_NAME = {b.name: b for b in BINARIES}
# wrapper modules kept once per Kubernetes minor release: sandbox/go/<module>-<minor>
VERSIONED = ("kube", "node")
K8S = "k8s.io/kubernetes"


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(x) for x in minor.split("."))


def kube_versions(module: str = "kube") -> dict[str, str]:
    """Supported Kubernetes releases, oldest first: ``{"1.33": "1.33.4", ...}``, one per
    ``sandbox/go/<module>-<minor>`` wrapper module (``module`` is ``kube`` or ``node``)."""
    found = {d.name.split("-", 1)[1]: pinned_version(d.name, K8S)
             for d in GO_DIR.glob(f"{module}-*") if (d / "go.mod").is_file()}
    return dict(sorted(found.items(), key=lambda kv: _minor_key(kv[0])))


def kube_minor(value: str | None = None, module: str = "kube", what: str = "SANDBOX_KUBE_VERSION") -> str:
    """The Kubernetes minor release the sandbox runs: ``value``, else ``$SANDBOX_KUBE_VERSION``,
    else the newest supported one. A minor (``1.33``, ``v1.33``) or its pinned release
    (``1.33.4``) is accepted; anything else raises BuildError naming ``what`` (where the value came
    from) and the supported releases."""
    raw = os.environ.get("SANDBOX_KUBE_VERSION", "") if value is None else value
    versions = kube_versions(module)
    if not versions:
        raise BuildError(f"sandbox build: no {GO_DIR}/{module}-<minor>/go.mod: the checkout is incomplete")
    if not raw.strip():
        return list(versions)[-1]
    want = raw.strip().removeprefix("v")
    minor = ".".join(want.split(".")[:2])
    if minor in versions and want in (minor, versions[minor]):
        return minor
    listed = ", ".join(f"{m} ({v})" for m, v in versions.items())
    why = (f"{minor} is pinned at {versions[minor]}, not {want}" if minor in versions
           else f"{minor} is not a supported release")
    raise BuildError(f"{what}={raw}: {why}; supported: {listed}. Give a minor release "
                     f"(1.33) or its pinned release; sandbox/go/{module}-<minor>/go.mod pins each")


def rotation_minor(commit: str) -> str | None:
    """The supported release other than the newest that ``commit`` picks for ``make test``'s
    compatibility scenario: its first 8 hex digits modulo their number (as ``make test-long``
    rotates its files), so successive commits cover them all. None when there is no other."""
    others = list(kube_versions())[:-1]
    if not others:
        return None
    try:
        return others[int(commit[:8], 16) % len(others)]
    except ValueError:
        return others[0]


def module_dir_name(module: str, minor: str | None = None) -> str:
    """The directory under sandbox/go of a wrapper module: ``kube-1.37`` for a versioned one."""
    if module in VERSIONED:
        return f"{module}-{minor or kube_minor()}"
    return module


def cache_name(binary: Binary, minor: str | None = None) -> str:
    """The binary's path under the cache: ``kubernetes-1.37.2/kube-apiserver`` for a versioned one.
    A directory per release, not a suffixed name: kubectl names itself after its file in the
    User-Agent it sends (``kubectl/v1.37.2``), and process names stay the tools' own."""
    return f"kubernetes-{version_of(binary, minor)}/{binary.name}" if binary.versioned else binary.name


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/bcd-ansible/bin`` (default ``~/.cache/bcd-ansible/bin``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bcd-ansible" / "bin"


def pinned_version(module: str, requires: str, minor: str | None = None) -> str:
    """The version (without the leading ``v``) that ``sandbox/go/<module>/go.mod`` requires (for a
    versioned module, that of ``minor``, default :func:`kube_minor`)."""
    path = GO_DIR / module_dir_name(module, minor) / "go.mod"
    try:
        text = path.read_text()
    except OSError as exc:
        raise BuildError(f"sandbox build: cannot read {path}: {exc.strerror}") from None
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(requires)}\s+v(\S+)", text, re.M)
    if not match:
        raise BuildError(f"sandbox build: {path} does not require {requires}")
    return match.group(1)


def version_of(binary: Binary, minor: str | None = None) -> str:
    return pinned_version(binary.module, binary.requires, minor)


def ldflags(module: str, minor: str | None = None) -> str:
    """Linker flags of a wrapper module: strip symbols and stamp the versions the tools print."""
    flags = ["-s", "-w"]
    if module in VERSIONED:
        # sandbox/go/node-<minor> (the kind test bed's kubelet, kubeadm, kube-proxy) pins the same release.
        v = pinned_version(module, K8S, minor)
        v_major, v_minor = v.split(".")[:2]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [f"-X {pkg}.gitVersion=v{v}", f"-X {pkg}.gitMajor={v_major}", f"-X {pkg}.gitMinor={v_minor}",
                      f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    elif module == "etcd":
        # etcd's Version is a source constant; GitSHA is the one value its release build stamps.
        v = pinned_version("etcd", "go.etcd.io/etcd/server/v3")
        flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA=module-v{v}")
    elif module == "kwok":
        v = pinned_version("kwok", "sigs.k8s.io/kwok")
        flags.append(f"-X sigs.k8s.io/kwok/pkg/consts.Version={v}")
    return " ".join(flags)


def _stamp_key(binary: Binary, minor: str | None = None) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((GO_DIR / module_dir_name(binary.module, minor) / name).read_bytes())
    digest.update(ldflags(binary.module, minor).encode())
    digest.update(binary.package.encode())
    return f"{version_of(binary, minor)} {digest.hexdigest()[:16]}"


def version_matches(binary: Binary, path: str | Path, minor: str | None = None) -> bool:
    """Whether running ``path`` with the binary's version arguments names the pinned version."""
    try:
        out = subprocess.run([str(path), *binary.version_args], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    pattern = binary.version_pattern.format(version=re.escape(version_of(binary, minor)))
    return re.search(pattern, out.stdout + out.stderr) is not None


def cached_path(binary: Binary, minor: str | None = None) -> Path:
    """Where the cache keeps ``binary`` (built or not)."""
    return cache_dir() / cache_name(binary, minor)


def _cached(binary: Binary, minor: str | None = None) -> Path | None:
    path = cached_path(binary, minor)
    stamp = path.with_name(path.name + ".stamp")
    try:
        ok = stamp.read_text().strip() == _stamp_key(binary, minor)
    except OSError:
        return None
    return path if ok and os.access(path, os.X_OK) else None


def _found(binary: Binary, warn, minor: str | None = None) -> Path | None:
    env = os.environ.get(binary.env)
    if env:
        if version_matches(binary, env, minor):
            return Path(env).resolve()
        warn(f"sandbox build: ignoring {binary.env}={env}: its version is not {version_of(binary, minor)}")
    on_path = shutil.which(binary.name)
    # the cache's own files count only with their stamps (below), also on PATH (`sandbox env`)
    if on_path and not Path(on_path).resolve().is_relative_to(cache_dir().resolve()) \
            and version_matches(binary, on_path, minor):
        return Path(on_path).resolve()
    return _cached(binary, minor)


@contextmanager
def _lock():
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fmt(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def _go_output_name(package: str) -> str:
    """The file ``go build -o DIR/`` writes for ``package``: its last element, a major version
    suffix skipped (``go.etcd.io/etcd/server/v3`` builds ``server``)."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v\d+", parts[-1]) and len(parts) > 1 else parts[-1]


def _go_build(module: str, binaries: list[Binary], say, minor: str | None = None) -> float:
    """Build ``binaries`` of one wrapper module into the cache; return the seconds it took."""
    minor = minor or (kube_minor() if module in VERSIONED else None)
    src = GO_DIR / module_dir_name(module, minor)
    go = shutil.which("go")
    if not go:
        raise BuildError("sandbox build: `go` is not on PATH; install Go (see sandbox/go/*/go.mod for the version) "
                         "or point SANDBOX_* variables at prebuilt binaries")
    out = cache_dir()
    log_path = out / f"build-{src.name}.log"
    names = ", ".join(b.name for b in binaries)
    versions = sorted({f"{b.requires}@v{version_of(b, minor)}" for b in binaries})
    say(f"sandbox build: building {names} from {', '.join(versions)} (log: {log_path})")
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{src.name}-", dir=out))
    argv = [go, "build", "-v", "-trimpath", "-ldflags", ldflags(module, minor), "-o", str(tmp) + "/",
            *[b.package for b in binaries]]
    if shutil.which("nice"):
        argv = ["nice", "-n", "10", *argv]
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off",
           "GOFLAGS": "-buildvcs=false -mod=readonly"}
    start = time.monotonic()
    done = threading.Event()

    def ticker() -> None:
        total: int | None = None
        while not done.wait(30):
            if total is None:
                # Every package the build needs; those already in Go's build cache are not compiled.
                listed = subprocess.run([go, "list", "-deps", *[b.package for b in binaries]], cwd=src,
                                        env=env, capture_output=True, text=True, check=False)
                total = len(listed.stdout.split()) if listed.returncode == 0 else 0
            try:
                lines = log_path.read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            downloads = sum(1 for ln in lines if ln.startswith("go: downloading"))
            compiled = sum(1 for ln in lines if ln and not ln.startswith("go: ") and " " not in ln.strip())
            say(f"sandbox build: {module}: {_fmt(time.monotonic() - start)} elapsed, "
                f"{downloads} modules downloaded, {compiled}{f' of at most {total}' if total else ''} packages compiled")

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        try:
            with open(log_path, "wb") as log:
                rc = subprocess.run(argv, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    check=False).returncode
        finally:
            done.set()
            thread.join()
        elapsed = time.monotonic() - start
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise BuildError(f"sandbox build: go build of {names} failed (exit {rc}); the end of {log_path}:\n{tail}")
        for b in binaries:
            dest = cached_path(b, minor)
            dest.parent.mkdir(parents=True, exist_ok=True)
            stamp = dest.with_name(dest.name + ".stamp")
            stamp.unlink(missing_ok=True)
            (tmp / _go_output_name(b.package)).replace(dest)
            stamp.write_text(_stamp_key(b, minor) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"sandbox build: built {names} in {_fmt(elapsed)}")
    return elapsed


def resolve(names: list[str] | None = None, *, force: bool = False, say=None,
            minor: str | None = None) -> dict[str, Path]:
    """Path of each binary (all by default), building what is missing. Raises BuildError.

    ``force`` rebuilds into the cache even when a matching binary exists. The Kubernetes binaries
    are those of ``minor`` (default :func:`kube_minor`).
    """
    minor = minor or kube_minor()
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    wanted = [BY_NAME[n] for n in (names or [b.name for b in BINARIES])]
    # all found: no need to wait for the cache's lock, which a build of another release holds
    # for ten minutes
    found = {} if force else {b.name: _found(b, say, minor) for b in wanted}
    if not force and all(found.values()):
        return found
    with _lock():
        missing: list[Binary] = []
        for b in wanted:
            # what was missing is looked for again under the lock: another run may have built it
            path = None if force else found[b.name] or _found(b, lambda _msg: None, minor)
            if path:
                found[b.name] = path
            else:
                missing.append(b)
        for module in dict.fromkeys(b.module for b in missing):
            batch = [b for b in missing if b.module == module]
            _go_build(module, batch, say, minor)
            for b in batch:
                found[b.name] = cached_path(b, minor)
    return {b.name: found[b.name] for b in wanted}


def missing(names: list[str] | None = None, minor: str | None = None) -> list[str]:
    """The binaries (all by default) that :func:`resolve` would have to build; builds nothing."""
    minor = minor or kube_minor()
    return [n for n in (names or [b.name for b in BINARIES]) if _found(BY_NAME[n], lambda _msg: None, minor) is None]


def describe(paths: dict[str, Path], minor: str | None = None) -> str:
    return json.dumps({name: {"path": str(p), "version": version_of(BY_NAME[name], minor)}
                       for name, p in paths.items()}, indent=2)
