"""Debian's chromium driven by Playwright (imported as `browser.chromium`); never `playwright install`."""

import contextlib
import os

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed (apt-get install chromium)"
)


@contextlib.contextmanager
def chromium_page(width=900, height=700):
    """One page in a fresh headless browser, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def screenshot(page, folder, name):
    """Save a full-page screenshot to folder/name for a human to look at (the path is printed:
    run pytest -s to see it); a near-empty file means the page did not render."""
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    assert path.stat().st_size > 10_000
    return path
