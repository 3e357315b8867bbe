"""Start, stop and report the control-plane emulator as a sandbox component.

``python -m sandbox up`` calls :func:`start` once the cluster is healthy, ``down`` calls
:func:`stop` and ``status`` calls :func:`status`. The emulator runs as the sandbox process
``control-plane`` (``python -m sandbox.control_plane serve``), started through sandbox.proc.
"""

from __future__ import annotations

from pathlib import Path

NAME = "control-plane"


def start(sdir: Path, kubeconfig: Path) -> None:
    """Start the emulator for the sandbox at ``sdir`` (not yet implemented: a no-op)."""


def stop(sdir: Path) -> None:
    """Stop the emulator of the sandbox at ``sdir``."""
    from sandbox import proc

    proc.stop(sdir, NAME)


def status(sdir: Path) -> dict:
    """``{"running": bool}`` for the emulator of the sandbox at ``sdir``."""
    from sandbox import proc

    return {"running": proc.running(sdir, NAME)}
