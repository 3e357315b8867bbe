"""The NVIDIA Container Toolkit's container escapes, and which toolkit releases have them.
Standard library only: it runs on GPU nodes.

:data:`ADVISORIES` is the table: one entry per CVE that lets a container out onto the host, with
the first toolkit release that fixes it, the GPU operator release that ships that toolkit, a
mitigation short of upgrading where NVIDIA gives one, and the sources. To add one, append an
entry; :func:`exposures` and every report read it from here.

A node's toolkit release comes from the node: over SSH, the ``--version`` of the toolkit binaries
the runtime runs (``nvidia-container-runtime``, ``nvidia-container-runtime-hook``,
``nvidia-ctk``) and ``nvidia-container-cli`` (libnvidia-container, versioned apart); in a
collected root, the file :data:`VERSION_FILE` at its top holding that output; for the GPU
operator, the toolkit image tag in the ClusterPolicy (``spec.toolkit.version``, such as
``v1.17.8-ubuntu20.04``).
"""

from __future__ import annotations

import re

# At the top of a collected node root: the output of the toolkit binaries' --version (and of
# nvidia-container-cli --version), as `nvidia-container-toolkit --version > <root>/<this>` makes it.
VERSION_FILE = "nvidia-container-toolkit-version"

# The toolkit's binaries print "NVIDIA Container Runtime version 1.17.8" (nvidia-ctk: "NVIDIA
# Container Toolkit CLI version 1.17.8"); libnvidia-container's nvidia-container-cli prints
# "cli-version: 1.17.8" and "lib-version: 1.17.8". An image tag is "v1.17.8-ubuntu20.04".
_TOOLKIT_RE = re.compile(r"(?:NVIDIA Container (?:Runtime|Toolkit)(?: CLI| Hook)?|nvidia-container-[a-z-]+) "
                         r"version\s+v?(\d+)\.(\d+)\.(\d+)(?:-(rc|beta|alpha)\.?(\d+))?", re.I)
_CLI_RE = re.compile(r"cli-version:\s*v?(\d+)\.(\d+)\.(\d+)(?:-(rc|beta|alpha)\.?(\d+))?", re.I)
_TAG_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-(rc|beta|alpha)\.?(\d+))?(?:[-+].*)?$", re.I)

