"""The container runtime as it runs on a node, asked itself, and compared with the file judge.
Standard library only: it runs on GPU nodes (module bcd_runtime_info).

What is asked (:class:`Probe`), all read-only:

* the running daemons, from ``/proc/<pid>/comm`` and ``cmdline``: containerd (k3s's and RKE2's
  too, which run containerd as a child with ``-c <their generated config>``) and CRI-O;
* containerd: its release (``<binary> --version``, the binary of ``/proc/<pid>/exe``), the file it
  runs with (``--config``/``-c`` of its command line, else ``/etc/containerd/config.toml``), what
  that file and its imports say now (``containerd --config <file> config dump``) and the CRI
  configuration the daemon runs with now: ``crictl info`` (``crictl`` on the node, ``k3s crictl``,
  RKE2's ``/var/lib/rancher/rke2/bin/crictl``) on the daemon's socket, else the CRI plugin's own
  start-up line in the journal of that process (2.x ``starting cri plugin`` with the configuration
  as JSON; 1.x ``Start cri plugin with config {...}`` in Go's ``%+v``);
* CRI-O: ``crio status config`` (the running daemon), and ``crio config`` with the flags the
  daemon was started with (what its files say now; less the handlers the daemon drops as it
  starts, whose binary is missing in its root). Tested against real CRI-O 1.34 and 1.36
  (tests/oracle/test_crio_live.py).

:func:`reconcile` then compares that with what the file judge (``verify_node_root``) concluded
from the files, and reports every disagreement as a finding naming both sides. Where they
differ, the runtime's answer wins: it is what runs.
"""

from __future__ import annotations

import json
import os
import re
import time

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_containerd import (
    BadPattern,
    family_of,
    go_glob,
    parse_version,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    NOT_READY,
    SOURCE_BOTH,
    SOURCE_FILES,
    SOURCE_RUNTIME,
    UNVERIFIABLE,
    NodeRootError,
    _Root,
    finding,
    is_nvidia_runtime,
    verdict_of,
)
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_runtime_config import (
    CONTAINERD_ROOT,
    CRIO_DEFAULT_RUNTIME,
    CRIO_ROOT,
    RULE_CRIO,
    config_flag,
)

try:
    import tomllib as _toml
except ImportError:  # Python < 3.11 on a node
    try:
        import tomli as _toml
    except ImportError:
        _toml = None

CRI_GRPC = "io.containerd.grpc.v1.cri"
CRI_RUNTIME = "io.containerd.cri.v1.runtime"
DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
CRIO_ADDRESS = "/var/run/crio/crio.sock"
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
RKE2_CRICTL = "/var/lib/rancher/rke2/bin/crictl"

# 1.x: "Start cri plugin with config {PluginConfig:{ContainerdConfig:{... DefaultRuntimeName:runc ...
# Runtimes:map[nvidia:{Type:... Options:map[BinaryName:/usr/local/bin/nvidia-container-runtime ...] ...}]"
GOV_DEFAULT_RE = re.compile(r"\bDefaultRuntimeName:(\S*)")
GOV_BINARY_RE = re.compile(r"\bBinaryName:([^\s\]]*)")
GOV_NAME_RE = re.compile(r"\s*([^\s:{}\[\]]+):\{")
LOG_CONFIG_RE = re.compile(r'\bconfig="((?:[^"\\]|\\.)*)"')


# --- parsing what the runtime says ------------------------------------------------------------

def _binary(value) -> str | None:
    """A BinaryName as the judge compares it: empty means the shim's default (runc): None."""
    return value if isinstance(value, str) and value else None


