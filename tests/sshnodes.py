"""Simulated GPU nodes behind a real OpenSSH server, for the tests that run the gpu_nodes group
over SSH as operators do (tests/integration/test_gpu_nodes_ssh.py).

``SshServer`` starts Debian's ``/usr/sbin/sshd`` on 127.0.0.1 on a free port, with a host key the
test makes, key-only logins (no password, no keyboard-interactive), and its own log. Users are
made with ``useradd``, log in with a key the test makes, and get a sudoers rule: passwordless,
or one that asks for a password (which they do not have). Each "node" is then an inventory host
pointing at that server with one of those users and its own root folder, and, for the host-key
scenario, a known_hosts file that holds another key for the server.

Needs root (users, sudoers, sshd's privilege separation) and the packages openssh-server and
sudo: :func:`ensure_packages` installs them with apt-get when they are missing and it runs as
root, as CI does; otherwise it says why not, and the tests skip with that reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import install_debian_packages

SSHD = Path("/usr/sbin/sshd")
SUDO = Path("/usr/bin/sudo")
SFTP = Path("/usr/lib/openssh/sftp-server")
SUDOERS = Path("/etc/sudoers.d/bcd-ansible-tests")


def ensure_packages() -> str | None:
    """None when sshd and sudo are there (installed now if need be); else why they cannot be."""
    if SSHD.exists() and SUDO.exists():
        return None
    why = install_debian_packages(["openssh-server", "sudo"])
    if why is None and not (SSHD.exists() and SUDO.exists()):
        why = "apt-get install openssh-server sudo left sshd or sudo missing"
    return why


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path`` (no passphrase); returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True,
                   capture_output=True, timeout=60)
    return Path(f"{path}.pub").read_text().strip()


class SshServer:
    """One sshd on 127.0.0.1 with the users the test adds (see the module docstring)."""

    def __init__(self, prefix: str = "bcdssh"):
        self.prefix = prefix
        # 0755 and owned by root: sshd and the users can traverse it; only root writes
        self.dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.dir.chmod(0o755)
        self.port = free_port()
        self.users: dict[str, Path] = {}  # user -> home
        self._sudoers: dict[str, str] = {}  # user -> sudoers rule
        self.proc: subprocess.Popen | None = None
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.host_pub = keygen(self.host_key, "bcd-test-host")
        self.client_key = self.dir / "id_ed25519"
        self.client_pub = keygen(self.client_key, "bcd-test-client")
        self.log = self.dir / "sshd.log"
        self.known_hosts = self.dir / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {self.host_pub}\n")
        other = keygen(self.dir / "other_host_key", "another-host")
        self.changed_known_hosts = self.dir / "known_hosts.changed"
        self.changed_known_hosts.write_text(f"[127.0.0.1]:{self.port} {other}\n")

    # -- users -------------------------------------------------------------------------------

    def add_user(self, name: str, sudo: str) -> Path:
        """A user who logs in with the test's key; ``sudo``: ``nopasswd`` or ``password``."""
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True,
                           timeout=60)
        # '*': no password matches, and the account is not locked (sshd refuses locked accounts)
        subprocess.run(["usermod", "--password", "*", name], check=True, capture_output=True, timeout=60)
        home = Path(pwd.getpwnam(name).pw_dir)
        ssh = home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_text(self.client_pub + "\n")
        ent = pwd.getpwnam(name)
        for p in (ssh, ssh / "authorized_keys"):
            os.chown(p, ent.pw_uid, ent.pw_gid)
        (ssh / "authorized_keys").chmod(0o600)
        self.users[name] = home
        self._sudoers[name] = "NOPASSWD: ALL" if sudo == "nopasswd" else "ALL"
        self._write_sudoers()
        return home

    def _write_sudoers(self) -> None:
        text = "# bcd-ansible tests (tests/sshnodes.py); removed when they end\n"
        text += "".join(f"{u} ALL=(ALL) {rule}\n" for u, rule in sorted(self._sudoers.items()))
        tmp = SUDOERS.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o440)
        check = subprocess.run(["visudo", "-c", "-f", str(tmp)], capture_output=True, text=True, timeout=60, check=False)
        if check.returncode != 0:
            tmp.unlink()
            raise RuntimeError(f"sudoers rule refused: {check.stdout}{check.stderr}")
        tmp.rename(SUDOERS)

    # -- the server --------------------------------------------------------------------------

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin no",
            "UsePAM no",
            "StrictModes yes",
            f"AllowUsers {' '.join(sorted(self.users))}",
            "LogLevel VERBOSE",
            f"Subsystem sftp {SFTP}",
            "",
        ]))
        check = subprocess.run([str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True, timeout=60, check=False)
        if check.returncode != 0:
            raise RuntimeError(f"sshd -t: {check.stderr}")
        self.proc = subprocess.Popen([str(SSHD), "-D", "-f", str(config), "-E", str(self.log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"sshd did not answer on 127.0.0.1:{self.port}")

    def ssh_args(self, known_hosts: Path | None = None) -> str:
        """``ansible_ssh_common_args`` for a host on this server: the test's known_hosts, checked
        strictly, and no agent, password or prompt. Ansible's own ControlPersist stays on, but for
        a host given another ``known_hosts``: a master connection opened before (by another host
        on the same server, user and port) would carry its logins without a new key check."""
        args = (f"-o UserKnownHostsFile={known_hosts or self.known_hosts} -o StrictHostKeyChecking=yes "
                "-o GlobalKnownHostsFile=/dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o ConnectTimeout=10")
        if known_hosts is not None:
            args += " -o ControlMaster=no -o ControlPath=none"
        return args

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for name in self.users:
            # --force: a session of Ansible's ControlPersist master may still be open for a minute
            subprocess.run(["userdel", "--force", "--remove", name], capture_output=True, timeout=60, check=False)
        SUDOERS.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SshServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

