"""The trixie root's machinery (sandbox/pyroot.py) without building a root: its key and stamp,
``check``'s exit statuses on a made-up cache, and the command line a run is assembled into."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from sandbox import pyroot

REQUIREMENTS = """# runtime
ansible-core==2.19.14 ; python_version < "3.12"
ansible-core==2.21.5 ; python_version >= "3.12"
kubernetes==37.0.2
pydantic==2.14.4  # a comment after it
# audit.yml's textfile
prometheus_client==0.26.0
"""
DEV = """-r requirements.txt
-e ./sandbox
pytest==9.2.0
pytest-randomly==5.1.0
pytest-xdist==3.8.0
hypothesis==6.170.17
xmlschema==4.3.2
ruff==0.17.6
"""


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with requirement files, and an empty cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    co = tmp_path / "checkout"
    co.mkdir()
    (co / "requirements.txt").write_text(REQUIREMENTS)
    (co / "requirements-dev.txt").write_text(DEV)
    return co


def fake_built(root: pyroot.Root, key: str | None = None, venvs=tuple(pyroot.CORES)) -> None:
    """What a finished build leaves: the tree's Pythons and the stamp (written last)."""
    (root.path / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root.path / "usr/bin/python3").touch()
    for line in venvs:
        bin_dir = root.path / pyroot.venv(line).lstrip("/") / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "python").touch()
    root.base.mkdir(parents=True, exist_ok=True)
    root.stamp.write_text(json.dumps({"key": key or root.key}))


# ---------------------------------------------------------------------------- inputs and key


def test_the_venvs_install_requirements_txt_but_its_ansible_core_lines():
    assert pyroot.runtime_requirements(REQUIREMENTS) == [
        "kubernetes==37.0.2", "pydantic==2.14.4", "prometheus_client==0.26.0"]
    assert pyroot.requirement_name('Ansible_Core==2.21.5 ; python_version >= "3.12"') == "ansible-core"
    assert pyroot.requirement_name("-r requirements.txt") is None
    assert pyroot.requirement_name("   # only a comment") is None


def test_markers_other_than_ansible_cores_stay_for_pip_to_evaluate():
    text = 'backports.zoneinfo==0.2.1 ; python_version < "3.9"\nansible-core>=2.19\n'
    assert pyroot.runtime_requirements(text) == ['backports.zoneinfo==0.2.1 ; python_version < "3.9"']


def test_test_tools_keep_requirements_devs_pins():
    assert pyroot.test_requirements(DEV) == [
        "pytest==9.2.0", "pytest-randomly==5.1.0", "pytest-xdist==3.8.0", "hypothesis==6.170.17",
        "xmlschema==4.3.2", "mitogen", "ansible-runner", "ansible-builder", "starlette", "uvicorn"]


def test_the_key_follows_what_a_root_holds_and_nothing_else():
    key = pyroot.stamp_key(REQUIREMENTS, DEV)
    assert key == pyroot.stamp_key(REQUIREMENTS, DEV) and len(key) == 16
    # what is installed: a new pin, a new test tool pin, a new ansible-core pin, a new package
    assert pyroot.stamp_key(REQUIREMENTS.replace("37.0.2", "37.0.3"), DEV) != key
    assert pyroot.stamp_key(REQUIREMENTS, DEV.replace("pytest==9.2.0", "pytest==9.3.0")) != key
    assert pyroot.stamp_key(REQUIREMENTS, DEV, cores={**pyroot.CORES, "2.21": "2.21.6"}) != key
    assert pyroot.stamp_key(REQUIREMENTS, DEV, packages=(*pyroot.PACKAGES, "make")) != key
    # not installed: comments, ansible-core's own lines (each venv pins its own), other dev tools
    assert pyroot.stamp_key("# new words\n" + REQUIREMENTS, DEV) == key
    assert pyroot.stamp_key(REQUIREMENTS.replace("2.21.5", "2.22.0"), DEV) == key
    assert pyroot.stamp_key(REQUIREMENTS, DEV.replace("ruff==0.17.6", "ruff==0.18.0")) == key


def test_a_root_lives_in_the_shared_cache_by_its_key(checkout, tmp_path):
    root = pyroot.current(checkout)
    assert root.key == pyroot.stamp_key(REQUIREMENTS, DEV)
    assert root.path == tmp_path / "cache" / "bcd-ansible" / "roots" / f"trixie-{root.key}"
    assert root.stamp == root.path.with_name(root.path.name + ".stamp")
    assert root.partial.name == f".trixie-{root.key}.partial"


