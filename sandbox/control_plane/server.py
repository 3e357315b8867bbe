"""Run the emulator in the foreground: the HTTPS API, the admin endpoint and the join simulator.

:func:`serve` binds ``127.0.0.1`` on the port saved in ``<dir>/control-plane/state.json`` (a
free one at first start; ``--port`` / ``$BCD_CP_PORT`` choose one), so the URL in
``control-plane.yml`` and in rendered ConfigMaps stays valid across restarts. With ``--listen
ADDR`` (``$BCD_CP_LISTEN``, kept in state.json) it also listens on ``ADDR`` at the same port and
advertises ``ADDR`` in its URLs, and its server certificate names ``ADDR``: the kind test bed
gives its network's gateway address, which pods on the kind nodes reach. The admin endpoint
gets its own port the same way (``--admin-port`` / ``$BCD_CP_ADMIN_PORT``). Both servers run in
one asyncio loop (uvicorn, h11); the join simulator runs in its own threads (a pod watch, a
pass, a pool of workers) when a kubeconfig is given. SIGTERM or SIGINT stop everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import faulthandler
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path

import uvicorn
import yaml
from uvicorn.protocols.http.h11_impl import H11Protocol

from sandbox.control_plane.admin import build_admin_app
from sandbox.control_plane.app import BASE_PATH, Api, Edge, build_app
from sandbox.control_plane.config import Paths, load_seed
from sandbox.control_plane.db import Store
from sandbox.control_plane.faults import Faults
from sandbox.control_plane.pki import ensure, write_secret_file

log = logging.getLogger("bcd.cp")


def bind(port: int, wait: float = 10.0, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port); waits for a busy port."""
    deadline = time.monotonic() + wait
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise OSError(exc.errno, f"cannot listen on {host}:{port} ({exc.strerror}); another process holds "
                                         "it, or remove control-plane/state.json to take new ports (then re-render: "
                                         "the URLs change)") from None
            time.sleep(0.25)
            continue
        sock.listen(128)
        return sock


def vars_document(paths: Paths, pki, seed, url: str, gateway_url: str) -> dict:
    """The inventory variables of ``control-plane.yml``."""
    return {
        "bcd_control_plane_url": url,
        "bcd_control_plane_ca_file": str(pki.ca_file),
        "bcd_gateway_url": gateway_url,
        "bcd_site_id": seed.site_id,
        "bcd_pins": pki.pins(),
        "bcd_tenant": seed.tenant,
        "bcd_pool": seed.pool_id,
        "bcd_api_key": pki.api_key,
    }


def write_vars(paths: Paths, doc: dict) -> None:
    text = ("# Written by the control-plane emulator (sandbox/control_plane) at each start; read by\n"
            "# inventories/sandbox. Holds the API key: keep it 0600.\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    write_secret_file(paths.vars_file, text.encode())


def protocol_class(faults: Faults):
    """uvicorn's h11 protocol, closing every new connection during an outage in ``reset`` mode."""

    class OutageAwareH11(H11Protocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            remaining, mode = faults.outage()
            if remaining > 0 and mode == "reset":
                faults.count_request("(reset)")
                transport.abort()

    return OutageAwareH11


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :func:`serve` (two servers share a loop)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def serve(sdir: Path, kubeconfig: Path | None = None, port: int | None = None, admin_port: int | None = None,
          faults: dict | None = None, listen: str | None = None) -> None:
    """Run until SIGTERM/SIGINT. Raises SeedError, FaultError or OSError (port) before serving."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack to the log
    sdir = Path(sdir).resolve()
    sdir.mkdir(parents=True, exist_ok=True)
    paths = Paths(sdir)
    seed = load_seed(paths.seed_path())
    saved = paths.read_state() or {}
    listen = listen or os.environ.get("BCD_CP_LISTEN") or saved.get("listen") or None
    pki = ensure(paths.home, extra_ips=(listen,) if listen else ())
    if faults is None and os.environ.get("BCD_CP_FAULTS"):
        faults = json.loads(os.environ["BCD_CP_FAULTS"])
    fault_state = Faults(faults)
    port = port or int(os.environ.get("BCD_CP_PORT") or 0) or saved.get("port") or 0
    admin_port = admin_port or int(os.environ.get("BCD_CP_ADMIN_PORT") or 0) or saved.get("admin_port") or 0
    sock = bind(port)
    admin_sock = bind(admin_port)
    port, admin_port = sock.getsockname()[1], admin_sock.getsockname()[1]
    sockets = [sock] + ([bind(port, host=listen)] if listen else [])
    url = f"https://{listen or '127.0.0.1'}:{port}{BASE_PATH}"
    gateway_url = f"https://{listen or seed.gateway_name}:{port}"

    from sandbox.control_plane.gateway import NodeReports, NodeSide

    store = Store(paths.db)
    reports = NodeReports()
    api = Api(store, pki, seed, gateway_url, NodeSide(store, pki, seed, fault_state, url, gateway_url, reports))
    joiner = None
    if kubeconfig:
        from sandbox.control_plane.join import JoinSimulator

        joiner = JoinSimulator(str(kubeconfig), paths.db, pki, seed, url, gateway_url, fault_state, reports)
    admin_app = build_admin_app(pki.admin_token, fault_state, store, joiner)

    write_vars(paths, vars_document(paths, pki, seed, url, gateway_url))
    paths.write_state({"pid": os.getpid(), "port": port, "admin_port": admin_port, "url": url,
                       "admin_url": f"http://127.0.0.1:{admin_port}", "gateway_url": gateway_url,
                       "kubeconfig": str(kubeconfig) if kubeconfig else None, "listen": listen,
                       "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    main = _Server(uvicorn.Config(
        Edge(build_app(api), fault_state), http=protocol_class(fault_state), lifespan="off", log_config=None,
        access_log=False, ssl_certfile=str(pki.server_chain_file), ssl_keyfile=str(pki.server_key_file),
        timeout_graceful_shutdown=2, timeout_keep_alive=5))
    admin = _Server(uvicorn.Config(admin_app, http="h11", lifespan="off", log_config=None, access_log=False,
                                   timeout_graceful_shutdown=2))

    async def run() -> None:
        loop = asyncio.get_running_loop()

        def exit_(*_):
            main.should_exit = admin.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, exit_)
        if joiner is not None:
            joiner.start()
        log.info("control plane %s (gateway %s, admin http://127.0.0.1:%d), tenant %s, pool %s, site %s%s",
                 url, gateway_url, admin_port, seed.tenant, seed.pool_id, seed.site_id,
                 "; joining the pods of " + str(kubeconfig) if joiner else "; no cluster (no join simulator)")
        async def sweep() -> None:
            while not main.should_exit:
                await asyncio.sleep(1.0)
                try:
                    api.node_side.sweep()
                except Exception:
                    log.exception("the node side's offline sweep failed")

        sweeper = asyncio.create_task(sweep())
        await asyncio.gather(main.serve(sockets=sockets), admin.serve(sockets=[admin_sock]))
        sweeper.cancel()

    try:
        asyncio.run(run())
    finally:
        if joiner is not None:
            joiner.stop()
        store.close()
        log.info("control plane stopped")
