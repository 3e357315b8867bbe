"""containerd's configuration loader, release family by release family. Standard library only:
it runs on GPU nodes.

What containerd does with ``config.toml`` and its ``imports`` before any pod runs, as its own
source says (paths are containerd's), for the four families whose rules differ:

* ``1.7`` (1.x): ``services/server/config/config.go`` (``LoadConfig``, ``mergeConfig``,
  ``ValidateV2``, ``Decode``) and ``services/server/server.go`` (the disabled-plugin filter);
  the CRI plugin's checks in ``pkg/cri/config/config.go`` (``ValidatePluginConfig``).
* ``2.0-2.2``: ``cmd/containerd/server/config/config.go`` (``LoadConfig``: version 0 and 1 files
  migrated to the version loaded so far, then ``mergeConfig``), ``cmd/containerd/server/server.go``
  (``New``: the merged configuration migrated to version 3 by each enabled plugin's
  ``ConfigMigration``), ``plugins/cri/runtime/plugin.go`` (``configMigration``,
  ``migrateConfig``), ``internal/cri/config/config.go`` (``ValidateRuntimeConfig``).
* ``2.3.0-2.3.4``: as 2.3.5+, and ``LoadConfigWithPlugins`` refuses a drop-in whose ``version``
  is higher than the root's (``drop-in config version %d higher than root config version %d``;
  reverted in 2.3.5).
* ``2.3.5+`` (2.3.5 and later, 2.4): ``cmd/containerd/server/config/config.go``
  (``LoadConfigWithPlugins``): every file older than version 4 is migrated on its own, server
  migrations and every plugin's ``ConfigMigration`` step by step, before it is merged.

Common to all (``resolveImports``): an import is ``filepath.Clean``-ed and joined to the
importing file's directory when relative; only an import containing ``*`` is a glob, expanded
by Go's ``filepath.Glob`` (``*`` matches names starting with a dot; ``?`` and ``[`` are patterns
there too, and a malformed class fails the load); any other import is a literal path, and a
file that cannot be opened or decoded makes containerd refuse to start. Files load breadth
first, each path once (``LoadConfig``'s ``loaded`` map).

The merge (``mergeConfig``): 1.7 replaces a plugin's whole section with a later file's; 2.x
merges plugin sections key by key (``mergo.WithOverride`` over ``map[string]any``: tables merge
recursively, every other value, empty ones included, is replaced by the later file's, lists
too). ``version`` is the last non-zero one; ``disabled_plugins`` accumulate.
"""

from __future__ import annotations

import copy
import json
import posixpath
import re

F17 = "1.7"
F20 = "2.0-2.2"
F23 = "2.3.0-2.3.4"
F235 = "2.3.5+"
FAMILIES = (F17, F20, F23, F235)
# version.ConfigVersion of each family (1.7: ValidateV2's maximum).
CONFIG_VERSION = {F17: 2, F20: 3, F23: 4, F235: 4}
LABEL = {F17: "containerd 1.7", F20: "containerd 2.0-2.2", F23: "containerd 2.3.0-2.3.4", F235: "containerd 2.3.5+/2.4"}

CRI_GRPC = "io.containerd.grpc.v1.cri"
CRI_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_IMAGES = "io.containerd.cri.v1.images"
CRI_SECTIONS = ("cri", CRI_GRPC, CRI_RUNTIME)
# Where a collected node root keeps the output of ``containerd --version`` (the node's release).
VERSION_FILE = "containerd-version"
# What bcd_gpu_isolation puts in place of a template's actions ({{ ... }}).
TEMPLATE_SENTINEL = "@@bcd-template@@"
VERSION_RE = re.compile(r"(?<![\d.])v?(\d+)\.(\d+)\.(\d+)")

