"""Run one command and measure it: wall time and the peak memory of its process tree.

Memory is sampled from /proc every ``interval`` seconds over the command and all its
descendants (ansible-playbook forks a worker per task, which runs the module in its own
Python): the peak of the tree's summed RSS (resident pages, shared pages counted once per
process, so an upper bound) and of its summed PSS (proportional set size: shared pages divided
among the processes sharing them, so what the tree really holds). Linux only.
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Measured:
    """What :func:`run` measured. ``seconds`` wall time; memory in MiB; ``load`` the 1-minute
    load average at the start and the end."""

    argv: list[str]
    returncode: int
    seconds: float
    peak_rss_mb: float
    peak_pss_mb: float
    stdout: str
    stderr: str
    load: tuple[float, float] = (0.0, 0.0)
    samples: int = 0
    extra: dict = field(default_factory=dict)
    # the sample with the peak PSS: seconds after the start, and (PSS MiB, command) per process
    peak_at: float = 0.0
    peak_tree: list[tuple[float, str]] = field(default_factory=list)
    # CPU seconds (user + system) of the whole tree: each process counts once its parent has
    # waited for it, as ansible-playbook waits for its workers and they for their modules
    cpu_s: float = 0.0


def _children() -> dict[int, list[int]]:
    """ppid -> pids, from /proc/<pid>/stat."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses: split after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def tree(root: int) -> list[int]:
    """``root`` and every descendant alive now."""
    kids = _children()
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    return seen


def _command(pid: int) -> str:
    """The command line of ``pid``, shortened (a module run shows as its AnsiballZ file)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [os.path.basename(a.decode(errors="replace")) if a.startswith(b"/") else a.decode(errors="replace")
             for a in argv if a]
    return " ".join(words)[:120] or "?"


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in bytes; (0, 0) when it is gone."""
    rss = pss = 0
    try:
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    return rss, pss


class TreeSampler(threading.Thread):
    """Samples the memory of the process tree under ``pid`` until :meth:`stop`."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True, name=f"sampler-{pid}")
        self.pid = pid
        self.interval = interval
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_at = 0.0
        self.peak_tree: list[tuple[float, str]] = []
        self.samples = 0
        self.started = time.monotonic()
        self._halt = threading.Event()

    def sample(self) -> None:
        rss = pss = 0
        each = []
        for pid in tree(self.pid):
            r, p = _memory(pid)
            rss += r
            pss += p
            each.append((pid, p))
        self.peak_rss = max(self.peak_rss, rss)
        if pss > self.peak_pss:
            # what held the peak: read the command lines only then (the processes may be gone)
            self.peak_pss, self.peak_at = pss, time.monotonic() - self.started
            self.peak_tree = sorted(((p / 2**20, _command(pid)) for pid, p in each), reverse=True)
        self.samples += 1

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _children_cpu() -> float:
    """CPU seconds of this process's children (and theirs) waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float, log: Path | None = None) -> Measured:
    """Run ``argv``; measure it. Output is captured (and written to ``log`` when given). Run one
    command at a time: the CPU figure is this process's children's, before and after."""
    load0 = os.getloadavg()[0]
    cpu0 = _children_cpu()
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\nbench: killed after {timeout:g}s"
    seconds = time.monotonic() - started
    cpu = _children_cpu() - cpu0
    sampler.stop()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        peak = "".join(f"#   {mb:7.1f} MiB  {cmd}\n" for mb, cmd in sampler.peak_tree)
        log.write_text(f"$ {' '.join(argv)}\n# exit {proc.returncode} after {seconds:.1f}s, CPU {cpu:.1f}s\n"
                       f"# peak PSS {sampler.peak_pss / 2**20:.1f} MiB at {sampler.peak_at:.1f}s, by process:\n{peak}"
                       f"{stdout}\n--- stderr\n{stderr}")
    return Measured(argv=argv, returncode=proc.returncode, seconds=seconds, peak_rss_mb=sampler.peak_rss / 2**20,
                    peak_pss_mb=sampler.peak_pss / 2**20, stdout=stdout, stderr=stderr,
                    load=(load0, os.getloadavg()[0]), samples=sampler.samples, peak_at=sampler.peak_at,
                    peak_tree=sampler.peak_tree, cpu_s=cpu)
