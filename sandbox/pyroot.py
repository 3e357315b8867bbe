"""A Debian trixie root with one venv per ansible-core version: the controllers users run.

``python -m sandbox pyroot build|check|path|run``. This machine's Python is bookworm's 3.11, on
which only ansible-core 2.19 installs (2.20 and later need Python 3.12 or newer). The root gives
the other supported versions a real controller: Debian trixie's own Python 3.13, made with
``mmdebstrap`` from the same Debian mirror host the machine's apt sources use, with

- the packages a controller needs for our playbooks (:data:`PACKAGES`), and the host's
  ``/usr/local/share/ca-certificates/*.crt`` installed with ``update-ca-certificates`` (pip must
  trust what this machine trusts, or it cannot reach PyPI from inside);
- one venv per ansible-core line (:data:`CORES`, ``/opt/venvs/core-<line>`` inside the root), each
  with requirements.txt's runtime dependencies but its ansible-core line pinned instead, and the
  test tools of requirements-dev.txt (:data:`TEST_TOOLS`, so unit tests run inside), all from
  PyPI, installed inside the root.

The root is cached as ``$XDG_CACHE_HOME/bcd-ansible/roots/trixie-<key>`` (default
``~/.cache/bcd-ansible``), the key a digest of its inputs: the suite, the package list, the
ansible-core pins, requirements.txt's requirement lines (ansible-core's left out: the venvs pin
their own) and the test tools' pins. It is built as
``.trixie-<key>.partial`` (its finished steps listed in ``.trixie-<key>.steps``, so a build that
failed half way resumes after its last finished step), renamed, and only then gets its stamp
``trixie-<key>.stamp``: a root without its stamp is never used. A build log is
``trixie-<key>.log`` beside it. ``build`` keeps the two most recent other roots (another checkout
may be using them) and removes older ones.

``run --core 2.21 -- CMD...`` runs CMD inside the root, in a mount namespace of its own
(``unshare --mount``, then ``chroot``), as this user (root), with

- the network of the host (no network namespace): a sandbox's API server on 127.0.0.1 answers;
- ``/proc``, ``/dev``, ``/sys`` and ``/tmp`` of the host, the checkout (the current directory's git
  top, and the checkout this package runs from) and ``$XDG_CACHE_HOME/bcd-ansible`` (the sandbox's
  binaries) at the same absolute paths, so kubeconfigs, ``SANDBOX_DIR`` and the collections
  directory resolve as they do outside; ``--bind DIR`` adds more; ``/etc/resolv.conf`` and
  ``/etc/hosts`` are the host's;
- the current directory and the environment kept (KUBECONFIG, SANDBOX_DIR, ANSIBLE_*, ...), but
  PATH starts with the venv's bin, loses other venvs' bin directories (their Python is the host's,
  which is not in the root) and ends with the root's system directories; a locale the root lacks
  becomes C.UTF-8 (ansible-core refuses to start without a UTF-8 locale).

Its exit status is the command's; 125 when the root cannot run it (not built, not root, a
directory it cannot see). ``check`` exits 0 when the root is built, 2 when it is cold and
``build`` would make it (the reason on stdout, as ``sandbox kind check``), 1 when it cannot be
built here (not root, no ``unshare``/``chroot``, neither mmdebstrap nor apt-get, Debian's mirror
or PyPI unreachable). To move a pin: ``pip index versions ansible-core --pre --python-version
3.13`` names the newest of each line; a new pin is a new key, so the next ``build`` makes a new root.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sandbox import build

CHECKOUT = Path(__file__).resolve().parent.parent
SUITE = "trixie"            # Debian 13: python3 is 3.13
# What a controller needs for our playbooks besides Python: certificates for TLS to PyPI and the
# control plane, git (ansible-galaxy installs from git, ansible-test reads the tree), and the
# OpenSSH client (inventories whose gpu_nodes Ansible logs in to).
PACKAGES = ("python3", "python3-venv", "ca-certificates", "git", "openssh-client")
# One venv per supported ansible-core line: the newest release of each line, the newest
# pre-release of a line not yet released. Keep the 2.19 pin equal to requirements.txt's.
CORES = {"2.19": "2.19.14", "2.20": "2.20.10", "2.21": "2.21.5", "2.22": "2.22.0rc1"}
# From requirements-dev.txt, with its pins: what the tests import or run besides the runtime
# dependencies, so the unit tests and the secrets checks run inside as they do on the host.
TEST_TOOLS = (
    "pytest", "pytest-randomly", "pytest-xdist", "hypothesis", "xmlschema",
    # the opt-in persistent interpreter, whose strategy a unit test runs our modules under
    "mitogen",
    # how AWX runs a playbook (its artifacts are searched for secrets), and the EE's build context
    "ansible-runner", "ansible-builder",
    # the control-plane emulator's framework (unit tests import its app)
    "starlette", "uvicorn",
)
VENVS = "/opt/venvs"        # inside the root
# Bumped when the steps below change what a root holds for the same inputs.
RECIPE = 1
KEEP_OTHER_ROOTS = 2
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Passed to pip inside the root during the build: how this machine reaches PyPI.
PIP_PASS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES",
            "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
# The locales a minbase root has.
ROOT_LOCALES = ("C", "POSIX", "C.UTF-8", "C.utf8")
# The host's /tmp, seen inside at the same path (pytest's tmp_path, ansible's temporary files).
HOST_TMP = "/tmp"  # noqa: S108 - a mount point, not a file made here
NOT_RUNNABLE = 125


class PyrootError(RuntimeError):
    """The root could not be built or used; the message says what and why."""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


# ---------------------------------------------------------------------------- inputs and the key


def requirement_name(line: str) -> str | None:
    """The normalised project name a requirements line installs; None for comments, blank lines
    and options (``-r``, ``-e``, ``--index-url``, ...)."""
    text = line.split("#", 1)[0].strip()
    if not text or text.startswith("-"):
        return None
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else None


def runtime_requirements(text: str) -> list[str]:
    """requirements.txt's requirement lines without ansible-core (each venv pins its own), their
    environment markers kept (pip evaluates them for the root's Python)."""
    out = []
    for line in text.splitlines():
        name = requirement_name(line)
        if name and name != "ansible-core":
            out.append(line.split(" #", 1)[0].strip())
    return out


def test_requirements(dev_text: str) -> list[str]:
    """The lines of requirements-dev.txt that install :data:`TEST_TOOLS` (a tool it does not
    list is taken unpinned)."""
    found = {}
    for line in dev_text.splitlines():
        name = requirement_name(line)
        if name in TEST_TOOLS and name not in found:
            found[name] = line.split(" #", 1)[0].strip()
    return [found.get(t, t) for t in TEST_TOOLS]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise PyrootError(f"pyroot: cannot read {path}: {exc.strerror}") from exc


def stamp_key(requirements_text: str, dev_text: str, *, cores: dict[str, str] | None = None,
              packages: tuple[str, ...] = PACKAGES, suite: str = SUITE) -> str:
    """The digest of everything a root is made from: a change to any of it is a new root."""
    h = hashlib.sha256()
    h.update(json.dumps({
        "recipe": RECIPE, "suite": suite, "packages": list(packages), "cores": cores or CORES,
        # what the venvs install of it: a comment, or ansible-core's own line, changes no root
        "requirements.txt": runtime_requirements(requirements_text),
        "tests": test_requirements(dev_text),
    }, sort_keys=True).encode())
    return h.hexdigest()[:16]


def roots_dir() -> Path:
    """``$XDG_CACHE_HOME/bcd-ansible/roots`` (beside the sandbox's ``bin``)."""
    return build.cache_dir().parent / "roots"


@dataclass(frozen=True)
class Root:
    """Where the root of one key lives, built or not."""

    key: str
    base: Path

    @property
    def name(self) -> str:
        return f"{SUITE}-{self.key}"

    @property
    def path(self) -> Path:
        return self.base / self.name

    @property
    def stamp(self) -> Path:
        return self.base / f"{self.name}.stamp"

    @property
    def log(self) -> Path:
        return self.base / f"{self.name}.log"

    @property
    def partial(self) -> Path:
        return self.base / f".{self.name}.partial"

    @property
    def steps(self) -> Path:
        return self.base / f".{self.name}.steps"


def venv(line: str) -> str:
    """The venv of an ansible-core line, as a path inside the root."""
    return f"{VENVS}/core-{line}"


def current(checkout: Path = CHECKOUT) -> Root:
    """The root this checkout's requirements ask for."""
    key = stamp_key(_read(checkout / "requirements.txt"), _read(checkout / "requirements-dev.txt"))
    return Root(key, roots_dir())


def stamp_data(root: Root) -> dict | None:
    try:
        data = json.loads(root.stamp.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_built(root: Root) -> bool:
    """The stamp names this key, and the root's Python and every venv's Python are there."""
    data = stamp_data(root)
    if not data or data.get("key") != root.key:
        return False
    return (root.path / "usr/bin/python3").exists() and all(
        (root.path / venv(line).lstrip("/") / "bin/python").exists() for line in CORES)


def other_roots(root: Root) -> list[Path]:
    """Stamps of other built roots in the cache, the newest first."""
    stamps = [p for p in root.base.glob(f"{SUITE}-*.stamp") if p != root.stamp]
    return sorted(stamps, key=lambda p: p.stat().st_mtime, reverse=True)


# ---------------------------------------------------------------------------- the host


def debian_mirrors(paths: list[Path] | None = None) -> tuple[str, str | None]:
    """The Debian archive and security archive URIs of this machine's apt sources (one-line
    ``.list`` and deb822 ``.sources`` files), so trixie comes from the host bookworm already
    reaches; ``http://deb.debian.org/debian`` when the sources name none."""
    if paths is None:
        paths = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list")),
                 *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    uris: list[str] = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("deb ") or line.startswith("URIs:"):
                words = [w for w in line.split()[1:] if not w.startswith("[") and not w.endswith("]")]
                uris += [w.rstrip("/") for w in words if re.match(r"https?://", w)]
    main = next((u for u in uris if u.endswith("/debian")), None)
    security = next((u for u in uris if u.endswith("/debian-security")), None)
    if main is None:
        return "http://deb.debian.org/debian", "http://deb.debian.org/debian-security"
    if security is None:
        security = main + "-security"
    return main, security


def mirror_lines(main: str, security: str | None, suite: str = SUITE) -> list[str]:
    lines = [f"deb {main} {suite} main", f"deb {main} {suite}-updates main"]
    if security:
        lines.append(f"deb {security} {suite}-security main")
    return lines


def _reachable(url: str, timeout: float = 10) -> str | None:
    """None when an HTTP(S) GET of ``url`` answers; else why not."""
    try:
        req = urllib.request.Request(url, headers={"User-Agent": "bcd-ansible-pyroot"})  # noqa: S310 - http(s) only
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            resp.read(1)
        return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {getattr(exc, 'reason', exc)}"


def pypi_url() -> str:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    return f"{index}/ansible-core/"


def cannot_build(probe: bool = True) -> str | None:
    """Why a root cannot be built on this machine, or None. ``probe`` also asks Debian's mirror
    and PyPI whether they answer (a build without them would only fail later)."""
    if os.geteuid() != 0:
        return "not root (mmdebstrap's root mode, chroot and mount namespaces need root)"
    missing = [c for c in ("unshare", "chroot", "mount") if not shutil.which(c)]
    if missing:
        return f"{', '.join(missing)} not found (util-linux, coreutils)"
    if not shutil.which("mmdebstrap") and not shutil.which("apt-get"):
        return "mmdebstrap is missing and there is no apt-get to install it"
    if probe:
        main, _ = debian_mirrors()
        why = _reachable(f"{main}/dists/{SUITE}/InRelease")
        if why:
            return f"Debian's mirror does not answer: {why}"
        why = _reachable(pypi_url())
        if why:
            return f"PyPI does not answer: {why}"
    return None


def why_cold(root: Root) -> str:
    older = other_roots(root)
    if root.partial.exists():
        return f"{root.partial} is a build that did not finish (build resumes it)"
    if older:
        return (f"no root for these inputs ({root.name}); {older[0].name[:-len('.stamp')]} was built for "
                "others (requirements.txt, the test tools' pins or the ansible-core pins changed)")
    return f"no root in {root.base}"


def check(probe: bool = True, checkout: Path = CHECKOUT) -> tuple[int, str]:
    """(exit status, the line to print): 0 built, 2 cold and buildable here, 1 not buildable here."""
    try:
        root = current(checkout)
    except PyrootError as exc:
        return 1, str(exc)
    if is_built(root):
        cores = ", ".join(CORES.values())
        return 0, f"pyroot: built: {root.path} (Debian {SUITE}, Python 3.13, ansible-core {cores})"
    why = cannot_build(probe)
    if why:
        return 1, f"pyroot: cannot be built here: {why}"
    return 2, f"pyroot: cold: {why_cold(root)}; `python -m sandbox pyroot build` makes it (about 3 min)"


# ---------------------------------------------------------------------------- running inside


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this mount namespace."""
    prefix = str(path.resolve()) if path.exists() else str(path)
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


def safe_rmtree(path: Path) -> None:
    """Remove ``path``, refusing when anything is mounted below it (a root left with the host's
    /dev or /sys bound in would otherwise lose the host's files with it)."""
    if not path.exists() and not path.is_symlink():
        return
    mounted = _mounts_under(path)
    if mounted:
        raise PyrootError(f"pyroot: not removing {path}: mounted below it: {', '.join(mounted[:5])} "
                          "(umount them first)")
    shutil.rmtree(path)


def _git_top(cwd: Path) -> Path | None:
    try:
        out = subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def default_binds(cwd: Path, extra: list[Path] = ()) -> list[Path]:
    """The host directories a run sees at their own paths: the cwd's checkout (or the cwd itself
    outside a git tree), this package's checkout, the shared cache, and ``extra``; parents first."""
    binds = [_git_top(cwd) or cwd, build.cache_dir().parent, *extra]
    if (CHECKOUT / "galaxy.yml").is_file():
        binds.append(CHECKOUT)
    out: list[Path] = []
    for b in sorted({Path(os.path.abspath(b)) for b in binds}, key=lambda p: (len(p.parts), str(p))):
        if b != Path("/") and not any(b == o or o in b.parents for o in out):
            out.append(b)
    return out


def namespace_script(root: Path, binds: list[Path], *, host_tmp: bool = True) -> str:
    """The host shell script that, in its own mount namespace, binds the host's directories into
    ``root`` and then runs ``"$@"`` there with ``chroot``, in the directory ``$1``.

    ``/proc``, ``/dev`` and ``/sys`` (and ``/tmp`` with ``host_tmp``) are bound recursively (their
    submounts: /dev/pts, the cgroups); the checkout and the cache are not (the cache holds the root
    itself, whose own binds must not show up again inside)."""
    q = shlex.quote
    lines = ["set -e", f"r={q(str(root))}"]
    lines += [f'mount --rbind {d} "$r"{d}' for d in ("/proc", "/dev", "/sys", *((HOST_TMP,) if host_tmp else ()))]
    # DNS and host names as the host has them now (the root's copies date from its build).
    lines += [f'if [ -f {f} ] && [ -f "$r"{f} ]; then mount --bind {f} "$r"{f}; fi'
              for f in ("/etc/resolv.conf", "/etc/hosts")]
    for b in binds:
        lines.append(f'mkdir -p "$r"{q(str(b))} && mount --bind {q(str(b))} "$r"{q(str(b))}')
    # $1 is the directory to run in; 125 when the root cannot enter it.
    inner = 'cd -- "$0" || exit 125; exec "$@"'
    lines += ["cwd=$1; shift", f'exec chroot "$r" /bin/sh -c {q(inner)} "$cwd" "$@"']
    return "\n".join(lines)


def namespace_argv(root: Path, cwd: Path, command: list[str], binds: list[Path], *,
                   host_tmp: bool = True) -> list[str]:
    """The command line that runs ``command`` inside ``root`` (see :func:`namespace_script`)."""
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
            namespace_script(root, binds, host_tmp=host_tmp), "pyroot", str(cwd), *command]


def _is_venv_bin(entry: str) -> bool:
    return (Path(entry).parent / "pyvenv.cfg").is_file()


def run_env(environ: dict[str, str], line: str) -> dict[str, str]:
    """The environment of a command inside the root: ``environ`` with the venv of ``line`` first
    on PATH (and other venvs' bin directories dropped), VIRTUAL_ENV set, and a locale the root has."""
    env = dict(environ)
    bin_dir = f"{venv(line)}/bin"
    entries = [bin_dir]
    for e in environ.get("PATH", "").split(":"):
        if e and e not in entries and not _is_venv_bin(e):
            entries.append(e)
    entries += [d for d in SYSTEM_PATH if d not in entries]
    env["PATH"] = ":".join(entries)
    env["VIRTUAL_ENV"] = venv(line)
    for name in ("PYTHONHOME", "__PYVENV_LAUNCHER__"):
        env.pop(name, None)
    for name in ("LANG", "LC_ALL", "LC_CTYPE"):
        if env.get(name) and env[name] not in ROOT_LOCALES:
            env[name] = "C.UTF-8"
    if not any(env.get(n) for n in ("LANG", "LC_ALL", "LC_CTYPE")):
        env["LANG"] = "C.UTF-8"
    return env


def run(line: str, command: list[str], *, cwd: Path | None = None, extra_binds: list[Path] = (),
        checkout: Path = CHECKOUT) -> int:
    """Run ``command`` inside the built root with the venv of ansible-core ``line``; its exit status."""
    if line not in CORES:
        raise PyrootError(f"pyroot: no venv for ansible-core {line!r}; the root has {', '.join(CORES)}")
    if not command:
        raise PyrootError("pyroot run: no command given (python -m sandbox pyroot run --core 2.21 -- CMD ...)")
    if os.geteuid() != 0:
        raise PyrootError("pyroot run: needs root (a mount namespace and chroot)")
    root = current(checkout)
    if not is_built(root):
        raise PyrootError(f"pyroot: not built: {why_cold(root)}; `python -m sandbox pyroot build` makes it")
    cwd = Path(os.path.abspath(cwd or os.getcwd()))
    binds = default_binds(cwd, list(extra_binds))
    visible = [*binds, Path(HOST_TMP)]
    if not any(cwd == b or b in cwd.parents for b in visible) and not (root.path / str(cwd).lstrip("/")).is_dir():
        raise PyrootError(f"pyroot run: the directory {cwd} is not visible inside the root "
                          f"(it sees {', '.join(map(str, visible))}; --bind DIR adds one)")
    argv = namespace_argv(root.path, cwd, command, binds)
    return subprocess.run(argv, env=run_env(dict(os.environ), line), check=False).returncode


# ---------------------------------------------------------------------------- the build


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def build_env() -> dict[str, str]:
    """The environment of the build's commands inside the root: only what pip needs to reach
    PyPI from here (the host's own PIP_FIND_LINKS or pip config do not apply inside)."""
    env = {"PATH": ":".join(SYSTEM_PATH), "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_CACHE_DIR": "/var/cache/bcd-pyroot-pip",
           # the root's bundle, the host's CAs included by update-ca-certificates
           "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"}
    env.update({k: os.environ[k] for k in PIP_PASS if os.environ.get(k)})
    return env


class _Builder:
    def __init__(self, root: Root, checkout: Path, say):
        self.root = root
        self.checkout = checkout
        self.say = say
        self.times: dict[str, float] = {}

    def done(self) -> set[str]:
        try:
            return set(self.root.steps.read_text().split())
        except OSError:
            return set()

    def mark(self, step: str) -> None:
        with open(self.root.steps, "a") as fh:
            fh.write(step + "\n")

    def logged(self, what: str, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        argv = ["nice", "-n", "10", *argv] if shutil.which("nice") else argv
        with open(self.root.log, "ab") as fh:
            fh.write(f"\n$ {' '.join(shlex.quote(a) for a in argv[:12])}{' ...' if len(argv) > 12 else ''}\n".encode())
            fh.flush()
            rc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                check=False).returncode
        if rc != 0:
            raise PyrootError(f"pyroot: {what} failed (exit {rc}); the end of {self.root.log}:\n{_tail(self.root.log)}")

    def inside(self, what: str, command: list[str]) -> None:
        # /proc, /dev and /sys for pip and the venv's ensurepip; no checkout, no cache: the build
        # sees only the root and the network.
        # the root's own /tmp: the requirement files are written there
        argv = namespace_argv(self.root.partial, Path("/"), command, [], host_tmp=False)
        self.logged(what, argv, env=build_env())

    def timed(self, step: str, what: str, fn) -> None:
        if step in self.done():
            self.say(f"pyroot: {what}: done by an earlier build")
            return
        t0 = time.monotonic()
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(30):
                self.say(f"pyroot: {what}: {_fmt(time.monotonic() - t0)} elapsed (log: {self.root.log})")

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        try:
            fn()
        finally:
            stop.set()
            thread.join()
        self.times[step] = round(time.monotonic() - t0, 1)
        self.mark(step)
        self.say(f"pyroot: {what}: {_fmt(self.times[step])}")

    def base(self) -> None:
        safe_rmtree(self.root.partial)
        main, security = debian_mirrors()
        self.logged(f"mmdebstrap {SUITE}", [
            "mmdebstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES),
            # documentation a cached controller never reads
            "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/info/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
            SUITE, str(self.root.partial), *mirror_lines(main, security)])
        for name in ("etc/resolv.conf", "etc/hosts"):
            # files the host's are bound onto (pip resolves PyPI's name with the host's resolver)
            target = self.root.partial / name
            if not target.is_file() and not target.is_symlink():
                target.touch()
        cas = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
        dest = self.root.partial / "usr/local/share/ca-certificates"
        dest.mkdir(parents=True, exist_ok=True)
        for ca in cas:
            shutil.copyfile(ca, dest / ca.name)
        self.inside("update-ca-certificates", ["update-ca-certificates"])
        if cas:
            self.say(f"pyroot: the host's CA certificates are trusted inside: {', '.join(c.name for c in cas)}")

    def venv(self, line: str) -> None:
        path = venv(line)
        safe_rmtree(self.root.partial / path.lstrip("/"))
        reqs = [*runtime_requirements(_read(self.checkout / "requirements.txt")), f"ansible-core=={CORES[line]}",
                *test_requirements(_read(self.checkout / "requirements-dev.txt"))]
        # in the root's own /tmp (the build does not bind the host's)
        req_file = f"/tmp/bcd-pyroot-requirements-{line}.txt"  # noqa: S108
        (self.root.partial / req_file.lstrip("/")).write_text("\n".join(reqs) + "\n")
        self.inside(f"python3 -m venv {path}", ["python3", "-m", "venv", path])
        self.inside(f"pip install into {path}", [f"{path}/bin/python", "-m", "pip", "install", "-r", req_file])
        out = subprocess.run(namespace_argv(self.root.partial, Path("/"), [f"{path}/bin/ansible", "--version"], [],
                                            host_tmp=False),
                             env=build_env(), capture_output=True, text=True, check=False)
        if f"[core {CORES[line]}]" not in out.stdout:
            raise PyrootError(f"pyroot: {path}/bin/ansible --version does not say core {CORES[line]}: "
                              f"{(out.stdout + out.stderr).strip()[-1000:]}")
        (self.root.partial / req_file.lstrip("/")).unlink()

    def finish(self) -> None:
        safe_rmtree(self.root.partial / "var/cache/bcd-pyroot-pip")
        # The venvs install the same wheels: identical files share their blocks.
        if shutil.which("hardlink"):
            self.logged("hardlink", ["hardlink", "--ignore-time", "-q", str(self.root.partial / VENVS.lstrip("/"))])
        safe_rmtree(self.root.path)
        self.root.partial.rename(self.root.path)
        self.root.steps.unlink(missing_ok=True)


def ensure_mmdebstrap(log: Path, say=say) -> None:
    if shutil.which("mmdebstrap"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PyrootError("pyroot: mmdebstrap is missing; install it (as root: apt-get install "
                          "--no-install-recommends mmdebstrap)")
    say("pyroot: installing mmdebstrap with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", "mmdebstrap"]
    with open(log, "ab") as fh:
        for cmd in (["apt-get", "update"], argv):
            fh.write(f"\n$ {' '.join(cmd)}\n".encode())
            fh.flush()
            subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if not shutil.which("mmdebstrap"):
        raise PyrootError(f"pyroot: apt-get install mmdebstrap failed; the end of {log}:\n{_tail(log)}")


def _lock(base: Path):
    base.mkdir(parents=True, exist_ok=True)
    fh = open(base / ".lock", "w")  # held until the build ends
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def prune(root: Root, keep: int = KEEP_OTHER_ROOTS, say=say) -> list[str]:
    """Remove the built roots beyond the ``keep`` most recent others, and unfinished builds of
    other keys (under the build lock, no other build is running)."""
    removed = []
    for stamp in other_roots(root)[keep:]:
        name = stamp.name[:-len(".stamp")]
        stamp.unlink(missing_ok=True)
        safe_rmtree(root.base / name)
        (root.base / f"{name}.log").unlink(missing_ok=True)
        removed.append(name)
    for partial in root.base.glob(f".{SUITE}-*.partial"):
        if partial != root.partial:
            safe_rmtree(partial)
            (root.base / f"{partial.name[:-len('.partial')]}.steps").unlink(missing_ok=True)
            removed.append(partial.name)
    for name in removed:
        say(f"pyroot: removed the older root {name}")
    return removed


def build_root(*, force: bool = False, checkout: Path = CHECKOUT, say=say) -> Root:
    """Build the root of this checkout's inputs unless it is built; return it. Raises PyrootError."""
    why = cannot_build(probe=False)
    if why:
        raise PyrootError(f"pyroot: cannot be built here: {why}")
    root = current(checkout)
    lock = _lock(root.base)
    try:
        if is_built(root) and not force:
            say(f"pyroot: built: {root.path}")
            return root
        root.stamp.unlink(missing_ok=True)
        if force:
            safe_rmtree(root.partial)
            root.steps.unlink(missing_ok=True)
        ensure_mmdebstrap(root.log, say)
        b = _Builder(root, checkout, say)
        t0 = time.monotonic()
        say(f"pyroot: building {root.name}: Debian {SUITE} ({', '.join(PACKAGES)}) and venvs for ansible-core "
            f"{', '.join(CORES.values())} (log: {root.log})")
        if not root.partial.exists():
            root.steps.unlink(missing_ok=True)
        b.timed("base", f"mmdebstrap {SUITE} and the host's CA certificates", b.base)
        for line in CORES:
            b.timed(f"venv-{line}", f"the venv of ansible-core {CORES[line]}", lambda line=line: b.venv(line))
        b.finish()
        seconds = round(time.monotonic() - t0, 1)
        tmp = root.stamp.with_name(root.stamp.name + ".tmp")
        tmp.write_text(json.dumps({"key": root.key, "suite": SUITE, "packages": list(PACKAGES), "cores": CORES,
                                   "venvs": {line: venv(line) for line in CORES}, "seconds": seconds,
                                   "steps": b.times, "built": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2) + "\n")
        # Last: the stamp is what says the root is whole.
        tmp.replace(root.stamp)
        say(f"pyroot: built {root.path} in {_fmt(seconds)}")
        prune(root, say=say)
        return root
    finally:
        lock.close()


# ---------------------------------------------------------------------------- command line


def main(args) -> int:
    """``python -m sandbox pyroot build|check|path|run``."""
    try:
        if args.pyroot_cmd == "check":
            code, line = check(probe=not args.no_probe)
            print(line)
            return code
        if args.pyroot_cmd == "build":
            build_root(force=args.force)
            return 0
        if args.pyroot_cmd == "path":
            root = current()
            if args.core:
                if args.core not in CORES:
                    raise PyrootError(f"pyroot: no venv for ansible-core {args.core!r}; the root has {', '.join(CORES)}")
                print(venv(args.core))
            else:
                print(root.path)
            return 0 if is_built(root) else 2
        if args.pyroot_cmd == "run":
            command = list(args.command)
            if command[:1] == ["--"]:
                command = command[1:]
            return run(args.core, command, extra_binds=[Path(b) for b in args.bind or []])
    except PyrootError as exc:
        print(str(exc), file=sys.stderr)
        return NOT_RUNNABLE if args.pyroot_cmd == "run" else 1
    except KeyboardInterrupt:
        print("pyroot: interrupted; a build resumes after its last finished step", file=sys.stderr)
        return 130
    return 1
