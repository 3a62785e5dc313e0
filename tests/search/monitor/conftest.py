"""The dashboard tests' fixtures (the browser's pieces are in `tests.helpers.browser`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.browser import headless_chromium


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium driven by Selenium; the test is skipped where it is not installed."""
    with headless_chromium() as driver:
        yield driver