# v1MigratePluginName's core plugins (2.x cmd/containerd/server/config/config.go).
V1_CORE = {
    "cri": "io.containerd.grpc.v1.cri", "cgroups": "io.containerd.monitor.v1.cgroups",
    "linux": "io.containerd.runtime.v1.linux", "scheduler": "io.containerd.gc.v1.scheduler",
    "bolt": "io.containerd.metadata.v1.bolt", "task": "io.containerd.runtime.v2.task",
    "opt": "io.containerd.internal.v1.opt", "restart": "io.containerd.internal.v1.restart",
    "tracing": "io.containerd.internal.v1.tracing", "otlp": "io.containerd.tracing.processor.v1.otlp",
    "aufs": "io.containerd.snapshotter.v1.aufs", "btrfs": "io.containerd.snapshotter.v1.btrfs",
    "devmapper": "io.containerd.snapshotter.v1.devmapper", "native": "io.containerd.snapshotter.v1.native",
    "overlayfs": "io.containerd.snapshotter.v1.overlayfs", "zfs": "io.containerd.snapshotter.v1.zfs",
}


class BadPattern(ValueError):
    """Go's filepath.ErrBadPattern."""


def parse_version(text: str):
    """``(major, minor, patch)`` from ``containerd --version`` output, or None."""
    m = VERSION_RE.search(text or "")
    return tuple(int(x) for x in m.groups()) if m else None


def family_of(version) -> str | None:
    """The loader family of a containerd release ``(major, minor, patch)``."""
    if not version:
        return None
    major, minor, patch = version
    if major < 2:
        return F17
    if major == 2 and minor <= 2:
        return F20
    if major == 2 and minor == 3 and patch <= 4:
        return F23
    return F235


# --- Go's path/filepath: Clean, Join, Match, Glob (Unix) ------------------------------------------

def go_clean(path: str) -> str:
    if path == "":
        return "."
    out = posixpath.normpath(path)
    if out.startswith("//"):
        out = "/" + out.lstrip("/")
    return out


def go_join(*parts: str) -> str:
    joined = "/".join(p for p in parts if p)
    return go_clean(joined) if joined else ""


def _get_esc(chunk: str):
    if not chunk or chunk[0] in "-]":
        raise BadPattern
    if chunk[0] == "\\":
        chunk = chunk[1:]
        if not chunk:
            raise BadPattern
    r, rest = chunk[0], chunk[1:]
    if not rest:
        raise BadPattern
    return r, rest


def _match_chunk(chunk: str, s: str):
    """(rest of s, matched) for one chunk; raises BadPattern (filepath.matchChunk)."""
    failed = False
    while chunk:
        if not failed and not s:
            failed = True
        c = chunk[0]
        if c == "[":
            r = None
            if not failed:
                r, s = s[0], s[1:]
            chunk = chunk[1:]
            negated = False
            if chunk and chunk[0] == "^":
                negated, chunk = True, chunk[1:]
            match = False
            nrange = 0
            while True:
                if chunk and chunk[0] == "]" and nrange > 0:
                    chunk = chunk[1:]
                    break
                lo, chunk = _get_esc(chunk)
                hi = lo
                if chunk[0] == "-":
                    hi, chunk = _get_esc(chunk[1:])
                if r is not None and lo <= r <= hi:
                    match = True
                nrange += 1
            if match == negated:
                failed = True
        elif c == "?":
            if not failed:
                if s[0] == "/":
                    failed = True
                s = s[1:]
            chunk = chunk[1:]
        else:
            if c == "\\":
                chunk = chunk[1:]
                if not chunk:
                    raise BadPattern
            if not failed:
                if chunk[0] != s[0]:
                    failed = True
                s = s[1:]
            chunk = chunk[1:]
    return ("", False) if failed else (s, True)


def _scan_chunk(pattern: str):
    star = False
    while pattern and pattern[0] == "*":
        pattern, star = pattern[1:], True
    inrange = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 < len(pattern):
                i += 1
        elif c == "[":
            inrange = True
        elif c == "]":
            inrange = False
        elif c == "*" and not inrange:
            break
        i += 1
    return star, pattern[:i], pattern[i:]


