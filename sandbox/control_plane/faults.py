"""Fault injection and request counters of the emulator (for reliability tests and the benchmark).

Faults are one JSON object; every member is optional (absent: no such fault)::

    {
      "errorRate": 0.5,          # share 0..1 of matching requests answered with errorStatus
      "errorCount": 3,           # or/and: the next N matching requests (counts down to 0)
      "errorStatus": 503,        # 429, 500, 502, 503 (default) or 504
      "retryAfter": 1,           # seconds in Retry-After (429 always has one, default 1)
      "procedures": ["joinTokens.create"],  # which requests errors and latency hit; absent or
                                            # []: all, "discovery" names the well-known document
      "latencySeconds": 0.2,     # added before answering a matching request
      "outageSeconds": 10,       # from now on, stop answering for this long (see outageMode)
      "outageMode": "hang",      # "hang": requests are held, unanswered, until the outage ends
                                 #   (a client with a shorter timeout sees a timeout), then
                                 #   answered; "reset": every new connection is closed right
                                 #   after the TLS handshake (the client sees a reset/EOF)
      "refuseJoin": {"gpu-node-2": "maintenance"}, # Node name -> reason: its join is refused
                                                   # (reason code Refused, the text as message)
      "muteReports": ["gpu-node-1"],  # Nodes whose bcd stops reporting though its pod runs (a
                                      # gateway the node cannot reach): offline after the grace
      "crashLoop": {"gpu-node-2": "panic: nvml: driver/library version mismatch"},
                                 # Node name -> termination message (a list of names: a default
                                 # one): its bcd pod's bcd container crash-loops as a kubelet shows
                                 # it (exit 1, Error, then CrashLoopBackOff, restartCount growing
                                 # with back-off, lastState.terminated with the message), never
                                 # Ready; lifted, the next restart runs and turns Ready (join.py)
      "offlineGraceSeconds": 600  # the control plane's offline grace, instead of the seed's
                                  # offline_grace_seconds (a production control plane's is
                                  # minutes: a crash-looping node stays `adopting` that long)
    }

Reading the faults gives the same object with ``outageRemaining`` (seconds) instead of
``outageSeconds``. They can be set at start (``serve --faults JSON``, ``$BCD_CP_FAULTS``) and
through the admin endpoint (see admin.py).

Counters: ``{"requests": {procedure: n}, "responses": {procedure: {status: n}}, "total": n,
"faulted": n, "joins": {"joined": n, "rejoined": n, "refused": {reason: n}}}``; every request
to the API port counts, faulted ones too, under its procedure name (``discovery`` for the
well-known document, ``other`` for anything else; ``(reset)`` counts connections an outage in
``reset`` mode closed before any request was read).
"""

from __future__ import annotations

import copy
import random
import threading
import time

