"""The stand-in bcd image of the kind test bed: ``localhost/bcd:<version>``, built locally.

The ``bcd`` binary is built from ``sandbox/kind/bcd`` (Go, standard library only, CGO_ENABLED=0,
so no module proxy is needed) into the shared cache (``$XDG_CACHE_HOME/bcd-ansible/kind/bcd``,
with a stamp of its sources). The images, ``FROM scratch``, carry it at ``/usr/local/bin/bcd``
with the sandbox's ``kubectl`` at ``/usr/local/bin/kubectl`` (bcd runs it as the kubelet, seed:
API access). Three images:

- ``localhost/bcd:<version>``: the good build;
- ``localhost/bcd:<version>-bad``: the same plus ``/usr/local/share/bcd/crash-after-seconds``
  (``5``), which makes ``bcd node`` exit 1 after five seconds: the digest tests roll out as a bad
  release (the canary gate must catch it);
- ``localhost/bcd:<version>-next``: the good build under another digest (one more label), the
  good release a rollout moves to.

:func:`load` imports all three into every node of the running cluster (``kind load image-archive``:
podman's images are not visible to ``kind load docker-image``) and writes
``<kind dir>/bcd-image.yml`` with ``bcd_image``, ``bcd_image_bad`` and ``bcd_image_next``, each pinned by the digest
the nodes' containerd gives it (``localhost/bcd:<version>@sha256:...``), for inventories and tests.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import yaml

from sandbox import build
from sandbox import kind as kind_mod

VERSION = "0.1.0"
REPO = "localhost/bcd"
SOURCE = Path(__file__).resolve().parent / "bcd"
CRASH_AFTER_SECONDS = 5


def tags() -> tuple[str, str]:
    """(good, bad) image tags."""
    return f"{REPO}:{VERSION}", f"{REPO}:{VERSION}-bad"


def next_tag() -> str:
    """The good build's second tag, under another digest: what a rollout to a good release takes."""
    return f"{REPO}:{VERSION}-next"


def binary(say=kind_mod.say) -> Path:
    """The stand-in ``bcd`` binary, built into the cache when its sources changed."""
    out = kind_mod.cache() / "bcd"
    stamp = kind_mod.cache() / "stamps" / "bcd-binary.stamp"
    key = kind_mod._digest("bcd", kind_mod._tree_digest(SOURCE), VERSION)
    if out.exists() and stamp.exists() and stamp.read_text().strip() == key:
        return out
    go = shutil.which("go")
    if not go:
        raise kind_mod.KindError("kind: building the stand-in bcd needs Go on PATH")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    log = kind_mod.cache() / "logs" / "bcd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    say(f"kind: building the stand-in bcd from {SOURCE} (log: {log})")
    t0 = time.monotonic()
    tmp = out.with_name("bcd.tmp")
    env = {**kind_mod.os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-buildvcs=false -mod=readonly"}
    kind_mod._step("go build bcd", [go, "build", "-trimpath", "-ldflags", f"-s -w -X main.version={VERSION}",
                                    "-o", str(tmp), "."], log, env=env, cwd=SOURCE, nice=True)
    tmp.replace(out)
    stamp.write_text(key + "\n")
    say(f"kind: built the stand-in bcd in {kind_mod._fmt(time.monotonic() - t0)}")
    return out


def images(say=kind_mod.say) -> Path:
    """Build (or find) the three images; the docker archive holding them."""
    bcd = binary(say)
    kubectl = build.resolve(["kubectl"], say=say)["kubectl"]
    root = kind_mod.cache()
    archive = root / "archives-bcd" / "bcd.tar"
    archive.parent.mkdir(parents=True, exist_ok=True)
    good, bad = tags()
    nxt = next_tag()
    key = kind_mod._digest("bcd-images", kind_mod._file_key(bcd), kind_mod._file_key(kubectl), VERSION,
                           CRASH_AFTER_SECONDS, "next")
    stamp = root / "stamps" / "bcd-images.stamp"
    if (stamp.exists() and stamp.read_text().strip() == key and archive.exists()
            and all(kind_mod._image_exists(t) for t in (good, bad, nxt))):
        return archive
    log = root / "logs" / "bcd.log"
    say(f"kind: building {good}, {bad} and {nxt} (log: {log})")
    ctx = Path(tempfile.mkdtemp(prefix="ctx-bcd-", dir=root))
    try:
        shutil.copy2(bcd, ctx / "bcd")
        shutil.copy2(kubectl, ctx / "kubectl")
        (ctx / "crash-after-seconds").write_text(f"{CRASH_AFTER_SECONDS}\n")
        base = ("FROM scratch\nCOPY bcd /usr/local/bin/bcd\nCOPY kubectl /usr/local/bin/kubectl\n"
                f'LABEL org.opencontainers.image.title="bcd stand-in (kind test bed)" '
                f'org.opencontainers.image.version="{VERSION}"\nENTRYPOINT ["/usr/local/bin/bcd"]\n')
        (ctx / "Containerfile").write_text(base)
        kind_mod._step(f"podman build {good}", ["podman", "build", "--network=none", "-t", good, str(ctx)], log, nice=True)
        (ctx / "Containerfile.bad").write_text(
            f"FROM {good}\nCOPY crash-after-seconds /usr/local/share/bcd/crash-after-seconds\n"
            'LABEL dev.bcd.standin.bad="true"\n')
        kind_mod._step(f"podman build {bad}", ["podman", "build", "--network=none", "-f", str(ctx / "Containerfile.bad"),
                                               "-t", bad, str(ctx)], log, nice=True)
        (ctx / "Containerfile.next").write_text(f'FROM {good}\nLABEL dev.bcd.standin.next="true"\n')
        kind_mod._step(f"podman build {nxt}", ["podman", "build", "--network=none", "-f", str(ctx / "Containerfile.next"),
                                               "-t", nxt, str(ctx)], log, nice=True)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    archive.unlink(missing_ok=True)
    kind_mod._step("podman save bcd", ["podman", "save", "--format", "docker-archive", "-m", "-o", str(archive),
                                       good, bad, nxt], log)
    stamp.write_text(key + "\n")
    return archive


def _node_digests(node: str) -> dict[str, str]:
    """Image name -> digest in ``node``'s containerd (namespace k8s.io), for the stand-in's names."""
    out = kind_mod.node_exec(node, "ctr -n k8s.io images ls | awk '$1 ~ /^localhost\\/bcd[:@]/ {print $1, $3}'")
    digests = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].startswith("sha256:"):
            digests[parts[0]] = parts[1]
    return digests