def go_match(pattern: str, name: str) -> bool:
    """filepath.Match; raises BadPattern for a malformed pattern."""
    while pattern:
        star, chunk, pattern = _scan_chunk(pattern)
        if star and chunk == "":
            return "/" not in name
        try:
            t, ok = _match_chunk(chunk, name)
            err = None
        except BadPattern as exc:
            t, ok, err = "", False, exc
        if ok and (not t or pattern):
            name = t
            continue
        if err is not None:
            raise err
        if star:
            found = False
            i = 0
            while i < len(name) and name[i] != "/":
                t, ok = _match_chunk(chunk, name[i + 1:])
                if ok:
                    if not pattern and t:
                        i += 1
                        continue
                    name = t
                    found = True
                    break
                i += 1
            if found:
                continue
        while pattern:
            _star, chunk, pattern = _scan_chunk(pattern)
            _match_chunk(chunk, "")
        return False
    return name == ""


def _has_meta(path: str) -> bool:
    return any(c in path for c in "*?[\\")


def go_glob(fs, pattern: str) -> list[str]:
    """filepath.Glob over the node root ``fs`` (``names``, ``isdir``, ``lexists``): matches in
    Go's order, files and directories alike, names beginning with a dot included."""
    go_match(pattern, "")  # raises BadPattern when malformed
    if not _has_meta(pattern):
        return [pattern] if fs.lexists(pattern) else []
    d, file = pattern.rsplit("/", 1) if "/" in pattern else ("", pattern)
    d = "." if d == "" and "/" not in pattern else (d or "/")
    if not _has_meta(d):
        return _glob_dir(fs, d, file, [])
    if d == pattern:
        raise BadPattern
    out: list[str] = []
    for sub in go_glob(fs, d):
        out = _glob_dir(fs, sub, file, out)
    return out


def _glob_dir(fs, d: str, pattern: str, matches: list[str]) -> list[str]:
    if not fs.isdir(d):
        return matches
    try:
        names = sorted(fs.names(d))
    except OSError:
        return matches
    for n in names:
        if go_match(pattern, n):
            matches.append(go_join(d, n))
    return matches


def resolve_imports(fs, parent: str, imports: list[str]) -> list[str]:
    """resolveImports: the paths one file's ``imports`` name, in order (raises BadPattern)."""
    out = []
    for path in imports:
        path = go_clean(path)
        if not path.startswith("/"):
            path = go_join(posixpath.dirname(parent) or ".", path)
        if "*" in path:
            out.extend(go_glob(fs, path))
        else:
            out.append(path)
    return out


# --- merging and migration ------------------------------------------------------------------------

def merge_2x(dst: dict, src: dict) -> None:
    """mergo.Merge(WithOverride) of one ``map[string]any`` into another: tables merge key by key,
    any other value (empty ones too, lists too) replaces."""
    for k, v in src.items():
        old = dst.get(k)
        if isinstance(v, dict) and isinstance(old, dict) and old:
            merge_2x(old, v)
        else:
            dst[k] = copy.deepcopy(v)


def v1_plugin_name(name: str) -> str:
    """v1MigratePluginName."""
    if "." in name:
        return name
    if name in V1_CORE:
        return V1_CORE[name]
    if name.endswith("-service"):
        return "io.containerd.service.v1." + name
    if name in ("windows", "windows-lcow"):
        return "io.containerd.snapshotter.v1." + name
    return "io.containerd.grpc.v1." + name


def v1_migrate(doc: dict) -> None:
    """v1Migrate: plugin names and disabled/required plugin names to URIs (in place). Two
    names of one file that become the same URI: Go's map order decides, here the last wins."""
    plugins = doc.get("plugins")
    if isinstance(plugins, dict):
        doc["plugins"] = {v1_plugin_name(k): v for k, v in plugins.items()}
    for key in ("disabled_plugins", "required_plugins"):
        if isinstance(doc.get(key), list):
            doc[key] = [v1_plugin_name(p) if isinstance(p, str) else p for p in doc[key]]