ERROR_STATUSES = {429: "RATE_LIMITED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "UNAVAILABLE"}
KNOWN = ("errorRate", "errorCount", "errorStatus", "retryAfter", "procedures", "latencySeconds", "outageSeconds",
         "outageMode", "refuseJoin", "muteReports", "crashLoop", "offlineGraceSeconds")
CRASH_MESSAGE = "bcd exited: crash-loop fault injected by the sandbox"


class FaultError(ValueError):
    """An invalid fault specification; the message names the member and the rule."""


def _number(spec: dict, key: str, lo: float, hi: float, integer: bool = False):
    value = spec[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise FaultError(f"{key}: must be {'an integer' if integer else 'a number'} from {lo:g} to {hi:g}")
    if not lo <= value <= hi:
        raise FaultError(f"{key}: must be from {lo:g} to {hi:g}")
    return value


def validate(spec: object) -> dict:
    """Check a (partial) fault object; return it normalised. Raises FaultError."""
    if not isinstance(spec, dict):
        raise FaultError("faults must be a JSON object")
    unknown = sorted(set(spec) - set(KNOWN))
    if unknown:
        raise FaultError(f"unknown member(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    out: dict = {}
    for key, lo, hi, integer in (("errorRate", 0, 1, False), ("errorCount", 0, 1_000_000, True),
                                 ("retryAfter", 0, 3600, True), ("latencySeconds", 0, 600, False),
                                 ("outageSeconds", 0, 3600, False), ("offlineGraceSeconds", 1, 86400, False)):
        if key in spec:
            out[key] = _number(spec, key, lo, hi, integer)
    if "errorStatus" in spec:
        if spec["errorStatus"] not in ERROR_STATUSES or isinstance(spec["errorStatus"], bool):
            raise FaultError(f"errorStatus: must be one of {', '.join(map(str, ERROR_STATUSES))}")
        out["errorStatus"] = spec["errorStatus"]
    if "procedures" in spec:
        procs = spec["procedures"]
        if procs is None:
            procs = []
        if not isinstance(procs, list) or not all(isinstance(p, str) and p for p in procs):
            raise FaultError("procedures: must be a list of procedure names")
        out["procedures"] = procs
    if "outageMode" in spec:
        if spec["outageMode"] not in ("hang", "reset"):
            raise FaultError("outageMode: must be hang or reset")
        out["outageMode"] = spec["outageMode"]
    if "refuseJoin" in spec:
        refuse = spec["refuseJoin"] or {}
        if isinstance(refuse, list):
            refuse = {name: "refused by fault injection" for name in refuse}
        if not isinstance(refuse, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in refuse.items()):
            raise FaultError("refuseJoin: must map Node names to a reason (text), or list Node names")
        out["refuseJoin"] = dict(refuse)
    if "crashLoop" in spec:
        crash = spec["crashLoop"] or {}
        if isinstance(crash, list):
            crash = dict.fromkeys(crash, CRASH_MESSAGE)
        if not isinstance(crash, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in crash.items()):
            raise FaultError("crashLoop: must map Node names to a termination message (text), or list Node names")
        out["crashLoop"] = dict(crash)
    if "muteReports" in spec:
        muted = spec["muteReports"] or []
        if not isinstance(muted, list) or not all(isinstance(n, str) for n in muted):
            raise FaultError("muteReports: must list Node names")
        out["muteReports"] = sorted(set(muted))
    return out


class Faults:
    """The current faults and the counters; thread-safe (the API, admin and joiner share it)."""

    def __init__(self, initial: dict | None = None):
        self._lock = threading.Lock()
        self._spec: dict = {}
        self._outage_until = 0.0
        self._rng = random.Random()  # noqa: S311 - fault injection, not crypto
        self.reset_counters()
        if initial:
            self.replace(initial)

    # -- faults --------------------------------------------------------------------------------

    def replace(self, spec: object) -> dict:
        checked = validate(spec)
        with self._lock:
            self._spec = {}
            self._outage_until = 0.0
            self._apply(checked)
        return self.get()

    def patch(self, spec: object) -> dict:
        checked = validate(spec)
        with self._lock:
            self._apply(checked)
        return self.get()

    def clear(self) -> dict:
        return self.replace({})

    def _apply(self, checked: dict) -> None:
        for key, value in checked.items():
            if key == "outageSeconds":
                self._outage_until = time.monotonic() + value if value else 0.0
            elif value is None:
                self._spec.pop(key, None)
            else:
                self._spec[key] = value

    def get(self) -> dict:
        with self._lock:
            spec = copy.deepcopy(self._spec)
            remaining = max(0.0, self._outage_until - time.monotonic())
        spec["outageRemaining"] = round(remaining, 3)
        spec.setdefault("outageMode", "hang")
        return spec

    def _matches(self, procedure: str) -> bool:
        procs = self._spec.get("procedures") or []
        return not procs or procedure in procs

    def outage(self) -> tuple[float, str]:
        """(seconds of outage left, mode)."""
        with self._lock:
            return max(0.0, self._outage_until - time.monotonic()), self._spec.get("outageMode", "hang")

    def decide(self, procedure: str) -> tuple[float, int | None, int | None]:
        """For one request: (latency seconds, error status or None, Retry-After seconds or None)."""
        with self._lock:
            if not self._matches(procedure):
                return 0.0, None, None
            latency = float(self._spec.get("latencySeconds") or 0.0)
            fail = False
            count = self._spec.get("errorCount") or 0
            if count > 0:
                fail = True
                self._spec["errorCount"] = count - 1
            elif self._spec.get("errorRate"):
                fail = self._rng.random() < self._spec["errorRate"]
            if not fail:
                return latency, None, None
            status = self._spec.get("errorStatus", 503)
            retry_after = self._spec.get("retryAfter")
            if status == 429 and retry_after is None:
                retry_after = 1
            return latency, status, retry_after

    def join_refusal(self, node_name: str) -> str | None:
        with self._lock:
            return (self._spec.get("refuseJoin") or {}).get(node_name)

    def crash_loop(self, node_name: str) -> str | None:
        """The termination message of the node's crash-looping bcd container (``crashLoop``), or None."""
        with self._lock:
            return (self._spec.get("crashLoop") or {}).get(node_name)

    def offline_grace(self, default: float) -> float:
        """Seconds without a report before a node is ``offline``: ``offlineGraceSeconds``, else ``default``."""
        with self._lock:
            return float(self._spec.get("offlineGraceSeconds") or default)

    def muted(self, node_name: str) -> bool:
        """Whether the node's reports are held back (``muteReports``)."""
        with self._lock:
            return node_name in (self._spec.get("muteReports") or [])

    # -- counters ------------------------------------------------------------------------------

    def reset_counters(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self._requests: dict[str, int] = {}
            self._responses: dict[str, dict[str, int]] = {}
            self._faulted = 0
            self._joins = {"joined": 0, "rejoined": 0, "refused": {}}

    def count_request(self, procedure: str) -> None:
        with self._lock:
            self._requests[procedure] = self._requests.get(procedure, 0) + 1

    def count_response(self, procedure: str, status: int, faulted: bool = False) -> None:
        with self._lock:
            by = self._responses.setdefault(procedure, {})
            by[str(status)] = by.get(str(status), 0) + 1
            self._faulted += int(faulted)

    def count_join(self, outcome: str, reason: str | None = None) -> None:
        with self._lock:
            if outcome == "refused":
                self._joins["refused"][reason] = self._joins["refused"].get(reason, 0) + 1
            else:
                self._joins[outcome] += 1

    def counters(self) -> dict:
        with self._lock:
            return {
                "requests": dict(self._requests),
                "responses": copy.deepcopy(self._responses),
                "total": sum(self._requests.values()),
                "faulted": self._faulted,
                "joins": copy.deepcopy(self._joins),
            }
