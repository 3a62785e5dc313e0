"""A real browser for the dashboard's tests: Debian's headless Chromium, driven by Selenium
through Debian's chromedriver (no browser download: both paths are given, and Selenium Manager
is told to stay offline), and `wait_until` something shows on its page."""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
PAGE_WAIT_S = 60
LARGE_PAGE_WAIT_S = 180
"""Not a speed limit (bench/systems/dashboard.py measures it): room for a loaded CI machine."""


@contextlib.contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Selenium driver of headless Chromium, quit (and its process group killed) after; the
    test is skipped, with a warning, where Chromium or chromedriver is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        message = (
            f"THE DASHBOARD WAS NOT TESTED IN A BROWSER: {', '.join(missing)} missing "
            "(apt-get install chromium chromium-driver; .ci/run installs them)"
        )
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-crash-reporter",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    # Its own process group: whatever the browser leaves behind is killed with it.
    service = Service(executable_path=CHROMEDRIVER, popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    group = service.process.pid
    try:
        yield driver
    finally:
        # Headless renderers outlive a driver that is not quit, and eat the machine's cores.
        try:
            driver.quit()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)


def wait_until(
    driver: Any, condition: Callable[[Any], Any], what: str, wait_s: float = PAGE_WAIT_S
) -> Any:
    """What `condition(driver)` returns once it is true; an AssertionError with the page's text
    if it is not within `wait_s`."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
        TimeoutException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    # The page re-renders while it loads: an element read between two renders is stale, which
    # only means "not yet", like one not there.
    ignored = (NoSuchElementException, StaleElementReferenceException)
    try:
        return WebDriverWait(driver, wait_s, poll_frequency=0.5, ignored_exceptions=ignored).until(
            condition
        )
    except TimeoutException:
        body = driver.find_element("tag name", "body").text[:2000]
        raise AssertionError(f"{what} did not show within {wait_s} s; the page:\n{body}") from None