def cri_runtime_migrate(plugins: dict) -> None:
    """plugins/cri/runtime/plugin.go configMigration + migrateConfig: the CRI section's keys move
    to io.containerd.cri.v1.runtime where it does not set them already (a whole ``runtimes``
    table is kept or moved, never merged)."""
    src = plugins.get(CRI_GRPC)
    if not isinstance(src, dict):
        return
    dst = plugins.get(CRI_RUNTIME)
    if not isinstance(dst, dict):
        dst = {}
    skip = {"cni", "containerd", "sandbox_image", "registry", "image_decryption", "max_concurrent_downloads",
            "image_pull_progress_timeout", "image_pull_with_sync_fs", "stats_collect_period",
            "disable_tcp_service", "stream_server_address", "stream_server_port", "stream_idle_timeout",
            "enable_tls_streaming", "x509_key_pair_streaming", "enable_cdi"}
    for k, v in src.items():
        if k not in skip and k not in dst:
            dst[k] = v
    containerd = src.get("containerd")
    if isinstance(containerd, dict):
        new = dst.get("containerd")
        if not isinstance(new, dict):
            new = {}
        for k, v in containerd.items():
            if k not in ("snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers") and k not in new:
                new[k] = v
        dst["containerd"] = new
    plugins[CRI_RUNTIME] = dst


def cri_images_migrate(plugins: dict) -> None:
    """plugins/cri/images/plugin.go migrateConfig, the part that decides whether the CRI plugin
    loads: the snapshotter moves to io.containerd.cri.v1.images (only when the CRI section also
    has ``containerd.runtimes``: the function returns before otherwise)."""
    src = plugins.get(CRI_GRPC)
    containerd = src.get("containerd") if isinstance(src, dict) else None
    if not isinstance(containerd, dict) or "runtimes" not in containerd:
        return
    dst = plugins.get(CRI_IMAGES)
    if not isinstance(dst, dict):
        dst = {}
    for key in ("snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers"):
        if key in containerd:
            dst[key] = containerd[key]
    plugins[CRI_IMAGES] = dst


def cri_grpc_migrate(plugins: dict) -> None:
    """plugins/cri/cri.go configMigration: the CRI section keeps only its server keys."""
    src = plugins.get(CRI_GRPC)
    if not isinstance(src, dict):
        return
    keep = ("disable_tcp_service", "stream_server_address", "stream_server_port", "stream_idle_timeout",
            "enable_tls_streaming", "x509_key_pair_streaming")
    plugins[CRI_GRPC] = {k: src[k] for k in keep if k in src}


# --- loading ----------------------------------------------------------------------------------------

SERVING = "serving"
DISABLED = "disabled"
FAILED = "failed"
REFUSED = "refused"
# Top-level keys containerd decodes into typed fields: a value of another type fails the load.
TYPES = {"version": int, "imports": list, "disabled_plugins": list, "required_plugins": list, "plugins": dict,
         "root": str, "state": str, "temp": str, "oom_score": int}


class Outcome:
    """One family's reading of one containerd configuration.

    ``files``: the files loaded, in order; ``state``: ``serving`` (the CRI plugin loads),
    ``disabled`` (``disabled_plugins`` names it), ``failed`` (it does not load: ``reason``) or
    ``refused`` (containerd does not start: ``reason``, ``where``); ``runtimes``: name ->
    ``{"binary", "runtime_type", "file"}`` as the CRI plugin runs them; ``default_runtime``
    and the file that names it (``default_from``); ``plugins``: the merged plugin sections."""

    def __init__(self, family: str, root: str):
        self.family = family
        self.root = root
        self.files: list[str] = []
        self.docs: dict[str, dict] = {}
        self.version = 0
        self.disabled: list[str] = []
        self.plugins: dict = {}
        self.state = SERVING
        self.reason: str | None = None
        self.where: str | None = None
        self.runtimes: dict[str, dict] = {}
        # what the CRI plugin reads: its section's name and content, runtimes as decoded
        self.section_name: str | None = None
        self.section: dict = {}
        self.runtime_tables: dict[str, dict] = {}
        self.default_runtime: str | None = None
        self.default_from: str | None = None
        self.notes: list[str] = []
        # 1.7: (file, plugin, later file) for each plugin section a later file replaced whole
        self.replaced: list[tuple[str, str, str]] = []
        # an import whose path a template computes at run time (the load stopped there)
        self.templated: str | None = None

    @property
    def label(self) -> str:
        return LABEL[self.family]

    def refuse(self, where: str, reason: str) -> Outcome:
        self.state, self.where, self.reason = REFUSED, where, reason
        return self


