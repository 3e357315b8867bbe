"""``python -m sandbox.control_plane [--dir DIR] COMMAND``: the control-plane emulator's CLI.

Commands:
  serve [--kubeconfig FILE] [--port N] [--admin-port N] [--faults JSON|@FILE] [--listen ADDR]
        run in the foreground (default kubeconfig: <dir>/kubeconfig when it exists); --listen:
        also listen on ADDR and advertise it (the kind test bed: its network's gateway address)
  start | stop | restart | status       as a sandbox process (what `python -m sandbox up` does)
  pki show [--json]                     the three pins (serving_ca, join_signing, join_encryption)
  faults show | clear | set SPEC... | patch SPEC...
        SPEC: one JSON object, or key=value pairs (values are JSON, else text; procedures=a,b;
        refuseJoin=node,node and crashLoop=node,node with a default reason)
  counters [--reset]                    requests per procedure and join outcomes
  joins                                 the last join attempt of every bcd pod
  forget [NODE ...]                     forget joined nodes (all without names), for tests
  condition NODE TYPE STATUS [--reason R] [--message M]
        set a condition of a joined node as nodes.list shows it (STATUS True, False, Unknown,
        or clear to remove it)

DIR: --dir, else $SANDBOX_DIR. Secrets (the API key, tokens) are never
printed; the API key is in <dir>/control-plane.yml (0600).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sandbox import proc


def _spec(args: list[str]) -> dict:
    if len(args) == 1 and args[0].lstrip().startswith("{"):
        return json.loads(args[0])
    spec: dict = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise SystemExit(f"faults: {arg!r} is not key=value")
        if key in ("procedures",) and not value.startswith("["):
            spec[key] = [v for v in value.split(",") if v]
            continue
        if key == "refuseJoin" and not value.startswith("{"):
            spec[key] = {n: "refused by fault injection" for n in value.split(",") if n}
            continue
        if key == "crashLoop" and not value.startswith(("{", "[")):
            spec[key] = [n for n in value.split(",") if n]  # each with the default message
            continue
        try:
            spec[key] = json.loads(value)
        except ValueError:
            spec[key] = value
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.control_plane", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="the sandbox directory")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run in the foreground")
    p.add_argument("--kubeconfig", type=Path)
    p.add_argument("--port", type=int)
    p.add_argument("--admin-port", type=int)
    p.add_argument("--faults", help="initial faults: JSON or @file")
    p.add_argument("--listen", help="also listen on this address, and advertise it in the URLs")
    for name in ("start", "stop", "restart", "status"):
        sub.add_parser(name)
    p = sub.add_parser("pki")
    p.add_argument("what", choices=["show"])
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("faults")
    p.add_argument("action", choices=["show", "set", "patch", "clear"])
    p.add_argument("spec", nargs="*")
    p = sub.add_parser("counters")
    p.add_argument("--reset", action="store_true")
    sub.add_parser("joins")
    p = sub.add_parser("forget")
    p.add_argument("nodes", nargs="*")
    p = sub.add_parser("condition")
    p.add_argument("node")
    p.add_argument("type")
    p.add_argument("status", choices=["True", "False", "Unknown", "clear"])
    p.add_argument("--reason", default="")
    p.add_argument("--message", default="")
    args = parser.parse_args(argv)
    try:
        sdir = (args.dir or proc.sandbox_dir()).resolve()
    except proc.NoStateDir as exc:
        parser.error(str(exc))

    if args.cmd == "serve":
        from sandbox.control_plane.config import SeedError
        from sandbox.control_plane.faults import FaultError
        from sandbox.control_plane.server import serve

        kubeconfig = args.kubeconfig or (sdir / "kubeconfig" if (sdir / "kubeconfig").exists() else None)
        faults = None
        if args.faults:
            text = Path(args.faults[1:]).read_text() if args.faults.startswith("@") else args.faults
            faults = json.loads(text)
        try:
            serve(sdir, kubeconfig, args.port, args.admin_port, faults, listen=args.listen)
        except (SeedError, FaultError, OSError, ValueError) as exc:
            print(f"control plane: {exc}", file=sys.stderr)
            return 1
        return 0

    if args.cmd in ("start", "stop", "restart", "status"):
        from sandbox.control_plane import service

        if args.cmd == "start":
            kubeconfig = sdir / "kubeconfig"
            service.start(sdir, kubeconfig if kubeconfig.exists() else None)
        elif args.cmd == "restart":
            service.restart(sdir)
        elif args.cmd == "stop":
            service.stop(sdir)
        report = service.status(sdir)
        print(json.dumps(report, indent=2))
        return 0 if (report["answers"] or args.cmd == "stop") else 1

    if args.cmd == "pki":
        from sandbox.control_plane.config import Paths
        from sandbox.control_plane.pki import ensure

        pins = ensure(Paths(sdir).home).pins()
        if args.json:
            print(json.dumps(pins, indent=2))
        else:
            for key in ("serving_ca", "join_signing", "join_encryption"):
                print(f"{key}: {pins[key]}")
        return 0

    from sandbox.control_plane.admin import Admin, AdminError

    try:
        admin = Admin.for_sandbox(sdir)
        if args.cmd == "faults":
            if args.action == "show":
                out = admin.faults()
            elif args.action == "clear":
                out = admin.clear_faults()
            elif args.action == "set":
                out = admin.set_faults(_spec(args.spec))
            else:
                out = admin.patch_faults(_spec(args.spec))
        elif args.cmd == "counters":
            out = admin.reset_counters() if args.reset else admin.counters()
        elif args.cmd == "joins":
            out = admin.joins()
        elif args.cmd == "condition":
            out = admin.set_condition(args.node, args.type, None if args.status == "clear" else args.status,
                                      args.reason, args.message)
        else:
            out = {"forgotten": admin.forget_nodes(args.nodes or None)}
    except (AdminError, OSError) as exc:
        print(f"control plane: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
