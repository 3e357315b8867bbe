"""Random containerd node roots for the differential test against real containerd.

:func:`generate` makes ``count`` node roots from a fixed ``seed``: each one a mapping of node
paths to file contents (``/etc/containerd/config.toml``, drop-ins, the NVIDIA toolkit's
configuration and a CDI specification). What varies, because containerd releases load it
differently:

* ``version``: absent, 1, 2, 3 (and now and then 4, which only 2.3+ reads), per file;
* ``imports``: absolute, relative, globbed (``*`` also matches dotfiles), with ``?`` or ``[``
  (literal paths unless a ``*`` makes it a glob), missing files, a bad glob, nested imports and
  an import cycle; drop-ins that nothing imports;
* the CRI plugin's section under each config version's name (``cri``,
  ``io.containerd.grpc.v1.cri``, ``io.containerd.cri.v1.runtime``), sometimes the name of
  another version;
* runtimes with and without an NVIDIA binary (the packages' and the GPU operator's toolkit),
  ``BinaryName = ""`` in a later file, ``default_runtime_name`` naming a runtime that exists,
  one that does not, or nothing;
* ``disabled_plugins``: the CRI plugin by either name, the plugins it needs, its snapshotter, and
  a harmless one;
* a runtime's ``base_runtime_spec``, its file present, absent or not JSON;
* the toolkit's ``config.toml`` (key false) present or not at each toolkit location.

Standard library only; the same seed gives the same roots on every machine.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
ETC = "/etc/containerd"
ROOT_CONFIG = f"{ETC}/config.toml"
PACKAGES_TOOLKIT = "/etc/nvidia-container-runtime/config.toml"
OPERATOR_TOOLKIT = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
# A runtime's base OCI spec (kind's layout): present, absent or not JSON.
BASE_SPEC = f"{ETC}/cri-base.json"
CDI_SPEC = ("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n"
            "- name: GPU-0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n  containerEdits: {}\n")

# Drop-in files a root may hold (imported or not).
DROPINS = (
    f"{ETC}/conf.d/10-base.toml",
    f"{ETC}/conf.d/50-nvidia.toml",
    f"{ETC}/conf.d/99-nvidia.toml",
    f"{ETC}/conf.d/.99-nvidia.toml",
    f"{ETC}/conf.d/20-extra.conf",
    f"{ETC}/extra/a.toml",
    f"{ETC}/extra/b.toml",
)
# What an ``imports`` entry may say (relative ones are relative to the importing file), with how
# often: mostly globs that resolve, now and then one that refuses or matches nothing.
IMPORTS = {
    f"{ETC}/conf.d/*.toml": 6,
    "conf.d/*.toml": 6,
    "conf.d/*": 3,
    f"{ETC}/conf.d/*": 2,
    "conf.d/[0-9]*.toml": 2,
    "conf.d/[15]0-*.toml": 1,
    "../containerd/extra/*.toml": 2,
    "extra/a.toml": 2,
    "./extra/b.toml": 1,
    f"{ETC}/conf.d/50-nvidia.toml": 2,
    "conf.d/99-nvidia.toml": 1,
    "conf.d/?0-base.toml": 1,
    "conf.d/1[0-9]-base.toml": 1,
    f"{ETC}/missing.toml": 1,
    "conf.d/[*.toml": 1,
    "b.toml": 1,
    "a.toml": 1,
    f"{ETC}/config.toml": 1,
}
BINARIES = (
    "",
    "/usr/bin/nvidia-container-runtime",
    "/usr/local/nvidia/toolkit/nvidia-container-runtime",
    "/usr/bin/nvidia-container-runtime.cdi",
    "/usr/bin/crun",
    "/usr/bin/runc",
)
RUNTIME_NAMES = ("runc", "nvidia", "nvidia-cdi", "crun")
DISABLED = (
    "io.containerd.grpc.v1.cri",
    "cri",
    "io.containerd.cri.v1.images",
    "io.containerd.cri.v1.runtime",
    "io.containerd.internal.v1.tracing",
    "io.containerd.snapshotter.v1.overlayfs",
)
# The CRI section's name a file of each version normally uses.
CRI_SECTION = {None: "io.containerd.grpc.v1.cri", 1: "cri", 2: "io.containerd.grpc.v1.cri",
               3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
CRI_NAMES = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")


# --- a small TOML writer (strings, integers, booleans, lists of strings, tables) -----------------

def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k + '"'


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(type(v))


def dumps(doc: dict) -> str:
    lines: list[str] = []

    def table(path: tuple, t: dict) -> None:
        scalars = [(k, v) for k, v in t.items() if not isinstance(v, dict)]
        subs = [(k, v) for k, v in t.items() if isinstance(v, dict)]
        if path and (scalars or not subs):
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        for k, v in scalars:
            lines.append(f"{_key(k)} = {_value(v)}")
        for k, v in subs:
            table((*path, k), v)

    table((), doc)
    return "\n".join(lines) + "\n"


# --- the generator ------------------------------------------------------------------------------

def _runtime(rng: random.Random) -> dict:
    rt: dict = {}
    if rng.random() < 0.8:
        rt["runtime_type"] = "io.containerd.runc.v2"
    r = rng.random()
    if r < 0.75:
        rt["options"] = {"BinaryName": rng.choice(BINARIES)}
    elif r < 0.85:
        rt["options"] = {"SystemdCgroup": True}
    if rng.random() < 0.06:
        rt["base_runtime_spec"] = BASE_SPEC
    return rt


def _file(rng: random.Random, *, root: bool, root_version=None) -> dict:
    doc: dict = {}
    if root or rng.random() < 0.4:
        version = rng.choices([None, 1, 2, 3, 4], weights=[2, 1, 5, 5, 1])[0]
    else:
        version = root_version
    if version is not None:
        doc["version"] = version
    if rng.random() < (0.85 if root else 0.15):
        n = rng.choices([1, 2, 3], weights=[6, 3, 1])[0]
        chosen: list[str] = []
        while len(chosen) < n:
            pick = rng.choices(list(IMPORTS), weights=list(IMPORTS.values()))[0]
            if pick not in chosen:
                chosen.append(pick)
        doc["imports"] = chosen
    if rng.random() < (0.12 if root else 0.06):
        doc["disabled_plugins"] = rng.sample(DISABLED, rng.choice([1, 1, 2]))
    if rng.random() < 0.85:
        name = CRI_SECTION[version] if rng.random() < 0.8 else rng.choice(CRI_NAMES)
        containerd: dict = {}
        if rng.random() < 0.3:
            containerd["default_runtime_name"] = rng.choice(["runc", "runc", "runc", "nvidia", "nvidia", "crun",
                                                             "kata", ""])
        runtimes = {}
        names = rng.sample(RUNTIME_NAMES, rng.choice([0, 1, 1, 2, 2, 3]))
        if names and "runc" not in names and rng.random() < 0.5:
            names.insert(0, "runc")
        for rname in names:
            runtimes[rname] = _runtime(rng)
        if runtimes:
            containerd["runtimes"] = runtimes
        section: dict = {}
        if containerd:
            section["containerd"] = containerd
        if rng.random() < 0.1:
            section["enable_cdi"] = True
        if section:
            doc.setdefault("plugins", {})[name] = section
    if rng.random() < 0.1:
        doc.setdefault("plugins", {})["io.containerd.internal.v1.opt"] = {"path": "/opt/containerd"}
    return doc


def _named(imports: list[str]) -> list[str]:
    """The drop-ins an import names literally (relative to the root file's directory)."""
    out = []
    for i in imports:
        path = i if i.startswith("/") else f"{ETC}/{i}"
        path = path.replace("/./", "/")
        if path in DROPINS:
            out.append(path)
    return out


def generate(seed: int, count: int) -> list[dict]:
    """``count`` node roots, each ``{"name", "files": {node path: text}}`` (see the module)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        files: dict[str, str] = {}
        root = _file(rng, root=True)
        files[ROOT_CONFIG] = dumps(root)
        dropins = [d for d in DROPINS if rng.random() < 0.4 or (d in _named(root.get("imports", []))
                                                               and rng.random() < 0.8)]
        for d in dropins:
            files[d] = dumps(_file(rng, root=False, root_version=root.get("version")))
        if rng.random() < 0.5:
            files[PACKAGES_TOOLKIT] = f"{KEY} = false\n"
        if rng.random() < 0.5:
            files[OPERATOR_TOOLKIT] = f"{KEY} = false\n"
        files["/etc/cdi/nvidia.yaml"] = CDI_SPEC
        r = rng.random()
        if r < 0.45:
            files[BASE_SPEC] = '{"ociVersion": "1.1.0"}\n'
        elif r < 0.5:
            files[BASE_SPEC] = "not json\n"
        out.append({"name": f"c{seed}-{i:04d}", "files": files})
    return out


def write_root(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (node path -> text) under the folder ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return root


def digest(files: dict[str, str]) -> str:
    """The configuration's hash: every file's path and content."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()[:32]
