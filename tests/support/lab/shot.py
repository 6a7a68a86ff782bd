"""``python -m tests.support.lab.shot URL PNG``: the live page at URL in headless Chromium
(tests/support/browser.py), 1280 px wide, once its tiles are drawn, saved to PNG. The lab
runs it inside its client namespace (``ip netns exec``), where the exporter listens: what
``python -m tests.support.lab run --screenshot`` takes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.browser import DESKTOP, browser_session


def main(argv: list[str]) -> int:
    url, png = argv
    with browser_session() as browser, browser.open(url, width=DESKTOP) as tab:
        tab.page.wait_for_selector("#layers .tile", timeout=30_000)
        tab.page.screenshot(path=str(Path(png)), full_page=True)
        for problem in tab.problems:
            print(f"page: {problem}", file=sys.stderr)
        return 1 if tab.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