def _type_error(doc: dict) -> str | None:
    for key, kind in TYPES.items():
        if key not in doc:
            continue
        v = doc[key]
        if kind is int and (not isinstance(v, int) or isinstance(v, bool)):
            return f"{key} = {v!r} is not an integer"
        if kind is not int and not isinstance(v, kind):
            return f"{key} is not a {'list' if kind is list else 'table' if kind is dict else 'string'}"
        if kind is list and not all(isinstance(x, str) for x in v):
            return f"{key} holds a value that is not a string"
    if isinstance(doc.get("plugins"), dict):
        for name, section in doc["plugins"].items():
            if not isinstance(section, dict):
                return f"plugins.{name} is not a table"
    return None


def load(fs, read, root: str, family: str, after: list[str] | None = None) -> Outcome:
    """containerd ``family``'s reading of the configuration whose root file is ``root``.

    ``read(path)`` returns the parsed TOML document of a regular file, or None when it cannot be
    read or parsed (the caller records why); ``fs`` answers ``isfile``, ``isdir``, ``lexists``
    and ``names`` for node paths. ``after``: files loaded once ``root``'s imports are done (k3s's
    drop-in directory for a template whose imports cannot be read)."""
    out = Outcome(family, root)
    after = list(after or [])
    target = CONFIG_VERSION[family] if family != F17 else 0
    out.version = target
    merged_plugins: dict = {}
    loaded: set[str] = set()
    pending = [root]
    root_version = 0
    origin_17: dict[str, str] = {}
    while pending or after:
        if not pending:
            pending.append(after.pop(0))
        path = pending.pop(0)
        if path in loaded:
            continue
        if not fs.isfile(path):
            what = "is a directory" if fs.isdir(path) else "does not exist"
            return out.refuse(path, f"{path} {what}" + ("" if path == root else " (it is imported)"))
        doc = read(path)
        if doc is None:
            return out.refuse(path, f"{path} cannot be read or does not parse as TOML")
        problem = _type_error(doc)
        if problem:
            return out.refuse(path, f"{path}: {problem}")
        out.files.append(path)
        out.docs[path] = doc
        doc = copy.deepcopy(doc)
        version = doc.get("version", 0)
        if family == F17:
            # mergo.Merge(WithOverride, WithAppendSlice), then each plugin section replaced whole
            if version:
                out.version = version
            out.disabled.extend(doc.get("disabled_plugins") or [])
            for name, section in (doc.get("plugins") or {}).items():
                if name in origin_17 and origin_17[name] != path:
                    out.replaced.append((origin_17[name], name, path))
                merged_plugins[name] = section
                origin_17[name] = path
        else:
            if family == F23:
                if root_version == 0:
                    root_version = version
                if version > root_version:
                    return out.refuse(path, f"drop-in config version {version} higher than root config version "
                                            f"{root_version} ({path})")
            if family == F20:
                if version in (0, 1):
                    if out.version > 3:
                        return out.refuse(path, f"{path} (version {version}) cannot be migrated to version "
                                                f"{out.version}: containerd panics")
                    if out.version >= 2:
                        v1_migrate(doc)
                    version = out.version
            elif version < out.version:
                if out.version > 4:
                    return out.refuse(path, f"{path} (version {version}) cannot be migrated to version "
                                            f"{out.version}: containerd panics")
                plugins = doc.setdefault("plugins", {})
                for v in range(version, out.version):
                    if v == 1:
                        v1_migrate(doc)
                        plugins = doc["plugins"]
                    # every plugin's ConfigMigration at step v (runtime, images, then the CRI server)
                    if v < CONFIG_VERSION[family]:
                        cri_runtime_migrate(plugins)
                        cri_images_migrate(plugins)
                        cri_grpc_migrate(plugins)
                version = out.version
            if version:
                out.version = version
            for p in doc.get("disabled_plugins") or []:
                if p not in out.disabled:
                    out.disabled.append(p)
            merge_2x(merged_plugins, doc.get("plugins") or {})
        templated = next((i for i in doc.get("imports") or [] if TEMPLATE_SENTINEL in i), None)
        if templated:
            out.templated = templated
            return out.refuse(path, f"{path} imports a path its template computes at run time")
        try:
            imports = resolve_imports(fs, path, doc.get("imports") or [])
        except BadPattern:
            return out.refuse(path, f"{path} imports a malformed glob pattern (syntax error in pattern)")
        loaded.add(path)
        pending.extend(imports)
    out.plugins = merged_plugins
    return _validate(out, fs)


