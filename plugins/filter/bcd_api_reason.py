# Copyright: bcd-ansible contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: the API server's own reason inside a failed kubernetes.core task's message."""

from __future__ import annotations

import json
import re

# kubernetes.core quotes the client's exception whole: "...HTTP response body: {<a Status>}..."
_BODY = re.compile(r"HTTP response body:\s*(\{.*\})", re.S)


def bcd_api_reason(msg, limit: int = 300) -> str:
    """The ``message`` of the Kubernetes ``Status`` that ``msg`` (a failed kubernetes.core task's
    ``msg``) quotes, such as ``clusterpolicies.nvidia.com is forbidden: User "x" cannot list ...``
    for a 403; else the first line of ``msg``. At most ``limit`` characters (``...`` ends a longer
    one); ``""`` for an empty or missing message."""
    text = "" if msg is None else str(msg)
    reason = ""
    found = _BODY.search(text)
    if found:
        try:
            status = json.JSONDecoder().raw_decode(found.group(1))[0]
        except ValueError:
            status = None
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            reason = status["message"]
    if not reason:
        reason = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return reason if len(reason) <= limit else reason[: max(limit - 3, 0)] + "..."


class FilterModule:
    def filters(self):
        return {"bcd_api_reason": bcd_api_reason}
