"""The container runtime configuration in effect on a node: which files each runtime loads, in
which order, and what they merge to. Standard library only: it runs on GPU nodes.

Loading rules modelled (from each runtime's own source and documentation):

* **containerd** reads ``/etc/containerd/config.toml`` and the files its ``imports`` name
  (absolute paths and globs; relative ones from the importing file's directory), breadth first:
  a file's imports load after it, nested imports after the files that name them, each file once
  (containerd ``LoadConfig``). Nothing else: a file in ``/etc/containerd/conf.d`` that no
  ``imports`` names is not loaded. Files merge in load order by ``mergeConfig``:

  - containerd 1.x (config versions 1 and 2): ``mergo.Merge`` with override over a
    ``map[string]toml.Tree`` of plugins, so a later file's plugin section (for example
    ``plugins."io.containerd.grpc.v1.cri"``) replaces that whole section, not key by key.
  - containerd 2.x (config versions 1 to 3): plugins are ``map[string]any``, merged key by key
    (a later non-empty value wins; lists gain the items they lack). A drop-in whose ``version``
    is higher than the root's makes containerd refuse the configuration; an older drop-in is
    migrated to the root's version first (v2's ``io.containerd.grpc.v1.cri`` ``containerd``
    table becomes v3's ``io.containerd.cri.v1.runtime``).

  Config version 3 is containerd 2.x only; versions 1 and 2 are read by both, so both merge
  rules are candidates (the worst result counts); any other version is judged under both.
  ``disabled_plugins`` naming the CRI plugin means this containerd serves no Kubernetes pods.
* **k3s and RKE2** generate ``config.toml`` under ``/var/lib/rancher/<k3s|rke2>/agent/etc/containerd``
  from ``config-v3.toml.tmpl`` when it exists, else from ``config.toml.tmpl`` (only the one in
  effect is judged, the other is reported as ignored), else from their built-in template, which
  adds the NVIDIA runtimes whose binaries they find. ``default-runtime`` in
  ``/etc/rancher/<k3s|rke2>/config.yaml`` and ``config.yaml.d/*.yaml`` (the last wins) sets the
  default runtime. A template that includes the built-in base (``{{ template "base" . }}``) while
  no generated ``config.toml`` is on disk leaves the base open: the runtimes k3s would add are
  judged as well.
* **CRI-O** reads ``/etc/crio/crio.conf``, then ``/etc/crio/crio.conf.d/*`` in lexical order,
  the last value winning per option (``default_runtime``, and each handler's fields). It never
  reads ``/etc/crio/conf.d``.

Files named in ``bcd_container_runtime`` beyond these are read as the operator says: each one (and
every file of each directory) is a configuration of its own, with its imports.
"""

from __future__ import annotations

import copy
import re

CONTAINERD_ROOT = "/etc/containerd/config.toml"
# Conventional drop-in directories: containerd loads them only when an ``imports`` names them.
CONTAINERD_DROPIN_DIRS = ("/etc/containerd/conf.d", "/etc/containerd/config.d")
RANCHER = {
    "k3s": ("/var/lib/rancher/k3s/agent/etc/containerd", "/etc/rancher/k3s"),
    "rke2": ("/var/lib/rancher/rke2/agent/etc/containerd", "/etc/rancher/rke2"),
}
RANCHER_DROPIN_DIRS = ("config.toml.d", "config-v3.toml.d")
CRIO_ROOT = "/etc/crio/crio.conf"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
CRIO_NEVER_READ = ("/etc/crio/conf.d",)
DROPIN_SUFFIXES = (".toml", ".conf")