def _uri_ok_17(p: str) -> bool:
    return p.startswith("io.containerd.") and len(p.split(".", 3)) >= 4


def _validate(out: Outcome, fs) -> Outcome:
    family = out.family
    # containerd names the last file it loaded ("failed to load TOML from <path>")
    last = out.files[-1] if out.files else out.root
    if family == F17:
        v = out.version or 1
        if v > 2:
            return out.refuse(last, f"unsupported config version `{v}` (containerd 1.7 reads versions 1 and 2)")
        if v == 2:
            bad = [p for p in out.disabled if not _uri_ok_17(p)] + [p for p in out.plugins if not _uri_ok_17(p)]
            if bad:
                return out.refuse(last, f"invalid plugin URI {bad[0]!r} in a version 2 configuration "
                                        "(expect io.containerd.x.vx)")
    else:
        if out.version > CONFIG_VERSION[family]:
            return out.refuse(last, f"expected containerd config version equal to or less than "
                                    f"`{CONFIG_VERSION[family]}`, got `{out.version}`")
        bad = [p for p in out.disabled if "." not in p]
        if bad:
            return out.refuse(last, f"invalid disabled plugin URI {bad[0]!r} expect io.containerd.x.vx")
        if family == F20 and out.version < 3:
            # server.New: each enabled plugin's ConfigMigration on the merged configuration
            if CRI_RUNTIME not in out.disabled:
                cri_runtime_migrate(out.plugins)
            if CRI_IMAGES not in out.disabled:
                cri_images_migrate(out.plugins)
            if CRI_GRPC not in out.disabled:
                cri_grpc_migrate(out.plugins)
    return _cri(out, fs)


def _decode_runtimes(section: dict, family: str) -> tuple[dict, str | None]:
    """The CRI runtime configuration decoded over its defaults (runc, the default)."""
    containerd = section.get("containerd") if isinstance(section.get("containerd"), dict) else {}
    default = containerd.get("default_runtime_name", "runc")
    runtimes = {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {}}}
    given = containerd.get("runtimes")
    if isinstance(given, dict) and family == F17:
        # go-toml v1 decodes a table into a new map: the default runc is gone unless the file names it
        runtimes = {}
    if isinstance(given, dict):
        for name, rt in given.items():
            if isinstance(rt, dict):
                runtimes[name] = rt
    return runtimes, default if isinstance(default, str) else None


def _json_problem(fs, path: str) -> str | None:
    if not fs.isfile(path):
        return "no such file"
    try:
        doc = json.loads(fs.read_text(path, limit=4 << 20))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"not a JSON OCI spec ({exc})"
    return None if isinstance(doc, dict) else "not a JSON OCI spec"


