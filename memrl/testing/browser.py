"""Debian's chromium, driven headless by playwright: the browser the tests of the MemRL page
and the screenshots in results/ use (playwright's own browser download is never used).

    with headless_browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def missing() -> str | None:
    """Why no browser can be driven here (None: one can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return 'playwright is not installed (pip install -e ".[dev]")'
    if not CHROMIUM.is_file():
        return f"no browser at {CHROMIUM} (make system-deps installs Debian's chromium)"
    return None


@contextlib.contextmanager
def headless_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()
