"""Random CRI-O node roots for the differential test against real CRI-O.

:func:`generate` makes ``count`` node roots from a fixed ``seed``: each one a mapping of node
paths to file contents. What varies, because it decides which runtime handlers CRI-O runs:

* ``/etc/crio/crio.conf`` present or not; drop-ins in ``/etc/crio/crio.conf.d`` named as packages
  and operators name them (``.conf``, ``.toml``, no suffix, a dotfile, a backup, one in a
  subdirectory), and the NVIDIA toolkit's drop-in in ``/etc/crio/conf.d``, which toolkit
  releases 1.18.0 to 1.19.0 wrote and CRI-O never reads;
* ``default_runtime``: unset, a built-in handler, ``nvidia``, or one no file defines;
* runtime handlers (``nvidia``, ``nvidia-cdi``, ``crun``, ``runc``, ``kata``) with ``runtime_path``
  unset, empty, the packages' or the GPU operator's NVIDIA runtime, a runtime that exists and one
  that does not; a later file setting the same handler again;
* the NVIDIA runtime binaries present or not (CRI-O drops a handler whose binary is missing);
* now and then a file that is not TOML, or a ``runtime_type`` CRI-O does not know;
* the toolkit's ``config.toml`` (key false) present or not at each toolkit location.

Standard library only; the same seed gives the same roots on every machine.
"""

from __future__ import annotations

import random

from tests.containerd_configs import (
    CDI_SPEC,
    KEY,
    OPERATOR_TOOLKIT,
    PACKAGES_TOOLKIT,
    digest,
    dumps,
    write_root,
)

__all__ = ["OPERATOR_TOOLKIT", "PACKAGES_TOOLKIT", "digest", "generate", "write_root"]

ETC = "/etc/crio"
ROOT_CONFIG = f"{ETC}/crio.conf"
DROPINS = (
    f"{ETC}/crio.conf.d/10-crun.conf",
    f"{ETC}/crio.conf.d/50-nvidia.toml",
    f"{ETC}/crio.conf.d/99-nvidia.conf",
    f"{ETC}/crio.conf.d/99-nvidia",
    f"{ETC}/crio.conf.d/.99-nvidia.conf",
    f"{ETC}/crio.conf.d/99-nvidia.conf.bak",
    f"{ETC}/crio.conf.d/gpu/60-nvidia.conf",
    f"{ETC}/conf.d/99-nvidia.toml",
)
NVIDIA_BINARIES = (
    "/usr/bin/nvidia-container-runtime",
    "/usr/local/nvidia/toolkit/nvidia-container-runtime",
    "/usr/bin/nvidia-container-runtime.cdi",
)
# What a CRI-O node has besides its configuration: CRI-O's own binary (whose presence tells a
# node's root from a folder of collected files), the runtimes it ships with, and conmon
NODE_BINARIES = ("/usr/bin/crio", "/usr/bin/crun", "/usr/sbin/runc", "/usr/bin/conmon")
# runtime_path values: None leaves it unset ("" is written as an empty string)
PATHS = (None, None, "", *NVIDIA_BINARIES, *NVIDIA_BINARIES, "/usr/bin/crun", "/usr/sbin/runc", "/usr/bin/runc")
HANDLERS = ("nvidia", "nvidia", "nvidia-cdi", "crun", "runc", "kata")
DEFAULTS = ("crun", "runc", "nvidia", "nvidia", "kata")


def _file(rng: random.Random) -> str:
    doc: dict = {}
    runtime: dict = {}
    if rng.random() < 0.3:
        runtime["default_runtime"] = rng.choice(DEFAULTS)
    for _ in range(rng.choice((0, 1, 1, 1, 2))):
        rt: dict = {}
        path = rng.choice(PATHS)
        if path is not None:
            rt["runtime_path"] = path
        if rng.random() < 0.4:
            rt["runtime_type"] = "bogus" if rng.random() < 0.05 else "oci"
        if rng.random() < 0.2:
            rt["runtime_root"] = "/run/nvidia"
        runtime.setdefault("runtimes", {})[rng.choice(HANDLERS)] = rt
    if runtime:
        doc["crio"] = {"runtime": runtime}
    text = dumps(doc) if doc else "# nothing set here\n"
    if rng.random() < 0.03:
        text += "[crio.runtime.runtimes.broken\n"
    return text


def generate(seed: int, count: int) -> list[dict]:
    """``count`` node roots, each ``{"name", "files": {node path: text}}`` (see the module)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        files: dict[str, str] = {}
        if rng.random() < 0.6:
            files[ROOT_CONFIG] = _file(rng)
        for d in DROPINS:
            if rng.random() < 0.3:
                files[d] = _file(rng)
        for b in NVIDIA_BINARIES:
            if rng.random() < 0.6:
                files[b] = "an NVIDIA runtime's stand-in: CRI-O checks only that it exists\n"
        if rng.random() < 0.5:
            files[PACKAGES_TOOLKIT] = f"{KEY} = false\n"
        if rng.random() < 0.5:
            files[OPERATOR_TOOLKIT] = f"{KEY} = false\n"
        for b in NODE_BINARIES:
            files[b] = "a node binary's stand-in: the oracle puts the real one here\n"
        files["/etc/cdi/nvidia.yaml"] = CDI_SPEC
        out.append({"name": f"crio{seed}-{i:04d}", "files": files})
    return out
