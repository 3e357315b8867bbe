#!/usr/bin/env python3
"""Build the execution environment image localhost/bcd-ee:<galaxy.yml version> with podman.

``make ee`` runs this; ``make ee-context`` runs it with ``--context-only``; the long test
tests/reliability/test_ee.py calls :func:`build`. No container registry is needed:

1. the build context: the collection tarball (``ansible-galaxy collection build``, kept
   byte-identical while its contents do not change, so podman's layer cache holds), then
   ``ansible-builder create`` for execution-environment.yml into ./context;
2. the base image: Debian trixie (its python3 is 3.13, so requirements.txt's markers pick
   ansible-core 2.21) from the machine's Debian mirror with ``mmdebstrap --variant=minbase``,
   imported with ``podman import`` as ``localhost/bcd-ee-base:trixie-<key>``; the tarball is
   cached under ``$XDG_CACHE_HOME/bcd-ansible/ee`` keyed by its inputs (suite, packages, image
   settings), so a rerun imports it again at most;
3. ``podman build`` of the context with scripts/ee.Containerfile (ansible-builder's stages and
   scripts without the two RPM-only steps; docs/execution-environment.md says why), the base
   image as the build argument EE_BASE_IMAGE and the other build arguments as the generated
   Containerfile sets them, but PKGMGR=/usr/bin/apt-get and PYCMD the base's Python (the
   definition names UBI 10's python3.12). Python packages come from PyPI, through the
   host's network, trust store and pip configuration (mounted read-only for the build only).

Usage: build_ee.py [--context-only] [--no-cache]
Exit status 0 when the image (or the context) is built; otherwise 1, the reason on one line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import build as sandbox_build  # noqa: E402  (the repository root is on sys.path now)
from sandbox.kind import containers_conf  # noqa: E402
from sandbox.pyroot import debian_mirrors, mirror_lines  # noqa: E402

BIN = Path(sys.executable).parent
CONTEXT = ROOT / "context"
CONTAINERFILE = ROOT / "scripts" / "ee.Containerfile"
# Debian 13, as the test matrix's root (sandbox/pyroot.py): python3 is 3.13, on which
# requirements.txt's markers pick ansible-core 2.21, the line the EE carries.
SUITE = "trixie"
# What PYCMD is in the image: the definition's python_path names UBI's interpreter instead.
BASE_PYTHON = "/usr/bin/python3.13"
# python3-pip: Debian disables ensurepip for its system Python; python3-venv: the venv module
# ansible-builder's assemble script uses; ca-certificates: TLS to the API server and control plane.
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
BASE_CHANGES = ("ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV=LANG=C.UTF-8",
                'CMD=["/bin/bash"]')
PKGMGR = "/usr/bin/apt-get"
# What the build reads from the host so pip reaches PyPI as the host does (a TLS-inspecting proxy's
# CA, an index mirror): mounted read-only into each RUN step, never stored in a layer.
HOST_TRUST = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")


class EEError(RuntimeError):
    """The image could not be built; the message says which step and why."""


def say(msg: str) -> None:
    print(f"ee: {msg}", flush=True)


def version() -> str:
    match = re.search(r"^version:\s*(\S+)", (ROOT / "galaxy.yml").read_text(), re.M)
    if not match:
        raise EEError("galaxy.yml has no version")
    return match[1]


def image_tag() -> str:
    return f"localhost/bcd-ee:{version()}"


def cache_dir() -> Path:
    return sandbox_build.cache_dir().parent / "ee"


def podman_env() -> dict[str, str]:
    # the machine's rlimits and runc (sandbox/kind: podman's defaults fail here)
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf())}


def run(argv: list[str], what: str, log: Path | None = None, **kw) -> subprocess.CompletedProcess:
    """Run a step; its output goes to ``log`` (or is captured); a failure raises EEError with its tail."""
    if log is not None:
        with open(log, "ab") as fh:
            fh.write(f"\n$ {' '.join(argv)}\n".encode())
            fh.flush()
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False, **kw)
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise EEError(f"{what} failed (exit {proc.returncode}); the end of {log}:\n{tail}")
        return proc
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if proc.returncode != 0:
        raise EEError(f"{what} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


def _members_digest(tarball: Path) -> str:
    h = hashlib.sha256()
    with tarfile.open(tarball) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            h.update(f"{m.name}\0{m.mode}\0{m.type!r}\0".encode())
            if m.isfile():
                h.update(tar.extractfile(m).read())
    return h.hexdigest()


def stage_collection(built: Path) -> Path:
    """Put the built collection where execution-environment.yml takes it (out/ee/)."""
    dest = ROOT / "out" / "ee" / "bcd-kubernetes.tar.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    # a tarball differs byte for byte at every build (its timestamps): keep the old one while its
    # contents are the same, so the image's layers after its COPY stay cached
    if not dest.exists() or _members_digest(dest) != _members_digest(built):
        shutil.copyfile(built, dest)
    return dest


def context(say=say) -> Path:
    """Build the collection and write ansible-builder's context into ./context."""
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(out), str(ROOT)],
        "ansible-galaxy collection build", cwd=ROOT)
    stage_collection(out / f"bcd-kubernetes-{version()}.tar.gz")
    for name in ("kubernetes/core", "ansible/posix"):
        if not (ROOT / "collections" / "ansible_collections" / name / "MANIFEST.json").is_file():
            raise EEError(f"collections/ansible_collections/{name} is missing: run `make setup` "
                          "(it installs requirements.yml's collections there)")
    run([str(BIN / "ansible-builder"), "create", "-f", str(ROOT / "execution-environment.yml"),
         "--context", str(CONTEXT)], "ansible-builder create", cwd=ROOT)
    say(f"build context in {CONTEXT}")
    return CONTEXT