def _legacy_17(containerd: dict, runtimes: dict, default):
    """1.7's ValidatePluginConfig for the deprecated tables: ``untrusted_workload_runtime`` becomes
    runtime ``untrusted``, ``default_runtime`` runtime ``default`` (and the default). Returns
    (default, names added, error or None)."""
    added = {}
    untrusted = containerd.get("untrusted_workload_runtime")
    if isinstance(untrusted, dict) and untrusted.get("runtime_type"):
        if "untrusted" in runtimes:
            return default, added, ("conflicting definitions: configuration includes both "
                                    "`untrusted_workload_runtime` and `runtimes[\"untrusted\"]`")
        runtimes["untrusted"] = untrusted
        added["untrusted"] = "untrusted_workload_runtime"
    legacy = containerd.get("default_runtime")
    if isinstance(legacy, dict) and legacy.get("runtime_type"):
        runtimes["default"] = legacy
        added["default"] = "default_runtime"
        default = "default"
    return default, added, None


def _cri(out: Outcome, fs) -> Outcome:
    family = out.family
    if family == F17:
        v1 = (out.version or 1) == 1
        name = "cri" if v1 else CRI_GRPC
        if name in out.disabled:
            out.state, out.reason = DISABLED, f"disabled_plugins names {name}"
            return out
        section = out.plugins.get(name) or {}
    else:
        if CRI_GRPC in out.disabled:
            out.state, out.reason = DISABLED, f"disabled_plugins names {CRI_GRPC}"
            return out
        for need in (CRI_RUNTIME, CRI_IMAGES):
            if need in out.disabled:
                out.state, out.reason = FAILED, f"disabled_plugins names {need}, which the CRI plugin needs"
                return out
        section = out.plugins.get(CRI_RUNTIME) or {}
    out.section_name = name if family == F17 else CRI_RUNTIME
    out.section = section if isinstance(section, dict) else {}
    # the CRI plugin needs its snapshotter (overlayfs unless the configuration names another)
    if family == F17:
        containerd = out.section.get("containerd") if isinstance(out.section.get("containerd"), dict) else {}
        snapshotter = containerd.get("snapshotter") or "overlayfs"
        off = snapshotter in out.disabled if v1 else f"io.containerd.snapshotter.v1.{snapshotter}" in out.disabled
    else:
        images = out.plugins.get(CRI_IMAGES) if isinstance(out.plugins.get(CRI_IMAGES), dict) else {}
        snapshotter = images.get("snapshotter") or "overlayfs"
        off = f"io.containerd.snapshotter.v1.{snapshotter}" in out.disabled
    if off:
        out.state, out.reason = FAILED, f"its snapshotter {snapshotter} is in disabled_plugins"
        return out
    runtimes, default = _decode_runtimes(out.section, family)
    legacy: dict = {}
    if family == F17:
        containerd = out.section.get("containerd") if isinstance(out.section.get("containerd"), dict) else {}
        default, legacy, error = _legacy_17(containerd, runtimes, default)
        if error:
            out.state, out.reason = FAILED, error
            return out
        for rt in runtimes.values():
            for key in ("runtime_engine", "runtime_root"):
                if rt.get(key) and rt.get("runtime_type") != "io.containerd.runtime.v1.linux":
                    out.state, out.reason = FAILED, f"`{key}` only works for runtime io.containerd.runtime.v1.linux"
                    return out
    # each runtime's base_runtime_spec is read when the CRI plugin starts (2.x
    # plugins/cri/runtime/plugin.go loadBaseOCISpecs; 1.7 pkg/cri/server's): a file that cannot be
    # opened or decoded stops it
    for rt in runtimes.values():
        spec = rt.get("base_runtime_spec")
        if isinstance(spec, str) and spec:
            problem = _json_problem(fs, spec)
            if problem:
                out.state, out.reason = FAILED, f"failed to load base OCI spec from file: {spec}: {problem}"
                return out
    # the deprecated tables are scanned where the file writes them, not a second time as runtimes
    out.runtime_tables = {k: v for k, v in runtimes.items() if k not in legacy}
    out.default_from = _last_setting(out, ("containerd", "default_runtime_name"))
    if not default:
        out.state, out.reason = FAILED, "`default_runtime_name` is empty"
        return out
    if default not in runtimes:
        out.state, out.reason = FAILED, (f"no corresponding runtime configured in `containerd.runtimes` for "
                                         f"`default_runtime_name = \"{default}\"`")
        return out
    for name, rt in runtimes.items():
        options = rt.get("options") if isinstance(rt.get("options"), dict) else {}
        binary = next((b for b in (options.get("BinaryName"), options.get("Runtime"), rt.get("runtime_engine"))
                       if isinstance(b, str) and b), None) if family == F17 else options.get("BinaryName")
        out.runtimes[name] = {"binary": binary if isinstance(binary, str) and binary else None,
                              "runtime_type": rt.get("runtime_type")}
    out.default_runtime = default
    return out


