"""What a runtime's own answer means for GPU isolation, as the judge's rules say it must: shared by
the differential tests against real containerd and real CRI-O."""

from __future__ import annotations

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_gpu_isolation import (
    EXPOSED,
    ISOLATED,
    NOT_READY,
    READY,
)

from tests.containerd_configs import OPERATOR_TOOLKIT, PACKAGES_TOOLKIT


def _nvidia(binary: str) -> bool:
    base = binary.rsplit("/", 1)[-1]
    return base.startswith("nvidia-container-runtime") and not base.startswith("nvidia-container-runtime-hook")


def of_handlers(runtimes: dict[str, str], files: dict[str, str]) -> tuple[str, str]:
    """(verdict, readiness) of the handlers a runtime runs (name -> binary) on a generated root
    (``files``): ``exposed`` when one runs the NVIDIA runtime and the toolkit configuration it
    reads is missing (the generators write only key = false ones), else ``isolated``; ``ready``
    when the ``nvidia`` handler runs the NVIDIA runtime."""
    exposed = False
    for binary in runtimes.values():
        if binary and _nvidia(binary):
            toolkit = OPERATOR_TOOLKIT if binary.rsplit("/", 1)[0].endswith("/toolkit") else PACKAGES_TOOLKIT
            exposed = exposed or toolkit not in files
    nvidia = runtimes.get("nvidia")
    return (EXPOSED if exposed else ISOLATED), (READY if nvidia and _nvidia(nvidia) else NOT_READY)
