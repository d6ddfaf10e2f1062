"""Headless Chromium for the console's browser tests, driven by Selenium through the
ChromeDriver of the Debian packages: nothing is downloaded (Selenium Manager never runs: both
paths are given), nothing leaves loopback (no proxy, no background networking).

A machine without them fails the tests with what to install (``make test`` installs them)."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = ("apt-get install chromium chromium-driver (as root; `make test` runs it when they "
           "are missing)")
WIDTH = 1400
HEIGHT = 1000
WAIT_SECONDS = 15.0
"""The longest a test waits for a page (each one takes milliseconds)."""

_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--no-proxy-server", "--disable-extensions",
          "--hide-scrollbars", "--force-device-scale-factor=1", "--lang=en-US")


def _selenium() -> Any:
    try:
        import selenium.webdriver
    except ImportError:
        pytest.fail("the browser tests need Selenium: .venv/bin/pip install -r "
                    "requirements-dev.txt (or make test)", pytrace=False)
    return selenium.webdriver


@contextmanager
def chromium(width: int = WIDTH, height: int = HEIGHT) -> Iterator[Any]:
    """A headless Chromium (a Selenium WebDriver) with a fresh profile, quit afterwards."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(f"the browser tests need Chromium and ChromeDriver; missing: "
                    f"{', '.join(missing)}. Install them: {INSTALL}", pytrace=False)
    webdriver = _selenium()
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="pgdrain-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    # An alert stays open for the test to find (the default dismisses it and fails the next
    # command instead); the console's log is kept to tell a refused script from none.
    options.set_capability("unhandledPromptBehavior", "ignore")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=os.devnull)
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except Exception as exc:
        shutil.rmtree(profile, ignore_errors=True)
        pytest.fail(f"Chromium ({CHROMIUM}) did not start through ChromeDriver "
                    f"({CHROMEDRIVER}): {exc}. Both come from {INSTALL}; they must be the "
                    f"same version", pytrace=False)
    driver.set_page_load_timeout(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def full_page_screenshot(driver: Any, path: Path) -> None:
    """A PNG of the whole page, as wide as the window, however long the page is."""
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    width = metrics["cssLayoutViewport"]["clientWidth"]
    height = max(metrics["cssContentSize"]["height"], metrics["cssLayoutViewport"]["clientHeight"])
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
