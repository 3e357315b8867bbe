"""The kind test bed: a kind cluster of real kubelets under podman, built from local parts.

``python -m sandbox kind up|down|status`` (``make kind``). One control-plane node and two workers,
each a podman container running systemd, containerd, runc and a real kubelet, so a pod is Ready
only when its containers really run, and a runtime handler that is not configured really fails
the pod. Nothing comes from a container registry:

- the node image is assembled locally (:func:`build_images`): a Debian rootfs from
  ``mmdebstrap``; kind's base-image files (entrypoint, containerd config, kubelet units) from the
  ``sigs.k8s.io/kind`` module pinned in ``sandbox/go/kind``; kubelet, kubeadm and kube-proxy built
  from ``k8s.io/kubernetes`` (``sandbox/go/node-<minor>``, the newest release the sandbox
  supports, the same as its kube-apiserver's there, so Go's build cache is shared); the
  control-plane images from the sandbox's own binaries (``sandbox/build.py``); CoreDNS from
  ``sandbox/go/coredns``; the pause image compiled from the Kubernetes module's
  ``build/pause/linux/pause.c``. Each image is cached in podman's
  storage with a stamp (a digest of its inputs) under ``$XDG_CACHE_HOME/bcd-ansible/kind``, so a
  warm ``up`` only creates the containers.
- podman is configured only through ``CONTAINERS_CONF`` (a file in that cache directory): the
  rlimits this machine allows (podman's defaults exceed the hard limits and ``setrlimit`` fails),
  ``runc`` (``crun`` rejects hybrid cgroups) and the netavark network backend (kind reaches the
  control-plane node by its container name, which needs aardvark-dns).
- fixes for hybrid cgroup v1 machines baked into the node image: a kubelet drop-in that creates
  ``kubelet.slice`` and ``kubelet`` in every v1 hierarchy before the kubelet starts (it refuses
  to start when one is missing), ``restrict_oom_score_adj = true`` in containerd's CRI config
  (runc may not lower ``oom_score_adj`` without ``CAP_SYS_RESOURCE``); ``failCgroupV1: false`` in
  the KubeletConfiguration (kubelet 1.36 refuses cgroup v1 otherwise).
- pod networking: ``disableDefaultCNI`` (kind's kindnet image is not on the Go proxy), each node
  gets a ptp + host-local CNI config for the pod CIDR the controller-manager gave it, routes to
  the other nodes' pod CIDRs through their node addresses, and masquerading for traffic leaving
  the pod network.
- RuntimeClass ``nvidia`` (handler ``nvidia``) and the GPU operator's ClusterPolicy CRD and
  object, as in the KWOK sandbox. Only the workers' containerd has the ``nvidia`` handler: it runs
  runc through ``/usr/local/bin/nvidia-container-runtime``, a stand-in that logs each call to
  ``/var/log/nvidia-container-runtime.log`` in the node and then runs runc; the workers carry the
  labels GPU feature discovery puts on a GPU node (``nvidia.com/gpu.present=true``, ...). The control-plane node
  lacks the handler, so a pod with ``runtimeClassName: nvidia`` bound there fails with the
  kubelet's own ``FailedCreatePodSandBox`` error; ``/kind/bin/bcd-nvidia-handler.sh on|off`` in a
  node adds or removes the handler (and restarts containerd).

The workers are GPU nodes Ansible can log in to (:func:`setup_ssh`): sshd (Debian's, with
``python3``, both in the rootfs) runs in each, root logs in with the test bed's key only, and
``<dir>/gpu_nodes.yml`` lists them as inventory group gpu_nodes with a known_hosts file of their
host keys, so gpu-stack.yml in packages mode and doctor.yml reach their files over SSH.

bcd runs on the workers: ``up`` builds the stand-in bcd image (``sandbox/kind/standin.py``,
``localhost/bcd:0.1.0`` and its bad build) and loads it into the nodes; ``up --attach`` runs the
control-plane emulator listening on the kind network's gateway address, where bcd in its pods
joins and reports (``inventories/kind`` adopts the cluster with it).

Requirements: root, podman, runc, mmdebstrap, uidmap, the CNI plugins, netavark and aardvark-dns
(installed with apt-get when missing and running as root; otherwise ``up`` stops, naming the
packages), gcc (the pause image), Go (the builds). PodSecurity admission is kubeadm's API server
default, as in the KWOK sandbox. The cluster's admin kubeconfig is ``<dir>/kubeconfig``, the
directory being ``$KIND_DIR`` (``python -m sandbox kind`` defaults it to ``.kind`` in the checkout); the cluster's name is
``$KIND_CLUSTER_NAME`` (default ``bcd-kind``). kind clusters are global to the machine (podman
containers named ``<name>-control-plane``, ``<name>-worker``, ``<name>-worker2``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from sandbox import build, cluster, crictl, proc

HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
# The rootfs of the node image: kind's base-image package set on Debian's own containerd and runc.
ROOTFS_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "containerd", "runc", "iptables", "nftables", "conntrack",
    "iproute2", "ethtool", "ebtables", "kmod", "mount", "util-linux", "ca-certificates", "curl",
    "containernetworking-plugins", "socat", "procps", "pigz", "rsync", "fuse-overlayfs", "jq",
    "e2fsprogs", "bash", "libseccomp2", "ipset",
    # The workers are GPU nodes Ansible logs in to (packages mode): sshd and a Python for modules.
    "openssh-server", "python3",
)
# Host requirements: (what is checked, the Debian package that provides it).
HOST_NEEDS = (
    ("podman", "podman"), ("runc", "runc"), ("mmdebstrap", "mmdebstrap"), ("newuidmap", "uidmap"),
    ("/usr/lib/cni/ptp", "containernetworking-plugins"), ("/usr/lib/podman/netavark", "netavark"),
    ("/usr/lib/podman/aardvark-dns", "aardvark-dns"), ("iptables", "iptables"), ("gcc", "gcc"),
    ("/usr/lib/*/libc.a", "libc6-dev"),
)
# kind's containerd config names pause 3.10; kubeadm 1.36 lists 3.10.2.
PAUSE_TAGS = ("3.10", "3.10.2")
TOOLBOX = "localhost/bcd-kind/debian:" + SUITE


class KindError(RuntimeError):
    """The kind test bed could not be built, started or checked; the message says what and why."""


def _b(name: str, module: str, requires: str, package: str, version_args: tuple[str, ...], pattern: str):
    return build.Binary(name, module, requires, package, version_args, pattern)


K8S = "k8s.io/kubernetes"
BINARIES = {
    "kind": _b("kind", "kind", "sigs.k8s.io/kind", "sigs.k8s.io/kind", ("version",), r"kind v{version}\b"),
    "kubelet": _b("kubelet", "node", K8S, K8S + "/cmd/kubelet", ("--version",), r"Kubernetes v{version}\b"),
    "kubeadm": _b("kubeadm", "node", K8S, K8S + "/cmd/kubeadm", ("version", "-o", "short"), r"v{version}\b"),
    "kube-proxy": _b("kube-proxy", "node", K8S, K8S + "/cmd/kube-proxy", ("--version",), r"Kubernetes v{version}\b"),
    "coredns": _b("coredns", "coredns", "github.com/coredns/coredns", "github.com/coredns/coredns",
                  ("-version",), r"CoreDNS-{version}\b"),
}


def kube_minor() -> str:
    """The Kubernetes minor release kind runs: always the newest one with node binaries
    (``sandbox/go/node-<minor>``); ``SANDBOX_KUBE_VERSION`` picks the sandbox's, not kind's."""
    return build.kube_minor("", module="node")


def kube_version() -> str:
    return build.pinned_version("kube", K8S, kube_minor())


def etcd_version() -> str:
    return build.pinned_version("etcd", "go.etcd.io/etcd/server/v3")


def kind_version() -> str:
    return build.pinned_version("kind", "sigs.k8s.io/kind")


def coredns_version() -> str:
    return build.pinned_version("coredns", "github.com/coredns/coredns")


def cluster_name() -> str:
    return os.environ.get("KIND_CLUSTER_NAME") or "bcd-kind"


def kind_dir() -> Path:
    """``$KIND_DIR`` (``python -m sandbox kind`` sets it, default ``.kind`` beside the sandbox's
    default): the kind config, the admin kubeconfig, logs. Raises NoStateDir when it is not set."""
    env = os.environ.get("KIND_DIR")
    if not env:
        raise proc.NoStateDir("sandbox kind: no state directory: set KIND_DIR (python -m sandbox kind sets it)")
    return Path(env).resolve()


def cache() -> Path:
    """``$XDG_CACHE_HOME/bcd-ansible/kind``: podman's config, image stamps, build contexts, logs."""
    return build.cache_dir().parent / "kind"


