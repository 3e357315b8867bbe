"""make bench: our playbooks against the floor, side by side, on the sandbox.

For each size in ``BENCH_NODES`` (default ``10 100 1000``) it brings the bench's own sandbox up
(``BENCH_SANDBOX_DIR``, default ``<repo>/.sandbox-bench``, with the audit log on) at that many
GPU nodes (growing it between sizes) and measures, ``BENCH_RUNS`` times each (default 3),
ours and the floor in turn:

- render:  ``render.yml`` against ``bench/floor/render.sh`` (the same renderer without Ansible);
- adopt:   ``adopt-cluster.yml`` against ``bench/floor/adopt.sh`` (kubectl apply of the same
  rendered manifests and the Secret, rollout status, nodes.list polled with curl, revoke);
  before each run the bcd namespace is deleted (waited until gone) and the control-plane
  emulator forgets the nodes, so every run adopts the whole cluster;
- rollout: ``rollout.yml`` to a new digest against ``bench/floor/rollout.sh`` (kubectl set image,
  rollout status), both with maxUnavailable ``BENCH_MAX_UNAVAILABLE`` (default 10%); ours also
  beside its stage plan's own limit, stages x (slowest pod + soak), from its report and the
  pods' timestamps (``bench.stages``);
- rollout-down: ``rollout.yml`` to a new digest with ``BENCH_DOWN`` (default 5%) of the GPU nodes
  NotReady (``Sandbox.set_node_not_ready``: a stopped kubelet), beside its stage plan's limit:
  it must leave exactly those nodes behind and roll the rest; then the nodes return and a second
  run (``return``) must leave the whole fleet on the new digest. The floor, with the same nodes
  down, is given as long as ours took (``TIMEOUT``): whether ``kubectl rollout status`` finished
  in that time is reported beside it.

Before the sizes, ``demo``: ``make demo`` warm (``BENCH_DEMO_CMD``), ``BENCH_RUNS`` times, each
from a stopped sandbox (its own directory ``BENCH_DEMO_DIR``, default ``<repo>/.sandbox-bench-demo``,
brought down before and after each run) with the sandbox's binaries cached (``python -m sandbox
build`` first, not measured) and the venv present (``make bench`` runs ``make setup`` first);
target under 60 s, reported, not asserted; no floor.

With ``BENCH_MITOGEN=1`` (the default when the ``mitogen`` package is installed) every point is also
run with our playbooks under mitogen's strategy (``ANSIBLE_STRATEGY=mitogen_linear``, the opt-in
persistent interpreter), reported beside plain Ansible.

Per run: wall time, the peak memory of the process tree (/proc), the control-plane requests
(the emulator's counters) and the Kubernetes API requests (the audit log; the emulator's own
requests left out). After the adopt runs, one poll of the node wait (bench/playbooks/poll.yml)
gives ours' control-plane requests per poll.

Writes ``bench/results/latest.json`` (the medians), ``bench/results/latest-runs.json`` (every
run), the run logs under ``bench/results/logs/``, and the table in ``docs/benchmarks.md``.
The sandbox is brought down at the end unless ``BENCH_KEEP=1``. With ``BENCH_MERGE=1`` the points
of the committed ``latest.json`` that this run did not measure are kept in it and in the table
(``BENCH_NODES=5000 BENCH_MERGE=1``: one size added to the earlier ones).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import counts, measure, report, stages

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
FLOOR = ROOT / "bench" / "floor"
NAMESPACE = "bcd-system"
DAEMONSET = "bcd"
SELECTOR = "nvidia.com/gpu.present=true"
REPORTING = ("adopting", "ready", "draining")
IMAGE_REPO = "registry.example.com/better-compute/bcd:0.1.0"
RUN_TIMEOUT = 3600.0
# render, adopt and rollout run at every size against the floor; demo (make demo warm) once, first.
SCENARIOS = ("render", "adopt", "rollout", "rollout-down", "demo")
SIZED = ("render", "adopt", "rollout", "rollout-down")
SOAK_FILE = ROOT / "inventories" / "sandbox" / "host_vars" / "sandbox.yml"
DEMO_TIMEOUT = 900.0


class BenchError(RuntimeError):
    pass


@dataclass
class Config:
    sizes: list[int]
    runs: int
    runs_at: dict[int, int]
    max_unavailable: str
    sandbox_dir: Path
    keep: bool
    floor_poll_interval: float
    profile: bool
    scenarios: list[str]
    mitogen: bool = False
    merge: bool = False
    demo_dir: Path | None = None
    demo_cmd: list[str] = field(default_factory=lambda: ["make", "demo"])
    down: str = "5%"

    def runs_for(self, size: int) -> int:
        """Runs per point at ``size`` nodes (BENCH_RUNS_AT, else BENCH_RUNS)."""
        return self.runs_at.get(size, self.runs)

    @classmethod
    def from_env(cls) -> Config:
        raw = os.environ.get("BENCH_NODES", "10 100 1000").replace(",", " ").split()
        try:
            sizes = sorted({int(s) for s in raw})
            runs = int(os.environ.get("BENCH_RUNS", "3"))
            # fewer runs at the largest sizes when time is short: BENCH_RUNS_AT="1000:1"
            runs_at = {int(k): int(v) for k, v in (item.split(":", 1) for item in
                                                   os.environ.get("BENCH_RUNS_AT", "").replace(",", " ").split())}
            interval = float(os.environ.get("BENCH_FLOOR_POLL_INTERVAL", "2"))
        except ValueError as exc:
            raise BenchError(f"BENCH_NODES, BENCH_RUNS, BENCH_RUNS_AT (size:runs ...), BENCH_FLOOR_POLL_INTERVAL: {exc}") from None
        if not sizes or sizes[0] < 1 or runs < 1 or any(v < 1 for v in runs_at.values()):
            raise BenchError("BENCH_NODES: one or more positive node counts; BENCH_RUNS: at least 1")
        mu = os.environ.get("BENCH_MAX_UNAVAILABLE", "10%")
        if not re.fullmatch(r"[1-9]\d*%?", mu):
            raise BenchError(f"BENCH_MAX_UNAVAILABLE: {mu!r} is not a count or a percentage")
        down = os.environ.get("BENCH_DOWN", "5%")
        if not re.fullmatch(r"[1-9]\d*%?", down):
            raise BenchError(f"BENCH_DOWN: {down!r} is not a count or a percentage")
        scenarios = os.environ.get("BENCH_SCENARIOS", " ".join(SCENARIOS)).split()
        mitogen = os.environ.get("BENCH_MITOGEN", "1" if mitogen_strategy_dir() else "0") in ("1", "true", "yes")
        if mitogen and not mitogen_strategy_dir():
            raise BenchError("BENCH_MITOGEN=1 needs the mitogen package (pip install -r requirements-dev.txt)")
        if not scenarios or set(scenarios) - set(SCENARIOS):
            raise BenchError(f"BENCH_SCENARIOS: {scenarios} (one or more of {', '.join(SCENARIOS)})")
        demo_cmd = shlex.split(os.environ.get("BENCH_DEMO_CMD", "make demo"))
        if not demo_cmd:
            raise BenchError("BENCH_DEMO_CMD: empty (default: make demo)")
        return cls(sizes=sizes, runs=runs, runs_at=runs_at, max_unavailable=mu,
                   sandbox_dir=Path(os.environ.get("BENCH_SANDBOX_DIR", ROOT / ".sandbox-bench")).resolve(),
                   keep=os.environ.get("BENCH_KEEP", "") in ("1", "true", "yes"), floor_poll_interval=interval,
                   profile=os.environ.get("BENCH_PROFILE", "1") not in ("0", "false", "no"), scenarios=scenarios,
                   mitogen=mitogen, merge=os.environ.get("BENCH_MERGE", "") in ("1", "true", "yes"),
                   demo_dir=Path(os.environ.get("BENCH_DEMO_DIR", ROOT / ".sandbox-bench-demo")).resolve(),
                   demo_cmd=demo_cmd, down=down)

    def down_count(self, size: int) -> int:
        """How many of ``size`` GPU nodes rollout-down holds NotReady (a percentage rounded up)."""
        if self.down.endswith("%"):
            return max(1, math.ceil(size * int(self.down[:-1]) / 100))
        return min(size, int(self.down))


def gate_timeout(size: int) -> tuple[str, ...]:
    """Extra vars of our rollout at ``size`` nodes: above 1,000, each stage's health gate may take
    0.2 s a node (1,000 s at 5,000) instead of the default 300 s. At 5,000 KWOK nodes on 2 cores a
    batch of 500 pods took longer than 300 s to start (KWOK and the join simulator share the cores
    with the API server), the gate failed and the rollout rolled back; the floor's
    ``kubectl rollout status`` has no such limit."""
    return ("-e", f"bcd_rollout_gate_timeout={max(300, size // 5)}") if size > 1000 else ()


def mitogen_strategy_dir() -> str | None:
    """Where the installed mitogen keeps its strategy plugins (ANSIBLE_STRATEGY_PLUGINS), or None."""
    try:
        import ansible_mitogen
    except ImportError:
        return None
    return str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")


@dataclass
class Run:
    """One measured run."""

    scenario: str
    nodes: int
    who: str  # ours | mitogen (ours under mitogen's strategy) | floor | return (rollout-down's second run)
    index: int
    seconds: float
    peak_rss_mb: float
    peak_pss_mb: float
    cp: dict
    kube: dict
    load: tuple[float, float]
    log: str
    extra: dict = field(default_factory=dict)


def say(msg: str) -> None:
    print(f"[{dt.datetime.now().strftime('%H:%M:%S')}] bench: {msg}", flush=True)


def digest_image(tag: str) -> str:
    return f"{IMAGE_REPO}@sha256:{hashlib.sha256(tag.encode()).hexdigest()}"


class Bench:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.sdir = cfg.sandbox_dir
        self.work = self.sdir / "bench"
        self.logs = RESULTS / "logs"
        self.runs: list[Run] = []
        self.probes: dict[int, dict] = {}
        self.started_at = dt.datetime.now(dt.UTC)
        self._admin = None
        self._cp = None

    # -- the sandbox ----------------------------------------------------------------------------

    def sandbox_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SANDBOX_DIR=str(self.sdir), SANDBOX_AUDIT="1", PYTHONUNBUFFERED="1")
        return env

    def sandbox_cmd(self, *args: str, check: bool = True) -> int:
        rc = subprocess.run([str(VENV_BIN / "python"), "-m", "sandbox", *args], cwd=ROOT, env=self.sandbox_env(),
                            check=False).returncode
        if check and rc != 0:
            raise BenchError(f"python -m sandbox {' '.join(args)} failed (exit {rc}); see its output above")
        return rc

    def gpu_nodes(self) -> list[str]:
        out = self.kubectl("get", "nodes", "-l", SELECTOR, "-o", "json")
        return sorted(n["metadata"]["name"] for n in json.loads(out)["items"])

    def sandbox_up(self, size: int) -> None:
        state = self.sdir / "state.json"
        if state.exists():
            have = json.loads(state.read_text()).get("gpu_nodes", 0)
            if have > size:
                say(f"{self.sdir} has {have} GPU nodes, more than {size}: bringing it down to start afresh")
                self.sandbox_cmd("down")
        say(f"sandbox up with {size} GPU nodes at {self.sdir} (audit log on)")
        self.sandbox_cmd("up", "--nodes", str(size))
        self._admin = self._cp = None
        got = len(self.gpu_nodes())
        if got != size:
            raise BenchError(f"the sandbox has {got} GPU nodes, not {size}")
        self.work.mkdir(exist_ok=True)
        cp = yaml.safe_load((self.sdir / "control-plane.yml").read_text())
        key_file = self.work / "api-key"
        key_file.touch(mode=0o600)
        key_file.chmod(0o600)
        key_file.write_text(cp["bcd_api_key"])
        self.cpvars = {k: v for k, v in cp.items() if k != "bcd_api_key"}
        self.server_version = json.loads(self.kubectl("version", "-o", "json")).get("serverVersion", {}).get("gitVersion")
        # The API server builds its OpenAPI document at the first request for it, which kubectl
        # apply makes to validate: at 5,000 nodes on a loaded machine that first build outlasted
        # kubectl's 32 s limit and failed the floor's run. Built once here, not measured.
        self.kubectl("get", "--raw", "/openapi/v2", timeout=600)
        self.ensure_manifests()

    def ensure_manifests(self) -> None:
        """The bcd_* variables (for the render floor) and the rendered manifests (for the adopt
        floor), made once with render.yml from the sandbox inventory; not measured."""
        vars_file, manifests = self.work / "bcd-vars.json", self.work / "bcd.json"
        if vars_file.exists() and manifests.exists():
            return
        for f in (vars_file, manifests):
            f.unlink(missing_ok=True)
        for argv in (["bench/playbooks/vars.yml", "-e", f"bench_vars_out={vars_file}"],
                     ["render.yml", "-e", f"bcd_render_out={manifests}"]):
            done = subprocess.run([str(VENV_BIN / "ansible-playbook"), *argv], cwd=ROOT, env=self.tool_env(),
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise BenchError(f"{argv[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        data = json.loads(vars_file.read_text())
        data["bcd_render_out"] = "-"  # render.yml requires it; the floor writes to BCD_RENDER_OUT
        vars_file.write_text(json.dumps(data))

    @property
    def admin(self):
        if self._admin is None:
            from sandbox.control_plane.admin import Admin

            self._admin = Admin.for_sandbox(self.sdir)
            self._admin.timeout = 900  # forgetting 1,000 nodes takes a while
        return self._admin

    @property
    def cp(self):
        if self._cp is None:
            import sys

            if str(ROOT / "collections") not in sys.path:
                sys.path.insert(0, str(ROOT / "collections"))
            from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import Client

            self._cp = Client(self.cpvars["bcd_control_plane_url"], api_key=(self.work / "api-key").read_text(),
                              ca_file=self.cpvars["bcd_control_plane_ca_file"])
        return self._cp

    def kubectl(self, *args: str, timeout: float = 900) -> str:
        kubectl = json.loads((self.sdir / "state.json").read_text())["binaries"]["kubectl"]
        done = subprocess.run([kubectl, f"--kubeconfig={self.sdir / 'kubeconfig'}", *args], capture_output=True,
                              text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # -- environments ---------------------------------------------------------------------------

    def tool_env(self) -> dict[str, str]:
        kubectl_dir = str(Path(json.loads((self.sdir / "state.json").read_text())["binaries"]["kubectl"]).parent)
        env = dict(os.environ)
        env.update({
            "SANDBOX_DIR": str(self.sdir), "KUBECONFIG": str(self.sdir / "kubeconfig"),
            "PATH": os.pathsep.join([str(VENV_BIN), kubectl_dir, env.get("PATH", "")]),
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        })
        if self.cfg.profile:
            env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks,bcd.kubernetes.left_behind"
            env["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
        return env

    def floor_env(self, **extra: str) -> dict[str, str]:
        env = self.tool_env()
        env.update({
            "BCD_CP_URL": self.cpvars["bcd_control_plane_url"], "BCD_CP_CA": self.cpvars["bcd_control_plane_ca_file"],
            "BCD_API_KEY_FILE": str(self.work / "api-key"), "BCD_TENANT": self.cpvars["bcd_tenant"],
            "BCD_POOL": self.cpvars["bcd_pool"], "BCD_SELECTOR": SELECTOR, "BCD_NAMESPACE": NAMESPACE,
            "BCD_NAME": DAEMONSET, "POLL_INTERVAL": f"{self.cfg.floor_poll_interval:g}", "PYTHON": str(VENV_BIN / "python"),
        })
        env.update(extra)
        return env

    # -- one measured run -----------------------------------------------------------------------

    def measured(self, scenario: str, size: int, who: str, index: int, argv: list[str], env: dict[str, str],
                 may_fail: bool = False) -> Run:
        """One run, timed and counted; a failed run stops the bench unless ``may_fail`` (then its
        exit status is kept in ``extra["returncode"]``)."""
        audit = counts.AuditLog(self.sdir / "logs" / "audit.log")
        mark = audit.mark()
        self.admin.reset_counters()
        log = self.logs / f"{size}-{scenario}-{who}-{index}.log"
        m = measure.run(argv, env, ROOT, RUN_TIMEOUT, log)
        cp = counts.cp_requests(self.admin.counters())
        kube = audit.requests(mark)
        if m.returncode != 0 and not may_fail:
            tail = "\n".join((m.stdout + m.stderr).strip().splitlines()[-25:])
            raise BenchError(f"{scenario} {who} run {index} at {size} nodes failed (exit {m.returncode}); log {log}:\n{tail}")
        run = Run(scenario, size, who, index, round(m.seconds, 2), round(m.peak_rss_mb, 1), round(m.peak_pss_mb, 1),
                  cp, kube, m.load, str(log.relative_to(ROOT)))
        run.extra["cpu_s"] = round(m.cpu_s, 1)
        run.extra["returncode"] = m.returncode
        polls = re.search(r"after (\d+) poll", m.stdout)
        if polls:
            run.extra["polls"] = int(polls.group(1))
        recap = m.stdout.split("TASKS RECAP", 1)
        if len(recap) == 2:
            lines = [ln for ln in recap[1].splitlines() if re.search(r" -+ +\d+\.\d+s$", ln)]
            run.extra["slowest_tasks"] = lines[:12]
        self.runs.append(run)
        say(f"{scenario:<7} {size:>5} nodes  {who:<5} #{index}: {run.seconds:7.1f}s  peak RSS {run.peak_rss_mb:6.1f} MB"
            f"  cp {cp['total']:>4}  kube {kube['total']:>5}  CPU {m.cpu_s:6.1f}s  (load {m.load[0]:.1f} -> {m.load[1]:.1f})")
        return run

    def playbook(self, scenario: str, size: int, index: int, playbook: str, *args: str, who: str = "ours") -> Run:
        argv = [str(VENV_BIN / "ansible-playbook"), playbook, *args]
        env = self.tool_env()
        if who == "mitogen":
            env.update({"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_STRATEGY_PLUGINS": mitogen_strategy_dir()})
        return self.measured(scenario, size, who, index, argv, env)

    def ours(self) -> tuple[str, ...]:
        """Who runs our playbooks: plain Ansible, and mitogen's strategy when BENCH_MITOGEN."""
        return ("ours", "mitogen") if self.cfg.mitogen else ("ours",)

    def floor(self, scenario: str, size: int, index: int, script: str, may_fail: bool = False, **env: str) -> Run:
        return self.measured(scenario, size, "floor", index, ["bash", str(FLOOR / script)], self.floor_env(**env),
                             may_fail=may_fail)

    # -- states ---------------------------------------------------------------------------------

    def reset_adoption(self) -> None:
        """No bcd namespace (waited until gone), no unrevoked token and no node known to the control plane."""
        from sandbox.api import Sandbox

        forgotten = Sandbox(self.sdir).unadopt(self.cp, self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"],
                                               namespace=NAMESPACE, timeout=900, admin=self.admin)
        # the control plane must not know any selected Node any more
        left = [n for n in self.cp.list_nodes(self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"])]
        if left:
            raise BenchError(f"the control plane still knows {len(left)} node(s) after forget ({forgotten[:3]}...)")
        time.sleep(2)  # let the API server and KWOK settle after the deletion

    def wait_fleet(self, size: int, image: str | None = None, timeout: float = 900) -> None:
        """Wait until the DaemonSet has rolled out (to ``image``) and every selected Node reports."""
        deadline = time.monotonic() + timeout
        nodes = set(self.gpu_nodes())
        while True:
            ds = json.loads(self.kubectl("-n", NAMESPACE, "get", "daemonset", DAEMONSET, "-o", "json"))
            st = ds.get("status") or {}
            want = st.get("desiredNumberScheduled", -1)
            rolled = (st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                      and st.get("updatedNumberScheduled", 0) >= want and st.get("numberAvailable", 0) >= want)
            current = ds["spec"]["template"]["spec"]["containers"][0]["image"]
            cp_nodes = {n["hostname"]: n for n in self.cp.list_nodes(self.cpvars["bcd_tenant"], self.cpvars["bcd_pool"])}
            reporting = sum(1 for n in nodes if (cp_nodes.get(n) or {}).get("state") in REPORTING)
            if rolled and want == size and reporting == size and (image is None or current == image):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"the fleet did not settle within {timeout:g}s: DaemonSet {st}, {reporting} of {size} report")
            time.sleep(2)

    # -- scenarios ------------------------------------------------------------------------------

    def render_phase(self, size: int) -> None:
        for i in range(1, self.cfg.runs_for(size) + 1):
            ours_out = self.work / f"render-{size}-ours-{i}.json"
            floor_out = self.work / f"render-{size}-floor-{i}.json"
            mitogen_out = self.work / f"render-{size}-mitogen-{i}.json"
            for f in (ours_out, floor_out, mitogen_out):
                f.unlink(missing_ok=True)
            self.playbook("render", size, i, "render.yml", "-e", f"bcd_render_out={ours_out}")
            if self.cfg.mitogen:
                self.playbook("render", size, i, "render.yml", "-e", f"bcd_render_out={mitogen_out}", who="mitogen")
                if mitogen_out.read_bytes() != ours_out.read_bytes():
                    raise BenchError(f"render.yml under mitogen wrote {mitogen_out}, which differs from {ours_out}")
            self.floor("render", size, i, "render.sh", BCD_VARS=str(self.work / "bcd-vars.json"),
                       BCD_RENDER_OUT=str(floor_out))
            if ours_out.read_bytes() != floor_out.read_bytes():
                raise BenchError(f"the floor's render {floor_out} differs from render.yml's {ours_out}")
            if ours_out.read_bytes() != (self.work / "bcd.json").read_bytes():
                raise BenchError(f"render.yml's {ours_out} differs from the manifests the adopt floor applies")

    def adopt_phase(self, size: int) -> None:
        manifests = self.work / "bcd.json"
        for i in range(1, self.cfg.runs_for(size) + 1):
            self.reset_adoption()
            self.floor("adopt", size, i, "adopt.sh", BCD_MANIFESTS=str(manifests))
            for who in self.ours():
                self.reset_adoption()
                self.playbook("adopt", size, i, "adopt-cluster.yml", who=who)
        self.wait_fleet(size)
        self.poll_probe(size)

    def poll_probe(self, size: int) -> None:
        """One poll of ours' node wait on a cluster where every node reports: its control-plane requests."""
        self.admin.reset_counters()
        done = subprocess.run([str(VENV_BIN / "ansible-playbook"), "bench/playbooks/poll.yml"], cwd=ROOT,
                              env=self.tool_env(), capture_output=True, text=True, check=False)
        got = re.search(r"BENCH_POLL polls=(-?\d+) cp_requests=(-?\d+) reporting=(\d+) selected=(\d+)", done.stdout)
        cp = counts.cp_requests(self.admin.counters())
        if done.returncode != 0 or not got:
            raise BenchError(f"bench/playbooks/poll.yml failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        polls = int(got.group(1))
        per_poll = cp["by_procedure"].get("nodes.list", 0) / max(polls, 1)
        self.probes[size] = {"polls": polls, "cp": cp, "per_poll": per_poll,
                             "reported_by_action": int(got.group(2)), "reporting": int(got.group(3))}
        say(f"poll probe at {size} nodes: {polls} poll(s), {cp['by_procedure']} -> {per_poll:g} nodes.list per poll "
            f"(target at most {math.ceil(size / 500) + 1})")

    def rollout_phase(self, size: int) -> None:
        if "adopt" not in self.cfg.scenarios:
            raise BenchError("the rollout scenario needs the adopt scenario before it (BENCH_SCENARIOS)")
        mu = self.cfg.max_unavailable
        for i in range(1, self.cfg.runs_for(size) + 1):
            self.wait_fleet(size)
            for who in self.ours():
                image = digest_image(f"bench-{size}-{who}-{i}-{time.time_ns()}")
                out = self.work / f"rollout-{size}-{who}-{i}.json"
                run = self.playbook("rollout", size, i, "rollout.yml", "-e", f"bcd_image={image}",
                                    "-e", f"bcd_rollout_max_unavailable={mu}", "-e", f"bcd_report_out={out}",
                                    *gate_timeout(size), who=who)
                self.wait_fleet(size, image)
                self.judge_stages(run, out, image)
            image = digest_image(f"bench-{size}-floor-{i}-{time.time_ns()}")
            self.floor("rollout", size, i, "rollout.sh", BCD_IMAGE=image, MAX_UNAVAILABLE=mu)
            self.wait_fleet(size, image)

    def soak_s(self) -> float:
        """``bcd_rollout_soak`` of the sandbox inventory, in seconds (``5s``, ``2m``, ``30``)."""
        raw = str(yaml.safe_load(SOAK_FILE.read_text()).get("bcd_rollout_soak", "30s"))
        got = re.fullmatch(r"(\d+)([sm]?)", raw.strip())
        if not got:
            raise BenchError(f"{SOAK_FILE}: bcd_rollout_soak {raw!r} is not whole seconds or minutes")
        return float(got.group(1)) * (60 if got.group(2) == "m" else 1)

    def bcd_pods(self) -> list[dict]:
        return json.loads(self.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json"))["items"]

    def judge_stages(self, run: Run, report_file: Path, image: str) -> dict:
        """Keep, in ``run.extra["stage_limit"]``, the stage plan's own limit of that rollout."""
        rep = json.loads(report_file.read_text())
        try:
            limit = stages.stage_limit(rep, self.bcd_pods(), image, self.soak_s())
        except ValueError as exc:
            raise BenchError(f"{run.scenario} {run.who} run {run.index} at {run.nodes} nodes: {exc}") from None
        run.extra["stage_limit"] = limit
        run.extra["result"] = rep.get("result")
        say(f"{run.scenario:<7} {run.nodes:>5} nodes  {run.who:<5} #{run.index}: stage plan limit {limit['limit_s']:.1f}s "
            f"({limit['stages']} stages x ({limit['slowest_pod_s']:.0f}s slowest pod + {limit['soak_s']:.0f}s soak)), "
            f"ours/limit {run.seconds / limit['limit_s']:.2f}" if limit["limit_s"] else "no stage rolled a node")
        return rep

    def wait_rolled(self, image: str, nodes: set[str], timeout: float = 900) -> None:
        """Wait until each of ``nodes`` runs a Ready bcd pod on ``image``."""
        deadline = time.monotonic() + timeout
        while True:
            on = {p["spec"].get("nodeName") for p in self.bcd_pods()
                  if p["spec"]["containers"][0]["image"] == image and stages._ready_at(p)}
            missing = nodes - on
            if not missing:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{len(missing)} node(s) not on {image} within {timeout:g}s: {sorted(missing)[:5]}")
            time.sleep(2)

    def rollout_down_phase(self, size: int) -> None:
        """Our rollout with ``BENCH_DOWN`` of the GPU nodes NotReady, then the run after they return."""
        if "adopt" not in self.cfg.scenarios:
            raise BenchError("the rollout-down scenario needs the adopt scenario before it (BENCH_SCENARIOS)")
        from sandbox.api import Sandbox

        sb = Sandbox(self.sdir)
        mu = self.cfg.max_unavailable
        for i in range(1, self.cfg.runs_for(size) + 1):
            self.wait_fleet(size)
            nodes = self.gpu_nodes()
            count = self.cfg.down_count(size)
            # spread over the fleet, as failures are: every (size / count)-th node
            held = {nodes[(k * len(nodes)) // count] for k in range(count)}
            image = digest_image(f"bench-{size}-down-{i}-{time.time_ns()}")
            out = self.work / f"rollout-down-{size}-{i}.json"
            for name in sorted(held):
                sb.set_node_not_ready(name)
            try:
                run = self.playbook("rollout-down", size, i, "rollout.yml", "-e", f"bcd_image={image}",
                                    "-e", f"bcd_rollout_max_unavailable={mu}", "-e", f"bcd_report_out={out}",
                                    *gate_timeout(size))
                self.wait_rolled(image, set(nodes) - held)
                rep = self.judge_stages(run, out, image)
                behind = {b["node"] for b in rep.get("left_behind") or []}
                if rep.get("result") != "succeeded" or behind != held:
                    raise BenchError(f"rollout-down run {i} at {size} nodes: result {rep.get('result')}, left behind "
                                     f"{len(behind)} node(s), not the {len(held)} held down ({sorted(behind ^ held)[:5]} differ)")
                run.extra["down"] = len(held)
            finally:
                for name in sorted(held):
                    sb.release_node(name, timeout=300)
            # back: the next run finds every node on the new digest (rolling what is left)
            back = self.playbook("rollout-down", size, i, "rollout.yml", "-e", f"bcd_image={image}",
                                 "-e", f"bcd_rollout_max_unavailable={mu}", *gate_timeout(size), who="return")
            self.wait_fleet(size, image)
            back.extra["down"] = len(held)
            # the floor with the same nodes down, given as long as ours took: kubectl rollout status
            # waits for every node, the down ones included
            floor_image = digest_image(f"bench-{size}-down-floor-{i}-{time.time_ns()}")
            for name in sorted(held):
                sb.set_node_not_ready(name)
            try:
                floor = self.floor("rollout-down", size, i, "rollout.sh", may_fail=True, BCD_IMAGE=floor_image,
                                   MAX_UNAVAILABLE=mu, TIMEOUT=str(max(1, math.ceil(run.seconds))))
                floor.extra["down"] = len(held)
                floor.extra["timeout_s"] = max(1, math.ceil(run.seconds))
            finally:
                for name in sorted(held):
                    sb.release_node(name, timeout=300)
            self.wait_fleet(size, floor_image)

    def demo_env(self) -> dict[str, str]:
        """What a user's shell has for ``make demo``, with the demo's own sandbox directory, and
        the timer callback, whose closing line gives adopt-cluster.yml's part of the time."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("SANDBOX_NODES", "SANDBOX_AUDIT", "KUBECONFIG", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        callbacks = ["ansible.posix.timer"] + (["ansible.posix.profile_tasks"] if self.cfg.profile else [])
        env.update({"SANDBOX_DIR": str(self.cfg.demo_dir), "PYTHONUNBUFFERED": "1", "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_CALLBACKS_ENABLED": ",".join(callbacks),
                    "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all"})
        return env

    def demo_down(self) -> None:
        rc = subprocess.run([str(VENV_BIN / "python"), "-m", "sandbox", "down"], cwd=ROOT, env=self.demo_env(),
                            capture_output=True, text=True, check=False)
        if rc.returncode != 0:
            raise BenchError(f"python -m sandbox down ({self.cfg.demo_dir}) failed: {rc.stdout[-1000:]}{rc.stderr[-1000:]}")

    def demo_phase(self) -> None:
        """``make demo`` from a stopped sandbox, binaries cached, venv present: wall time per run."""
        say("demo: the sandbox's binaries (python -m sandbox build, not measured)")
        built = subprocess.run([str(VENV_BIN / "python"), "-m", "sandbox", "build"], cwd=ROOT, env=self.demo_env(),
                               capture_output=True, text=True, check=False)
        if built.returncode != 0:
            raise BenchError(f"python -m sandbox build failed:\n{built.stdout[-2000:]}{built.stderr[-2000:]}")
        for i in range(1, self.cfg.runs + 1):
            self.demo_down()
            log = self.logs / f"demo-ours-{i}.log"
            m = measure.run(self.cfg.demo_cmd, self.demo_env(), ROOT, DEMO_TIMEOUT, log)
            try:
                nodes = json.loads((self.cfg.demo_dir / "state.json").read_text()).get("gpu_nodes", 0)
            except (OSError, ValueError):
                nodes = 0
            self.demo_down()
            if m.returncode != 0:
                tail = "\n".join((m.stdout + m.stderr).strip().splitlines()[-25:])
                raise BenchError(f"demo run {i} ({' '.join(self.cfg.demo_cmd)}) failed (exit {m.returncode}); log {log}:\n{tail}")
            # ansible.posix.timer: "Playbook run took 0 days, 0 hours, 0 minutes, 23 seconds"
            took = re.search(r"Playbook run took (\d+) days, (\d+) hours, (\d+) minutes, (\d+) seconds", m.stdout)
            playbook_s = None
            if took:
                d, h, mi, sec = (int(x) for x in took.groups())
                playbook_s = ((d * 24 + h) * 60 + mi) * 60 + sec
            run = Run("demo", nodes, "ours", i, round(m.seconds, 2), round(m.peak_rss_mb, 1), round(m.peak_pss_mb, 1),
                      {}, {}, m.load, str(log.relative_to(ROOT)), {"playbook_s": playbook_s})
            recap = m.stdout.split("TASKS RECAP", 1)
            if len(recap) == 2:
                run.extra["slowest_tasks"] = [ln for ln in recap[1].splitlines() if re.search(r" -+ +\d+\.\d+s$", ln)][:12]
            self.runs.append(run)
            say(f"demo    {nodes:>5} nodes  make demo #{i}: {run.seconds:7.1f}s (adopt-cluster.yml {playbook_s}s; "
                f"target under {report.DEMO_TARGET_S} s)  (load {m.load[0]:.1f} -> {m.load[1]:.1f})")

    # -- all of it ------------------------------------------------------------------------------

    def run(self) -> int:
        if self.logs.exists():
            shutil.rmtree(self.logs)
        self.logs.mkdir(parents=True)
        say(f"sizes {self.cfg.sizes}, runs {[self.cfg.runs_for(n) for n in self.cfg.sizes]}, scenarios {self.cfg.scenarios}, "
            f"maxUnavailable {self.cfg.max_unavailable}")
        failed = None
        try:
            if "demo" in self.cfg.scenarios:
                self.demo_phase()
            for size in (self.cfg.sizes if set(SIZED) & set(self.cfg.scenarios) else []):
                self.sandbox_up(size)
                if "render" in self.cfg.scenarios:
                    self.render_phase(size)
                if "adopt" in self.cfg.scenarios:
                    self.adopt_phase(size)
                if "rollout" in self.cfg.scenarios:
                    self.rollout_phase(size)
                if "rollout-down" in self.cfg.scenarios:
                    self.rollout_down_phase(size)
                # the next size adds nodes: no DaemonSet to spread to them meanwhile
                self.reset_adoption()
        except BenchError as exc:
            failed = str(exc)
            say(f"FAILED: {exc}")
        except KeyboardInterrupt:  # SIGINT (Ctrl-C, timeout -s INT): keep and report what was measured
            failed = "interrupted before the last point"
            say(f"FAILED: {failed}")
        except Exception as exc:  # noqa: BLE001 - keep what was measured, bring the sandbox down
            failed = f"{type(exc).__name__}: {exc}"
            say(f"FAILED: {failed}")
            import traceback

            traceback.print_exc()
        finally:
            if "demo" in self.cfg.scenarios and self.cfg.demo_dir.exists():
                subprocess.run([str(VENV_BIN / "python"), "-m", "sandbox", "down"], cwd=ROOT, env=self.demo_env(),
                               check=False)
            if not self.cfg.keep and self.sdir.exists():
                say(f"sandbox down ({self.sdir})")
                self.sandbox_cmd("down", check=False)
        if self.runs:
            results = report.results(self.runs, self.probes, self.cfg, self.machine())
            if self.cfg.merge and report.LATEST.exists():
                results = report.merged(results, json.loads(report.LATEST.read_text()))
            report.write(results, self.runs, self.probes, failed)
            say(f"wrote {report.LATEST.relative_to(ROOT)}, {report.RUNS.relative_to(ROOT)} and "
                f"{report.DOC.relative_to(ROOT)}")
            print(report.table(results), flush=True)
        return 1 if failed else 0

    def machine(self) -> dict:
        loads = [x for r in self.runs for x in r.load]
        cpu = "?"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
            mem = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        except (OSError, StopIteration):
            mem = 0
        try:
            from ansible.release import __version__ as ansible_version
            from kubernetes import __version__ as kube_client_version
        except ImportError:
            ansible_version = kube_client_version = "?"
        return {
            "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1), "os": platform.platform(),
            "python": platform.python_version(), "ansible_core": ansible_version, "kubernetes_client": kube_client_version,
            "kubernetes_server": getattr(self, "server_version", None), "simulated_nodes": "KWOK",
            "load_average_1m": {"min": round(min(loads), 2), "median": round(statistics.median(loads), 2),
                                "max": round(max(loads), 2),
                                "note": "at the start and the end of every measured run; the machine is shared"}
            if loads else None,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "runs_per_point": {str(n): self.cfg.runs_for(n) for n in self.cfg.sizes}, "max_unavailable": self.cfg.max_unavailable,
            "down": self.cfg.down,
            "floor_poll_interval_s": self.cfg.floor_poll_interval,
            "mitogen": _mitogen_version() if self.cfg.mitogen else None,
        }


def _mitogen_version() -> str:
    try:
        from importlib.metadata import version

        return version("mitogen")
    except Exception:  # noqa: BLE001 - for the report only
        return "?"


def main() -> int:
    try:
        cfg = Config.from_env()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    return Bench(cfg).run()
