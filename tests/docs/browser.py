"""Headless Chromium for the site test: Debian's `chromium`, driven over the DevTools protocol.

The protocol runs over a pipe (--remote-debugging-pipe: Chromium reads commands on fd 3 and
writes answers on fd 4, each a JSON message ended by a NUL byte), so no websocket client and no
port is needed, and one browser loads every page.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def find_or_install_chromium() -> tuple[str | None, str]:
    """(path of chromium, '') or (None, why not). Installs Debian's package when root."""
    found = shutil.which("chromium")
    if found:
        return found, ""
    if os.geteuid() != 0:
        return None, "chromium is not installed and this test is not root to install it (apt-get install chromium)"
    if not shutil.which("apt-get"):
        return None, "chromium is not installed and there is no apt-get to install it"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "chromium"]  # as tested: with its recommended fonts
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        # an old or empty package list: fetch it once, then try again
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            return None, f"apt-get install chromium failed: {result.stderr.strip()[-500:]}"
    found = shutil.which("chromium")
    return (found, "") if found else (None, "apt-get installed chromium but it is not on PATH")


# --no-sandbox: Chromium refuses to run as root with its sandbox, and the test runs as root
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--hide-scrollbars", "--disable-background-networking", "--mute-audio"]


class Browser:
    """One headless Chromium and one tab, driven over the DevTools protocol on a pipe."""

    def __init__(self, chromium: str):
        self._profile = tempfile.TemporaryDirectory(prefix="bcd-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        # the ends chromium gets, moved above 4 so that putting them on 3 and 4 clobbers neither
        r, w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome_r, from_chrome_w))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._log = tempfile.TemporaryFile()
        # bash puts the pipe ends on fds 3 and 4 for chromium (no preexec_fn: the test's HTTP
        # server runs in a thread, and forking with threads must not run Python in the child)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{r} 4>&{w} {r}<&- {w}>&-', chromium, *FLAGS, "--remote-debugging-pipe",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, pass_fds=(r, w))
        os.close(r)
        os.close(w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Network.enable", session=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(f"chromium did not answer: {self.log()[-2000:]}")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited: {self.log()[-2000:]}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == self.session:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def load(self, url: str) -> list[tuple[str, int]]:
        """Open url and wait for its load event; (url, HTTP status) of everything it loaded."""
        self.events.clear()
        result = self.call("Page.navigate", session=True, url=url)
        if result.get("errorText"):
            raise RuntimeError(f"{url}: {result['errorText']}")
        self.wait_event("Page.loadEventFired")
        return [(e["params"]["response"]["url"], e["params"]["response"]["status"])
                for e in self.events if e.get("method") == "Network.responseReceived"]

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, url: str, dest: Path, width: int = 1280, height: int = 1600) -> None:
        """The page in a width x height window, scrolled to url's #anchor if it has one, as a PNG.

        Not `chromium --headless --screenshot`: given an #anchor, it photographs the page before
        painting it (a blank image); here the picture is taken after the load event.
        """
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.load(url)
        anchor = url.partition("#")[2]
        if anchor:
            self.eval(f"document.getElementById({json.dumps(anchor)}).scrollIntoView()")
        shot = self.call("Page.captureScreenshot", session=True, format="png")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(base64.b64decode(shot["data"]))

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._log.close()
        self._profile.cleanup()