def base_image(say=say) -> tuple[str, float | None]:
    """The Debian base image's tag, and the seconds it took when it was built now (else None)."""
    key = hashlib.sha256(json.dumps([SUITE, BASE_PACKAGES, BASE_CHANGES, "minbase"]).encode()).hexdigest()[:12]
    tag = f"localhost/bcd-ee-base:{SUITE}-{key}"
    env = podman_env()
    if subprocess.run(["podman", "image", "exists", tag], env=env, check=False).returncode == 0:
        return tag, None
    started = time.monotonic()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"base-{SUITE}-{key}.tar.gz"
    log = cache / "build.log"
    if not tarball.exists():
        if not shutil.which("mmdebstrap"):
            raise EEError("mmdebstrap is missing: install it (as root: apt-get install --no-install-recommends "
                          "mmdebstrap) and run again")
        say(f"building the base image: mmdebstrap {SUITE} with {', '.join(BASE_PACKAGES)} (a few minutes; log: {log})")
        partial = tarball.with_suffix(".partial.tar.gz")
        # the Debian mirror the host's apt sources name (this host is bookworm), as pyroot builds trixie
        main, security = debian_mirrors()
        run(["nice", "-n", "10", "mmdebstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
             SUITE, str(partial), *mirror_lines(main, security, SUITE)], "mmdebstrap", log)
        partial.rename(tarball)
    run(["podman", "import", *[a for c in BASE_CHANGES for a in ("--change", c)], str(tarball), tag],
        "podman import", log, env=env)
    return tag, time.monotonic() - started


def build_args(ctx: Path, base: str) -> dict[str, str]:
    """The generated Containerfile's ARG defaults, with the base image and package manager set."""
    args = dict(re.findall(r'^ARG (\w+)="([^"]*)"', (ctx / "Containerfile").read_text(), re.M))
    missing = {"EE_BASE_IMAGE", "PYCMD", "ANSIBLE_INSTALL_REFS"} - set(args)
    if missing:
        raise EEError(f"the generated Containerfile has no ARG {', '.join(sorted(missing))}: "
                      "ansible-builder changed; check scripts/ee.Containerfile against it")
    args.update(EE_BASE_IMAGE=base, PKGMGR=PKGMGR, PYCMD=BASE_PYTHON)
    # only those ours reads (PYPKG names the package its dropped install step took)
    ours = set(re.findall(r"^ARG (\w+)", CONTAINERFILE.read_text(), re.M))
    return {k: v for k, v in args.items() if k in ours}


def image_size(tag: str) -> int:
    out = run(["podman", "image", "inspect", "--format", "{{.Size}}", tag], "podman image inspect", env=podman_env())
    return int(out.stdout.strip())


def build(no_cache: bool = False, say=say) -> dict:
    """Build the image; what was built and how long it took."""
    started = time.monotonic()
    log = cache_dir() / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")  # this build's log only
    ctx = context(say)
    base, base_seconds = base_image(say)
    tag = image_tag()
    argv = ["nice", "-n", "10", "podman", "build", "--network", "host", "-f", str(CONTAINERFILE), "-t", tag]
    for name, value in build_args(ctx, base).items():
        argv += ["--build-arg", f"{name}={value}"]
    for path in HOST_TRUST:
        if Path(path).is_file():
            argv += ["-v", f"{path}:{path}:ro"]
    if no_cache:
        argv.append("--no-cache")
    say(f"podman build {tag} on {base} (log: {log})")
    t0 = time.monotonic()
    run([*argv, str(ctx)], "podman build", log, env=podman_env())
    figures = {"image": tag, "base": base, "base_seconds": base_seconds,
               "build_seconds": round(time.monotonic() - t0, 1), "total_seconds": round(time.monotonic() - started, 1),
               "size_bytes": image_size(tag)}
    say(f"built {tag} in {figures['total_seconds']}s (podman build {figures['build_seconds']}s; base image "
        + (f"built in {base_seconds:.0f}s" if base_seconds is not None else "cached")
        + f"), {figures['size_bytes'] / 1e6:.0f} MB")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context-only", action="store_true", help="write ./context and stop")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer (a cold build on a cached base)")
    opts = parser.parse_args()
    try:
        if opts.context_only:
            context()
        else:
            build(no_cache=opts.no_cache)
    except EEError as exc:
        print(f"ee: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