def _aliases(out: Outcome, name: str) -> tuple[str, ...]:
    """Section names a file may have set ``name`` under: 2.x migrates each CRI name into the next;
    1.7 reads one name only."""
    if out.family != F17 and name in CRI_SECTIONS:
        return CRI_SECTIONS
    return (name,)


def _get(doc, path):
    for p in path:
        if not isinstance(doc, dict) or p not in doc:
            return None
        doc = doc[p]
    return doc


def _last_setting(out: Outcome, rest: tuple, name: str | None = None) -> str | None:
    """The last file loaded that sets ``rest`` in the CRI section (any name it migrates from)."""
    name = name or out.section_name
    for f in reversed(out.files):
        for alias in _aliases(out, name):
            if _get(out.docs[f], ("plugins", alias, *rest)) is not None:
                return f
    return None


def _dotted(path: tuple) -> str:
    return ".".join(p if re.fullmatch(r"[A-Za-z0-9_-]+", p) else '"' + p + '"' for p in path)


def leaves(obj, path=()):
    """``(path, value)`` for each leaf of a TOML document (a path is a tuple of keys)."""
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaves(v, (*path, str(k)))
    else:
        yield path, obj


def scan_doc(out: Outcome) -> tuple[dict, dict, dict]:
    """What the CRI plugin of a serving reading runs, as a document to scan for binaries:
    ``(doc, origin, keys)`` with each leaf's file and its key as that file writes it. 2.x: the
    runtimes only (nothing else in the section names a binary); 1.7: the CRI section with its
    legacy ``default_runtime`` and ``untrusted_workload_runtime``, and the v1 ``linux`` runtime's
    section."""
    name = out.section_name
    if out.family == F17:
        section = copy.deepcopy(out.section)
        section.setdefault("containerd", {})
        if not isinstance(section["containerd"], dict):
            section["containerd"] = {}
        section["containerd"]["runtimes"] = copy.deepcopy(out.runtime_tables)
        doc = {"plugins": {name: section}}
        linux = "linux" if name == "cri" else "io.containerd.runtime.v1.linux"
        if isinstance(out.plugins.get(linux), dict):
            doc["plugins"][linux] = copy.deepcopy(out.plugins[linux])
    else:
        doc = {"plugins": {name: {"containerd": {"runtimes": copy.deepcopy(out.runtime_tables)}}}}
    origin, keys = {}, {}
    for path, _value in leaves(doc):
        if len(path) < 3:
            continue
        sec, rest = path[1], path[2:]
        for f in reversed(out.files):
            alias = next((a for a in _aliases(out, sec) if _get(out.docs[f], ("plugins", a, *rest)) is not None), None)
            if alias:
                origin[path] = f
                keys[path] = _dotted(("plugins", alias, *rest))
                break
    return doc, origin, keys
