"""The container runtime configuration in effect on a node: which files each runtime loads, in
which order, and what they merge to. Standard library only: it runs on GPU nodes.

Loading rules modelled (from each runtime's own source and documentation):

* **containerd** reads the ``--config`` (``-c``) ``containerd.service`` and its drop-ins start it
  with (:func:`containerd_unit`), else ``/etc/containerd/config.toml``, and the files its
  ``imports`` name, as each release family's loader does (:mod:`bcd_containerd`: 1.7, 2.0-2.2,
  2.3.0-2.3.4, 2.3.5+; imports and globbing, version migration, section merge, the CRI plugin's
  load conditions). One candidate configuration per family judged: the node's own when its
  release is known, else every family (the worst result counts). Nothing else is loaded: a file
  in ``/etc/containerd/conf.d`` that no ``imports`` names is a note.
* **k3s and RKE2** generate ``config.toml`` under ``/var/lib/rancher/<k3s|rke2>/agent/etc/containerd``
  from ``config-v3.toml.tmpl`` when it exists, else from ``config.toml.tmpl`` (only the one in
  effect is judged, the other is reported as ignored), else from their built-in template, which
  adds the NVIDIA runtimes whose binaries they find. The config they generate imports the drop-in
  directory of its template's version (``config-v3.toml.d`` for version 3, ``config.toml.d`` for
  2; k3s PR #13680); a version 3 template is a containerd 2.x one. ``default-runtime`` in
  ``/etc/rancher/<k3s|rke2>/config.yaml`` and ``config.yaml.d/*.yaml`` (the last wins) sets the
  default runtime. A template that includes the built-in base (``{{ template "base" . }}``) while
  no generated ``config.toml`` is on disk leaves the base open: the runtimes k3s would add are
  judged as well.
* **CRI-O** (1.34 and 1.36, proved against the real daemon: tests/oracle/test_crio_differential.py)
  reads ``/etc/crio/crio.conf``, then every file below ``/etc/crio/crio.conf.d`` as Go's
  ``filepath.Walk`` visits them (sorted by name, any suffix, dotfiles and subdirectories
  included), the last value winning per option; a later ``[crio.runtime.runtimes.<name>]``
  replaces that handler whole. It never reads ``/etc/crio/conf.d``. On top of its built-in
  handler ``crun`` (the default when ``default_runtime`` is unset), it refuses to start when a file
  is not TOML, when ``default_runtime`` names no handler, or when the default handler is invalid;
  any other invalid handler (a ``runtime_type`` it does not know, a ``runtime_path`` that does not
  exist, no ``runtime_path`` and no binary of the handler's name on $PATH) it drops as it starts.
  Binaries are checked only in a root that holds CRI-O's own (a node's root, not collected files).

Files named in ``bcd_container_runtime`` beyond these are read as the operator says: each one (and
every file of each directory) is a configuration of its own, with its imports.
"""

from __future__ import annotations

import copy
import re
import shlex

from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_containerd as cd

CONTAINERD_ROOT = "/etc/containerd/config.toml"
# Conventional drop-in directories: containerd loads them only when an ``imports`` names them.
CONTAINERD_DROPIN_DIRS = ("/etc/containerd/conf.d", "/etc/containerd/config.d")
RANCHER = {
    "k3s": ("/var/lib/rancher/k3s/agent/etc/containerd", "/etc/rancher/k3s"),
    "rke2": ("/var/lib/rancher/rke2/agent/etc/containerd", "/etc/rancher/rke2"),
}
RANCHER_DROPIN_DIRS = ("config.toml.d", "config-v3.toml.d")
CRIO_ETC = "/etc/crio"
CRIO_ROOT = "/etc/crio/crio.conf"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
CRIO_NEVER_READ = ("/etc/crio/conf.d",)
# CRI-O's built-in runtime handler and default_runtime (1.31 and later), its valid runtime_type
# values ("" is oci), and the $PATH of its systemd unit, where a handler without runtime_path is
# looked up by name
CRIO_DEFAULT_RUNTIME = "crun"
CRIO_RUNTIME_TYPES = ("", "oci", "vm", "pod")
CRIO_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
DROPIN_SUFFIXES = (".toml", ".conf")

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
# Where systemd finds containerd's unit and its drop-ins, most important first (systemd.unit(5)).
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/lib/systemd/system",
             "/usr/lib/systemd/system")
