"""Without a cluster: where the sandbox's binaries come from, and its PKI.

These run in ``make test-unit``: no binary is built (fake binaries stand in) and no process is
started but a local TLS server in a thread.
"""

from __future__ import annotations

import re
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest

from sandbox import build, pki


def fake_binary(path: Path, output: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty binary cache, no SANDBOX_* variables, and a PATH without any sandbox binary."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for b in build.BINARIES:
        monkeypatch.delenv(b.env, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("SANDBOX_KUBE_VERSION", raising=False)
    return build.cache_dir()


def test_pins_come_from_the_wrapper_go_modules(monkeypatch):
    monkeypatch.delenv("SANDBOX_KUBE_VERSION", raising=False)
    versions = {b.name: build.version_of(b) for b in build.BINARIES}
    assert re.fullmatch(r"3\.6\.\d+", versions["etcd"])
    assert re.fullmatch(r"0\.8\.\d+", versions["kwok"])
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"):
        assert re.fullmatch(r"1\.37\.\d+", versions[name])  # the newest is the default


@pytest.mark.parametrize("module", ["kube-1.33", "kube-1.35", "kube-1.36", "kube-1.37", "node-1.37"])
def test_each_release_has_its_own_wrapper_module(module):
    gomod = (build.GO_DIR / module / "go.mod").read_text()
    version = build.pinned_version(module, build.K8S)
    assert version.startswith(module.split("-")[1] + ".")
    assert f"module bcd-ansible/sandbox/{module}\n" in gomod
    # every staging module is replaced by its published k8s.io/<name> at the matching v0.x
    replaced = re.findall(r"^\s*(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) v(\S+)", gomod, re.M)
    assert len(replaced) > 20
    assert all(a == b and v == "0." + version.split(".", 1)[1] for a, b, v in replaced)
    assert (build.GO_DIR / module / "go.sum").stat().st_size > 0


def test_a_release_is_picked_by_its_minor_or_its_pinned_patch(monkeypatch):
    monkeypatch.delenv("SANDBOX_KUBE_VERSION", raising=False)
    assert list(build.kube_versions()) == ["1.33", "1.35", "1.36", "1.37"]
    assert build.kube_minor() == "1.37"
    assert build.kube_minor("1.33") == build.kube_minor("v1.33.4") == "1.33"
    monkeypatch.setenv("SANDBOX_KUBE_VERSION", "1.35")
    assert build.kube_minor() == "1.35"
    assert build.version_of(build.BY_NAME["kube-apiserver"]) == "1.35.4"
    assert build.cache_name(build.BY_NAME["kube-apiserver"]) == "kubernetes-1.35.4/kube-apiserver"
    assert build.cache_name(build.BY_NAME["kwok"]) == "kwok"  # not per release


@pytest.mark.parametrize(("value", "why"), [
    ("1.34", r"SANDBOX_KUBE_VERSION=1\.34: 1\.34 is not a supported release; supported: 1\.33 \(1\.33\.4\), "),
    ("1.33.7", r"SANDBOX_KUBE_VERSION=1\.33\.7: 1\.33 is pinned at 1\.33\.4, not 1\.33\.7"),
    ("latest", r"latest is not a supported release"),
])
def test_an_unsupported_release_is_refused_naming_the_supported_ones(monkeypatch, value, why):
    monkeypatch.setenv("SANDBOX_KUBE_VERSION", value)
    with pytest.raises(build.BuildError, match=why):
        build.kube_minor()


def test_the_second_release_rotates_with_the_commit():
    others = list(build.kube_versions())[:-1]
    picked = {build.rotation_minor(f"{i:08x}" + "0" * 32) for i in range(len(others))}
    assert picked == set(others)
    assert build.rotation_minor("not-hex") == others[0]


def test_each_release_is_cached_under_its_own_name(cache):
    api = build.BY_NAME["kube-apiserver"]
    for minor in ("1.33", "1.37"):
        path = fake_binary(build.cached_path(api, minor), "not run")
        path.with_name(path.name + ".stamp").write_text(build._stamp_key(api, minor) + "\n")
    assert build._cached(api, "1.33") == cache / "kubernetes-1.33.4" / "kube-apiserver"
    assert build._cached(api, "1.37") == cache / f"kubernetes-{build.pinned_version('kube', build.K8S, '1.37')}" / api.name
    assert build._cached(api, "1.35") is None
    assert build.missing(["kube-apiserver"], minor="1.35") == ["kube-apiserver"]
    assert build.missing(["kube-apiserver"], minor="1.33") == []


def test_an_unstamped_release_binary_of_the_cache_on_path_is_not_used(cache, monkeypatch):
    kubectl = build.BY_NAME["kubectl"]
    fake = fake_binary(build.cached_path(kubectl, "1.33"), "Client Version: v1.33.4")
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")  # as `sandbox env` puts it there
    assert build._found(kubectl, lambda _msg: None, "1.33") is None
    fake.with_name("kubectl.stamp").write_text(build._stamp_key(kubectl, "1.33") + "\n")
    assert build._found(kubectl, lambda _msg: None, "1.33") == fake


def test_ldflags_stamp_the_versions_the_tools_print():
    v = build.version_of(build.BY_NAME["kube-apiserver"])
    flags = build.ldflags("kube")
    assert f"-X k8s.io/component-base/version.gitVersion=v{v}" in flags
    assert f"-X k8s.io/client-go/pkg/version.gitVersion=v{v}" in flags
    assert "-X go.etcd.io/etcd/api/v3/version.GitSHA=" in build.ldflags("etcd")


def test_go_output_name_skips_a_major_version_suffix():
    assert build._go_output_name("go.etcd.io/etcd/server/v3") == "server"
    assert build._go_output_name("k8s.io/kubernetes/cmd/kubectl") == "kubectl"


def test_a_matching_binary_named_by_its_variable_is_used(cache, tmp_path, monkeypatch):
    fake = fake_binary(tmp_path / "mine" / "kwok", f"kwok version v{build.version_of(build.BY_NAME['kwok'])} go")
    monkeypatch.setenv("SANDBOX_KWOK", str(fake))
    assert build.resolve(["kwok"], say=lambda m: None) == {"kwok": fake}


def test_a_matching_binary_on_path_is_used(cache, tmp_path, monkeypatch):
    fake = fake_binary(tmp_path / "bin" / "etcd", f"etcd Version: {build.version_of(build.BY_NAME['etcd'])}")
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    assert build.resolve(["etcd"], say=lambda m: None) == {"etcd": fake}


def test_a_mismatching_variable_is_reported_and_the_stamped_cache_used(cache, tmp_path, monkeypatch):
    kwok = build.BY_NAME["kwok"]
    monkeypatch.setenv("SANDBOX_KWOK", str(fake_binary(tmp_path / "old" / "kwok", "kwok version v0.7.0 go")))
    cached = fake_binary(cache / "kwok", "not run")
    (cache / "kwok.stamp").write_text(build._stamp_key(kwok) + "\n")
    said: list[str] = []
    assert build.resolve(["kwok"], say=said.append) == {"kwok": cached}
    assert any("ignoring SANDBOX_KWOK" in m and f"not {build.version_of(kwok)}" in m for m in said)


def test_a_cached_binary_with_a_stale_stamp_is_not_used(cache):
    kwok = build.BY_NAME["kwok"]
    fake_binary(cache / "kwok", "not run")
    (cache / "kwok.stamp").write_text("0.7.0 0123456789abcdef\n")
    assert build._cached(kwok) is None
    (cache / "kwok.stamp").write_text(build._stamp_key(kwok) + "\n")
    assert build._cached(kwok) == cache / "kwok"


def test_no_go_and_nothing_cached_is_a_clear_error(cache, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(build.BuildError, match=r"`go` is not on PATH"):
        build.resolve(["kwok"], say=lambda m: None)


# ---------------------------------------------------------------------------------- PKI


def _serve_once(ctx: ssl.SSLContext) -> tuple[int, threading.Thread, list]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    errors: list = []

    def run() -> None:
        conn, _ = listener.accept()
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            errors.append(exc)
        finally:
            listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, errors


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                  "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.0.0.1"])
def test_serving_and_client_certificates_pass_strict_mutual_tls(tmp_path, name):
    p = pki.ensure(tmp_path / "pki")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(p / "ca.crt"))
    server.verify_flags |= ssl.VERIFY_X509_STRICT
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_cert_chain(str(p / "apiserver.crt"), str(p / "apiserver.key"))
    port, thread, errors = _serve_once(server)
    client = ssl.create_default_context(cafile=str(p / "ca.crt"))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    client.load_cert_chain(str(p / "admin.crt"), str(p / "admin.key"))
    with socket.create_connection(("127.0.0.1", port)) as raw, client.wrap_socket(raw, server_hostname=name) as tls:
        assert tls.recv(2) == b"ok"
    thread.join(5)
    assert not errors


def test_a_name_outside_the_sans_is_refused(tmp_path):
    p = pki.ensure(tmp_path / "pki")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(p / "apiserver.crt"), str(p / "apiserver.key"))
    port, thread, _ = _serve_once(server)
    client = ssl.create_default_context(cafile=str(p / "ca.crt"))
    with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLCertVerificationError):
        client.wrap_socket(raw, server_hostname="example.com")
    thread.join(5)


def test_pki_is_made_once_with_private_keys_0600(tmp_path):
    p = pki.ensure(tmp_path / "pki")
    before = {f.name: f.read_bytes() for f in p.iterdir()}
    assert {"ca.crt", "ca.key", "sa.key", "sa.pub", "apiserver.crt", "admin.crt", "kwok.crt"} <= set(before)
    assert stat.S_IMODE(p.stat().st_mode) == 0o700
    for key in p.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    pki.ensure(p)
    assert {f.name: f.read_bytes() for f in p.iterdir()} == before, "a second ensure changes nothing"
    (p / "kwok.crt").unlink()
    pki.ensure(p)
    assert (p / "kwok.crt").read_bytes() != before["kwok.crt"]
    assert (p / "ca.crt").read_bytes() == before["ca.crt"], "a missing leaf is re-issued by the same CA"