# ---------------------------------------------------------------------------- stamp and check


def test_only_a_stamped_whole_root_counts_as_built(checkout):
    root = pyroot.current(checkout)
    assert not pyroot.is_built(root)
    fake_built(root)
    assert pyroot.is_built(root)
    root.stamp.unlink()                      # the tree without its stamp: a build that stopped
    assert not pyroot.is_built(root)
    root.stamp.write_text("not json")
    assert not pyroot.is_built(root)
    root.stamp.write_text(json.dumps({"key": "0" * 16}))   # a stamp of other inputs
    assert not pyroot.is_built(root)
    fake_built(root)
    (root.path / pyroot.venv("2.22").lstrip("/") / "bin/python").unlink()   # a venv gone
    assert not pyroot.is_built(root)


def test_check_is_0_when_built_without_asking_the_network(checkout, monkeypatch):
    fake_built(pyroot.current(checkout))
    monkeypatch.setattr(pyroot, "_reachable", lambda url, timeout=10: pytest.fail("probed"))
    code, line = pyroot.check(checkout=checkout)
    assert code == 0 and line.startswith("pyroot: built: ") and "2.21.5" in line


def test_check_is_2_when_cold_here_and_says_why(checkout, monkeypatch):
    monkeypatch.setattr(pyroot, "cannot_build", lambda probe=True: None)
    code, line = pyroot.check(checkout=checkout)
    assert code == 2
    assert line.startswith("pyroot: cold: no root in ") and "python -m sandbox pyroot build" in line


def test_a_root_of_other_inputs_is_named_as_the_reason(checkout, monkeypatch):
    monkeypatch.setattr(pyroot, "cannot_build", lambda probe=True: None)
    old = pyroot.Root("f" * 16, pyroot.roots_dir())
    fake_built(old)
    code, line = pyroot.check(checkout=checkout)
    assert code == 2 and f"trixie-{'f' * 16} was built for others" in line
    root = pyroot.current(checkout)
    root.partial.mkdir()
    assert "a build that did not finish" in pyroot.check(checkout=checkout)[1]


def test_check_is_1_where_no_root_can_be_built(checkout, monkeypatch):
    monkeypatch.setattr(pyroot.os, "geteuid", lambda: 1000)
    code, line = pyroot.check(checkout=checkout)
    assert code == 1 and line == ("pyroot: cannot be built here: not root (mmdebstrap's root mode, chroot and "
                                  "mount namespaces need root)")
    monkeypatch.setattr(pyroot.os, "geteuid", lambda: 0)
    real_which = pyroot.shutil.which
    monkeypatch.setattr(pyroot.shutil, "which",
                        lambda cmd: None if cmd in ("mmdebstrap", "apt-get") else real_which(cmd) or f"/usr/bin/{cmd}")
    code, line = pyroot.check(checkout=checkout)
    assert code == 1 and "mmdebstrap is missing and there is no apt-get" in line


def test_an_unreachable_mirror_or_pypi_is_1_not_a_failed_build(checkout, monkeypatch):
    monkeypatch.setattr(pyroot.os, "geteuid", lambda: 0)
    monkeypatch.setattr(pyroot.shutil, "which", lambda cmd: f"/usr/bin/{cmd}")
    monkeypatch.setattr(pyroot, "debian_mirrors", lambda: ("http://mirror.example/debian", None))
    asked = []

    def reachable(url, timeout=10):
        asked.append(url)
        return None if "mirror.example" in url else f"{url}: [Errno -2] Name or service not known"

    monkeypatch.setattr(pyroot, "_reachable", reachable)
    code, line = pyroot.check(checkout=checkout)
    assert asked == ["http://mirror.example/debian/dists/trixie/InRelease", pyroot.pypi_url()]
    assert code == 1 and line.startswith("pyroot: cannot be built here: PyPI does not answer: ")
    assert pyroot.check(probe=False, checkout=checkout)[0] == 2


def test_a_checkout_without_requirements_cannot_be_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, line = pyroot.check(checkout=tmp_path)
    assert code == 1 and "cannot read" in line and "requirements.txt" in line