def load(say=kind_mod.say) -> dict[str, str]:
    """Load the three images into every node of the running cluster; ``{bcd_image, bcd_image_bad,
    bcd_image_next}``, each pinned by digest, also written to ``<kind dir>/bcd-image.yml``."""
    archive = images(say)
    name = kind_mod.cluster_name()
    nodes = kind_mod.node_names(name)
    good, bad = tags()
    nxt = next_tag()
    all_tags = (good, bad, nxt)
    t0 = time.monotonic()
    want: dict[str, str] | None = None
    for node in nodes:
        have = _node_digests(node)
        if all(t in have for t in all_tags) and (want is None or all(have[t] == want[t] for t in all_tags)):
            want = want or have
            continue
        # kind imports it with ctr into the node's k8s.io namespace (with digest references).
        kind_mod._kind("load", "image-archive", str(archive), "--name", name, "--nodes", node)
        have = _node_digests(node)
        if not all(t in have for t in all_tags):
            raise kind_mod.KindError(f"kind: {', '.join(all_tags)} are not in node {node}'s containerd after the load: {have}")
        if want is not None and any(have[t] != want[t] for t in all_tags):
            raise kind_mod.KindError(f"kind: node {node} gives the stand-in images other digests than the first node")
        want = have
    assert want is not None
    refs = {"bcd_image": f"{good}@{want[good]}", "bcd_image_bad": f"{bad}@{want[bad]}",
            "bcd_image_next": f"{nxt}@{want[nxt]}"}
    # The kubelet asks containerd for the image by digest (repository@sha256:...): name it so too.
    for node in nodes:
        script = "".join(
            f"ctr -n k8s.io images ls -q | grep -qx '{REPO}@{want[t]}' || "
            f"ctr -n k8s.io images tag '{t}' '{REPO}@{want[t]}' >/dev/null\n" for t in all_tags)
        kind_mod.node_exec(node, "set -e\n" + script)
    out = kind_mod.kind_dir() / "bcd-image.yml"
    out.write_text("# Written by python -m sandbox kind up: the stand-in bcd images in the kind nodes.\n"
                   + yaml.safe_dump(refs, sort_keys=False))
    say(f"kind: stand-in bcd loaded into {len(nodes)} nodes in {kind_mod._fmt(time.monotonic() - t0)}: "
        f"{refs['bcd_image']} (and the bad build {refs['bcd_image_bad']}, the next {refs['bcd_image_next']})")
    return refs


def refs() -> dict[str, str] | None:
    """``<kind dir>/bcd-image.yml`` as written by :func:`load`, or None."""
    try:
        return yaml.safe_load((kind_mod.kind_dir() / "bcd-image.yml").read_text())
    except (OSError, yaml.YAMLError):
        return None
