"""What the contract tests run against: real coordinators on PostgreSQL, started by the Go
test e2e/TestPythonClient, which hands them over in TWOPHASE_* environment variables."""

from __future__ import annotations

import os
import threading
import time
import unittest
import urllib.request
import uuid
from typing import Callable, Optional

import twophase


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise unittest.SkipTest(f"{name} is not set: run these tests through `go test -run TestPythonClient ./e2e/`")
    return value


def control(action: str) -> None:
    """Asks the Go test to act on the first coordinator: restart (SIGKILL, then start it
    again in the background), kill, start, lose-answers?n=N."""
    req = urllib.request.Request(env("TWOPHASE_CONTROL") + "/" + action, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(url_var: str = "TWOPHASE_URL", **kw) -> twophase.Coordinator:
    kw.setdefault("max_backoff", 0.5)
    return twophase.Coordinator(env(url_var), token=env("TWOPHASE_ADMIN_TOKEN"), **kw)


def eventually(what: str, fn: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)


class Trigger:
    """Opens a checkpoint of a job every interval seconds, in a thread, until stopped."""

    def __init__(self, coord: twophase.Coordinator, job: str, interval: float = 0.05, timeout_ms: Optional[int] = None) -> None:
        self.coord, self.job, self.interval, self.timeout_ms = coord, job, interval, timeout_ms
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Trigger":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)

    def _run(self) -> None:
        cancel = twophase.Cancel(self.stop)
        while not self.stop.is_set():
            try:
                self.coord.open_checkpoint(self.job, timeout_ms=self.timeout_ms, cancel=cancel)
            except (twophase.TooManyCheckpoints, twophase.Cancelled):
                pass
            self.stop.wait(self.interval)
