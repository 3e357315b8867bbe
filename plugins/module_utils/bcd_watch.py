"""Follow Kubernetes objects as they change: list once, then watch from the list's resourceVersion.

The API's own way to learn of changes without polling
(https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
a list (every page) gives the objects and a ``resourceVersion``; a watch from it streams each
change after it (``ADDED``, ``MODIFIED``, ``DELETED``, and ``BOOKMARK`` events that only move
the resourceVersion on, asked for with ``allowWatchBookmarks``). The server ends each watch
after ``timeoutSeconds``; the next one starts where it ended. A resourceVersion the server no
longer keeps is answered ``410 Gone`` (an ``ERROR`` event, or the HTTP status): the objects are
listed again, as they are when a watch drops (a connection error).

:class:`Follow` does that in a thread, so a wait learns of each change when it happens and
lists the objects once, not at every poll. It uses the ``ApiClient`` of a
:class:`bcd_kube.Kube` (raw requests, not the client's typed ``watch.Watch``, whose import
brings in every typed API class).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_kube import Kube, KubeError

# Seconds one watch request lasts at most (the server ends it then; the next starts from there).
WATCH_MAX = 60
# Seconds to wait before listing again after a watch dropped (so a down API is not hammered).
RELIST_PAUSE = 0.5


# Seconds a parked Follow keeps watching for the next module run of the same wait (park()).
PARK_GRACE = 30.0
# True while a module runs in the controller's worker process (plugin_utils/bcd_inprocess.py sets
# it): the next slice of a wait runs in the same process and can take over a parked Follow.
IN_WORKER = False
_PARKED: dict[tuple, Follow] = {}


class Gone(Exception):
    """The server no longer keeps the resourceVersion a watch started from (410 Gone)."""


class Follow:
    """The objects of one list (``path`` with ``query``), kept current by a watch in a thread.

    :meth:`start` lists once (every page, 500 a page, each object through ``keep``) and starts
    the thread, which watches until :meth:`stop` or ``until`` (a ``time.monotonic()`` time).
    :meth:`objects` is a snapshot (uid -> object). ``changed`` (a ``threading.Event``, which
    several Follows may share) is set after each change, and when the thread fails: ``error``
    then holds the :class:`KubeError`. ``lists``, ``relists``, ``watches`` and ``events`` count
    what it did (for the module's result and the tests).
    """

    def __init__(self, kube: Kube, path: str, query: dict | None = None, keep=None,
                 changed: threading.Event | None = None):
        self.kube = kube
        self.path = path
        self.query = dict(query or {})
        self.keep = keep
        self.changed = changed or threading.Event()
        self.error: KubeError | None = None
        self.version: str | None = None
        self.lists = self.relists = self.watches = self.events = 0
        self.first_version: str | None = None  # test hook: the first watch starts here, not at the list
        self.watch_max = WATCH_MAX  # seconds one watch request lasts at most (a long follow may ask more)
        self._items: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp = None
        self._until = 0.0

    # -- use ------------------------------------------------------------------------------------

    def start(self, until: float, thread: bool = True) -> Follow:
        """List now (a :class:`KubeError` is raised here), then follow in a thread until ``until``
        (``thread`` False: list only; :meth:`start_thread` follows later)."""
        self._until = until
        self._list()
        if thread:
            self.start_thread()
        return self

    def start_thread(self) -> None:
        """Follow from the list's resourceVersion, in a thread, until the time given."""
        self._thread = threading.Thread(target=self._run, name=f"bcd-watch {self.path}", daemon=True)
        self._thread.start()

    def objects(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._items)

    def extend(self, until: float) -> None:
        """Follow until ``until`` (later than the time given to :meth:`start`)."""
        self._until = max(self._until, until)

    def stop(self) -> None:
        """End the thread: at once when it waits for an event (its connection is closed)."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            # urllib3 2.3+: unblocks a read in another thread; else the watch ends at its timeoutSeconds
            with contextlib.suppress(Exception):
                resp.response.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def following(self, margin: float = 0.0) -> bool:
        """Whether the thread still follows, without an error, for more than ``margin`` seconds."""
        thread = self._thread
        return (self.error is None and not self._stop.is_set() and thread is not None and thread.is_alive()
                and self._until > time.monotonic() + margin)

    def hold(self, seconds: float) -> None:
        """Follow for ``seconds`` from now, whatever limit was set before (:func:`park`)."""
        self._until = time.monotonic() + seconds

    def check(self) -> None:
        """Raise the thread's :class:`KubeError`, if it failed."""
        if self.error is not None:
            raise self.error

    # -- the thread -----------------------------------------------------------------------------

    def _key(self, obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"

    def _list(self) -> None:
        items: dict[str, dict] = {}
        token, version = None, None
        while True:
            page = self.kube.request("GET", self.path, {**self.query, "limit": 500, "continue": token})
            for obj in page.get("items") or []:
                items[self._key(obj)] = self.keep(obj) if self.keep else obj
            meta = page.get("metadata") or {}
            version = meta.get("resourceVersion") or version
            token = meta.get("continue")
            del page
            if not token:
                break
        with self._lock:
            self._items = items
        self.version = version
        self.lists += 1
        self.changed.set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                left = self._until - time.monotonic()
                if left <= 0.5:
                    return
                try:
                    self._watch(min(left, self.watch_max))
                except Gone:
                    self.relists += 1
                    self._list()
                except KubeError as exc:
                    if self._stop.is_set():
                        return
                    if exc.status is not None:
                        raise  # the server refused the watch (403, ...): listing again would not help
                    # the watch dropped: list again (a list that fails too ends the thread)
                    time.sleep(RELIST_PAUSE)
                    self.relists += 1
                    self._list()
        except KubeError as exc:
            if not self._stop.is_set():
                self.error = exc
                self.changed.set()

    def _watch(self, seconds: float) -> None:
        client = self.kube.client
        version = self.first_version or self.version
        self.first_version = None
        query = {**self.query, "watch": "true", "allowWatchBookmarks": "true", "resourceVersion": version,
                 "timeoutSeconds": max(1, int(seconds))}
        q = [(k, v) for k, v in query.items() if v is not None]
        try:
            _m, url, hdrs, _d, _p = client.param_serialize("GET", self.path, query_params=q,
                                                           header_params={"Accept": "application/json"},
                                                           auth_settings=["BearerToken"])
            self.kube.requests += 1
            self.watches += 1
            # the read timeout outlasts the server's timeoutSeconds: the server ends the stream
            resp = client.call_api("GET", url, header_params=hdrs, _request_timeout=(10, seconds + 15))
        except Exception as exc:  # noqa: BLE001 - urllib3/SSL/socket errors: one line, never a traceback
            raise KubeError(f"watching {self.path}: cannot reach the Kubernetes API: {getattr(exc, 'reason', None) or exc}") from None
        if resp.status == 410:
            raise Gone()
        if not 200 <= resp.status < 300:
            try:
                message = (json.loads(resp.read() or b"{}") or {}).get("message")
            except ValueError:
                message = None
            raise KubeError(f"watching {self.path}: Kubernetes API {resp.status}: {message or resp.reason}", status=resp.status)
        self._resp = resp
        try:
            for line in resp.response:
                if self._stop.is_set():
                    return
                if line.strip():
                    self._event(json.loads(line))
        except (Gone, KubeError):
            raise
        except Exception as exc:  # noqa: BLE001 - a dropped connection or a cut line: the caller lists again
            raise KubeError(f"watching {self.path}: the watch dropped: {exc}") from None
        finally:
            self._resp = None
            with contextlib.suppress(Exception):  # a connection shut down by stop()
                resp.response.release_conn()

    def _event(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeError(f"watching {self.path}: Kubernetes API {obj.get('code')}: {obj.get('message')}",
                            status=obj.get("code"))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            key = self._key(obj)
            with self._lock:
                if kind == "DELETED":
                    self._items.pop(key, None)
                else:
                    self._items[key] = self.keep(obj) if self.keep else obj
            self.events += 1
            self.changed.set()
        if version:
            self.version = version


# After a change, a wait looks again no sooner than this many times as long as its last look took.
PACE = 4.0


def _park_key(kube: Kube, path: str, query: dict | None) -> tuple:
    return (kube.source, kube.client.configuration.host, path, tuple(sorted((query or {}).items())))


def resume(kube: Kube, path: str, query: dict | None, changed: threading.Event) -> Follow | None:
    """The Follow of ``path`` with ``query`` that the previous module run of this wait parked
    (:func:`park`), still watching, now setting ``changed``; None when there is none (a module
    process, the first slice, a thread that ended or failed): the caller lists then.

    A wait the action plugin runs in slices (one module run per progress line) lists its objects
    once instead of once a slice: at 5,000 pods, 10 pages of several seconds each on a busy API
    server, every ~25 s.
    """
    follow = _PARKED.pop(_park_key(kube, path, query), None)
    if follow is None:
        return None
    if not follow.following(margin=0.5):  # its thread ends (or ended) at its limit, or failed
        follow.stop()
        return None
    follow.changed = changed
    changed.set()  # look at once: the objects may have changed between the runs
    return follow


def park(follow: Follow, grace: float = PARK_GRACE) -> bool:
    """Keep ``follow`` watching up to ``grace`` seconds more for the next module run of the same
    wait in this process (:func:`resume`); stop it instead when modules run in processes of their
    own (nothing would take it over) or its thread has ended. Returns whether it was parked."""
    if not IN_WORKER or not follow.following():
        follow.stop()
        return False
    follow.hold(grace)  # the run that set the earlier limit is ending
    old = _PARKED.pop(_park_key(follow.kube, follow.path, follow.query), None)
    if old is not None and old is not follow:
        old.stop()
    _PARKED[_park_key(follow.kube, follow.path, follow.query)] = follow
    return True


def stop_parked() -> None:
    """Stop every parked Follow (the end of a module run in the worker that will not go on)."""
    while _PARKED:
        _PARKED.popitem()[1].stop()


def wait_for_change(changed: threading.Event, seconds: float, spent: float = 0.0) -> None:
    """Sleep until ``changed`` is set or ``seconds`` pass, then clear it (read the objects after).

    ``spent``: the seconds the caller's last look at the objects took. A wait reads all N
    objects after a change, and N objects change N times or more while they roll out: woken at
    every change, it would do O(N^2) work and hold a core the cluster needs. So it sleeps at
    least ``PACE`` x ``spent`` from the start of this call (never past ``seconds``): at most a
    fifth of a core, however fast the changes come; the changes meanwhile are seen together."""
    began = time.monotonic()
    if seconds > 0:
        changed.wait(seconds)
        rest = min(seconds, PACE * spent) - (time.monotonic() - began)
        if rest > 0:
            time.sleep(rest)
    changed.clear()