def cri_from_dump(doc: dict) -> dict | None:
    """The CRI runtimes of ``containerd config dump`` (parsed TOML): version 3+ dumps (2.x) keep
    them in ``io.containerd.cri.v1.runtime``, version 2 dumps (1.x) in ``io.containerd.grpc.v1.cri``.
    ``{"default_runtime", "handlers": {name: binary or None}, "disabled_plugins", "version",
    "imports"}``, or None when the dump has no CRI section (the CRI plugin is not configured)."""
    plugins = doc.get("plugins") if isinstance(doc.get("plugins"), dict) else {}
    section = plugins.get(CRI_RUNTIME)
    if not isinstance(section, dict):
        section = plugins.get(CRI_GRPC)
    if not isinstance(section, dict):
        return None
    table = section.get("containerd") if isinstance(section.get("containerd"), dict) else {}
    runtimes = table.get("runtimes") if isinstance(table.get("runtimes"), dict) else {}
    handlers = {}
    for name, rt in runtimes.items():
        opts = rt.get("options") if isinstance(rt, dict) and isinstance(rt.get("options"), dict) else {}
        handlers[str(name)] = _binary(opts.get("BinaryName"))
    return {
        "default_runtime": table.get("default_runtime_name") or None,
        "handlers": handlers,
        "disabled_plugins": [str(p) for p in doc.get("disabled_plugins") or []],
        "version": doc.get("version"),
        "imports": [str(p) for p in doc.get("imports") or []],
    }


def cri_from_json(config: dict) -> dict | None:
    """The CRI runtimes of the CRI plugin's configuration as JSON: the ``config`` of ``crictl
    info``, and the ``config`` field of 2.x's ``starting cri plugin`` log line (the same Go struct,
    marshalled the same way)."""
    if not isinstance(config, dict) or not isinstance(config.get("containerd"), dict):
        return None
    table = config["containerd"]
    handlers = {}
    for name, rt in (table.get("runtimes") or {}).items():
        opts = rt.get("options") if isinstance(rt, dict) and isinstance(rt.get("options"), dict) else {}
        handlers[str(name)] = _binary(opts.get("BinaryName"))
    return {"default_runtime": table.get("defaultRuntimeName") or None, "handlers": handlers}


def _balanced(text: str, start: int, opening: str, closing: str) -> int:
    """The index just past the bracket that closes the one at ``start``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def cri_from_gov(text: str) -> dict | None:
    """The CRI runtimes of 1.x's ``Start cri plugin with config {...}`` (Go's ``%+v``)."""
    at = text.find("Runtimes:map[")
    default = GOV_DEFAULT_RE.search(text)
    if at < 0 or not default:
        return None
    start = at + len("Runtimes:map")
    end = _balanced(text, start, "[", "]")
    if end < 0:
        return None
    body = text[start + 1:end - 1]
    handlers = {}
    pos = 0
    while pos < len(body):
        m = GOV_NAME_RE.match(body, pos)
        if not m:
            break
        close = _balanced(body, m.end() - 1, "{", "}")
        if close < 0:
            return None
        entry = body[m.end() - 1:close]
        options = entry.find("Options:map[")
        binary = None
        if options >= 0:
            opts_end = _balanced(entry, options + len("Options:map"), "[", "]")
            b = GOV_BINARY_RE.search(entry[options:opts_end if opts_end > 0 else None])
            binary = _binary(b.group(1)) if b else None
        handlers[m.group(1)] = binary
        pos = close
    return {"default_runtime": default.group(1) or None, "handlers": handlers}


def cri_from_log(lines) -> dict | None:
    """The CRI runtimes the daemon logged when its CRI plugin started (the last start in
    ``lines``): 2.x JSON, else 1.x ``%+v``."""
    found = None
    for line in lines:
        if "starting cri plugin" in line:
            m = LOG_CONFIG_RE.search(line)
            if m:
                try:
                    found = cri_from_json(json.loads(json.loads(f'"{m.group(1)}"')))
                except ValueError:
                    found = None
        elif "Start cri plugin with config" in line:
            found = cri_from_gov(line)
    return found


def cri_from_crictl(text: str) -> dict | None:
    """The CRI runtimes of ``crictl info`` (its JSON's ``config``)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    config = data.get("config") if isinstance(data, dict) else None
    if isinstance(config, str):  # some releases nest it as a JSON string
        try:
            config = json.loads(config)
        except ValueError:
            return None
    return cri_from_json(config)


def crio_cri(doc: dict) -> dict | None:
    """CRI-O's runtimes (``crio.runtime.runtimes``, each ``runtime_path``, else its name on $PATH)
    and ``default_runtime`` from its TOML configuration. Unset (``crio config`` prints its
    defaults commented out), the default is CRI-O's built-in handler ``crun``, which is there
    whatever the files define."""
    runtime = ((doc.get("crio") or {}).get("runtime") or {}) if isinstance(doc, dict) else {}
    if not isinstance(runtime, dict):
        return None
    handlers = {}
    for name, rt in (runtime.get("runtimes") or {}).items():
        path = rt.get("runtime_path") if isinstance(rt, dict) else None
        handlers[str(name)] = path if isinstance(path, str) and path else str(name)
    handlers.setdefault(CRIO_DEFAULT_RUNTIME, CRIO_DEFAULT_RUNTIME)
    return {"default_runtime": runtime.get("default_runtime") or CRIO_DEFAULT_RUNTIME, "handlers": handlers}


def crio_version(text: str) -> str | None:
    """The release in ``crio --version`` output: ``crio version 1.36.3`` (1.34 and later) or a
    ``Version: 1.30.4`` line (earlier releases)."""
    for line in text.splitlines():
        found = re.match(r"\s*(?:crio version|version:)\s*v?(\d+\.\d+\.\d+\S*)", line, re.IGNORECASE)
        if found:
            return found.group(1)
    return None


def judge_cri(cri: dict | None) -> dict:
    """What a CRI configuration exposes: the handlers whose binary is the NVIDIA container
    runtime, and whether the default runtime (what a pod without a RuntimeClass runs) is one."""
    if not cri:
        return {"nvidia_handlers": [], "default_runtime": None, "default_is_nvidia": False}
    nvidia = sorted(n for n, b in cri["handlers"].items() if b and is_nvidia_runtime(b))
    default = cri.get("default_runtime")
    return {"nvidia_handlers": nvidia, "default_runtime": default, "default_is_nvidia": default in nvidia}


def _same_binary(a: str | None, b: str | None) -> bool:
    if a == b:
        return True
    if not a or not b:
        return False
    # a BinaryName without a directory is looked up on $PATH: compare the names
    if "/" not in a or "/" not in b:
        return a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]
    return False


