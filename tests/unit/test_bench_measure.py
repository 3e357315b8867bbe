"""bench.measure: the peak PSS of a command's process tree, and which processes held it."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import measure

ROOT = Path(__file__).resolve().parents[2]


def test_the_peak_names_the_process_that_held_it(tmp_path):
    """A child that holds 64 MiB of touched pages is the peak's largest process, by its command
    line, and the run's log says so first."""
    hold = "import time; x = bytearray(64 * 2**20); x[::4096] = b'a' * len(x[::4096]); time.sleep(1.5)"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {hold!r}])"
    log = tmp_path / "run.log"
    m = measure.run([sys.executable, "-c", parent], {}, ROOT, 60, log)
    assert m.returncode == 0
    assert m.peak_pss_mb > 64, m.peak_pss_mb
    (biggest, command), *_ = m.peak_tree
    assert biggest > 60 and "bytearray(64" in command, m.peak_tree
    assert 0 < m.peak_at < m.seconds
    head = log.read_text().splitlines()[2:4]
    assert head[0].startswith(f"# peak PSS {m.peak_pss_mb:.1f} MiB at "), head
    assert "bytearray(64" in head[1], head


def test_cpu_counts_a_grandchild_and_not_its_sleep(tmp_path):
    """A grandchild that spins for about a second counts; the parent's sleep does not."""
    spin = "import time; t = time.process_time()\nwhile time.process_time() - t < 1.0: pass"
    parent = f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {spin!r}]); time.sleep(1)"
    log = tmp_path / "run.log"
    m = measure.run([sys.executable, "-c", parent], {}, ROOT, 60, log)
    assert m.returncode == 0
    assert 1.0 <= m.cpu_s < m.seconds - 0.5, (m.cpu_s, m.seconds)
    assert f"CPU {m.cpu_s:.1f}s" in log.read_text().splitlines()[1]
