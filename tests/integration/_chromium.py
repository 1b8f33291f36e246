"""Open a page in headless Chromium and report what a person would see: console errors,
uncaught exceptions, failed loads, every request that left the file, DOM queries and a
full-page screenshot.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: file
descriptors 3 and 4, NUL-terminated JSON), which needs no websocket client, no free port and
no extra package, and hands over console messages as structured events rather than log lines
to parse (``--enable-logging`` output changes between Chromium releases).

As a script it saves a screenshot (how the README's picture of the report was made)::

    python tests/integration/_chromium.py reports/smoke/kill-rank/0/report.html docs/img/report.png 1460
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PageResult", "chromium_binary", "render"]

_BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_binary() -> str | None:
    for name in _BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    """console.error/assert calls, uncaught exceptions and browser log errors (a failed load)."""
    requests: list[str] = field(default_factory=list)
    """Every URL the page requested (the page itself included)."""
    values: dict[str, Any] = field(default_factory=dict)
    """Results of the ``evaluate`` expressions, by name."""
    load_s: float = 0.0
    """From navigation to the load event."""
    screenshot: Path | None = None


class _Pipe:
    def __init__(self, binary: str, profile: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # runs in the child: Chromium expects the pipe on fds 3 and 4
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
             "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed the DevTools pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            request["sessionId"] = session
        os.write(self._to_chrome, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result") or {}
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - it may already be gone; it is killed below anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass


def render(page: Path, evaluate: dict[str, str] | None = None, screenshot: Path | None = None,
           width: int = 1280, height: int | None = None, binary: str | None = None,
           timeout: float = 60.0) -> PageResult:
    """Load ``page`` (a local file), run each ``evaluate`` expression (by value), save a PNG
    of the whole page (or of its top ``height`` pixels) to ``screenshot``; Chromium is always
    stopped before this returns."""
    binary = binary or chromium_binary()
    if binary is None:
        raise FileNotFoundError("no chromium binary on PATH")
    result = PageResult()
    profile = tempfile.mkdtemp(prefix="tc-chromium-")
    pipe = _Pipe(binary, profile)
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.call(f"{domain}.enable", session=session)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
        started = time.monotonic()
        pipe.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        pipe.wait_for("Page.loadEventFired", timeout=timeout)
        result.load_s = time.monotonic() - started
        for name, expression in (evaluate or {}).items():
            answer = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                               session=session)
            if "exceptionDetails" in answer:
                raise RuntimeError(f"{name}: {answer['exceptionDetails'].get('text')}")
            result.values[name] = answer.get("result", {}).get("value")
        if screenshot is not None:
            scroll = pipe.call("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                                    "returnByValue": True}, session=session)
            full = int(scroll.get("result", {}).get("value") or 900)
            full = min(full, height) if height else full
            pipe.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": full, "deviceScaleFactor": 1, "mobile": False}, session=session)
            options: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
            if height:
                options["clip"] = {"x": 0, "y": 0, "width": width, "height": full, "scale": 1}
            shot = pipe.call("Page.captureScreenshot", options, session=session, timeout=timeout)
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            result.screenshot = screenshot
    finally:
        pipe.close()
        shutil.rmtree(profile, ignore_errors=True)
    for event in pipe.events:
        method, params = event.get("method"), event.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args") or [])
            result.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails") or {}
            result.console_errors.append(f"uncaught: {details.get('text')} "
                                         f"{(details.get('exception') or {}).get('description', '')}".rstrip())
        elif method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
            entry = params["entry"]
            result.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".rstrip())
        elif method == "Network.requestWillBeSent":
            result.requests.append(str((params.get("request") or {}).get("url")))
    return result


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python tests/integration/_chromium.py PAGE.html OUT.png [HEIGHT_PX]")
    outcome = render(Path(sys.argv[1]), screenshot=Path(sys.argv[2]),
                     height=int(sys.argv[3]) if len(sys.argv) == 4 else None)
    print(f"loaded in {outcome.load_s:.2f} s; console errors: {outcome.console_errors or 'none'}; "
          f"screenshot: {outcome.screenshot}")
