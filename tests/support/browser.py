"""Headless Chromium for the browser tests: the system's /usr/bin/chromium (Debian package
``chromium``) driven by Playwright, no browser download.

    with open_page(url, "report") as loaded:
        loaded.page.locator("h1").inner_text()
    assert not loaded.problems()

Console errors, page errors and failed requests are collected while the page is open; a
full-page PNG is saved as ``<name>.png`` under ``artifacts/screenshots/`` (or
``$LLM_EXPORTER_SCREENSHOTS``) when the block ends, for CI to keep as artifacts. Without
Chromium or Playwright the test is skipped, except under CI=true, where it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS_ENV = "LLM_EXPORTER_SCREENSHOTS"


def screenshot_dir() -> Path:
    return Path(os.environ.get(SCREENSHOTS_ENV) or ROOT / "artifacts" / "screenshots")


def require_browser() -> None:
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "playwright is not installed (pip install -e '.[test]')"
    if reason is None and not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class Loaded:
    page: Any
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    def problems(self) -> list[str]:
        return [*self.console_errors, *self.failed_requests]


@contextmanager
def open_page(url: str, name: str, width: int = 1280, height: int = 900) -> Iterator[Loaded]:
    """``url`` loaded (network idle) in a fresh headless Chromium page."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            loaded = Loaded(page)
            page.on("console", lambda m: loaded.console_errors.append(f"console: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: loaded.console_errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: loaded.failed_requests.append(
                f"request failed: {r.url[:120]} ({r.failure})"))
            page.goto(url, wait_until="networkidle")
            yield loaded
            out = screenshot_dir()
            out.mkdir(parents=True, exist_ok=True)
            loaded.screenshot = out / f"{name}.png"
            page.screenshot(path=str(loaded.screenshot), full_page=True)
        finally:
            browser.close()