def differences(a: dict, b: dict) -> list[str]:
    """How two CRI configurations differ, as short phrases (``a`` first)."""
    out = []
    if (a.get("default_runtime") or None) != (b.get("default_runtime") or None):
        out.append(f"default runtime {a.get('default_runtime')!r} against {b.get('default_runtime')!r}")
    ha, hb = a.get("handlers") or {}, b.get("handlers") or {}
    for name in sorted(set(ha) | set(hb)):
        if name not in hb:
            out.append(f"handler {name!r} ({ha[name] or 'runc'}) only in the first")
        elif name not in ha:
            out.append(f"handler {name!r} ({hb[name] or 'runc'}) only in the second")
        elif not _same_binary(ha[name], hb[name]):
            out.append(f"handler {name!r} runs {ha[name] or 'runc'} against {hb[name] or 'runc'}")
    return out


def describe(cri: dict | None) -> str:
    if cri is None:
        return "no CRI configuration"
    handlers = ", ".join(f"{n}={b or 'runc'}" for n, b in sorted(cri["handlers"].items())) or "no handler"
    return f"default {cri.get('default_runtime')!r}; {handlers}"


# --- asking the node --------------------------------------------------------------------------

def _read(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class Probe:
    """Asks the runtimes running on this machine. ``run(argv) -> (rc, stdout, stderr)`` runs a
    command (AnsibleModule.run_command); ``proc`` is the proc filesystem."""

    def __init__(self, run, proc: str = "/proc", tools: dict | None = None):
        self.run = run
        self.proc = proc
        self.tools = dict(tools or {})  # name -> path (or None: absent), instead of the PATH lookup
        self.notes: list[str] = []

    # -- processes -------------------------------------------------------------------------

    def processes(self) -> list[dict]:
        out = []
        try:
            pids = sorted(int(p) for p in os.listdir(self.proc) if p.isdigit())
        except OSError:
            return out
        own = self._pid_ns("self")
        elsewhere = []
        for pid in pids:
            comm = (_read(f"{self.proc}/{pid}/comm") or "").strip()
            if comm not in ("containerd", "crio"):
                continue
            # a runtime inside a container on this machine (kind, Docker-in-Docker: its own PID namespace;
            # a systemd service shares the host's) is not the node's
            ns = self._pid_ns(pid)
            if own and ns and ns != own:
                elsewhere.append(f"{comm} (pid {pid})")
                continue
            raw = _read(f"{self.proc}/{pid}/cmdline") or ""
            argv = [a for a in raw.split("\0") if a]
            if not argv:
                continue  # a zombie, or gone
            try:
                exe = os.readlink(f"{self.proc}/{pid}/exe")
            except OSError:
                exe = None
            out.append({"pid": pid, "comm": comm, "argv": argv, "exe": exe, "started": self.start_time(pid)})
        if elsewhere:
            self.notes.append(f"{', '.join(elsewhere)} run in another PID namespace (a container on this node), "
                              "so they are not the node's runtime and were not asked")
        return out

    def _pid_ns(self, pid) -> str | None:
        try:
            return os.readlink(f"{self.proc}/{pid}/ns/pid")
        except OSError:
            return None

    def start_time(self, pid: int) -> float | None:
        """When the process started (epoch seconds): its ``stat`` starttime after ``btime``."""
        stat = _read(f"{self.proc}/{pid}/stat")
        boot = _read(f"{self.proc}/stat")
        if not stat or not boot:
            return None
        try:
            fields = stat[stat.rindex(")") + 2:].split()
            ticks = int(fields[19])
            btime = next(int(line.split()[1]) for line in boot.splitlines() if line.startswith("btime "))
            return btime + ticks / os.sysconf("SC_CLK_TCK")
        except (ValueError, IndexError, StopIteration, OSError):
            return None

    def _binary(self, p: dict) -> str | None:
        """A path that runs the daemon's own binary: ``/proc/<pid>/exe`` resolved; a multi-call
        binary (k3s, RKE2) through the ``containerd`` link beside it."""
        exe = p["exe"]
        if exe and exe.endswith(" (deleted)"):
            self.notes.append(f"{p['comm']} (pid {p['pid']}) runs a binary that was replaced since it started "
                              f"({exe}); its version is asked of {exe[:-len(' (deleted)')]}")
            exe = exe[:-len(" (deleted)")]
        if exe and os.path.basename(exe) != p["comm"]:
            beside = os.path.join(os.path.dirname(exe), p["comm"])
            if os.path.exists(beside):
                return beside
        if exe and os.path.exists(exe):
            return exe
        first = p["argv"][0]
        return first if first.startswith("/") and os.path.exists(first) else None

    def _tool(self, name: str) -> str | None:
        if name in self.tools:
            return self.tools[name]
        return next((f"{d}/{name}" for d in PATH_DIRS if os.access(f"{d}/{name}", os.X_OK)), None)

    # -- containerd ------------------------------------------------------------------------

    def _record(self, kind: str, p: dict, **fields) -> dict:
        """One runtime's answer, empty but for what the process table says (RETURN runtime.runtimes[])."""
        return {
            "kind": kind, "pid": p["pid"], "binary": self._binary(p), "started": _iso(p["started"]),
            "started_epoch": p["started"], "version": None, "running": None, "running_source": None,
            "running_error": None, "files": None, "files_error": None, "files_dropped": {}, "loaded_files": [],
            "changed_since_start": [],
            **fields,
        }

    def containerd(self, p: dict) -> dict:
        argv = p["argv"]
        flagged = config_flag(argv[1:])
        address = None
        for i, a in enumerate(argv[1:], 1):
            if a in ("-a", "--address") and i + 1 < len(argv):
                address = argv[i + 1]
            elif a.startswith(("--address=", "-a=")):
                address = a.split("=", 1)[1]
        r = self._record("containerd", p, argv=argv, config=flagged or CONTAINERD_ROOT,
                         config_from="--config" if flagged else "default", address=address)
        binary = r["binary"]
        if not binary:
            r["files_error"] = f"the binary of containerd (pid {p['pid']}) cannot be found ({p['exe'] or argv[0]})"
            return r
        rc, out, err = self.run([binary, "--version"])
        r["version"] = out.strip() if rc == 0 and out.strip() else None
        rc, out, err = self.run([binary, "--config", r["config"], "config", "dump"])
        if rc != 0:
            r["files_error"] = (f"`{binary} --config {r['config']} config dump` failed: "
                                f"{(err or out).strip()[-300:] or f'exit {rc}'}")
        elif _toml is None:
            r["files_error"] = "this Python has no TOML parser (tomllib needs Python 3.11; tomli is not installed)"
        else:
            try:
                doc = _toml.loads(out)
            except ValueError as exc:
                r["files_error"] = f"containerd's config dump does not parse as TOML ({exc})"
            else:
                r["files"] = cri_from_dump(doc)
                if r["files"] is None:
                    r["files_error"] = "containerd's config dump has no CRI plugin section"
                grpc = doc.get("grpc") if isinstance(doc.get("grpc"), dict) else {}
                r["address"] = r["address"] or grpc.get("address") or None
                r["loaded_files"] = self._loaded(r["config"], (r["files"] or {}).get("imports") or [])
        r["address"] = r["address"] or DEFAULT_ADDRESS
        self._running(r)
        if p["started"] is not None:
            for f in r["loaded_files"]:
                try:
                    mtime = os.stat(f).st_mtime
                except OSError:
                    continue
                if mtime > p["started"]:
                    r["changed_since_start"].append({"file": f, "changed": _iso(mtime)})
        return r

    def _loaded(self, config: str, imports: list[str]) -> list[str]:
        """The files containerd reads: its config and its imports (each glob expanded as
        containerd does, relative ones from the config's directory), in order, once."""
        out = [config]
        try:
            fs = _Root("/")
        except NodeRootError:
            return out
        for imp in imports:
            path = imp if imp.startswith("/") else os.path.join(os.path.dirname(config), imp)
            try:
                found = go_glob(fs, path) if "*" in path else [path]
            except (BadPattern, OSError):
                continue
            for f in found:
                if f not in out and os.path.isfile(f):
                    out.append(f)
        return out

    def _running(self, r: dict) -> None:
        """What the daemon runs with now: crictl info, else its CRI plugin's start-up log."""
        endpoint = f"unix://{r['address']}"
        tried = []
        for argv in self._crictl(r):
            rc, out, err = self.run([*argv, "--runtime-endpoint", endpoint, "info"])
            if rc == 0:
                cri = cri_from_crictl(out)
                if cri is not None:
                    r["running"], r["running_source"] = cri, f"`{' '.join(argv)} info` on {endpoint}"
                    return
                tried.append(f"`{' '.join(argv)} info` gave no CRI configuration")
            else:
                tried.append(f"`{' '.join(argv)} info` failed: {(err or out).strip()[-200:] or f'exit {rc}'}")
        if not tried:
            tried.append("crictl is not installed (looked on $PATH, k3s crictl, " + RKE2_CRICTL + ")")
        journalctl = self._tool("journalctl")
        if journalctl and r["started_epoch"] is not None:
            since = f"@{int(r['started_epoch']) - 1}"
            rc, out, err = self.run([journalctl, f"_PID={r['pid']}", "--since", since, "-o", "cat", "--no-pager"])
            if rc == 0:
                cri = cri_from_log(out.splitlines())
                if cri is not None:
                    r["running"], r["running_source"] = cri, f"containerd's own start-up log (journal of pid {r['pid']})"
                    return
                tried.append(f"the journal of pid {r['pid']} has no CRI plugin start-up line")
            else:
                tried.append(f"journalctl failed: {(err or out).strip()[-200:] or f'exit {rc}'}")
        else:
            tried.append("no journalctl, or the process start time is unknown")
        r["running_error"] = "; ".join(tried)

    def _crictl(self, r: dict) -> list[list[str]]:
        out = []
        crictl = self._tool("crictl")
        if crictl:
            out.append([crictl])
        binary = r["binary"] or ""
        k3s = self._tool("k3s") or (os.path.join(os.path.dirname(binary), "k3s") if "/rancher/k3s/" in binary else None)
        if k3s and os.access(k3s, os.X_OK):
            out.append([k3s, "crictl"])
        rke2 = self._tool("rke2-crictl") if "rke2-crictl" in self.tools else RKE2_CRICTL
        if rke2 and os.access(rke2, os.X_OK):
            out.append([rke2])
        return out

    # -- CRI-O ------------------------------------------------------------------------------

    def crio(self, p: dict) -> dict:
        r = self._record("cri-o", p, argv=p["argv"], config=None, config_from=None, address=CRIO_ADDRESS)
        binary = r["binary"]
        if not binary:
            r["files_error"] = f"the binary of crio (pid {p['pid']}) cannot be found"
            return r
        rc, out, _err = self.run([binary, "--version"])
        r["version"] = crio_version(out) if rc == 0 else None
        flags = p["argv"][1:]
        r["config"] = next((flags[i + 1] for i, a in enumerate(flags[:-1]) if a in ("--config", "-c")), None)
        r["config_from"] = "--config" if r["config"] else "default"
        for argv, key, source in (([binary, "status", "config"], "running", "`crio status config` (the running daemon)"),
                                  ([binary, *flags, "config"], "files", "`crio config` with the daemon's flags")):
            rc, out, err = self.run(argv)
            if rc != 0:
                r[f"{key}_error"] = f"`{' '.join(argv)}` failed: {(err or out).strip()[-200:] or f'exit {rc}'}"
                continue
            try:
                doc = _toml.loads(out) if _toml else None
            except ValueError as exc:
                r[f"{key}_error"] = f"`{' '.join(argv)}` does not parse as TOML ({exc})"
                continue
            r[key] = crio_cri(doc or {})
            if key == "running":
                r["running_source"] = source
        if r["files"] is not None:
            # `crio config` does not validate: drop what the daemon drops as it starts, so the files'
            # answer is what a restart would run (a handler it dropped is no change since its start)
            r["files"], r["files_dropped"] = self._crio_validated(p["pid"], r["files"])
        return r

    def _crio_validated(self, pid: int, cri: dict) -> tuple[dict, dict]:
        """``cri`` without the handlers CRI-O drops as it starts: a binary (``runtime_path``, else
        the handler's name on $PATH) that does not exist, looked up in the daemon's own root
        (``/proc/<pid>/root``). The default handler stays: CRI-O refuses to start without it."""
        root = f"{self.proc}/{pid}/root"
        if not os.path.isdir(root):
            return cri, {}
        kept, dropped = {}, {}
        for name, binary in cri["handlers"].items():
            candidates = [binary] if "/" in binary else [f"{d}/{binary}" for d in PATH_DIRS]
            if name == cri["default_runtime"] or any(os.path.exists(root + c) for c in candidates):
                kept[name] = binary
            else:
                dropped[name] = binary
        return {**cri, "handlers": kept}, dropped

    def run_all(self) -> dict:
        runtimes = []
        for p in self.processes():
            runtimes.append(self.containerd(p) if p["comm"] == "containerd" else self.crio(p))
        for r in runtimes:
            r["judged"] = judge_cri(r["running"] if r["running"] is not None else r["files"])
        if not runtimes:
            self.notes.append("no containerd or CRI-O process runs on this node (looked for comm containerd and "
                              "crio in /proc): only the files can be judged")
        return {"runtimes": runtimes, "notes": self.notes, "findings": live_findings(runtimes)}


def live_findings(runtimes: list[dict]) -> list[dict]:
    """The runtime against itself: what runs now against what its files say now."""
    out = []
    for r in runtimes:
        who = f"{r['kind']} (pid {r['pid']}, started {r['started'] or 'at an unknown time'})"
        changed = ", ".join(f"{c['file']} (changed {c['changed']})" for c in r["changed_since_start"])
        if r["running"] is not None and r["files"] is not None:
            diff = differences(r["running"], r["files"])
            if diff:
                out.append(finding(
                    UNVERIFIABLE, "runtime-not-restarted", r["config"] or r["kind"],
                    f"{who} runs a CRI configuration its files no longer say: running ({r['running_source']}) "
                    f"{describe(r['running'])}; files now (config dump) {describe(r['files'])}: "
                    f"{'; '.join(diff)}. {r['kind']} was not restarted since "
                    f"{changed or 'its files changed'}. The running configuration is what pods get now, and "
                    "the files are what they get after the next restart: GPU isolation cannot be judged from the "
                    "files alone.",
                    f"restart {r['kind']} on the node (systemctl restart {'crio' if r['kind'] == 'cri-o' else 'containerd'}) "
                    "so it runs what its files say, then run the check again",
                ))
        elif r["running"] is None and r["changed_since_start"]:
            out.append(finding(
                UNVERIFIABLE, "runtime-not-restarted", r["changed_since_start"][0]["file"],
                f"{who}: {changed} changed after it started, and what it runs now cannot be asked "
                f"({r['running_error']}): the files may not be what runs.",
                f"restart {r['kind']} on the node so it runs its files, or install crictl, then run the check again",
            ))
    return out


# --- the runtime against the file judge ---------------------------------------------------------

def _file_configs(node: dict, live: dict) -> list[dict]:
    """The file judge's configurations in effect for the running containerd ``live``: those whose
    root file is its config, else every containerd one; its own release family first."""
    configs = [c for c in node.get("runtime_configs") or [] if c.get("family")]
    same = [c for c in configs if c.get("root") == live["config"]]
    configs = same or [c for c in configs if c.get("runtime") == "containerd"]
    return [c for c in configs if c.get("serves_cri")]


def _crio_disagrees(node: dict, r: dict, who: str, answer: dict, source: str, findings: list) -> bool:
    """The file judge's CRI-O configuration against CRI-O's own reading of the same files (its
    ``crio config``, validated as it starts), else what it runs: a ``runtime-disagrees`` finding
    when they differ (the runtime's answer wins). True when they do."""
    configs = [c for c in node.get("runtime_configs") or [] if c.get("rule") == RULE_CRIO and c.get("serves_cri")]
    reading, read_by = (r["files"], "`crio config`") if r["files"] is not None else (answer, source)
    if not configs:
        findings.append(finding(
            UNVERIFIABLE, "runtime-disagrees", r.get("config") or CRIO_ROOT,
            f"{who} serves CRI ({source}: {describe(answer)}), but the file judge found no CRI-O configuration it "
            "would start with. The runtime's answer wins.",
            "check the node's CRI-O configuration (crio config; crio status config)",
        ))
        return True
    for c in configs:
        diff = differences(reading, _as_cri(c))
        if diff:
            findings.append(finding(
                UNVERIFIABLE, "runtime-disagrees", r.get("config") or c["root"],
                f"{who} answers ({read_by}) {describe(reading)}; the file judge read {c['root']} ({c.get('rule')}) as "
                f"{describe(_as_cri(c))}: {'; '.join(diff)}. The runtime's answer wins: it is what runs.",
                "check the files CRI-O loads against what it runs (crio config; crio status config); restart crio if "
                "its files changed since it started",
            ))
            return True
    return False


def _as_cri(c: dict) -> dict:
    return {"default_runtime": c.get("default_runtime"),
            "handlers": {n: h.get("binary") for n, h in (c.get("handlers") or {}).items()}}


def _mounted(path: str, runtime_paths: dict) -> bool:
    return path in (runtime_paths.get("files") or []) or any(
        path.startswith(d.rstrip("/") + "/") for d in runtime_paths.get("dirs") or [])


def reconcile(node: dict, live: dict, runtime_paths: dict | None = None) -> dict:
    """The file judge's node result (``verify_node_root``) with the runtime's own answer
    (``Probe.run_all``) folded in: its findings and notes, a finding for every disagreement
    naming both sides (the runtime's answer wins), a readiness finding for a running
    configuration outside what ``bcd_container_runtime`` mounts, ``live`` (what runs) and
    ``source``: ``both`` (they agree), ``runtime`` (they disagree: the runtime's answer decided)
    or ``files`` (the runtime could not be asked)."""
    out = dict(node)
    findings = list(node.get("findings") or [])
    mount = list(node.get("runtime_mount") or [])
    notes = list(node.get("notes") or [])
    runtimes = [r for r in live.get("runtimes") or [] if isinstance(r, dict)]
    own = list(live.get("findings") or [])
    findings.extend(own)
    notes.extend(f"runtime: {n}" for n in live.get("notes") or [])
    disagree = bool(own)
    asked = False
    handlers: dict[str, dict] = {}
    for r in runtimes:
        who = f"{r['kind']} (pid {r['pid']}, {r.get('version') or 'version unknown'})"
        answer = r["running"] if r["running"] is not None else r["files"]
        source = r["running_source"] if r["running"] is not None else "its config dump"
        if r["running"] is None:
            notes.append(f"runtime: what {who} runs now could not be asked ({r['running_error']}); "
                         "its config dump (what its files say now) stands for it")
        if answer is None:
            notes.append(f"runtime: {who} could not be asked: {r['files_error'] or r['running_error']}")
            continue
        asked = True
        if r["running"] is not None:
            handlers.update({n: {"binary": b, "by": f"{who}, {source}"} for n, b in r["running"]["handlers"].items()})
        if r["kind"] == "cri-o":
            disagree = _crio_disagrees(node, r, who, answer, source, findings) or disagree
            continue
        if r["kind"] != "containerd":
            continue
        judged = judge_cri(answer)
        notes.append(f"runtime: {who} runs with --config {r['config']} ({r['config_from']}); {source}: "
                     f"{describe(answer)}; NVIDIA handlers: {', '.join(judged['nvidia_handlers']) or 'none'}"
                     + ("; the default runtime is NVIDIA's" if judged["default_is_nvidia"] else ""))
        files_config = node.get("containerd_config")
        roots = {c.get("root") for c in node.get("runtime_configs") or []}
        if files_config and files_config != r["config"] and r["config"] not in roots:
            disagree = True
            findings.append(finding(
                UNVERIFIABLE, "runtime-config-path", r["config"],
                f"{who} runs with --config {r['config']} (its command line, {r['config_from']}), but the files "
                f"(containerd.service and its drop-ins) say {files_config}: the file judge read a configuration "
                "containerd does not run. The runtime's answer wins.",
                "make containerd.service start containerd with the file it should run (systemctl cat containerd), "
                "then systemctl daemon-reload and restart containerd; or restart containerd so it runs what its unit says",
            ))
        configs = _file_configs(node, r)
        if configs:
            # the file judge's reading for this release family, else each family it judged
            family = family_of(parse_version(r.get("version") or ""))
            mine = [c for c in configs if c.get("family") == family] or configs
            # the file judge against containerd's own reading of the same files (running against
            # files is runtime-not-restarted, above)
            reading, read_by = (r["files"], "its config dump") if r["files"] is not None else (answer, source)
            for c in mine:
                diff = differences(reading, _as_cri(c))
                if diff:
                    disagree = True
                    findings.append(finding(
                        UNVERIFIABLE, "runtime-disagrees", r["config"],
                        f"{who} answers ({read_by}) {describe(reading)}; the file judge read {c['root']} "
                        f"({c.get('rule')}) as {describe(_as_cri(c))}: {'; '.join(diff)}. The runtime's answer "
                        "wins: it is what runs.",
                        "check the files containerd loads against what it runs (containerd config dump; crictl info); "
                        "restart containerd if its files changed since it started",
                    ))
                    break
        elif r["files"] is not None:
            disagree = True
            findings.append(finding(
                UNVERIFIABLE, "runtime-disagrees", r["config"],
                f"{who} serves CRI ({source}: {describe(answer)}), but the file judge found no containerd "
                f"configuration serving CRI in its files (it read {files_config or 'none'}). The runtime's answer wins.",
                "check the node's containerd configuration (containerd config dump)",
            ))
        # bcd's pod must see the files containerd really loads
        if runtime_paths and (runtime_paths.get("files") or runtime_paths.get("dirs")):
            missing = [f for f in r["loaded_files"] or [r["config"]] if not _mounted(f, runtime_paths)]
            judged_already = any(f.get("check") == "runtime-config-not-mounted" for f in mount)
            if missing and not judged_already:
                disagree = disagree or r["config_from"] == "--config"
                files = [r["config"]] + [f for f in r["loaded_files"] if f != r["config"]]
                mount.append(finding(
                    NOT_READY, "runtime-config-not-mounted", missing[0],
                    f"{who} runs with --config {r['config']} and loads {', '.join(files)}, but "
                    f"bcd_container_runtime mounts {', '.join((runtime_paths.get('files') or []) + (runtime_paths.get('dirs') or []))} "
                    f"into bcd's pod, not {', '.join(missing)}: bcd's own check on the node would judge files "
                    "containerd does not run with.",
                    "set bcd_container_runtime: {files: [" + ", ".join(files) + "], dirs: []} (the files the "
                    "running containerd loads)",
                ))
            elif missing:
                # the file judge found it in the unit; the running daemon confirms it
                mount = [{**f, "message": f"{f['message']} The running {who} confirms it: it runs with --config "
                                          f"{r['config']}."}
                         if f.get("check") == "runtime-config-not-mounted" else f for f in mount]
    out["findings"] = findings
    out["runtime_mount"] = mount
    out["notes"] = notes
    out["live"] = {"runtimes": runtimes, "running_handlers": handlers if handlers else None}
    out["source"] = (SOURCE_RUNTIME if disagree else SOURCE_BOTH) if asked else SOURCE_FILES
    out["verdict"] = verdict_of(findings)
    return out
