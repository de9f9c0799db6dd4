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
    """Why no browser can be driven here (None: one can). Only the browser itself may be
    absent (a system package, `make system-deps`); playwright is a pinned dev dependency, so
    without it `headless_browser` fails instead of letting a test skip."""
    if not CHROMIUM.is_file():
        return f"no browser at {CHROMIUM} (make system-deps installs Debian's chromium)"
    return None


@contextlib.contextmanager
def headless_browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise RuntimeError('playwright is not installed: pip install -e ".[dev]" (constraints.txt '
                           "pins it)") from exc

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()