def test_prune_keeps_the_two_newest_other_roots(checkout):
    root = pyroot.current(checkout)
    others = [pyroot.Root(c * 16, root.base) for c in "abc"]
    for age, other in enumerate(others):
        fake_built(other)
        os.utime(other.stamp, (1_000_000 - age * 1000, 1_000_000 - age * 1000))
    stale = root.base / ".trixie-dddddddddddddddd.partial"
    stale.mkdir()
    removed = pyroot.prune(root, say=lambda msg: None)
    assert removed == [others[2].name, stale.name]
    assert not others[2].path.exists() and not others[2].stamp.exists() and not stale.exists()
    assert all(o.path.exists() and o.stamp.exists() for o in others[:2])


def test_nothing_with_a_mount_below_it_is_removed(tmp_path, monkeypatch):
    victim = tmp_path / "root"
    (victim / "dev").mkdir(parents=True)
    monkeypatch.setattr(pyroot, "_mounts_under", lambda path: [str(victim / "dev")])
    with pytest.raises(pyroot.PyrootError, match=r"not removing .*mounted below it: .*/root/dev"):
        pyroot.safe_rmtree(victim)
    assert victim.exists()


# ---------------------------------------------------------------------------- the host's mirror


def test_the_mirror_is_the_one_the_hosts_apt_sources_use(tmp_path):
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
                      "URIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\n"
                      "Types: deb\nURIs: http://mirror.example/debian-security/\nSuites: bookworm-security\n")
    other = tmp_path / "other.list"
    other.write_text("deb [signed-by=/usr/share/keyrings/x.gpg] https://packages.example.com/apt stable main\n")
    assert pyroot.debian_mirrors([other, deb822]) == ("http://mirror.example/debian",
                                                      "http://mirror.example/debian-security")
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb [arch=amd64] http://ftp.example.org/debian bookworm main\n")
    assert pyroot.debian_mirrors([one_line]) == ("http://ftp.example.org/debian",
                                                 "http://ftp.example.org/debian-security")
    assert pyroot.debian_mirrors([tmp_path / "missing"]) == ("http://deb.debian.org/debian",
                                                             "http://deb.debian.org/debian-security")
    assert pyroot.mirror_lines("http://m/debian", "http://m/debian-security") == [
        "deb http://m/debian trixie main", "deb http://m/debian trixie-updates main",
        "deb http://m/debian-security trixie-security main"]


# ---------------------------------------------------------------------------- a run's command line


def test_a_run_enters_a_mount_namespace_then_the_root():
    argv = pyroot.namespace_argv(Path("/cache/roots/trixie-k"), Path("/work/main"),
                                 ["ansible-playbook", "-e", "x='a b'"], [Path("/work/main")])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert argv[5:7] == ["/bin/sh", "-c"]
    assert argv[8:] == ["pyroot", "/work/main", "ansible-playbook", "-e", "x='a b'"]
    script = argv[7]
    for d in ("/proc", "/dev", "/sys", "/tmp"):
        assert f'mount --rbind {d} "$r"{d}' in script
    assert 'mkdir -p "$r"/work/main && mount --bind /work/main "$r"/work/main' in script
    assert "/tmp" not in pyroot.namespace_script(Path("/r"), [], host_tmp=False)