# Each advisory: cve; what (one line); fixed (the first toolkit release with the fix,
# "major.minor.patch"); component: "toolkit" (its hooks and runtime), "libnvidia-container"
# (nvidia-container-cli, released with the toolkit under the same number) or "both" (the fix
# needs both); operator: the first GPU operator release whose bundled toolkit has the fix
# (deployments/gpu-operator/values.yaml at its tag; NVIDIA's bulletin may name a later one that
# also fixes other components); mitigation: a toolkit config.toml key and value NVIDIA gave
# short of upgrading (since: the first release with the key; clears: whether it closes the hole,
# or NVIDIA withdrew it), or None; sources: the bulletin first (https://nvidia.custhelp.com/app/answers/detail/a_id/<id>).
BULLETIN = "https://nvidia.custhelp.com/app/answers/detail/a_id/"
ADVISORIES: tuple[dict, ...] = (
    {
        "cve": "CVE-2024-0132",
        "what": "a time-of-check time-of-use race lets a crafted image reach the host's file system",
        "fixed": "1.16.2", "component": "libnvidia-container", "operator": "v24.6.2", "mitigation": None,
        "sources": [BULLETIN + "5582", "https://github.com/NVIDIA/libnvidia-container/pull/282"],
    },
    {
        "cve": "CVE-2024-0133",
        "what": "a crafted image creates empty files or directories on the host's file system",
        "fixed": "1.16.2", "component": "toolkit", "operator": "v24.6.2", "mitigation": None,
        "sources": [BULLETIN + "5582"],
    },
    {
        "cve": "CVE-2024-0134",
        "what": "the create-symlinks hook lets a crafted image create files outside the container",
        "fixed": "1.17.0", "component": "toolkit", "operator": "v24.9.0", "mitigation": None,
        "sources": [BULLETIN + "5585"],
    },
    # 0135 to 0137: the bulletin says 1.17.1; NVIDIA's release notes, the GPU operator's security
    # page and the code (host-relative ldconfig only, a sealed copy of it) say 1.17.3.
    {
        "cve": "CVE-2024-0135",
        "what": "the update-ldcache hook lets a crafted image modify a host binary",
        "fixed": "1.17.3", "component": "toolkit", "operator": "v24.9.1", "mitigation": None,
        "sources": [BULLETIN + "5599",
                    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/security.html"],
    },
    {
        "cve": "CVE-2024-0136",
        "what": "a crafted image makes nvidia-container-cli load an untrusted library as root on the host",
        "fixed": "1.17.3", "component": "libnvidia-container", "operator": "v24.9.1", "mitigation": None,
        "sources": [BULLETIN + "5599",
                    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/security.html"],
    },
    {
        "cve": "CVE-2024-0137",
        "what": "a crafted image makes nvidia-container-cli reach the host's network namespace",
        "fixed": "1.17.3", "component": "libnvidia-container", "operator": "v24.9.1", "mitigation": None,
        "sources": [BULLETIN + "5599",
                    "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/security.html"],
    },
    {
        "cve": "CVE-2025-23359",
        "what": "a time-of-check time-of-use race lets a crafted image reach the host's file system (CVE-2024-0132's fix bypassed)",
        "fixed": "1.17.4", "component": "both", "operator": "v24.9.2", "mitigation": None,
        "sources": [BULLETIN + "5616"],
    },
    {
        "cve": "CVE-2025-23266",
        "what": "NVIDIAScape: the enable-cuda-compat hook runs with the container's LD_PRELOAD, so a container runs code as root on the host",
        "fixed": "1.17.8", "component": "toolkit", "operator": "v25.3.1",
        # revision 1.0 of the bulletin gave this; revision 2.0 dropped it (reported as bypassable)
        "mitigation": {"key": "features.disable-cuda-compat-lib-hook", "value": True, "since": "1.17.5",
                       "clears": False},
        "sources": [BULLETIN + "5659", "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1208",
                    "https://www.wiz.io/blog/nvidia-ai-vulnerability-cve-2025-23266-nvidiascape"],
    },
    {
        "cve": "CVE-2025-23267",
        "what": "the update-ldcache hook follows a link a crafted image plants, corrupting host files",
        "fixed": "1.17.8", "component": "toolkit", "operator": "v25.3.1", "mitigation": None,
        "sources": [BULLETIN + "5659"],
    },
    {
        "cve": "CVE-2026-24260",
        "what": "a time-of-check time-of-use race in the cuda-compat and create-symlinks hooks lets a crafted image out of the container",
        "fixed": "1.19.1", "component": "toolkit", "operator": "v26.3.2", "mitigation": None,
        "sources": [BULLETIN + "5850", "https://github.com/NVIDIA/nvidia-container-toolkit/blob/v1.19.1/CHANGELOG.md"],
    },
)


def _release(m) -> tuple:
    major, minor, patch, kind, number = m.groups()
    # a pre-release sorts below its release: rc.2 of 1.17.8 is older than 1.17.8
    pre = 0 if not kind else -({"alpha": 3000, "beta": 2000, "rc": 1000}[kind.lower()] - min(int(number or 0), 999))
    return int(major), int(minor), int(patch), pre


def parse_release(text: str, cli: bool = False) -> tuple | None:
    """``(major, minor, patch, pre)`` of the toolkit release named in ``--version`` output or an
    image tag (``pre``: 0 for a release, else below it: an rc/beta/alpha), or None. Where the
    output holds several binaries' versions (a node with two toolkit installs), the oldest: an old
    hook is as exposed as an old runtime. ``cli``: the libnvidia-container release
    (``nvidia-container-cli --version``'s ``cli-version``), the oldest likewise."""
    text = text or ""
    found = [_release(m) for m in (_CLI_RE if cli else _TOOLKIT_RE).finditer(text)]
    if not found and not cli:
        m = _TAG_RE.match(text.strip())
        found = [_release(m)] if m else []
    return min(found) if found else None


def release_text(release: tuple) -> str:
    major, minor, patch, pre = release
    return f"{major}.{minor}.{patch}" + ("" if not pre else " (a pre-release)")


def _fixed(advisory: dict) -> tuple:
    return (*(int(x) for x in advisory["fixed"].split(".")), 0)


def _since(advisory: dict) -> tuple:
    return (*(int(x) for x in advisory["mitigation"]["since"].split(".")), 0)


def exposures(toolkit: tuple | None, cli: tuple | None = None, settings: dict | None = None) -> list[dict]:
    """The advisories a node's toolkit release has, each as ``{cve, what, fixed, operator,
    component, version, mitigated, mitigation, sources}``.

    ``toolkit``: the toolkit release (:func:`parse_release`); ``cli``: libnvidia-container's, when
    known apart (else the toolkit's counts for it: they ship together). ``settings``: the dotted
    keys of every toolkit ``config.toml`` the runtime reads, each mapped to the list of its
    values there (``{"features.disable-cuda-compat-lib-hook": [True]}``): an advisory is
    ``mitigated`` when its mitigation key has its value in every one and the release has the key
    (a mitigation that does not ``clears`` it is still an exposure: the caller says it is set).
    Returns [] when the release is unknown. Each entry also has ``clears_all``: the release
    (``fixed``, ``operator``) that clears every one found (``count``).
    """
    found = []
    for a in ADVISORIES:
        releases = {"toolkit": [toolkit], "libnvidia-container": [cli or toolkit],
                    "both": [toolkit, cli or toolkit]}[a["component"]]
        old = [r for r in releases if r is not None and r < _fixed(a)]
        if not old:
            continue
        release = min(old)
        m = a["mitigation"]
        values = (settings or {}).get(m["key"]) if m else None
        mitigated = bool(m and values and all(v == m["value"] for v in values) and release >= _since(a))
        found.append({**{k: a[k] for k in ("cve", "what", "fixed", "operator", "component", "mitigation", "sources")},
                      "version": release_text(release), "mitigated": mitigated})
    # one upgrade clears them all: each fix names it
    last = max(found, key=_fixed, default=None)
    for e in found:
        e["clears_all"] = {"fixed": last["fixed"], "operator": last["operator"], "count": len(found)}
    return found


def message(e: dict, where: str) -> tuple[str, str]:
    """The finding's message and fix for exposure ``e`` (:func:`exposures`) found at ``where``."""
    component = {"libnvidia-container": "libnvidia-container (nvidia-container-cli)",
                 "both": "the NVIDIA Container Toolkit or libnvidia-container"}.get(e["component"],
                                                                                    "the NVIDIA Container Toolkit")
    text = (f"{component} {e['version']} (from {where}) has {e['cve']}, a container escape: {e['what']}; "
            f"fixed in toolkit {e['fixed']}.")
    m = e["mitigation"]
    if m and e["mitigated"] and not m["clears"]:
        text += (f" {m['key']} = {str(m['value']).lower()} is set, which NVIDIA once gave as a mitigation and no "
                 "longer does.")
    fix = f"upgrade the NVIDIA Container Toolkit to {e['fixed']} or later (GPU operator {e['operator']} or later ships it)"
    every = e.get("clears_all") or {}
    if every.get("count", 1) > 1 and every["fixed"] != e["fixed"]:
        fix += (f"; {every['fixed']} or later (GPU operator {every['operator']}) clears all {every['count']} known "
                "escapes found here")
    if m and m["clears"] and not e["mitigated"]:
        fix += (f"; until then, set {m['key']} = {str(m['value']).lower()} in the toolkit's config.toml "
                f"(toolkit {m['since']} or later)")
    fix += "; or accept it on this node until a date with bcd_toolkit_cve_waivers"
    return text, fix


def waiver_for(waivers: list[dict], node: str, cve: str, today: str) -> tuple[dict | None, dict | None]:
    """``(active, expired)``: the waiver of ``waivers`` (each ``{node, cve, until, reason}``,
    ``until`` an ISO date, ``node`` a Node name or ``*``) that covers ``cve`` on ``node`` on
    ``today`` (ISO date, inclusive), and else the latest one that did and has expired."""
    matching = [w for w in waivers or [] if w.get("cve") == cve and w.get("node") in (node, "*")]
    active = [w for w in matching if str(w.get("until")) >= today]
    expired = [w for w in matching if str(w.get("until")) < today]
    return (max(active, key=lambda w: str(w["until"])) if active else None,
            max(expired, key=lambda w: str(w["until"])) if expired else None)