# The CRI plugin by config version (v1 plugin ids, v2 URIs, v3's split runtime plugin).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
CRI_PLUGINS = tuple(CRI_PLUGIN.values())
RULE_1X = "containerd 1.x"
RULE_2X = "containerd 2.x"
RULE_CRIO = "CRI-O"
# The binaries k3s's built-in template adds a runtime for (k3s pkg/agent/containerd nvidia.go),
# looked up in the GPU operator's toolkit directory and on $PATH.
K3S_NVIDIA_RUNTIMES = {
    "nvidia": "nvidia-container-runtime",
    "nvidia-cdi": "nvidia-container-runtime.cdi",
    "nvidia-experimental": "nvidia-container-runtime-experimental",
}
K3S_SEARCH_DIRS = ("/usr/local/nvidia/toolkit", "/opt/kwasm/bin", "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                   "/usr/bin", "/sbin", "/bin")
BASE_TEMPLATE_RE = re.compile(r"\{\{-?\s*template\s+\"base\"")
DEFAULT_RUNTIME_RE = re.compile(r"""^default-runtime\s*:\s*(?P<v>"[^"]*"|'[^']*'|[^\s#]+)""", re.M)
# Keys that hold no setting of their own (what a file loads, not what it sets).
STRUCTURAL_KEYS = ("version", "imports")


def _version(doc: dict) -> int:
    v = doc.get("version", 0)
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _empty(value) -> bool:
    """mergo's isEmptyValue: a later file's empty value does not override."""
    if isinstance(value, bool):
        return value is False
    return value is None or value == "" or value == [] or value == {} or (isinstance(value, (int, float)) and value == 0)


def _leaves(obj, path=()):
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from _leaves(v, (*path, str(k)))
    else:
        yield path, obj


def _mark(origin: dict, path: tuple, value, file: str) -> None:
    for leaf, _ in _leaves(value, path):
        origin[leaf] = file


def _drop(origin: dict, path: tuple) -> None:
    n = len(path)
    for k in [k for k in origin if k[:n] == path]:
        del origin[k]


def merge_deep(dst: dict, origin: dict, src: dict, file: str, *, lists: str, skip_empty: bool, path=()) -> None:
    """Merge ``src`` into ``dst`` key by key (containerd 2.x with ``lists='append'`` and
    ``skip_empty``; CRI-O with ``lists='replace'``), recording each leaf's file in ``origin``."""
    for k, v in src.items():
        kp = (*path, str(k))
        old = dst.get(k)
        if isinstance(v, dict) and isinstance(old, dict):
            merge_deep(old, origin, v, file, lists=lists, skip_empty=skip_empty, path=kp)
        elif lists == "append" and isinstance(v, list) and isinstance(old, list):
            for item in v:
                if item not in old:
                    old.append(copy.deepcopy(item))
                    origin[(*kp, str(len(old) - 1))] = file
        elif skip_empty and k in dst and _empty(v):
            continue
        else:
            dst[k] = copy.deepcopy(v)
            _drop(origin, kp)
            _mark(origin, kp, v, file)


def merge_1x(dst: dict, origin: dict, src: dict, file: str, replaced: list) -> None:
    """containerd 1.x: plugin sections replaced whole; top-level lists appended; the rest merged."""
    for k, v in src.items():
        if k == "plugins" and isinstance(v, dict):
            plugins = dst.setdefault("plugins", {})
            for name, section in v.items():
                kp = ("plugins", str(name))
                if name in plugins:
                    before = {origin[p] for p in origin if p[:2] == kp}
                    replaced.extend((f, name, file) for f in sorted(before) if f != file)
                plugins[name] = copy.deepcopy(section)
                _drop(origin, kp)
                _mark(origin, kp, section, file)
        elif isinstance(v, list) and isinstance(dst.get(k), list):
            dst[k].extend(copy.deepcopy(v))
            _mark(origin, (k,), dst[k], file)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge_deep(dst[k], origin, v, file, lists="append", skip_empty=True, path=(k,))
        elif k in dst and _empty(v):
            continue
        else:
            dst[k] = copy.deepcopy(v)
            _drop(origin, (k,))
            _mark(origin, (k,), v, file)


def migrate(doc: dict, frm: int, to: int) -> dict:
    """containerd 2.x's per-file migration of the CRI plugin's runtime table (v1 -> v2 -> v3)."""
    doc = copy.deepcopy(doc)
    plugins = doc.get("plugins")
    if not isinstance(plugins, dict):
        return doc
    if frm < 2 <= to and isinstance(plugins.get("cri"), dict):
        section = plugins.pop("cri")
        target = plugins.setdefault(CRI_PLUGIN[2], {})
        if isinstance(target, dict):
            target.update(section)
    if frm < 3 <= to and isinstance(plugins.get(CRI_PLUGIN[2]), dict):
        old = plugins[CRI_PLUGIN[2]]
        moved = {k: old.pop(k) for k in ("containerd", "enable_cdi", "cdi_spec_dirs") if k in old}
        if moved:
            target = plugins.setdefault(CRI_PLUGIN[3], {})
            if isinstance(target, dict):
                target.update(moved)
        if not old:
            del plugins[CRI_PLUGIN[2]]
    return doc


def cri_table(doc: dict, version: int) -> dict:
    """The CRI plugin's ``containerd`` table (runtimes, default_runtime_name) for ``version``;
    every CRI plugin name merged for a version no containerd documents."""
    plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
    if version in (0, 1):
        names = [CRI_PLUGIN[1], CRI_PLUGIN[2]]
    elif version in (2, 3):
        names = [CRI_PLUGIN[version]]
    else:
        names = list(CRI_PLUGINS)
    out: dict = {}
    for name in names:
        table = (plugins.get(name) or {}).get("containerd") if isinstance(plugins.get(name), dict) else None
        if isinstance(table, dict):
            runtimes = dict(out.get("runtimes") or {})
            runtimes.update(table.get("runtimes") or {} if isinstance(table.get("runtimes"), dict) else {})
            out.update(table)
            out["runtimes"] = runtimes
    return out


def containerd_handlers(doc: dict, version: int) -> dict:
    """Handler name -> the binary it runs (None: the shim's default, runc), from the CRI table."""
    out = {}
    for name, rt in (cri_table(doc, version).get("runtimes") or {}).items():
        if not isinstance(rt, dict):
            continue
        options = rt.get("options") if isinstance(rt.get("options"), dict) else {}
        binary = options.get("BinaryName") or options.get("Runtime") or rt.get("runtime_engine") or None
        out[str(name)] = {"binary": binary if isinstance(binary, str) else None,
                          "runtime_type": rt.get("runtime_type")}
    return out


def crio_handlers(doc: dict) -> dict:
    runtimes = ((doc.get("crio") or {}).get("runtime") or {}).get("runtimes") or {}
    out = {}
    for name, rt in runtimes.items() if isinstance(runtimes, dict) else ():
        if isinstance(rt, dict):
            path = rt.get("runtime_path")
            out[str(name)] = {"binary": path if isinstance(path, str) and path else str(name),
                              "runtime_type": rt.get("runtime_type")}
    return out


class Effective:
    """What :func:`load` found: ``configs`` (each a candidate configuration in effect),
    ``ignored`` (``{"file", "why"}`` for each file that exists but is not in effect), ``notes``
    (how an open question was decided) and ``problems`` (``(file, message, fix)``: loading rules
    that leave the node unverifiable)."""

    def __init__(self):
        self.configs: list[dict] = []
        self.ignored: list[dict] = []
        self.notes: list[str] = []
        self.problems: list[tuple[str, str, str]] = []
        self.loaded: set[str] = set()

    def ignore(self, file: str, why: str) -> None:
        if not any(i["file"] == file and i["why"] == why for i in self.ignored):
            self.ignored.append({"file": file, "why": why})


class Loader:
    """Finds the configuration in effect. ``read(path, template)`` returns a parsed TOML document
    or None (it records why); ``fs`` is the node root (``isfile``, ``isdir``, ``listdir``, ``glob``,
    ``read_text``)."""

    def __init__(self, fs, read):
        self.fs = fs
        self.read = read
        self.eff = Effective()
        self._docs: dict[str, dict | None] = {}

    def _doc(self, path: str, template: bool = False):
        if path not in self._docs:
            self._docs[path] = self.read(path, template)
        return self._docs[path]

    def _dropins(self, directory: str) -> list[str]:
        if not self.fs.isdir(directory):
            return []
        try:
            return [p for p in self.fs.listdir(directory) if p.endswith(DROPIN_SUFFIXES)]
        except OSError:
            self.eff.problems.append((directory, f"{directory} cannot be listed.", f"make {directory} readable to the check"))
            return []

    # -- containerd ------------------------------------------------------------------------------

    def _load_order(self, root: str, template: bool, after: list[str]) -> tuple[list[str], dict, bool]:
        """(files in containerd's load order, their documents, whether every one parsed)."""
        order: list[str] = []
        docs: dict[str, dict] = {}
        complete = True
        pending = [root]
        queued_after = list(after)
        seen: set[str] = set()
        while pending or queued_after:
            if not pending:
                pending.append(queued_after.pop(0))
            path = pending.pop(0)
            if path in seen:
                continue
            seen.add(path)
            if not self.fs.isfile(path):
                if path != root:
                    self.eff.problems.append((
                        path, f"{path} is imported but does not exist: containerd refuses to start with this "
                        "configuration, so what runs instead cannot be known.", f"create {path} or remove it from imports",
                    ))
                    complete = False
                continue
            doc = self._doc(path, template and path == root)
            self.eff.loaded.add(path)
            if doc is None:
                complete = False  # the finding is recorded; its settings and imports are unknown
                continue
            order.append(path)
            docs[path] = doc
            imports = doc.get("imports")
            if isinstance(imports, str):
                imports = [imports]
            base = path.rsplit("/", 1)[0] or "/"
            for pattern in imports if isinstance(imports, list) else []:
                if not isinstance(pattern, str):
                    continue
                if "@@bcd-template@@" in pattern:
                    self.eff.problems.append((
                        path, f"{path} imports a path its template computes at run time ({pattern!r}).",
                        f"write the import path literally in {path}",
                    ))
                    complete = False
                    continue
                absolute = pattern if pattern.startswith("/") else base.rstrip("/") + "/" + pattern
                if "*" in absolute or "?" in absolute or "[" in absolute:
                    pending.extend(self.fs.glob(absolute))
                else:
                    pending.append(absolute)
        return order, docs, complete

    def containerd(self, runtime: str, root: str, *, template: bool = False, after: list[str] | None = None,
                   default_runtime: tuple[str, str] | None = None, extra_runtimes: dict | None = None) -> list[dict]:
        """Every candidate configuration of one containerd whose root file is ``root``."""
        order, docs, complete = self._load_order(root, template, list(after or []))
        if not order:
            return []
        version = next((_version(docs[p]) for p in order if _version(docs[p]) != 0), 0)
        if version == 3:
            rules = [RULE_2X]
        elif version in (0, 1, 2):
            rules = [RULE_1X, RULE_2X]
        else:
            rules = [RULE_1X, RULE_2X]
            self.eff.notes.append(
                f"{root}: config version {docs[order[0]].get('version')!r} is not one containerd 1.x (1, 2) or 2.x "
                "(1 to 3) documents: judged under both merge rules, the worst result counts"
            )
        out = []
        for rule in rules:
            merged: dict = {}
            origin: dict = {}
            replaced: list = []
            refused = None
            root_version = 0
            for path in order:
                doc = docs[path]
                v = _version(doc)
                if rule == RULE_2X:
                    if root_version == 0:
                        root_version = v
                    if v > root_version:
                        refused = (f"{path} has config version {v}, higher than the root's {root_version}: "
                                   "containerd 2.x refuses to start with this configuration")
                        break
                    target = _version(merged) if merged else v
                    if 0 <= v < target:
                        doc = migrate(doc, v, target)
                    merge_deep(merged, origin, doc, path, lists="append", skip_empty=True)
                else:
                    merge_1x(merged, origin, doc, path, replaced)
            if refused:
                self.eff.notes.append(f"{root}: {refused} (judged as containerd 1.x only)" if len(rules) > 1
                                      else f"{root}: {refused}")
                if len(rules) == 1:
                    self.eff.problems.append((root, refused, "give every drop-in the root's version"))
                continue
            disabled = [p for p in merged.get("disabled_plugins") or [] if isinstance(p, str)]
            serves_cri = not any(p in CRI_PLUGINS for p in disabled)
            effective_version = version if version in (0, 1, 2, 3) else -1
            out.append({
                "runtime": runtime, "rule": rule, "root": root, "files": list(order), "complete": complete,
                "version": version, "doc": merged, "origin": origin, "serves_cri": serves_cri,
                "disabled_plugins": disabled,
                # a file named in bcd_container_runtime may be CRI-O's
                "handlers": crio_handlers(merged) if "crio" in merged else containerd_handlers(merged, effective_version),
                "default_runtime": default_runtime or (
                    (cri_table(merged, effective_version).get("default_runtime_name"), root)
                    if cri_table(merged, effective_version).get("default_runtime_name") else None
                ),
                "extra_runtimes": dict(extra_runtimes or {}),
            })
            for f, name, by in replaced:
                self.eff.notes.append(
                    f"{f}: its [plugins.\"{name}\"] section is replaced whole by {by}'s under containerd 1.x "
                    "(1.x merges a plugin's section whole, not key by key)"
                )
            contributing = set(origin.values())
            for f in order:
                doc = docs[f]
                own = [k for k in doc if k not in STRUCTURAL_KEYS]
                if own and f not in contributing and not doc.get("imports"):
                    self.eff.ignore(f, "overridden: every setting it makes is set again by a later file")
            if not serves_cri:
                for f in order:
                    self.eff.ignore(f, f"its containerd disables the CRI plugin (disabled_plugins = {disabled}), so it "
                                       "serves no Kubernetes pod")
        return out

    # -- k3s and RKE2 ----------------------------------------------------------------------------

    def rancher_default_runtime(self, distro: str) -> tuple[str, str] | None:
        conf_dir = RANCHER[distro][1]
        files = [f"{conf_dir}/config.yaml"]
        if self.fs.isdir(f"{conf_dir}/config.yaml.d"):
            try:
                files += [p for p in self.fs.listdir(f"{conf_dir}/config.yaml.d") if p.endswith((".yaml", ".yml"))]
            except OSError:
                pass
        found = None
        for path in files:
            if not self.fs.isfile(path):
                continue
            try:
                text = self.fs.read_text(path, limit=1 << 20)
            except (OSError, UnicodeDecodeError):
                self.eff.problems.append((path, f"{path} cannot be read, so the default runtime {distro} sets is unknown.",
                                          f"make {path} readable to the check"))
                continue
            for m in DEFAULT_RUNTIME_RE.finditer(text):
                value = m["v"].strip("\"'")
                if value:
                    found = (value, path)
        return found

    def _k3s_detected(self) -> dict:
        out = {}
        for name, binary in K3S_NVIDIA_RUNTIMES.items():
            for d in K3S_SEARCH_DIRS:
                if self.fs.isfile(f"{d}/{binary}"):
                    out[name] = f"{d}/{binary}"
                    break
        return out

    def rancher(self, distro: str) -> None:
        directory = RANCHER[distro][0]
        generated = f"{directory}/config.toml"
        templates = [f"{directory}/config-v3.toml.tmpl", f"{directory}/config.toml.tmpl"]
        present = [t for t in templates if self.fs.isfile(t)]
        template = present[0] if present else None
        for other in present[1:]:
            self.eff.ignore(other, f"{distro} renders {template} instead (config-v3.toml.tmpl takes precedence over "
                                   "config.toml.tmpl)")
        after = [p for d in RANCHER_DROPIN_DIRS for p in self._dropins(f"{directory}/{d}")]
        default = self.rancher_default_runtime(distro)
        if self.fs.isfile(generated):
            self.eff.configs.extend(self.containerd(distro, generated, after=after, default_runtime=default))
        if template:
            extra = None
            try:
                text = self.fs.read_text(template)
            except (OSError, UnicodeDecodeError):
                text = ""
            if BASE_TEMPLATE_RE.search(text) and not self.fs.isfile(generated):
                extra = self._k3s_detected()
                self.eff.notes.append(
                    f"{template} includes {distro}'s built-in base template, which is not on disk (no {generated}): "
                    "judged with the NVIDIA runtimes the base adds for the binaries found ("
                    + (", ".join(f"{k}: {v}" for k, v in sorted(extra.items())) or "none") + ")"
                )
            self.eff.configs.extend(self.containerd(distro, template, template=True, after=after,
                                                    default_runtime=default, extra_runtimes=extra))

    # -- CRI-O -----------------------------------------------------------------------------------

    def crio(self) -> None:
        files = ([CRIO_ROOT] if self.fs.isfile(CRIO_ROOT) else []) + self._dropins(CRIO_DROPIN_DIR)
        for d in CRIO_NEVER_READ:
            if self.fs.isdir(d):
                try:
                    for p in self.fs.listdir(d):
                        self.eff.ignore(p, f"CRI-O never reads {d} (its drop-in directory is {CRIO_DROPIN_DIR})")
                except OSError:
                    pass
        merged: dict = {}
        origin: dict = {}
        order = []
        complete = True
        for path in files:
            doc = self._doc(path)
            self.eff.loaded.add(path)
            if doc is None:
                complete = False
                continue
            order.append(path)
            merge_deep(merged, origin, doc, path, lists="replace", skip_empty=False)
        if not order:
            return
        for f in order:
            if f not in set(origin.values()) and any(self._docs.get(f) or {}):
                self.eff.ignore(f, "every option it sets is set again by a later file (CRI-O: the last value wins)")
        runtime = (merged.get("crio") or {}).get("runtime") or {}
        default = runtime.get("default_runtime") if isinstance(runtime, dict) else None
        self.eff.configs.append({
            "runtime": "cri-o", "rule": RULE_CRIO, "root": order[0], "files": order, "complete": complete,
            "version": None, "doc": merged, "origin": origin, "serves_cri": True, "disabled_plugins": [],
            "handlers": crio_handlers(merged),
            "default_runtime": (default, origin.get(("crio", "runtime", "default_runtime"), order[0])) if default else None,
            "extra_runtimes": {},
        })

    # -- all -------------------------------------------------------------------------------------

    def run(self, extra_files=(), extra_dirs=()) -> Effective:
        self.eff.configs.extend(self.containerd("containerd", CONTAINERD_ROOT))
        for distro in RANCHER:
            self.rancher(distro)
        self.crio()
        known_dirs = {CRIO_DROPIN_DIR}
        for f in extra_files:
            if f in (CONTAINERD_ROOT, CRIO_ROOT) or any(f.startswith(RANCHER[d][0] + "/") for d in RANCHER):
                continue
            self.eff.configs.extend(self.containerd("custom", f, template=f.endswith(".tmpl")))
        for d in extra_dirs:
            if d in known_dirs:
                continue
            for f in self._dropins(d):
                if f not in self.eff.loaded:
                    self.eff.configs.extend(self.containerd("custom", f, template=f.endswith(".tmpl")))
        for d in CONTAINERD_DROPIN_DIRS:
            for f in self._dropins(d):
                if f in self.eff.loaded:
                    continue
                if self.fs.isfile(CONTAINERD_ROOT):
                    why = f"no imports of {CONTAINERD_ROOT} (or of a file it imports) names it, and containerd loads nothing else"
                else:
                    why = f"{CONTAINERD_ROOT} does not exist, so containerd runs on its defaults and imports nothing"
                self.eff.ignore(f, "not imported: " + why)
        return self.eff


def load(fs, read, extra_files=(), extra_dirs=()) -> Effective:
    """The configuration in effect on the node at ``fs`` (see the module docstring)."""
    return Loader(fs, read).run(extra_files, extra_dirs)
