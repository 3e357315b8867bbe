"""The kubeconfig data the kubernetes client writes as files (CA, client certificate, client key)
go with the process that wrote them (bcd_tmp.private_dir), also from an Ansible worker, which
ends with ``os._exit`` and so never runs the client's own ``atexit`` clean-up."""

from __future__ import annotations

import base64
import multiprocessing
import os
import stat
import tempfile
import uuid

import pytest
import yaml
from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_kube, bcd_tmp

FORK = multiprocessing.get_context("fork")  # how ansible-core starts its workers


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    """An empty temporary directory for everything tempfile makes here and in forked children; no
    files directory made yet in this process."""
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    monkeypatch.setattr(bcd_tmp, "_DIR", None)
    monkeypatch.setattr(bcd_tmp, "RUN_PROCESS", False)  # a module's process, unless a test says
    return where


@pytest.fixture
def kubeconfig(tmp_path):
    """A kubeconfig that embeds its CA, client certificate and client key, as kind's and kubeadm's
    do. The data is unique to the test: the client reuses the files of data it wrote before."""
    mark = uuid.uuid4().hex

    def data(kind: str, what: str) -> str:
        return base64.b64encode(f"-----BEGIN {kind}-----\n{what} {mark}\n-----END {kind}-----\n".encode()).decode()

    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://c.example:6443",
                                               "certificate-authority-data": data("CERTIFICATE", "ca")}}],
        "users": [{"name": "u", "user": {"client-certificate-data": data("CERTIFICATE", "client"),
                                         "client-key-data": data("PRIVATE KEY", "client")}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _files(where) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), where) for d, _, fs in os.walk(where) for f in fs)


def _client_in_worker(kubeconfig: str, out, hard_exit: bool) -> None:
    try:
        client = bcd_kube.api_client(kubeconfig, "c")
        key = client.configuration.key_file
        with open(key, encoding="utf-8") as f:
            out.put((key, "PRIVATE KEY" in f.read()))
    except Exception as exc:  # noqa: BLE001 - the test says it, not a queue timeout
        out.put((repr(exc), False))
    if hard_exit:
        out.close()
        out.join_thread()  # the queue's feeder thread sends before the process goes
        os._exit(1)  # a worker killed, or ended by ansible-core's _hard_exit


def _run_worker(kubeconfig: str, hard_exit: bool = False) -> tuple[str, bool, int]:
    out = FORK.Queue()
    worker = FORK.Process(target=_client_in_worker, args=(kubeconfig, out, hard_exit))
    worker.start()
    key, is_key = out.get(timeout=60)
    worker.join(timeout=60)
    return key, is_key, worker.exitcode


def test_a_worker_leaves_no_copy_of_the_client_key(tmp, kubeconfig):
    key, is_key, exitcode = _run_worker(kubeconfig)
    assert (is_key, exitcode) == (True, 0)
    assert key.startswith(str(tmp) + os.sep), key
    assert _files(tmp) == []
    assert os.listdir(tmp) == []


def test_what_a_killed_worker_left_goes_with_the_run(tmp, kubeconfig):
    run_dir = bcd_tmp.private_dir()  # made before the fork, as the stdout callback's preload does
    key, is_key, exitcode = _run_worker(kubeconfig, hard_exit=True)
    assert (is_key, exitcode) == (True, 1)
    assert os.path.commonpath([key, run_dir]) == run_dir, "the worker's directory is inside the run's"
    assert len(_files(tmp)) == 3, "CA, client certificate and key, left by the worker's os._exit"
    bcd_tmp.remove()
    assert os.listdir(tmp) == []


def test_the_directory_is_the_process_own(tmp):
    where = bcd_tmp.private_dir()
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700
    assert bcd_tmp.private_dir() == where, "one directory per process"
    bcd_tmp.remove()
    assert not os.path.exists(where)
    bcd_tmp.remove()  # idempotent


def _module_task_under_mitogen(kubeconfig: str, out) -> None:
    """Two module runs in one process kept between tasks, each under mitogen's own atexit
    interception, the process then ended by ``os._exit``: what mitogen's strategy does."""
    from ansible_mitogen.runner import AtExitWrapper

    try:
        seen = []
        for _ in range(2):
            wrapper = AtExitWrapper()
            try:
                client = bcd_kube.api_client(kubeconfig, "c")
                with open(client.configuration.key_file, encoding="utf-8") as f:
                    seen.append("PRIVATE KEY" in f.read())
            finally:
                wrapper.revert()
            wrapper.run_callbacks()  # the task's end
            seen.append(os.path.exists(client.configuration.key_file))
        out.put((repr(seen), seen == [True, False, True, False]))
    except Exception as exc:  # noqa: BLE001 - the test says it, not a queue timeout
        out.put((repr(exc), False))
    out.close()
    out.join_thread()
    os._exit(0)


def test_a_module_process_kept_between_tasks_removes_its_files_at_each_task_end(tmp, kubeconfig):
    pytest.importorskip("ansible_mitogen.runner")
    out = FORK.Queue()
    worker = FORK.Process(target=_module_task_under_mitogen, args=(kubeconfig, out))
    worker.start()
    seen, ok = out.get(timeout=60)
    worker.join(timeout=60)
    assert ok, f"key readable during the task, gone after it, twice: {seen}"
    assert os.listdir(tmp) == []


def test_ansible_playbook_and_its_workers_register_no_atexit_removal(tmp, monkeypatch):
    registered = []
    monkeypatch.setattr(bcd_tmp.atexit, "register", lambda *a, **k: registered.append(a))
    monkeypatch.setattr(bcd_tmp, "RUN_PROCESS", True)
    bcd_tmp.private_dir()
    assert registered == [], "inherited by a child forked outside multiprocessing, it would take this directory"
    bcd_tmp.remove()
    monkeypatch.setattr(bcd_tmp, "RUN_PROCESS", False)
    where = bcd_tmp.private_dir()
    assert registered == [(bcd_tmp.shutil.rmtree, where, True)]
    bcd_tmp.remove()
