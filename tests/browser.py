"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol: enough to load
a page, type into it, read it back, list every request it made and take a screenshot.

``make setup`` installs the package where it can; :func:`chromium` skips the test
naming the package where it is missing.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.sync.client import ClientConnection, connect

from lambdaline.processes import stop_process


def chromium() -> str:
    """The browser's path, or the test is skipped saying what to install."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip(
            "no Chromium: `make setup` installs it as root, else `apt-get install chromium`"
        )
    return found


class Browser:
    """One headless Chromium with one page, its requests recorded."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900):
        self.process = subprocess.Popen(
            [
                chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "about:blank",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self._closing = contextlib.ExitStack()
        try:
            self.socket = self._closing.enter_context(self._attach(self._browser_url()))
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")
        self.call("Network.enable")
        self.call("Runtime.enable")
        # every page keeps what its Content-Security-Policy refused (csp_violations)
        self.call("Page.addScriptToEvaluateOnNewDocument", source=(
            "window.cspViolations = [];"
            "document.addEventListener('securitypolicyviolation',"
            " e => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));"
        ))  # fmt: skip

    def _browser_url(self) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            seen.append(line)
            if line.startswith("DevTools listening on "):
                return line.split(" on ", 1)[1].strip()
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError("Chromium did not start:\n" + "".join(seen))

    @staticmethod
    def _attach(browser_url: str) -> ClientConnection:
        """The first page target's own socket."""
        host = browser_url.split("/devtools/")[0].replace("ws://", "http://")
        targets = httpx2.get(f"{host}/json/list", timeout=10).json()
        [page] = [target for target in targets if target["type"] == "page"][:1]
        return connect(page["webSocketDebuggerUrl"], max_size=64 * 2**20)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """A DevTools command's result; events that arrive meanwhile are kept in order."""
        number = next(self._ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value (awaited if it is a promise)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, seconds: float, what: str) -> Any:
        """Evaluate until truthy; fail naming ``what`` after ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"waited {seconds:g} s for {what}")

    def csp_violations(self) -> list[str]:
        """What the page's Content-Security-Policy refused since it loaded."""
        found: list[str] = self.evaluate("window.cspViolations")
        return found

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", 30, f"{url} to load")

    def requests(self, keep: Callable[[str], bool] = lambda url: True) -> list[str]:
        """Every URL the page asked for so far, in order."""
        self.call("Runtime.evaluate", expression="0")  # collect the events sent so far
        return [
            event["params"]["request"]["url"]
            for event in self.events
            if event.get("method") == "Network.requestWillBeSent"
            and keep(event["params"]["request"]["url"])
        ]

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        if hasattr(self, "_closing"):
            self._closing.close()
        stop_process(self.process)  # type: ignore[arg-type]