def _stub_tools(tmp_path: Path) -> tuple[Path, Path]:
    """``mount`` that only logs, and ``chroot`` that logs and runs its command here."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    log = tmp_path / "calls.log"
    (stubs / "mount").write_text(f'#!/bin/sh\necho "mount $*" >> {log}\n')
    (stubs / "chroot").write_text(f'#!/bin/sh\necho "chroot $1" >> {log}\nshift\nexec "$@"\n')
    for f in stubs.iterdir():
        f.chmod(0o755)
    return stubs, log


def test_the_script_binds_then_runs_the_command_verbatim_in_the_directory(tmp_path):
    stubs, log = _stub_tools(tmp_path)
    root = tmp_path / "a root"
    root.mkdir()
    share = tmp_path / "with space"
    (share / "sub").mkdir(parents=True)
    script = pyroot.namespace_script(root, [share])
    # the script without unshare: mount and chroot are the stubs above
    out = subprocess.run(["/bin/sh", "-c", script, "pyroot", str(share / "sub"), "sh", "-c",
                          'pwd; printf "<%s>" "$@"; exit 3', "x", "two words", "$HOME", ""],
                         env={"PATH": f"{stubs}:/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert out.returncode == 3, out.stderr
    assert out.stdout == f"{share / 'sub'}\n<two words><$HOME><>"
    calls = log.read_text().splitlines()
    assert calls[:4] == [f"mount --rbind {d} {root}{d}" for d in ("/proc", "/dev", "/sys", "/tmp")]
    assert f"mount --bind {share} {root}{share}" in calls
    assert calls[-1] == f"chroot {root}"
    assert (root / str(share).lstrip("/")).is_dir()    # the mount point made inside


def test_a_directory_the_root_cannot_enter_is_125(tmp_path):
    stubs, _ = _stub_tools(tmp_path)
    script = pyroot.namespace_script(tmp_path, [])
    out = subprocess.run(["/bin/sh", "-c", script, "pyroot", str(tmp_path / "nowhere"), "true"],
                         env={"PATH": f"{stubs}:/usr/bin:/bin"}, capture_output=True, text=True, check=False)
    assert out.returncode == pyroot.NOT_RUNNABLE


def test_the_environment_passes_with_the_venv_first(tmp_path):
    other = tmp_path / "venv"
    (other / "bin").mkdir(parents=True)
    (other / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = pyroot.run_env({"PATH": f"{other}/bin:/root/.cache/bcd-ansible/bin:/usr/bin", "KUBECONFIG": "/k",
                          "ANSIBLE_CONFIG": "/work/main/ansible.cfg", "PYTHONHOME": "/usr",
                          "LANG": "en_US.UTF-8", "LC_ALL": "C.UTF-8"}, "2.21")
    assert env["PATH"].split(":") == ["/opt/venvs/core-2.21/bin", "/root/.cache/bcd-ansible/bin", "/usr/bin",
                                      "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/sbin", "/bin"]
    assert env["KUBECONFIG"] == "/k" and env["ANSIBLE_CONFIG"] == "/work/main/ansible.cfg"
    assert env["VIRTUAL_ENV"] == "/opt/venvs/core-2.21" and "PYTHONHOME" not in env
    assert env["LANG"] == "C.UTF-8" and env["LC_ALL"] == "C.UTF-8"   # the root has no en_US
    assert pyroot.run_env({"PATH": "/bin"}, "2.19")["LANG"] == "C.UTF-8"


def test_the_checkout_and_the_cache_are_seen_at_their_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(pyroot, "_git_top", lambda cwd: tmp_path / "co")
    binds = pyroot.default_binds(tmp_path / "co" / "sub", [tmp_path / "co" / "inside", tmp_path / "extra"])
    assert tmp_path / "co" in binds and tmp_path / "cache" / "bcd-ansible" in binds and tmp_path / "extra" in binds
    assert tmp_path / "co" / "inside" not in binds          # already seen through the checkout
    assert [len(b.parts) for b in binds] == sorted(len(b.parts) for b in binds)


# ---------------------------------------------------------------------------- the command


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"no_probe": False, "force": False, "core": None, "bind": None, "command": [], **kw})


def test_run_says_125_when_the_root_cannot_run_it(checkout, monkeypatch, capsys):
    monkeypatch.setattr(pyroot, "CHECKOUT", checkout)
    monkeypatch.setattr(pyroot, "current", lambda checkout=checkout: pyroot.Root("e" * 16, pyroot.roots_dir()))
    monkeypatch.setattr(pyroot.os, "geteuid", lambda: 0)
    assert pyroot.main(_args(pyroot_cmd="run", core="2.18", command=["--", "true"])) == 125
    assert "no venv for ansible-core '2.18'" in capsys.readouterr().err
    assert pyroot.main(_args(pyroot_cmd="run", core="2.21", command=["--"])) == 125
    assert "no command given" in capsys.readouterr().err
    assert pyroot.main(_args(pyroot_cmd="run", core="2.21", command=["--", "true"])) == 125
    assert "pyroot: not built: no root in" in capsys.readouterr().err


def test_path_says_where_and_whether_built(checkout, monkeypatch, capsys):
    monkeypatch.setattr(pyroot, "current", lambda checkout=checkout: pyroot.Root("e" * 16, pyroot.roots_dir()))
    assert pyroot.main(_args(pyroot_cmd="path")) == 2
    assert capsys.readouterr().out.strip().endswith(f"roots/trixie-{'e' * 16}")
    fake_built(pyroot.current())
    assert pyroot.main(_args(pyroot_cmd="path", core="2.22")) == 0
    assert capsys.readouterr().out.strip() == "/opt/venvs/core-2.22"