CONTAINERD_UNIT = "containerd.service"
EXEC_PREFIX_RE = re.compile(r"^[-@:+!]+")
# Keys that hold no setting of their own (what a file loads, not what it sets).
STRUCTURAL_KEYS = ("version", "imports")


def _empty(value) -> bool:
    """mergo's isEmptyValue: a later file's empty value does not override."""
    if isinstance(value, bool):
        return value is False
    return value is None or value == "" or value == [] or value == {} or (isinstance(value, (int, float)) and value == 0)


def _mark(origin: dict, path: tuple, value, file: str) -> None:
    for leaf, _value in cd.leaves(value, path):
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


def _unit_lines(text: str):
    """(key, value) of a systemd unit file's [Service] section, continuation lines joined."""
    section = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section == "Service" and "=" in line:
            key, value = line.split("=", 1)
            yield key.strip(), value.strip()


def config_flag(argv: list[str]) -> str | None:
    """The value of containerd's ``--config``/``-c`` in an argument list (the last one wins)."""
    found = None
    i = 0
    while i < len(argv):
        a = argv[i]
        for flag in ("--config", "-config", "-c", "--c"):
            if a == flag and i + 1 < len(argv):
                found = argv[i + 1]
                i += 1
                break
            if a.startswith(flag + "="):
                found = a.split("=", 1)[1]
                break
        i += 1
    return found


def containerd_unit(fs) -> dict | None:
    """containerd.service as systemd reads it: the unit file in effect and its drop-ins
    (``containerd.service.d/*.conf`` of every unit directory, by file name, a name in a more
    important directory hiding the same name elsewhere), the ExecStart in effect (an empty
    ``ExecStart=`` resets the list) and the ``--config``/``-c`` it passes. None when there is no
    unit. ``{"unit", "files", "exec", "binary", "config", "problem"}``."""
    unit = next((f"{d}/{CONTAINERD_UNIT}" for d in UNIT_DIRS if fs.isfile(f"{d}/{CONTAINERD_UNIT}")), None)
    dropins: dict[str, str] = {}
    for d in reversed(UNIT_DIRS):
        directory = f"{d}/{CONTAINERD_UNIT}.d"
        if fs.isdir(directory):
            try:
                for f in fs.listdir(directory):
                    if f.endswith(".conf"):
                        dropins[f.rsplit("/", 1)[1]] = f
            except OSError:
                continue
    if unit is None and not dropins:
        return None
    files = ([unit] if unit else []) + [dropins[n] for n in sorted(dropins)]
    execs: list[str] = []
    for f in files:
        try:
            text = fs.read_text(f, limit=1 << 20)
        except (OSError, UnicodeDecodeError):
            return {"unit": unit, "files": files, "exec": None, "binary": None, "config": None,
                    "problem": f"{f} cannot be read"}
        for key, value in _unit_lines(text):
            if key == "ExecStart":
                execs = [] if value == "" else [*execs, value]
    if not execs:
        return {"unit": unit, "files": files, "exec": None, "binary": None, "config": None, "problem": None}
    command = execs[-1]
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return {"unit": unit, "files": files, "exec": command, "binary": None, "config": None,
                "problem": f"its ExecStart does not parse ({exc})"}
    if argv:
        argv[0] = EXEC_PREFIX_RE.sub("", argv[0])
    config = config_flag(argv[1:])
    problem = None
    if config and ("$" in config or not config.startswith("/")):
        problem = f"its ExecStart passes --config {config!r}, which systemd expands at run time"
    return {"unit": unit, "files": files, "exec": command, "binary": argv[0] if argv else None, "config": config,
            "problem": problem}


def containerd_handlers(o) -> dict:
    """Handler name -> the binary it runs (None: the shim's default, runc) and its runtime_type,
    as the CRI plugin of one family's reading (:class:`bcd_containerd.Outcome`) runs them."""
    return {str(name): {"binary": rt.get("binary"), "runtime_type": rt.get("runtime_type")}
            for name, rt in o.runtimes.items()}


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
        self.unit: dict | None = None
        self.containerd_root = CONTAINERD_ROOT

    def ignore(self, file: str, why: str) -> None:
        if not any(i["file"] == file and i["why"] == why for i in self.ignored):
            self.ignored.append({"file": file, "why": why})