def say(msg: str) -> None:
    print(msg, flush=True)


def _fmt(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


# ---------------------------------------------------------------------------- host and podman


def missing_host_packages() -> list[str]:
    """The Debian packages whose commands or files are missing on this machine."""
    missing = []
    for what, package in HOST_NEEDS:
        found = any(Path("/").glob(what[1:])) if what.startswith("/") else shutil.which(what) is not None
        if not found and package not in missing:
            missing.append(package)
    return missing


def ensure_host(say=say) -> None:
    """Install the missing Debian packages (as root), or raise KindError naming them."""
    missing = missing_host_packages()
    if missing:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise KindError(f"kind: missing {', '.join(missing)}; install them (as root: apt-get install "
                            f"--no-install-recommends {' '.join(missing)}) and run again")
        say(f"kind: installing {', '.join(missing)} with apt-get")
        log = cache() / "logs" / "apt-get.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if _run_logged(argv, log, env=env) != 0:
            # A fresh machine may have no package lists yet.
            _run_logged(["apt-get", "update"], log, env=env)
            if _run_logged(argv, log, env=env) != 0:
                raise KindError(f"kind: apt-get install {' '.join(missing)} failed; the end of {log}:\n{_tail(log)}")
        still = missing_host_packages()
        if still:
            raise KindError(f"kind: still missing after apt-get install: {', '.join(still)}")
    if os.geteuid() != 0:
        raise KindError("kind: the test bed runs rootful podman; run as root")
    if not Path("/lib/modules").is_dir():
        # kind bind-mounts /lib/modules into every node; podman refuses a missing source.
        Path("/lib/modules").mkdir(parents=True)
        say("kind: created the empty directory /lib/modules (kind mounts it into its nodes)")


# inotify instances the test bed takes from root's fs.inotify.max_user_instances: 55 measured, 3 spare
# (systemd 4, kubelet 7, containerd, dbus and kube-proxy 1 each per node; 13 for the control plane).
INOTIFY_NEEDED = 58


def inotify_in_use() -> int:
    """inotify instances held by root's processes (all of them count against one limit)."""
    used = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if fd_dir.parent.stat().st_uid != 0:
                continue
            used += sum(1 for fd in fd_dir.iterdir() if os.readlink(fd) == "anon_inode:inotify")
        except OSError:
            continue
    return used


def inotify_shortfall() -> str | None:
    """Why the kind nodes would not get the inotify instances they need, or None."""
    try:
        limit = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    except (OSError, ValueError):
        return None
    used = inotify_in_use()
    if limit - used >= INOTIFY_NEEDED:
        return None
    return (f"kind: only {max(limit - used, 0)} of root's {limit} inotify instances are free "
            f"(fs.inotify.max_user_instances; {used} in use, by other sandboxes or clusters on this machine); "
            f"the kind nodes need about {INOTIFY_NEEDED}, and a kubelet without one exits with "
            "'inotify_init: too many open files'. Stop other sandboxes, or raise the limit "
            "(as root: sysctl -w fs.inotify.max_user_instances=1024, kind's documented fix; "
            "the test bed does not change system settings itself)")


def kubelet_problems(names: list[str] | None = None) -> list[str]:
    """For each node container whose kubelet is not active: the node and its kubelet's last error."""
    problems = []
    for node in names or node_names():
        active = podman("exec", node, "systemctl", "is-active", "kubelet", check=False)
        if active.stdout.strip() == "active":
            continue
        journal = podman("exec", node, "journalctl", "-u", "kubelet", "--no-pager", "-n", "200", check=False)
        # klog lines: "E1130 17:37:05.071787 3758 kubelet.go:1804] "Failed to start cAdvisor" err=..."
        errors = [m.group(1) for m in re.finditer(r"\bE\d{4} [\d:.]+\s+\d+ [^\]]+\] (.*)", journal.stdout)]
        with_err = [e for e in errors if "err=" in e]
        last = (with_err or errors or journal.stdout.strip().splitlines() or ["no kubelet log"])[-1]
        problems.append(f"{node}: kubelet {active.stdout.strip() or 'not running'}: {last[-300:]}")
    return problems


def _not_ready(what: str) -> KindError:
    problems = kubelet_problems()
    hint = ""
    if any("too many open files" in p for p in problems):
        hint = "\n" + (inotify_shortfall() or "kind: root's inotify instances ran out (fs.inotify.max_user_instances)")
    return KindError(f"{what}" + "".join(f"\n  {p}" for p in problems) + hint)


def containers_conf() -> Path:
    """podman's configuration for the test bed (``CONTAINERS_CONF``); /etc/containers is untouched."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = min(hard, 1048576) if hard != resource.RLIM_INFINITY else 1048576
    _, nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = min(nproc_hard, 32768) if nproc_hard != resource.RLIM_INFINITY else 32768
    text = (
        "# Written by python -m sandbox kind: podman's settings for the kind test bed only.\n"
        "[containers]\n"
        "# podman's default ulimits exceed this machine's hard limits; setrlimit would fail.\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        "# crun rejects hybrid cgroup v1 hierarchies.\n"
        'runtime = "runc"\n'
        "[network]\n"
        "# kind's nodes reach the control plane by container name: netavark with aardvark-dns.\n"
        'network_backend = "netavark"\n'
    )
    path = cache() / "containers.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf()), "KIND_EXPERIMENTAL_PROVIDER": "podman"}


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _run_logged(argv: list[str], log: Path, *, env=None, cwd=None, stdin=None, nice: bool = False) -> int:
    if nice and shutil.which("nice"):
        argv = ["nice", "-n", "10", *argv]
    with open(log, "ab") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n".encode())
        fh.flush()
        return subprocess.run(argv, env=env or podman_env(), cwd=cwd, stdin=stdin, stdout=fh,
                              stderr=subprocess.STDOUT, check=False).returncode


def _step(what: str, argv: list[str], log: Path, **kw) -> None:
    if _run_logged(argv, log, **kw) != 0:
        raise KindError(f"kind: {what} failed: {' '.join(argv[:4])}...; the end of {log}:\n{_tail(log)}")


def podman(*args: str, check: bool = True, timeout: float | None = 600) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True, check=False,
                         timeout=timeout)
    if check and out.returncode != 0:
        raise KindError(f"kind: podman {' '.join(args[:3])} failed (exit {out.returncode}): "
                        f"{(out.stderr or out.stdout).strip()[-2000:]}")
    return out


def _image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


# ---------------------------------------------------------------------------- binaries


def resolve_binaries(say=say) -> dict[str, Path]:
    """The kind test bed's binaries: the sandbox's control plane and etcd, plus kind, kubelet,
    kubeadm, kube-proxy and CoreDNS, found or built into the shared cache (see sandbox/build.py),
    and crictl (sandbox/crictl.py)."""
    minor = kube_minor()
    paths = {k: Path(v) for k, v in build.resolve(
        ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"], say=say,
        minor=minor).items()}
    with build._lock():
        missing: list[build.Binary] = []
        for b in BINARIES.values():
            found = build._found(b, say, minor)
            if found:
                paths[b.name] = found
            else:
                missing.append(b)
        for module in dict.fromkeys(b.module for b in missing):
            batch = [b for b in missing if b.module == module]
            build._go_build(module, batch, say, minor)
            for b in batch:
                paths[b.name] = build.cached_path(b, minor)
    # not in the node image (its key stays): molecule/kind/verify_runtime.yml copies it onto a worker
    paths["crictl"] = crictl.resolve(say)
    return paths


def module_dir(module: str, requires: str, version: str) -> Path:
    """The directory of ``requires@v<version>`` in Go's module cache (downloaded when missing)."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{requires}@v{version}"],
                         cwd=build.GO_DIR / build.module_dir_name(module, kube_minor()),
                         env={**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=readonly"},
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise KindError(f"kind: go mod download {requires}@v{version} failed: {out.stderr.strip()[-1000:]}")
    return Path(json.loads(out.stdout)["Dir"])


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------- images


class Images:
    """Builds the node image and the images it carries, each cached in podman's storage with a stamp."""

    def __init__(self, bins: dict[str, Path], say=say):
        self.bins = bins
        self.say = say
        self.root = cache()
        (self.root / "stamps").mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        (self.root / "archives").mkdir(parents=True, exist_ok=True)
        self.log = self.root / "logs" / "images.log"
        self.built: list[str] = []
        self.archives: list[str] = []   # the archives of this build's images (older ones may linger)

    def _cached(self, tag: str, key: str) -> bool:
        stamp = self.root / "stamps" / (tag.replace("/", "_").replace(":", "_") + ".stamp")
        try:
            return stamp.read_text().strip() == key and _image_exists(tag)
        except OSError:
            return False

    def _stamp(self, tag: str, key: str) -> None:
        (self.root / "stamps" / (tag.replace("/", "_").replace(":", "_") + ".stamp")).write_text(key + "\n")

    def _ensure(self, tag: str, key: str, what: str, make) -> bool:
        if self._cached(tag, key):
            return False
        self.say(f"kind: building {what} ({tag}; log: {self.log})")
        t0 = time.monotonic()
        make()
        self._stamp(tag, key)
        self.built.append(tag)
        self.say(f"kind: built {what} in {_fmt(time.monotonic() - t0)}")
        return True

    # -- rootfs

    def rootfs(self) -> tuple[str, str]:
        tag = f"localhost/bcd-kind/rootfs:{SUITE}"
        key = _digest("rootfs", SUITE, ROOTFS_PACKAGES)

        def make() -> None:
            target = self.root / "rootfs"
            shutil.rmtree(target, ignore_errors=True)
            # mmdebstrap downloads from the machine's apt sources; about 2-5 minutes.
            done = threading.Event()
            t0 = time.monotonic()

            def tick() -> None:
                while not done.wait(30):
                    self.say(f"kind: mmdebstrap {SUITE}: {_fmt(time.monotonic() - t0)} elapsed")

            thread = threading.Thread(target=tick, daemon=True)
            thread.start()
            try:
                _step("mmdebstrap", ["mmdebstrap", "--variant=minbase", "--format=directory",
                                     "--include=" + ",".join(ROOTFS_PACKAGES), SUITE, str(target)],
                      self.log, nice=True)
            finally:
                done.set()
                thread.join()
            self._import_dir(target, tag)
            shutil.rmtree(target, ignore_errors=True)

        self._ensure(tag, key, f"the Debian {SUITE} rootfs with mmdebstrap", make)
        # What is built on it follows the image itself, rebuilt or not.
        return tag, _digest(key, podman("image", "inspect", "-f", "{{.Id}}", tag).stdout.strip())

    def _import_dir(self, target: Path, tag: str) -> None:
        tar = subprocess.Popen(["tar", "-C", str(target), "--numeric-owner", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        try:
            _step("podman import", ["podman", "import", "-", tag], self.log, stdin=tar.stdout)
        finally:
            tar.stdout.close()
            tar.wait()

    # -- base

    def base(self, rootfs: tuple[str, str]) -> tuple[str, str]:
        tag = f"localhost/bcd-kind/base:{kind_version()}"
        kind_files = module_dir("kind", "sigs.k8s.io/kind", kind_version()) / "images" / "base" / "files"
        ctx = self.root / "ctx-base"
        shutil.rmtree(ctx, ignore_errors=True)
        shutil.copytree(kind_files, ctx / "files")
        shutil.copytree(HERE / "node", ctx / "bcd")
        (ctx / "Containerfile").write_text((HERE / "base.Containerfile").read_text().replace("@ROOTFS@", rootfs[0]))
        for p in ctx.rglob("*"):
            os.chmod(p, 0o755 if p.is_dir() else (p.stat().st_mode | 0o644))
        key = _digest("base", rootfs[1], _tree_digest(ctx))
        self._ensure(tag, key, "the node base image (kind's base-image files on the rootfs)",
                     lambda: _step("podman build base", ["podman", "build", "--network=none", "-t", tag, str(ctx)],
                                   self.log, nice=True))
        return tag, key

    # -- the images kubeadm's manifests name

    def _binary_image(self, tag: str, files: dict[str, Path], containerfile: str, extra_tags=(), base_key="") -> str:
        key = _digest("image", containerfile, {k: _file_key(v) for k, v in files.items()}, extra_tags, base_key)
        archive = self.root / "archives" / (tag.replace("/", "_").replace(":", "_") + ".tar")
        self.archives.append(archive.name)

        def make() -> None:
            ctx = Path(tempfile.mkdtemp(prefix="ctx-", dir=self.root))
            try:
                for name, src in files.items():
                    shutil.copy2(src, ctx / name)
                (ctx / "Containerfile").write_text(containerfile)
                _step(f"podman build {tag}", ["podman", "build", "--network=none", "-t", tag,
                                              *[a for t in extra_tags for a in ("-t", t)], str(ctx)],
                      self.log, nice=True)
            finally:
                shutil.rmtree(ctx, ignore_errors=True)
            archive.unlink(missing_ok=True)
            _step(f"podman save {tag}", ["podman", "save", "--format", "docker-archive", "-m", "-o", str(archive),
                                         tag, *extra_tags], self.log)

        if not self._ensure(tag, key, tag, make) and not archive.exists():
            # The image is cached but its archive is gone: save it again for the node image.
            _step(f"podman save {tag}", ["podman", "save", "--format", "docker-archive", "-m", "-o", str(archive),
                                         tag, *extra_tags], self.log)
        return key

    def components(self, rootfs: tuple[str, str]) -> list[str]:
        """The images kubeadm and kind's containerd name, from the sandbox's binaries. Their keys."""
        kv = kube_version()
        keys = []
        scratch = ("FROM scratch\nENV PATH=/usr/local/bin:/usr/bin:/bin\nCOPY {name} /usr/local/bin/{name}\n"
                   "ENTRYPOINT [\"/usr/local/bin/{name}\"]\n")
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            keys.append(self._binary_image(f"registry.k8s.io/{name}:v{kv}", {name: self.bins[name]},
                                           scratch.format(name=name)))
        keys.append(self._binary_image(f"registry.k8s.io/etcd:{etcd_version()}-0", {"etcd": self.bins["etcd"]},
                                       scratch.format(name="etcd")))
        keys.append(self._binary_image(f"registry.k8s.io/coredns/coredns:v{coredns_version()}",
                                       {"coredns": self.bins["coredns"]},
                                       "FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\n"
                                       "ENTRYPOINT [\"/coredns\"]\n"))
        # kube-proxy needs iptables, ip6tables, ipset and conntrack: the Debian rootfs has them. The same
        # image, tagged TOOLBOX, gives tests a shell and getent without a registry.
        keys.append(self._binary_image(
            f"registry.k8s.io/kube-proxy:v{kv}", {"kube-proxy": self.bins["kube-proxy"]},
            f"FROM {rootfs[0]}\nCOPY kube-proxy /usr/local/bin/kube-proxy\n", extra_tags=(TOOLBOX,), base_key=rootfs[1]))
        keys.append(self._pause())
        return keys

    def _pause(self) -> str:
        src = module_dir("kube", K8S, kube_version()) / "build" / "pause" / "linux" / "pause.c"
        out = self.root / "pause"
        key_src = _digest("pause", src.read_text(), PAUSE_TAGS)
        stamp = self.root / "stamps" / "pause-binary.stamp"
        if not (out.exists() and stamp.exists() and stamp.read_text().strip() == key_src):
            _step("gcc pause.c", ["gcc", "-Os", "-static", f"-DVERSION=v{PAUSE_TAGS[-1]}", "-o", str(out), str(src)],
                  self.log, nice=True)
            stamp.write_text(key_src + "\n")
        tags = [f"registry.k8s.io/pause:{t}" for t in PAUSE_TAGS]
        return self._binary_image(tags[0], {"pause": out},
                                  "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n",
                                  extra_tags=tuple(tags[1:]))

    # -- node

    def node(self, base: tuple[str, str], component_keys: list[str]) -> str:
        kv = kube_version()
        files = {n: self.bins[n] for n in ("kubelet", "kubeadm", "kubectl")}
        key = _digest("node", base[1], component_keys, {k: _file_key(v) for k, v in files.items()}, self.archives)
        tag = f"localhost/bcd-kind/node:v{kv}"

        def make() -> None:
            name = "bcd-kind-assemble"
            podman("rm", "-f", "-t", "0", name, check=False)
            archives = self.root / "archives"
            podman("run", "-d", "--privileged", "--name", name, "--network=none", "--entrypoint", "sleep",
                   "-v", f"{archives}:/kind/images:ro", base[0], "infinity")
            try:
                for n, src in files.items():
                    podman("cp", str(src), f"{name}:/usr/bin/{n}")
                script = (
                    f"set -e; echo v{kv} > /kind/version; chmod 755 /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl\n"
                    "mkdir -p /run/containerd; (containerd > /tmp/containerd.log 2>&1 &)\n"
                    "for i in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done\n"
                    f"for f in {' '.join(self.archives)}; do "
                    "ctr -n k8s.io images import --no-unpack --all-platforms \"/kind/images/$f\"; done\n"
                    "for r in $(ctr -n k8s.io images ls -q); do "
                    "ctr -n k8s.io images label \"$r\" io.cri-containerd.pinned=pinned >/dev/null; done\n"
                    "ctr -n k8s.io images ls -q\n"
                    "kill $(pidof containerd); for i in $(seq 50); do pidof containerd >/dev/null || break; sleep 0.2; done\n"
                    "rm -rf /tmp/containerd.log /run/containerd\n"
                )
                _step("node image: importing images into containerd", ["podman", "exec", name, "sh", "-c", script],
                      self.log)
                _step("podman commit", ["podman", "commit", "-q",
                                        "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
                                        "--change", "CMD []", name, tag], self.log)
            finally:
                podman("rm", "-f", "-t", "0", name, check=False)

        self._ensure(tag, key, f"the node image (kubelet v{kv} and the images it runs)", make)
        return tag


def build_images(say=say) -> str:
    """Find or build every image of the test bed; the node image's tag."""
    t0 = time.monotonic()
    containers_conf()
    bins = resolve_binaries(say)
    # One builder at a time: the image tags and the build contexts are shared by every checkout.
    with open(cache() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        images = Images(bins, say)
        rootfs = images.rootfs()
        base = images.base(rootfs)
        keys = images.components(rootfs)
        node = images.node(base, keys)
    if images.built:
        say(f"kind: images ready in {_fmt(time.monotonic() - t0)} (built {len(images.built)})")
    return node


# ---------------------------------------------------------------------------- cluster


def _kind(*args: str, check: bool = True, stream: bool = False, timeout: float = 900) -> subprocess.CompletedProcess:
    kind = str(build.cache_dir() / "kind") if (build.cache_dir() / "kind").exists() else "kind"
    argv = [kind, *args]
    if stream:
        proc = subprocess.Popen(argv, env=podman_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        t0 = time.monotonic()
        for line in proc.stdout:
            line = line.rstrip()
            lines.append(line)
            if line.strip():
                say(f"kind: {_fmt(time.monotonic() - t0)} | {line.strip()}")
        rc = proc.wait(timeout=timeout)
        out = subprocess.CompletedProcess(argv, rc, "\n".join(lines), "")
    else:
        out = subprocess.run(argv, env=podman_env(), capture_output=True, text=True, check=False, timeout=timeout)
    if check and out.returncode != 0:
        raise KindError(f"kind: `kind {' '.join(args[:2])}` failed (exit {out.returncode}): "
                        f"{(out.stdout + out.stderr).strip()[-3000:]}")
    return out


def exists(name: str | None = None) -> bool:
    if not (build.cache_dir() / "kind").exists() and not shutil.which("kind"):
        return False
    out = _kind("get", "clusters", check=False)
    return (name or cluster_name()) in out.stdout.split()


def node_names(name: str | None = None) -> list[str]:
    name = name or cluster_name()
    return [f"{name}-control-plane", f"{name}-worker", f"{name}-worker2"]


def kind_config(node_image: str) -> dict[str, Any]:
    return {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"disableDefaultCNI": True, "podSubnet": "10.244.0.0/16"},
        "nodes": [{"role": "control-plane", "image": node_image},
                  {"role": "worker", "image": node_image},
                  {"role": "worker", "image": node_image}],
        "kubeadmConfigPatches": [
            # The etcd and CoreDNS images are the sandbox's own builds at their own versions, not
            # the ones each kubeadm release would pull.
            f"kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: {etcd_version()}-0\n"
            f"dns:\n  imageTag: v{coredns_version()}\n",
            # kubelet 1.36 refuses cgroup v1 unless told otherwise; these machines are hybrid v1.
            "kind: KubeletConfiguration\nfailCgroupV1: false\n",
        ],
    }


def node_exec(node: str, script: str, check: bool = True) -> subprocess.CompletedProcess:
    out = podman("exec", node, "sh", "-c", script, check=False, timeout=120)
    if check and out.returncode != 0:
        raise KindError(f"kind: on node {node}: `{script[:80]}` failed (exit {out.returncode}): "
                        f"{(out.stderr or out.stdout).strip()[-1500:]}")
    return out


def set_nvidia_handler(node: str, present: bool) -> None:
    """Add or remove the ``nvidia`` runtime handler in ``node``'s containerd (restarts containerd)."""
    node_exec(node, f"/kind/bin/bcd-nvidia-handler.sh {'on' if present else 'off'}")


def _api(sdir: Path):
    return cluster.api_client(sdir)


def setup_network(sdir: Path, say=say, timeout: float = 180) -> None:
    """Per-node ptp CNI config for the node's pod CIDR, routes to the others, masquerade out."""
    from kubernetes import client

    deadline = time.monotonic() + timeout
    # Only kind's own nodes: KWOK's simulated nodes (--attach) have no container to route to.
    own = set(node_names())
    with _api(sdir) as api:
        core = client.CoreV1Api(api)
        while True:
            nodes = [n for n in core.list_node().items if n.metadata.name in own]
            cidrs = {n.metadata.name: n.spec.pod_cidr for n in nodes}
            if len(nodes) >= 3 and all(cidrs.values()):
                break
            if time.monotonic() > deadline:
                raise _not_ready(f"kind: nodes without a pod CIDR after {timeout:.0f}s: {cidrs}")
            time.sleep(1)
    addrs = {n.metadata.name: next(a.address for a in n.status.addresses if a.type == "InternalIP") for n in nodes}
    for node in cidrs:
        conf = {
            "cniVersion": "0.4.0", "name": "bcd-kind",
            "plugins": [
                {"type": "ptp", "mtu": 1500,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": cidrs[node]}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        routes = "".join(f"ip route replace {cidrs[o]} via {addrs[o]}\n" for o in cidrs if o != node)
        script = (
            "set -e\n"
            f"cat > /etc/cni/net.d/10-bcd-kind.conflist.tmp <<'EOF'\n{json.dumps(conf, indent=1)}\nEOF\n"
            "mv /etc/cni/net.d/10-bcd-kind.conflist.tmp /etc/cni/net.d/10-bcd-kind.conflist\n"
            f"{routes}"
            "iptables -t nat -C POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE 2>/dev/null || "
            "iptables -t nat -A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE\n"
        )
        node_exec(node, script)
    say(f"kind: pod network: {', '.join(f'{n} {c}' for n, c in sorted(cidrs.items()))}")


def label_gpu_workers(sdir: Path, workers: list[str]) -> None:
    """Label the workers as GPU feature discovery labels a GPU node (the sandbox's GPU_LABELS), so
    what selects GPU nodes selects them; they have no GPU, only the ``nvidia`` handler."""
    from kubernetes import client

    with _api(sdir) as api:
        core = client.CoreV1Api(api)
        for node in workers:
            core.patch_node(node, {"metadata": {"labels": cluster.GPU_LABELS}})


def wait_ready(sdir: Path, say=say, timeout: float = 240) -> None:
    """Every node Ready and CoreDNS available, or KindError naming what is not."""
    from kubernetes import client

    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    last = 0.0
    with _api(sdir) as api:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        while True:
            nodes = core.list_node().items
            not_ready = [n.metadata.name for n in nodes
                         if not any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])]
            dns = apps.read_namespaced_deployment("coredns", "kube-system")
            dns_ok = (dns.status.available_replicas or 0) >= (dns.spec.replicas or 1)
            if len(nodes) >= 3 and not not_ready and dns_ok:
                return
            if time.monotonic() > deadline:
                raise _not_ready(f"kind: not ready after {timeout:.0f}s: nodes not Ready: {not_ready or 'none'}; "
                                 f"CoreDNS available {dns.status.available_replicas or 0}/{dns.spec.replicas}")
            if time.monotonic() - last > 15:
                last = time.monotonic()
                say(f"kind: waiting: {len(nodes) - len(not_ready)}/{len(nodes)} nodes Ready, CoreDNS "
                    f"{dns.status.available_replicas or 0}/{dns.spec.replicas} ({_fmt(time.monotonic() - t0)})")
            time.sleep(2)


def network_gateway() -> str:
    """The IPv4 gateway address of the podman network the kind nodes are on (``$KIND_EXPERIMENTAL_PODMAN_NETWORK``,
    default ``kind``): the host as pods on the nodes reach it (hostNetwork pods included)."""
    net = os.environ.get("KIND_EXPERIMENTAL_PODMAN_NETWORK") or "kind"
    out = podman("network", "inspect", net, "--format", "{{range .Subnets}}{{.Gateway}} {{end}}")
    for addr in out.stdout.split():
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", addr):
            return addr
    raise KindError(f"kind: the podman network {net} has no IPv4 gateway ({out.stdout.strip() or 'none'})")


# The GPU operator's toolkit configuration on a GPU node, as bcd reads it (seed: GPU isolation):
# the workers get it so that the DaemonSet's read-only toolkit mount (hostPath type Directory)
# exists there, with the setting GPU isolation requires.
TOOLKIT_CONFIG = ("/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",
                  "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
                  "[nvidia-container-runtime]\nmode = \"cdi\"\n")


# sshd on the workers: key logins only (root may log in with a key: these are test nodes).
SSHD_DROPIN = ("/etc/ssh/sshd_config.d/bcd-kind.conf",
               "# Written by python -m sandbox kind up: the test bed logs in with its own key only.\n"
               "PermitRootLogin prohibit-password\nAuthenticationMethods publickey\n"
               "PasswordAuthentication no\nKbdInteractiveAuthentication no\n")


def ssh_dir() -> Path:
    """``<kind dir>/ssh``: the test bed's client key (``id_ed25519``, 0600) and ``known_hosts``."""
    return kind_dir() / "ssh"


def gpu_nodes_file() -> Path:
    """``<kind dir>/gpu_nodes.yml``: the workers as inventory group gpu_nodes (written by ``up``,
    gone after ``down``). Packages mode adds it to the kind inventory: ``-i inventories/kind -i
    <kind dir>/gpu_nodes.yml -e bcd_nvidia_toolkit=packages``."""
    return kind_dir() / "gpu_nodes.yml"


def node_address(node: str) -> str:
    """The node container's IPv4 address on the kind network."""
    net = os.environ.get("KIND_EXPERIMENTAL_PODMAN_NETWORK") or "kind"
    out = podman("inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{net}").IPAddress}}}}', node)
    addr = out.stdout.strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", addr):
        raise KindError(f"kind: node {node} has no IPv4 address on the podman network {net} ({addr or 'none'})")
    return addr


def setup_ssh(workers: list[str], say=say) -> dict[str, Any]:
    """Let Ansible log in to the workers over SSH as to GPU nodes (packages mode, doctor.yml's node
    reads): a client key pair made once per kind directory, root's ``authorized_keys`` and host keys
    of its own (``ssh-keygen -A``; the image has none) in each worker, sshd started there, the
    workers' host keys (read through podman, not over the network) in ``known_hosts``, checked
    strictly. Writes and returns the gpu_nodes inventory (:func:`gpu_nodes_file`)."""
    sshd = ssh_dir()
    sshd.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(sshd, 0o700)
    key = sshd / "id_ed25519"
    if not key.exists() or not key.with_suffix(".pub").exists():
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"bcd-kind@{cluster_name()}",
                        "-f", str(key)], check=True, capture_output=True, timeout=60)
    os.chmod(key, 0o600)
    pub = key.with_suffix(".pub").read_text().strip()
    dropin, text = SSHD_DROPIN
    known, hosts = [], {}
    for node in workers:
        node_exec(node, "set -e\n"
                        "install -d -m 0700 /root/.ssh\n"
                        f"printf '%s\\n' '{pub}' > /root/.ssh/authorized_keys\n"
                        "chmod 0600 /root/.ssh/authorized_keys\n"
                        f"printf '%s' '{text}' > {dropin}\n"
                        "test -f /etc/ssh/ssh_host_ed25519_key || ssh-keygen -q -A\n"
                        "systemctl restart ssh\n")
        host_key = node_exec(node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        addr = node_address(node)
        known.append(f"{addr} {host_key[0]} {host_key[1]}\n")
        hosts[node] = addr
    (sshd / "known_hosts").write_text("".join(known))
    common = (f"-o UserKnownHostsFile={sshd / 'known_hosts'} -o StrictHostKeyChecking=yes "
              "-o GlobalKnownHostsFile=/dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=10")
    # Host variables, not the group's: inventories/kind/group_vars/all.yml (local connection, the
    # controller's Python) takes precedence over an inventory file's group variables.
    inventory = {"gpu_nodes": {"hosts": {node: {
        "ansible_host": addr, "bcd_node_name": node, "ansible_connection": "ssh", "ansible_user": "root",
        "ansible_ssh_private_key_file": str(key), "ansible_ssh_common_args": common,
        "ansible_python_interpreter": "/usr/bin/python3",
    } for node, addr in hosts.items()}}}
    cluster._write_private(gpu_nodes_file(), "# Written by python -m sandbox kind up: the kind workers over SSH.\n"
                           + yaml.safe_dump(inventory, sort_keys=False))
    say(f"kind: sshd on {', '.join(f'{n} ({a})' for n, a in hosts.items())}: root logs in with {key}; "
        f"inventory group gpu_nodes in {gpu_nodes_file()}")
    return inventory


def attach_dir() -> Path:
    """The sandbox directory of the simulated part attached to the kind cluster (``<kind dir>/sandbox``);
    ``SANDBOX_DIR`` for inventories/sandbox and ``python -m sandbox status``."""
    return kind_dir() / "sandbox"


def up(say=say, attach: bool = False, kwok_nodes: int | None = None) -> Path:
    """Build what is missing and start (or complete) the kind test bed; the admin kubeconfig's path.

    ``attach`` then runs the sandbox's simulated part on it (``python -m sandbox attach``): the
    control-plane emulator and KWOK nodes (``kwok_nodes`` simulated GPU nodes, default 0, and the
    simulated CPU node), with ``attach_dir()`` as its sandbox directory.
    """
    t0 = time.monotonic()
    name = cluster_name()
    sdir = kind_dir()
    ensure_host(say)
    node_image = build_images(say)
    t1 = time.monotonic()
    sdir.mkdir(parents=True, exist_ok=True)
    os.chmod(sdir, 0o700)
    (sdir / "kind-config.yaml").write_text(yaml.safe_dump(kind_config(node_image), sort_keys=False))
    kubeconfig = sdir / "kubeconfig"
    if not exists(name):
        short = inotify_shortfall()
        if short:
            raise KindError(short)
        say(f"kind: creating cluster {name} (1 control-plane node, 2 workers) from {node_image}")
        _kind("create", "cluster", "--name", name, "--config", str(sdir / "kind-config.yaml"),
              "--kubeconfig", str(kubeconfig), stream=True)
        created = True
    else:
        say(f"kind: cluster {name} exists; completing its set-up")
        kc = _kind("get", "kubeconfig", "--name", name)
        cluster._write_private(kubeconfig, kc.stdout)
        created = False
    os.chmod(kubeconfig, 0o600)
    for node in node_names(name)[1:]:
        node_exec(node, "/kind/bin/bcd-nvidia-handler.sh on")
        path, text = TOOLKIT_CONFIG
        node_exec(node, f"test -f {path} || {{ mkdir -p {os.path.dirname(path)} && printf '%s' '{text}' > {path}; }}")
    setup_ssh(node_names(name)[1:], say)
    setup_network(sdir, say)
    label_gpu_workers(sdir, node_names(name)[1:])
    cluster.ensure_objects(sdir)
    wait_ready(sdir, say)
    from sandbox.kind import standin

    standin.load(say)
    if attach:
        # bcd on the real nodes reaches the emulator at the podman network's gateway address.
        cluster.attach(attach_dir(), kubeconfig, nodes=kwok_nodes or 0, listen=network_gateway())
        say(f"kind: simulated part attached (the control-plane emulator at {network_gateway()}); "
            f"SANDBOX_DIR={attach_dir()} for inventories/sandbox, or inventories/kind")
    say(f"kind: cluster {name} up in {_fmt(time.monotonic() - t0)} (images {_fmt(t1 - t0)}, "
        f"{'create' if created else 'check'} {_fmt(time.monotonic() - t1)}): 3 nodes Ready, CoreDNS available, "
        f"RuntimeClass nvidia (handler on the workers), ClusterPolicy; KUBECONFIG={kubeconfig}")
    return kubeconfig


def down(say=say) -> list[str]:
    """Delete the kind cluster and its directory; problems met on the way."""
    name = cluster_name()
    problems = []
    if attach_dir().exists():
        problems += cluster.down(attach_dir())
    if exists(name):
        out = _kind("delete", "cluster", "--name", name, check=False)
        if out.returncode != 0:
            problems.append(f"kind: delete cluster {name} failed: {(out.stdout + out.stderr).strip()[-1000:]}")
        else:
            say(f"kind: deleted cluster {name}")
    else:
        say(f"kind: no cluster {name}")
    left = [n for n in node_names(name) if podman("container", "exists", n, check=False).returncode == 0] \
        if shutil.which("podman") else []
    if left:
        problems.append(f"kind: containers left: {', '.join(left)} (podman rm -f {' '.join(left)})")
    if not problems:
        shutil.rmtree(kind_dir(), ignore_errors=True)
    return problems


def status() -> tuple[bool, dict[str, Any]]:
    """(up?, report): the cluster, its node containers, node readiness, CoreDNS, the kubeconfig."""
    from kubernetes import client

    name = cluster_name()
    sdir = kind_dir()
    report: dict[str, Any] = {"name": name, "dir": str(sdir), "kubeconfig": str(sdir / "kubeconfig"),
                              "exists": False, "containers": {}, "nodes": {}, "coredns": None}
    if not shutil.which("podman"):
        report["error"] = "podman is not installed"
        return False, report
    report["exists"] = exists(name)
    for n in node_names(name):
        out = podman("inspect", "-f", "{{.State.Status}}", n, check=False)
        report["containers"][n] = out.stdout.strip() if out.returncode == 0 else "absent"
    if not report["exists"] or not (sdir / "kubeconfig").exists():
        return False, report
    try:
        with _api(sdir) as api:
            for n in client.CoreV1Api(api).list_node().items:
                ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                report["nodes"][n.metadata.name] = {"ready": ready, "kubelet": n.status.node_info.kubelet_version,
                                                    "pod_cidr": n.spec.pod_cidr}
            dns = client.AppsV1Api(api).read_namespaced_deployment("coredns", "kube-system")
            report["coredns"] = f"{dns.status.available_replicas or 0}/{dns.spec.replicas}"
    except Exception as exc:  # noqa: BLE001 - reported: status never raises
        report["error"] = f"{type(exc).__name__}: {exc}"
        return False, report
    ok = (len(report["nodes"]) >= 3 and all(v["ready"] for v in report["nodes"].values())
          and report["coredns"] is not None and report["coredns"].split("/")[0] == report["coredns"].split("/")[1])
    return ok, report


def not_warm() -> str | None:
    """Why ``up`` would build something or fail here, or None when the cache is warm: the host
    packages, root, every binary in the shared cache, the node image in podman's storage, and
    root's free inotify instances. ``make test`` runs the molecule scenario ``kind`` only when
    this is None (a cold build takes up to 13 minutes on 2 cores)."""
    return why_not_warm()[0]


def why_not_warm() -> tuple[str | None, bool]:
    """:func:`not_warm`'s reason, and whether ``build`` (as root) would make the cache warm: True
    for missing host packages, binaries or the node image; False when warm, not root, or short
    of inotify instances (a build changes neither)."""
    if os.geteuid() != 0:
        return "the kind test bed runs rootful podman: not root", False
    missing = missing_host_packages()
    if missing:
        return f"host packages missing: {', '.join(missing)} (make kind installs them as root)", True
    names = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"]
    cold = [b.name for b in [*(build.BY_NAME[n] for n in names), *BINARIES.values()]
            if build._cached(b, kube_minor()) is None]
    if crictl.cached() is None:
        cold.append("crictl")
    if cold:
        return f"binaries not built into {build.cache_dir()}: {', '.join(cold)} (make kind builds them)", True
    tag = f"localhost/bcd-kind/node:v{kube_version()}"
    stamp = cache() / "stamps" / (tag.replace("/", "_").replace(":", "_") + ".stamp")
    if not stamp.exists() or not _image_exists(tag):
        return f"the node image {tag} is not in podman's storage (make kind builds it)", True
    if not exists():
        return inotify_shortfall(), False
    return None, False


def main(args) -> int:
    """``python -m sandbox kind up|down|status|build``."""
    try:
        if args.kind_cmd == "up":
            up(attach=args.attach, kwok_nodes=args.nodes)
        elif args.kind_cmd == "check":
            # 2: cold, `build` makes it warm (.ci/run builds then); 1: not usable here as it is
            reason, buildable = why_not_warm()
            print(f"kind: not warm: {reason}" if reason else "kind: warm (every binary and image cached)")
            return 0 if reason is None else 2 if buildable else 1
        elif args.kind_cmd == "build":
            ensure_host()
            say(f"kind: node image {build_images()}")
        elif args.kind_cmd == "down":
            problems = down()
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        elif args.kind_cmd == "status":
            ok, report = status()
            if getattr(args, "json", False):
                print(json.dumps(report, indent=2))
                return 0 if ok else 1
            print(f"kind cluster {report['name']}: {'up' if ok else 'NOT up'}")
            for n, st in report["containers"].items():
                print(f"  container {n:<28} {st}")
            for n, v in report["nodes"].items():
                print(f"  node {n:<33} {'Ready' if v['ready'] else 'NOT Ready'}  kubelet {v['kubelet']}  "
                      f"pods {v['pod_cidr']}")
            if report.get("coredns"):
                print(f"  CoreDNS available {report['coredns']}")
            if report.get("error"):
                print(f"  {report['error']}")
            print(f"  kubeconfig: {report['kubeconfig']}")
            return 0 if ok else 1
    except (KindError, build.BuildError, cluster.UsageError, proc.StartError) as exc:
        print(str(exc), file=sys.stderr)
        if args.kind_cmd == "up":
            print("kind: `python -m sandbox kind down` removes whatever was created", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kind: interrupted; `python -m sandbox kind down` removes what was created", file=sys.stderr)
        return 130
    return 0
