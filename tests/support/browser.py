"""Headless Chromium for the tests: Debian's ``/usr/bin/chromium`` driven by Playwright.

    with browser_session() as browser:
        with browser.open("http://127.0.0.1:9400/", width=1280) as tab:
            tab.page.wait_for_selector("#diagnosis")
            tab.screenshot("live-page-1280")
            assert not tab.problems

Playwright comes from PyPI (the ``test`` extra); its own browser download is never used:
``executable_path`` points at the system Chromium (``LLM_EXPORTER_CHROMIUM`` overrides it).
Missing either, :func:`require_browser` skips the test, or fails it under ``CI=true``.

Keyword options of :meth:`BrowserSession.open` go to Playwright's ``new_context`` (e.g.
``offline=True`` to prove a page or a saved report needs no network; ``file://`` URLs work).

A tab collects every console error, uncaught page error and failed request (``problems``),
so a test asserts the page loaded cleanly in one line. Screenshots are PNG files under
``artifacts/screenshots/`` at the repository root (gitignored; CI keeps the folder as an
artifact), or under ``$LLM_EXPORTER_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("LLM_EXPORTER_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(os.environ.get("LLM_EXPORTER_SCREENSHOTS", ROOT / "artifacts" / "screenshots"))
#: A phone's CSS viewport (iPhone 12 to 15) and a laptop's.
PHONE, DESKTOP = 390, 1280


def require_browser() -> None:
    """Skip (or, under CI=true, fail) the calling test when Playwright or Chromium is absent."""
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[test]')")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if missing:
        message = "browser test needs " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)


@dataclass
class Tab:
    """One page at one viewport, and what went wrong while it was open."""

    page: Page
    problems: list[str] = field(default_factory=list)

    def screenshot(self, name: str, full_page: bool = True) -> Path:
        """Save ``name``.png under :data:`SCREENSHOTS`; its path."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def horizontal_overflow(self) -> int:
        """CSS pixels the document is wider than the viewport (0: nothing to scroll)."""
        return int(self.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"))


@dataclass
class BrowserSession:
    browser: Browser

    @contextmanager
    def open(self, url: str, width: int = DESKTOP, height: int | None = None,
             **context: Any) -> Iterator[Tab]:
        """``url`` in a fresh context ``width`` CSS pixels wide (a phone width also gets a
        mobile, touch viewport); closed on exit, pass or fail."""
        mobile = width <= PHONE + 100
        ctx = self.browser.new_context(
            viewport={"width": width, "height": height or (844 if mobile else 900)},
            is_mobile=mobile, has_touch=mobile, device_scale_factor=1, **context)
        try:
            page = ctx.new_page()
            tab = Tab(page)
            page.on("console", lambda m: tab.problems.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: tab.problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: tab.problems.append(
                f"request failed: {r.url} ({r.failure})"))
            page.on("response", lambda r: tab.problems.append(f"HTTP {r.status}: {r.url}")
                    if r.status >= 400 else None)
            page.goto(url, wait_until="load")
            yield tab
        finally:
            ctx.close()


@contextmanager
def browser_session() -> Iterator[BrowserSession]:
    """A headless Chromium for the block; :func:`require_browser` first."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # --no-sandbox: the tests run as root in CI, where Chromium refuses its sandbox.
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            yield BrowserSession(browser)
        finally:
            browser.close()
