"""The left_behind callback's interruption handlers, where ansible-playbook forks its workers
or the garbage collector closes their pipes.

A signal handler runs wherever the main thread is. A signal that arrives while a worker is
forked is handled inside an at-fork hook, and one that arrives while a finalizer (``__del__``)
runs, inside it: there Python drops the handler's exception (printed as "Exception ignored
in ..."). One that arrives in the ``__exit__`` of ansible-core's templating contexts leaves them
out of order, and ansible-playbook ends on an unexpected exception; one that arrives while its
strategy replaces a worker it closed makes ansible-core's own handler fail on that worker. A
scripted process stands in for ansible-playbook: it installs the callback's handlers over a
SIGINT handler that raises KeyboardInterrupt, as ansible-core's TaskQueueManager does, and brings
the signal where each case says (a fork, a finalizer, a context's ``__exit__``, a replacement).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT

SCRIPT = textwrap.dedent("""
    import multiprocessing, os, signal, sys, time
    sys.path.insert(0, {collections!r})
    from ansible_collections.bcd.kubernetes.plugins.callback.left_behind import CallbackModule

    workers = []  # the TaskQueueManager's worker processes

    def tqm(signum, frame):  # ansible-core's TaskQueueManager handler, in short
        signal.signal(signum, signal.SIG_DFL)
        for worker in workers:  # it signals each live worker first
            if worker is not None and worker.is_alive():
                os.kill(worker.pid, signum)
        raise KeyboardInterrupt()

    signal.signal(signal.SIGINT, tqm)
    signal.signal(signal.SIGTERM, tqm)
    callback = CallbackModule()
    callback._at_exit = lambda: None
    callback.v2_playbook_on_start(None)
    where = sys.argv[1]

    def interrupted_after(what, step):  # run the step where the signal comes, then a while longer
        try:
            step()
            time.sleep(2)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted after " + what + ", signal", callback._signal)
        sys.exit(0)
    sig = getattr(signal, sys.argv[2])
    if where == "stuck":
        import ansible_collections.bcd.kubernetes.plugins.callback.left_behind as left_behind
        left_behind.STALL_SECONDS = 1.0
        queue_lock = multiprocessing.Lock()  # a results queue's lock a worker took and never released
        queue_lock.acquire()
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
        except KeyboardInterrupt:
            print("interrupted, cleaning up", flush=True)
            queue_lock.acquire()  # ansible-playbook's clean-up, blocked for good
        print("ended by itself")
        sys.exit(0)
    if where == "finalizer":
        class Pipe:  # a worker's pipe, closed by the garbage collector
            def __del__(self):
                os.kill(os.getpid(), sig)
                time.sleep(0.2)  # the handler runs here, inside __del__
        interrupted_after("the finalizer", Pipe)  # made and dropped at once
    if where == "templating":
        # the signal arrives inside the __exit__ of ansible-core's templating contexts
        from ansible._internal._templating import _access
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar, trust_as_template
        unregister = _access.AnsibleAccessContext._unregister_interest
        sent = []

        def signalled(self, context):
            if not sent:
                sent.append(sig)
                os.kill(os.getpid(), sig)
                time.sleep(0.05)  # the handler runs here, inside the context's __exit__
            return unregister(self, context)

        _access.AnsibleAccessContext._unregister_interest = signalled
        templar = Templar(loader=DataLoader(), variables={{"x": 1}})
        interrupted_after("the context", lambda: templar.template(trust_as_template("{{{{ x }}}}")))
    if where == "closed":
        # ansible-core's strategy closes a finished worker, then makes its replacement: a stand-in
        # of its _queue_task, compiled as from its file, gets the signal in between
        import ansible
        done = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
        done.start()
        done.join()
        workers.append(done)
        source = (
            "class Strategy:\\n"
            "    def __init__(self, workers):\\n"
            "        self._workers = workers\\n"
            "    def _queue_task(self):\\n"
            "        worker_prc = self._workers[0]\\n"
            "        worker_prc.close()\\n"
            "        os.kill(os.getpid(), sig)\\n"
            "        time.sleep(0.05)  # the handler runs here, the closed worker still listed\\n"
            "        self._workers[0] = None\\n")
        where_from = os.path.join(os.path.dirname(ansible.__file__), "plugins", "strategy", "__init__.py")
        scope = {{"os": os, "time": time, "sig": sig}}
        exec(compile(source, where_from, "exec"), scope)
        interrupted_after("the replacement", scope["Strategy"](workers)._queue_task)
    if where == "parent":
        os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), sig))
    else:
        os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), sig))
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(1,))
    try:
        child.start()
        time.sleep(2)
        child.join()
        print("child exit", child.exitcode)
        print("not interrupted")
    except KeyboardInterrupt:
        child.join()
        print("interrupted after the fork, signal", callback._signal)
""")


def _run(where: str, sig: str) -> subprocess.CompletedProcess:
    script = SCRIPT.format(collections=str(ROOT / "collections"))
    return subprocess.run([sys.executable, "-c", script, where, sig], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize(("where", "after"), [("parent", "the fork"), ("finalizer", "the finalizer"),
                                              ("templating", "the context"), ("closed", "the replacement")])
def test_a_signal_where_an_exception_must_not_land_interrupts_the_run_once_that_is_over(where, after, sig):
    run = _run(where, sig)
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    said = "SIGTERM" if sig == "SIGTERM" else "SIGINT (Ctrl-C)"
    assert f"interrupted after {after}, signal {said}" in run.stdout, run.stdout + run.stderr


def test_a_worker_signalled_before_it_has_its_own_handlers_ends_silently():
    run = _run("child", "SIGTERM")
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert "child exit -15" in run.stdout and "not interrupted" in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_an_interrupted_run_stuck_in_its_clean_up_is_ended(sig):
    run = _run("stuck", sig)
    assert "interrupted, cleaning up" in run.stdout, run.stdout + run.stderr
    assert "did not end within 1s of the interruption" in run.stdout, run.stdout + run.stderr
    assert run.returncode == 99 and "ended by itself" not in run.stdout, (run.returncode, run.stdout + run.stderr)
