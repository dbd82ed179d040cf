"""A headless Chromium page for the tests that look at what ifsynth serves or writes (the review page, the
report). Debian's chromium is driven by Playwright; Playwright's own browser download is never used. Without
chromium (`make test` installs it where it can: as root, with apt), these tests are skipped, saying so."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# a closed network refuses Chromium's background connections by the dozen: it makes none
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture
def browser_page() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the browser tests need it")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=FLAGS, headless=True, viewport={"width": 1280, "height": 900}
        )
        try:
            yield context.new_page()
        finally:
            context.close()
