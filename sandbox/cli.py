"""``python -m sandbox up|down|status|build|env|add-nodes N|node-down NAME|node-up NAME|kind ...|pyroot ...``: the
sandbox's command line.

Exit status 0 on success; 1 when a component fails to start (named, with the end of its log), a
build fails, ``status`` finds the sandbox not up, or ``down`` leaves something behind.
The sandbox directory is ``--dir DIR``, else ``--name NAME`` (``<root>/.sandbox-NAME``), else
``$SANDBOX_DIR``, else ``<root>/.sandbox``: several sandboxes run side by side, each in its own
directory with its own free ports (``python -m sandbox --name a up --nodes 2``). The kind test
bed's is ``$KIND_DIR``, else ``<root>/.kind``. ``<root>`` is the bcd-ansible checkout the package
runs from (where inventories/sandbox and inventories/kind look), else the current directory; the
package below this command line only uses the directory it is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path


def _status(args) -> int:
    from sandbox import cluster

    ok, report = cluster.status()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if ok else 1
    print(f"sandbox {report['dir']}: {'up' if ok else 'NOT up'}")
    if "error" in report:
        print(f"  {report['error']}")
        return 1
    for name, comp in report["components"].items():
        print(f"  {name:<24} {'running' if comp['running'] else 'stopped':<8} "
              f"{'pid ' + str(comp['pid']) if comp['pid'] else ''}")
    api = report["api"] or {}
    if api.get("ready"):
        print(f"  API server {api['url']}: ready, {api.get('version')}")
    else:
        print(f"  API server: not ready {api.get('error', '')}".rstrip())
    nodes = report["nodes"]
    if nodes:
        print(f"  nodes: {nodes['total']} ({nodes['ready']} Ready; {nodes['gpu']} GPU, {nodes['cpu']} CPU-only)")
    cp = report["control_plane"]
    if cp == {"installed": False}:
        print("  control-plane emulator: not installed (sandbox/control_plane/service.py missing)")
    elif "error" in cp:
        print(f"  control-plane emulator: status failed: {cp['error']}")
    else:
        head = f"running, pid {cp.get('pid')}" if cp.get("running") else "NOT running"
        rest = ", ".join(f"{k} {v}" for k, v in cp.items() if k not in ("running", "pid") and v is not None)
        print(f"  control-plane emulator: {head}{'; ' + rest if rest else ''}")
    print(f"  kubeconfig: {report['kubeconfig']}")
    return 0 if ok else 1


def default_root() -> Path:
    """Where the default state directories go: the bcd-ansible checkout this package runs from (an
    editable install or ``python -m sandbox`` at its top), else the current directory."""
    checkout = Path(__file__).resolve().parent.parent
    return checkout if (checkout / "galaxy.yml").is_file() and (checkout / "inventories").is_dir() else Path.cwd()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dir", metavar="DIR", help="the sandbox's directory (default $SANDBOX_DIR, else <root>/.sandbox, "
                       "<root> being the checkout, else the current directory)")
    where.add_argument("--name", metavar="NAME",
                       help="a sandbox beside the others, in <root>/.sandbox-NAME (letters, digits, '-', '_')")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start the sandbox (idempotent); SANDBOX_NODES GPU nodes (default 3)")
    p_up.add_argument("--nodes", type=int, help="GPU nodes to ensure (overrides SANDBOX_NODES)")
    p_at = sub.add_parser("attach", help="run KWOK nodes and the control-plane emulator on an existing cluster (kind)")
    p_at.add_argument("--kubeconfig", required=True, help="an admin kubeconfig of the existing cluster")
    p_at.add_argument("--nodes", type=int, help="GPU nodes to ensure (overrides SANDBOX_NODES)")
    sub.add_parser("down", help="stop every process the sandbox started and remove its directory")
    p_st = sub.add_parser("status", help="components, API health, nodes; exit 1 when not up")
    p_st.add_argument("--json", action="store_true", help="print the report as JSON")
    p_b = sub.add_parser("build", help="find or build the pinned binaries into the cache")
    p_b.add_argument("--force", action="store_true", help="rebuild into the cache even if a match exists")
    p_b.add_argument("--kube-version", metavar="X.Y", action="append",
                     help="the Kubernetes release(s) to build (repeatable; 'all' for every supported one; "
                          "default SANDBOX_KUBE_VERSION, else the newest)")
    p_b.add_argument("--list", action="store_true",
                     help="build nothing: print the supported Kubernetes minor releases, oldest first")
    p_b.add_argument("--rotation", metavar="COMMIT",
                     help="build nothing: print the release other than the newest that COMMIT picks for "
                          "make test's compatibility scenario")
    p_b.add_argument("--check", action="store_true",
                     help="build nothing: exit 0 when found or cached, else say what is missing and exit 2")
    sub.add_parser("env", help="print shell exports for PATH (kubectl) and KUBECONFIG")
    p_add = sub.add_parser("add-nodes", help="add N more GPU nodes to the running sandbox")
    p_add.add_argument("count", type=int)
    p_nd = sub.add_parser("node-down", help="hold a GPU node NotReady, as a node whose kubelet stopped (until node-up)")
    p_nd.add_argument("node", metavar="NAME")
    p_nu = sub.add_parser("node-up", help="bring a node held by node-down back (Ready, untainted)")
    p_nu.add_argument("node", metavar="NAME")
    p_kind = sub.add_parser("kind", help="the kind test bed: real kubelets under podman (see sandbox/kind)")
    kind_sub = p_kind.add_subparsers(dest="kind_cmd", required=True)
    p_ku = kind_sub.add_parser("up", help="build what is missing, start the kind cluster (idempotent)")
    p_ku.add_argument("--attach", action="store_true",
                      help="also run the control-plane emulator and KWOK nodes on it (python -m sandbox attach)")
    p_ku.add_argument("--nodes", type=int, help="with --attach: simulated GPU nodes besides the real ones (default 0)")
    kind_sub.add_parser("down", help="delete the kind cluster and its directory")
    p_ks = kind_sub.add_parser("status", help="node containers, nodes, CoreDNS; exit 1 when not up")
    p_ks.add_argument("--json", action="store_true", help="print the report as JSON")
    kind_sub.add_parser("build", help="find or build the binaries and images of the kind test bed")
    kind_sub.add_parser("check", help="exit 0 when the cache is warm (up builds nothing); else say why, exit 2 "
                                      "when `build` would make it warm, 1 otherwise")
    p_crio = sub.add_parser("crio", help="real CRI-O, the file judge's oracle for CRI-O nodes (see sandbox/crio.py)")
    crio_sub = p_crio.add_subparsers(dest="crio_cmd", required=True)
    crio_sub.add_parser("build", help="build CRI-O and pinns of each version the oracle asks into the cache")
    crio_sub.add_parser("check", help="exit 0 when every version is built and the daemon can run here; else say "
                                      "why, exit 2 when `build` would make it so, 1 otherwise")
    p_root = sub.add_parser("pyroot", help="a Debian trixie root (Python 3.13) with a venv per ansible-core version "
                                           "(see sandbox/pyroot.py)")
    root_sub = p_root.add_subparsers(dest="pyroot_cmd", required=True)
    p_rb = root_sub.add_parser("build", help="build the root and its venvs into the cache unless built")
    p_rb.add_argument("--force", action="store_true", help="build it again even when built")
    p_rc = root_sub.add_parser("check", help="exit 0 when the root is built; else say why, exit 2 when `build` "
                                             "would make it, 1 when it cannot be built here")
    p_rc.add_argument("--no-probe", action="store_true",
                      help="do not ask Debian's mirror and PyPI whether they answer")
    p_rp = root_sub.add_parser("path", help="print the root's directory (exit 2 when not built), or with --core "
                                            "the venv's path inside it")
    p_rp.add_argument("--core", metavar="X.Y", help="an ansible-core line: 2.19, 2.20, 2.21, 2.22")
    p_rr = root_sub.add_parser("run", help="run a command inside the root with a venv's bin first on PATH; "
                                           "its exit status (125: the root could not run it)")
    p_rr.add_argument("--core", metavar="X.Y", required=True, help="the ansible-core line: 2.19, 2.20, 2.21, 2.22")
    p_rr.add_argument("--bind", metavar="DIR", action="append",
                      help="one more host directory to see inside, at the same path (repeatable)")
    p_rr.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    args = parser.parse_args(argv)
    if args.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", args.name):
        parser.error(f"--name {args.name!r}: letters, digits, '-' and '_' only, at most 63")
    # Every command (and what it starts) reads its directory from SANDBOX_DIR / KIND_DIR; the
    # checkout's defaults are chosen here, never inside the package.
    root = default_root()
    if args.dir or args.name:
        os.environ["SANDBOX_DIR"] = str(Path(args.dir).resolve() if args.dir else root / f".sandbox-{args.name}")
    if args.cmd == "crio":
        from sandbox import crio

        return crio.main(args)
    if args.cmd == "pyroot":
        # Before the defaults below: a command run inside gets the caller's environment as it is.
        from sandbox import pyroot

        return pyroot.main(args)
    if not os.environ.get("SANDBOX_DIR"):
        os.environ["SANDBOX_DIR"] = str(root / ".sandbox")
    if not os.environ.get("KIND_DIR"):
        os.environ["KIND_DIR"] = str(root / ".kind")

    if args.cmd == "kind":
        from sandbox import kind

        if args.kind_cmd == "up" and args.nodes is not None and (args.nodes < 0 or not args.attach):
            parser.error("kind up --nodes: a number >= 0, and only with --attach")

        return kind.main(args)

    # Here, not at the top: `pyroot run` starts without the Kubernetes client (half a second).
    from kubernetes.client.rest import ApiException

    from sandbox import build, cluster, proc

    try:
        if args.cmd == "up":
            if args.nodes is not None and args.nodes < 1:
                parser.error("--nodes must be a positive integer")
            cluster.up(nodes=args.nodes)
        elif args.cmd == "attach":
            if args.nodes is not None and args.nodes < 0:
                parser.error("--nodes must be 0 (no simulated GPU node) or more")
            cluster.attach(None, Path(args.kubeconfig), nodes=args.nodes)
        elif args.cmd == "down":
            problems = cluster.down()
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        elif args.cmd == "status":
            return _status(args)
        elif args.cmd == "build" and args.list:
            print(" ".join(build.kube_versions()))
        elif args.cmd == "build" and args.rotation is not None:
            print(build.rotation_minor(args.rotation) or "")
        elif args.cmd == "build":
            wanted = args.kube_version or [None]
            minors = (list(build.kube_versions()) if "all" in wanted
                      else list(dict.fromkeys(build.kube_minor(v, what="--kube-version") if v else build.kube_minor()
                                             for v in wanted)))
            if args.check:
                cold = {m: build.missing(minor=m) for m in minors}
                for m, names in cold.items():
                    if names:
                        print(f"sandbox build: Kubernetes {build.pinned_version('kube', build.K8S, m)}: not built "
                              f"into {build.cache_dir()}: {', '.join(names)} (about 10 minutes on 2 cores: "
                              f"python -m sandbox build --kube-version {m})")
                return 2 if any(cold.values()) else 0
            for m in minors:
                print(build.describe(build.resolve(force=args.force, minor=m), m))
        elif args.cmd == "env":
            print("\n".join(cluster.env_lines()))
        elif args.cmd == "add-nodes":
            if args.count < 1:
                parser.error("count must be a positive integer")
            names = cluster.add_nodes(proc.sandbox_dir(), args.count)
            print(f"sandbox: added {', '.join(names)} (Ready)")
        elif args.cmd in ("node-down", "node-up"):
            from sandbox.api import Sandbox

            sb = Sandbox(proc.sandbox_dir())
            if args.node not in sb.node_names():
                raise cluster.UsageError(f"sandbox: no node {args.node} (its nodes: {', '.join(sb.node_names())})")
            if args.cmd == "node-down":
                sb.set_node_not_ready(args.node)
                # the command to undo it names the same sandbox the way this one did
                where = (f"--dir {shlex.quote(args.dir)} " if args.dir else f"--name {args.name} " if args.name else "")
                print(f"sandbox: {args.node} is NotReady (held, as a node whose kubelet stopped) until "
                      f"`python -m sandbox {where}node-up {args.node}`")
            else:
                sb.release_node(args.node)
                print(f"sandbox: {args.node} is Ready again")
    except (proc.StartError, build.BuildError, cluster.UsageError) as exc:
        print(str(exc), file=sys.stderr)
        if args.cmd == "up" and isinstance(exc, proc.StartError):
            print("sandbox: `python -m sandbox down` stops whatever did start", file=sys.stderr)
        return 1
    except ApiException as exc:
        print(f"sandbox: the Kubernetes API refused a request: {exc.status} {exc.reason}: {exc.body}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sandbox: interrupted; `python -m sandbox down` stops what was started", file=sys.stderr)
        return 130
    return 0
