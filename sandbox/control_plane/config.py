"""Where the emulator keeps its state, and its seed (one tenant, pool and site).

Layout under the sandbox directory ``<dir>``:

* ``<dir>/control-plane/``: PKI and secrets (see pki.py), ``seed.yml`` (the seed in use),
  ``state.json`` (pid, ports and URLs of the running emulator);
* ``<dir>/control-plane.db``: SQLite, every token and node (survives restarts);
* ``<dir>/control-plane.yml``: the inventory variables for ``inventories/sandbox`` (0600);
* ``<dir>/logs/control-plane.log``: its log (through sandbox.proc).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from sandbox.control_plane.pki import write_secret_file

PACKAGE_SEED = Path(__file__).resolve().parent / "seed.yml"
BASE_PATH = "/compute"
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
SITE_KINDS = ("platform", "custom")


class SeedError(ValueError):
    """The seed file is not valid; the message names the file, the key and the rule."""


@dataclass(frozen=True)
class Seed:
    root_tenant: str | None
    tenant: str
    site_id: str
    site_kind: str
    site_owner: str
    pool_id: str
    platform_operated: bool
    gateway_name: str = "localhost"
    offline_grace_seconds: float = 20.0
    join_retry_seconds: float = 2.0
    publish_join_signing_key: bool = True

    def pool_document(self) -> dict:
        """pools.get's answer for the seed's pool."""
        return {
            "id": self.pool_id,
            "owner": self.tenant,
            "site": {"id": self.site_id, "kind": self.site_kind},
            "policy": {"kubernetes": {"platformOperated": self.platform_operated}},
        }

    def platform_owns_pool(self) -> bool:
        """Seed 000 Trust (259d82c): the pool's owner owns its site, the site is not custom, and
        the owner is the root tenant when the deployment names one."""
        return (self.tenant == self.site_owner and self.site_kind != "custom"
                and (self.root_tenant is None or self.tenant == self.root_tenant))

    def hosted_trust(self) -> str:
        """The trust of a node that joins the seed's pool with a hosted token (seed 000, Trust)."""
        if self.site_kind == "custom":
            return "tenant-owned"
        if self.platform_operated and self.platform_owns_pool():
            return "platform"
        return "tenant-controlled"


def load_seed(path: Path) -> Seed:
    """Read and check a seed file. Raises SeedError naming the key and the rule."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SeedError(f"{path}: cannot read it as YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise SeedError(f"{path}: must be a mapping")
    known = {"root_tenant", "tenant", "site", "pool", "gateway_name", "offline_grace_seconds", "join_retry_seconds",
             "publish_join_signing_key"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise SeedError(f"{path}: unknown key(s) {', '.join(unknown)}")

    def ident(value, where: str, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not ID_RE.match(value):
            raise SeedError(f"{path}: {where}: must be an id (1 to 128 letters, digits, '_', '.', ':' and '-')")
        return value

    site = doc.get("site")
    pool = doc.get("pool")
    if not isinstance(site, dict) or not isinstance(pool, dict):
        raise SeedError(f"{path}: site and pool must be mappings")
    if set(site) - {"id", "kind", "owner"}:
        raise SeedError(f"{path}: site: unknown key(s) {', '.join(sorted(set(site) - {'id', 'kind', 'owner'}))}")
    if set(pool) - {"id", "platformOperated"}:
        raise SeedError(f"{path}: pool: unknown key(s) {', '.join(sorted(set(pool) - {'id', 'platformOperated'}))}")
    if site.get("kind", "platform") not in SITE_KINDS:
        raise SeedError(f"{path}: site.kind: must be one of {', '.join(SITE_KINDS)}")
    operated = pool.get("platformOperated", False)
    if not isinstance(operated, bool):
        raise SeedError(f"{path}: pool.platformOperated: must be true or false")

    def seconds(key: str, default: float) -> float:
        value = doc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.1 <= value <= 3600:
            raise SeedError(f"{path}: {key}: must be a number of seconds from 0.1 to 3600")
        return float(value)

    gateway_name = doc.get("gateway_name", "localhost")
    if not isinstance(gateway_name, str) or not re.match(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$", gateway_name):
        raise SeedError(f"{path}: gateway_name: must be a DNS name")
    tenant = ident(doc.get("tenant"), "tenant")
    publish = doc.get("publish_join_signing_key", True)
    if not isinstance(publish, bool):
        raise SeedError(f"{path}: publish_join_signing_key: must be true or false")
    return Seed(
        root_tenant=ident(doc.get("root_tenant"), "root_tenant", optional=True),
        tenant=tenant,
        site_id=ident(site.get("id"), "site.id"),
        site_kind=site.get("kind", "platform"),
        site_owner=ident(site.get("owner", tenant), "site.owner"),
        pool_id=ident(pool.get("id"), "pool.id"),
        platform_operated=operated,
        gateway_name=gateway_name,
        offline_grace_seconds=seconds("offline_grace_seconds", 20.0),
        join_retry_seconds=seconds("join_retry_seconds", 2.0),
        publish_join_signing_key=publish,
    )


@dataclass(frozen=True)
class Paths:
    """The emulator's files for the sandbox at ``sdir``."""

    sdir: Path

    @property
    def home(self) -> Path:
        return self.sdir / "control-plane"

    @property
    def db(self) -> Path:
        return self.sdir / "control-plane.db"

    @property
    def vars_file(self) -> Path:
        return self.sdir / "control-plane.yml"

    @property
    def state_file(self) -> Path:
        return self.home / "state.json"

    @property
    def seed_file(self) -> Path:
        return self.home / "seed.yml"

    def seed_path(self) -> Path:
        """``$BCD_CP_SEED``, else ``<dir>/control-plane/seed.yml`` (copied from the package's at first use)."""
        env = os.environ.get("BCD_CP_SEED")
        if env:
            return Path(env)
        if not self.seed_file.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PACKAGE_SEED, self.seed_file)
        return self.seed_file

    def read_state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def write_state(self, state: dict) -> None:
        write_secret_file(self.state_file, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode())