class Loader:
    """Finds the configuration in effect. ``read(path, template)`` returns a parsed TOML document
    or None (it records why); ``fs`` is the node root (``isfile``, ``isdir``, ``listdir``, ``glob``,
    ``read_text``)."""

    def __init__(self, fs, read, families=None):
        self.fs = fs
        self.read = read
        self.families = list(families or cd.FAMILIES)
        self.eff = Effective()
        self._docs: dict[str, dict | None] = {}

    def _doc(self, path: str, template: bool = False):
        if path not in self._docs:
            self._docs[path] = self.read(path, template)
        return self._docs[path]

    def _walk(self, directory: str) -> list[str]:
        """Every file below ``directory``, as CRI-O's drop-in loader (Go's ``filepath.Walk``) reads
        them: each directory's entries sorted by name, hidden ones and any suffix included, a
        subdirectory's files where its name sorts."""
        if not self.fs.isdir(directory):
            return []
        try:
            return self.fs.walk(directory)
        except OSError:
            self.eff.problems.append((directory, f"{directory} cannot be listed.", f"make {directory} readable to the check"))
            return []

    def _dropins(self, directory: str) -> list[str]:
        if not self.fs.isdir(directory):
            return []
        try:
            return [p for p in self.fs.listdir(directory) if p.endswith(DROPIN_SUFFIXES)]
        except OSError:
            self.eff.problems.append((directory, f"{directory} cannot be listed.", f"make {directory} readable to the check"))
            return []

    # -- containerd ------------------------------------------------------------------------------

    def _family_read(self, root: str, template: bool):
        def read(path: str):
            doc = self._doc(path, template and path == root)
            self.eff.loaded.add(path)
            return doc
        return read

    def containerd(self, runtime: str, root: str, *, template: bool = False, after: list[str] | None = None,
                   default_runtime: tuple[str, str] | None = None, extra_runtimes: dict | None = None,
                   families: list[str] | None = None) -> list[dict]:
        """Every candidate configuration of one containerd whose root file is ``root``: one per
        loader family judged (:mod:`bcd_containerd`; the node's own when its version is known)."""
        if not self.fs.isfile(root):
            return []
        out = []
        refusals: dict[tuple, list[str]] = {}
        for family in families or self.families:
            o = cd.load(self.fs, self._family_read(root, template), root, family, after=list(after or []))
            if o.templated:
                problem = (o.where, f"{o.where} imports a path its template computes at run time ({o.templated!r}).",
                           f"write the import path literally in {o.where}")
                if problem not in self.eff.problems:
                    self.eff.problems.append(problem)
                continue
            c = {
                "runtime": runtime, "rule": o.label, "family": family, "root": root, "files": list(o.files),
                "complete": o.state != cd.REFUSED, "version": o.version, "state": o.state, "reason": o.reason,
                "where": o.where or root, "serves_cri": o.state == cd.SERVING, "disabled_plugins": list(o.disabled),
                "doc": {}, "origin": {}, "keys": {}, "handlers": {}, "default_runtime": None,
                "extra_runtimes": dict(extra_runtimes or {}),
            }
            if o.state == cd.REFUSED:
                refusals.setdefault((o.where, o.reason), []).append(o.label)
            if o.state == cd.SERVING:
                c["doc"], c["origin"], c["keys"] = cd.scan_doc(o)
                c["handlers"] = containerd_handlers(o)
                if default_runtime:
                    c["default_runtime"] = default_runtime
                elif o.default_runtime:
                    c["default_runtime"] = (o.default_runtime, o.default_from or root)
            out.append(c)
            for f, name, by in o.replaced:
                note = (f"{f}: its [plugins.\"{name}\"] section is replaced whole by {by}'s under containerd 1.7 "
                        "(1.7 merges a plugin's section whole, not key by key)")
                if note not in self.eff.notes:
                    self.eff.notes.append(note)
            for note in o.notes:
                if note not in self.eff.notes:
                    self.eff.notes.append(note)
        # a file is overridden, or serves nothing, only when that holds under every family judged
        serving = [c for c in out if c["serves_cri"]]
        if out and not serving and all(c["state"] == cd.DISABLED for c in out):
            for c in out:
                for f in c["files"]:
                    self.eff.ignore(f, f"its containerd disables the CRI plugin ({c['reason']}), so it serves no "
                                       "Kubernetes pod")
        elif serving and len(serving) == len(out):
            contributing = set().union(*(set(c["origin"].values()) | {c["root"]} for c in serving))
            for f in serving[0]["files"]:
                doc = self._docs.get(f) or {}
                own = [k for k in doc if k not in STRUCTURAL_KEYS]
                plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
                only_cri = own == ["plugins"] and plugins and all(k in cd.CRI_SECTIONS for k in plugins)
                if only_cri and f not in contributing and all(f in c["files"] for c in serving):
                    self.eff.ignore(f, "overridden: every CRI setting it makes is set again by a later file")
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
        # The template version decides the base k3s renders and the drop-in directory its imports
        # name (k3s PR #13680): config-v3.toml.d for version 3, config.toml.d for version 2. A
        # version 3 template means a k3s whose containerd is 2.x.
        generated_doc = self._doc(generated) if self.fs.isfile(generated) else None
        v3 = (template == templates[0]) or (
            template is None and isinstance(generated_doc, dict) and generated_doc.get("version") == 3)
        dropdir = f"{directory}/{RANCHER_DROPIN_DIRS[1] if v3 else RANCHER_DROPIN_DIRS[0]}"
        other_dir = f"{directory}/{RANCHER_DROPIN_DIRS[0] if v3 else RANCHER_DROPIN_DIRS[1]}"
        families = [f for f in self.families if f != cd.F17] if v3 else self.families
        if v3 and not families:
            self.eff.notes.append(f"{distro}: a version 3 template or config.toml is containerd 2.x's, but the node's "
                                  "containerd is 1.7: judged as containerd 1.7 reads it")
            families = self.families
        for f in self._dropins(other_dir):
            self.eff.ignore(f, f"{distro}'s {'version 3' if v3 else 'version 2'} configuration imports "
                            f"{dropdir}/*.toml, not {other_dir}")
        default = self.rancher_default_runtime(distro)
        if self.fs.isfile(generated):
            self.eff.configs.extend(self.containerd(distro, generated, default_runtime=default, families=families))
        if template:
            extra = None
            after = []
            try:
                text = self.fs.read_text(template)
            except (OSError, UnicodeDecodeError):
                text = ""
            if BASE_TEMPLATE_RE.search(text):
                # the base template imports the drop-in directory of its version
                after = self._dropins(dropdir)
                if not self.fs.isfile(generated):
                    extra = self._k3s_detected()
                    self.eff.notes.append(
                        f"{template} includes {distro}'s built-in base template, which is not on disk (no {generated}): "
                        "judged with the NVIDIA runtimes the base adds for the binaries found ("
                        + (", ".join(f"{k}: {v}" for k, v in sorted(extra.items())) or "none") + ")"
                    )
            self.eff.configs.extend(self.containerd(distro, template, template=True, after=after,
                                                    default_runtime=default, extra_runtimes=extra, families=families))
        for f in self._dropins(dropdir):
            if f not in self.eff.loaded and (self.fs.isfile(generated) or template):
                self.eff.ignore(f, f"not imported: the {distro} configuration in effect imports nothing from {dropdir} "
                                   f"({distro} releases before the drop-in imports write none into {generated})")

    # -- CRI-O -----------------------------------------------------------------------------------

    def crio(self, files: list[str] | None = None) -> None:
        """CRI-O's configuration in effect, as its daemon starts with it (see the module docstring):
        one configuration whose ``state`` is ``serving``, or ``refused`` with ``reason`` and
        ``where`` when the daemon would not start. ``files``: one file the operator named."""
        custom = files is not None
        if not custom:
            files = ([CRIO_ROOT] if self.fs.isfile(CRIO_ROOT) else []) + self._walk(CRIO_DROPIN_DIR)
            for d in CRIO_NEVER_READ:
                if self.fs.isdir(d):
                    try:
                        for p in self.fs.listdir(d):
                            self.eff.ignore(p, f"CRI-O never reads {d} (its drop-in directory is {CRIO_DROPIN_DIR})")
                    except OSError:
                        pass
            if not files and not self.fs.isdir(CRIO_ETC) and not self._crio_installed():
                return
        merged: dict = {}
        origin: dict = {}
        handlers: dict = {}  # name -> (its table, the file that set it): a later file replaces it whole
        order = []
        broken = None
        for path in files:
            doc = self._doc(path)
            self.eff.loaded.add(path)
            if doc is None:
                broken = broken or path
                continue
            order.append(path)
            doc = copy.deepcopy(doc)
            runtime = (doc.get("crio") or {}).get("runtime") if isinstance(doc.get("crio"), dict) else None
            tables = runtime.pop("runtimes", None) if isinstance(runtime, dict) else None
            for name, table in tables.items() if isinstance(tables, dict) else ():
                handlers[str(name)] = (table if isinstance(table, dict) else {}, path)
            merge_deep(merged, origin, doc, path, lists="replace", skip_empty=False)
        for name, (table, path) in handlers.items():
            keypath = ("crio", "runtime", "runtimes", name)
            merged.setdefault("crio", {}).setdefault("runtime", {}).setdefault("runtimes", {})[name] = copy.deepcopy(table)
            _mark(origin, keypath, table, path)
            if not table:
                origin[keypath] = path
        root = order[0] if order else (files[0] if files else CRIO_ETC)
        for f in order:
            if f not in set(origin.values()) and any(self._docs.get(f) or {}):
                self.eff.ignore(f, "every option it sets is set again by a later file (CRI-O: the last value wins, "
                                   "and a later runtime table replaces a handler whole)")
        state, reason, where, dropped = self._crio_start(merged, origin, root, broken)
        default = ((merged.get("crio") or {}).get("runtime") or {}).get("default_runtime") or CRIO_DEFAULT_RUNTIME
        self.eff.configs.append({
            "runtime": "custom" if custom else "cri-o", "rule": RULE_CRIO, "root": root, "files": order,
            "complete": broken is None, "version": None, "doc": merged if state == cd.SERVING else {},
            "origin": origin, "serves_cri": state == cd.SERVING, "disabled_plugins": [], "state": state,
            "reason": reason, "where": where, "dropped_handlers": dropped,
            "handlers": crio_handlers(merged) if state == cd.SERVING else {},
            "default_runtime": (default, origin.get(("crio", "runtime", "default_runtime"),
                                                    "no file sets default_runtime: CRI-O's built-in default")),
            "extra_runtimes": {},
        })

    def _crio_installed(self) -> bool:
        """Whether the root holds CRI-O's binary on $PATH: a node's root, not collected files."""
        return any(self.fs.isfile(f"{d}/crio") for d in CRIO_PATH)

    def _crio_start(self, merged: dict, origin: dict, root: str, broken: str | None) -> tuple[str, str | None, str, dict]:
        """What CRI-O does with the merged configuration as its daemon starts: (state, reason,
        where, dropped handlers). Its built-in handler ``crun`` is added (``merged`` changes); a
        ``default_runtime`` no handler defines, or a default handler CRI-O finds invalid, refuses
        the start; any other invalid handler is dropped (CRI-O: "is being ignored due to"), and
        removed from ``merged``. A handler's binary (``runtime_path``, else its name on $PATH) is
        checked only where the root holds CRI-O's own binary: a node's root, where a missing
        runtime binary is missing; a root of collected configuration files holds none."""
        if broken is not None:
            return cd.REFUSED, f"{broken} is not valid TOML, and CRI-O stops at it", broken, {}
        runtime = merged.setdefault("crio", {}).setdefault("runtime", {})
        if not isinstance(runtime, dict) or not isinstance(runtime.setdefault("runtimes", {}), dict):
            return cd.REFUSED, "crio.runtime is not a table", root, {}
        runtimes = runtime["runtimes"]
        runtimes.setdefault(CRIO_DEFAULT_RUNTIME, {})
        default = runtime.get("default_runtime") or CRIO_DEFAULT_RUNTIME
        default_from = origin.get(("crio", "runtime", "default_runtime"), root)
        if default not in runtimes:
            return (cd.REFUSED, f"default_runtime is {default!r}, but no [crio.runtime.runtimes.{default}] is defined",
                    default_from, {})
        node = self._crio_installed()
        dropped = {}
        for name in list(runtimes):
            table = runtimes[name] if isinstance(runtimes[name], dict) else {}
            rtype = table.get("runtime_type") or ""
            why = None
            if rtype not in CRIO_RUNTIME_TYPES:
                why = f"runtime_type {rtype!r} is none of {', '.join(t for t in CRIO_RUNTIME_TYPES if t)}"
            elif node:
                path = table.get("runtime_path") or ""
                if path and not self.fs.exists(path):
                    why = f"its runtime_path {path} does not exist"
                elif not path and not any(self.fs.isfile(f"{d}/{name}") for d in CRIO_PATH):
                    why = f"it sets no runtime_path and no {name} is on $PATH ({':'.join(CRIO_PATH)})"
            if why is None:
                continue
            where = origin.get(("crio", "runtime", "runtimes", name), f"{root} (CRI-O's built-in handler)")
            if name == default:
                return cd.REFUSED, f"its default runtime handler {name!r} is invalid: {why}", where, {}
            del runtimes[name]
            dropped[name] = why
            self.eff.notes.append(f"CRI-O drops the runtime handler {name!r} ({where}) as it starts: {why}")
        return cd.SERVING, None, root, dropped

    def _custom(self, path: str) -> None:
        """A file named in bcd_container_runtime: CRI-O's format when it has a [crio] table, else
        containerd's."""
        doc = self._doc(path, path.endswith(".tmpl")) if self.fs.isfile(path) else None
        if isinstance(doc, dict) and "crio" in doc:
            self.crio(files=[path])
        else:
            self.eff.configs.extend(self.containerd("custom", path, template=path.endswith(".tmpl")))

    # -- all -------------------------------------------------------------------------------------

    def containerd_root(self) -> str:
        """The file containerd.service starts containerd with: its ``--config``, else the default."""
        unit = containerd_unit(self.fs)
        self.eff.unit = unit
        if unit is None:
            return CONTAINERD_ROOT
        where = unit["files"][-1] if unit["files"] else CONTAINERD_UNIT
        if unit["problem"]:
            self.eff.problems.append((where, f"containerd.service ({', '.join(unit['files'])}): {unit['problem']}, "
                                             "so the configuration containerd reads cannot be known.",
                                      "write the --config path literally in the unit or its drop-in"))
            return CONTAINERD_ROOT
        config = unit["config"]
        if not config or config == CONTAINERD_ROOT:
            return CONTAINERD_ROOT
        self.eff.notes.append(f"containerd.service starts containerd with --config {config} "
                              f"({unit['exec']!r}, in effect from {', '.join(unit['files'])})")
        if self.fs.isfile(CONTAINERD_ROOT):
            self.eff.ignore(CONTAINERD_ROOT, f"containerd.service starts containerd with --config {config}, so "
                                             f"containerd never reads {CONTAINERD_ROOT}")
        if not self.fs.isfile(config):
            self.eff.problems.append((config, f"containerd.service starts containerd with --config {config}, which "
                                              "does not exist in this node root: containerd refuses to start with a "
                                              "--config that cannot be read.",
                                      f"collect {config} with the node's files (or fix the unit's --config)"))
        return config

    def run(self, extra_files=(), extra_dirs=()) -> Effective:
        root = self.containerd_root()
        self.eff.containerd_root = root
        self.eff.configs.extend(self.containerd("containerd", root))
        for distro in RANCHER:
            self.rancher(distro)
        self.crio()
        known_dirs = {CRIO_DROPIN_DIR}
        for f in extra_files:
            if f in (CONTAINERD_ROOT, root, CRIO_ROOT) or any(f.startswith(RANCHER[d][0] + "/") for d in RANCHER):
                continue
            self._custom(f)
        for d in extra_dirs:
            if d in known_dirs:
                continue
            for f in self._dropins(d):
                if f not in self.eff.loaded:
                    self._custom(f)
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


def load(fs, read, extra_files=(), extra_dirs=(), families=None) -> Effective:
    """The configuration in effect on the node at ``fs`` (see the module docstring); containerd's
    read by each loader family of ``families`` (default: every family)."""
    return Loader(fs, read, families).run(extra_files, extra_dirs)
